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
  if (m.interleave > 0) return Path::reference;  // the lanes take steps in K order (the host gathers first)
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

// A finite code's value (exact: an integer below 2^32 scaled by a power of two; the core's row decodes it).
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

namespace detail {

// The decoded codes of position i of a tile's rows and columns.
template <int TM, int TN, class A, class W>
QC_ACCUM_FN void load_values(const A* a, Fp8Format fa, const W* w, Fp8Format fw, int64_t i, double (&va)[TM],
                             double (&vw)[TN]) {
  for (int r = 0; r < TM; ++r) va[r] = value(a[r](i), fa);
  for (int c = 0; c < TN; ++c) vw[c] = value(w[c](i), fw);
}

// Path::exact: one exact sum in fp64, rounded once to fp32.
template <int TM, int TN, class A, class W>
QC_ACCUM_FN void exact_tile(const A* a, Fp8Format fa, const W* w, Fp8Format fw, int64_t k, float* out) {
  double va[TM], vw[TN];
  double s[TM][TN];
  for (int r = 0; r < TM; ++r) {
    for (int c = 0; c < TN; ++c) s[r][c] = 0.0;
  }
  for (int64_t i = 0; i < k; ++i) {
    load_values<TM, TN>(a, fa, w, fw, i, va, vw);
    for (int r = 0; r < TM; ++r) {
      for (int c = 0; c < TN; ++c) s[r][c] += va[r] * vw[c];  // exact products and sums
    }
  }
  for (int r = 0; r < TM; ++r) {
    for (int c = 0; c < TN; ++c) out[r * TN + c] = static_cast<float>(s[r][c]);
  }
}

// Path::fp32_sum: ranges summed from +0 in fp32 (each add one round to nearest even).
template <int TM, int TN, class A, class W>
QC_ACCUM_FN void fp32_sum_tile(const Fp8AccumModel& m, const A* a, Fp8Format fa, const W* w, Fp8Format fw, int64_t k,
                               float* out) {
  const int64_t splits = m.splits < 1 ? 1 : m.splits;
  double va[TM], vw[TN];
  // Ranges summed from +0 in fp32: the splits (accum_model::split_range), or promotion chains of
  // promote_steps products.
  const int64_t chunk = m.promote_steps > 0 ? m.promote_steps : (k > 0 ? k : 1);
  const int64_t ranges = splits > 1 ? splits : (k + chunk - 1) / chunk;
  float total[TM][TN], part[TM][TN];
  for (int r = 0; r < TM; ++r) {
    for (int c = 0; c < TN; ++c) total[r][c] = 0.0f;
  }
  for (int64_t g = 0; g < ranges; ++g) {
    int64_t r0 = g * chunk, r1 = g + 1 == ranges ? k : r0 + chunk;
    if (splits > 1) accum_model::split_range(m, k, g, r0, r1);
    for (int r = 0; r < TM; ++r) {
      for (int c = 0; c < TN; ++c) part[r][c] = 0.0f;
    }
    for (int64_t i = r0; i < r1; ++i) {
      load_values<TM, TN>(a, fa, w, fw, i, va, vw);
      for (int r = 0; r < TM; ++r) {
        for (int c = 0; c < TN; ++c) part[r][c] = part[r][c] + static_cast<float>(va[r] * vw[c]);
      }
    }
    for (int r = 0; r < TM; ++r) {
      for (int c = 0; c < TN; ++c) total[r][c] = total[r][c] + part[r][c];
    }
  }
  for (int r = 0; r < TM; ++r) {
    for (int c = 0; c < TN; ++c) out[r * TN + c] = total[r][c];
  }
}

// Path::steps: the stepped chains with their promotions and split-K ranges.
template <int TM, int TN, class A, class W>
QC_ACCUM_FN void steps_tile(const Fp8AccumModel& m, const A* a, Fp8Format fa, const W* w, Fp8Format fw, int64_t k,
                            float* out) {
  const int64_t splits = m.splits < 1 ? 1 : m.splits;
  double va[TM], vw[TN];
  const bool sum_rule = m.alignment == AccumAlignment::exponent_sum;
  const bool nearest_terms = m.term_rounding == AccumRounding::nearest_even;
  const bool nearest_result = m.result_rounding == AccumRounding::nearest_even;
  double total[TM][TN], chain[TM][TN], promoted[TM][TN], up[TM][TN], s[TM][TN];
  int e[TM][TN];
  bool any[TM][TN];
  for (int r = 0; r < TM; ++r) {
    for (int c = 0; c < TN; ++c) total[r][c] = 0.0;
  }
  for (int64_t g = 0; g < splits; ++g) {
    int64_t r0 = 0, r1 = 0;
    accum_model::split_range(m, k, g, r0, r1);
    for (int r = 0; r < TM; ++r) {
      for (int c = 0; c < TN; ++c) chain[r][c] = promoted[r][c] = 0.0;
    }
    int64_t in_chain = 0;
    for (int64_t s0 = r0; s0 < r1; s0 += m.step_k) {
      const int64_t s1 = s0 + m.step_k < r1 ? s0 + m.step_k : r1;
      // E: the largest alignment exponent of the nonzero products and e(C) (C != 0).
      for (int r = 0; r < TM; ++r) {
        for (int c = 0; c < TN; ++c) {
          any[r][c] = chain[r][c] != 0.0;
          e[r][c] = any[r][c] ? ilogb(chain[r][c]) : 0;
        }
      }
      for (int64_t i = s0; i < s1; ++i) {
        uint8_t ca[TM], cw[TN];
        int ea[TM], ew[TN];
        for (int r = 0; r < TM; ++r) {
          ca[r] = a[r](i);
          ea[r] = accum_model::fp8_exponent(ca[r], fa);
        }
        for (int c = 0; c < TN; ++c) {
          cw[c] = w[c](i);
          ew[c] = accum_model::fp8_exponent(cw[c], fw);
        }
        for (int r = 0; r < TM; ++r) {
          for (int c = 0; c < TN; ++c) {
            if (accum_model::fp8_code_zero(ca[r]) || accum_model::fp8_code_zero(cw[c])) continue;  // a zero product
            const int pe = sum_rule ? ea[r] + ew[c] : ilogb(value(ca[r], fa) * value(cw[c], fw));
            e[r][c] = any[r][c] && e[r][c] > pe ? e[r][c] : pe;
            any[r][c] = true;
          }
        }
      }
      // Terms on the grid 2^(E - term_bits); an output with no term and C = 0 gets up = 0, so its
      // sum and its step result are 0.
      for (int r = 0; r < TM; ++r) {
        for (int c = 0; c < TN; ++c) {
          if (!any[r][c]) e[r][c] = 0;
          up[r][c] = any[r][c] ? ldexp(1.0, m.term_bits - e[r][c]) : 0.0;
          s[r][c] = detail::round_int(chain[r][c] * up[r][c], nearest_terms);
        }
      }
      for (int64_t i = s0; i < s1; ++i) {
        load_values<TM, TN>(a, fa, w, fw, i, va, vw);
        for (int r = 0; r < TM; ++r) {
          for (int c = 0; c < TN; ++c) s[r][c] += detail::round_int(va[r] * vw[c] * up[r][c], nearest_terms);
        }
      }
      for (int r = 0; r < TM; ++r) {
        for (int c = 0; c < TN; ++c) {
          chain[r][c] = detail::round_rel(ldexp(s[r][c], e[r][c] - m.term_bits), m.result_bits, nearest_result);
        }
      }
      if (m.promote_steps > 0 && ++in_chain == m.promote_steps) {
        for (int r = 0; r < TM; ++r) {
          for (int c = 0; c < TN; ++c) {
            promoted[r][c] = fp32_add(promoted[r][c], chain[r][c]);
            chain[r][c] = 0.0;
          }
        }
        in_chain = 0;
      }
    }
    for (int r = 0; r < TM; ++r) {
      for (int c = 0; c < TN; ++c) {
        if (m.promote_steps > 0) {
          if (in_chain > 0) promoted[r][c] = fp32_add(promoted[r][c], chain[r][c]);
          chain[r][c] = promoted[r][c];
        }
        total[r][c] = fp32_add(total[r][c], chain[r][c]);
      }
    }
  }
  for (int r = 0; r < TM; ++r) {
    for (int c = 0; c < TN; ++c) out[r * TN + c] = static_cast<float>(total[r][c]);
  }
}

}  // namespace detail

// The model's fp32 results for a tile of TM x TN outputs: rows a[0..TM) and columns w[0..TN)
// (accessors), out[r * TN + c]; `path` = path_of(m, fa, fw, k) != reference (the caller runs
// accum_model::evaluate for `reference`). Each output is evaluated exactly as alone (its own
// chain, steps, promotions); the tile only shares the decoding of a code among the outputs of its
// row or column (on the GPU, decoding is most of the cost). Equal to accum_model::evaluate bit
// for bit.
template <int TM, int TN, class A, class W>
QC_ACCUM_FN void evaluate_tile(const Fp8AccumModel& m, Path path, const A* a, Fp8Format fa, const W* w, Fp8Format fw,
                               int64_t k, float* out) {
  if (path == Path::exact) return detail::exact_tile<TM, TN>(a, fa, w, fw, k, out);
  if (path == Path::fp32_sum) return detail::fp32_sum_tile<TM, TN>(m, a, fa, w, fw, k, out);
  detail::steps_tile<TM, TN>(m, a, fa, w, fw, k, out);
}

// One output (a 1 x 1 tile).
template <class A, class W>
QC_ACCUM_FN float evaluate(const Fp8AccumModel& m, Path path, A a, Fp8Format fa, W w, Fp8Format fw, int64_t k) {
  float d = 0.0f;
  evaluate_tile<1, 1>(m, path, &a, fa, &w, fw, k, &d);
  return d;
}

}  // namespace qc::accum_fp64
