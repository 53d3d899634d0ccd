// The fast evaluation of the FP8 accumulation models (fp8_model_kernels.hpp), compiled once per
// Highway target (the `foreach_target.h` pattern) and selected at run time. Written from the model's
// definition in include/qconform/accumulation.hpp, independently of its scalar text; tests/unit/
// test_accumulation_model.cpp checks the two against each other bit for bit.
//
// Layouts: `af` [M,K] decoded operand values (fp32: FP8 values are fp32 values), `wp` column panels
// of kNR = 32 output channels, [panel][k][kNR] (zero-padded past N), outputs [M,N] fp32. Each lane
// of a vector is one output (m, n); the lanes advance through k together, so each dot product keeps
// exactly its declared order; independent dot products run side by side; nothing is reassociated.
// Built with `-ffp-contract=off` (no FMA contraction of `Mul` + `Add`). Codes are decoded once, through
// 256-entry tables made from the numeric core's rows (`tables`), never re-derived in lanes.
//
// Three kernels:
// - `SumPanel` (moved here from src/orchestrate/sweep.cpp): exact products summed in fp32, one rounding
//   per add (the fp32 sum models).
// - `ExactDotRows`: the exact model (e4m3 x e4m3, K <= 2^17): fp64 dot products along k on the
//   row-major operands (every product and partial sum exact, so the order is free).
// - `StepPanel`: models with rounded terms. Per step and lane, E is the max alignment exponent
//   (e(a)+e(b) from exponent tables, or the product's own fp64 exponent) and e(C); every term is
//   rounded to an integer multiple of 2^(E - term_bits) by Trunc/Round(x · 2^(term_bits - E)), which
//   is exact in fp64 (FP8 products have <= 8 significant bits, the scale is a power of two), and
//   these integers are < 2^(term_bits + 2), so the (step_k + 1)-term sum is an exact fp64 integer
//   (< 2^49 for term_bits <= 40, step_k <= 64). The step result is rounded relative to its own
//   exponent the same way. A promotion or split-K add is an fp32 add of two fp32 values done in fp64
//   and rounded once to fp32, which equals the fp32 add (p = 53 >= 2·24 + 2: double rounding of +
//   is innocuous, Figueroa 1995).

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "accum/fp8_model_kernels.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep

#include <hwy/highway.h>

#include <algorithm>
#include <cstdint>

#include "qconform/accumulation.hpp"

HWY_BEFORE_NAMESPACE();
namespace qc::fp8_kernels {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

inline constexpr int64_t kFp8NR = 32;    // output channels per packed panel
inline constexpr int64_t kFp8MR = 4;     // rows per register tile (SumPanel)
inline constexpr int64_t kFp8KC = 1024;  // k per pass over the rows (the panel slice stays in L2)

// Accumulates one column panel for all rows. `bounds` = {b0 = 0, b1, ..., b_r = K}: range j is
// [b_j, b_{j+1}), summed sequentially from +0 in T into `part`, then `total` = `total` + `part`.
// `part` and `total` are [Mpad][kFp8NR] with Mpad = M rounded up to kFp8MR; `total` starts 0.
template <typename T>
HWY_INLINE void SumPanelImpl(const float* HWY_RESTRICT af, int64_t M, int64_t K, const float* HWY_RESTRICT wp,
                             const int64_t* bounds, int64_t nranges, T* HWY_RESTRICT part, T* HWY_RESTRICT total) {
  const hn::ScalableTag<T> d;
  constexpr int64_t kL = static_cast<int64_t>(HWY_LANES(T));
  static_assert(kFp8NR % kL == 0, "the panel width must be a whole number of vectors");
  constexpr int64_t kNV = kFp8NR / kL;
  using V = decltype(hn::Zero(d));
  const int64_t mpad = (M + kFp8MR - 1) / kFp8MR * kFp8MR;
  auto load_w = [&](const float* p) -> V {
    if constexpr (sizeof(T) == 4) {
      return hn::LoadU(d, p);
    } else {
      const hn::Rebind<float, decltype(d)> df;
      return hn::PromoteTo(d, hn::LoadU(df, p));
    }
  };
  for (int64_t r = 0; r < nranges; ++r) {
    const int64_t k0 = bounds[r], k1 = bounds[r + 1];
    for (int64_t kb = k0; kb < k1 || (kb == k0 && k0 == k1); kb += kFp8KC) {
      const int64_t ke = std::min(k1, kb + kFp8KC);
      const bool first = kb == k0;
      for (int64_t m0 = 0; m0 < mpad; m0 += kFp8MR) {
        const float* arow[kFp8MR];
        for (int64_t i = 0; i < kFp8MR; ++i) arow[i] = af + std::min(m0 + i, M - 1) * K;
        V acc[kFp8MR][kNV];
        for (int64_t i = 0; i < kFp8MR; ++i) {
          for (int64_t v = 0; v < kNV; ++v) {
            acc[i][v] = first ? hn::Zero(d) : hn::LoadU(d, part + (m0 + i) * kFp8NR + v * kL);
          }
        }
        for (int64_t k = kb; k < ke; ++k) {
          V wv[kNV];
          for (int64_t v = 0; v < kNV; ++v) wv[v] = load_w(wp + k * kFp8NR + v * kL);
          for (int64_t i = 0; i < kFp8MR; ++i) {
            const V av = hn::Set(d, static_cast<T>(arow[i][k]));
            for (int64_t v = 0; v < kNV; ++v) acc[i][v] = hn::Add(acc[i][v], hn::Mul(av, wv[v]));
          }
        }
        for (int64_t i = 0; i < kFp8MR; ++i) {
          for (int64_t v = 0; v < kNV; ++v) hn::StoreU(acc[i][v], d, part + (m0 + i) * kFp8NR + v * kL);
        }
      }
      if (k0 == k1) break;
    }
    for (int64_t i = 0; i < mpad * kFp8NR; i += kL) {
      hn::StoreU(hn::Add(hn::LoadU(d, total + i), hn::LoadU(d, part + i)), d, total + i);
    }
  }
}

void SumPanelF32(const float* af, int64_t M, int64_t K, const float* wp, const int64_t* bounds, int64_t nranges,
                 float* part, float* total) {
  SumPanelImpl<float>(af, M, K, wp, bounds, nranges, part, total);
}

// kR rows of outputs against one column panel, for a model with rounded terms. `av[r]`, `ae[r]`:
// row r's K values and e(x) (zero codes: -4096); `wv`, `we`: the panel's [K][kFp8NR] values and
// exponents. `out[r]`: kFp8NR fp32 results of row r. All kR · kFp8NR / lanes vectors advance
// through k together (independent dependency chains side by side), and each panel value loaded is
// used by the kR rows (the panel streams from L2 once per kR rows).
template <int64_t kNV, int64_t kR>
HWY_INLINE void StepPanelImpl(const Fp8AccumModel& m, const double* const* av, const double* const* ae,
                              const float* HWY_RESTRICT wv, const float* HWY_RESTRICT we, int64_t K,
                              float* const* out) {
  const hn::ScalableTag<double> d;
  const hn::RebindToSigned<decltype(d)> di;
  const hn::Rebind<float, decltype(d)> df;
  using V = decltype(hn::Zero(d));
  constexpr int64_t kL = static_cast<int64_t>(HWY_LANES(double));
  const bool nearest_terms = m.term_rounding == AccumRounding::nearest_even;
  const bool nearest_result = m.result_rounding == AccumRounding::nearest_even;
  const bool sum_rule = m.alignment == AccumAlignment::exponent_sum;
  // A floor for E and e(x) far below every real exponent (>= -32) that keeps every 2^(±(bits - e))
  // below 2^1023 for bits <= 40: only all-zero lanes reach it, and 0 times a finite scale is 0.
  const V floor_e = hn::Set(d, -900.0);
  // 2^x for integer-valued x in [-1022, 1023].
  auto pow2 = [&](V x) { return hn::BitCast(d, hn::ShiftLeft<52>(hn::Add(hn::ConvertTo(di, x), hn::Set(di, 1023)))); };
  // floor(log2|x|) of a normal nonzero x (0 gives -1023).
  auto expo = [&](V x) {
    const auto bits = hn::And(hn::ShiftRight<52>(hn::BitCast(di, x)), hn::Set(di, 0x7FF));
    return hn::ConvertTo(d, hn::Sub(bits, hn::Set(di, 1023)));
  };
  auto round_int = [&](V x, bool nearest) { return nearest ? hn::Round(x) : hn::Trunc(x); };
  // x rounded to `bits` fraction bits relative to its own exponent (x exact in fp64).
  const V rbits = hn::Set(d, static_cast<double>(m.result_bits));
  auto round_rel = [&](V x) {
    const V e = hn::Max(expo(x), floor_e);
    return hn::Mul(round_int(hn::Mul(x, pow2(hn::Sub(rbits, e))), nearest_result), pow2(hn::Sub(e, rbits)));
  };
  auto fp32_add = [&](V x, V y) { return hn::PromoteTo(d, hn::DemoteTo(df, hn::Add(x, y))); };
  auto load_w = [&](const float* p) { return hn::PromoteTo(d, hn::LoadU(df, p)); };
  const V tbits = hn::Set(d, static_cast<double>(m.term_bits));
  const int64_t splits = m.splits;
  V total[kR][kNV], chain[kR][kNV], promoted[kR][kNV], e[kR][kNV], s[kR][kNV], up[kR][kNV];
  for (int64_t q = 0; q < kR; ++q) {
    for (int64_t v = 0; v < kNV; ++v) total[q][v] = hn::Zero(d);
  }
  for (int64_t r = 0; r < splits; ++r) {
    int64_t r0 = 0, r1 = 0;
    accum_model::split_range(m, K, r, r0, r1);
    for (int64_t q = 0; q < kR; ++q) {
      for (int64_t v = 0; v < kNV; ++v) chain[q][v] = promoted[q][v] = hn::Zero(d);
    }
    int64_t in_chain = 0;
    for (int64_t s0 = r0; s0 < r1; s0 += m.step_k) {
      const int64_t s1 = std::min<int64_t>(r1, s0 + m.step_k);
      // E: the chain value's exponent (C = 0 gives -1023) and the products' alignment exponents.
      for (int64_t q = 0; q < kR; ++q) {
        for (int64_t v = 0; v < kNV; ++v) e[q][v] = expo(chain[q][v]);
      }
      for (int64_t k = s0; k < s1; ++k) {
        for (int64_t v = 0; v < kNV; ++v) {
          if (sum_rule) {
            const V wek = load_w(we + k * kFp8NR + v * kL);
            for (int64_t q = 0; q < kR; ++q) e[q][v] = hn::Max(e[q][v], hn::Add(hn::Set(d, ae[q][k]), wek));
          } else {
            const V wvk = load_w(wv + k * kFp8NR + v * kL);
            for (int64_t q = 0; q < kR; ++q) e[q][v] = hn::Max(e[q][v], expo(hn::Mul(hn::Set(d, av[q][k]), wvk)));
          }
        }
      }
      for (int64_t q = 0; q < kR; ++q) {
        for (int64_t v = 0; v < kNV; ++v) {
          e[q][v] = hn::Max(e[q][v], floor_e);  // every term zero: any finite scale gives 0
          up[q][v] = pow2(hn::Sub(tbits, e[q][v]));
          s[q][v] = round_int(hn::Mul(chain[q][v], up[q][v]), nearest_terms);
        }
      }
      for (int64_t k = s0; k < s1; ++k) {
        for (int64_t v = 0; v < kNV; ++v) {
          const V wvk = load_w(wv + k * kFp8NR + v * kL);
          for (int64_t q = 0; q < kR; ++q) {
            const V p = hn::Mul(hn::Set(d, av[q][k]), wvk);  // exact
            s[q][v] = hn::Add(s[q][v], round_int(hn::Mul(p, up[q][v]), nearest_terms));
          }
        }
      }
      for (int64_t q = 0; q < kR; ++q) {
        for (int64_t v = 0; v < kNV; ++v) chain[q][v] = round_rel(hn::Mul(s[q][v], pow2(hn::Sub(e[q][v], tbits))));
      }
      if (m.promote_steps > 0 && ++in_chain == m.promote_steps) {
        for (int64_t q = 0; q < kR; ++q) {
          for (int64_t v = 0; v < kNV; ++v) {
            promoted[q][v] = fp32_add(promoted[q][v], chain[q][v]);
            chain[q][v] = hn::Zero(d);
          }
        }
        in_chain = 0;
      }
    }
    for (int64_t q = 0; q < kR; ++q) {
      for (int64_t v = 0; v < kNV; ++v) {
        if (m.promote_steps > 0) {
          if (in_chain > 0) promoted[q][v] = fp32_add(promoted[q][v], chain[q][v]);
          chain[q][v] = promoted[q][v];
        }
        total[q][v] = fp32_add(total[q][v], chain[q][v]);
      }
    }
  }
  for (int64_t q = 0; q < kR; ++q) {
    for (int64_t v = 0; v < kNV; ++v) hn::StoreU(hn::DemoteTo(df, total[q][v]), df, out[q] + v * kL);
  }
}

inline constexpr int64_t kStepRows = 2;  // rows per StepPanel call (StepPanel1: the odd last row)

void StepPanel(const Fp8AccumModel& m, const double* const* av, const double* const* ae, const float* wv,
               const float* we, int64_t K, float* const* out) {
  constexpr int64_t kL = static_cast<int64_t>(HWY_LANES(double));
  static_assert(kFp8NR % kL == 0, "the panel width must be a whole number of vectors");
  StepPanelImpl<kFp8NR / kL, kStepRows>(m, av, ae, wv, we, K, out);
}
void StepPanel1(const Fp8AccumModel& m, const double* const* av, const double* const* ae, const float* wv,
                const float* we, int64_t K, float* const* out) {
  constexpr int64_t kL = static_cast<int64_t>(HWY_LANES(double));
  StepPanelImpl<kFp8NR / kL, 1>(m, av, ae, wv, we, K, out);
}

// The exact sum of `exact_f64`: out[i][j] = sum_k a[i][k]·w[j][k] for i < M, j < nw, `a` [M][K]
// and `w` [nw][K] fp64 values, out [M][ldo] fp64. Every product and every partial sum is exact
// (the caller's bound), so any order gives the same value: lanes run along k (the operands' own
// row-major layout, no transposition), a 4 x 4 register tile of outputs, a horizontal sum at the end.
inline constexpr int64_t kExactTile = 4;
void ExactDotRows(const double* HWY_RESTRICT a, int64_t M, const double* HWY_RESTRICT w, int64_t nw, int64_t K,
                  double* HWY_RESTRICT out, int64_t ldo) {
  const hn::ScalableTag<double> d;
  using V = decltype(hn::Zero(d));
  const int64_t kL = static_cast<int64_t>(hn::Lanes(d));
  const int64_t kv = K / kL * kL;
  for (int64_t i0 = 0; i0 < M; i0 += kExactTile) {
    const double* ar[kExactTile];
    for (int64_t i = 0; i < kExactTile; ++i) ar[i] = a + std::min(i0 + i, M - 1) * K;
    for (int64_t j0 = 0; j0 < nw; j0 += kExactTile) {
      const double* wr[kExactTile];
      for (int64_t j = 0; j < kExactTile; ++j) wr[j] = w + std::min(j0 + j, nw - 1) * K;
      V acc[kExactTile][kExactTile];
      for (auto& row : acc) {
        for (auto& v : row) v = hn::Zero(d);
      }
      for (int64_t k = 0; k < kv; k += kL) {
        V wv[kExactTile];
        for (int64_t j = 0; j < kExactTile; ++j) wv[j] = hn::LoadU(d, wr[j] + k);
        for (int64_t i = 0; i < kExactTile; ++i) {
          const V av = hn::LoadU(d, ar[i] + k);
          // MulAdd: the product is exact in fp64, so fused or not gives the same sum.
          for (int64_t j = 0; j < kExactTile; ++j) acc[i][j] = hn::MulAdd(av, wv[j], acc[i][j]);
        }
      }
      for (int64_t i = 0; i < kExactTile && i0 + i < M; ++i) {
        for (int64_t j = 0; j < kExactTile && j0 + j < nw; ++j) {
          double s = hn::GetLane(hn::SumOfLanes(d, acc[i][j]));
          for (int64_t k = kv; k < K; ++k) s += ar[i][k] * wr[j][k];
          out[(i0 + i) * ldo + j0 + j] = s;
        }
      }
    }
  }
}

int64_t TargetOf() { return HWY_TARGET; }

}  // namespace HWY_NAMESPACE
}  // namespace qc::fp8_kernels
HWY_AFTER_NAMESPACE();

#if HWY_ONCE

#include <array>
#include <memory>

#include "accum/fp8_model_kernels.hpp"
#include "core/parallel.hpp"
#include "qconform/numerics.hpp"

namespace qc::fp8_kernels {

HWY_EXPORT(SumPanelF32);
HWY_EXPORT(StepPanel);
HWY_EXPORT(StepPanel1);
HWY_EXPORT(TargetOf);
HWY_EXPORT(ExactDotRows);

namespace {

constexpr int64_t kNR = HWY_NAMESPACE::kFp8NR;
constexpr int64_t kMR = HWY_NAMESPACE::kFp8MR;

// code -> fp32 value (exact) and e(x) (zero codes: -4096, so that e(a)+e(b) of a zero product is
// below every real exponent), from the numeric core's rows: the one decoding of a code. Finite codes
// only (validated by the callers).
struct Tables {
  std::array<float, 256> value, exponent;
};
const Tables& tables(Fp8Format f) {
  static const auto make = [](Fp8Format fmt) {
    Tables t{};
    for (int b = 0; b < 256; ++b) {
      const auto c = static_cast<uint8_t>(b);
      t.value[static_cast<size_t>(b)] = fmt == Fp8Format::e4m3 ? e4m3fn_to_f32(c) : e5m2_to_f32(c);
      t.exponent[static_cast<size_t>(b)] = accum_model::fp8_code_zero(c) ? -4096.0f : static_cast<float>(accum_model::fp8_exponent(c, fmt));
    }
    return t;
  };
  static const Tables e4 = make(Fp8Format::e4m3), e5 = make(Fp8Format::e5m2);
  return f == Fp8Format::e4m3 ? e4 : e5;
}

// Codes -> fp64 values (exact), through the same table.
void decode_f64(const uint8_t* src, int64_t count, Fp8Format f, double* value) {
  const Tables& t = tables(f);
  for (int64_t i = 0; i < count; ++i) value[i] = t.value[src[i]];
}

void decode(const uint8_t* src, int64_t count, Fp8Format f, float* value, float* exponent) {
  const Tables& t = tables(f);
  for (int64_t i = 0; i < count; ++i) {
    value[i] = t.value[src[i]];
    if (exponent != nullptr) exponent[i] = t.exponent[src[i]];
  }
}

// Panel p of w [N,K] -> [k][kNR] values (and exponents), zero-padded past N; reads kNR rows
// of w, each sequentially.
void pack_panel(const Fp8Gemm& g, int64_t p, float* value, float* exponent) {
  const Tables& t = tables(g.w_format);
  const int64_t k = g.s.k;
  const int64_t cols = std::min(kNR, g.s.n - p * kNR);
  // In slices of kSlice k: a slice of the panel (kSlice·kNR floats per array) stays in L1 while
  // the kNR rows write their columns into it (whole-K columns would miss the cache on every write).
  constexpr int64_t kSlice = 64;
  for (int64_t k0 = 0; k0 < k; k0 += kSlice) {
    const int64_t k1 = std::min(k, k0 + kSlice);
    for (int64_t c = 0; c < kNR; ++c) {
      const uint8_t* row = g.w + (p * kNR + std::min(c, cols - 1)) * k;
      const bool pad = c >= cols;
      for (int64_t i = k0; i < k1; ++i) {
        const size_t at = static_cast<size_t>(i * kNR + c);
        value[at] = pad ? 0.0f : t.value[row[i]];
        if (exponent != nullptr) exponent[at] = pad ? 0.0f : t.exponent[row[i]];
      }
    }
  }
}

void run_sum(const Fp8Gemm& g, const std::vector<int64_t>& bounds, float* d, int threads) {
  const AccumShape s = g.s;
  std::vector<float> af(static_cast<size_t>(s.m * s.k));
  decode(g.a, s.m * s.k, g.a_format, af.data(), nullptr);
  const int64_t panels = (s.n + kNR - 1) / kNR;
  const int64_t mpad = (s.m + kMR - 1) / kMR * kMR;
  parallel_for(panels, threads, [&](int64_t p) {
    thread_local std::vector<float> panel;  // one per worker thread; pack_panel writes every element
    panel.resize(std::max(panel.size(), static_cast<size_t>(s.k * kNR)));
    pack_panel(g, p, panel.data(), nullptr);
    std::vector<float> part(static_cast<size_t>(mpad * kNR)), total(static_cast<size_t>(mpad * kNR), 0.0f);
    const int64_t nranges = static_cast<int64_t>(bounds.size()) - 1;
    HWY_DYNAMIC_DISPATCH(SumPanelF32)(af.data(), s.m, s.k, panel.data(), bounds.data(), nranges, part.data(), total.data());
    const int64_t cols = std::min(kNR, s.n - p * kNR);
    for (int64_t i = 0; i < s.m; ++i) {
      for (int64_t j = 0; j < cols; ++j) {
        d[i * s.n + p * kNR + j] = total[static_cast<size_t>(i * kNR + j)];
      }
    }
  });
}

}  // namespace

void sum_panels(const Fp8Gemm& g, const std::vector<int64_t>& bounds, float* d, int threads) {
  if (g.s.m == 0 || g.s.n == 0) return;
  run_sum(g, bounds, d, threads);
}

void step_panels(const Fp8AccumModel& m, const Fp8Gemm& g, float* d, int threads) {
  const AccumShape s = g.s;
  if (s.m == 0 || s.n == 0) return;
  const Tables& ta = tables(g.a_format);
  std::vector<double> av(static_cast<size_t>(s.m * s.k)), ae(av.size());
  for (size_t i = 0; i < av.size(); ++i) {
    av[i] = ta.value[g.a[i]];
    ae[i] = ta.exponent[g.a[i]];
  }
  const int64_t panels = (s.n + kNR - 1) / kNR;
  // Threads over panels (each packs its own panel once, cache-local); a single panel is shared
  // out by rows instead.
  // Rows in groups of kStepRows (the panel is read once per group), an odd last row alone.
  constexpr int64_t kRows = HWY_NAMESPACE::kStepRows;
  auto run_panel_rows = [&](int64_t p, const float* wv, const float* we, int64_t i0, int64_t i1) {
    float out[kRows][kNR];
    const int64_t cols = std::min(kNR, s.n - p * kNR);
    for (int64_t i = i0; i < i1; i += kRows) {
      const int64_t rows = std::min(kRows, i1 - i);
      const double* ar[kRows];
      const double* er[kRows];
      float* outs[kRows];
      for (int64_t q = 0; q < kRows; ++q) {
        ar[q] = av.data() + (i + std::min(q, rows - 1)) * s.k;
        er[q] = ae.data() + (i + std::min(q, rows - 1)) * s.k;
        outs[q] = out[q];
      }
      if (rows == kRows) {
        HWY_DYNAMIC_DISPATCH(StepPanel)(m, ar, er, wv, we, s.k, outs);
      } else {
        HWY_DYNAMIC_DISPATCH(StepPanel1)(m, ar, er, wv, we, s.k, outs);
      }
      for (int64_t q = 0; q < rows; ++q) {
        for (int64_t j = 0; j < cols; ++j) d[(i + q) * s.n + p * kNR + j] = out[q][j];
      }
    }
  };
  if (panels >= resolve_threads(threads) || s.m == 1) {
    parallel_for(panels, threads, [&](int64_t p) {
      // One buffer pair per worker thread (pack_panel writes every element).
      thread_local std::vector<float> wv, we;
      wv.resize(std::max(wv.size(), static_cast<size_t>(s.k * kNR)));
      we.resize(wv.size());
      pack_panel(g, p, wv.data(), we.data());
      run_panel_rows(p, wv.data(), we.data(), 0, s.m);
    });
  } else {
    for (int64_t p = 0; p < panels; ++p) {
      std::vector<float> wv(static_cast<size_t>(s.k * kNR)), we(wv.size());
      pack_panel(g, p, wv.data(), we.data());
      parallel_for((s.m + kRows - 1) / kRows, threads, [&](int64_t g) {
        run_panel_rows(p, wv.data(), we.data(), g * kRows, std::min(s.m, (g + 1) * kRows));
      });
    }
  }
}

void exact_e4m3(const Fp8Gemm& g, float* d, int threads) {
  const AccumShape s = g.s;
  if (s.m == 0 || s.n == 0) return;
  const std::unique_ptr<double[]> av(new double[static_cast<size_t>(s.m * s.k)]);  // written in full below
  decode_f64(g.a, s.m * s.k, g.a_format, av.get());
  // Blocks of w rows: each worker decodes its rows (contiguous, a table lookup) and dots them with
  // every row of a; kRows keeps the decoded block and a's rows in L2 for K up to a few thousand.
  constexpr int64_t kRows = 8;
  const int64_t blocks = (s.n + kRows - 1) / kRows;
  parallel_for(blocks, threads, [&](int64_t b) {
    const int64_t j0 = b * kRows, nw = std::min(kRows, s.n - j0);
    // One buffer per worker thread (every element is written before it is read).
    thread_local std::vector<double> wv, out;
    wv.resize(static_cast<size_t>(std::max(wv.size(), static_cast<size_t>(kRows * s.k))));
    out.resize(static_cast<size_t>(std::max(out.size(), static_cast<size_t>(s.m * kRows))));
    decode_f64(g.w + j0 * s.k, nw * s.k, g.w_format, wv.data());
    HWY_DYNAMIC_DISPATCH(ExactDotRows)(av.get(), s.m, wv.data(), nw, s.k, out.data(), nw);
    for (int64_t i = 0; i < s.m; ++i) {
      // fp64 -> fp32: the one rounding (to nearest even) of the exact sum.
      for (int64_t j = 0; j < nw; ++j) d[i * s.n + j0 + j] = static_cast<float>(out[static_cast<size_t>(i * nw + j)]);
    }
  });
}

const char* target_name() { return hwy::TargetName(HWY_DYNAMIC_DISPATCH(TargetOf)()); }

}  // namespace qc::fp8_kernels

#endif  // HWY_ONCE
