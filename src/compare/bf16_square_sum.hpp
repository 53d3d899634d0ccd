// The sum of squares behind a comparison's near-zero limit (compare.hpp, `near_zero_limit`), exact and
// in any order, for the host and the device.
//
// A finite bf16 value is x = m · 2^(max(E, 1) - 134), with E its biased exponent field (0: zeros and
// subnormals) and m its significand (the 7 fraction bits, plus the implicit bit 2^7 when E > 0). So
// x² = m² · 2^(s(E) - 266) with s(E) = 2·max(E, 1) - 2 in [0, 506], and the sum of squares is
// 2^-266 · Σ_E bin[E] · 2^s(E), bin[E] = Σ m² over the values of exponent E: integers, which add
// exactly in any order. A pass over blocks of rows on every core, a GPU kernel's threads, or one
// loop therefore give the same bins, and `rounded()` rounds their sum once to fp64 (round to nearest
// even). Limits: m² < 2^16, so a bin holds 2^48 values before it could wrap (the checks compare at
// most a layer's outputs, far below).
//
// Device-safe like the numeric core it uses (no fmt, no exceptions, C++17 under nvcc).
#pragma once

#include <cstdint>

#include "qconform/numerics.hpp"

namespace qc {

struct Bf16SquareSum {
  static constexpr int kBins = 255;  // biased exponents 0 .. 254 (255 is inf and NaN)
  uint64_t bin[kBins] = {};
  uint64_t count = 0;  // finite values added

  // The bin and the m² of pattern b; false for inf and NaN.
  QC_NUM_FN static bool term(uint16_t b, uint32_t& exponent, uint32_t& m2) {
    exponent = (b >> kBf16.mantissa_bits) & kBf16.exponent_all_ones();
    if (exponent == kBf16.exponent_all_ones()) return false;
    const uint32_t m = (b & kBf16.mantissa_mask()) | (exponent != 0 ? uint32_t{1} << kBf16.mantissa_bits : 0u);
    m2 = m * m;
    return true;
  }
  QC_NUM_FN void add(uint16_t b) {
    uint32_t e = 0, m2 = 0;
    if (!term(b, e, m2)) return;
    bin[e] += m2;
    ++count;
  }
  QC_NUM_FN void merge(const Bf16SquareSum& o) {
    for (int e = 0; e < kBins; ++e) bin[e] += o.bin[e];
    count += o.count;
  }

  // Σ x², rounded once to fp64 (nearest even); +0 when nothing was added. The bins are added into a
  // 640-bit integer in units of 2^-266; its top bits, with a sticky bit for anything below them, are
  // rounded to 53 bits by the core's `round_shift`. Every sum is a normal fp64 (2^-266 .. 2^312).
  QC_NUM_FN double rounded() const {
    constexpr int kLimbs = 10;
    uint64_t limb[kLimbs] = {};
    for (int e = 0; e < kBins; ++e) {
      if (bin[e] == 0) continue;
      const int s = 2 * (e < 1 ? 1 : e) - 2;
      const int at = s / 64, sh = s % 64;
      uint64_t add[2] = {bin[e] << sh, sh == 0 ? 0 : bin[e] >> (64 - sh)};
      uint64_t carry = 0;
      for (int i = at; i < kLimbs; ++i) {
        const uint64_t part = i - at < 2 ? add[i - at] : 0;
        const uint64_t sum = limb[i] + part;
        const uint64_t next = (sum < part ? 1 : 0);
        limb[i] = sum + carry;
        carry = next + (limb[i] < carry ? 1 : 0);
        if (i - at >= 1 && carry == 0) break;
      }
    }
    int top = kLimbs - 1;
    while (top > 0 && limb[top] == 0) --top;
    if (limb[top] == 0) return 0.0;
    // The two limbs holding the leading bit, a sticky bit for every limb below them.
    u128 window = static_cast<u128>(limb[top]) << 64;
    int low_limb = top;  // the window's lowest bit is bit 64·(low_limb - 1) of the integer
    if (top > 0) window |= limb[top - 1];
    bool sticky = false;
    for (int i = 0; i < top - 1; ++i) sticky = sticky || limb[i] != 0;
    const int width = significant_bits(window);  // 65 .. 128
    // Bits of the window below its top 55: folded into a sticky bit before the final rounding.
    const int drop = width - 55;
    const bool low_sticky = sticky || (window & ((u128{1} << drop) - 1)) != 0;
    const uint64_t top55 = static_cast<uint64_t>(window >> drop) | (low_sticky ? 1u : 0u);
    uint64_t mant = round_shift(top55, 2, Rounding::nearest_even);  // 53 bits, or 2^53 after a carry
    int exponent = 64 * (low_limb - 1) + drop + 2 - 266;               // value = mant · 2^exponent
    if (mant >> 53) mant >>= 1, ++exponent;
    // mant in [2^52, 2^53): the fp64 of value mant · 2^exponent has unbiased exponent exponent + 52.
    const uint64_t biased = static_cast<uint64_t>(exponent + 52 + 1023);
    return f64_from_bits((biased << 52) | (mant & ((uint64_t{1} << 52) - 1)));
  }
};

// The magnitude bits below which a finite bf16 is near zero: the finite magnitudes in increasing bit
// order are increasing values, so the magnitudes with |x| < near_zero are a prefix [0, bits); found
// by bisection on that comparison itself. An element is near zero when its magnitude is below the
// result, or it is a zero (compare.cpp's rule: |x| < near_zero, or x == 0).
QC_NUM_FN uint16_t near_zero_magnitude_bits(double near_zero) {
  uint32_t lo = 0, hi = kBf16.inf_bits();  // the answer is in [lo, hi]: +inf is never below
  while (lo < hi) {
    const uint32_t mid = (lo + hi) / 2;
    const double v = static_cast<double>(bf16_to_f32(static_cast<uint16_t>(mid)));
    if (v < near_zero) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return static_cast<uint16_t>(lo);
}

}  // namespace qc
