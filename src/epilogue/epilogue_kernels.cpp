// The Highway fast path of the `fp8-scaled` epilogue (epilogue_kernels.hpp), compiled once per
// Highway target (the `foreach_target.h` pattern) and selected at run time. Each lane is one output;
// the steps are those of `formula::apply<EpilogueKind::vllm_triton>` (include/qconform/
// epilogue_formula.hpp) without a bias, which the tail of each row runs itself:
//   1. t = rn32(d * sa), then u = rn32(t * sw): two IEEE binary32 multiplies, round to nearest even
//      (the lanes' `Mul`; this file, like the project, is compiled with -ffp-contract=off, and
//      nothing here sets flush-to-zero, so subnormal products stay subnormal);
//   2. NaN (magnitude bits above fp32's inf): the top half with the quiet bit set, as `f32_to_bf16`;
//   3. everything else: round the low kDrop = 16 bits to nearest even, (bits + 0x7fff + lsb) >> 16,
//      which carries into the exponent and to infinity exactly as `f32_to_bf16` does.
// Steps 2 and 3 are the vector form of the numeric core's `encode<kBf16>` (include/qconform/
// numerics.hpp, step 4: `round_shift` of the magnitude by the mantissa difference), every constant
// taken from the kFp32 / kBf16 rows; tests/unit/test_numerics_lanes.cpp runs these lanes on every
// fp32 pattern against the scalar formula (the core) bit for bit.

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "epilogue/epilogue_kernels.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep

#include <hwy/highway.h>

#include <cstdint>

#include "epilogue/epilogue_kernels.hpp"
#include "qconform/epilogue_formula.hpp"

HWY_BEFORE_NAMESPACE();
namespace qc::epilogue_detail {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

void TritonF32Rows(const float* HWY_RESTRICT d, const float* HWY_RESTRICT sa, const float* HWY_RESTRICT sw,
                   int64_t rows, int64_t N, uint16_t* HWY_RESTRICT y) {
  const hn::ScalableTag<float> df;
  const hn::RebindToSigned<decltype(df)> di;
  const hn::Rebind<uint16_t, decltype(di)> du16;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df));
  constexpr int kDrop = kFp32.mantissa_bits - kBf16.mantissa_bits;  // 16: bf16 is fp32's top half
  const auto magnitude = hn::Set(di, static_cast<int32_t>(kFp32.magnitude_mask()));
  const auto infinity = hn::Set(di, static_cast<int32_t>(kFp32.inf_bits()));
  const auto round_bias = hn::Set(di, (1 << (kDrop - 1)) - 1);  // half - 1: the tie goes to `lsb`
  const auto one = hn::Set(di, 1);
  const auto quiet = hn::Set(di, 1 << (kBf16.mantissa_bits - 1));
  for (int64_t m = 0; m < rows; ++m) {
    const float* dr = d + m * N;
    uint16_t* yr = y + m * N;
    const auto s = hn::Set(df, sa[m]);
    int64_t n = 0;
    for (; n + lanes <= N; n += lanes) {
      const auto u = hn::BitCast(di, hn::Mul(hn::Mul(hn::LoadU(df, dr + n), s), hn::LoadU(df, sw + n)));  // step 1
      const auto is_nan = hn::Gt(hn::And(u, magnitude), infinity);
      const auto top = hn::ShiftRight<kDrop>(hn::BitCast(hn::RebindToUnsigned<decltype(di)>(), u));
      const auto nan_bits = hn::Or(hn::BitCast(di, top), quiet);  // step 2
      // Step 3 in unsigned arithmetic (a negative pattern is a large unsigned one); only a NaN can
      // wrap past 2^32 here, and NaN lanes take `nan_bits`.
      const auto lsb = hn::And(hn::BitCast(di, top), one);
      const auto sum = hn::Add(hn::Add(u, round_bias), lsb);
      const auto rounded = hn::BitCast(di, hn::ShiftRight<kDrop>(hn::BitCast(hn::RebindToUnsigned<decltype(di)>(), sum)));
      hn::StoreU(hn::DemoteTo(du16, hn::IfThenElse(is_nan, nan_bits, rounded)), du16, yr + n);
    }
    for (; n < N; ++n) {
      yr[n] = formula::apply<EpilogueKind::vllm_triton>(dr[n], sa[m], sw[n], BiasMode::refuse, false, 0.0f);
    }
  }
}

int64_t TargetOf() { return HWY_TARGET; }

}  // namespace HWY_NAMESPACE
}  // namespace qc::epilogue_detail
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace qc::epilogue_detail {
HWY_EXPORT(TritonF32Rows);
HWY_EXPORT(TargetOf);

void triton_f32_rows(const float* d, const float* sa, const float* sw, int64_t rows, int64_t N, uint16_t* y) {
  HWY_DYNAMIC_DISPATCH(TritonF32Rows)(d, sa, sw, rows, N, y);
}

const char* epilogue_target() { return hwy::TargetName(HWY_DYNAMIC_DISPATCH(TargetOf)()); }
}  // namespace qc::epilogue_detail
#endif
