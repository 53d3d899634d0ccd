// The named references of the numeric core (include/qconform/numerics.hpp): the same conversions
// written differently, for the exhaustive tests and `qconform selfcheck`.
//
// These use fp64 arithmetic (every fp32 and every narrow value is exact in fp64, and so are the
// distances compared below), `frexp`/`floor`/`ldexp` and explicit tie handling; they share no code
// with the core (not even its traits rows: every format constant is restated here as a literal), so
// that a test comparing the two compares two independent implementations. They are slow and
// obviously right; never use them on a hot path. NaN policy is restated. Host only.
#pragma once

#include <cmath>
#include <cstdint>

#include "qconform/numerics.hpp"  // f32_bits / f32_from_bits only

namespace qc {
namespace ref {

// fp32 -> bf16 RNE: find the two bf16 values bracketing |x| and compare the distances in fp64.
// Ties go to the candidate with the even last bit. The value above the largest finite bf16 is
// 2^128 on the unbounded-exponent grid; choosing it means overflow to inf.
inline uint16_t f32_to_bf16(float x) {
  const uint32_t u = f32_bits(x);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const double d = std::fabs(static_cast<double>(x));
  const uint16_t below = static_cast<uint16_t>((u & 0x7FFFFFFFu) >> 16);  // |x| truncated
  const uint16_t above = static_cast<uint16_t>(below + 1);
  const double d_below = static_cast<double>(f32_from_bits(uint32_t{below} << 16));
  const double d_above_raw = static_cast<double>(f32_from_bits(uint32_t{above} << 16));
  const double d_above = above == 0x7F80 ? 0x1p128 : d_above_raw;
  const double gap_below = d - d_below;
  const double gap_above = d_above - d;
  // `&` and `|` (not `&&`, `||`) and overrides instead of early returns keep a loop over this
  // function branch-free, so the exhaustive test vectorizes.
  const bool take_above = (gap_above < gap_below) | ((gap_above == gap_below) & ((below & 1u) != 0));
  const uint16_t magnitude = take_above ? above : below;
  const bool is_inf = (u & 0x7FFFFFFFu) == 0x7F800000u;
  const bool is_nan = (u & 0x7FFFFFFFu) > 0x7F800000u;
  const uint16_t rounded = static_cast<uint16_t>(sign | (is_inf ? 0x7F80u : magnitude));
  const uint16_t result = is_nan ? static_cast<uint16_t>((u >> 16) | 0x0040u) : rounded;  // NaN: quiet
  return result;
}

// fp32 -> bf16 round toward zero: the bracketing candidate nearer to zero.
inline uint16_t f32_to_bf16_rz(float x) {
  const uint32_t u = f32_bits(x);
  return x != x ? static_cast<uint16_t>((u >> 16) | 0x0040u) : static_cast<uint16_t>(u >> 16);
}

// Value of a finite narrow-format encoding, in fp64 by the textbook formula.
inline double narrow_value(uint32_t magnitude_bits, int exp_bits, int man_bits, int bias) {
  const uint32_t e = magnitude_bits >> man_bits;
  const uint32_t m = magnitude_bits & ((1u << man_bits) - 1u);
  (void)exp_bits;
  if (e == 0) return std::ldexp(static_cast<double>(m), 1 - bias - man_bits);
  return std::ldexp(1.0 + std::ldexp(static_cast<double>(m), -man_bits), static_cast<int>(e) - bias);
}

// fp32 (finite or inf, not NaN) -> narrow format RNE, via frexp/floor in fp64. `max_value` is the
// largest finite value (a literal the caller states), `inf_or_nan` what overflow gives when not
// saturating. Returns sign | magnitude bits.
inline uint32_t narrow_rne(float x, int exp_bits, int man_bits, int bias, double max_value, uint32_t max_bits,
                           uint32_t inf_or_nan, bool saturate) {
  const uint32_t sign = std::signbit(x) ? (1u << (exp_bits + man_bits)) : 0u;
  const double a = std::fabs(static_cast<double>(x));
  if (std::isinf(a)) return sign | (saturate ? max_bits : inf_or_nan);
  if (a == 0.0) return sign;
  int fe = 0;
  (void)std::frexp(a, &fe);  // a = f * 2^fe, f in [0.5, 1): floor(log2 a) = fe - 1
  const int emin = 1 - bias;
  int te = fe - 1 < emin ? emin : fe - 1;
  const double spacing = std::ldexp(1.0, te - man_bits);
  const double m = a / spacing;  // exact: division by a power of two
  double k = std::floor(m);
  const double frac = m - k;
  if (frac > 0.5 || (frac == 0.5 && std::fmod(k, 2.0) == 1.0)) k += 1.0;
  if (k * spacing > max_value) return sign | (saturate ? max_bits : inf_or_nan);
  const double implicit = std::ldexp(1.0, man_bits);
  if (k == 2.0 * implicit) {  // rounded up to the next binade
    k = implicit;
    ++te;
  }
  if (k < implicit) return sign | static_cast<uint32_t>(k);  // subnormal (te == emin) or zero
  return sign | (static_cast<uint32_t>(te + bias) << man_bits) | static_cast<uint32_t>(k - implicit);
}

inline uint16_t f32_to_f16(float x) {
  const uint32_t u = f32_bits(x);
  if (std::isnan(x)) {  // quiet, sign and top 9 payload bits kept
    return static_cast<uint16_t>(((u >> 16) & 0x8000u) | 0x7E00u | ((u >> 13) & 0x1FFu));
  }
  return static_cast<uint16_t>(narrow_rne(x, 5, 10, 15, 65504.0, 0x7BFF, 0x7C00, false));
}
inline uint8_t f32_to_e4m3fn(float x, bool saturate) {
  if (std::isnan(x)) return std::signbit(x) ? 0xFF : 0x7F;
  return static_cast<uint8_t>(narrow_rne(x, 4, 3, 7, 448.0, 0x7E, 0x7F, saturate));
}
inline uint8_t f32_to_e5m2(float x, bool saturate) {
  if (std::isnan(x)) return std::signbit(x) ? 0xFE : 0x7E;
  return static_cast<uint8_t>(narrow_rne(x, 5, 2, 15, 57344.0, 0x7B, 0x7C, saturate));
}

// PTX cvt.rni.sat.s8.f32 in fp64: nearbyint under the default rounding mode is not used on
// purpose (it depends on the FPU state); floor and an explicit tie rule instead.
inline int8_t f32_to_s8_rni_sat(float x) {
  if (std::isnan(x)) return 0;
  const double d = static_cast<double>(x);
  double r = std::floor(d);
  const double frac = d - r;
  if (frac > 0.5 || (frac == 0.5 && std::fmod(r, 2.0) != 0.0)) r += 1.0;
  if (r > 127.0) return 127;
  if (r < -128.0) return -128;
  return static_cast<int8_t>(r);
}

}  // namespace ref
}  // namespace qc
