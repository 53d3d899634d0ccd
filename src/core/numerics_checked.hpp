// The checked host wrappers of the numeric core (include/qconform/numerics.hpp): the functions whose
// preconditions are worth an always-on check at a boundary, with a `qc::Error` naming what was
// found. The core itself states preconditions and checks nothing (it is device code, without fmt or
// exceptions); hot loops call the core and `QC_DCHECK` their precondition at the call site.
#pragma once

#include <cmath>
#include <cstdint>

#include "qconform/error.hpp"
#include "qconform/numerics.hpp"

namespace qc {

// `bf16_ordered_distance` with its precondition checked (QC_CHECK, an internal error): both
// operands finite. Callers sort out NaN and inf first, so that a NaN can never pass a tolerance.
constexpr uint32_t bf16_ulp_distance(uint16_t a, uint16_t b) {
  QC_CHECK(bf16_is_finite(a) && bf16_is_finite(b),
           "bf16_ulp_distance needs finite operands, got 0x{:04x} and 0x{:04x}", a, b);
  return bf16_ordered_distance(a, b);
}

// ------------------------------------------------------------------------------------------------
// Power-of-two rounding of a positive finite scale
// ------------------------------------------------------------------------------------------------

namespace detail {
// s = sig * 2^q exactly (the core's `unpack`), with sig having `width` significant bits; e =
// floor(log2 s).
struct Pow2Split {
  uint64_t sig;
  int width;
  int e;
};
constexpr Pow2Split split_positive_scale(float s, const char* flavour) {
  QC_INPUT(f32_is_finite(s) && s > 0.0f,
           "{}: a scale must be positive and finite, found {} (bits 0x{:08x})", flavour, s, f32_bits(s));
  const Unpacked p = unpack<kFp32>(f32_bits(s));
  const int width = significant_bits(p.sig);
  return {p.sig, width, p.exp + width - 1};
}
constexpr float pow2_or_overflow(int e, float s, const char* flavour) {
  QC_INPUT(e <= 127, "{}: scale {} (bits 0x{:08x}) rounds to 2^128, beyond fp32", flavour, s, f32_bits(s));
  return pow2_f32(e);
}
}  // namespace detail

// Both take a positive finite fp32 (subnormals allowed); anything else, and a scale that would
// round to 2^128, is a QC_INPUT error.
//
// Nearest power of two in log2: 2^e for s in [2^e, sqrt(2)*2^e], 2^(e+1) above. The threshold is
// irrational, so there is no tie; the comparison m > sqrt(2) (m = s / 2^e) is done exactly as
// sig^2 > 2^(2*width - 1) in integers. THE PROBE USES THIS FLAVOUR: a scale rounding perturbs
// the model multiplicatively, and nearest-in-log2 bounds the ratio by sqrt(2) both ways.
constexpr float pow2_nearest_log2(float s) {
  const detail::Pow2Split p = detail::split_positive_scale(s, "pow2_nearest_log2");
  const bool up = p.sig * p.sig > (uint64_t{1} << (2 * p.width - 1));
  return detail::pow2_or_overflow(up ? p.e + 1 : p.e, s, "pow2_nearest_log2");
}

// Nearest power of two in value: 2^e for s < 1.5*2^e, 2^(e+1) for s >= 1.5*2^e (the midpoint
// 1.5*2^e is a tie and rounds up). Compared exactly as 2*sig >= 3*2^(width-1).
constexpr float pow2_nearest_value(float s) {
  const detail::Pow2Split p = detail::split_positive_scale(s, "pow2_nearest_value");
  const bool up = 2 * p.sig >= 3 * (uint64_t{1} << (p.width - 1));
  return detail::pow2_or_overflow(up ? p.e + 1 : p.e, s, "pow2_nearest_value");
}

static_assert(pow2_nearest_log2(1.4142135f) == 1.0f && pow2_nearest_log2(1.4142137f) == 2.0f);
static_assert(pow2_nearest_value(1.4999999f) == 1.0f && pow2_nearest_value(1.5f) == 2.0f);
static_assert(pow2_nearest_log2(0x1.8p-148f) == 0x1p-147f);
static_assert(bf16_ulp_distance(0x0001, 0x8001) == 2);

}  // namespace qc
