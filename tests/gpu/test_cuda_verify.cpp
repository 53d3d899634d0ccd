// `verify` with its reference on the GPU gives the same results as with its reference on the
// CPU, field for field (only the timings and the reference description may differ): passing pairs,
// a pair with accumulator faults (C4 lists coordinates), K not a multiple of 4, an M sweep and
// all three scale regimes.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "gpu_test_util.hpp"
#include "qconform/arm.hpp"
#include "checks/verify.hpp"

namespace qc {
namespace {

nlohmann::json verify_json(const std::string& a, const std::string& b, const std::vector<LayerOperands>& layers,
                           VerifyReference where) {
  const PredictionSet p = predict(layers, "mem", "sha256:none");
  auto arm_a = make_arm(a), arm_b = make_arm(b);
  VerifyOptions options;
  if (layers.front().m >= 96) options.m_sweep = {1, 17, 96};
  options.reference = where;
  nlohmann::json j = to_json(verify_layers(*arm_a, *arm_b, layers, p, options));
  EXPECT_NE(j["reference"].get<std::string>().find(where == VerifyReference::gpu ? "CUDA cores" : "host"),
            std::string::npos)
      << j["reference"];
  for (const char* timing_or_place : {"seconds", "wall_seconds", "reference"}) j.erase(timing_or_place);
  return j;
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

TEST(CudaVerifyReference, AutomaticPicksTheGpuHere) {
  EXPECT_EQ(resolve_reference(VerifyReference::automatic), VerifyReference::gpu);
}

}  // namespace
}  // namespace qc
