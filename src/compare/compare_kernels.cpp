// The Highway fast path of `compare_bf16_rows` (compare_kernels.hpp), compiled once per Highway
// target (the `foreach_target.h` pattern) and selected at run time. Written from the definitions in
// include/qconform/numerics.hpp (`classify_bf16`, `bf16_is_finite`) and compare.cpp: a bf16 bit
// pattern `x` with magnitude bits `m = x & 0x7fff` is NaN when m > 0x7f80, infinite when
// m == 0x7f80, subnormal when 0 < m < 0x0080, finite when m < 0x7f80. Magnitudes fit int16 lanes, so
// every comparison is a signed 16-bit one.
//
// Most pairs of a verify run are equal, and an equal pair only adds to counters; the lanes here do
// that, and hand every differing pair (ulp distance, relative error, the "first" list) to the scalar
// code by index.

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "compare/compare_kernels.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep

#include <hwy/highway.h>

#include <cstdint>

#include "compare/compare_kernels.hpp"

HWY_BEFORE_NAMESPACE();
namespace qc::compare_detail {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

int64_t ScanBf16Pairs(const uint16_t* HWY_RESTRICT a, const uint16_t* HWY_RESTRICT b, int64_t n,
                      uint16_t near_zero_bits, PairCounts& c, int32_t* HWY_RESTRICT differ, int64_t& differ_count) {
  const hn::ScalableTag<int16_t> d;
  const hn::RebindToUnsigned<decltype(d)> du;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  const auto magnitude = hn::Set(d, 0x7fff);
  const auto infinity = hn::Set(d, 0x7f80);
  const auto min_normal = hn::Set(d, 0x0080);
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

int64_t TargetOf() { return HWY_TARGET; }

}  // namespace HWY_NAMESPACE
}  // namespace qc::compare_detail
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace qc::compare_detail {
HWY_EXPORT(ScanBf16Pairs);
HWY_EXPORT(TargetOf);

int64_t scan_bf16_pairs(const uint16_t* a, const uint16_t* b, int64_t n, uint16_t near_zero_bits, PairCounts& c,
                        int32_t* differ, int64_t& differ_count) {
  return HWY_DYNAMIC_DISPATCH(ScanBf16Pairs)(a, b, n, near_zero_bits, c, differ, differ_count);
}

const char* compare_target() { return hwy::TargetName(HWY_DYNAMIC_DISPATCH(TargetOf)()); }
}  // namespace qc::compare_detail
#endif
