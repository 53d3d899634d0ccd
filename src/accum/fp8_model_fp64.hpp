// The FP8 accumulation models evaluated one output at a time in fp64 (and fp32) arithmetic instead
// of the reference's 128-bit integers: the per-output form of the CPU fast paths (the Highway lanes
// of src/accum/fp8_model_kernels.cpp), compiled for the host (tests/unit/test_accumulation_model.cpp
// checks it against the reference bit for bit) and for the device (the GPU evaluation,
// src/arms/cuda/kernels/fp8_accum_model.cu, where 128-bit integer arithmetic is emulated and slow).
// Why each path is exact is the header comment of fp8_model_kernels.cpp; in short:
// - `steps`: products of two FP8 values are exact in fp64 (<= 8 significant bits); a term rounded
//   to the grid 2^(E - term_bits) is trunc/rint(p · 2^(term_bits - E)), an integer < 2^(term_bits+2),
//   so a step's sum (<= 65 terms, term_bits <= 40) is an exact fp64 integer; promotion and split-K
//   adds are fp32 adds done in fp64 and rounded once to fp32 (p = 53 >= 2·24 + 2: no double-rounding
//   error, Figueroa 1995).
// - `fp32_sum`: exact products, each add one fp32 round to nearest even (no FMA: host
//   -ffp-contract=off, device --fmad=false).
// - `exact`: e4m3 x e4m3 with K <= 2^17: every partial sum is an integer multiple of 2^-18 below
//   2^35 in magnitude, exact in fp64; one rounding to fp32 at the end.
// - `reference`: none applies; the caller runs `accum_model::evaluate`.
// The operands are read through accessors (`a(i)`, `w(i)` return the code of the i-th term), so a
// kernel can read a transposed or staged copy. C++17, no project header but accumulation.hpp.
#pragma once

#include <cmath>
#include <cstdint>

#include "qconform/accumulation.hpp"

namespace qc::accum_fp64 {

enum class Path : uint8_t { steps, fp32_sum, exact, reference };

// The one decision of which arithmetic evaluates a model (`qc::fp8_fast_path` returns it too).
QC_ACCUM_FN Path path_of(const Fp8AccumModel& m, Fp8Format fa, Fp8Format fw, int64_t k) {
  const bool fp32_results = m.result_bits == 23 && m.result_rounding == AccumRounding::nearest_even;
  const bool fp32_promotion = m.promote_bits == 23 && m.promote_rounding == AccumRounding::nearest_even;
  if (m.term_bits >= 0 && fp32_promotion) return Path::steps;
  if (m.term_bits < 0 && m.step_k == 1 && fp32_results && fp32_promotion && (m.splits == 1 || m.promote_steps == 0)) {
    return Path::fp32_sum;
  }
  // Every partial sum is an integer multiple of 2^-18 below K·448²; K <= 2^17 keeps it below 2^53 units.
  static_assert(double{1 << 17} * 448.0 * 448.0 * 262144.0 < 0x1p53, "fp64 exactness bound");
  if (m.term_bits < 0 && m.step_k == 0 && fp32_results && m.splits == 1 && m.promote_steps == 0 &&
      fa == Fp8Format::e4m3 && fw == Fp8Format::e4m3 && k <= (int64_t{1} << 17)) {
    return Path::exact;
  }
  return Path::reference;
}

// A finite code's value (exact: an integer below 2^32 scaled by a power of two).
QC_ACCUM_FN double value(uint8_t c, Fp8Format f) {
  return static_cast<double>(accum_model::fp8_times_2p16(c, f)) * 0x1p-16;
}

// Row-major codes with a stride between consecutive terms (1: a row; N: a column of a transposed [K][N] copy).
struct Strided {
  const uint8_t* p;
  int64_t stride;
  QC_ACCUM_FN uint8_t operator()(int64_t i) const { return p[i * stride]; }
};

namespace detail {
QC_ACCUM_FN double round_int(double x, bool nearest) { return nearest ? rint(x) : trunc(x); }
// x (exact, nonzero or zero) rounded to `bits` fraction bits relative to its own exponent.
QC_ACCUM_FN double round_rel(double x, int bits, bool nearest) {
  if (x == 0.0) return 0.0;
  const int e = ilogb(x);
  return ldexp(round_int(ldexp(x, bits - e), nearest), e - bits);
}
QC_ACCUM_FN double fp32_add(double x, double y) { return static_cast<double>(static_cast<float>(x + y)); }
}  // namespace detail

// The model's fp32 result for one output, `path` = path_of(m, fa, fw, k) != reference (the caller
// runs accum_model::evaluate for `reference`). Equal to accum_model::evaluate bit for bit.
template <class A, class W>
QC_ACCUM_FN float evaluate(const Fp8AccumModel& m, Path path, A a, Fp8Format fa, W w, Fp8Format fw, int64_t k) {
  using detail::fp32_add;
  if (path == Path::exact) {
    double s = 0.0;
    for (int64_t i = 0; i < k; ++i) s += value(a(i), fa) * value(w(i), fw);  // exact products and sums
    return static_cast<float>(s);
  }
  const int64_t splits = m.splits < 1 ? 1 : m.splits;
  const int64_t len = k / splits;
  if (path == Path::fp32_sum) {
    // Ranges summed from +0 in fp32: the splits, or promotion chains of promote_steps products.
    const int64_t chunk = splits > 1 ? len : (m.promote_steps > 0 ? m.promote_steps : (k > 0 ? k : 1));
    const int64_t ranges = splits > 1 ? splits : (k + chunk - 1) / chunk;
    float total = 0.0f;
    for (int64_t r = 0; r < ranges; ++r) {
      const int64_t r0 = r * chunk, r1 = r + 1 == ranges ? k : r0 + chunk;
      float part = 0.0f;
      for (int64_t i = r0; i < r1; ++i) part = part + static_cast<float>(value(a(i), fa) * value(w(i), fw));
      total = total + part;
    }
    return total;
  }
  // Path::steps
  const bool sum_rule = m.alignment == AccumAlignment::exponent_sum;
  const bool nearest_terms = m.term_rounding == AccumRounding::nearest_even;
  const bool nearest_result = m.result_rounding == AccumRounding::nearest_even;
  double total = 0.0;
  for (int64_t r = 0; r < splits; ++r) {
    const int64_t r0 = r * len, r1 = r + 1 == splits ? k : (r + 1) * len;
    double chain = 0.0, promoted = 0.0;
    int64_t in_chain = 0;
    for (int64_t s0 = r0; s0 < r1; s0 += m.step_k) {
      const int64_t s1 = s0 + m.step_k < r1 ? s0 + m.step_k : r1;
      // E: the largest alignment exponent of the nonzero products and e(C) (C != 0).
      bool any = chain != 0.0;
      int e = any ? ilogb(chain) : 0;
      for (int64_t i = s0; i < s1; ++i) {
        const uint8_t ca = a(i), cw = w(i);
        if ((ca & 0x7F) == 0 || (cw & 0x7F) == 0) continue;  // a zero product (±0 codes, both formats)
        const int pe = sum_rule ? accum_model::fp8_exponent(ca, fa) + accum_model::fp8_exponent(cw, fw)
                                : ilogb(value(ca, fa) * value(cw, fw));
        e = any && e > pe ? e : pe;
        any = true;
      }
      if (!any) {
        chain = 0.0;
      } else {
        const double up = ldexp(1.0, m.term_bits - e);
        double s = detail::round_int(chain * up, nearest_terms);
        for (int64_t i = s0; i < s1; ++i) s += detail::round_int(value(a(i), fa) * value(w(i), fw) * up, nearest_terms);
        chain = detail::round_rel(ldexp(s, e - m.term_bits), m.result_bits, nearest_result);
      }
      if (m.promote_steps > 0 && ++in_chain == m.promote_steps) {
        promoted = fp32_add(promoted, chain);
        chain = 0.0;
        in_chain = 0;
      }
    }
    if (m.promote_steps > 0) {
      if (in_chain > 0) promoted = fp32_add(promoted, chain);
      chain = promoted;
    }
    total = fp32_add(total, chain);
  }
  return static_cast<float>(total);
}

}  // namespace qc::accum_fp64
