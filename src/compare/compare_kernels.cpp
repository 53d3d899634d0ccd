// The Highway fast path of `compare_bf16_rows` (compare_kernels.hpp), compiled once per Highway
// target (the `foreach_target.h` pattern) and selected at run time. The vector form of the numeric
// core's bf16 row (include/qconform/numerics.hpp: `classify<kBf16>`, `is_finite`, `ordered`), every
// constant taken from `kBf16`: a bf16 bit pattern `x` with magnitude bits `m = x & 0x7fff` is NaN when
// m > 0x7f80 (inf), infinite when m == 0x7f80, subnormal when 0 < m < 0x0080, finite when m < 0x7f80.
// Magnitudes fit int16 lanes, so every comparison is a signed 16-bit one. tests/unit/
// test_numerics_lanes.cpp runs the distance lanes on every pair of bf16 patterns against the core.
//
// Most pairs of a verify run are equal, and an equal pair only adds to counters; the lanes here do
// that, and hand every differing pair (ulp distance, relative error, the "first" list) to the scalar
// code by index.

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "compare/compare_kernels.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep

#include <hwy/highway.h>

#include <algorithm>
#include <cstdint>

#include "compare/compare_kernels.hpp"
#include "qconform/numerics.hpp"

HWY_BEFORE_NAMESPACE();
namespace qc::compare_detail {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

int64_t ScanBf16Pairs(const uint16_t* HWY_RESTRICT a, const uint16_t* HWY_RESTRICT b, int64_t n,
                      uint16_t near_zero_bits, PairCounts& c, int32_t* HWY_RESTRICT differ, int64_t& differ_count) {
  const hn::ScalableTag<int16_t> d;
  const hn::RebindToUnsigned<decltype(d)> du;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  const auto magnitude = hn::Set(d, static_cast<int16_t>(kBf16.magnitude_mask()));
  const auto infinity = hn::Set(d, static_cast<int16_t>(kBf16.inf_bits()));
  const auto min_normal = hn::Set(d, static_cast<int16_t>(1 << kBf16.mantissa_bits));
  const auto zero = hn::Zero(d);
  const auto near_limit = hn::Set(d, static_cast<int16_t>(near_zero_bits));
  int64_t nan_a = 0, nan_b = 0, inf_a = 0, inf_b = 0, sub_a = 0, sub_b = 0, finite_pairs = 0;
  int64_t equal_finite = 0, equal_near_zero = 0, k = 0;
  int64_t i = 0;
  for (; i + lanes <= n; i += lanes) {
    const auto x = hn::BitCast(d, hn::LoadU(du, a + i));
    const auto y = hn::BitCast(d, hn::LoadU(du, b + i));
    const auto mx = hn::And(x, magnitude), my = hn::And(y, magnitude);
    nan_a += static_cast<int64_t>(hn::CountTrue(d, hn::Gt(mx, infinity)));
    nan_b += static_cast<int64_t>(hn::CountTrue(d, hn::Gt(my, infinity)));
    inf_a += static_cast<int64_t>(hn::CountTrue(d, hn::Eq(mx, infinity)));
    inf_b += static_cast<int64_t>(hn::CountTrue(d, hn::Eq(my, infinity)));
    sub_a += static_cast<int64_t>(hn::CountTrue(d, hn::And(hn::Lt(mx, min_normal), hn::Ne(mx, zero))));
    sub_b += static_cast<int64_t>(hn::CountTrue(d, hn::And(hn::Lt(my, min_normal), hn::Ne(my, zero))));
    const auto finite_a = hn::Lt(mx, infinity);
    finite_pairs += static_cast<int64_t>(hn::CountTrue(d, hn::And(finite_a, hn::Lt(my, infinity))));
    const auto equal = hn::Eq(x, y);
    const auto equal_fin = hn::And(equal, finite_a);  // equal bits: b is finite exactly when a is
    equal_finite += static_cast<int64_t>(hn::CountTrue(d, equal_fin));
    const auto near = hn::Or(hn::Lt(mx, near_limit), hn::Eq(mx, zero));
    equal_near_zero += static_cast<int64_t>(hn::CountTrue(d, hn::And(equal_fin, near)));
    if (hn::AllTrue(d, equal)) continue;
    // The differing lanes, in lane order, from the mask's bits (bit j of byte j / 8 is lane j).
    uint8_t bits[(HWY_MAX_BYTES / 2 + 7) / 8 + 8] = {};
    hn::StoreMaskBits(d, hn::Not(equal), bits);
    for (int64_t byte = 0; byte * 8 < lanes; ++byte) {
      for (unsigned v = bits[byte]; v != 0; v &= v - 1) {
        differ[k++] = static_cast<int32_t>(i + byte * 8 + __builtin_ctz(v));
      }
    }
  }
  c.nan[0] += nan_a, c.nan[1] += nan_b, c.inf[0] += inf_a, c.inf[1] += inf_b;
  c.subnormal[0] += sub_a, c.subnormal[1] += sub_b;
  c.nonfinite_pairs += i - finite_pairs;
  c.equal_finite += equal_finite, c.equal_near_zero += equal_near_zero;
  differ_count = k;
  return i;
}

// A mask of int32 lanes as the mask of the fp64 lanes of the same count.
template <class D64, class DI, class M>
HWY_INLINE auto WidenMask(D64 d64, DI di, M m) {
  const hn::Rebind<int64_t, D64> di64;
  return hn::MaskFromVec(hn::BitCast(d64, hn::PromoteTo(di64, hn::VecFromMask(di, m))));
}

// Each lane one differing pair, in fp64 lanes for the relative error (every value is exact in
// fp64, and a lane's subtraction and division round as the scalar code's do: one IEEE binary64
// operation each) and int32 lanes of the same count for the ordered distance (`bf16_ordered`:
// magnitude, negated for a set sign bit).
int64_t ScanDifferingPairs(const uint16_t* HWY_RESTRICT x, const uint16_t* HWY_RESTRICT y, int64_t n,
                           uint16_t near_zero_bits, DifferCounts& c, uint16_t* HWY_RESTRICT ulp) {
  const hn::ScalableTag<double> d64;
  const hn::Rebind<int32_t, decltype(d64)> di;
  const hn::Rebind<uint32_t, decltype(d64)> du;
  const hn::Rebind<float, decltype(d64)> df;
  const hn::Rebind<uint16_t, decltype(d64)> du16;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d64));
  const auto magnitude = hn::Set(di, static_cast<int32_t>(kBf16.magnitude_mask()));
  const auto infinity = hn::Set(di, static_cast<int32_t>(kBf16.inf_bits()));
  const auto sign = hn::Set(di, static_cast<int32_t>(kBf16.sign_bit()));
  const auto zero = hn::Zero(di), near_limit = hn::Set(di, static_cast<int32_t>(near_zero_bits));
  const auto no_ulp = hn::Set(di, kNoUlp);
  auto max_ulp = hn::Zero(di);
  auto max_rel = hn::Zero(d64), near_max_abs = hn::Zero(d64);
  int64_t finite_pairs = 0, near_zero = 0, signed_zero = 0;
  int64_t i = 0;
  for (; i + lanes <= n; i += lanes) {
    const auto bx = hn::PromoteTo(du, hn::LoadU(du16, x + i)), by = hn::PromoteTo(du, hn::LoadU(du16, y + i));
    const auto ix = hn::BitCast(di, bx), iy = hn::BitCast(di, by);
    const auto mx = hn::And(ix, magnitude), my = hn::And(iy, magnitude);
    const auto finite = hn::And(hn::Lt(mx, infinity), hn::Lt(my, infinity));
    const auto near = hn::And(finite, hn::Or(hn::Lt(mx, near_limit), hn::Eq(mx, zero)));
    finite_pairs += static_cast<int64_t>(hn::CountTrue(di, finite));
    near_zero += static_cast<int64_t>(hn::CountTrue(di, near));
    signed_zero += static_cast<int64_t>(hn::CountTrue(di, hn::And(hn::Eq(mx, zero), hn::Eq(my, zero))));
    // The ordered distance of the finite pairs.
    const auto ox = hn::IfThenElse(hn::Eq(hn::And(ix, sign), zero), mx, hn::Neg(mx));
    const auto oy = hn::IfThenElse(hn::Eq(hn::And(iy, sign), zero), my, hn::Neg(my));
    const auto dist = hn::IfThenElse(finite, hn::Abs(hn::Sub(ox, oy)), no_ulp);
    max_ulp = hn::Max(max_ulp, hn::IfThenElseZero(finite, dist));
    hn::StoreU(hn::DemoteTo(du16, dist), du16, ulp + i);
    // Values: bf16 is the top half of an fp32, exactly widened to fp64.
    const auto xv = hn::PromoteTo(d64, hn::BitCast(df, hn::ShiftLeft<32 - kBf16.bits>(bx)));
    const auto yv = hn::PromoteTo(d64, hn::BitCast(df, hn::ShiftLeft<32 - kBf16.bits>(by)));
    const auto abs_diff = hn::Abs(hn::Sub(xv, yv));
    const auto near64 = WidenMask(d64, di, near), far64 = WidenMask(d64, di, hn::AndNot(near, finite));
    near_max_abs = hn::Max(near_max_abs, hn::IfThenElseZero(near64, abs_diff));
    // Far lanes have |x| > 0; the others divide by a placeholder 1 and are dropped.
    const auto denominator = hn::IfThenElse(far64, hn::Abs(xv), hn::Set(d64, 1.0));
    max_rel = hn::Max(max_rel, hn::IfThenElseZero(far64, hn::Div(abs_diff, denominator)));
  }
  c.finite_pairs += finite_pairs;
  c.near_zero += near_zero, c.near_zero_diff += near_zero;
  c.nonfinite_diff += i - finite_pairs;
  c.signed_zero_diff += signed_zero;
  if (i > 0) {
    c.max_ulp = std::max<int64_t>(c.max_ulp, hn::GetLane(hn::MaxOfLanes(di, max_ulp)));
    c.max_rel = std::max(c.max_rel, hn::GetLane(hn::MaxOfLanes(d64, max_rel)));
    c.near_zero_max_abs = std::max(c.near_zero_max_abs, hn::GetLane(hn::MaxOfLanes(d64, near_max_abs)));
  }
  return i;
}

int64_t TargetOf() { return HWY_TARGET; }

}  // namespace HWY_NAMESPACE
}  // namespace qc::compare_detail
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace qc::compare_detail {
HWY_EXPORT(ScanBf16Pairs);
HWY_EXPORT(ScanDifferingPairs);
HWY_EXPORT(TargetOf);

int64_t scan_bf16_pairs(const uint16_t* a, const uint16_t* b, int64_t n, uint16_t near_zero_bits, PairCounts& c,
                        int32_t* differ, int64_t& differ_count) {
  return HWY_DYNAMIC_DISPATCH(ScanBf16Pairs)(a, b, n, near_zero_bits, c, differ, differ_count);
}

int64_t scan_differing_pairs(const uint16_t* x, const uint16_t* y, int64_t n, uint16_t near_zero_bits,
                             DifferCounts& c, uint16_t* ulp) {
  return HWY_DYNAMIC_DISPATCH(ScanDifferingPairs)(x, y, n, near_zero_bits, c, ulp);
}

const char* compare_target() { return hwy::TargetName(HWY_DYNAMIC_DISPATCH(TargetOf)()); }
}  // namespace qc::compare_detail
#endif
