// The stepped FP8 accumulation models (the Hopper ones among them) evaluated in fp32 arithmetic: the
// GPU's fast evaluation for verify's reference side (src/arms/cuda/kernels/fp8_accum_model.cu), written
// once for host and device so that the host tests pin it against the 128-bit reference bit for bit
// (tests/unit/test_accumulation_model.cpp, `AccumulationModel.PerOutputFp32EvaluationEqualsReference`;
// the device spelling of `grid_round` and `add_max` by tests/gpu/test_cuda_fp8_model.cpp, GPU == CPU). C++17,
// no project header but accumulation.hpp (and the numeric core it includes).
//
// Why fp32 is exact here (`applies` and `gpu_kernel_takes` state the conditions; every named Hopper model
// meets them):
// - A code is v = mi · 2^(e - f) with mi < 2^(f+1) (f = 3 fraction bits for e4m3, 2 for e5m2) and e its
//   alignment exponent, so a product a·b has at most 8 significant bits, none below 2^-32, and
//   |a·b| < 2^(ea+eb+2) < 2^32. Codes are decoded scaled by 2^-47 (`kValueShift`), so a product of two
//   decoded values is a·b · 2^-94: in [2^-126, 2^-62), a normal fp32, exact.
// - A step's grid is 2^(E - T) (T = term_bits). The step's sum is kept in units of that grid as a multiple
//   of 2^-149, the smallest subnormal fp32 (`kUnit`): the fp32 numbers below 2^-125 in magnitude are the
//   integers below 2^24 times 2^-149, a fixed-point format whose adds are exact. A product's term is
//   (a·b · 2^-94) · f with f = 2^(T - E - 55) (`grid_factor`, a normal fp32 for every E a model reaches):
//   the exact value is q · 2^-149 with q = a·b · 2^(T - E), and |q| < 2^(T+2) <= 2^22 (E >= every ea+eb
//   of the step), so one multiplication that rounds toward zero (or to nearest even) puts round(q) · 2^-149
//   on that grid: the term's rounding and its scaling in one instruction on the device (`grid_round`; the
//   host computes q exactly and rounds it with truncf / rintf). C (the chain so far, e(C) <= E) gives
//   |C · 2^(T-E)| < 2^(T+1), rounded the same way.
// - The step's sum is an integer below (step_k + 1) · 2^(T+2) <= 2^24 in magnitude (`applies`), and so is
//   every partial sum: summed as multiples of 2^-149 (below 2^-125), exactly, in any order.
// - The step's result: the sum, scaled to s · 2^-55 (a normal fp32 with the significand of the integer s),
//   rounded to `result_bits` fraction bits relative to its own exponent, is a mask (toward zero) or a
//   round-half-even increment on its bit pattern (fp32 is sign-magnitude, a carry into the exponent is the
//   correct result), then scaled by 2^(E - T + 55) (exact: |C| stays within 2^-113 .. 2^63).
// - Promotion and split-K adds are fp32 adds, round to nearest even (`applies` requires it): plain
//   `+` under -ffp-contract=off on the host, `__fadd_rn` on the device.
// - Subnormals are kept, never flushed to zero (the build passes neither -ffast-math nor --use_fast_math:
//   CMakeLists.txt; a flush would zero every term, which the tests above would see at once).
// Zero codes take no part (their exponent is `kNoExponent`, below every real one, and their value 0
// adds 0); a step's sum starts from +0 and a negative term rounded to zero is -0, which leaves any sum
// as it is (+0 + -0 = +0): a zero sum is +0, so C = +0, as the reference's zero.
#pragma once

#include <cmath>
#include <cstdint>

#include "qconform/accumulation.hpp"

#if defined(__FAST_MATH__) || defined(__USE_FAST_MATH__)
#error "src/accum/fp8_model_fp32.hpp needs subnormals kept (its sums are fixed point in them): no fast-math"
#endif

namespace qc::accum_fp32 {

// The loops over a tile's outputs and its chains unrolled on the device, so that their arrays stay in
// registers (left to the compiler, a tile of two chains went to local memory).
#if defined(__CUDACC__)
#define QC_UNROLL _Pragma("unroll")
#else
#define QC_UNROLL
#endif

// The exponent a zero code carries: two of them (-2048) and one plus any real exponent stay below
// every real alignment exponent (>= -28) and every real e(C) (>= -80).
inline constexpr int kNoExponent = -1024;
// E of a step with no nonzero term and C = 0 is clamped here so that 2^(T - E) stays finite (every
// term is 0 then, so the value of E does not matter).
inline constexpr int kMinStepExponent = -100;

// Codes are decoded scaled by 2^-kValueShift, so that a product of two is a normal fp32 whose scaling by
// `grid_factor` lands on the step's grid in the fixed point of 2^-149 (see the header comment).
inline constexpr int kValueShift = 47;
// The step's sum is held in units of 2^-149 (fp32's smallest subnormal).
inline constexpr float kUnit = 0x1p-149f;

// A decoded code: its value times 2^-kValueShift and its alignment exponent (kNoExponent for +-0).
struct Term {
  float v;
  int e;
};

QC_ACCUM_FN Term decode(uint8_t c, Fp8Format f) {
  // exact: <= 17 bits, and 2^-16 · 2^-47 is normal
  const float v = static_cast<float>(accum_model::fp8_times_2p16(c, f)) * 0x1p-63f;
  static_assert(16 + kValueShift == 63, "the decoding's scale");
  return Term{v, accum_model::fp8_code_zero(c) ? kNoExponent : accum_model::fp8_exponent(c, f)};
}

// 2^e exactly, for -126 <= e <= 127 (a normal fp32: the biased exponent alone).
QC_ACCUM_FN float pow2(int e) { return f32_from_bits(static_cast<uint32_t>(e + kFp32.bias) << kFp32.mantissa_bits); }

// floor(log2|c|) of a normal c (every C the models produce is normal), kNoExponent for +-0.
QC_ACCUM_FN int exponent_of(float c) {
  const uint32_t b = f32_bits(c) & kFp32.magnitude_mask();
  return b == 0 ? kNoExponent : static_cast<int>(b >> kFp32.mantissa_bits) - kFp32.bias;
}

QC_ACCUM_FN float add_rn(float x, float y) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(x, y);
#else
  return x + y;  // -ffp-contract=off: one IEEE round to nearest even
#endif
}

QC_ACCUM_FN float mul_rn(float x, float y) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(x, y);
#else
  return x * y;
#endif
}

// An fp32 integer s (|s| < 2^24) rounded to `bits` fraction bits relative to its own exponent: the
// core's `round_shift` of the magnitude bits by the dropped fraction bits (fp32 is sign-magnitude,
// and a carry into the exponent is the correct result).
QC_ACCUM_FN float round_significand(float s, int bits, bool nearest) {
  if (bits >= kFp32.mantissa_bits) return s;
  const int drop = kFp32.mantissa_bits - bits;
  const uint32_t u = f32_bits(s);
  const uint32_t mag = round_shift(u & kFp32.magnitude_mask(), drop, nearest ? Rounding::nearest_even : Rounding::toward_zero);
  return f32_from_bits((u & kFp32.sign_bit()) | (mag << drop));
}

// K is below this (`gpu_kernel_takes`; the host's `evaluate` requires it too): every |C| is then below
// K · 57344^2 < 2^63 (e(C) <= 62), so the step's E stays below T + 71 and `grid_factor` normal.
inline constexpr int64_t kMaxK = int64_t{1} << 31;

// The parameters the step loop reads, taken out of the model once.
struct StepParams {
  int term_bits = 13, result_bits = 13;
  bool nearest_terms = false, nearest_result = false;
};

// True when the fp32 evaluation is exact for this model (see the header comment): rounded terms,
// the exponent-sum alignment, steps of 1..64 products whose sums stay below 2^24, and promotion and
// split-K adds that are fp32 adds. Any FP8 formats; K below 2^31 (`kMaxK`: it bounds e(C)).
QC_ACCUM_FN bool applies(const Fp8AccumModel& m) {
  if (m.term_bits < 0 || m.step_k < 1 || m.step_k > 64 || m.alignment != AccumAlignment::exponent_sum) return false;
  if (m.interleave > 0) return false;  // the staged steps are in K order
  // term_bits <= 20: every term's magnitude stays below 2^22, so a term times 2^-149 stays below 2^-127.
  if (m.result_bits < 1 || m.result_bits > 23 || m.term_bits > 20) return false;
  if (m.promote_steps > 0 && (m.promote_bits != 23 || m.promote_rounding != AccumRounding::nearest_even)) return false;
  return (int64_t{m.step_k} + 1) << (m.term_bits + 2) <= (int64_t{1} << 24);
}

// The GPU kernel (src/arms/cuda/kernels/fp8_accum_model.cu) stages one step of every operand row of a
// block in shared memory, so it takes the models `applies` accepts whose split ranges all start on a
// step boundary, with a step of 8, 16 or 32 terms (32 is the Hopper instruction's k; 64 rows and
// columns of a longer step would pass the 48 KB of a static shared allocation).
QC_ACCUM_FN bool gpu_kernel_takes(const Fp8AccumModel& m, int64_t k) {
  if (!applies(m) || (m.step_k != 8 && m.step_k != 16 && m.step_k != 32) || k >= kMaxK) return false;
  const int64_t splits = m.splits < 1 ? 1 : m.splits;
  for (int64_t g = 0; g < splits; ++g) {
    int64_t r0 = 0, r1 = 0;
    accum_model::split_range(m, k, g, r0, r1);
    if (r0 % m.step_k != 0) return false;
  }
  return true;
}

QC_ACCUM_FN StepParams step_params(const Fp8AccumModel& m) {
  return StepParams{m.term_bits, m.result_bits, m.term_rounding == AccumRounding::nearest_even,
                    m.result_rounding == AccumRounding::nearest_even};
}

// The exact value of x · factor is q · 2^-149 with |q| < 2^22 (a product of two decoded values times
// `grid_factor`, or a chain's C times 2^(T - E) times kUnit): round(q) · 2^-149, toward zero or to
// nearest even, a multiple of 2^-149 below 2^-127 (a subnormal). The device rounds the product itself,
// into the subnormal range, in one instruction (`__fmul_rz` / `__fmul_rn`: subnormals are not flushed,
// see the header). The host computes q exactly, as (x · 2^94) · (factor · 2^55) (each scaling exact: x is
// a normal fp32 or rounds to 0 either way, factor a power of two in 2^-149 .. 2^65), rounds it with
// truncf / rintf and scales it by 2^-149 (exact). A negative x that rounds to zero gives -0 on both.
// Both are the same function (tests/gpu/test_cuda_fp8_model.cpp: GPU == CPU).
QC_ACCUM_FN float grid_round(float x, float factor, bool nearest) {
#if defined(__CUDA_ARCH__)
  return nearest ? __fmul_rn(x, factor) : __fmul_rz(x, factor);
#else
  const float q = (x * 0x1p94f) * (factor * 0x1p55f);
  return (nearest ? rintf(q) : truncf(q)) * kUnit;
#endif
}

// f = 2^(T - E - 55) from up = 2^(T - E) (exact: E < T + 71, `kMaxK`): a product of two decoded values
// (scaled by 2^-94) times f is the product on the step's grid in units of 2^-149.
QC_ACCUM_FN float grid_factor(float up) {
  static_assert(2 * kValueShift - 149 == -55, "the products' scale against the grid's unit");
  return mul_rn(up, 0x1p-55f);
}

// max(x + y, z): one instruction on sm_90 (DPX `viaddmax`).
QC_ACCUM_FN int add_max(int x, int y, int z) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  return __viaddmax_s32(x, y, z);
#else
  return x + y > z ? x + y : z;
#endif
}

// 1 / x for x = 2^k, -126 <= k <= 126, exactly: the biased exponent negated (0x7F000000 is 2 * 127 << 23).
// step_tile's f = 2^(term_bits - E - 55) and its reciprocal are both normal (E is clamped below at
// kMinStepExponent, and stays below T + 71: `kMaxK`).
QC_ACCUM_FN float reciprocal_pow2(float x) { return f32_from_bits(0x7F000000u - f32_bits(x)); }

// e[r][c] = max(e[r][c], max over i < count of the alignment exponents of product (r, c)'s terms).
template <int TM, int TN, class A, class W>
QC_ACCUM_FN void max_exponents(const A& a, const W& w, int count, int (&e)[TM][TN]) {
  Term ta[TM], tw[TN];
  for (int i = 0; i < count; ++i) {
    a.load(i, ta);
    w.load(i, tw);
    QC_UNROLL for (int r = 0; r < TM; ++r) {
      QC_UNROLL for (int c = 0; c < TN; ++c) e[r][c] = add_max(ta[r].e, tw[c].e, e[r][c]);
    }
  }
}

// True when models a and b differ at most in their promotion (promote_steps, promote_bits,
// promote_rounding) and `applies` takes both: their chains run the same steps over the same products,
// so one pass over the products evaluates both (`evaluate_tile` with P = 2: the products, their largest
// exponent and the staging are shared; each chain keeps its own E, grid, sum and result). The Hopper
// pair of cuBLASLt's FP8 paths is one: hopper-fp8-promote4 and hopper-fp8-chain (fast accumulation).
QC_ACCUM_FN bool same_steps(const Fp8AccumModel& a, const Fp8AccumModel& b) {
  return applies(a) && applies(b) && a.step_k == b.step_k && a.term_bits == b.term_bits &&
         a.term_rounding == b.term_rounding && a.result_bits == b.result_bits &&
         a.result_rounding == b.result_rounding && a.alignment == b.alignment && a.splits == b.splits &&
         a.split_granule == b.split_granule && a.interleave == b.interleave;
}

// s[q][r][c] += the step's count products of output (r, c) on chain q's grid (`f`, `grid_factor`), in units
// of 2^-149: see step_tile.
template <bool kNearest, int TM, int TN, int P, class A, class W>
QC_ACCUM_FN void sum_products(const A& a, const W& w, int count, const float (&f)[P][TM][TN], float (&s)[P][TM][TN]) {
  Term ta[TM], tw[TN];
  for (int i = 0; i < count; ++i) {
    a.load(i, ta);
    w.load(i, tw);
    QC_UNROLL for (int r = 0; r < TM; ++r) {
      QC_UNROLL for (int c = 0; c < TN; ++c) {
        const float x = mul_rn(ta[r].v, tw[c].v);  // a·w · 2^-94, exact
        QC_UNROLL for (int q = 0; q < P; ++q) s[q][r][c] = add_rn(s[q][r][c], grid_round(x, f[q][r][c], kNearest));
      }
    }
  }
}

// One step for a TM x TN tile of outputs of P chains that run the same steps (`same_steps`; P = 1: one
// model). `a.load(i, t)` fills t[0..TM) with the decoded codes of term i of the tile's rows,
// `w.load(i, t)` t[0..TN) with those of its columns, i in [0, count). `chain[q][r][c]` is chain q's C
// before and after.
template <int TM, int TN, int P, class A, class W>
QC_ACCUM_FN void step_tile(const StepParams& p, const A& a, const W& w, int count, float (&chain)[P][TM][TN]) {
  // The largest alignment exponent of the step's nonzero products, shared by the chains. Unqualified: a
  // stage whose sources hold their exponents packed has its own (the GPU's, two outputs per instruction).
  int e[TM][TN];
  QC_UNROLL for (int r = 0; r < TM; ++r) {
    QC_UNROLL for (int c = 0; c < TN; ++c) e[r][c] = kNoExponent;
  }
  max_exponents(a, w, count, e);
  // E of each chain: that maximum and e(C). The step's sum in units of its grid times 2^-149, |s| < 2^-125
  // (`applies`): every addition is exact, whatever the order. A product's term is one multiplication of
  // the shared a·w (`grid_round`) and one addition per chain (were three: a rounding against a bias, the
  // bias taken off and the sign applied; docs/performance.md).
  float f[P][TM][TN], s[P][TM][TN];
  QC_UNROLL for (int q = 0; q < P; ++q) {
    QC_UNROLL for (int r = 0; r < TM; ++r) {
      QC_UNROLL for (int c = 0; c < TN; ++c) {
        const int ec = exponent_of(chain[q][r][c]);
        int eq = ec > e[r][c] ? ec : e[r][c];
        eq = eq > kMinStepExponent ? eq : kMinStepExponent;
        const float up = pow2(p.term_bits - eq);
        f[q][r][c] = grid_factor(up);
        // C on the grid (C · up is exact, or below 2^-126 and so rounds to 0 either way), added to +0:
        // a C that rounds to -0 leaves the sum +0.
        s[q][r][c] = add_rn(0.0f, grid_round(mul_rn(chain[q][r][c], up), kUnit, p.nearest_terms));
      }
    }
  }
  // The term rounding decided once per step, not per product (the device would otherwise issue both
  // roundings, predicated, for every product).
  if (p.nearest_terms) {
    sum_products<true>(a, w, count, f, s);
  } else {
    sum_products<false>(a, w, count, f, s);
  }
  QC_UNROLL for (int q = 0; q < P; ++q) {
    QC_UNROLL for (int r = 0; r < TM; ++r) {
      QC_UNROLL for (int c = 0; c < TN; ++c) {
        // The sum s · 2^-149 as s · 2^-55 (normal, s's significand; +0 stays +0), rounded, then scaled by
        // 1 / f = 2^(E - T + 55): round(s) · 2^(E - T).
        const float sn = mul_rn(s[q][r][c], 0x1p94f);
        chain[q][r][c] = mul_rn(round_significand(sn, p.result_bits, p.nearest_result), reciprocal_pow2(f[q][r][c]));
      }
    }
  }
}

// What a tile's evaluation carries from one step to the next, per chain and output: the total of the
// split ranges folded so far, the open chain's C and the promoted D of the open split range. Zero at the
// start (`TileState{}`). The GPU kernel keeps it in registers and, where an evaluation is cut into
// launches over K (`run_steps`), in global memory between them.
template <int P, int TM, int TN>
struct TileState {
  float total[P][TM][TN] = {}, chain[P][TM][TN] = {}, promoted[P][TM][TN] = {};
};

// The steps of a TM x TN tile for P models that run the same steps (`same_steps`; P = 1: any model
// `applies` takes) whose first term lies in [k_begin, k_end), from `st` and into it: split ranges,
// steps, each model's promotions, as accum_model::evaluate. k_end >= k: every step from k_begin on, and
// then `st.total` is the tile's d. One call over [0, k) is the whole evaluation; calls over consecutive
// ranges give the same state bit for bit (the host test `ResumedFp32EvaluationEqualsWhole`) when every
// cut is a multiple of step_k and every split range starts on a step boundary (`gpu_kernel_takes`): a
// chain's promotion count is its step's index in its split range, and a range is folded into the total
// by the call that runs its last step (an empty range, by the call whose range holds its start).
// `stage.load(k0, count)` makes terms k0 .. k0+count-1 readable through `stage.a()` / `stage.w()`
// (indices 0 .. count-1; on the GPU it stages them in shared memory, so every thread of a block must
// call it in the same order: the loop below depends only on the models, K and the range).
// `stage.count(n)` is the count the step loop runs for n real terms (the GPU pads a short step with zero
// codes to a fixed count).
template <int TM, int TN, int P, class Stage>
QC_ACCUM_FN void run_steps(const Fp8AccumModel* const (&models)[P], int64_t k, Stage& stage, int64_t k_begin,
                           int64_t k_end, TileState<P, TM, TN>& st) {
  const Fp8AccumModel& m = *models[0];  // the steps and split ranges, the same for every model
  const StepParams p = step_params(m);
  const int64_t splits = m.splits < 1 ? 1 : m.splits;
  const bool to_end = k_end >= k;
  const auto in_range = [&](int64_t at) { return at >= k_begin && (to_end || at < k_end); };
  for (int64_t g = 0; g < splits; ++g) {
    int64_t r0 = 0, r1 = 0;
    accum_model::split_range(m, k, g, r0, r1);
    const int64_t s_first = r0 > k_begin ? r0 : k_begin;  // a step's start: both are multiples of step_k (or 0)
    int in_chain[P];
    QC_UNROLL for (int q = 0; q < P; ++q) {
      const int64_t steps_before = (s_first - r0) / m.step_k;
      in_chain[q] = models[q]->promote_steps > 0 ? static_cast<int>(steps_before % models[q]->promote_steps) : 0;
    }
    for (int64_t s0 = s_first; s0 < r1 && (to_end || s0 < k_end); s0 += m.step_k) {
      const int n = static_cast<int>(s0 + m.step_k < r1 ? m.step_k : r1 - s0);
      stage.load(s0, n);
      step_tile<TM, TN, P>(p, stage.a(), stage.w(), stage.count(n), st.chain);
      QC_UNROLL for (int q = 0; q < P; ++q) {
        if (models[q]->promote_steps > 0 && ++in_chain[q] == models[q]->promote_steps) {
          QC_UNROLL for (int r = 0; r < TM; ++r) {
            QC_UNROLL for (int c = 0; c < TN; ++c) {
              st.promoted[q][r][c] = add_rn(st.promoted[q][r][c], st.chain[q][r][c]);
              st.chain[q][r][c] = 0.0f;
            }
          }
          in_chain[q] = 0;
        }
      }
    }
    // The range's last step (or, empty, its start) in this call: its partial into the total, and the
    // next range starts from zero.
    const int64_t last = r1 > r0 ? r0 + (r1 - r0 - 1) / m.step_k * m.step_k : r0;
    if (!in_range(last)) continue;
    QC_UNROLL for (int q = 0; q < P; ++q) {
      QC_UNROLL for (int r = 0; r < TM; ++r) {
        QC_UNROLL for (int c = 0; c < TN; ++c) {
          float partial = st.chain[q][r][c];
          if (models[q]->promote_steps > 0) {
            partial = in_chain[q] > 0 ? add_rn(st.promoted[q][r][c], partial) : st.promoted[q][r][c];
          }
          st.total[q][r][c] = add_rn(st.total[q][r][c], partial);
          st.chain[q][r][c] = st.promoted[q][r][c] = 0.0f;
        }
      }
    }
  }
}

// The whole evaluation of a TM x TN tile for P models that run the same steps (`run_steps` over all of
// K). out[q][r][c] receives model q's d.
template <int TM, int TN, int P, class Stage>
QC_ACCUM_FN void evaluate_tile(const Fp8AccumModel* const (&models)[P], int64_t k, Stage& stage,
                               float (&out)[P][TM][TN]) {
  TileState<P, TM, TN> st;
  run_steps<TM, TN, P>(models, k, stage, 0, k, st);
  QC_UNROLL for (int q = 0; q < P; ++q) {
    QC_UNROLL for (int r = 0; r < TM; ++r) {
      QC_UNROLL for (int c = 0; c < TN; ++c) out[q][r][c] = st.total[q][r][c];
    }
  }
}

// One model `applies` takes: out[r][c] receives d.
template <int TM, int TN, class Stage>
QC_ACCUM_FN void evaluate_tile(const Fp8AccumModel& m, int64_t k, Stage& stage, float (&out)[TM][TN]) {
  const Fp8AccumModel* const models[1] = {&m};
  float d[1][TM][TN];
  evaluate_tile<TM, TN, 1>(models, k, stage, d);
  QC_UNROLL for (int r = 0; r < TM; ++r) {
    QC_UNROLL for (int c = 0; c < TN; ++c) out[r][c] = d[0][r][c];
  }
}

// The host's stage: TM rows and TN columns of row-major codes, decoded term by term as the GPU's
// shared-memory stage serves them (one output in `evaluate`; tiles in the tests).
template <int TM, int TN>
struct RowStage {
  template <int T>
  struct Codes {
    const uint8_t* rows[T];
    Fp8Format f;
    const int64_t* k0;
    QC_ACCUM_FN void load(int i, Term (&t)[T]) const {
      QC_UNROLL for (int r = 0; r < T; ++r) t[r] = decode(rows[r][*k0 + i], f);
    }
  };
  Codes<TM> row;
  Codes<TN> col;
  int64_t k0 = 0;
  // `a[r]`, `w[c]`: the K codes of row r and of column c.
  QC_ACCUM_FN RowStage(const uint8_t* const (&a)[TM], Fp8Format fa, const uint8_t* const (&w)[TN], Fp8Format fw) {
    QC_UNROLL for (int r = 0; r < TM; ++r) row.rows[r] = a[r];
    QC_UNROLL for (int c = 0; c < TN; ++c) col.rows[c] = w[c];
    row.f = fa, col.f = fw;
    row.k0 = col.k0 = &k0;
  }
  RowStage(const RowStage&) = delete;  // `row` and `col` point at this object's `k0`
  QC_ACCUM_FN void load(int64_t first, int /*count*/) { k0 = first; }
  QC_ACCUM_FN int count(int n) const { return n; }
  QC_ACCUM_FN const Codes<TM>& a() const { return row; }
  QC_ACCUM_FN const Codes<TN>& w() const { return col; }
};

// One output: `a`, `w` its row's and column's K codes. Requires applies(m) and k < kMaxK.
QC_ACCUM_FN float evaluate(const Fp8AccumModel& m, const uint8_t* a, Fp8Format fa, const uint8_t* w, Fp8Format fw,
                           int64_t k) {
  const uint8_t* const rows[1] = {a};
  const uint8_t* const cols[1] = {w};
  RowStage<1, 1> stage(rows, fa, cols, fw);
  float d[1][1];
  evaluate_tile<1, 1>(m, k, stage, d);
  return d[0][0];
}

}  // namespace qc::accum_fp32

#undef QC_UNROLL
