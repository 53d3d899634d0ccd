// The Highway fast path of verify's FP8 element pass (element_pass_kernels.hpp), compiled once per
// Highway target (the `foreach_target.h` pattern) and selected at run time. Written from the steps of
// `pass_fp8_rows_reference` (element_pass.cpp): each lane is one output element, in 32-bit lanes
// (bf16 outputs widened, fp32 accumulators compared as bit patterns, so -0 != +0 and a NaN equals
// only its own bits, as in the reference). The lanes count; an element that a "first" list still
// wants stops the scan in front of its vector, and the scalar reference takes it from there.

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "checks/element_pass_kernels.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep

#include <hwy/highway.h>

#include <cstdint>

#include "checks/element_pass_kernels.hpp"

HWY_BEFORE_NAMESPACE();
namespace qc::element_detail {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// `kA`, `kB`: the arm is modelled; `kPow2`: count power-of-two violations (both modelled only).
template <bool kA, bool kB, bool kPow2>
int64_t ScanOutputs(const Fp8OutputScan& s, int64_t n, Fp8OutputCounts& c) {
  constexpr bool kBoth = kA && kB;
  const hn::ScalableTag<uint32_t> du;
  const hn::Rebind<uint16_t, decltype(du)> du16;
  const hn::Rebind<float, decltype(du)> df;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(du));
  const auto load16 = [&](const uint16_t* p, int64_t i) HWY_ATTR { return hn::PromoteTo(du, hn::LoadU(du16, p + i)); };
  const auto load32 = [&](const float* p, int64_t i) HWY_ATTR { return hn::BitCast(du, hn::LoadU(df, p + i)); };
  const auto none = hn::FirstN(du, 0);
  int64_t off_a = 0, off_b = 0, predicted = 0, mispredicted = 0, acc_differ = 0, violations = 0;
  int64_t i = 0;
  for (; i + lanes <= n; i += lanes) {
    const auto got_a = load16(s.got[0], i), got_b = load16(s.got[1], i);
    auto want_a = got_a, want_b = got_b;  // unmodelled: compared with nothing
    if constexpr (kA) want_a = load16(s.want[0], i);
    if constexpr (kB) want_b = load16(s.want[1], i);
    const auto a_off = kA ? hn::Ne(want_a, got_a) : none, b_off = kB ? hn::Ne(want_b, got_b) : none;
    const auto pred = kBoth ? hn::Ne(want_a, want_b) : none, observed = kBoth ? hn::Ne(got_a, got_b) : none;
    const auto differ = kBoth ? hn::Ne(load32(s.d[0], i), load32(s.d[1], i)) : none;
    const auto violation = kPow2 ? hn::AndNot(differ, observed) : none;  // observed, the accumulators equal
    const auto listed = hn::Or(s.list_models ? hn::Or(a_off, b_off) : none, s.list_pow2 ? violation : none);
    if (!hn::AllFalse(du, listed)) break;  // the reference steps take this vector, element by element
    off_a += static_cast<int64_t>(hn::CountTrue(du, a_off));
    off_b += static_cast<int64_t>(hn::CountTrue(du, b_off));
    if constexpr (kBoth) {
      predicted += static_cast<int64_t>(hn::CountTrue(du, pred));
      mispredicted += static_cast<int64_t>(hn::CountTrue(du, hn::Xor(pred, observed)));
      acc_differ += static_cast<int64_t>(hn::CountTrue(du, differ));
      if constexpr (kPow2) violations += static_cast<int64_t>(hn::CountTrue(du, violation));
    }
  }
  c.formula_mismatch[0] += off_a, c.formula_mismatch[1] += off_b;
  c.predicted_diff += predicted, c.predicted_vs_observed += mispredicted;
  c.model_acc_diff += acc_differ, c.pow2_violations += violations;
  return i;
}

int64_t ScanFp8Outputs(const Fp8OutputScan& s, int64_t n, Fp8OutputCounts& c) {
  const bool a = s.want[0] != nullptr, b = s.want[1] != nullptr;
  if (a && b) return s.pow2 ? ScanOutputs<true, true, true>(s, n, c) : ScanOutputs<true, true, false>(s, n, c);
  if (a) return ScanOutputs<true, false, false>(s, n, c);
  if (b) return ScanOutputs<false, true, false>(s, n, c);
  return ScanOutputs<false, false, false>(s, n, c);
}

int64_t ScanAccumulators(const float* const got[2], const float* const want[2], int64_t n, bool list,
                         int64_t mismatch[2]) {
  const hn::ScalableTag<uint32_t> du;
  const hn::Rebind<float, decltype(du)> df;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(du));
  const bool has[2] = {got[0] != nullptr, got[1] != nullptr};
  int64_t off[2] = {0, 0};
  int64_t i = 0;
  for (; i + lanes <= n; i += lanes) {
    int64_t here[2] = {0, 0};
    for (int s = 0; s < 2; ++s) {
      if (!has[s]) continue;
      const auto x = hn::BitCast(du, hn::LoadU(df, got[s] + i)), y = hn::BitCast(du, hn::LoadU(df, want[s] + i));
      here[s] = static_cast<int64_t>(hn::CountTrue(du, hn::Ne(x, y)));
    }
    if (list && here[0] + here[1] > 0) break;  // the reference steps list these
    off[0] += here[0], off[1] += here[1];
  }
  mismatch[0] += off[0], mismatch[1] += off[1];
  return i;
}

int64_t TargetOf() { return HWY_TARGET; }

}  // namespace HWY_NAMESPACE
}  // namespace qc::element_detail
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace qc::element_detail {
HWY_EXPORT(ScanFp8Outputs);
HWY_EXPORT(ScanAccumulators);
HWY_EXPORT(TargetOf);

int64_t scan_fp8_outputs(const Fp8OutputScan& s, int64_t n, Fp8OutputCounts& c) {
  return HWY_DYNAMIC_DISPATCH(ScanFp8Outputs)(s, n, c);
}

int64_t scan_accumulators(const float* const got[2], const float* const want[2], int64_t n, bool list,
                          int64_t mismatch[2]) {
  return HWY_DYNAMIC_DISPATCH(ScanAccumulators)(got, want, n, list, mismatch);
}

const char* element_pass_target() { return hwy::TargetName(HWY_DYNAMIC_DISPATCH(TargetOf)()); }
}  // namespace qc::element_detail
#endif
