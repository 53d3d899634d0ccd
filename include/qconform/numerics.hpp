// Bit-exact scalar numerics: the conversions and distances every other part of qconform uses.
//
// Everything here is a small constexpr bit manipulation with NaN, rounding and saturation
// handled explicitly. Callers must compile with `-ffp-contract=off` and without fast-math (the
// project's flags do). Types are raw bit patterns (`uint16_t` for bf16/fp16, `uint8_t` for fp8)
// so nothing converts implicitly. `docs/numerics.md` states every function's semantics, how each
// mode relates to ml_dtypes, numpy and PTX, and the peer-test results.
//
// Beside the fast paths live the named references (`qc::ref::*`, end of this file): the same
// conversions written differently (fp64 arithmetic with explicit tie handling) so that the
// exhaustive tests and `qconform selfcheck` compare two independent implementations.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

#include "qconform/error.hpp"

namespace qc {

constexpr uint32_t f32_bits(float x) { return std::bit_cast<uint32_t>(x); }
constexpr float f32_from_bits(uint32_t b) { return std::bit_cast<float>(b); }

static_assert(sizeof(float) == 4 && std::numeric_limits<float>::is_iec559, "qconform needs IEEE binary32 floats");
static_assert(std::numeric_limits<float>::digits == 24, "binary32 has a 24-bit significand");

// ------------------------------------------------------------------------------------------------
// Classification
// ------------------------------------------------------------------------------------------------

enum class FpClass { zero, subnormal, normal, inf, nan };

constexpr const char* fp_class_name(FpClass c) {
  switch (c) {
    case FpClass::zero: return "zero";
    case FpClass::subnormal: return "subnormal";
    case FpClass::normal: return "normal";
    case FpClass::inf: return "inf";
    case FpClass::nan: return "nan";
  }
  return "?";
}

namespace detail {
// Classifies a sign-magnitude binary float from its exponent field and mantissa field, for
// formats whose all-ones exponent encodes inf (mantissa 0) and NaN (mantissa != 0).
constexpr FpClass classify_ieee(uint32_t exp_field, uint32_t man_field, uint32_t exp_all_ones) {
  if (exp_field == exp_all_ones) return man_field == 0 ? FpClass::inf : FpClass::nan;
  if (exp_field == 0) return man_field == 0 ? FpClass::zero : FpClass::subnormal;
  return FpClass::normal;
}
}  // namespace detail

constexpr FpClass classify_f32(float x) {
  const uint32_t u = f32_bits(x);
  return detail::classify_ieee((u >> 23) & 0xFFu, u & 0x7FFFFFu, 0xFFu);
}
constexpr FpClass classify_bf16(uint16_t b) { return detail::classify_ieee((b >> 7) & 0xFFu, b & 0x7Fu, 0xFFu); }
constexpr FpClass classify_f16(uint16_t b) { return detail::classify_ieee((b >> 10) & 0x1Fu, b & 0x3FFu, 0x1Fu); }

constexpr bool f32_is_nan(float x) { return (f32_bits(x) & 0x7FFFFFFFu) > 0x7F800000u; }
constexpr bool f32_is_finite(float x) { return (f32_bits(x) & 0x7F800000u) != 0x7F800000u; }
constexpr bool bf16_is_nan(uint16_t b) { return (b & 0x7FFFu) > 0x7F80u; }
constexpr bool bf16_is_finite(uint16_t b) { return (b & 0x7F80u) != 0x7F80u; }

// 2^k as an fp32, exactly, for k in [-149, 127] (subnormal powers included).
constexpr float pow2_f32(int k) {
  return k >= -126 ? f32_from_bits(static_cast<uint32_t>(k + 127) << 23) : f32_from_bits(1u << (k + 149));
}

// ------------------------------------------------------------------------------------------------
// bf16 (1 sign, 8 exponent, 7 mantissa bits: the top half of an fp32)
// ------------------------------------------------------------------------------------------------

// bf16 -> fp32 is exact: bf16 is the top half of an fp32. NaN payloads (signalling ones too) are
// kept bit for bit.
constexpr float bf16_to_f32(uint16_t b) { return f32_from_bits(uint32_t{b} << 16); }

// fp32 -> bf16, round to nearest, ties to even.
// 1. NaN stays NaN: keep sign and the top payload bits, set the quiet bit (a payload living only
//    in the low 16 bits would otherwise vanish and turn the NaN into an infinity).
// 2. Finite and infinite values: add the rounding bias 0x7FFF plus the lowest kept bit, then
//    truncate. A carry out of the mantissa rounds into the exponent, which gives overflow to inf.
//    fp32 subnormals round to bf16 subnormals (never flushed); ±0 and ±inf map to themselves.
constexpr uint16_t f32_to_bf16(float x) {
  const uint32_t u = f32_bits(x);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) {
    return static_cast<uint16_t>((u >> 16) | 0x0040u);
  }
  const uint32_t lsb = (u >> 16) & 1u;
  return static_cast<uint16_t>((u + 0x7FFFu + lsb) >> 16);
}

// fp32 -> bf16, round toward zero (truncation). A real bug class (some kernels truncate), kept
// here so that the `mutant:` arms and the tests share one definition.
// 1. NaN stays NaN and quiet, exactly as in `f32_to_bf16`.
// 2. Everything else: drop the low 16 bits. Magnitudes never grow, so nothing overflows.
constexpr uint16_t f32_to_bf16_rz(float x) {
  const uint32_t u = f32_bits(x);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) {
    return static_cast<uint16_t>((u >> 16) | 0x0040u);
  }
  return static_cast<uint16_t>(u >> 16);
}

inline constexpr uint16_t kBf16MaxFinite = 0x7F7F;  // (2 - 2^-7) * 2^127
inline constexpr uint16_t kBf16Inf = 0x7F80;
inline constexpr uint16_t kBf16MinSubnormal = 0x0001;  // 2^-133
static_assert(bf16_to_f32(0x3F80) == 1.0f);
static_assert(bf16_to_f32(kBf16MaxFinite) == 0x1.FEp127f);
static_assert(bf16_to_f32(kBf16MinSubnormal) == 0x1p-133f);
static_assert(bf16_to_f32(0x0080) == 0x1p-126f);  // smallest normal
static_assert(f32_to_bf16(1.0f) == 0x3F80);
static_assert(f32_to_bf16(0x1.01p0f) == 0x3F80);        // tie, kept LSB even: down
static_assert(f32_to_bf16(0x1.03p0f) == 0x3F82);        // tie, kept LSB odd: up
static_assert(f32_to_bf16(0x1.FFp127f) == kBf16Inf);    // midpoint above max rounds to inf (even)
static_assert(f32_to_bf16(-0.0f) == 0x8000);
static_assert(f32_to_bf16_rz(0x1.03p0f) == 0x3F81);
static_assert(f32_to_bf16_rz(-0x1.FFFFFEp127f) == 0xFF7F);
static_assert(f32_to_bf16(0x1.FEFFFEp127f) == kBf16MaxFinite);  // just below that midpoint

// ------------------------------------------------------------------------------------------------
// Narrow binary formats: fp16, OCP FP8 e4m3fn and e5m2
// ------------------------------------------------------------------------------------------------

// The encoding facts of a narrow format with an implicit leading bit. Used as a template
// parameter so each conversion is one formula instantiated three times, not three copies.
struct NarrowFormat {
  int exp_bits;
  int man_bits;
  int bias;
  uint32_t max_finite;  // magnitude bits of the largest finite value
  uint32_t inf;         // magnitude bits of +inf; 0 when the format has no infinity (e4m3fn)
  uint32_t nan;         // magnitude bits of the canonical NaN this library produces
  bool keep_nan_payload;  // fp16: keep the top payload bits of an fp32 NaN (as x86 F16C does)
};

// IEEE binary16.
inline constexpr NarrowFormat kF16{5, 10, 15, 0x7BFF, 0x7C00, 0x7E00, true};
// OCP FP8 E4M3 "fn": no infinity; S.1111.111 is the only NaN; max 448 = S.1111.110.
inline constexpr NarrowFormat kE4M3FN{4, 3, 7, 0x7E, 0, 0x7F, false};
// OCP FP8 E5M2: IEEE-like; S.11111.00 is inf, S.11111.{01,10,11} NaN; quiet NaN S.11111.10.
inline constexpr NarrowFormat kE5M2{5, 2, 15, 0x7B, 0x7C, 0x7E, false};

namespace detail {

// fp32 -> narrow format, round to nearest even, in the numbered steps of ml_dtypes' ConvertImpl.
template <NarrowFormat F>
constexpr uint32_t narrow_from_f32(float x, bool saturate) {
  constexpr int kSignShift = F.exp_bits + F.man_bits;
  constexpr int kEmin = 1 - F.bias;  // exponent of the smallest normal
  const uint32_t u = f32_bits(x);
  const uint32_t sign = (u >> 31) << kSignShift;
  const uint32_t a = u & 0x7FFFFFFFu;
  // What an out-of-range magnitude becomes: the largest finite value when saturating, else
  // infinity, or NaN in a format without infinity.
  const uint32_t overflow = saturate ? F.max_finite : (F.inf != 0 ? F.inf : F.nan);

  // 1. NaN in, NaN out (sign kept). fp16 keeps the top payload bits and sets the quiet bit;
  //    fp8 returns its canonical NaN (what ml_dtypes returns).
  if (a > 0x7F800000u) {
    if constexpr (F.keep_nan_payload) {
      const uint32_t payload = (a >> (23 - F.man_bits)) & ((1u << F.man_bits) - 1u);
      return sign | F.inf | (1u << (F.man_bits - 1)) | payload;
    } else {
      return sign | F.nan;
    }
  }
  // 2. Infinity: saturating mode clamps it like any other out-of-range value (PTX `.satfinite`).
  if (a == 0x7F800000u) return sign | overflow;
  // 3. Zero keeps its sign.
  if (a == 0) return sign;
  // 4. Unpack: |x| = sig * 2^q exactly, with sig < 2^24 (fp32 subnormals have no implicit bit).
  const uint32_t exp32 = a >> 23;
  const uint32_t sig = exp32 == 0 ? (a & 0x7FFFFFu) : ((a & 0x7FFFFFu) | 0x800000u);
  const int q = exp32 == 0 ? -149 : static_cast<int>(exp32) - 150;
  // 5. Target exponent: floor(log2|x|), but never below the smallest normal exponent, so values
  //    in the subnormal range get the subnormal spacing 2^(kEmin - man_bits).
  const int e = q + static_cast<int>(std::bit_width(sig)) - 1;
  const int te = e < kEmin ? kEmin : e;
  // 6. Shift and round to nearest even. The target spacing is 2^(te - man_bits); `shift` >= 1
  //    for every fp32 input (fp32 has more mantissa bits than any narrow format). A shift of 25
  //    already rounds every sig < 2^24 to zero, so larger shifts are clamped to it.
  int shift = te - F.man_bits - q;
  if (shift > 25) shift = 25;
  uint32_t k = sig >> shift;
  const uint32_t rem = sig & ((1u << shift) - 1u);
  const uint32_t half = 1u << (shift - 1);
  if (rem > half || (rem == half && (k & 1u) != 0)) ++k;
  // 7. Pack. `k` still holds the implicit bit at position man_bits (or is below it for a
  //    subnormal result, where te + bias - 1 == 0), so adding (te + bias - 1) << man_bits gives
  //    the biased exponent; a rounding carry (k == 2^(man_bits+1)) flows into the exponent.
  const uint32_t mag = (static_cast<uint32_t>(te + F.bias - 1) << F.man_bits) + k;
  // 8. Overflow: anything above the largest finite encoding (this includes e4m3fn's NaN slot
  //    S.1111.111 and e5m2/fp16 infinity reached by rounding).
  if (mag > F.max_finite) return sign | overflow;
  return sign | mag;
}

// narrow format -> fp32, exact (every narrow value is an fp32 normal).
template <NarrowFormat F>
constexpr float widen_to_f32(uint32_t b) {
  constexpr int kSignShift = F.exp_bits + F.man_bits;
  constexpr uint32_t kManMask = (1u << F.man_bits) - 1u;
  constexpr uint32_t kExpAllOnes = (1u << F.exp_bits) - 1u;
  const uint32_t sign = ((b >> kSignShift) & 1u) << 31;
  const uint32_t mag = b & ((1u << kSignShift) - 1u);
  const uint32_t exp_field = mag >> F.man_bits;
  const uint32_t man = mag & kManMask;
  // 1. Non-finite encodings. IEEE-like formats: all-ones exponent is inf (man 0) or NaN, whose
  //    payload is shifted into place unchanged. e4m3fn: only S.1111.111 is NaN (fp32 quiet NaN).
  if constexpr (F.inf != 0) {
    if (exp_field == kExpAllOnes) {
      return f32_from_bits(sign | 0x7F800000u | (man << (23 - F.man_bits)));
    }
  } else {
    if (mag == F.nan) return f32_from_bits(sign | 0x7FC00000u);
  }
  // 2. Zero.
  if (mag == 0) return f32_from_bits(sign);
  // 3. Subnormal: man * 2^(1 - bias - man_bits); normalize so the top set bit becomes implicit.
  if (exp_field == 0) {
    const int top = static_cast<int>(std::bit_width(man)) - 1;
    const uint32_t exp32 = static_cast<uint32_t>(1 - F.bias - F.man_bits + top + 127);
    const uint32_t frac = (man ^ (1u << top)) << (23 - top);
    return f32_from_bits(sign | (exp32 << 23) | frac);
  }
  // 4. Normal: rebias the exponent, widen the mantissa.
  const uint32_t exp32 = exp_field - static_cast<uint32_t>(F.bias) + 127u;
  return f32_from_bits(sign | (exp32 << 23) | (man << (23 - F.man_bits)));
}

}  // namespace detail

// fp32 <-> fp16 (IEEE binary16), round to nearest even, subnormals kept, overflow to ±inf.
// NaN: sign kept, quiet bit set, top 9 payload bits kept (x86 F16C `vcvtps2ph` semantics).
constexpr uint16_t f32_to_f16(float x) {
  return static_cast<uint16_t>(detail::narrow_from_f32<kF16>(x, /*saturate=*/false));
}
constexpr float f16_to_f32(uint16_t b) { return detail::widen_to_f32<kF16>(b); }

// fp32 -> OCP FP8 e4m3fn, round to nearest even. e4m3fn has no infinity:
//   saturate == false (ml_dtypes' `astype(float8_e4m3fn)`): |x| that rounds above 448, and ±inf,
//     give NaN 0x7F/0xFF (sign kept).
//   saturate == true (PTX `cvt.rn.satfinite.e4m3x2.f32`, CUDA `__NV_SATFINITE`): they give ±448.
// NaN in gives sign|0x7F in both modes.
constexpr uint8_t f32_to_e4m3fn(float x, bool saturate) {
  return static_cast<uint8_t>(detail::narrow_from_f32<kE4M3FN>(x, saturate));
}
constexpr float e4m3fn_to_f32(uint8_t b) { return detail::widen_to_f32<kE4M3FN>(b); }

// fp32 -> OCP FP8 e5m2, round to nearest even.
//   saturate == false (ml_dtypes' astype): overflow and ±inf give ±inf (0x7C/0xFC).
//   saturate == true (PTX `.satfinite`): they give ±57344 (0x7B/0xFB).
// NaN in gives the quiet NaN sign|0x7E in both modes (ml_dtypes' pattern).
constexpr uint8_t f32_to_e5m2(float x, bool saturate) {
  return static_cast<uint8_t>(detail::narrow_from_f32<kE5M2>(x, saturate));
}
constexpr float e5m2_to_f32(uint8_t b) { return detail::widen_to_f32<kE5M2>(b); }

// Encoding facts, checked at compile time.
static_assert(f16_to_f32(0x7BFF) == 65504.0f);                 // fp16 max
static_assert(f16_to_f32(0x0001) == 0x1p-24f);                 // fp16 min subnormal
static_assert(f16_to_f32(0x0400) == 0x1p-14f);                 // fp16 min normal
static_assert(f16_to_f32(0x3C00) == 1.0f);
static_assert(f32_to_f16(65519.996f) == 0x7BFF);                // below the midpoint 65520
static_assert(f32_to_f16(65520.0f) == 0x7C00);                  // midpoint above max: to inf (even)
static_assert(f32_to_f16(0x1p-25f) == 0x0000);                  // half the min subnormal: tie to 0
static_assert(f32_to_f16(0x1.8p-24f) == 0x0002);                // 1.5 min subnormal: tie to even 2
static_assert(e4m3fn_to_f32(0x7E) == 448.0f);                   // e4m3fn max
static_assert(e4m3fn_to_f32(0x01) == 0x1p-9f);                  // e4m3fn min subnormal
static_assert(e4m3fn_to_f32(0x08) == 0x1p-6f);                  // e4m3fn min normal
static_assert(f32_is_nan(e4m3fn_to_f32(0x7F)) && f32_is_nan(e4m3fn_to_f32(0xFF)));
static_assert(f32_to_e4m3fn(464.0f, false) == 0x7E);            // midpoint 448|480: even is 448
static_assert(f32_to_e4m3fn(464.00003f, false) == 0x7F);        // above it: NaN (no inf)
static_assert(f32_to_e4m3fn(464.00003f, true) == 0x7E);
static_assert(f32_to_e4m3fn(-std::numeric_limits<float>::infinity(), false) == 0xFF);
static_assert(f32_to_e4m3fn(-std::numeric_limits<float>::infinity(), true) == 0xFE);
static_assert(f32_to_e4m3fn(0x1p-10f, false) == 0x00);          // half the min subnormal: tie to 0
static_assert(f32_to_e4m3fn(-0.0f, false) == 0x80);
static_assert(e5m2_to_f32(0x7B) == 57344.0f);                   // e5m2 max
static_assert(e5m2_to_f32(0x01) == 0x1p-16f);                   // e5m2 min subnormal
static_assert(e5m2_to_f32(0x04) == 0x1p-14f);                   // e5m2 min normal
static_assert(e5m2_to_f32(0x7C) == std::numeric_limits<float>::infinity());
static_assert(f32_to_e5m2(61440.0f, false) == 0x7C);            // midpoint 57344|65536: to inf (even)
static_assert(f32_to_e5m2(61439.996f, false) == 0x7B);
static_assert(f32_to_e5m2(61440.0f, true) == 0x7B);
static_assert(f32_to_e5m2(std::numeric_limits<float>::quiet_NaN(), true) == 0x7E);

// ------------------------------------------------------------------------------------------------
// Integers
// ------------------------------------------------------------------------------------------------

// fp32 -> int8 with the semantics of PTX `cvt.rni.sat.s8.f32`: round to nearest integer, ties to
// even, saturate to [-128, 127], NaN -> 0. Independent of the FPU rounding mode.
// 1. NaN gives 0.
// 2. Saturate: anything >= 127.5 rounds to >= 128 and clamps to 127; anything <= -128.5 rounds
//    to <= -128 and clamps to -128 (±inf included).
// 3. Round half even inside (-128.5, 127.5): `x - trunc(x)` is exact there.
constexpr int8_t f32_to_s8_rni_sat(float x) {
  if (f32_is_nan(x)) return 0;
  if (x >= 127.5f) return 127;
  if (x <= -128.5f) return -128;
  int t = static_cast<int>(x);
  const float frac = x - static_cast<float>(t);
  if (frac > 0.5f || (frac == 0.5f && (t & 1) != 0)) ++t;
  if (frac < -0.5f || (frac == -0.5f && (t & 1) != 0)) --t;
  return static_cast<int8_t>(t);
}
static_assert(f32_to_s8_rni_sat(2.5f) == 2 && f32_to_s8_rni_sat(3.5f) == 4 && f32_to_s8_rni_sat(-2.5f) == -2);
static_assert(f32_to_s8_rni_sat(127.5f) == 127 && f32_to_s8_rni_sat(-128.5f) == -128);
static_assert(f32_to_s8_rni_sat(-127.5f) == -128 && f32_to_s8_rni_sat(126.5f) == 126);

// int32 -> fp32 with round-to-nearest-even (what C++ and CUTLASS do on these targets; exact while
// |v| <= 2^24). At run time this is the CPU's `cvtsi2ss`, which rounds by MXCSR.RC; `qconform
// selfcheck` verifies RC is round-to-nearest. `i64_to_f32` below does not depend on it.
constexpr float i32_to_f32(int32_t v) { return static_cast<float>(v); }

// int64 -> fp32, round to nearest even, by explicit bit manipulation (no FPU rounding mode).
// 1. Split into sign and magnitude (INT64_MIN's magnitude 2^63 fits in uint64).
// 2. Round the magnitude to 24 significant bits, ties to even; a carry to 2^24 renormalizes.
// 3. Pack: |v| = sig * 2^s with sig in [2^23, 2^24), so the biased exponent is s + 150.
constexpr float i64_to_f32(int64_t v) {
  const bool negative = v < 0;
  const uint64_t mag = negative ? ~static_cast<uint64_t>(v) + 1u : static_cast<uint64_t>(v);
  if (mag == 0) return 0.0f;
  const int n = static_cast<int>(std::bit_width(mag));
  int s = n - 24;
  uint64_t sig;
  if (s <= 0) {
    sig = mag << -s;
  } else {
    sig = mag >> s;
    const uint64_t rem = mag & ((uint64_t{1} << s) - 1u);
    const uint64_t half = uint64_t{1} << (s - 1);
    if (rem > half || (rem == half && (sig & 1u) != 0)) ++sig;
    if (sig == (uint64_t{1} << 24)) {
      sig >>= 1;
      ++s;
    }
  }
  const uint32_t bits = (negative ? 0x80000000u : 0u) | (static_cast<uint32_t>(s + 150) << 23) |
                        static_cast<uint32_t>(sig - (uint64_t{1} << 23));
  return f32_from_bits(bits);
}
static_assert(i32_to_f32(16777215) == 16777215.0f && i32_to_f32(16777217) == 16777216.0f);
static_assert(i64_to_f32(16777217) == 16777216.0f && i64_to_f32(16777219) == 16777220.0f);
static_assert(i64_to_f32(INT64_MIN) == -0x1p63f && i64_to_f32(INT64_MAX) == 0x1p63f);

// ------------------------------------------------------------------------------------------------
// Distances and equality
// ------------------------------------------------------------------------------------------------

// Maps a bf16 bit pattern to a monotone integer line: +x -> +magnitude bits, -x -> -magnitude
// bits. Both zeros map to 0: the ulp distance is a *numerical* measure and +0 == -0 numerically;
// a sign-of-zero difference is a bitwise divergence, which `bitwise_equal_bf16` counts
// separately (the paper separates the two estimators). So the distance from -2^-133 to +2^-133
// is 2 (through the one zero). Finite values map into [-0x7F7F, 0x7F7F]; ±inf to ±0x7F80.
constexpr int32_t bf16_ordered(uint16_t b) {
  const int32_t magnitude = b & 0x7FFF;
  return (b & 0x8000) != 0 ? -magnitude : magnitude;
}

// Ordered bit-pattern distance between two *finite* bf16 values (number of bf16 spacings
// between them, counted across zero). Precondition (QC_CHECK, an internal error): both finite;
// callers sort out NaN and inf first, so that a NaN can never pass a tolerance.
constexpr uint32_t bf16_ulp_distance(uint16_t a, uint16_t b) {
  QC_CHECK(bf16_is_finite(a) && bf16_is_finite(b),
           "bf16_ulp_distance needs finite operands, got 0x{:04x} and 0x{:04x}", a, b);
  const int32_t d = bf16_ordered(a) - bf16_ordered(b);
  return static_cast<uint32_t>(d < 0 ? -d : d);
}

// Bitwise equality: +0 and -0 differ, NaNs are equal only with identical payloads.
constexpr bool bitwise_equal_bf16(uint16_t a, uint16_t b) { return a == b; }
constexpr bool bitwise_equal_f32(float a, float b) { return f32_bits(a) == f32_bits(b); }

static_assert(bf16_ulp_distance(0x0000, 0x8000) == 0 && !bitwise_equal_bf16(0x0000, 0x8000));
static_assert(bf16_ulp_distance(0x0001, 0x8001) == 2);
static_assert(bf16_ulp_distance(0x3F80, 0x3F81) == 1 && bf16_ulp_distance(0x7F7F, 0xFF7F) == 2 * 0x7F7F);

// ------------------------------------------------------------------------------------------------
// Power-of-two rounding of a positive finite scale
// ------------------------------------------------------------------------------------------------

namespace detail {
// |s| = sig * 2^q exactly with sig having `width` significant bits; returns e = floor(log2 s).
struct Pow2Split {
  uint64_t sig;
  int width;
  int e;
};
constexpr Pow2Split split_positive_f32(float s) {
  const uint32_t a = f32_bits(s);
  const uint32_t exp32 = a >> 23;
  const uint64_t sig = exp32 == 0 ? (a & 0x7FFFFFu) : ((a & 0x7FFFFFu) | 0x800000u);
  const int q = exp32 == 0 ? -149 : static_cast<int>(exp32) - 150;
  const int width = static_cast<int>(std::bit_width(sig));
  return {sig, width, q + width - 1};
}
constexpr void require_positive_scale(float s, const char* flavour) {
  QC_INPUT(f32_is_finite(s) && s > 0.0f,
           "{}: a scale must be positive and finite, found {} (bits 0x{:08x})", flavour, s, f32_bits(s));
}
constexpr float pow2_or_overflow(int e, float s, const char* flavour) {
  QC_INPUT(e <= 127, "{}: scale {} (bits 0x{:08x}) rounds to 2^128, beyond fp32", flavour, s, f32_bits(s));
  return pow2_f32(e);
}
}  // namespace detail

// Nearest power of two in log2: 2^e for s in [2^e, sqrt(2)*2^e], 2^(e+1) above. The threshold is
// irrational, so there is no tie; the comparison m > sqrt(2) (m = s / 2^e) is done exactly as
// sig^2 > 2^(2*width - 1) in integers. THE PROBE USES THIS FLAVOUR: a scale rounding perturbs
// the model multiplicatively, and nearest-in-log2 bounds the ratio by sqrt(2) both ways.
constexpr float pow2_nearest_log2(float s) {
  detail::require_positive_scale(s, "pow2_nearest_log2");
  const detail::Pow2Split p = detail::split_positive_f32(s);
  const bool up = p.sig * p.sig > (uint64_t{1} << (2 * p.width - 1));
  return detail::pow2_or_overflow(up ? p.e + 1 : p.e, s, "pow2_nearest_log2");
}

// Nearest power of two in value: 2^e for s < 1.5*2^e, 2^(e+1) for s >= 1.5*2^e (the midpoint
// 1.5*2^e is a tie and rounds up). Compared exactly as 2*sig >= 3*2^(width-1).
constexpr float pow2_nearest_value(float s) {
  detail::require_positive_scale(s, "pow2_nearest_value");
  const detail::Pow2Split p = detail::split_positive_f32(s);
  const bool up = 2 * p.sig >= 3 * (uint64_t{1} << (p.width - 1));
  return detail::pow2_or_overflow(up ? p.e + 1 : p.e, s, "pow2_nearest_value");
}

// True when s is a positive finite power of two (normal or subnormal).
constexpr bool is_pow2_f32(float s) {
  return f32_is_finite(s) && s > 0.0f && std::has_single_bit(detail::split_positive_f32(s).sig);
}

// The power-of-two argument's jurisdiction for one output `acc·sa·sw`, decided from exact values
// (never from an arm's output): every intermediate product (`acc·sa`, `acc·sw`, `sa·sw`,
// `acc·sa·sw`) is a normal finite fp32 number and the result stays below bf16's overflow
// threshold (2 − 2^-8)·2^127; for acc = 0 only `sa·sw` matters. Scaling by 2^e commutes with
// rounding inside it; outside (subnormal, overflow) the argument makes no claim.
inline bool pow2_in_jurisdiction(int64_t acc, float sa, float sw) {
  constexpr double kMinNormal = 0x1p-126, kMaxFinite = 0x1.fffffep127, kBf16Overflow = 0x1.ff8p127;
  const auto normal = [&](double p) { return p >= kMinNormal && p <= kMaxFinite; };
  const double s = static_cast<double>(sa) * static_cast<double>(sw);
  if (!normal(s)) return false;
  if (acc == 0) return true;
  const double a = std::fabs(static_cast<double>(acc));
  return normal(a * sa) && normal(a * sw) && normal(a * s) && a * s < kBf16Overflow;
}

static_assert(pow2_nearest_log2(1.4142135f) == 1.0f && pow2_nearest_log2(1.4142137f) == 2.0f);
static_assert(pow2_nearest_value(1.4999999f) == 1.0f && pow2_nearest_value(1.5f) == 2.0f);
static_assert(pow2_nearest_log2(0x1.8p-148f) == 0x1p-147f && is_pow2_f32(0x1p-149f) && !is_pow2_f32(3.0f));

// ------------------------------------------------------------------------------------------------
// Named references: the same conversions written differently, for tests and `selfcheck`
// ------------------------------------------------------------------------------------------------
//
// These use fp64 arithmetic (every fp32 and every narrow value is exact in fp64, and so are the
// distances compared below) and explicit tie handling; they share no code with the fast paths.
// They are slow and obviously right; never use them on a hot path. NaN policy is restated.
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
