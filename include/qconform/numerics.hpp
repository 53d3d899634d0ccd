// The numeric core: one traits row per number format, and every decode, encode, rounding and
// distance derived from it, for the host and the device.
//
// Device-safe by construction: every function is `constexpr` and, under nvcc, `__host__
// __device__`; nothing here throws, formats or includes anything but <cstdint> (no fmt, no project
// header), and it compiles as C++17 (the CUDA sources' standard) as well as C++20. A precondition is
// therefore stated, not checked: the checked host wrappers (`bf16_ulp_distance`, the power-of-two
// rounding of scales) live beside it in src/core/numerics_checked.hpp, and the named fp64
// references (`qc::ref::*`, written independently for the exhaustive tests and `selfcheck`) in
// src/core/numerics_ref.hpp.
//
// The shape follows ml_dtypes' `Traits<>` / `ConvertImpl`: a format is a row of `FloatFormat`
// (storage bits, exponent and mantissa widths, bias, which encodings are inf / NaN), a row's facts
// (largest finite pattern, exponent range, masks) are member functions of it, and the conversions
// are templates over the row (`decode_f32<kE4M3>`, `encode<kBf16>`), written once in numbered
// steps. The familiar names (`f32_to_bf16`, `e4m3fn_to_f32`, ...) are one-line instances. A new
// number format is a new row (docs/architecture.md, "Where a newcomer adds").
//
// Bit patterns travel as raw integers (`uint16_t` bf16/fp16, `uint8_t` fp8) so nothing converts
// implicitly. Callers that claim bit-exactness compile with `-ffp-contract=off` and without
// fast-math (the project's flags; nvcc: `--fmad=false`). docs/numerics.md states every function's
// semantics, how each mode relates to ml_dtypes, numpy and PTX, and the tests that pin them.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define QC_NUM_FN __host__ __device__ __forceinline__ constexpr
#else
#define QC_NUM_FN constexpr
#endif

namespace qc {

// ------------------------------------------------------------------------------------------------
// Bits
// ------------------------------------------------------------------------------------------------

QC_NUM_FN uint32_t f32_bits(float x) { return __builtin_bit_cast(uint32_t, x); }
QC_NUM_FN float f32_from_bits(uint32_t b) { return __builtin_bit_cast(float, b); }
QC_NUM_FN uint64_t f64_bits(double x) { return __builtin_bit_cast(uint64_t, x); }
QC_NUM_FN double f64_from_bits(uint64_t b) { return __builtin_bit_cast(double, b); }

static_assert(sizeof(float) == 4 && sizeof(double) == 8, "qconform needs IEEE binary32 and binary64");
static_assert(f32_bits(1.0f) == 0x3F800000u && f32_bits(-0x1p-149f) == 0x80000001u, "binary32 layout");
static_assert(f64_bits(1.0) == 0x3FF0000000000000ull, "binary64 layout");

using u128 = unsigned __int128;

// The number of significant bits of `u` (0 for 0): std::bit_width, for uint32_t, uint64_t and
// unsigned __int128, on the device too.
template <class U>
QC_NUM_FN int significant_bits(U u) {
  if constexpr (sizeof(U) == 16) {
    const uint64_t hi = static_cast<uint64_t>(u >> 64);
    return hi != 0 ? 128 - __builtin_clzll(hi) : significant_bits(static_cast<uint64_t>(u));
  } else if constexpr (sizeof(U) == 8) {
    return u != 0 ? 64 - __builtin_clzll(static_cast<unsigned long long>(u)) : 0;
  } else {
    return u != 0 ? 32 - __builtin_clz(static_cast<unsigned>(u)) : 0;
  }
}
static_assert(significant_bits(0u) == 0 && significant_bits(1u) == 1 && significant_bits(0x80000000u) == 32);
static_assert(significant_bits(uint64_t{1} << 40) == 41 && significant_bits(u128{1} << 100) == 101);

// ------------------------------------------------------------------------------------------------
// Rounding an integer: the one round-half-even (and round-toward-zero) of the project
// ------------------------------------------------------------------------------------------------

enum class Rounding : uint8_t { toward_zero, nearest_even };

// The one name table of `Rounding`: "rz" / "rn", as the accumulation formulas print them (rz13 =
// truncated to 13 fraction bits, rn23 = an fp32 rounding).
constexpr const char* rounding_tag(Rounding r) { return r == Rounding::toward_zero ? "rz" : "rn"; }

// u / 2^shift rounded to an integer (shift >= 0, any size: a shift of the whole width or more
// leaves 0, or 1 when rounding to nearest and u is above the half). Round half to even: the dropped
// remainder `rem` rounds the quotient up when rem > half, or rem == half and the quotient is odd,
// i.e. exactly when rem + (half - 1) + (q & 1) carries into bit `shift` (the bias trick
// `(u + 0x7FFF + lsb) >> 16` of bf16, applied to the remainder alone so that nothing overflows:
// rem + half < 2^(shift + 1) <= 2^width). Arithmetic only, no comparison, so loops over it
// vectorize. The quotient never overflows (it is below 2^(width - 1) before the increment).
template <class U>
QC_NUM_FN U round_shift(U u, int shift, Rounding r) {
  constexpr int kWidth = static_cast<int>(sizeof(U) * 8);
  if (shift <= 0) return u;
  if (shift >= kWidth) {  // u < 2^width <= 2 * half: 1 only above the half of a width-sized shift
    return shift == kWidth && r == Rounding::nearest_even && u > (U{1} << (kWidth - 1)) ? U{1} : U{0};
  }
  const U q = u >> shift;
  if (r == Rounding::toward_zero) return q;
  const U rem = u & ((U{1} << shift) - 1);
  const U half = U{1} << (shift - 1);
  return q + ((rem + (half - 1) + (q & 1)) >> shift);
}

// u rounded to `bits` >= 1 significant bits, on u's own scale: round_shift by the excess, shifted
// back. A carry may reach 2^significant_bits(u) (still exact); precondition: that fits U.
template <class U>
QC_NUM_FN U round_to_bits(U u, int bits, Rounding r) {
  const int shift = significant_bits(u) - bits;
  if (shift <= 0) return u;
  return round_shift(u, shift, r) << shift;
}

static_assert(round_shift(0x18u, 4, Rounding::nearest_even) == 2 && round_shift(0x28u, 4, Rounding::nearest_even) == 2);
static_assert(round_shift(0x29u, 4, Rounding::nearest_even) == 3 && round_shift(0x2Fu, 4, Rounding::toward_zero) == 2);
static_assert(round_shift(0x80000001u, 32, Rounding::nearest_even) == 1 && round_shift(0x80000000u, 32, Rounding::nearest_even) == 0);
static_assert(round_shift(0xFFFFFFFFu, 33, Rounding::nearest_even) == 0);
static_assert(round_to_bits(uint64_t{0x1FF}, 8, Rounding::nearest_even) == 0x200);  // a carry to the next power

// ------------------------------------------------------------------------------------------------
// The traits table: one row per format
// ------------------------------------------------------------------------------------------------

// Which encodings are not finite numbers.
enum class Specials : uint8_t {
  ieee,      // all-ones exponent: inf (mantissa 0) and NaN (mantissa != 0): fp32, bf16, fp16, e5m2
  nan_only,  // no infinity; the all-ones magnitude is the one NaN ("fn"/"fnu": e4m3fn, e8m0fnu)
  none,      // every encoding is a finite number (e2m1fn)
};

// One binary floating-point format: sign (optional), exponent, mantissa (explicit fraction bits,
// with an implicit leading bit for normal values), in that order from the top bit of `bits`.
struct FloatFormat {
  const char* name;
  int bits;           // storage bits
  int exponent_bits;
  int mantissa_bits;
  int bias;
  bool has_sign;
  bool subnormals;    // exponent field 0 holds the subnormals (else it is the lowest binade: e8m0)
  Specials specials;
  uint32_t nan;       // magnitude bits of the NaN the encoders here produce (0: the format has none)
  bool nan_keeps_payload;  // encoding an fp32 NaN keeps its top payload bits (bf16, fp16: as F16C)

  // The facts every conversion reads, derived from the row.
  QC_NUM_FN uint32_t sign_bit() const { return has_sign ? uint32_t{1} << (bits - 1) : 0u; }
  QC_NUM_FN uint32_t magnitude_mask() const {
    return static_cast<uint32_t>((uint64_t{1} << (exponent_bits + mantissa_bits)) - 1);
  }
  QC_NUM_FN uint32_t mantissa_mask() const { return (uint32_t{1} << mantissa_bits) - 1; }
  QC_NUM_FN uint32_t exponent_all_ones() const { return (uint32_t{1} << exponent_bits) - 1; }
  // Magnitude bits of +inf; 0 when the format has no infinity.
  QC_NUM_FN uint32_t inf_bits() const { return specials == Specials::ieee ? exponent_all_ones() << mantissa_bits : 0u; }
  QC_NUM_FN uint32_t max_finite_bits() const {
    return specials == Specials::ieee ? inf_bits() - 1 : specials == Specials::nan_only ? magnitude_mask() - 1
                                                                                         : magnitude_mask();
  }
  // A pattern b is not finite exactly when (b & mask) == mask (mask 0: every pattern is finite).
  QC_NUM_FN uint32_t nonfinite_mask() const {
    return specials == Specials::ieee ? inf_bits() : specials == Specials::nan_only ? magnitude_mask() : 0u;
  }
  // floor(log2) of the smallest normal value, of the largest finite value, and the exponent of
  // the smallest positive value (the subnormal spacing).
  QC_NUM_FN int min_normal_exponent() const { return subnormals ? 1 - bias : -bias; }
  QC_NUM_FN int max_exponent() const { return static_cast<int>(max_finite_bits() >> mantissa_bits) - bias; }
  QC_NUM_FN int min_exponent() const { return subnormals ? 1 - bias - mantissa_bits : -bias; }
  // The same exponent field as fp32 (bf16, fp32 itself): conversions are shifts of the pattern.
  QC_NUM_FN bool fp32_layout() const {
    return exponent_bits == 8 && bias == 127 && has_sign && subnormals && specials == Specials::ieee;
  }
};

//                                   name      bits exp man bias sign  subn  specials            NaN  payload
inline constexpr FloatFormat kFp32{"fp32",     32,  8, 23, 127, true, true, Specials::ieee, 0x7FC00000, true};
inline constexpr FloatFormat kBf16{"bf16",     16,  8,  7, 127, true, true, Specials::ieee, 0x7FC0, true};
inline constexpr FloatFormat kFp16{"fp16",     16,  5, 10,  15, true, true, Specials::ieee, 0x7E00, true};
// OCP FP8 E4M3 "fn": no infinity; S.1111.111 is the only NaN; max 448 = S.1111.110.
inline constexpr FloatFormat kE4M3{"e4m3fn",    8,  4,  3,   7, true, true, Specials::nan_only, 0x7F, false};
// OCP FP8 E5M2: IEEE-like; S.11111.00 is inf, S.11111.{01,10,11} NaN; quiet NaN S.11111.10.
inline constexpr FloatFormat kE5M2{"e5m2",      8,  5,  2,  15, true, true, Specials::ieee, 0x7E, false};
// Room for the microscaling formats (OCP MX): rows and decoding; no encoder takes them yet (below).
// E8M0 (the MX block scale): unsigned powers of two 2^(E-127), E = 0xFF is NaN, no zero.
inline constexpr FloatFormat kE8M0{"e8m0fnu",   8,  8,  0, 127, false, false, Specials::nan_only, 0xFF, false};
// E2M1 (the MXFP4 element): every pattern finite, max 6, min subnormal 0.5.
inline constexpr FloatFormat kE2M1{"e2m1fn",    4,  2,  1,   1, true, true, Specials::none, 0, false};

// A two's-complement integer format (the INT8 codes, and room for INT4).
struct IntFormat {
  const char* name;
  int bits;
  QC_NUM_FN int32_t min() const { return -(int32_t{1} << (bits - 1)); }
  QC_NUM_FN int32_t max() const { return (int32_t{1} << (bits - 1)) - 1; }
};
inline constexpr IntFormat kInt8{"int8", 8};
inline constexpr IntFormat kInt4{"int4", 4};

// ------------------------------------------------------------------------------------------------
// Classification and limits of a row
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

template <const FloatFormat& F>
QC_NUM_FN bool is_nan(uint32_t b) {
  const uint32_t mag = b & F.magnitude_mask();
  if constexpr (F.specials == Specials::ieee) return mag > F.inf_bits();
  if constexpr (F.specials == Specials::nan_only) return mag == F.magnitude_mask();
  return false;
}
template <const FloatFormat& F>
QC_NUM_FN bool is_finite(uint32_t b) {
  if constexpr (F.specials == Specials::none) return true;
  return (b & F.nonfinite_mask()) != F.nonfinite_mask();
}
// The index of the first non-finite code of codes[0..count) of an 8-bit format F, or -1 when every
// code is finite. A branch-free scan first (the compiler vectorizes it: operands are checked at
// memory speed on every arm run), the search only when some code is not finite. Host only.
template <const FloatFormat& F>
inline int64_t first_nonfinite_code(const uint8_t* codes, int64_t count) {
  if constexpr (F.specials == Specials::none) return -1;
  const auto mask = static_cast<uint8_t>(F.nonfinite_mask());
  uint8_t any = 0;
  for (int64_t i = 0; i < count; ++i) any |= static_cast<uint8_t>((codes[i] & mask) == mask);
  if (any == 0) return -1;
  for (int64_t i = 0; i < count; ++i) {
    if (!is_finite<F>(codes[i])) return i;
  }
  return -1;
}
template <const FloatFormat& F>
QC_NUM_FN FpClass classify(uint32_t b) {
  const uint32_t mag = b & F.magnitude_mask();
  if (is_nan<F>(b)) return FpClass::nan;
  if (!is_finite<F>(b)) return FpClass::inf;
  if (mag == 0 && F.subnormals) return FpClass::zero;
  if ((mag >> F.mantissa_bits) == 0 && F.subnormals) return FpClass::subnormal;
  return FpClass::normal;
}

// A finite pattern as an exact (-1)^neg · sig · 2^exp, the implicit bit included in `sig`.
struct Unpacked {
  bool neg;
  uint32_t sig;
  int exp;
};
template <const FloatFormat& F>
QC_NUM_FN Unpacked unpack(uint32_t b) {
  const uint32_t field = (b & F.magnitude_mask()) >> F.mantissa_bits;
  const uint32_t man = b & F.mantissa_mask();
  const bool neg = (b & F.sign_bit()) != 0;
  if (field == 0 && F.subnormals) return {neg, man, F.min_exponent()};
  return {neg, man | (uint32_t{1} << F.mantissa_bits), static_cast<int>(field) - F.bias - F.mantissa_bits};
}

// The alignment exponent of a finite nonzero pattern: floor(log2|x|) of a normal value, the
// smallest normal exponent of a subnormal one (the FP8 accumulation models' e(x)).
template <const FloatFormat& F>
QC_NUM_FN int exponent_of(uint32_t b) {
  const int field = static_cast<int>((b & F.magnitude_mask()) >> F.mantissa_bits);
  return field == 0 && F.subnormals ? F.min_normal_exponent() : field - F.bias;
}

// A finite pattern's value divided by 2^unit_exp, as an exact integer. Precondition: unit_exp <=
// F.min_exponent() (every value is a multiple of 2^unit_exp) and the result fits int64.
template <const FloatFormat& F>
QC_NUM_FN int64_t scaled_int(uint32_t b, int unit_exp) {
  const Unpacked u = unpack<F>(b);
  const int64_t mag = static_cast<int64_t>(u.sig) << (u.exp - unit_exp);
  return u.neg ? -mag : mag;
}

// ------------------------------------------------------------------------------------------------
// Encoding: an exact value, a float, an integer -> a row's pattern
// ------------------------------------------------------------------------------------------------

namespace detail {

// What an out-of-range magnitude becomes. Toward zero, and when saturating: the largest finite
// value (IEEE round-toward-zero never overflows to inf; PTX `.satfinite`); else infinity, or NaN in
// a format without infinity.
template <const FloatFormat& F>
QC_NUM_FN uint32_t overflow_bits(Rounding r, bool saturate) {
  if (saturate || r == Rounding::toward_zero) return F.max_finite_bits();
  return F.inf_bits() != 0 ? F.inf_bits() : F.nan;
}

}  // namespace detail

// The exact value (-1)^neg · sig · 2^q (sig > 0, U unsigned: uint32_t, uint64_t or unsigned
// __int128) rounded into row F, in the numbered steps of ml_dtypes' ConvertImpl:
// 1. e = floor(log2(sig · 2^q)); anything above the largest binade overflows (step 5).
// 2. The target exponent te: e, but never below the smallest normal exponent, so values in the
//    subnormal range get the subnormal spacing 2^(min_normal_exponent - mantissa_bits).
// 3. Shift to the target spacing 2^(te - mantissa_bits) and round (`round_shift`); a shift <= 0
//    means sig has fewer bits than the format keeps (exact).
// 4. Pack: k still holds the implicit bit at position mantissa_bits (or is below it for a
//    subnormal result, where te - min_normal_exponent == 0), so adding the biased exponent
//    (te - min_normal_exponent) << mantissa_bits gives the pattern; a rounding carry
//    (k == 2^(mantissa_bits + 1)) flows into the exponent. A value that rounds to 0 gives ±0.
// 5. Overflow: anything above the largest finite pattern (e4m3fn's NaN slot S.1111.111, and
//    e5m2/fp16/bf16 infinity reached by rounding included) gives `detail::overflow_bits`.
template <const FloatFormat& F, class U>
QC_NUM_FN uint32_t encode_exact(bool neg, U sig, int q, Rounding r, bool saturate) {
  static_assert(F.subnormals && F.specials != Specials::none,
                "encode: no encoder for this row yet (formats without subnormals or without a NaN)");
  const uint32_t sign = neg ? F.sign_bit() : 0u;
  const int e = q + significant_bits(sig) - 1;                                      // 1.
  if (e > F.max_exponent()) return sign | detail::overflow_bits<F>(r, saturate);
  const int te = e < F.min_normal_exponent() ? F.min_normal_exponent() : e;       // 2.
  const int shift = te - F.mantissa_bits - q;                                      // 3.
  const U k = shift <= 0 ? static_cast<U>(sig << -shift) : round_shift(sig, shift, r);
  const uint32_t mag =                                                             // 4.
      (static_cast<uint32_t>(te - F.min_normal_exponent()) << F.mantissa_bits) + static_cast<uint32_t>(k);
  if (mag > F.max_finite_bits()) return sign | detail::overflow_bits<F>(r, saturate);  // 5.
  return sign | mag;
}

// fp32 -> row F, rounded by `r`; `saturate` as in `detail::overflow_bits`.
// 1. NaN in, NaN out (sign kept): formats with `nan_keeps_payload` keep the top payload bits and
//    set the quiet bit (a payload living only in the low bits would otherwise vanish and turn the
//    NaN into an infinity); the others return their canonical NaN (what ml_dtypes returns).
// 2. Infinity: saturating mode clamps it like any other out-of-range value (PTX `.satfinite`).
// 3. Zero keeps its sign.
// 4. Any other row: unpack (|x| = sig · 2^q exactly, fp32 subnormals without implicit bit) and
//    `encode_exact`.
// A row with fp32's exponent field (bf16) takes a shortcut that is the same rule (tests/unit/
// test_numerics_core.cpp holds the two equal): rounding the magnitude bits by the mantissa
// difference is the whole conversion (the bias trick `(u + 0x7FFF + lsb) >> 16` is this
// round_shift); a carry out of the mantissa rounds into the exponent, to inf at the top; ±0 and
// ±inf map to themselves, and a NaN's payload is already in place. Branch-free (selects only), so
// that loops over it vectorize: this is every bf16 output's conversion.
template <const FloatFormat& F>
QC_NUM_FN uint32_t encode(float x, Rounding r, bool saturate) {
  constexpr int kDrop = kFp32.mantissa_bits - F.mantissa_bits;
  static_assert(kDrop >= 0, "encode: F is narrower than fp32");
  const uint32_t u = f32_bits(x);
  const uint32_t a = u & kFp32.magnitude_mask();
  const uint32_t sign = (u >> 31) != 0 ? F.sign_bit() : 0u;
  if constexpr (F.fp32_layout()) {
    static_assert(F.nan_keeps_payload, "a row with fp32's layout keeps NaN payloads");
    const uint32_t nan = F.inf_bits() | (uint32_t{1} << (F.mantissa_bits - 1)) | ((a >> kDrop) & F.mantissa_mask());
    const uint32_t mag = round_shift(a, kDrop, r);  // fp32 overflows no finite value of this row by
    // truncation, so only rounding to nearest reaches inf (0x7F80 for bf16), which saturation clamps.
    const uint32_t kept = saturate && mag > F.max_finite_bits() ? F.max_finite_bits() : mag;
    return sign | (a > kFp32.inf_bits() ? nan : kept);
  }
  if (a > kFp32.inf_bits()) {                                                        // 1.
    if constexpr (F.nan_keeps_payload) {
      return sign | F.inf_bits() | (uint32_t{1} << (F.mantissa_bits - 1)) | ((a >> kDrop) & F.mantissa_mask());
    } else {
      return sign | F.nan;
    }
  }
  if (a == kFp32.inf_bits()) {                                                       // 2.
    return sign | (saturate ? F.max_finite_bits() : F.inf_bits() != 0 ? F.inf_bits() : F.nan);
  }
  if (a == 0) return sign;                                                           // 3.
  const Unpacked p = unpack<kFp32>(u);                                               // 4.
  return encode_exact<F>(p.neg, p.sig, p.exp, r, saturate);
}

// int64 -> row F, rounded by `r` (INT64_MIN's magnitude 2^63 fits uint64).
template <const FloatFormat& F>
QC_NUM_FN uint32_t encode_int(int64_t v, Rounding r, bool saturate) {
  if (v == 0) return 0;
  const uint64_t mag = v < 0 ? uint64_t{0} - static_cast<uint64_t>(v) : static_cast<uint64_t>(v);
  return encode_exact<F>(v < 0, mag, 0, r, saturate);
}

// ------------------------------------------------------------------------------------------------
// Decoding: a row's pattern -> fp32 / fp64, exact (every value of every row is an fp32 value)
// ------------------------------------------------------------------------------------------------

// row F -> fp32, exact.
// 1. A row with fp32's exponent field (bf16): the pattern is the top of an fp32; NaN payloads
//    (signalling ones too) are kept bit for bit.
// 2. Non-finite patterns: IEEE-like rows shift the payload into place unchanged (inf: none);
//    `nan_only` rows give the fp32 quiet NaN with the sign kept.
// 3. Finite: unpack and encode the exact value into fp32 (`encode_exact` rounds nothing here).
template <const FloatFormat& F>
QC_NUM_FN float decode_f32(uint32_t b) {
  if constexpr (F.fp32_layout()) return f32_from_bits(b << (32 - F.bits));            // 1.
  const uint32_t sign = (b & F.sign_bit()) != 0 ? 0x80000000u : 0u;
  if (!is_finite<F>(b)) {                                                              // 2.
    if constexpr (F.specials == Specials::ieee) {
      return f32_from_bits(sign | kFp32.inf_bits() | ((b & F.mantissa_mask()) << (kFp32.mantissa_bits - F.mantissa_bits)));
    }
    return f32_from_bits(sign | kFp32.nan);
  }
  const Unpacked p = unpack<F>(b);                                                     // 3.
  if (p.sig == 0) return f32_from_bits(sign);
  return f32_from_bits(encode_exact<kFp32>(p.neg, p.sig, p.exp, Rounding::nearest_even, false));
}

// row F -> fp64, exact: the fp32 value widened (the widening is exact, NaN payloads shifted).
template <const FloatFormat& F>
QC_NUM_FN double decode_f64(uint32_t b) {
  const uint32_t u = f32_bits(decode_f32<F>(b));
  const uint64_t sign = uint64_t{u >> 31} << 63;
  const uint32_t a = u & kFp32.magnitude_mask();
  if (a >= kFp32.inf_bits()) return f64_from_bits(sign | 0x7FF0000000000000ull | (uint64_t{a & 0x7FFFFFu} << 29));
  if (a == 0) return f64_from_bits(sign);
  // |x| = sig · 2^exp exactly, normalized into binary64 (never subnormal there: exp >= -149).
  const Unpacked p = unpack<kFp32>(u);
  const int top = significant_bits(p.sig) - 1;
  const uint64_t frac = (uint64_t{p.sig} << (52 - top)) & 0xFFFFFFFFFFFFFull;
  return f64_from_bits(sign | (static_cast<uint64_t>(p.exp + top + 1023) << 52) | frac);
}

// The row's limits as fp32 values (`min_subnormal`: the smallest positive value, 2^min_exponent).
template <const FloatFormat& F>
QC_NUM_FN float max_finite() { return decode_f32<F>(F.max_finite_bits()); }
template <const FloatFormat& F>
QC_NUM_FN float min_normal() { return decode_f32<F>(F.subnormals ? uint32_t{1} << F.mantissa_bits : 0u); }
template <const FloatFormat& F>
QC_NUM_FN float min_subnormal() { return decode_f32<F>(F.subnormals ? 1u : 0u); }

// ------------------------------------------------------------------------------------------------
// The ordered (monotone) bit-pattern distance
// ------------------------------------------------------------------------------------------------

// Maps a pattern to a monotone integer line: +x -> +magnitude bits, -x -> -magnitude bits. Both
// zeros map to 0: the ulp distance is a *numerical* measure and +0 == -0 numerically; a
// sign-of-zero difference is a bitwise divergence, which the bitwise comparison counts separately
// (the paper separates the two estimators). So the distance from -min_subnormal to +min_subnormal
// is 2 (through the one zero).
template <const FloatFormat& F>
QC_NUM_FN int64_t ordered(uint32_t b) {
  static_assert(F.has_sign, "ordered: an unsigned row is ordered by its magnitude bits already");
  const int64_t mag = b & F.magnitude_mask();
  return (b & F.sign_bit()) != 0 ? -mag : mag;
}

// The number of spacings between two *finite* patterns, counted across zero. Precondition: both
// finite (callers sort out NaN and inf first, so that a NaN can never pass a tolerance; the checked
// host form is `bf16_ulp_distance` in src/core/numerics_checked.hpp).
template <const FloatFormat& F>
QC_NUM_FN uint32_t ordered_distance(uint32_t a, uint32_t b) {
  const int64_t d = ordered<F>(a) - ordered<F>(b);
  return static_cast<uint32_t>(d < 0 ? -d : d);
}

// ------------------------------------------------------------------------------------------------
// The named instances
// ------------------------------------------------------------------------------------------------

QC_NUM_FN FpClass classify_f32(float x) { return classify<kFp32>(f32_bits(x)); }
QC_NUM_FN FpClass classify_bf16(uint16_t b) { return classify<kBf16>(b); }
QC_NUM_FN FpClass classify_f16(uint16_t b) { return classify<kFp16>(b); }
QC_NUM_FN bool f32_is_nan(float x) { return is_nan<kFp32>(f32_bits(x)); }
QC_NUM_FN bool f32_is_finite(float x) { return is_finite<kFp32>(f32_bits(x)); }
QC_NUM_FN bool bf16_is_nan(uint16_t b) { return is_nan<kBf16>(b); }
QC_NUM_FN bool bf16_is_finite(uint16_t b) { return is_finite<kBf16>(b); }
QC_NUM_FN bool e4m3fn_is_finite(uint8_t b) { return is_finite<kE4M3>(b); }
QC_NUM_FN bool e5m2_is_finite(uint8_t b) { return is_finite<kE5M2>(b); }

// 2^k as an fp32, exactly, for k in [-149, 127] (subnormal powers included).
QC_NUM_FN float pow2_f32(int k) {
  return k >= -126 ? f32_from_bits(static_cast<uint32_t>(k + 127) << 23) : f32_from_bits(1u << (k + 149));
}
// True when s is a positive finite power of two (normal or subnormal).
QC_NUM_FN bool is_pow2_f32(float s) {
  const uint32_t u = f32_bits(s);
  if ((u >> 31) != 0 || u == 0 || !is_finite<kFp32>(u)) return false;
  const uint32_t sig = unpack<kFp32>(u).sig;
  return (sig & (sig - 1)) == 0;
}

// bf16 (1 sign, 8 exponent, 7 mantissa bits: the top half of an fp32).
// bf16 -> fp32 is exact; NaN payloads (signalling ones too) are kept bit for bit.
QC_NUM_FN float bf16_to_f32(uint16_t b) { return decode_f32<kBf16>(b); }
// fp32 -> bf16, round to nearest, ties to even. NaN stays NaN: sign and the top payload bits
// kept, quiet bit set. fp32 subnormals round to bf16 subnormals (never flushed); ±0 and ±inf map
// to themselves; overflow (at or above the midpoint 0x1.FFp127 above max) gives ±inf.
QC_NUM_FN uint16_t f32_to_bf16(float x) {
  return static_cast<uint16_t>(encode<kBf16>(x, Rounding::nearest_even, /*saturate=*/false));
}
// fp32 -> bf16, round toward zero (truncation). A real bug class (some kernels truncate), kept
// here so that the `mutant:` arms and the tests share one definition. NaN as `f32_to_bf16`;
// magnitudes never grow, so nothing overflows.
QC_NUM_FN uint16_t f32_to_bf16_rz(float x) {
  return static_cast<uint16_t>(encode<kBf16>(x, Rounding::toward_zero, /*saturate=*/false));
}

// fp32 <-> fp16 (IEEE binary16), subnormals kept. RNE: overflow (>= 65520) to ±inf; RZ: to the
// largest finite ±65504 (±inf stays inf). NaN: sign kept, quiet bit set, top 9 payload bits kept
// (x86 F16C `vcvtps2ph` semantics).
QC_NUM_FN uint16_t f32_to_f16(float x) {
  return static_cast<uint16_t>(encode<kFp16>(x, Rounding::nearest_even, /*saturate=*/false));
}
QC_NUM_FN uint16_t f32_to_f16_rz(float x) {
  return static_cast<uint16_t>(encode<kFp16>(x, Rounding::toward_zero, /*saturate=*/false));
}
QC_NUM_FN float f16_to_f32(uint16_t b) { return decode_f32<kFp16>(b); }

// fp32 -> OCP FP8 e4m3fn, round to nearest even. e4m3fn has no infinity:
//   saturate == false (ml_dtypes' `astype(float8_e4m3fn)`): |x| that rounds above 448, and ±inf,
//     give NaN 0x7F/0xFF (sign kept).
//   saturate == true (PTX `cvt.rn.satfinite.e4m3x2.f32`, CUDA `__NV_SATFINITE`): they give ±448.
// NaN in gives sign|0x7F in both modes.
QC_NUM_FN uint8_t f32_to_e4m3fn(float x, bool saturate) {
  return static_cast<uint8_t>(encode<kE4M3>(x, Rounding::nearest_even, saturate));
}
QC_NUM_FN float e4m3fn_to_f32(uint8_t b) { return decode_f32<kE4M3>(b); }

// fp32 -> OCP FP8 e5m2, round to nearest even.
//   saturate == false (ml_dtypes' astype): overflow and ±inf give ±inf (0x7C/0xFC).
//   saturate == true (PTX `.satfinite`): they give ±57344 (0x7B/0xFB).
// NaN in gives the quiet NaN sign|0x7E in both modes (ml_dtypes' pattern).
QC_NUM_FN uint8_t f32_to_e5m2(float x, bool saturate) {
  return static_cast<uint8_t>(encode<kE5M2>(x, Rounding::nearest_even, saturate));
}
QC_NUM_FN float e5m2_to_f32(uint8_t b) { return decode_f32<kE5M2>(b); }

// Maps a bf16 to the monotone integer line (`ordered`): finite values into [-0x7F7F, 0x7F7F],
// ±inf to ±0x7F80.
QC_NUM_FN int32_t bf16_ordered(uint16_t b) { return static_cast<int32_t>(ordered<kBf16>(b)); }
// `ordered_distance` of two finite bf16 (precondition; checked: `bf16_ulp_distance`).
QC_NUM_FN uint32_t bf16_ordered_distance(uint16_t a, uint16_t b) { return ordered_distance<kBf16>(a, b); }

// Bitwise equality: +0 and -0 differ, NaNs are equal only with identical payloads.
QC_NUM_FN bool bitwise_equal_bf16(uint16_t a, uint16_t b) { return a == b; }
QC_NUM_FN bool bitwise_equal_f32(float a, float b) { return f32_bits(a) == f32_bits(b); }

inline constexpr uint16_t kBf16MaxFinite = kBf16.max_finite_bits();  // (2 - 2^-7) * 2^127
inline constexpr uint16_t kBf16Inf = kBf16.inf_bits();
inline constexpr uint16_t kBf16MinSubnormal = 0x0001;  // 2^-133

// ------------------------------------------------------------------------------------------------
// Integers
// ------------------------------------------------------------------------------------------------

// fp32 -> a signed integer row, with the semantics of PTX `cvt.rni.sat.s8.f32`: round to nearest
// integer, ties to even, saturate to [min, max], NaN -> 0. Independent of the FPU rounding mode.
// 1. NaN gives 0.
// 2. Saturate: anything >= max + 0.5 rounds to >= max + 1 and clamps to max; anything <= min - 0.5
//    rounds to <= min - 1 and clamps to min (±inf included).
// 3. Round half even inside (min - 0.5, max + 0.5): `x - trunc(x)` is exact there.
template <const IntFormat& I>
QC_NUM_FN int32_t round_to_int_sat(float x) {
  static_assert(I.bits <= 24, "round_to_int_sat: the half-integer thresholds must be exact fp32 values");
  if (f32_is_nan(x)) return 0;
  if (x >= static_cast<float>(I.max()) + 0.5f) return I.max();
  if (x <= static_cast<float>(I.min()) - 0.5f) return I.min();
  int32_t t = static_cast<int32_t>(x);
  const float frac = x - static_cast<float>(t);
  if (frac > 0.5f || (frac == 0.5f && (t & 1) != 0)) ++t;
  if (frac < -0.5f || (frac == -0.5f && (t & 1) != 0)) --t;
  return t;
}
QC_NUM_FN int8_t f32_to_s8_rni_sat(float x) { return static_cast<int8_t>(round_to_int_sat<kInt8>(x)); }

// A pattern of a signed integer row (the low `bits` bits), sign-extended.
template <const IntFormat& I>
QC_NUM_FN int32_t decode_int(uint32_t b) {
  const uint32_t field = b & ((uint32_t{1} << I.bits) - 1);
  return (field >> (I.bits - 1)) != 0 ? static_cast<int32_t>(field) - (int32_t{1} << I.bits) : static_cast<int32_t>(field);
}

// int32 -> fp32 with round-to-nearest-even (what C++ and CUTLASS do on these targets; exact while
// |v| <= 2^24). At run time this is the CPU's `cvtsi2ss`, which rounds by MXCSR.RC; `qconform
// selfcheck` verifies RC is round-to-nearest. `i64_to_f32` below does not depend on it.
QC_NUM_FN float i32_to_f32(int32_t v) { return static_cast<float>(v); }

// int64 -> fp32, round to nearest even (or toward zero), by explicit bit manipulation
// (`encode_int`: no FPU rounding mode involved).
QC_NUM_FN float i64_to_f32(int64_t v) { return f32_from_bits(encode_int<kFp32>(v, Rounding::nearest_even, false)); }
QC_NUM_FN float i64_to_f32_rz(int64_t v) { return f32_from_bits(encode_int<kFp32>(v, Rounding::toward_zero, false)); }

// ------------------------------------------------------------------------------------------------
// Encoding facts, checked at compile time
// ------------------------------------------------------------------------------------------------

// The rows' limits.
static_assert(max_finite<kFp32>() == 0x1.FFFFFEp127f && min_subnormal<kFp32>() == 0x1p-149f && min_normal<kFp32>() == 0x1p-126f);
static_assert(max_finite<kBf16>() == 0x1.FEp127f && min_subnormal<kBf16>() == 0x1p-133f && min_normal<kBf16>() == 0x1p-126f);
static_assert(max_finite<kFp16>() == 65504.0f && min_subnormal<kFp16>() == 0x1p-24f && min_normal<kFp16>() == 0x1p-14f);
static_assert(max_finite<kE4M3>() == 448.0f && min_subnormal<kE4M3>() == 0x1p-9f && min_normal<kE4M3>() == 0x1p-6f);
static_assert(max_finite<kE5M2>() == 57344.0f && min_subnormal<kE5M2>() == 0x1p-16f && min_normal<kE5M2>() == 0x1p-14f);
static_assert(max_finite<kE8M0>() == 0x1p127f && min_subnormal<kE8M0>() == 0x1p-127f && decode_f32<kE8M0>(127) == 1.0f);
static_assert(max_finite<kE2M1>() == 6.0f && min_subnormal<kE2M1>() == 0.5f && min_normal<kE2M1>() == 1.0f);
static_assert(kE4M3.max_finite_bits() == 0x7E && kE4M3.inf_bits() == 0 && kE4M3.nonfinite_mask() == 0x7F);
static_assert(kE5M2.max_finite_bits() == 0x7B && kE5M2.inf_bits() == 0x7C && kE5M2.nonfinite_mask() == 0x7C);
static_assert(kBf16.max_finite_bits() == 0x7F7F && kBf16.inf_bits() == 0x7F80 && kFp16.inf_bits() == 0x7C00);
static_assert(kE8M0.max_finite_bits() == 0xFE && !is_finite<kE8M0>(0xFF) && is_finite<kE2M1>(0xF));
static_assert(kFp32.min_exponent() == -149 && kBf16.min_exponent() == -133 && kE4M3.min_exponent() == -9 &&
              kE5M2.min_exponent() == -16 && kE4M3.max_exponent() == 8 && kE5M2.max_exponent() == 15);
static_assert(kInt8.min() == -128 && kInt8.max() == 127 && kInt4.min() == -8 && kInt4.max() == 7);
static_assert(decode_int<kInt4>(0x8) == -8 && decode_int<kInt4>(0x7) == 7 && decode_int<kInt8>(0xFF) == -1);

// bf16.
static_assert(bf16_to_f32(0x3F80) == 1.0f);
static_assert(bf16_to_f32(0x0080) == 0x1p-126f);  // smallest normal
static_assert(f32_to_bf16(1.0f) == 0x3F80);
static_assert(f32_to_bf16(0x1.01p0f) == 0x3F80);        // tie, kept LSB even: down
static_assert(f32_to_bf16(0x1.03p0f) == 0x3F82);        // tie, kept LSB odd: up
static_assert(f32_to_bf16(0x1.FFp127f) == kBf16Inf);    // midpoint above max rounds to inf (even)
static_assert(f32_to_bf16(0x1.FEFFFEp127f) == kBf16MaxFinite);  // just below that midpoint
static_assert(f32_to_bf16(-0.0f) == 0x8000);
static_assert(f32_to_bf16(f32_from_bits(0xFFA12345u)) == 0xFFE1);  // NaN: sign, top payload, quiet bit
static_assert(f32_to_bf16(f32_from_bits(0x7F800001u)) == 0x7FC0);  // a low-bits-only payload stays NaN
static_assert(f32_to_bf16_rz(0x1.03p0f) == 0x3F81);
static_assert(f32_to_bf16_rz(-0x1.FFFFFEp127f) == 0xFF7F);
// fp16.
static_assert(f16_to_f32(0x3C00) == 1.0f);
static_assert(f32_to_f16(65519.996f) == 0x7BFF);                // below the midpoint 65520
static_assert(f32_to_f16(65520.0f) == 0x7C00);                  // midpoint above max: to inf (even)
static_assert(f32_to_f16_rz(65520.0f) == 0x7BFF && f32_to_f16_rz(f32_from_bits(0xFF800000u)) == 0xFC00);
static_assert(f32_to_f16(0x1p-25f) == 0x0000);                  // half the min subnormal: tie to 0
static_assert(f32_to_f16(0x1.8p-24f) == 0x0002);                // 1.5 min subnormal: tie to even 2
// e4m3fn.
static_assert(is_nan<kE4M3>(0x7F) && is_nan<kE4M3>(0xFF) && !is_nan<kE4M3>(0x7E));
static_assert(f32_to_e4m3fn(464.0f, /*saturate=*/false) == 0x7E);        // midpoint 448|480: even is 448
static_assert(f32_to_e4m3fn(464.00003f, /*saturate=*/false) == 0x7F);    // above it: NaN (no inf)
static_assert(f32_to_e4m3fn(464.00003f, /*saturate=*/true) == 0x7E);
static_assert(f32_to_e4m3fn(f32_from_bits(0xFF800000u), /*saturate=*/false) == 0xFF);  // -inf: NaN
static_assert(f32_to_e4m3fn(f32_from_bits(0xFF800000u), /*saturate=*/true) == 0xFE);   // -inf: -448
static_assert(f32_to_e4m3fn(0x1p-10f, /*saturate=*/false) == 0x00);      // half the min subnormal: tie to 0
static_assert(f32_to_e4m3fn(-0.0f, /*saturate=*/false) == 0x80);
static_assert(scaled_int<kE4M3>(0x01, -9) == 1 && scaled_int<kE4M3>(0x7E, -9) == 448 * 512 &&
              scaled_int<kE4M3>(0xB8, -9) == -512);
static_assert(exponent_of<kE4M3>(0x01) == -6 && exponent_of<kE4M3>(0x38) == 0 && exponent_of<kE5M2>(0x01) == -14);
// e5m2.
static_assert(e5m2_to_f32(0x7C) == f32_from_bits(0x7F800000u) && is_nan<kE5M2>(0x7D) && !is_nan<kE5M2>(0x7C));
static_assert(f32_to_e5m2(61440.0f, /*saturate=*/false) == 0x7C);        // midpoint 57344|65536: to inf (even)
static_assert(f32_to_e5m2(61439.996f, /*saturate=*/false) == 0x7B);
static_assert(f32_to_e5m2(61440.0f, /*saturate=*/true) == 0x7B);
static_assert(f32_to_e5m2(f32_from_bits(0x7FC00000u), /*saturate=*/true) == 0x7E);
// Integers.
static_assert(f32_to_s8_rni_sat(2.5f) == 2 && f32_to_s8_rni_sat(3.5f) == 4 && f32_to_s8_rni_sat(-2.5f) == -2);
static_assert(f32_to_s8_rni_sat(127.5f) == 127 && f32_to_s8_rni_sat(-128.5f) == -128);
static_assert(f32_to_s8_rni_sat(-127.5f) == -128 && f32_to_s8_rni_sat(126.5f) == 126);
static_assert(i32_to_f32(16777215) == 16777215.0f && i32_to_f32(16777217) == 16777216.0f);
static_assert(i64_to_f32(16777217) == 16777216.0f && i64_to_f32(16777219) == 16777220.0f);
static_assert(i64_to_f32(INT64_MIN) == -0x1p63f && i64_to_f32(INT64_MAX) == 0x1p63f);
static_assert(i64_to_f32_rz(16777219) == 16777218.0f && i64_to_f32_rz(-16777219) == -16777218.0f);
// Distances.
static_assert(bf16_ordered_distance(0x0000, 0x8000) == 0 && !bitwise_equal_bf16(0x0000, 0x8000));
static_assert(bf16_ordered_distance(0x0001, 0x8001) == 2);
static_assert(bf16_ordered_distance(0x3F80, 0x3F81) == 1 && bf16_ordered_distance(0x7F7F, 0xFF7F) == 2 * 0x7F7F);
static_assert(ordered_distance<kFp32>(0x7F7FFFFF, 0xFF7FFFFF) == 2u * 0x7F7FFFFFu);
static_assert(pow2_f32(-149) == 0x1p-149f && pow2_f32(127) == 0x1p127f && is_pow2_f32(0x1p-149f) && !is_pow2_f32(3.0f));

}  // namespace qc
