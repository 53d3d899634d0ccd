// `verify` with its reference on the GPU gives the same results as with its reference on the
// CPU, field for field (only the timings and the reference description may differ): passing pairs,
// a pair with accumulator faults (C4 lists coordinates), K not a multiple of 4, an M sweep and
// all three scale regimes.
#include <gtest/gtest.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <string>
#include <tuple>
#include <vector>

#include "gpu_test_util.hpp"
#include "qconform/arm.hpp"
#include "orchestrate/sweep.hpp"
#include "checks/verify.hpp"

namespace qc {
namespace {

nlohmann::json verify_json(const std::string& a, const std::string& b, const std::vector<LayerOperands>& layers,
                           VerifyReference where) {
  VerifyOptions options;
  if (layers.front().m >= 96) options.m_sweep = {1, 17, 96};
  options.reference = where;
  return gpu_test::reference_json(a, b, layers, options, where == VerifyReference::gpu ? "CUDA cores" : "host");
}

std::vector<LayerOperands> layers() {
  return {gpu_test::make_layer("l.aligned", 96, 64, 2048, 1, false),
          gpu_test::make_layer("l.odd_k", 96, 48, 1001, 2, false), gpu_test::make_layer("l.bias", 96, 80, 512, 3, true)};
}

TEST(CudaVerifyReference, GpuReferenceEqualsCpuReference) {
  const auto ops = layers();
  for (const auto& [a, b] : std::vector<std::pair<std::string, std::string>>{
           {"cpu:vllm-cutlass-muladd", "cpu:vllm-triton"},   // passes (bias: C5 not commutable)
           {"cpu:vllm-cutlass", "mutant:acc-bitflip"},       // C4 fails, with coordinates
           {"cpu:vllm-cutlass", "mutant:bf16-truncate"}}) {  // C5/C6 fail, with coordinates
    if (a == "cpu:vllm-cutlass") {
      // vllm-cutlass refuses a bias (ambiguous formula): the unbiased layers only.
      const std::vector<LayerOperands> unbiased(ops.begin(), ops.begin() + 2);
      EXPECT_EQ(verify_json(a, b, unbiased, VerifyReference::gpu), verify_json(a, b, unbiased, VerifyReference::cpu))
          << a << " vs " << b;
    } else {
      EXPECT_EQ(verify_json(a, b, ops, VerifyReference::gpu), verify_json(a, b, ops, VerifyReference::cpu))
          << a << " vs " << b;
    }
  }
}

TEST(CudaVerifyReference, BeyondTheInt32ProofTheGpuReferenceIsInt64) {
  // K = 140000: the exact sums can leave INT32 (all -128 rows reach 140000 * 2^14), so both
  // references use int64; the CPU arms accumulate in int64 too and expose no INT32 accumulator.
  const std::vector<LayerOperands> wide = {gpu_test::make_layer("l.wide_k", 4, 16, 140000, 5, false)};
  EXPECT_EQ(verify_json("cpu:vllm-cutlass", "cpu:vllm-triton", wide, VerifyReference::gpu),
            verify_json("cpu:vllm-cutlass", "cpu:vllm-triton", wide, VerifyReference::cpu));
}

// FP8 pairs: the declared models evaluated on the GPU give the same verify, field for field, as on
// the host (a passing pair and the FP8 mutant, caught with coordinates).
std::vector<LayerOperands> fp8_layers() {
  std::vector<LayerOperands> out;
  int64_t seed = 40;
  for (const auto& [m, n, k] : std::vector<std::tuple<int64_t, int64_t, int64_t>>{{16, 64, 256}, {8, 48, 2048}}) {
    out.push_back(synth_fp8_layer(fmt::format("fp8.k{}", k), m, n, k, static_cast<uint64_t>(++seed), "test_cuda_verify"));
  }
  return out;
}

nlohmann::json fp8_verify_json(const std::string& a, const std::string& b, VerifyReference where) {
  return gpu_test::reference_json(a, b, fp8_layers(), {.reference = where},
                                  where == VerifyReference::gpu ? "CUDA evaluation" : "on the host");
}

TEST(CudaVerifyReference, Fp8GpuModelsEqualCpuModels) {
  for (const auto& [a, b] : std::vector<std::pair<std::string, std::string>>{
           {"cpu:fp8-hopper-fp8-chain", "cpu:fp8-hopper-fp8-promote4"},
           {"mutant:fp8-rne-steps", "cpu:fp8-hopper-fp8-promote4"}}) {
    EXPECT_EQ(fp8_verify_json(a, b, VerifyReference::gpu), fp8_verify_json(a, b, VerifyReference::cpu)) << a << " vs " << b;
  }
}

// The cuBLASLt pair against its declared models: every run where both arms claim their model has
// 0 outputs off it and the predicted set equal to the observed one; runs the heuristic took to
// split-K are unmodelled (listed), never passed or failed.
TEST(CudaVerifyReference, CublasLtFp8PairFollowsItsDeclaredModels) {
  const std::vector<LayerOperands> layers = fp8_layers();
  const PredictionSet p = predict(layers, "mem", "sha256:none");
  auto fast = make_arm("cuda:cublaslt-fp8-fastacc"), dflt = make_arm("cuda:cublaslt-fp8");
  VerifyOptions options;
  options.reference = VerifyReference::gpu;
  const VerifyResult r = verify_layers(*fast, *dflt, layers, p, options);
  for (const LayerRun& run : r.runs) {
    SCOPED_TRACE(fmt::format("{} {} unmodelled A `{}` B `{}`", run.layer, scale_mode_name(run.mode), run.arm[0].unmodelled,
                             run.arm[1].unmodelled));
    if (run.arm[0].unmodelled.empty()) {
      EXPECT_EQ(run.arm[0].formula_mismatch, 0) << fmt::format("{}", fmt::join(run.model_first, "\n"));
    }
    if (run.arm[1].unmodelled.empty()) {
      EXPECT_EQ(run.arm[1].formula_mismatch, 0) << fmt::format("{}", fmt::join(run.model_first, "\n"));
    }
    if (run.predicted_diff) {
      EXPECT_TRUE(run.predicted_equals_observed);
    }
  }
  EXPECT_FALSE(r.stage.has_value()) << r.stage_detail;
}

TEST(CudaVerifyReference, AutomaticPicksTheGpuHere) {
  EXPECT_EQ(resolve_reference(VerifyReference::automatic), VerifyReference::gpu);
}

}  // namespace
}  // namespace qc
