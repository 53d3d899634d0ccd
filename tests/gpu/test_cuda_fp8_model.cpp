// FP8 accumulation models on the GPU (src/arms/cuda/kernels/fp8_accum_model.cu): the device
// compilation of include/qconform/accumulation.hpp equals the CPU fast evaluation bit for bit;
// and the cuBLASLt FP8 arms equal the models they declare (hopper-fp8-promote4 for the default
// path, hopper-fp8-chain for fast accumulation), with the other model differing, so the two paths
// are told apart (../shared/reference/fp8-accumulation.md).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <array>
#include <cstdlib>
#include <cstring>
#include <map>
#include <random>
#include <vector>

#include "accum/fp8_model.hpp"
#include "accum/fp8_model_fp32.hpp"
#include "accum/fp8_model_fp64.hpp"
#include "arms/cuda/cuda.hpp"
#include "arms/cuda/kernels/fp8_accum_model.cuh"
#include "qconform/arm.hpp"
#include "qconform/numerics.hpp"
#include "../unit/fp8_model_pairs.hpp"
#include "core/env_setting.hpp"
#include "gpu_test_util.hpp"

namespace qc {
namespace {

std::vector<uint8_t> finite_codes(std::mt19937_64& rng, int64_t count, Fp8Format f, bool subnormal_heavy) {
  std::vector<uint8_t> v(static_cast<size_t>(count));
  for (auto& c : v) {
    do {
      c = static_cast<uint8_t>(rng());
      if (subnormal_heavy && (rng() & 1)) c &= f == Fp8Format::e4m3 ? 0x8F : 0x87;  // exponent field 0 or 1
    } while (!accum_model::fp8_code_finite(c, f));
  }
  return v;
}

// e4m3 codes of randn·2 (the operands of the H200 measurement), round to nearest even, saturating.
std::vector<uint8_t> randn_codes(std::mt19937_64& rng, int64_t count) {
  std::normal_distribution<float> nd(0.0f, 2.0f);
  std::vector<uint8_t> v(static_cast<size_t>(count));
  for (auto& c : v) c = f32_to_e4m3fn(nd(rng), /*saturate=*/true);
  return v;
}

int64_t count_differing(const std::vector<float>& x, const std::vector<float>& y, int64_t n, const std::string& what,
                        int report) {
  int64_t bad = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    if (f32_bits(x[i]) == f32_bits(y[i])) continue;
    if (bad++ < report) {
      ADD_FAILURE() << fmt::format("{}: d[{},{}]: {} ({:#010x}) vs {} ({:#010x})", what, static_cast<int64_t>(i) / n,
                                   static_cast<int64_t>(i) % n, x[i], f32_bits(x[i]), y[i], f32_bits(y[i]));
    }
  }
  return bad;
}

TEST(CudaFp8Model, GpuEvaluationEqualsCpuBitForBit) {
  std::vector<NamedAccumModel> models = fp8_accumulation_models();
  models.push_back(fp8_accumulation_model("blocked-128"));
  models.push_back(fp8_accumulation_model("split-k-3"));
  models.push_back(fp8_accumulation_model("hopper-fp8-chain-splitk-3"));
  models.push_back(fp8_accumulation_model("hopper-fp8-promote4-splitk-6"));
  NamedAccumModel rn = fp8_accumulation_model("hopper-fp8-promote4");
  rn.name = "hopper-fp8-promote4 with rn terms and results, exact exponent";
  rn.model.term_rounding = rn.model.result_rounding = AccumRounding::nearest_even;
  rn.model.alignment = AccumAlignment::exact_exponent;
  models.push_back(rn);
  // Variants the fp32 kernel takes beside the Hopper rows: round-to-nearest terms and results, a
  // 16-term step with 10 fraction bits, 8-term steps promoted every 2.
  NamedAccumModel rn_sum = fp8_accumulation_model("hopper-fp8-chain");
  rn_sum.name = "hopper-fp8-chain with rn terms and results";
  rn_sum.model.term_rounding = rn_sum.model.result_rounding = AccumRounding::nearest_even;
  models.push_back(rn_sum);
  NamedAccumModel k16 = fp8_accumulation_model("hopper-fp8-promote4");
  k16.name = "promote4 with 16-term steps, 10 fraction bits";
  k16.model.step_k = 16;
  k16.model.term_bits = k16.model.result_bits = 10;
  models.push_back(k16);
  NamedAccumModel k8 = fp8_accumulation_model("hopper-fp8-promote4");
  k8.name = "8-term steps promoted every 2";
  k8.model.step_k = 8;
  k8.model.promote_steps = 2;
  models.push_back(k8);
  // Shapes off the fp32 kernel's 64 x 64 tiles and 32-term steps too (ragged M, N, K).
  const std::vector<std::array<int64_t, 3>> shapes{{1, 1, 1},        {7, 45, 33},     {16, 256, 1000},
                                                   {64, 1024, 4096}, {65, 130, 100},  {130, 70, 4100}};
  const std::pair<Fp8Format, Fp8Format> formats[] = {{Fp8Format::e4m3, Fp8Format::e4m3},
                                                      {Fp8Format::e5m2, Fp8Format::e4m3},
                                                      {Fp8Format::e5m2, Fp8Format::e5m2}};
  std::mt19937_64 rng(1214);
  int64_t outputs = 0, fp32_outputs = 0;
  for (const auto& sh : shapes) {
    for (const auto& [fa, fw] : formats) {
      for (bool sub : {false, true}) {
        const auto a = finite_codes(rng, sh[0] * sh[2], fa, sub);
        const auto w = finite_codes(rng, sh[1] * sh[2], fw, sub);
        for (const NamedAccumModel& m : models) {
          if (m.model.splits > sh[2]) continue;
          const AccumShape s{sh[0], sh[1], sh[2]};
          std::vector<float> cpu(static_cast<size_t>(s.m * s.n));
          fp8_model_evaluate(m.model, Fp8Gemm{a.data(), fa, w.data(), fw, s}, cpu.data());
          // Every GPU kernel: the fp32 one (the stepped models it takes), the fp64 one (models with a
          // fast path on the device: not an interleaved model, which the host gathers into K order but
          // the per-tensor GPU evaluation runs on the reference) and the int128 reference text.
          const bool fp32_takes = accum_fp32::gpu_kernel_takes(m.model, s.k);
          const bool fp64_takes = accum_fp64::path_of(m.model, fa, fw, s.k) != accum_fp64::Path::reference;
          for (Fp8GpuKernel which : {Fp8GpuKernel::best, Fp8GpuKernel::fp64, Fp8GpuKernel::reference}) {
            std::string kernel;
            const std::vector<float> gpu = fp8_model_evaluate_gpu(m.model, a.data(), fa, w.data(), fw, s, &kernel, which);
            const std::string what = fmt::format("model {} ({}x{}, {}, M={} N={} K={}): cpu vs gpu kernel `{}`",
                                                 m.name, fa == Fp8Format::e4m3 ? "e4m3" : "e5m2",
                                                 fw == Fp8Format::e4m3 ? "e4m3" : "e5m2",
                                                 sub ? "subnormal-heavy" : "uniform codes", s.m, s.n, s.k, kernel);
            EXPECT_EQ(count_differing(cpu, gpu, s.n, what, 3), 0) << what;
            const bool fp32_ran = which == Fp8GpuKernel::best && fp32_takes;
            EXPECT_EQ(kernel.find("fp8_accum_model_fp32") != std::string::npos, fp32_ran) << what;
            EXPECT_EQ(kernel.find("fp8_accum_model_fp64") != std::string::npos, !fp32_ran && which != Fp8GpuKernel::reference && fp64_takes)
                << what;
            fp32_outputs += fp32_ran ? static_cast<int64_t>(cpu.size()) : 0;
            outputs += static_cast<int64_t>(cpu.size());
          }
        }
      }
    }
  }
  std::printf("GPU evaluation == CPU evaluation on %lld outputs (%lld of them by the fp32 kernel)\n",
              static_cast<long long>(outputs), static_cast<long long>(fp32_outputs));
  EXPECT_GT(fp32_outputs, 0) << "the fp32 kernel never ran";
}

// Two models that run the same steps in one launch (what verify's device pipeline runs for the cuBLASLt
// pair: `launch_fp8_accum_model_pair`, `accum_fp32::evaluate_tile` with P = 2) equal the CPU's evaluation
// of each model bit for bit; a pair whose steps differ is refused.
TEST(CudaFp8Model, PairInOnePassEqualsEachModel) {
  const auto pairs = test::paired_models();
  const Fp8AccumModel chain = fp8_accumulation_model("hopper-fp8-chain").model;
  const std::vector<std::array<int64_t, 3>> shapes{{1, 1, 1},        {7, 45, 33},     {16, 256, 1000},
                                                   {64, 1024, 4096}, {65, 130, 100},  {130, 70, 4100}};
  const std::pair<Fp8Format, Fp8Format> formats[] = {{Fp8Format::e4m3, Fp8Format::e4m3},
                                                      {Fp8Format::e5m2, Fp8Format::e4m3}};
  std::mt19937_64 rng(1207);
  int64_t outputs = 0;
  std::map<std::string, int> pairs_run;
  for (const auto& sh : shapes) {
    for (const auto& [fa, fw] : formats) {
      const AccumShape s{sh[0], sh[1], sh[2]};
      const auto a = finite_codes(rng, s.m * s.k, fa, /*subnormal_heavy=*/sh[2] % 2 == 1);
      const auto w = finite_codes(rng, s.n * s.k, fw, sh[2] % 2 == 1);
      const GpuFp8Codes codes(a.data(), fa, w.data(), fw, s);
      for (const auto& [name, pair] : pairs) {
        if (pair[0].splits > s.k) continue;
        // The fp32 kernel takes a split model only where every split range starts on a step boundary.
        const bool takes = accum_fp32::gpu_kernel_takes(pair[0], s.k) && accum_fp32::gpu_kernel_takes(pair[1], s.k);
        EXPECT_EQ(cuda_kernels::fp8_accum_models_share_steps(pair[0], pair[1], s.k), takes) << name << " K=" << s.k;
        if (!takes) {
          EXPECT_THROW(codes.evaluate_pair(pair[0], pair[1]), Error) << name << " K=" << s.k;
          continue;
        }
        ++pairs_run[name];
        std::string kernel;
        const auto gpu = codes.evaluate_pair(pair[0], pair[1], &kernel);
        EXPECT_NE(kernel.find("two models sharing their steps"), std::string::npos) << kernel;
        for (int q = 0; q < 2; ++q) {
          std::vector<float> cpu(static_cast<size_t>(s.m * s.n));
          fp8_model_evaluate(pair[q], Fp8Gemm{a.data(), fa, w.data(), fw, s}, cpu.data());
          const std::string what = fmt::format("pair {} (model {}; {}x{}, M={} N={} K={}): cpu vs gpu kernel `{}`", name,
                                               q, fa == Fp8Format::e4m3 ? "e4m3" : "e5m2",
                                               fw == Fp8Format::e4m3 ? "e4m3" : "e5m2", s.m, s.n, s.k, kernel);
          EXPECT_EQ(count_differing(cpu, gpu[q], s.n, what, 3), 0) << what;
          outputs += static_cast<int64_t>(cpu.size());
        }
      }
      Fp8AccumModel other = chain;
      other.step_k = 16;
      EXPECT_THROW(codes.evaluate_pair(chain, other), Error) << "steps of 32 and 16 terms";
    }
  }
  std::printf("paired GPU evaluation == CPU evaluation on %lld outputs\n", static_cast<long long>(outputs));
  EXPECT_GT(outputs, 1000000);
  for (const auto& [name, pair] : pairs) EXPECT_GT(pairs_run[name], 0) << name << " never ran";
}

// The fp32 kernel's evaluation cut into launches over parts of K (cuda_kernels::ModelLaunches: the chains
// kept in device memory between launches, as verify's pipeline runs the next layer's models) equals the
// CPU evaluation bit for bit, for single models and pairs, cuts mid-chain, on promotions and on split
// boundaries; a cut at or past K is one launch. Both tiles of the kernel: 4 x 2 outputs a thread (the
// default) and 4 x 4 (QC_FP8_MODEL_TILE_N=4).
TEST(CudaFp8Model, LaunchesOverPartsOfKEqualTheCpu) {
  const ScopedEnv tile_env("QC_FP8_MODEL_TILE_N");
  auto pairs = test::paired_models();
  const std::vector<std::array<int64_t, 3>> shapes{{7, 45, 33}, {65, 130, 100}, {16, 256, 1000}, {130, 70, 4100}};
  std::mt19937_64 rng(1208);
  int64_t outputs = 0, cut_launches = 0;
  for (const auto& sh : shapes) {
    const AccumShape s{sh[0], sh[1], sh[2]};
    const Fp8Format fa = Fp8Format::e4m3, fw = sh[2] % 2 == 0 ? Fp8Format::e4m3 : Fp8Format::e5m2;
    const auto a = finite_codes(rng, s.m * s.k, fa, /*subnormal_heavy=*/sh[2] % 3 == 0);
    const auto w = finite_codes(rng, s.n * s.k, fw, sh[2] % 3 == 0);
    const GpuFp8Codes codes(a.data(), fa, w.data(), fw, s);
    for (const auto& [name, pair] : pairs) {
      if (!cuda_kernels::fp8_accum_models_share_steps(pair[0], pair[1], s.k)) continue;
      std::array<std::vector<float>, 2> cpu;
      for (int q = 0; q < 2; ++q) {
        cpu[q].resize(static_cast<size_t>(s.m * s.n));
        fp8_model_evaluate(pair[q], Fp8Gemm{a.data(), fa, w.data(), fw, s}, cpu[q].data());
      }
      for (const char* tile : {"4", "2"}) {
        tile_env.set(tile);
        const std::string tile_name = fmt::format("4x{} outputs per thread", tile);
        for (const int64_t per : {int64_t{1}, int64_t{100}, int64_t{1000}, s.k}) {
          std::string kernel;
          const auto gpu = codes.evaluate_pair(pair[0], pair[1], &kernel, per);
          const bool cut = (per + pair[0].step_k - 1) / pair[0].step_k * pair[0].step_k < s.k;
          EXPECT_EQ(kernel.find("in launches of") != std::string::npos, cut) << kernel;
          EXPECT_NE(kernel.find(tile_name), std::string::npos) << kernel;
          cut_launches += cut ? 1 : 0;
          for (int q = 0; q < 2; ++q) {
            const std::string what = fmt::format("pair {} (model {}; M={} N={} K={}, {} terms a launch): cpu vs gpu `{}`", name,
                                                 q, s.m, s.n, s.k, per, kernel);  // the kernel names its tile
            EXPECT_EQ(count_differing(cpu[q], gpu[q], s.n, what, 3), 0) << what;
            outputs += static_cast<int64_t>(cpu[q].size());
          }
          // The first model alone, cut the same way.
          const auto one = codes.evaluate(pair[0], &kernel, Fp8GpuKernel::best, per);
          EXPECT_EQ(kernel.find("in launches of") != std::string::npos, cut) << kernel;
          EXPECT_EQ(count_differing(cpu[0], one, s.n, fmt::format("{} alone, {} terms a launch, tile {}", name, per, tile_name),
                                    3),
                    0);
        }
      }
    }
  }
  std::printf("GPU evaluation in launches over parts of K == CPU evaluation on %lld outputs (%lld cut evaluations)\n",
              static_cast<long long>(outputs), static_cast<long long>(cut_launches));
  EXPECT_GT(outputs, 1000000);
  // Cut evaluations: 7 for each of the four pairs without split-K (K = 33, 100: one each; 1000: two; 4100:
  // three), more where the split-K pair's ranges start on step boundaries; for each of the two tiles.
  EXPECT_GE(cut_launches, 56);
}

// The declaration of each cuBLASLt FP8 arm, checked: 0 outputs off the model the run claims, and
// the other Hopper model differs (so the check can fail). Each run claims the model of the algorithm
// cuBLASLt reports it ran: the declared model for one pass over K (splitK 1), `<declared>-splitk-<s>`
// where the heuristic chose split-K s with the partials reduced in fp32 (reduction scheme 2; measured
// with designed probes, docs/accumulation.md "Split-K"), nothing (with the reason) for any other
// algorithm. Such a claimed run must equal its model bit for bit. Nothing here assumes which
// algorithm the heuristic picks; the split-K shapes (small M, K >= 8192) are where it did pick
// split-K on the H200, and the test prints what it picked.
TEST(CudaFp8Model, CublasLtArmsEqualTheirDeclaredModels) {
  std::mt19937_64 rng(2412);
  std::map<std::string, int> claimed, claimed_split, refused;
  struct Shape { int64_t m, n, k; };
  for (const Shape sh : {Shape{256, 256, 256}, Shape{256, 256, 1024}, Shape{256, 256, 4096}, Shape{1, 1024, 8192},
                         Shape{1, 1024, 16384}, Shape{16, 1024, 16384}, Shape{1, 4096, 8192}, Shape{16, 1024, 32768},
                         Shape{1, 1024, 32768}, Shape{128, 1024, 16384}}) {
    const int64_t m = sh.m, n = sh.n, k = sh.k;
    const auto a = randn_codes(rng, m * k), w = randn_codes(rng, n * k);
    for (const char* label : {"cuda:cublaslt-fp8", "cuda:cublaslt-fp8-fastacc"}) {
      auto arm = make_arm(label);
      const std::string declared = arm->info().accumulation_model;
      nlohmann::json rec;
      const std::vector<float> d = arm->fp8_accumulate(a.data(), w.data(), m, n, k, rec);
      const nlohmann::json& extra = rec.at("extra");
      const long long split_k = extra.at("split_k").get<long long>();
      const long long scheme = extra.at("reduction_scheme").get<long long>();
      if (extra.at("accumulation_model").is_null()) {
        ++refused[label];
        std::printf("%s M=%lld N=%lld K=%lld splitK %lld scheme %lld: no model claimed\n", label,
                    static_cast<long long>(m), static_cast<long long>(n), static_cast<long long>(k), split_k, scheme);
        EXPECT_FALSE(split_k == 1 && scheme == 0) << label << ": refused a model on a one-pass run: " << extra.dump();
        EXPECT_NE(extra.value("accumulation_model_refused", "").find("split-K"), std::string::npos) << extra.dump();
        continue;
      }
      const std::string model = extra.at("accumulation_model").get<std::string>();
      const std::string expected = split_k == 1 ? declared : fmt::format("{}-splitk-{}", declared, split_k);
      EXPECT_EQ(model, expected) << extra.dump();
      const std::string other_base = declared == "hopper-fp8-chain" ? "hopper-fp8-promote4" : "hopper-fp8-chain";
      const std::string other = split_k == 1 ? other_base : fmt::format("{}-splitk-{}", other_base, split_k);
      std::vector<float> want(d.size()), alt(d.size()), one_pass(d.size());
      const Fp8Gemm g{a.data(), Fp8Format::e4m3, w.data(), Fp8Format::e4m3, {m, n, k}};
      fp8_model_evaluate(fp8_accumulation_model(model).model, g, want.data());
      fp8_model_evaluate(fp8_accumulation_model(other).model, g, alt.data());
      fp8_model_evaluate(fp8_accumulation_model(declared).model, g, one_pass.data());
      int64_t off_other = 0, off_one_pass = 0;
      for (size_t i = 0; i < d.size(); ++i) {
        off_other += f32_bits(d[i]) != f32_bits(alt[i]);
        off_one_pass += f32_bits(d[i]) != f32_bits(one_pass[i]);
      }
      const std::string what = fmt::format("{} (kernel {}) vs its model {} at M={} N={} K={}", label,
                                           rec.value("kernel", ""), model, m, n, k);
      const int64_t off = count_differing(d, want, n, what, 3);
      std::printf("%s M=%lld N=%lld K=%lld splitK %lld scheme %lld: claims %s, %lld of %zu outputs off it; %lld off "
                  "%s, %lld off the one-pass %s\n",
                  label, static_cast<long long>(m), static_cast<long long>(n), static_cast<long long>(k), split_k,
                  scheme, model.c_str(), static_cast<long long>(off), d.size(), static_cast<long long>(off_other),
                  other.c_str(), static_cast<long long>(off_one_pass), declared.c_str());
      EXPECT_EQ(off, 0) << what;
      EXPECT_GT(off_other, 0) << label << ": the two models do not tell the paths apart at K=" << k;
      ++(split_k == 1 ? claimed : claimed_split)[label];
    }
  }
  for (const char* label : {"cuda:cublaslt-fp8", "cuda:cublaslt-fp8-fastacc"}) {
    EXPECT_GT(claimed[label], 0) << label << " claimed its one-pass model on no shape";
    std::printf("%s: one-pass model claimed on %d shapes, split-K model on %d, none on %d\n", label, claimed[label],
                claimed_split[label], refused[label]);
  }
}

}  // namespace
}  // namespace qc
