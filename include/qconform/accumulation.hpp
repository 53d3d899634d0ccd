// Exact INT8 accumulation: `acc[m,n] = Σ_k a[m,k]·w[n,k]` as exact integers, and the range
// statistics that decide whether a layer's accumulators have an alibi (paper Section III).
//
// Layouts: `a` [M,K] row-major int8, `w` [N,K] row-major int8 (Wᵀ as column-major), `acc` [M,N]
// row-major. Raw pointers so that this header depends on nothing else in qconform.
//
// Exactness facts this API is built on (see docs/performance.md, "Exact accumulator"):
// - Every product of two int8 values lies in [-128·127, (-128)·(-128)] = [-16256, 16384], so
//   |acc| <= K·2^14. If K·2^14 < 2^31 (K < 131072), no INT32 accumulator can overflow and the
//   result is independent of reduction order: `exact_accumulate_i32` requires this.
// - For any K, `exact_accumulate_i64` sums K-blocks that each satisfy the proof into int64.
// - Every integer with |acc| <= 2^24 converts to float32 exactly; the unsafe set is
//   |acc| > 2^24 (2^24 itself is exact; 2^24+1 is the first integer that rounds).
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "qconform/numerics.hpp"

namespace qc {

// Shape of one accumulation: `a` [m,k], `w` [n,k], `acc` [m,n].
struct AccumShape {
  int64_t m, n, k;
};

// The largest K for which INT32 accumulation provably cannot overflow: K·2^14 < 2^31.
inline constexpr int64_t kAccumMaxKInt32 = (int64_t{1} << 17) - 1;  // 131071
static_assert(kAccumMaxKInt32 * 16384 < (int64_t{1} << 31), "the no-overflow proof must hold at kAccumMaxKInt32");
static_assert((kAccumMaxKInt32 + 1) * 16384 >= (int64_t{1} << 31), "kAccumMaxKInt32 must be the largest such K");

// Every integer with |x| <= 2^24 is exactly representable in float32.
inline constexpr int64_t kFp32ExactIntLimit = int64_t{1} << 24;

// Exact int32 accumulators (SIMD, Highway runtime dispatch, multi-threaded). Requires the
// no-overflow proof K·2^14 < 2^31, i.e. K <= kAccumMaxKInt32 (QC_CHECK otherwise).
// `threads = 0` means every hardware thread, or this process's share of them (qc::hardware_threads).
void exact_accumulate_i32(const int8_t* a, const int8_t* w, AccumShape s, int32_t* acc, int threads = 0);

// Exact int64 accumulators for any K: K is split into blocks below the int32 proof, each block
// accumulated exactly in int32 by the same kernel, and the blocks summed in int64.
void exact_accumulate_i64(const int8_t* a, const int8_t* w, AccumShape s, int64_t* acc, int threads = 0);

// A layer's exact accumulators in the narrowest type that holds them: INT32 when K <= kAccumMaxKInt32
// (no value can leave INT32), INT64 otherwise (`wide()`).
struct ExactAccumulators {
  std::vector<int32_t> i32;
  std::vector<int64_t> i64;
  bool wide() const { return !i64.empty(); }
};
ExactAccumulators exact_accumulate(const int8_t* a, const int8_t* w, AccumShape s, int threads = 0);

// The named scalar reference (obviously correct, slow): int64 triple loop, no SIMD, no threads.
void accumulate_ref_i64(const int8_t* a, const int8_t* w, AccumShape s, int64_t* acc);

// The Highway target the dispatcher selects on this machine for the accumulator kernel
// (e.g. "AVX3_DL", which uses VNNI `vpdpbusd` with an exact offset correction, or "AVX3",
// "AVX2", ... which use sign-extension to int16 and `pmaddwd`). Recorded in run identities.
std::string accum_target_name();

struct RangeStats {
  AccumShape shape{0, 0, 0};
  // Observed maximum |acc| and its first coordinates in row-major order (-1 when M·N == 0).
  int64_t max_abs_acc = 0;
  int64_t argmax_m = -1;
  int64_t argmax_n = -1;
  // Elements with |acc| > 2^24: the set for which exact conversion to fp32 is not guaranteed.
  int64_t count_above_2p24 = 0;
  // Elements whose value actually changes when converted to fp32 (round-to-nearest-even):
  // a subset of `count_above_2p24` (e.g. 2^24+2 is still exact, 2^24+1 is not).
  int64_t count_inexact_fp32 = 0;
  // 24 - log2(max|acc|): >= 0 iff no element exceeds 2^24 (0 exactly at max|acc| = 2^24, which
  // is still exact), negative when some element exceeds it. +infinity when max|acc| == 0.
  double headroom_bits = 0.0;
  // The proof K·2^14 < 2^31 (K <= 131071). We use the plain bound 2^14 per product; the
  // tighter bound (only (-128)·(-128) reaches 2^14, every other product is <= 16256) is not
  // needed for any realistic K and is not used.
  bool int32_overflow_impossible = true;
  // Elements whose exact value leaves [-2^31, 2^31-1] (0 whenever the proof holds; only an
  // int64 accumulator array can exhibit a nonzero count).
  int64_t int32_overflow_count = 0;
  // Data-independent bound: bound_max_a · max_n Σ_k |w[n,k]|. It holds for every activation
  // whose codes have magnitude <= bound_max_a. bound_max_a is 127 (symmetric codes, the
  // compressed-tensors/vLLM convention) unless `a` actually contains -128, then 128.
  int64_t data_independent_bound = 0;
  int32_t bound_max_a = 127;
  bool a_contains_min = false;      // `a` contains -128 (so bound_max_a is 128)
  int64_t bound_argmax_n = -1;      // the column n achieving max_n Σ_k |w[n,k]|
  bool bound_proves_safe = true;    // data_independent_bound <= 2^24
};

// Range statistics of accumulators `acc` computed from `a` and `w` (the operands are used for
// the data-independent bound). The int32 overload requires the no-overflow proof (QC_CHECK).
// `threads`: 0 = all hardware threads; the result does not depend on it.
// The statistics assembled from a pass's raw parts, the one assembly of every pass (the host's
// `range_stats`, the GPU's in verify's device pipeline): the largest |acc| and its first row-major
// index (-1: none), the elements above 2^24, those that do not survive the fp32 round trip, those
// outside INT32, whether `a` holds -128, and the largest weight row L1 norm Σ_k |w[n,k]| with its first
// row (-1, -1 when N is 0).
struct RangeParts {
  int64_t max_abs = 0, argmax = -1, above = 0, inexact = 0, overflow = 0;
  bool a_contains_min = false;
  int64_t l1_max = -1, l1_argmax = -1;
};
RangeStats range_stats_from(AccumShape s, const RangeParts& parts);
RangeStats range_stats(const int8_t* a, const int8_t* w, AccumShape s, const int32_t* acc, int threads = 0);
RangeStats range_stats(const int8_t* a, const int8_t* w, AccumShape s, const int64_t* acc, int threads = 0);
RangeStats range_stats(const int8_t* a, const int8_t* w, AccumShape s, const ExactAccumulators& acc, int threads = 0);

// Convenience: computes the exact accumulators (int32 when the proof holds, int64 otherwise)
// and returns their range statistics.
RangeStats exact_range_stats(const int8_t* a, const int8_t* w, AccumShape s, int threads = 0);

}  // namespace qc

// ================================================================================================
// FP8 accumulation models: formula objects for the fp32 accumulator of an FP8 GEMM
// ================================================================================================
//
// An FP8 GEMM `d[m,n] = Σ_k a[m,k]·w[n,k]` (a, w e4m3fn or e5m2 codes, d fp32, unscaled: the
// per-token / per-channel scales are the epilogue's, applied after) is floating point, so its
// result depends on how the hardware accumulates. An `Fp8AccumModel` states that exactly; the
// text below is the one evaluation of a model, compiled for the host (the scalar reference,
// `qc::fp8_model_reference` in src/accum/fp8_model.hpp) and for the device (the CUDA kernel
// src/arms/cuda/kernels/fp8_accum_model.cu). The Highway evaluation (src/accum/fp8_model_kernels.cpp)
// is written independently in fp64 lanes and must equal it bit for bit (tests/unit/
// test_accumulation_model.cpp). Source of the Hopper instances: ../shared/reference/
// fp8-accumulation.md (the MMA-Sim model, measured to reproduce cuBLASLt on the H200).
//
// The evaluation of one output, for K ranges r (split-K), chains, steps:
//   for each split range (K cut into `splits` contiguous ranges by `split_range`):
//     promote_steps == 0: one chain over the range; the partial is the chain's C
//     promote_steps  > 0: chains of `promote_steps` steps, each from C = 0; after each chain
//                         D <- round(D + C, promote_bits, promote_rounding); the partial is D
//     a chain: C = 0; for each step (the next `step_k` terms in K order; 0 = the whole range; with
//              `interleave` g > 0 the steps of a pair split 2·step_k positions by floor(offset / g) parity):
//       E   = max(alignment exponent of every nonzero product, e(C) = floor(log2|C|) if C != 0)
//       S   = round_to(C, 2^(E - term_bits)) + Σ round_to(a_i·b_i, 2^(E - term_bits))   (exact)
//             (term_bits < 0: no rounding of the terms, S = C + Σ a_i·b_i exactly)
//       C   = round(S, result_bits fraction bits relative to S's own exponent, result_rounding)
//   d = the partials added in order into an fp32 total from 0 (round to nearest even)
// The alignment exponent of a product is e(a) + e(b) (`exponent_sum`, the Hopper rule; e(x) =
// floor(log2|x|) for normal x, the minimum normal exponent for a subnormal x, so it can be one
// less than floor(log2|a·b|)) or floor(log2|a·b|) (`exact_exponent`). Zero products take no part.
//
// Arithmetic of the reference: every value is an exact integer in units of 2^-32 in a 128-bit
// integer (the finest grid any FP8 product lies on: e5m2's smallest subnormal 2^-16, squared);
// rounding only coarsens the grid, so nothing leaves it. |value| <= K · 57344² < 2^95 for
// K < 2^63: no overflow. Results: fp32 values (result_bits and promote_bits <= 23), never
// subnormal (|nonzero| >= 2^-32) and never overflowing (K · 2^31.6 < 2^128): fp32 saturation and
// subnormals cannot occur in these models. Operands: NaN and infinity codes (e4m3fn S.1111.111;
// e5m2 S.11111.xx) are input errors (the callers reject them, naming the coordinate); the
// functions here take finite codes only (`fp8_code_finite`). -0.0 codes are zero products; a zero
// sum is +0.
//
// CUDA compiles this section as C++17 (host and device, `__int128` in both); keep it free of
// C++20 and of any project header but the numeric core (numerics.hpp: device-safe, C++17), whose
// traits rows decode the FP8 codes and whose `round_shift` is every rounding below.
#if defined(__CUDACC__)
#define QC_ACCUM_FN __host__ __device__ __forceinline__
#else
#define QC_ACCUM_FN inline
#endif

namespace qc {

enum class Fp8Format : uint8_t { e4m3, e5m2 };  // OCP e4m3fn (bias 7, no inf) and e5m2 (bias 15)
// The rounding of a model's terms, step results and promotions: the core's `Rounding`
// (toward_zero, nearest_even), under the name the model's API has always used.
using AccumRounding = Rounding;
enum class AccumAlignment : uint8_t { exponent_sum, exact_exponent };

// The parameters of a model (plain data: host and device). Names, printed formulas, the table
// and validation live in src/accum/fp8_model.{hpp,cpp}.
struct Fp8AccumModel {
  int32_t step_k = 1;        // terms (products) per instruction step; 0 = the whole range in one step
  int32_t term_bits = -1;    // fraction bits of the terms relative to E; -1 = terms exact
  AccumRounding term_rounding = AccumRounding::toward_zero;
  int32_t result_bits = 23;  // fraction bits of each step's result (1..23; 23 = an fp32 value)
  AccumRounding result_rounding = AccumRounding::nearest_even;
  AccumAlignment alignment = AccumAlignment::exponent_sum;
  int32_t promote_steps = 0;  // steps per chain before promotion into the fp32 accumulator; 0 = never
  int32_t promote_bits = 23;  // fraction bits of the promotion add's result (23 = an fp32 add)
  AccumRounding promote_rounding = AccumRounding::nearest_even;
  int32_t splits = 1;  // split-K ranges; partials added in order with fp32 round-to-nearest-even
  // How K is cut into `splits` ranges: 0 = ranges of floor(K/splits), the last taking the rest;
  // g > 0 = ranges of ceil(K/(g·splits))·g, the last shorter, trailing ranges possibly empty
  // (cuBLASLt's split-K, g = 128: measured on the H200, docs/accumulation.md "Split-K").
  int32_t split_granule = 0;
  // The K order of the steps: 0 = ascending within every range. g > 0 = the steps come in pairs over
  // each 2·step_k consecutive positions of a range: the first step takes the positions whose offset o
  // in the pair has floor(o / g) even, the second those with it odd; both steps run, a position past
  // the range is no product (step_k a multiple of g). `mma.sync` on e4m3 on sm_90 (g = 2): ptxas
  // unpacks each 32-bit register of four codes into two f16x2 halves and runs one HMMA on the low
  // halves (k mod 4 in {0, 1}), a second on the high ones (docs/accumulation.md).
  int32_t interleave = 0;
};

namespace accum_model {

using Wide = __int128;  // units of 2^-32
inline constexpr int kUnitExp = -32;

// True for a finite code (e4m3fn: not S.1111.111; e5m2: exponent field != 31).
QC_ACCUM_FN constexpr bool fp8_code_finite(uint8_t c, Fp8Format f) {
  return f == Fp8Format::e4m3 ? is_finite<kE4M3>(c) : is_finite<kE5M2>(c);
}

// True for a zero code (+0 or -0: the magnitude bits are 0; both rows have 7 of them).
QC_ACCUM_FN constexpr bool fp8_code_zero(uint8_t c) {
  static_assert(kE4M3.magnitude_mask() == 0x7F && kE5M2.magnitude_mask() == 0x7F, "FP8 codes: 1 sign, 7 magnitude bits");
  return (c & kE4M3.magnitude_mask()) == 0;
}

// The index of the first non-finite code of codes[0..count), or -1 when every code is finite (the
// core's `first_nonfinite_code` of the format's row). Host only.
inline int64_t fp8_first_nonfinite(const uint8_t* codes, int64_t count, Fp8Format f) {
  return f == Fp8Format::e4m3 ? first_nonfinite_code<kE4M3>(codes, count) : first_nonfinite_code<kE5M2>(codes, count);
}

// The value of a finite code times 2^16 (an exact integer: the smallest subnormals are 2^-9 and
// 2^-16): the core's `scaled_int` of the format's row.
QC_ACCUM_FN constexpr int64_t fp8_times_2p16(uint8_t c, Fp8Format f) {
  return f == Fp8Format::e4m3 ? scaled_int<kE4M3>(c, -16) : scaled_int<kE5M2>(c, -16);
}

// e(x): floor(log2|x|) of a normal code, the minimum normal exponent (-6, -14) of a subnormal one
// (the core's `exponent_of`).
QC_ACCUM_FN constexpr int fp8_exponent(uint8_t c, Fp8Format f) {
  return f == Fp8Format::e4m3 ? exponent_of<kE4M3>(c) : exponent_of<kE5M2>(c);
}

// Position of the highest set bit of x > 0.
QC_ACCUM_FN int msb(Wide x) { return significant_bits(static_cast<u128>(x)) - 1; }

// x rounded to a multiple of 2^shift units (shift <= 0: x is on that grid already): the core's
// `round_shift` on the magnitude. Every |x| here is < 2^95, so a nonzero quotient has shift < 96.
QC_ACCUM_FN Wide round_to_grid(Wide x, int shift, AccumRounding r) {
  if (shift <= 0 || x == 0) return x;
  const bool neg = x < 0;
  const u128 q = round_shift(static_cast<u128>(neg ? -x : x), shift, r);
  const Wide v = q == 0 ? Wide{0} : static_cast<Wide>(q << shift);
  return neg ? -v : v;
}

// x rounded to `bits` fraction bits relative to its own exponent floor(log2|x|).
QC_ACCUM_FN Wide round_relative(Wide x, int bits, AccumRounding r) {
  if (x == 0) return 0;
  return round_to_grid(x, msb(x < 0 ? -x : x) - bits, r);
}

// One instruction step: C and the products p[0..count) (units of 2^-32), with the products'
// alignment exponents `pe` (ignored for zero products).
QC_ACCUM_FN Wide step(const Fp8AccumModel& m, Wide c, const Wide* p, const int* pe, int count) {
  Wide s = 0;
  if (m.term_bits < 0) {
    s = c;
    for (int i = 0; i < count; ++i) s += p[i];
  } else {
    bool any = c != 0;
    int e = any ? msb(c < 0 ? -c : c) + kUnitExp : 0;
    for (int i = 0; i < count; ++i) {
      if (p[i] == 0) continue;
      e = any && e > pe[i] ? e : pe[i];
      any = true;
    }
    if (!any) return 0;
    const int shift = e - m.term_bits - kUnitExp;  // the grid 2^(E - term_bits) in units
    s = round_to_grid(c, shift, m.term_rounding);
    for (int i = 0; i < count; ++i) s += round_to_grid(p[i], shift, m.term_rounding);
  }
  return round_relative(s, m.result_bits, m.result_rounding);
}

// An exact fp32-representable value in units of 2^-32 -> float: the core's `encode_exact` into
// the fp32 row, which rounds nothing here.
QC_ACCUM_FN float to_float(Wide x) {
  if (x == 0) return 0.0f;
  const bool neg = x < 0;
  return f32_from_bits(encode_exact<kFp32>(neg, static_cast<u128>(neg ? -x : x), kUnitExp, Rounding::nearest_even,
                                           /*saturate=*/false));
}

// The products of one step: a[k0..k1) · w[k0..k1) (finite codes), at most 64 per call.
inline constexpr int kMaxStepChunk = 64;

// Split range r of K: [r0, r1) (see Fp8AccumModel::split_granule; an empty range has r0 == r1).
QC_ACCUM_FN void split_range(const Fp8AccumModel& m, int64_t k, int64_t r, int64_t& r0, int64_t& r1) {
  const int64_t splits = m.splits < 1 ? 1 : m.splits;
  if (m.split_granule > 0) {
    const int64_t unit = int64_t{m.split_granule} * splits;
    const int64_t len = (k + unit - 1) / unit * m.split_granule;
    r0 = r * len < k ? r * len : k;
    r1 = r + 1 == splits || (r + 1) * len >= k ? k : (r + 1) * len;
  } else {
    const int64_t len = k / splits;
    r0 = r * len;
    r1 = r + 1 == splits ? k : (r + 1) * len;
  }
}

// The offset, from the start of a pair of interleaved steps, of the t-th position of its first (h = 0)
// or second (h = 1) step (Fp8AccumModel::interleave g > 0): every host and device gather uses it.
QC_ACCUM_FN int64_t interleaved_offset(int64_t g, int64_t h, int64_t t) { return (t / g) * 2 * g + h * g + t % g; }

// The model's fp32 result for one output: `a`, `w` the K codes of its row and column.
QC_ACCUM_FN float evaluate(const Fp8AccumModel& m, const uint8_t* a, Fp8Format fa, const uint8_t* w, Fp8Format fw,
                           int64_t k) {
  Wide total = 0;
  const int64_t splits = m.splits < 1 ? 1 : m.splits;
  for (int64_t r = 0; r < splits; ++r) {
    int64_t r0 = 0, r1 = 0;
    split_range(m, k, r, r0, r1);
    const int64_t sk = m.step_k > 0 ? m.step_k : (r1 > r0 ? r1 - r0 : 1);
    const int64_t g = m.interleave;  // > 0 only with step_k > 0 (validated)
    Wide chain = 0, promoted = 0;
    int64_t steps_in_chain = 0;
    // Step j covers [s0, s1) of K in K order, or with interleave the positions s0 + o, o in
    // [0, 2·sk), floor(o / g) % 2 == j % 2, of the pair starting at s0 = r0 + (j / 2)·2·sk.
    for (int64_t j = 0;; ++j) {
      const int64_t s0 = g > 0 ? r0 + (j / 2) * 2 * sk : r0 + j * sk;
      if (s0 >= r1) break;
      const int64_t s1 = s0 + sk < r1 ? s0 + sk : r1;
      // A step longer than kMaxStepChunk products (step_k = 0, exact terms only: validated) is
      // summed exactly in pieces, then rounded once: the same value as one step.
      Wide p[kMaxStepChunk];
      int pe[kMaxStepChunk];
      if (m.term_bits < 0 && g == 0) {
        Wide s = chain;
        for (int64_t i = s0; i < s1; ++i) s += Wide{fp8_times_2p16(a[i], fa)} * fp8_times_2p16(w[i], fw);
        chain = round_relative(s, m.result_bits, m.result_rounding);
      } else {
        int count = 0;
        for (int64_t t = 0; t < sk; ++t) {
          const int64_t i = g > 0 ? s0 + interleaved_offset(g, j % 2, t) : s0 + t;
          if (i >= (g > 0 ? r1 : s1)) continue;
          p[count] = Wide{fp8_times_2p16(a[i], fa)} * fp8_times_2p16(w[i], fw);
          if (p[count] == 0) {
            pe[count] = 0;
          } else if (m.alignment == AccumAlignment::exponent_sum) {
            pe[count] = fp8_exponent(a[i], fa) + fp8_exponent(w[i], fw);
          } else {
            pe[count] = msb(p[count] < 0 ? -p[count] : p[count]) + kUnitExp;
          }
          ++count;
        }
        chain = step(m, chain, p, pe, count);
      }
      if (m.promote_steps > 0 && ++steps_in_chain == m.promote_steps) {
        promoted = round_relative(promoted + chain, m.promote_bits, m.promote_rounding);
        chain = 0;
        steps_in_chain = 0;
      }
    }
    Wide partial = chain;
    if (m.promote_steps > 0) {
      if (steps_in_chain > 0) promoted = round_relative(promoted + chain, m.promote_bits, m.promote_rounding);
      partial = promoted;
    }
    total = round_relative(total + partial, 23, AccumRounding::nearest_even);
  }
  return to_float(total);
}

}  // namespace accum_model
}  // namespace qc
