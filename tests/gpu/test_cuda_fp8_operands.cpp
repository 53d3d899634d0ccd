// FP8 layers (real FP8 operands, `qconform synth --element ...`) through the cuBLASLt FP8 arms,
// compared bit for bit with the CPU arm of each arm's declared accumulation model:
// cuda:cublaslt-fp8 with cpu:fp8-hopper-fp8-promote4, cuda:cublaslt-fp8-fastacc with
// cpu:fp8-hopper-fp8-chain. e5m2 activations x e4m3 weights (issue #14's mixed case) and e4m3 x e5m2.
// Each layer runs twice: with its synthetic per-token / per-channel scales (the whole arm), and with
// power-of-two scales (the epilogue's products are then exact, so a difference can only come from
// the accumulation): if only the first differs, the epilogue is the cause.
// A run counts only where the arm claims its model (one pass over K); the test needs one per arm.
//
// Run on a GPU machine: ./build-cuda/tests/qconform_gpu_tests --gtest_filter='CudaFp8Operands*'
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "../unit/input_error.hpp"
#include "qconform/arm.hpp"
#include "qconform/error.hpp"
#include "qconform/numerics.hpp"
#include "qconform/operands.hpp"
#include "synth/synth.hpp"

namespace qc {
namespace {

// Count of differing bf16 outputs, and the first few with coordinates, values and bit patterns.
int64_t count_bf16_differing(const std::vector<uint16_t>& got, const std::vector<uint16_t>& want, int64_t n,
                             const std::string& what) {
  int64_t bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i] == want[i]) continue;
    if (++bad <= 5) {
      ADD_FAILURE() << fmt::format("{}: y[{},{}] = {} (0x{:04x}) from the GPU, {} (0x{:04x}) from the CPU model", what,
                                   static_cast<int64_t>(i) / n, static_cast<int64_t>(i) % n, bf16_to_f32(got[i]), got[i],
                                   bf16_to_f32(want[i]), want[i]);
    }
  }
  return bad;
}

LayerOperands pow2_scaled(const LayerOperands& ops) {
  std::vector<float> sa(ops.a_scale.size()), sw(ops.w_scale.size());
  for (size_t i = 0; i < sa.size(); ++i) sa[i] = pow2_f32(-static_cast<int>(i % 5));  // 1, 1/2, ..., 1/16
  for (size_t i = 0; i < sw.size(); ++i) sw[i] = pow2_f32(-static_cast<int>(i % 3) - 6);
  return with_scales(ops, std::move(sa), std::move(sw));
}

TEST(CudaFp8Operands, MixedFp8LayersEqualTheCpuModelBitForBit) {
  std::map<std::string, int> claimed;
  for (const char* element : {"e5m2-e4m3", "e4m3-e5m2"}) {
    for (const char* shapes : {"256x1024x4096", "512x1024x1024"}) {
      SynthOptions o;
      o.shapes = shapes;
      o.seed = 14;
      o.element = element;
      const LayerOperands layer = synth_operands(o).at(0);
      ASSERT_TRUE(layer.fp8());
      const LayerOperands variants[2] = {layer, pow2_scaled(layer)};
      for (int v = 0; v < 2; ++v) {
        const LayerOperands& ops = variants[v];
        const bool pow2 = v == 1;
        for (const auto& [gpu_label, cpu_label] : {std::pair{"cuda:cublaslt-fp8", "cpu:fp8-hopper-fp8-promote4"},
                                                    std::pair{"cuda:cublaslt-fp8-fastacc", "cpu:fp8-hopper-fp8-chain"}}) {
          const ArmOutput gpu = make_arm(gpu_label)->run(ops);
          const nlohmann::json& extra = gpu.record.extra;
          const std::string what = fmt::format("{} vs {} on {} {} ({} scales; kernel {})", gpu_label, cpu_label, element,
                                               shapes, pow2 ? "power-of-two" : "synthetic", gpu.record.kernel);
          if (extra.at("accumulation_model").is_null()) {
            std::printf("%s: no model claimed (%s)\n", what.c_str(),
                        extra.value("accumulation_model_refused", "").c_str());
            continue;
          }
          ++claimed[gpu_label];
          const ArmOutput cpu = make_arm(cpu_label)->run(ops);
          const int64_t bad = count_bf16_differing(gpu.y, cpu.y, ops.n, what);
          std::printf("%s: %lld of %zu outputs differ\n", what.c_str(), static_cast<long long>(bad), gpu.y.size());
          EXPECT_EQ(bad, 0) << what;
        }
      }
    }
  }
  for (const char* label : {"cuda:cublaslt-fp8", "cuda:cublaslt-fp8-fastacc"}) {
    EXPECT_GT(claimed[label], 0) << label << " claimed its model on no FP8 layer";
  }
}

TEST(CudaFp8Operands, E5m2TimesE5m2IsRefusedByName) {
  SynthOptions o;
  o.shapes = "16x64x64";
  o.element = "e5m2";
  const LayerOperands ops = synth_operands(o).at(0);
  const std::string msg = test::input_error([&] { make_arm("cuda:cublaslt-fp8")->run(ops); });
  EXPECT_NE(msg.find("e5m2 x e5m2"), std::string::npos) << msg;
}

}  // namespace
}  // namespace qc
