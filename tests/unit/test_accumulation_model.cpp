// FP8 accumulation models (include/qconform/accumulation.hpp, src/accum/fp8_model.hpp): the fast
// evaluation equals the scalar reference bit for bit on many shapes and operand distributions;
// hand-derived cases from ../shared/reference/fp8-accumulation.md pin each rule of the Hopper
// model; the fp32 models equal plain fp32 summation (the range sums and the exact model against sums
// the test writes itself: tests/unit/test_fp8_model_sums.cpp).
//
//   cmake --build build -j2 --target qconform_unit_tests &&
//   ./build/tests/qconform_unit_tests --gtest_filter='AccumulationModel*'
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "accum/fp8_model.hpp"
#include "accum/fp8_model_fp32.hpp"
#include "accum/fp8_model_fp64.hpp"
#include "checks/verify.hpp"
#include "synth/synth.hpp"
#include "qconform/arm.hpp"
#include "qconform/epilogue.hpp"
#include "qconform/error.hpp"
#include "qconform/numerics.hpp"
#include "fp8_model_pairs.hpp"

namespace {

using qc::AccumAlignment;
using qc::AccumRounding;
using qc::Fp8AccumModel;
using qc::Fp8Format;
using qc::Fp8Gemm;
using qc::f32_bits;

const char* fmt_name(Fp8Format f) { return f == Fp8Format::e4m3 ? "e4m3" : "e5m2"; }

bool finite_code(uint8_t c, Fp8Format f) { return qc::accum_model::fp8_code_finite(c, f); }

enum class Dist { uniform, subnormal_heavy, cancellation, all_max };
const char* dist_name(Dist d) {
  switch (d) {
    case Dist::uniform: return "uniform";
    case Dist::subnormal_heavy: return "subnormal-heavy";
    case Dist::cancellation: return "cancellation-heavy";
    case Dist::all_max: return "all-max";
  }
  return "?";
}

// Random finite codes of format `f` for a [rows, k] operand.
std::vector<uint8_t> codes(std::mt19937_64& rng, int64_t rows, int64_t k, Fp8Format f, Dist dist, bool is_w) {
  std::vector<uint8_t> v(static_cast<size_t>(rows * k));
  const uint8_t max_code = f == Fp8Format::e4m3 ? 0x7E : 0x7B;
  const int mant_bits = f == Fp8Format::e4m3 ? 3 : 2;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t i = 0; i < k; ++i) {
      uint8_t c = 0;
      switch (dist) {
        case Dist::uniform:
          do c = static_cast<uint8_t>(rng()); while (!finite_code(c, f));
          break;
        case Dist::subnormal_heavy: {
          // exponent field 0 (subnormal or zero) or 1 (the smallest normal binade)
          const uint8_t e = static_cast<uint8_t>(rng() % 2);
          c = static_cast<uint8_t>((e << mant_bits) | (rng() & ((1u << mant_bits) - 1)) | ((rng() & 1) << 7));
          break;
        }
        case Dist::cancellation: {
          // w: random magnitudes; a: +x on even k, -x on odd k (the same magnitude): sums cancel
          // to small values, where the alignment to the largest term matters most.
          if (is_w) {
            do c = static_cast<uint8_t>(rng()); while (!finite_code(c, f));
          } else {
            const uint64_t pair = (static_cast<uint64_t>(r) * 1000003u + static_cast<uint64_t>(i / 2)) * 0x9E3779B97F4A7C15ull;
            c = static_cast<uint8_t>((pair >> 40) % (max_code + 1));
            if (i % 2) c |= 0x80;
          }
          break;
        }
        case Dist::all_max: c = static_cast<uint8_t>(max_code | ((rng() & 1) << 7)); break;
      }
      v[static_cast<size_t>(r * k + i)] = c;
    }
  }
  return v;
}

std::vector<std::pair<std::string, Fp8AccumModel>> models_under_test() {
  std::vector<std::pair<std::string, Fp8AccumModel>> v;
  for (const auto& r : qc::fp8_accumulation_models()) v.emplace_back(r.name, r.model);
  for (const char* n : {"blocked-7", "blocked-128", "split-k-3", "split-k-1"}) v.emplace_back(n, qc::fp8_accumulation_model(n).model);
  Fp8AccumModel m = qc::fp8_accumulation_model("hopper-fp8-chain").model;
  m.term_rounding = AccumRounding::nearest_even;
  v.emplace_back("hopper terms rn", m);
  m = qc::fp8_accumulation_model("hopper-fp8-chain").model;
  m.result_rounding = AccumRounding::nearest_even;
  m.alignment = AccumAlignment::exact_exponent;
  v.emplace_back("hopper result rn, exact exponent", m);
  m = qc::fp8_accumulation_model("hopper-fp8-promote4").model;
  m.step_k = 16;
  m.term_bits = 22;
  m.result_bits = 20;
  m.splits = 3;
  v.emplace_back("k16 t22 r20 promote4 split3", m);
  m.split_granule = 5;  // uneven ranges of ceil(K/15)*5, trailing ones empty at small K
  v.emplace_back("k16 t22 r20 promote4 split3 granule5", m);
  for (const char* n : {"hopper-fp8-chain-splitk-3", "hopper-fp8-promote4-splitk-6"}) {
    v.emplace_back(n, qc::fp8_accumulation_model(n).model);
  }
  m = qc::fp8_accumulation_model("sequential").model;
  m.splits = 4;
  m.split_granule = 3;
  v.emplace_back("sequential split4 granule3", m);
  m = qc::fp8_accumulation_model("hopper-fp8-chain").model;
  m.term_bits = 0;
  m.result_bits = 1;
  m.step_k = 64;
  v.emplace_back("k64 t0 r1", m);
  // Interleaved steps (the fast path gathers each range's codes in step order): partial pairs, split-K
  // with uneven and empty ranges, promotion across pairs, exact terms.
  m = qc::fp8_accumulation_model("sm90-mma-sync-e4m3").model;
  m.splits = 3;
  m.split_granule = 5;
  v.emplace_back("mma-sync split3 granule5", m);
  m = qc::fp8_accumulation_model("hopper-fp8-promote4").model;
  m.step_k = 8;
  m.interleave = 1;
  m.promote_steps = 3;
  m.term_rounding = AccumRounding::nearest_even;
  v.emplace_back("k8 interleave1 promote3 terms rn", m);
  m = qc::fp8_accumulation_model("sequential").model;
  m.step_k = 4;
  m.interleave = 4;
  m.splits = 2;
  v.emplace_back("exact terms k4 interleave4 split2", m);
  return v;
}

// Compares the fast evaluation with the reference on one case; reports the first mismatches.
void expect_same(const std::string& model_name, const Fp8AccumModel& m, const Fp8Gemm& g, const std::string& what) {
  std::vector<float> want(static_cast<size_t>(g.s.m * g.s.n)), got(want.size());
  qc::fp8_model_reference(m, g, want.data());
  qc::fp8_model_evaluate(m, g, got.data(), 2);
  int reported = 0;
  int64_t bad = 0;
  for (int64_t i = 0; i < g.s.m; ++i) {
    for (int64_t j = 0; j < g.s.n; ++j) {
      const size_t x = static_cast<size_t>(i * g.s.n + j);
      if (f32_bits(want[x]) == f32_bits(got[x])) continue;
      ++bad;
      if (reported++ < 3) {
        ADD_FAILURE() << fmt::format("model `{}` ({}, {}): d[{},{}]: reference {} ({:#010x}), fast {} ({:#010x})",
                                     model_name, what, qc::fast_path_name(qc::fp8_fast_path(m, g)), i, j, want[x],
                                     f32_bits(want[x]), got[x], f32_bits(got[x]));
      }
    }
  }
  EXPECT_EQ(bad, 0) << model_name << " " << what;
}

TEST(AccumulationModel, FastEqualsReferenceOnRandomShapes) {
  std::mt19937_64 rng(20261201);
  const std::vector<std::array<int64_t, 3>> shapes{{1, 1, 1}, {3, 37, 1}, {2, 33, 31}, {5, 40, 33}, {4, 64, 100},
                                                   {3, 35, 257}, {2, 32, 520}};
  const std::pair<Fp8Format, Fp8Format> formats[] = {{Fp8Format::e4m3, Fp8Format::e4m3},
                                                      {Fp8Format::e5m2, Fp8Format::e4m3},
                                                      {Fp8Format::e4m3, Fp8Format::e5m2},
                                                      {Fp8Format::e5m2, Fp8Format::e5m2}};
  int64_t cases = 0;
  for (const auto& [name, m] : models_under_test()) {
    for (const auto& [fa, fw] : formats) {
      for (Dist dist : {Dist::uniform, Dist::subnormal_heavy, Dist::cancellation, Dist::all_max}) {
        for (const auto& sh : shapes) {
          if (m.splits > sh[2]) continue;
          const auto a = codes(rng, sh[0], sh[2], fa, dist, false);
          const auto w = codes(rng, sh[1], sh[2], fw, dist, true);
          const Fp8Gemm g{a.data(), fa, w.data(), fw, {sh[0], sh[1], sh[2]}};
          expect_same(name, m, g,
                      fmt::format("{} x {}, {}, M={} N={} K={}", fmt_name(fa), fmt_name(fw), dist_name(dist), sh[0],
                                  sh[1], sh[2]));
          ++cases;
        }
      }
    }
  }
  EXPECT_GT(cases, 1000);
}

// The reference's outputs for one case, and the check of another evaluation's output (i, j) against
// them, bitwise, counting every output and reporting the first three mismatches with bit patterns.
struct ReferenceCheck {
  ReferenceCheck(const Fp8AccumModel& m, const Fp8Gemm& g, std::string what, const char* evaluation, int64_t* outputs,
                 int64_t* bad)
      : want(static_cast<size_t>(g.s.m * g.s.n)), n(g.s.n), what(std::move(what)), evaluation(evaluation),
        outputs(outputs), bad(bad) {
    qc::fp8_model_reference(m, g, want.data());
  }
  void operator()(int64_t i, int64_t j, float got, const char* how) const {
    const float ref = want[static_cast<size_t>(i * n + j)];
    ++*outputs;
    if (f32_bits(got) == f32_bits(ref)) return;
    if ((*bad)++ < 3) {
      ADD_FAILURE() << fmt::format("{}: d[{},{}]: reference {} ({:#010x}), {} {} {} ({:#010x})", what, i, j, ref,
                                   f32_bits(ref), evaluation, how, got, f32_bits(got));
    }
  }
  std::vector<float> want;
  int64_t n;
  std::string what;
  const char* evaluation;
  int64_t* outputs;
  int64_t* bad;
};

// The per-output fp64 evaluation (accum/fp8_model_fp64.hpp: the text the GPU kernel compiles)
// equals the reference bit for bit, reading `w` transposed ([K][N], stride N) as the kernel does.
TEST(AccumulationModel, PerOutputFp64EvaluationEqualsReference) {
  std::mt19937_64 rng(20261202);
  const std::vector<std::array<int64_t, 3>> shapes{{1, 1, 1}, {3, 5, 31}, {2, 7, 129}, {2, 3, 520}, {4, 16, 300}};
  const std::pair<Fp8Format, Fp8Format> formats[] = {{Fp8Format::e4m3, Fp8Format::e4m3},
                                                      {Fp8Format::e5m2, Fp8Format::e4m3},
                                                      {Fp8Format::e5m2, Fp8Format::e5m2}};
  int64_t outputs = 0, bad = 0;
  for (const auto& [name, m] : models_under_test()) {
    for (const auto& [fa, fw] : formats) {
      for (Dist dist : {Dist::uniform, Dist::subnormal_heavy, Dist::cancellation, Dist::all_max}) {
        for (const auto& sh : shapes) {
          const int64_t M = sh[0], N = sh[1], K = sh[2];
          const qc::accum_fp64::Path path = qc::accum_fp64::path_of(m, fa, fw, K);
          if (m.splits > K || path == qc::accum_fp64::Path::reference) continue;
          const auto a = codes(rng, M, K, fa, dist, false);
          const auto w = codes(rng, N, K, fw, dist, true);
          std::vector<uint8_t> wt(w.size());  // [K][N]
          for (int64_t j = 0; j < N; ++j) {
            for (int64_t k = 0; k < K; ++k) wt[static_cast<size_t>(k * N + j)] = w[static_cast<size_t>(j * K + k)];
          }
          const ReferenceCheck check{m, Fp8Gemm{a.data(), fa, w.data(), fw, {M, N, K}},
                                     fmt::format("model `{}` ({} x {}, {}, M={} N={} K={})", name, fmt_name(fa),
                                                 fmt_name(fw), dist_name(dist), M, N, K),
                                     "per-output fp64", &outputs, &bad};
          using qc::accum_fp64::Strided;
          for (int64_t i = 0; i < M; ++i) {
            for (int64_t j = 0; j < N; ++j) {
              check(i, j, qc::accum_fp64::evaluate(m, path, Strided{a.data() + i * K, 1}, fa, Strided{wt.data() + j, N},
                                                   fw, K),
                    "(one output)");
            }
          }
          // 2 x 3 tiles (the GPU's register tiles), rows and columns past the edge clamped.
          for (int64_t i0 = 0; i0 < M; i0 += 2) {
            for (int64_t j0 = 0; j0 < N; j0 += 3) {
              Strided ar[2], wc[3];
              for (int64_t r = 0; r < 2; ++r) ar[r] = Strided{a.data() + std::min(i0 + r, M - 1) * K, 1};
              for (int64_t c = 0; c < 3; ++c) wc[c] = Strided{wt.data() + std::min(j0 + c, N - 1), N};
              float tile[6];
              qc::accum_fp64::evaluate_tile<2, 3>(m, path, ar, fa, wc, fw, K, tile);
              for (int64_t r = 0; r < 2 && i0 + r < M; ++r) {
                for (int64_t c = 0; c < 3 && j0 + c < N; ++c) check(i0 + r, j0 + c, tile[r * 3 + c], "(2x3 tile)");
              }
            }
          }
        }
      }
    }
  }
  EXPECT_EQ(bad, 0);
  EXPECT_GT(outputs, 20000);
}

// `eval(stage, i0, j0)` for every 2 x 3 tile of the M x N outputs of a [M][K] and w [N][K] (rows and columns
// past the edge clamped for reading), `stage` the host's stage over the tile's rows and columns.
template <class F>
void for_each_2x3_tile(const std::vector<uint8_t>& a, Fp8Format fa, const std::vector<uint8_t>& w, Fp8Format fw,
                       int64_t M, int64_t N, int64_t K, F&& eval) {
  for (int64_t i0 = 0; i0 < M; i0 += 2) {
    for (int64_t j0 = 0; j0 < N; j0 += 3) {
      const uint8_t* rows[2];
      const uint8_t* cols[3];
      for (int64_t r = 0; r < 2; ++r) rows[r] = a.data() + std::min(i0 + r, M - 1) * K;
      for (int64_t c = 0; c < 3; ++c) cols[c] = w.data() + std::min(j0 + c, N - 1) * K;
      qc::accum_fp32::RowStage<2, 3> stage(rows, fa, cols, fw);
      eval(stage, i0, j0);
    }
  }
}

// The stepped models in fp32 (accum/fp8_model_fp32.hpp: the text the GPU's fast kernel compiles) equal
// the reference bit for bit wherever `applies` accepts the model, one output at a time and in 2 x 3
// tiles; and `applies` accepts the named Hopper models (the ones verify evaluates on the GPU).
TEST(AccumulationModel, PerOutputFp32EvaluationEqualsReference) {
  for (const char* n : {"hopper-fp8-chain", "hopper-fp8-promote4", "hopper-fp8-chain-splitk-3",
                        "hopper-fp8-promote4-splitk-8"}) {
    EXPECT_TRUE(qc::accum_fp32::applies(qc::fp8_accumulation_model(n).model)) << n;
    EXPECT_TRUE(qc::accum_fp32::gpu_kernel_takes(qc::fp8_accumulation_model(n).model, 8192)) << n;
    // K bounds e(C), and so the grid factor's exponent (the header's argument): the kernel refuses K >= 2^31.
    EXPECT_TRUE(qc::accum_fp32::gpu_kernel_takes(qc::fp8_accumulation_model(n).model, qc::accum_fp32::kMaxK - 128)) << n;
    EXPECT_FALSE(qc::accum_fp32::gpu_kernel_takes(qc::fp8_accumulation_model(n).model, qc::accum_fp32::kMaxK)) << n;
  }
  auto models = models_under_test();
  for (int promote : {1, 3}) {
    Fp8AccumModel m = qc::fp8_accumulation_model("hopper-fp8-promote4").model;
    m.promote_steps = promote;
    m.term_rounding = m.result_rounding = AccumRounding::nearest_even;
    models.emplace_back(fmt::format("promote{} rn", promote), m);
  }
  Fp8AccumModel wide = qc::fp8_accumulation_model("hopper-fp8-chain").model;
  wide.term_bits = 16;  // (32 + 1) * 2^18 <= 2^24: the widest grid a 32-term step keeps exact in fp32
  models.emplace_back("chain t16", wide);
  wide.term_bits = 17;
  EXPECT_FALSE(qc::accum_fp32::applies(wide)) << "a 32-term step on a 2^-17 grid can pass 2^24";
  std::mt19937_64 rng(20261206);
  const std::vector<std::array<int64_t, 3>> shapes{{1, 1, 1}, {3, 5, 31}, {2, 7, 129}, {2, 3, 520}, {4, 16, 300}};
  const std::pair<Fp8Format, Fp8Format> formats[] = {{Fp8Format::e4m3, Fp8Format::e4m3},
                                                      {Fp8Format::e5m2, Fp8Format::e4m3},
                                                      {Fp8Format::e5m2, Fp8Format::e5m2}};
  int64_t outputs = 0, bad = 0, models_run = 0;
  for (const auto& [name, m] : models) {
    if (!qc::accum_fp32::applies(m)) continue;
    ++models_run;
    for (const auto& [fa, fw] : formats) {
      for (Dist dist : {Dist::uniform, Dist::subnormal_heavy, Dist::cancellation, Dist::all_max}) {
        for (const auto& sh : shapes) {
          const int64_t M = sh[0], N = sh[1], K = sh[2];
          if (m.splits > K && m.split_granule == 0) continue;
          const auto a = codes(rng, M, K, fa, dist, false);
          const auto w = codes(rng, N, K, fw, dist, true);
          const ReferenceCheck check{m, Fp8Gemm{a.data(), fa, w.data(), fw, {M, N, K}},
                                     fmt::format("model `{}` ({} x {}, {}, M={} N={} K={})", name, fmt_name(fa),
                                                 fmt_name(fw), dist_name(dist), M, N, K),
                                     "fp32 evaluation", &outputs, &bad};
          for (int64_t i = 0; i < M; ++i) {
            for (int64_t j = 0; j < N; ++j) {
              check(i, j, qc::accum_fp32::evaluate(m, a.data() + i * K, fa, w.data() + j * K, fw, K), "(one output)");
            }
          }
          for_each_2x3_tile(a, fa, w, fw, M, N, K, [&](qc::accum_fp32::RowStage<2, 3>& stage, int64_t i0, int64_t j0) {
            float tile[2][3];
            qc::accum_fp32::evaluate_tile<2, 3>(m, K, stage, tile);
            for (int64_t r = 0; r < 2 && i0 + r < M; ++r) {
              for (int64_t c = 0; c < 3 && j0 + c < N; ++c) check(i0 + r, j0 + c, tile[r][c], "(2x3 tile)");
            }
          });
        }
      }
    }
  }
  EXPECT_EQ(bad, 0);
  EXPECT_GE(models_run, 8);
  EXPECT_GT(outputs, 20000);
}

// Two models that run the same steps (`same_steps`: they differ only in their promotion) evaluated in one
// pass over the products (`evaluate_tile` with P = 2, what the GPU kernel runs for the Hopper pair) give
// each model's reference bit for bit; and `same_steps` refuses pairs whose steps differ.
TEST(AccumulationModel, PairedFp32EvaluationEqualsReference) {
  using qc::accum_fp32::same_steps;
  const Fp8AccumModel chain = qc::fp8_accumulation_model("hopper-fp8-chain").model;
  const Fp8AccumModel promote4 = qc::fp8_accumulation_model("hopper-fp8-promote4").model;
  EXPECT_TRUE(same_steps(promote4, chain)) << "the cuBLASLt FP8 pair";
  EXPECT_TRUE(same_steps(qc::fp8_accumulation_model("hopper-fp8-promote4-splitk-8").model,
                         qc::fp8_accumulation_model("hopper-fp8-chain-splitk-8").model));
  EXPECT_FALSE(same_steps(qc::fp8_accumulation_model("hopper-fp8-promote4-splitk-8").model, chain)) << "splits differ";
  Fp8AccumModel other = chain;
  other.term_rounding = AccumRounding::nearest_even;
  EXPECT_FALSE(same_steps(chain, other)) << "term rounding differs";
  other = chain, other.step_k = 16;
  EXPECT_FALSE(same_steps(chain, other)) << "step differs";
  other = chain, other.result_bits = 12;
  EXPECT_FALSE(same_steps(chain, other)) << "result bits differ";
  EXPECT_FALSE(same_steps(chain, qc::fp8_accumulation_model("blocked-128").model)) << "not a model applies takes";

  const auto pairs = qc::test::paired_models();
  std::mt19937_64 rng(20261207);
  const std::vector<std::array<int64_t, 3>> shapes{{1, 1, 1}, {3, 5, 31}, {2, 7, 129}, {2, 3, 520}, {4, 16, 300}};
  const std::pair<Fp8Format, Fp8Format> formats[] = {{Fp8Format::e4m3, Fp8Format::e4m3},
                                                      {Fp8Format::e5m2, Fp8Format::e4m3},
                                                      {Fp8Format::e5m2, Fp8Format::e5m2}};
  int64_t outputs = 0, bad = 0;
  for (const auto& [name, pair] : pairs) {
    ASSERT_TRUE(same_steps(pair[0], pair[1])) << name;
    for (const auto& [fa, fw] : formats) {
      for (Dist dist : {Dist::uniform, Dist::subnormal_heavy, Dist::cancellation, Dist::all_max}) {
        for (const auto& sh : shapes) {
          const int64_t M = sh[0], N = sh[1], K = sh[2];
          if (pair[0].splits > K && pair[0].split_granule == 0) continue;
          const auto a = codes(rng, M, K, fa, dist, false);
          const auto w = codes(rng, N, K, fw, dist, true);
          const Fp8Gemm g{a.data(), fa, w.data(), fw, {M, N, K}};
          const std::string what = fmt::format("pair `{}` ({} x {}, {}, M={} N={} K={})", name, fmt_name(fa),
                                               fmt_name(fw), dist_name(dist), M, N, K);
          const ReferenceCheck check[2] = {{pair[0], g, what + " first model", "paired fp32 evaluation", &outputs, &bad},
                                           {pair[1], g, what + " second model", "paired fp32 evaluation", &outputs, &bad}};
          const Fp8AccumModel* const models[2] = {&pair[0], &pair[1]};
          for_each_2x3_tile(a, fa, w, fw, M, N, K, [&](qc::accum_fp32::RowStage<2, 3>& stage, int64_t i0, int64_t j0) {
            float tile[2][2][3];
            qc::accum_fp32::evaluate_tile<2, 3, 2>(models, K, stage, tile);
            for (int q = 0; q < 2; ++q) {
              for (int64_t r = 0; r < 2 && i0 + r < M; ++r) {
                for (int64_t c = 0; c < 3 && j0 + c < N; ++c) check[q](i0 + r, j0 + c, tile[q][r][c], "(2x3 tile)");
              }
            }
          });
        }
      }
    }
  }
  EXPECT_EQ(bad, 0);
  EXPECT_GT(outputs, 9000);  // every model of every pair, each output checked
}

// The evaluation cut into calls over consecutive ranges of K (`run_steps` from the state the last one
// left: what the GPU kernel does when verify cuts a model's evaluation into short launches) gives every
// model of every pair its reference bit for bit, wherever the cuts are multiples of the step: mid-chain,
// on promotions, on split boundaries, past K, with empty ranges between.
TEST(AccumulationModel, ResumedFp32EvaluationEqualsWhole) {
  auto pairs = qc::test::paired_models();
  pairs.push_back({"promote4-splitk-8 + chain-splitk-8",
                   {qc::fp8_accumulation_model("hopper-fp8-promote4-splitk-8").model,
                    qc::fp8_accumulation_model("hopper-fp8-chain-splitk-8").model}});
  std::mt19937_64 rng(20261208);
  const std::vector<std::array<int64_t, 3>> shapes{{1, 1, 1}, {3, 5, 31}, {2, 7, 129}, {2, 3, 520}, {4, 6, 300}, {2, 3, 1000}};
  const std::pair<Fp8Format, Fp8Format> formats[] = {{Fp8Format::e4m3, Fp8Format::e4m3}, {Fp8Format::e5m2, Fp8Format::e4m3}};
  int64_t outputs = 0, bad = 0, cut_runs = 0;
  for (const auto& [name, pair] : pairs) {
    const int64_t step = pair[0].step_k;
    for (const auto& [fa, fw] : formats) {
      for (Dist dist : {Dist::uniform, Dist::cancellation}) {
        for (const auto& sh : shapes) {
          const int64_t M = sh[0], N = sh[1], K = sh[2];
          if (!qc::accum_fp32::gpu_kernel_takes(pair[0], K) || !qc::accum_fp32::gpu_kernel_takes(pair[1], K)) continue;
          const auto a = codes(rng, M, K, fa, dist, false);
          const auto w = codes(rng, N, K, fw, dist, true);
          const Fp8Gemm g{a.data(), fa, w.data(), fw, {M, N, K}};
          const Fp8AccumModel* const models[2] = {&pair[0], &pair[1]};
          for (int cut_set = 0; cut_set < 4; ++cut_set) {
            // Cuts: multiples of the step in [0, K + step], some repeated (an empty call), sorted.
            std::vector<int64_t> cuts{0};
            const int64_t steps = K / step + 2;
            for (int c = static_cast<int>(rng() % 6); c > 0; --c) cuts.push_back(static_cast<int64_t>(rng() % steps) * step);
            std::sort(cuts.begin(), cuts.end());
            const std::string what = fmt::format("pair `{}` ({} x {}, {}, M={} N={} K={}) cut at {}", name, fmt_name(fa),
                                                 fmt_name(fw), dist_name(dist), M, N, K, fmt::join(cuts, ","));
            const ReferenceCheck check[2] = {{pair[0], g, what + " first model", "resumed fp32 evaluation", &outputs, &bad},
                                             {pair[1], g, what + " second model", "resumed fp32 evaluation", &outputs, &bad}};
            ++cut_runs;
            for_each_2x3_tile(a, fa, w, fw, M, N, K, [&](qc::accum_fp32::RowStage<2, 3>& stage, int64_t i0, int64_t j0) {
              qc::accum_fp32::TileState<2, 2, 3> st;
              for (size_t c = 0; c < cuts.size(); ++c) {
                const int64_t end = c + 1 < cuts.size() ? cuts[c + 1] : K;  // the last call runs to the end
                qc::accum_fp32::run_steps<2, 3, 2>(models, K, stage, cuts[c], end, st);
              }
              for (int q = 0; q < 2; ++q) {
                for (int64_t r = 0; r < 2 && i0 + r < M; ++r) {
                  for (int64_t c = 0; c < 3 && j0 + c < N; ++c) check[q](i0 + r, j0 + c, st.total[q][r][c], "(2x3 tile)");
                }
              }
            });
          }
        }
      }
    }
  }
  EXPECT_EQ(bad, 0);
  EXPECT_GT(cut_runs, 300);
  EXPECT_GT(outputs, 8000);
}

// Every fast path is exercised by the table (so the comparison above covers each kernel).
TEST(AccumulationModel, FastPathsOfTheNamedModels) {
  const uint8_t one = 0x38;
  const Fp8Gemm g{&one, Fp8Format::e4m3, &one, Fp8Format::e4m3, {1, 1, 1}};
  const Fp8Gemm g5{&one, Fp8Format::e5m2, &one, Fp8Format::e4m3, {1, 1, 1}};
  EXPECT_EQ(qc::fp8_fast_path(qc::fp8_accumulation_model("hopper-fp8-chain").model, g), qc::Fp8FastPath::steps_f64);
  EXPECT_EQ(qc::fp8_fast_path(qc::fp8_accumulation_model("hopper-fp8-promote4").model, g), qc::Fp8FastPath::steps_f64);
  EXPECT_EQ(qc::fp8_fast_path(qc::fp8_accumulation_model("sequential").model, g), qc::Fp8FastPath::fp32_sum);
  EXPECT_EQ(qc::fp8_fast_path(qc::fp8_accumulation_model("blocked-128").model, g), qc::Fp8FastPath::fp32_sum);
  EXPECT_EQ(qc::fp8_fast_path(qc::fp8_accumulation_model("split-k-4").model, g), qc::Fp8FastPath::fp32_sum);
  EXPECT_EQ(qc::fp8_fast_path(qc::fp8_accumulation_model("exact").model, g), qc::Fp8FastPath::exact_f64);
  EXPECT_EQ(qc::fp8_fast_path(qc::fp8_accumulation_model("exact").model, g5), qc::Fp8FastPath::reference);
}

// ---- Hand-derived cases (fp8-accumulation.md, "The instruction") -------------------------------

constexpr uint8_t kOne = 0x38;      // e4m3 1.0
constexpr uint8_t kOneHalf = 0x3C;  // e4m3 1.5
constexpr uint8_t k16 = 0x58;       // e4m3 16
constexpr uint8_t k2m3 = 0x20;      // e4m3 2^-3
constexpr uint8_t k2m6 = 0x08;      // e4m3 2^-6, the smallest normal
constexpr uint8_t k2m7 = 0x04;      // e4m3 2^-7 (subnormal 4·2^-9)
constexpr uint8_t k3x2m9 = 0x03;    // e4m3 3·2^-9 (subnormal)

static_assert(qc::e4m3fn_to_f32(kOne) == 1.0f && qc::e4m3fn_to_f32(kOneHalf) == 1.5f && qc::e4m3fn_to_f32(k16) == 16.0f);
static_assert(qc::e4m3fn_to_f32(k2m3) == 0x1p-3f && qc::e4m3fn_to_f32(k2m6) == 0x1p-6f);
static_assert(qc::e4m3fn_to_f32(k2m7) == 0x1p-7f && qc::e4m3fn_to_f32(k3x2m9) == 3 * 0x1p-9f);

// One output of model `name` over pairs (a_k, w_k), by the reference and the fast evaluation,
// which must agree; returns the value.
float eval1(const Fp8AccumModel& m, const std::vector<std::pair<uint8_t, uint8_t>>& terms, const std::string& what) {
  std::vector<uint8_t> a, w;
  for (const auto& [x, y] : terms) a.push_back(x), w.push_back(y);
  const Fp8Gemm g{a.data(), Fp8Format::e4m3, w.data(), Fp8Format::e4m3, {1, 1, static_cast<int64_t>(terms.size())}};
  float r = 0, f = 0;
  qc::fp8_model_reference(m, g, &r);
  qc::fp8_model_evaluate(m, g, &f, 1);
  EXPECT_EQ(f32_bits(r), f32_bits(f)) << what << ": reference " << r << ", fast " << f;
  return r;
}
float eval1(const std::string& name, const std::vector<std::pair<uint8_t, uint8_t>>& terms) {
  return eval1(qc::fp8_accumulation_model(name).model, terms, name);
}

// Step 3: a term below the grid 2^(E-13) is truncated toward zero (E = 0 from 1·1).
TEST(AccumulationModel, TermsBelowTheGridAreTruncatedTowardZero) {
  // 1 + 2^-14: the product 2^-7·2^-7 (two subnormals) lies below 2^-13 and vanishes.
  EXPECT_EQ(eval1("hopper-fp8-chain", {{kOne, kOne}, {k2m7, k2m7}}), 1.0f);
  EXPECT_EQ(eval1("exact", {{kOne, kOne}, {k2m7, k2m7}}), 1.0f + 0x1p-14f);
  // 1 + 2^-13 (2^-7·2^-6) is on the grid and survives the terms' truncation.
  EXPECT_EQ(eval1("hopper-fp8-chain", {{kOne, kOne}, {k2m7, k2m6}}), 1.0f + 0x1p-13f);
  // 1 - 3·2^-15: the term -0.75·2^-13 truncates toward zero to 0 (not down to -2^-13).
  EXPECT_EQ(eval1("hopper-fp8-chain", {{kOne, kOne}, {static_cast<uint8_t>(k3x2m9 | 0x80), k2m6}}), 1.0f);
  EXPECT_EQ(eval1("exact", {{kOne, kOne}, {static_cast<uint8_t>(k3x2m9 | 0x80), k2m6}}), 1.0f - 3 * 0x1p-15f);
}

// Step 5: the step result is truncated toward zero to 13 fraction bits of its own exponent.
TEST(AccumulationModel, StepResultIsTruncatedToThirteenFractionBits) {
  // 1 + 1 + 2^-13 = 2 + 2^-13: 14 fraction bits relative to 2^1; truncated to 2.
  EXPECT_EQ(eval1("hopper-fp8-chain", {{kOne, kOne}, {kOne, kOne}, {k2m7, k2m6}}), 2.0f);
  const uint8_t m1 = kOne | 0x80;
  EXPECT_EQ(eval1("hopper-fp8-chain", {{m1, kOne}, {m1, kOne}, {static_cast<uint8_t>(k2m7 | 0x80), k2m6}}), -2.0f);
  EXPECT_EQ(eval1("exact", {{kOne, kOne}, {kOne, kOne}, {k2m7, k2m6}}), 2.0f + 0x1p-13f);
}

// Step 1: the alignment exponent is e(a)+e(b), one less than floor(log2|ab|) for 1.5·1.5 = 2.25.
TEST(AccumulationModel, AlignmentExponentIsTheSumOfTheFactorExponents) {
  // 2.25 + 2^-13 + 2^-13: with E = e(1.5)+e(1.5) = 0 both small terms are on the grid 2^-13 and the
  // sum 2.25 + 2^-12 has 13 fraction bits relative to 2^1: kept.
  const std::vector<std::pair<uint8_t, uint8_t>> t{{kOneHalf, kOneHalf}, {k2m7, k2m6}, {k2m7, k2m6}};
  EXPECT_EQ(eval1("hopper-fp8-chain", t), 2.25f + 0x1p-12f);
  // With E = floor(log2 2.25) = 1 the grid is 2^-12 and both 2^-13 terms vanish.
  Fp8AccumModel m = qc::fp8_accumulation_model("hopper-fp8-chain").model;
  m.alignment = AccumAlignment::exact_exponent;
  EXPECT_EQ(eval1(m, t, "exact_exponent"), 2.25f);
}

// Step 2: C takes part in the alignment. K = 64: step 1 gives C = 256 (e(C) = 8, grid 2^-5);
// step 2 adds 32 products 2^-3·2^-3 = 2^-6, each below that grid.
std::vector<std::pair<uint8_t, uint8_t>> big_then_small(int small_steps) {
  std::vector<std::pair<uint8_t, uint8_t>> t{{k16, k16}};
  while (t.size() < 32) t.emplace_back(0, 0);
  for (int i = 0; i < 32 * small_steps; ++i) t.emplace_back(k2m3, k2m3);
  return t;
}

TEST(AccumulationModel, TheAccumulatorTakesPartInTheAlignment) {
  EXPECT_EQ(eval1("hopper-fp8-chain", big_then_small(1)), 256.0f);  // each 2^-6 truncated against C
  EXPECT_EQ(eval1("exact", big_then_small(1)), 256.5f);
  // A fresh chain per step (promotion every step): step 2 starts from C = 0 and keeps its 0.5.
  Fp8AccumModel m = qc::fp8_accumulation_model("hopper-fp8-promote4").model;
  m.promote_steps = 1;
  EXPECT_EQ(eval1(m, big_then_small(1), "promote every step"), 256.5f);
}

// Promotion every 4 steps: K = 160 (5 steps). Steps 2-4 are lost against C = 256 in the first
// chain; step 5 opens a new chain from 0 (0.5), added in fp32: 256.5. Other intervals give other
// values (1: 258, 2: 257.5, 3: 257, >= 5 or never: 256), so the value pins the interval.
TEST(AccumulationModel, PromotionEveryFourSteps) {
  const auto t = big_then_small(4);
  EXPECT_EQ(eval1("hopper-fp8-promote4", t), 256.5f);
  EXPECT_EQ(eval1("hopper-fp8-chain", t), 256.0f);
  EXPECT_EQ(eval1("exact", t), 258.0f);
  const float want[] = {258.0f, 257.5f, 257.0f, 256.5f, 256.0f, 256.0f};
  for (int p = 1; p <= 6; ++p) {
    Fp8AccumModel m = qc::fp8_accumulation_model("hopper-fp8-promote4").model;
    m.promote_steps = p;
    EXPECT_EQ(eval1(m, t, fmt::format("promote every {}", p)), want[p - 1]) << "promote every " << p;
  }
}

// Subnormal operands take e(x) = -6 (the minimum normal exponent), not floor(log2|x|) = -9: the
// product 2^-9·448 = 0.875 gets the alignment exponent -6 + 8 = 2 (grid 2^-11), so the term 2^-13
// beside it is truncated away. Were e(2^-9) = -9, E would be -1 (grid 2^-14) and 2^-13 would stay,
// as it does under the exact-exponent rule (E = floor(log2 0.875) = -1).
TEST(AccumulationModel, SubnormalOperandsUseTheMinimumNormalExponent) {
  static_assert(qc::e4m3fn_to_f32(0x7E) == 448.0f && qc::e4m3fn_to_f32(0x01) == 0x1p-9f);
  const std::vector<std::pair<uint8_t, uint8_t>> t{{0x01, 0x7E}, {k2m7, k2m6}};
  EXPECT_EQ(eval1("hopper-fp8-chain", t), 0.875f);
  Fp8AccumModel m = qc::fp8_accumulation_model("hopper-fp8-chain").model;
  m.alignment = AccumAlignment::exact_exponent;
  EXPECT_EQ(eval1(m, t, "exact_exponent"), 0.875f + 0x1p-13f);
  EXPECT_EQ(eval1("exact", t), 0.875f + 0x1p-13f);
}

// ---- The fp32 models are fp32 sums -------------------------------------------------------------

TEST(AccumulationModel, SequentialModelIsPlainFp32Summation) {
  std::mt19937_64 rng(7);
  for (Fp8Format fa : {Fp8Format::e4m3, Fp8Format::e5m2}) {
    const int64_t M = 3, N = 45, K = 777;
    const auto a = codes(rng, M, K, fa, Dist::uniform, false);
    const auto w = codes(rng, N, K, Fp8Format::e4m3, Dist::uniform, true);
    const Fp8Gemm g{a.data(), fa, w.data(), Fp8Format::e4m3, {M, N, K}};
    std::vector<float> ref(static_cast<size_t>(M * N)), fast(ref.size());
    const Fp8AccumModel m = qc::fp8_accumulation_model("sequential").model;
    qc::fp8_model_reference(m, g, ref.data());
    qc::fp8_model_evaluate(m, g, fast.data());
    for (int64_t i = 0; i < M; ++i) {
      for (int64_t j = 0; j < N; ++j) {
        float acc = 0.0f;
        for (int64_t k = 0; k < K; ++k) {
          const float x = fa == Fp8Format::e4m3 ? qc::e4m3fn_to_f32(a[static_cast<size_t>(i * K + k)])
                                                : qc::e5m2_to_f32(a[static_cast<size_t>(i * K + k)]);
          acc = acc + x * qc::e4m3fn_to_f32(w[static_cast<size_t>(j * K + k)]);  // product exact in fp32
        }
        const size_t x = static_cast<size_t>(i * N + j);
        ASSERT_EQ(f32_bits(ref[x]), f32_bits(acc)) << fmt::format("{} d[{},{}]: model {} fp32 loop {}", fmt_name(fa), i, j, ref[x], acc);
        ASSERT_EQ(f32_bits(fast[x]), f32_bits(acc)) << fmt::format("{} d[{},{}]: fast {} fp32 loop {}", fmt_name(fa), i, j, fast[x], acc);
      }
    }
  }
}

// ---- Inputs and parameters ---------------------------------------------------------------------

TEST(AccumulationModel, NonFiniteCodesAreInputErrorsNamingTheCoordinate) {
  const Fp8AccumModel m = qc::fp8_accumulation_model("hopper-fp8-chain").model;
  const auto expect_error = [&](std::vector<uint8_t> a, Fp8Format fa, std::vector<uint8_t> w, Fp8Format fw,
                                const std::string& needle) {
    float d[4] = {};
    const Fp8Gemm g{a.data(), fa, w.data(), fw, {1, static_cast<int64_t>(w.size() / a.size()), static_cast<int64_t>(a.size())}};
    for (int path = 0; path < 2; ++path) {
      try {
        if (path == 0) qc::fp8_model_reference(m, g, d);
        else qc::fp8_model_evaluate(m, g, d);
        ADD_FAILURE() << "no error for " << needle;
      } catch (const qc::Error& e) {
        EXPECT_EQ(e.kind(), qc::ErrorKind::input);
        EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
      }
    }
  };
  expect_error({kOne, 0x7F}, Fp8Format::e4m3, {kOne, kOne}, Fp8Format::e4m3, "a[0,1] = 0x7f is a NaN encoding");
  expect_error({kOne, kOne}, Fp8Format::e4m3, {0xFF, kOne}, Fp8Format::e4m3, "w[0,0] = 0xff is a NaN encoding");
  expect_error({0x3C, 0x7C}, Fp8Format::e5m2, {kOne, kOne}, Fp8Format::e4m3, "a[0,1] = 0x7c is an infinity encoding");
  expect_error({0x3C, 0x3C}, Fp8Format::e5m2, {0x7D, kOne}, Fp8Format::e5m2, "w[0,0] = 0x7d is a NaN encoding");
  // e4m3fn has no infinity: 0x7C is 1.5·2^8 = 384, a finite value.
  EXPECT_EQ(eval1("exact", {{0x7C, kOne}}), 384.0f);
}

TEST(AccumulationModel, ZeroAndNegativeZeroGivePositiveZero) {
  for (const auto& r : qc::fp8_accumulation_models()) {
    EXPECT_EQ(f32_bits(eval1(r.name, {{0x80, kOne}, {0x00, 0x80}})), 0u) << r.name;
    EXPECT_EQ(f32_bits(eval1(r.name, {{kOne, kOne}, {0xB8, kOne}})), 0u) << r.name;  // 1 - 1
  }
}

TEST(AccumulationModel, TableNamesFormulasAndValidation) {
  for (const char* n : {"hopper-fp8-chain", "hopper-fp8-promote4", "exact", "sequential"}) {
    const auto r = qc::fp8_accumulation_model(n);
    EXPECT_EQ(r.name, n);
    EXPECT_NO_THROW(qc::validate_accumulation_model(r.model, n));
    EXPECT_FALSE(qc::accumulation_formula(r.model).empty());
  }
  const std::string chain = qc::accumulation_formula(qc::fp8_accumulation_model("hopper-fp8-chain").model);
  EXPECT_NE(chain.find("rz13("), std::string::npos) << chain;
  EXPECT_NE(chain.find("rz[E-13]"), std::string::npos) << chain;
  EXPECT_NE(chain.find("e(a_i)+e(b_i)"), std::string::npos) << chain;
  EXPECT_NE(qc::accumulation_formula(qc::fp8_accumulation_model("hopper-fp8-promote4").model).find("chains of 4"),
            std::string::npos);
  EXPECT_THROW(qc::fp8_accumulation_model("hopper"), qc::Error);
  EXPECT_THROW(qc::fp8_accumulation_model("blocked-0"), qc::Error);
  EXPECT_THROW(qc::fp8_accumulation_model("split-k-x"), qc::Error);
  Fp8AccumModel bad = qc::fp8_accumulation_model("hopper-fp8-chain").model;
  bad.result_bits = 24;
  EXPECT_THROW(qc::validate_accumulation_model(bad, "bad"), qc::Error);
  bad = qc::fp8_accumulation_model("hopper-fp8-chain").model;
  bad.step_k = 0;  // rounded terms need a bounded step
  EXPECT_THROW(qc::validate_accumulation_model(bad, "bad"), qc::Error);
  // split-K beyond K
  const uint8_t one = kOne;
  float d = 0;
  EXPECT_THROW(qc::fp8_model_evaluate(qc::fp8_accumulation_model("split-k-2").model,
                                      Fp8Gemm{&one, Fp8Format::e4m3, &one, Fp8Format::e4m3, {1, 1, 1}}, &d),
               qc::Error);
}

// Interleaved steps (Fp8AccumModel::interleave), hand-derived. mma.sync m16n8k32 e4m3 holds a thread's
// codes k = 4t..4t+3 (and 16 + 4t..) in one register; ptxas unpacks bytes 0-1 and 2-3 into two f16x2
// registers and runs one HMMA on the low halves: the first step takes k mod 4 in {0, 1}
// ({0,1,4,5,...,28,29}), the second {2,3,6,7,...,30,31}. Terms: B = 2^8·2^8 = 2^16 and s = 2^-7·2^-3 =
// 2^-10, 26 bits below B: in a step with ±B (E = 16, grid 2^(16-25)) s truncates to 0; alone it stays.
//   +B at 0, -B at 2, s at 16: interleaved step 1 = {+B, s} -> C = B, step 2 = {-B} -> 0: d = 0;
//                              K order step 1 = k 0..15 = {+B, -B} -> 0, step 2 = {s}: d = 2^-10.
//   s at 17 (first step, beside +B) or 18 (second, beside -B): the same two results.
//   +B at 0, -B at 1, s at 2: interleaved step 1 = {+B, -B} -> 0, step 2 = {s}: d = 2^-10;
//                             K order step 1 = {+B, -B, s}: d = 0.
TEST(AccumulationModel, InterleavedStepsTakeTheRegisterHalvesOfMmaSync) {
  constexpr uint8_t k256 = 0x78;  // e4m3 2^8
  static_assert(qc::e4m3fn_to_f32(k256) == 256.0f);
  constexpr uint8_t kMinus256 = k256 | 0x80;
  const Fp8AccumModel mma = qc::fp8_accumulation_model("sm90-mma-sync-e4m3").model;
  Fp8AccumModel k_order = mma;
  k_order.interleave = 0;
  for (const int at : {16, 17, 18}) {
    std::vector<std::pair<uint8_t, uint8_t>> t(32, {0, 0});
    t[0] = {k256, k256};
    t[2] = {kMinus256, k256};
    t[at] = {k2m7, k2m3};
    EXPECT_EQ(eval1(mma, t, fmt::format("sm90-mma-sync-e4m3, s at k = {}", at)), 0.0f) << at;
    EXPECT_EQ(eval1(k_order, t, fmt::format("K order, s at k = {}", at)), 0x1p-10f) << at;
  }
  std::vector<std::pair<uint8_t, uint8_t>> t(32, {0, 0});
  t[0] = {k256, k256};
  t[1] = {kMinus256, k256};
  t[2] = {k2m7, k2m3};
  EXPECT_EQ(eval1(mma, t, "sm90-mma-sync-e4m3, s alone in the second step"), 0x1p-10f);
  EXPECT_EQ(eval1(k_order, t, "K order, s in the step of +-B"), 0.0f);
}

TEST(AccumulationModel, InterleaveIsSpelledValidatedAndFormulated) {
  const Fp8AccumModel mma = qc::fp8_accumulation_model("sm90-mma-sync-e4m3").model;
  const std::string spelled = qc::fp8_model_spelling(mma);
  EXPECT_NE(spelled.find(",interleave=2)"), std::string::npos) << spelled;
  const Fp8AccumModel back = qc::parse_fp8_model_spelling(spelled);
  EXPECT_EQ(qc::fp8_model_spelling(back), spelled);
  EXPECT_EQ(back.interleave, 2);
  // K order is the default: not spelled, and a spelling without the field reads as K order.
  const std::string chain = qc::fp8_model_spelling(qc::fp8_accumulation_model("hopper-fp8-chain").model);
  EXPECT_EQ(chain.find("interleave"), std::string::npos) << chain;
  EXPECT_EQ(qc::parse_fp8_model_spelling(chain).interleave, 0);
  EXPECT_NE(qc::accumulation_formula(mma).find("steps in pairs over 32 positions"), std::string::npos)
      << qc::accumulation_formula(mma);
  Fp8AccumModel bad = mma;
  bad.interleave = 3;  // not a divisor of 16
  EXPECT_THROW(qc::validate_accumulation_model(bad, "bad"), qc::Error);
  bad.interleave = -1;
  EXPECT_THROW(qc::validate_accumulation_model(bad, "bad"), qc::Error);
  bad = qc::fp8_accumulation_model("exact").model;  // step_k = 0: no pairs to interleave
  bad.interleave = 1;
  EXPECT_THROW(qc::validate_accumulation_model(bad, "bad"), qc::Error);
}

// cuBLASLt's split-K, as measured on the H200 with designed probes (.carry-free restatement of
// docs/accumulation.md "Split-K"): K cut into ranges of ceil(K/(128·s))·128, each range one Hopper
// chain, the partials added in ascending order in fp32. The expectations below are derived by hand
// from that description, not from the evaluation.
TEST(AccumulationModel, CublasLtSplitKPartitionAndReductionOrder) {
  int64_t r0 = 0, r1 = 0;
  const Fp8AccumModel s3 = qc::fp8_accumulation_model("hopper-fp8-chain-splitk-3").model;
  EXPECT_EQ(s3.splits, 3);
  EXPECT_EQ(s3.split_granule, 128);
  qc::accum_model::split_range(s3, 8192, 0, r0, r1);
  EXPECT_EQ(r0, 0); EXPECT_EQ(r1, 2816);  // 22 tiles of 128
  qc::accum_model::split_range(s3, 8192, 2, r0, r1);
  EXPECT_EQ(r0, 5632); EXPECT_EQ(r1, 8192);
  qc::accum_model::split_range(s3, 256, 2, r0, r1);  // 2 tiles over 3 ranges: the last is empty
  EXPECT_EQ(r0, 256); EXPECT_EQ(r1, 256);
  const Fp8AccumModel s6 = qc::fp8_accumulation_model("hopper-fp8-chain-splitk-6").model;
  qc::accum_model::split_range(s6, 16384, 5, r0, r1);
  EXPECT_EQ(r0, 14080); EXPECT_EQ(r1, 16384);
  // The boundary probe: 256 at k-1 and 2^-6 at k (a = 1 everywhere). In one chain the small term is
  // truncated away (13 bits below 2^8 is 2^-5); across a range boundary the fp32 add keeps it.
  const int64_t K = 8192;
  const auto probe = [&](const Fp8AccumModel& m, int64_t big_at, int64_t small_at) {
    std::vector<uint8_t> a(K, kOne), w(K, 0);
    w[big_at] = 0x78;    // 256
    w[small_at] = 0x08;  // 2^-6
    float d = 0;
    qc::fp8_model_reference(m, Fp8Gemm{a.data(), Fp8Format::e4m3, w.data(), Fp8Format::e4m3, {1, 1, K}}, &d);
    return d;
  };
  EXPECT_EQ(probe(s3, 2815, 2816), 256.0f + 0x1p-6f);
  EXPECT_EQ(probe(s3, 2814, 2815), 256.0f);
  EXPECT_EQ(probe(s3, 5631, 5632), 256.0f + 0x1p-6f);
  EXPECT_EQ(probe(s3, 0, 5000), 256.0f + 0x1p-6f);
  EXPECT_EQ(probe(qc::fp8_accumulation_model("hopper-fp8-chain").model, 2815, 2816), 256.0f);
  // The order probe: a partial of 2^24 in range p, 1 in each other range. In ascending fp32 order
  // the ones before it add up exactly, the ones after are lost to ties-to-even: 0, 0, 2 for s = 3
  // (the H200 gave these).
  for (int p = 0; p < 3; ++p) {
    std::vector<uint8_t> a(K, kOne), w(K, 0);
    for (int q = 0; q < 3; ++q) {
      const int64_t start = q * 2816;
      if (q == p) {
        for (int64_t i = start; i < start + 256; ++i) a[i] = w[i] = 0x78;  // 256 products of 2^16
      } else {
        w[start + 256] = kOne;
      }
    }
    float d = 0;
    qc::fp8_model_reference(s3, Fp8Gemm{a.data(), Fp8Format::e4m3, w.data(), Fp8Format::e4m3, {1, 1, K}}, &d);
    EXPECT_EQ(d - 0x1p24f, p == 2 ? 2.0f : 0.0f) << "partial 2^24 in range " << p;
  }
  // Which model a cuBLASLt run follows.
  std::string why;
  EXPECT_EQ(qc::cublaslt_split_k_model("hopper-fp8-chain", 1, 0, why), "hopper-fp8-chain");
  EXPECT_EQ(qc::cublaslt_split_k_model("hopper-fp8-chain", 3, 2, why), "hopper-fp8-chain-splitk-3");
  EXPECT_TRUE(why.empty());
  EXPECT_EQ(qc::cublaslt_split_k_model("hopper-fp8-promote4", 4, 1, why), "");
  EXPECT_NE(why.find("split-K 4 with reduction scheme 1"), std::string::npos) << why;
  EXPECT_THROW(qc::fp8_accumulation_model("hopper-fp8-chain-splitk-0"), qc::Error);
}

// The arms: cpu:fp8-<model> and the fp8: aliases come from the one registry and declare their model.
// verify of an FP8 pair runs (tests/unit/test_verify_fp8.cpp); a pair mixing an FP8 and an INT8 arm is
// an input error naming both arms and their formats, on either side, never an "unknown epilogue".
TEST(AccumulationModel, VerifyRefusesMixedFormatPairsSayingWhy) {
  qc::SynthOptions o;
  o.shapes = "tiny";
  o.m = 4;
  o.seed = 3;
  const auto layers = qc::synth_operands(o);
  const qc::PredictionSet p = qc::predict(layers, "mem", "sha256:none");
  for (const auto& [la, lb] : {std::pair{"cpu:fp8-exact", "cpu:vllm-cutlass"}, std::pair{"cpu:vllm-cutlass", "cpu:fp8-hopper-fp8-chain"}}) {
    auto a = qc::make_arm(la), b = qc::make_arm(lb);
    try {
      qc::verify_layers(*a, *b, layers, p, qc::VerifyOptions{});
      ADD_FAILURE() << la << " vs " << lb << ": verify ran a mixed FP8/INT8 pair";
    } catch (const qc::Error& e) {
      EXPECT_EQ(e.kind(), qc::ErrorKind::input) << e.what();
      EXPECT_NE(std::string(e.what()).find("verify compares two arms of the same format"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(la), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(lb), std::string::npos) << e.what();
    }
  }
}

TEST(AccumulationModel, CpuFp8ArmsDeclareTheirModel) {
  for (const char* label : {"cpu:fp8-hopper-fp8-chain", "cpu:fp8-hopper-fp8-promote4", "cpu:fp8-exact",
                            "cpu:fp8-blocked-128", "fp8:sequential", "fp8:blocked-4", "fp8:split-k-2", "fp8:exact"}) {
    const auto arm = qc::make_arm(label);
    EXPECT_EQ(arm->info().label, label);
    EXPECT_FALSE(arm->info().accumulation_model.empty()) << label;
  }
  EXPECT_EQ(qc::make_arm("fp8:blocked-4")->info().accumulation_model, "blocked-4");
  EXPECT_TRUE(qc::make_arm("cpu:vllm-cutlass")->info().accumulation_model.empty());
  EXPECT_THROW(qc::make_arm("fp8:hopper-fp8-chain"), qc::Error);  // not an old label
  EXPECT_THROW(qc::make_arm("cpu:fp8-nope"), qc::Error);
  // The arm evaluates its model: d equals the model's evaluation.
  std::mt19937_64 rng(3);
  const auto a = codes(rng, 2, 96, Fp8Format::e4m3, Dist::uniform, false);
  const auto w = codes(rng, 3, 96, Fp8Format::e4m3, Dist::uniform, true);
  nlohmann::json rec;
  const auto d = qc::make_arm("cpu:fp8-hopper-fp8-promote4")->fp8_accumulate(a.data(), w.data(), 2, 3, 96, rec);
  std::vector<float> want(6);
  qc::fp8_model_reference(qc::fp8_accumulation_model("hopper-fp8-promote4").model,
                          Fp8Gemm{a.data(), Fp8Format::e4m3, w.data(), Fp8Format::e4m3, {2, 3, 96}}, want.data());
  for (size_t i = 0; i < 6; ++i) EXPECT_EQ(f32_bits(d[i]), f32_bits(want[i])) << i;
  EXPECT_EQ(rec.at("accumulation_model"), "hopper-fp8-promote4");
  // INT8 arms refuse.
  EXPECT_THROW(qc::make_arm("cpu:vllm-cutlass")->fp8_accumulate(a.data(), w.data(), 2, 3, 96, rec), qc::Error);
}

// An FP8 layer (e5m2 activations x e4m3 weights) goes through a CPU FP8 arm's `run` as its own
// codes: the output is the model's evaluation of those codes, then the fp8-scaled epilogue, bit
// for bit; the record says what the arm took.
TEST(AccumulationModel, CpuFp8ArmRunsAnFp8LayerOnItsOwnCodes) {
  std::mt19937_64 rng(5);
  const int64_t m = 3, n = 4, k = 160;
  qc::OperandStorage st;
  const auto a = codes(rng, m, k, Fp8Format::e5m2, Dist::uniform, false);
  const auto w = codes(rng, n, k, Fp8Format::e4m3, Dist::uniform, true);
  st.a_q.assign(a.begin(), a.end());
  st.w_q.assign(w.begin(), w.end());
  st.a_scale = {0.75f, 1.0f / 3.0f, 2.0f};
  st.w_scale = {0.1f, 1.0f, 0.3f, 7.0f};
  st.a_type = qc::ElementType::e5m2;
  st.w_type = qc::ElementType::e4m3;
  const qc::LayerOperands ops = qc::make_operands("fc", m, n, k, st, "test");
  const qc::ArmOutput out = qc::make_arm("cpu:fp8-hopper-fp8-chain")->run(ops);
  std::vector<float> d(static_cast<size_t>(m * n));
  qc::fp8_model_reference(qc::fp8_accumulation_model("hopper-fp8-chain").model,
                          Fp8Gemm{a.data(), Fp8Format::e5m2, w.data(), Fp8Format::e4m3, {m, n, k}}, d.data());
  std::vector<uint16_t> want(d.size());
  qc::apply_epilogue(qc::fp8_epilogue(), d.data(), st.a_scale.data(), st.w_scale.data(), nullptr, m, n, want.data());
  ASSERT_EQ(out.y.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(out.y[i], want[i]) << fmt::format("[{},{}] got 0x{:04x} want 0x{:04x}", i / n, i % n, out.y[i], want[i]);
  }
  EXPECT_EQ(out.record.extra.at("operands"), "e5m2 x e4m3 (FP8 layer)");
}

}  // namespace
