// FP8 operands end to end on the CPU: the FP8 quantizers' fixed points (vLLM's constants, the
// clamp's NaN rule, the all-zero rows), `synth --element` layers, and the one element-type check
// that makes every INT8 arm refuse an FP8 layer. The bit-exactness of the quantizers against
// ml_dtypes is tests/peer/test_fp8_quantize_peer.py.
//
// Run: ./build/tests/qconform_unit_tests --gtest_filter='Fp8Operands*'
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "arms/declared_arm.hpp"
#include "epilogue/quantize.hpp"
#include "input_error.hpp"
#include "qconform/arm.hpp"
#include "qconform/numerics.hpp"
#include "synth/synth.hpp"

namespace {

using qc::ElementType;

TEST(Fp8Operands, QuantizerConstantsAndClampFollowVllm) {
  EXPECT_EQ(qc::fp8_max(ElementType::e4m3), 448.0f);
  EXPECT_EQ(qc::fp8_max(ElementType::e5m2), 57344.0f);
  // min_scaling_factor = 1 / (max * 512), one fp32 division (fp64 quotient rounded once is the same).
  EXPECT_EQ(qc::fp8_min_scaling_factor(ElementType::e4m3), static_cast<float>(1.0 / 229376.0));
  EXPECT_EQ(qc::fp8_min_scaling_factor(ElementType::e5m2), static_cast<float>(1.0 / (57344.0 * 512.0)));
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(qc::fp8_clamp_rne(ElementType::e4m3, nan), 0x7E);  // fmin(NaN, 448) = 448
  EXPECT_EQ(qc::fp8_clamp_rne(ElementType::e4m3, -inf), 0xFE);
  EXPECT_EQ(qc::fp8_clamp_rne(ElementType::e4m3, 470.0f), 0x7E);
  EXPECT_EQ(qc::fp8_clamp_rne(ElementType::e5m2, 1e30f), 0x7B);
  EXPECT_EQ(qc::fp8_clamp_rne(ElementType::e5m2, -0.0f), 0x80);
  EXPECT_EQ(qc::fp8_clamp_rne(ElementType::e4m3, 1.0625f), 0x38);  // tie between 1 (0x38) and 1.125: even
  EXPECT_EQ(qc::fp8_clamp_rne(ElementType::e4m3, 1.1875f), 0x3A);  // tie between 1.125 and 1.25: even
  const std::string msg = qc::test::input_error([] { qc::fp8_max(ElementType::int8); });
  EXPECT_NE(msg.find("expected an FP8 element type"), std::string::npos) << msg;
}

TEST(Fp8Operands, AllZeroRowsPerTokenAndPerTensor) {
  const std::vector<float> x = {0.0f, -0.0f, 0.0f, 0.0f};
  std::vector<uint8_t> q(4);
  std::vector<float> s(1);
  qc::quantize_activations_fp8(ElementType::e4m3, qc::Fp8ActScaling::per_token, x.data(), 1, 4, q.data(), s.data());
  EXPECT_EQ(s[0], qc::fp8_min_scaling_factor(ElementType::e4m3));
  EXPECT_EQ(q, (std::vector<uint8_t>{0x00, 0x80, 0x00, 0x00}));
  qc::quantize_activations_fp8(ElementType::e4m3, qc::Fp8ActScaling::per_tensor, x.data(), 1, 4, q.data(), s.data());
  EXPECT_EQ(s[0], 0.0f);
  EXPECT_EQ(q, (std::vector<uint8_t>(4, 0x7E)));  // 0 * (1/0) = NaN, clamped to +448 as vLLM's kernel does
}

TEST(Fp8Operands, SynthFp8LayersAreValidDeterministicAndUseTheFullRange) {
  for (const char* element : {"e4m3", "e5m2", "e5m2-e4m3"}) {
    qc::SynthOptions o;
    o.shapes = "tiny";
    o.m = 8;
    o.max_layers = 3;
    o.seed = 3;
    o.element = element;
    const auto layers = qc::synth_operands(o);
    const auto again = qc::synth_operands(o);
    const auto [a_type, w_type] = qc::parse_element_types(element);
    ASSERT_EQ(layers.size(), 3u);
    for (size_t i = 0; i < layers.size(); ++i) {
      const qc::LayerOperands& l = layers[i];
      EXPECT_EQ(l.a_type, a_type) << element;
      EXPECT_EQ(l.w_type, w_type) << element;
      l.validate();
      EXPECT_TRUE(std::equal(l.a_q.begin(), l.a_q.end(), again[i].a_q.begin())) << element << " " << l.name;
      EXPECT_TRUE(std::equal(l.w_q.begin(), l.w_q.end(), again[i].w_q.begin())) << element << " " << l.name;
      // Each row's absmax element lands on the format's largest magnitude (absmax / (absmax/max) ~ max).
      const uint8_t top = a_type == ElementType::e4m3 ? 0x7E : 0x7B;
      for (int64_t r = 0; r < l.m; ++r) {
        bool hit = false;
        for (int64_t c = 0; c < l.k; ++c) hit |= (l.a_codes()[static_cast<size_t>(r * l.k + c)] & 0x7F) == top;
        EXPECT_TRUE(hit) << element << " " << l.name << " row " << r << " never reaches code 0x" << std::hex << int{top};
      }
    }
  }
  // Per-tensor scales: one value repeated in a_scale [M] and w_scale [N], as docs/formats.md says.
  qc::SynthOptions t;
  t.shapes = "8x64x128";
  t.element = "e4m3";
  t.act_scale = "per-tensor";
  t.weight_scale = "per-tensor";
  const qc::LayerOperands pt = qc::synth_operands(t).at(0);
  pt.validate();
  for (float v : pt.a_scale) EXPECT_EQ(v, pt.a_scale[0]);
  for (float v : pt.w_scale) EXPECT_EQ(v, pt.w_scale[0]);
  t.act_scale = "per-token";
  t.weight_scale = "per-channel";
  const qc::LayerOperands pc = qc::synth_operands(t).at(0);
  EXPECT_NE(pc.a_scale[0], pc.a_scale[1]);
  EXPECT_EQ(pt.a_scale[0], *std::max_element(pc.a_scale.begin(), pc.a_scale.end()));  // absmax / max, no floor hit
  EXPECT_EQ(pt.w_scale[0], *std::max_element(pc.w_scale.begin(), pc.w_scale.end()));

  qc::SynthOptions bad;
  bad.act_scale = "per-tensor";  // INT8 synth has no per-tensor quantizer
  std::string msg0 = qc::test::input_error([&] { qc::synth_operands(bad); });
  EXPECT_NE(msg0.find("with --element int8"), std::string::npos) << msg0;
  bad.act_scale = "per-token";
  bad.element = "e4m3";
  bad.act_quantizer = "sglang";
  std::string msg = qc::test::input_error([&] { qc::synth_operands(bad); });
  EXPECT_NE(msg.find("--act-quantizer `sglang` with --element e4m3"), std::string::npos) << msg;
  bad.element = "fp8";
  msg = qc::test::input_error([&] { qc::synth_operands(bad); });
  EXPECT_NE(msg.find("--element `fp8`"), std::string::npos) << msg;
}

TEST(Fp8Operands, EveryInt8ArmRefusesAnFp8LayerNamingIt) {
  qc::SynthOptions o;
  o.shapes = "4x32x64";
  o.element = "e5m2-e4m3";
  const qc::LayerOperands layer = qc::synth_operands(o).at(0);
  int int8_arms = 0;
  for (const std::string& label : qc::list_arms()) {
    if (label.starts_with("cuda:") || label.starts_with("plugin:")) continue;  // need a GPU / a library
    auto arm = qc::make_arm(label);
    if (!arm->info().accumulation_model.empty()) continue;  // FP8 arms take FP8 layers
    ++int8_arms;
    const std::string msg = qc::test::input_error([&] { arm->run(layer); });
    EXPECT_NE(msg.find("arm `" + label + "` is an INT8 arm"), std::string::npos) << msg;
    EXPECT_NE(msg.find("layer `layer0`"), std::string::npos) << msg;
    EXPECT_NE(msg.find("e5m2 activations x e4m3 weights"), std::string::npos) << msg;
  }
  EXPECT_GT(int8_arms, 5);
  // A declared arm wraps a guarded one; an FP8 arm runs the same layer.
  auto declared = qc::declare_epilogue(qc::make_arm("cpu:vllm-cutlass"), "vllm-cutlass", "test");
  const std::string msg = qc::test::input_error([&] { declared->run(layer); });
  EXPECT_NE(msg.find("cpu:vllm-cutlass"), std::string::npos) << msg;
  EXPECT_EQ(qc::make_arm("cpu:fp8-hopper-fp8-promote4")->run(layer).y.size(), static_cast<size_t>(4 * 32));
}

}  // namespace
