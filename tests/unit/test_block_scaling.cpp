// Scale granularity as a dimension of operands (include/qconform/operands.hpp): the layouts and their
// spellings, every validation rule with its message (file, tensor, coordinate, expected, found), operand
// files with per-token-group and per-block scales (metadata, shapes, round trips, sharded sets), `synth`'s
// block-scaled layers, and the block quantizers' fixed points (UE8M0 rounding, all-zero groups, partial
// groups, saturation). Their bit-exactness against NumPy/ml_dtypes is tests/peer/test_block_peer.py.
//
// Run: ./build/tests/qconform_unit_tests --gtest_filter='BlockScaling*'
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "core/operands_io.hpp"
#include "core/safetensors.hpp"
#include "epilogue/quantize.hpp"
#include "input_error.hpp"
#include "qconform/arm.hpp"
#include "qconform/numerics.hpp"
#include "synth/synth.hpp"
#include "temp_dir.hpp"

namespace {

using qc::ElementType;
using qc::ScaleLayout;

qc::SynthOptions block_options(const std::string& shapes, bool ue8m0 = false) {
  qc::SynthOptions o;
  o.shapes = shapes;
  o.element = "e4m3";
  o.act_scale = "per-token-group:128";
  o.weight_scale = "per-block:128x128";
  o.ue8m0 = ue8m0;
  return o;
}

TEST(BlockScaling, LayoutSpellingsRoundTripAndRefuseTheOthers) {
  for (const char* a : {"per-token", "per-tensor", "per-token-group:128", "per-token-group:1"}) {
    EXPECT_EQ(qc::parse_scale_layout(a, false, "--act-scale").spec(), a);
  }
  for (const char* w : {"per-channel", "per-tensor", "per-block:128x128", "per-block:1x64"}) {
    EXPECT_EQ(qc::parse_scale_layout(w, true, "--weight-scale").spec(), w);
  }
  const ScaleLayout g = qc::parse_scale_layout("per-token-group:128", false, "x");
  EXPECT_EQ(g.scale_cols(200), 2);  // a partial group at the K edge
  EXPECT_EQ(g.scale_count(3, 200), 6);
  const ScaleLayout b = qc::parse_scale_layout("per-block:128x64", true, "x");
  EXPECT_EQ(b.scale_rows(130), 2);  // a partial block at the N edge
  EXPECT_EQ(b.index(129, 3, 256), 1 * 4 + 3);
  struct Bad {
    const char* spec;
    bool weights;
    const char* says;
  } bad[] = {{"per-channel", false, "expected per-token, per-tensor or per-token-group:<g>"},
             {"per-token-group:0", false, "positive block sizes, found `0`"},
             {"per-token-group:12x", false, "found `12x`"},
             {"per-block:128", true, "no `x` between the block's rows and columns"},
             {"per-token", true, "expected per-channel, per-tensor or per-block:<rows>x<cols>"},
             {"per-block:128x-1", true, "found `-1`"}};
  for (const Bad& x : bad) {
    const std::string msg = qc::test::input_error([&] { qc::parse_scale_layout(x.spec, x.weights, "--flag"); });
    EXPECT_NE(msg.find("--flag `" + std::string(x.spec) + "`"), std::string::npos) << msg;
    EXPECT_NE(msg.find(x.says), std::string::npos) << msg;
  }
}

// A tiny valid block-scaled layer (2x3x200 with 1x128 / 2x128 blocks) built by hand, and variants.
struct Layer {
  qc::OperandStorage s;
  int64_t m = 2, n = 3, k = 200;
  Layer() {
    s.a_type = s.w_type = ElementType::e4m3;
    s.a_scaling = ScaleLayout::token_group(128);
    s.w_scaling = ScaleLayout::block(2, 128);
    s.a_q.assign(static_cast<size_t>(m * k), 0x38);  // 1.0
    s.w_q.assign(static_cast<size_t>(n * k), 0x30);  // 0.5
    s.a_scale.assign(4, 0.25f);                      // [2, 2]
    s.w_scale.assign(4, 0.5f);                       // [ceil(3/2), 2]
  }
  qc::LayerOperands ops() const { return qc::make_operands("l0", m, n, k, s, "test"); }
};

std::string validate_error(const Layer& l) {
  return qc::test::input_error([&] { l.ops().validate(); });
}

TEST(BlockScaling, ValidationNamesTheFieldTheCoordinateExpectedAndFound) {
  Layer ok;
  EXPECT_NO_THROW(ok.ops().validate());
  EXPECT_EQ(ok.ops().scaling_description(), "per-token-group:128 x per-block:2x128");
  EXPECT_TRUE(ok.ops().block_scaled());
  EXPECT_EQ(ok.ops().scale_block_k(), 128);

  Layer a;
  a.s.a_scale.assign(2, 0.25f);
  std::string msg = validate_error(a);
  EXPECT_NE(msg.find("field `a_scale`: expected 2x2 (rows of a_q by per-token-group:128, ceil(200/128) along K) = 4 "
                     "elements, found 2"),
            std::string::npos)
      << msg;
  Layer w;
  w.s.w_scale.assign(6, 0.5f);
  msg = validate_error(w);
  EXPECT_NE(msg.find("field `w_scale`: expected 2x2 (ceil(3/2) blocks of w_q's rows by ceil(200/128) along K) = 4 "
                     "elements, found 6"),
            std::string::npos)
      << msg;
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  for (const float bad : {0.0f, -0.5f, nan, inf}) {
    Layer z;
    z.s.w_scale[3] = bad;
    msg = validate_error(z);
    EXPECT_NE(msg.find("test: layer `l0`, field `w_scale`[1,1]: expected a finite scale > 0, found"), std::string::npos)
        << msg;
  }
  Layer p;
  p.s.a_scaling.ue8m0 = true;
  p.s.a_scale = {0.25f, 0.25f, 0.3f, 0.25f};
  msg = validate_error(p);
  EXPECT_NE(msg.find("field `a_scale`[1,0]: expected a power of two 2^e with e in [-127, 127] (UE8M0"), std::string::npos)
      << msg;
  EXPECT_NE(msg.find("found 0.3 (0x3e99999a)"), std::string::npos) << msg;
  Layer sub;  // 2^-128 is a power of two but no UE8M0 value (e < -127)
  sub.s.w_scaling.ue8m0 = true;
  sub.s.w_scale[0] = 0x1p-128f;
  msg = validate_error(sub);
  EXPECT_NE(msg.find("field `w_scale`[0,0]: expected a power of two"), std::string::npos) << msg;
  Layer cut;
  cut.s.w_scaling = ScaleLayout::block(2, 64);
  cut.s.w_scale.assign(2 * 4, 0.5f);
  msg = validate_error(cut);
  EXPECT_NE(msg.find("expected the activation groups and the weight blocks to cut K alike, found a_scale "
                     "per-token-group:128 and w_scale per-block:2x64"),
            std::string::npos)
      << msg;
  Layer wrong;
  wrong.s.a_scaling = ScaleLayout::block(2, 128);
  msg = validate_error(wrong);
  EXPECT_NE(msg.find("field `a_scale`: expected per-tensor, per-token or per-token-group scales, found per-block"),
            std::string::npos)
      << msg;
  Layer i8;
  i8.s.a_type = i8.s.w_type = ElementType::int8;
  msg = validate_error(i8);
  EXPECT_NE(msg.find("block-scaled INT8 is not modelled"), std::string::npos) << msg;
}

TEST(BlockScaling, SynthWritesBlockScaledLayersOfTheQuantizers) {
  qc::SynthOptions o = block_options("3x300x200");
  const qc::LayerOperands l = qc::synth_operands(o).at(0);
  EXPECT_EQ(l.a_scaling, ScaleLayout::token_group(128));
  EXPECT_EQ(l.w_scaling, ScaleLayout::block(128, 128));
  EXPECT_EQ(l.a_scale.size(), 3u * 2);
  EXPECT_EQ(l.w_scale.size(), 3u * 2);  // ceil(300/128) x ceil(200/128)
  // The default quantizers: vLLM's per_token_group_quant_fp8 and DeepGEMM's per_block_cast_to_fp8. The
  // synthetic fp32 operands are not kept, so the check is the quantizer's own fixed point: each group's
  // largest |code| is 448 (its absmax maps to 448 exactly or saturates there).
  for (int64_t r = 0; r < 3; ++r) {
    for (int64_t gi = 0; gi < 2; ++gi) {
      float largest = 0;
      for (int64_t c = gi * 128; c < std::min<int64_t>(200, gi * 128 + 128); ++c) {
        largest = std::max(largest, std::fabs(qc::e4m3fn_to_f32(static_cast<uint8_t>(l.a_q[r * 200 + c]))));
      }
      EXPECT_EQ(largest, 448.0f) << r << "," << gi;
    }
  }
  const qc::LayerOperands u = qc::synth_operands(block_options("3x300x200", /*ue8m0=*/true)).at(0);
  EXPECT_TRUE(u.a_scaling.ue8m0 && u.w_scaling.ue8m0);
  for (float s : u.a_scale) EXPECT_EQ(qc::f32_bits(s) & 0x7FFFFF, 0u) << s;
  for (float s : u.w_scale) EXPECT_EQ(qc::f32_bits(s) & 0x7FFFFF, 0u) << s;
  EXPECT_NO_THROW(u.validate());
  // Deterministic.
  const qc::LayerOperands again = qc::synth_operands(o).at(0);
  EXPECT_TRUE(std::equal(l.a_scale.begin(), l.a_scale.end(), again.a_scale.begin()));
  EXPECT_TRUE(std::equal(l.w_q.begin(), l.w_q.end(), again.w_q.begin()));
}

TEST(BlockScaling, SynthRefusesWhatTheQuantizersCannotDo) {
  struct Bad {
    const char* element;
    const char* act;
    const char* weight;
    bool ue8m0;
    const char* says;
  } bad[] = {{"e5m2", "per-token-group:128", "per-block:128x128", false, "expected e4m3"},
             {"e4m3", "per-token-group:64", "per-block:128x128", false, "to cut K alike"},
             {"e4m3", "per-token", "per-block:128x128", true, "--ue8m0 with --act-scale per-token"},
             {"int8", "per-token-group:128", "per-channel", false, "with --element int8: expected per-token"}};
  for (const Bad& b : bad) {
    qc::SynthOptions o = block_options("tiny");
    o.element = b.element, o.act_scale = b.act, o.weight_scale = b.weight, o.ue8m0 = b.ue8m0;
    const std::string msg = qc::test::input_error([&] { qc::synth_operands(o); });
    EXPECT_NE(msg.find(b.says), std::string::npos) << b.act << " " << b.weight << ": " << msg;
  }
  qc::SynthOptions o = block_options("tiny");
  o.act_quantizer = "reciprocal";
  const std::string msg = qc::test::input_error([&] { qc::synth_operands(o); });
  EXPECT_NE(msg.find("--act-quantizer `reciprocal`: expected a per-token-group FP8 quantizer: vllm, sglang or deepgemm"),
            std::string::npos)
      << msg;
}

TEST(BlockScaling, OperandFilesCarryTheLayoutsAndRoundTrip) {
  qc::test::TempDir dir("block-scaling");
  const std::vector<qc::LayerOperands> layers = qc::synth_operands(block_options("tiny", /*ue8m0=*/true));
  const std::string path = dir.file("ops.safetensors");
  qc::save_operands(path, layers, {{"source", "test"}});
  const qc::SafetensorsFile file = qc::read_safetensors(path);
  EXPECT_EQ(file.metadata.at("act_scale"), "per-token-group:128");
  EXPECT_EQ(file.metadata.at("weight_scale"), "per-block:128x128");
  EXPECT_EQ(file.metadata.at("scale_fmt"), "ue8m0");
  const qc::LayerOperands& l0 = layers.front();
  EXPECT_EQ(file.at(l0.name + ".a_scale").shape(), (std::vector<int64_t>{l0.m, (l0.k + 127) / 128}));
  EXPECT_EQ(file.at(l0.name + ".w_scale").shape(), (std::vector<int64_t>{(l0.n + 127) / 128, (l0.k + 127) / 128}));
  const qc::OperandSet back = qc::load_operands(path);
  ASSERT_EQ(back.layers.size(), layers.size());
  for (size_t i = 0; i < layers.size(); ++i) {
    EXPECT_EQ(back.layers[i].a_scaling, layers[i].a_scaling);
    EXPECT_EQ(back.layers[i].w_scaling, layers[i].w_scaling);
    EXPECT_TRUE(std::equal(layers[i].w_scale.begin(), layers[i].w_scale.end(), back.layers[i].w_scale.begin()));
  }
  // Sharded: the index's metadata carries the layouts for every shard.
  qc::ShardedOperandWriter writer(dir.file("set.index.json"), {{"source", "test"}}, 200000);
  for (const qc::LayerOperands& l : layers) writer.add(l);
  const qc::OperandSet sharded = qc::open_operands(writer.finish());
  EXPECT_GT(writer.shard_count(), 1u);
  EXPECT_EQ(sharded.load(3).w_scaling, layers[3].w_scaling);
  EXPECT_TRUE(sharded.load(3).w_scaling.ue8m0);
  // A default-layout file gets no new metadata (its bytes stay as before).
  qc::SynthOptions f8;
  f8.shapes = "4x8x16";
  f8.element = "e4m3";
  qc::save_operands(dir.file("plain.safetensors"), qc::synth_operands(f8), {{"source", "test"}});
  const qc::SafetensorsFile plain = qc::read_safetensors(dir.file("plain.safetensors"));
  EXPECT_EQ(plain.metadata.count("act_scale") + plain.metadata.count("weight_scale") + plain.metadata.count("scale_fmt"),
            0u);
  // Layers of two layouts in one file are refused.
  std::vector<qc::LayerOperands> mixed{layers.front(), qc::synth_operands(f8).front()};
  const std::string msg = qc::test::input_error([&] { qc::save_operands(dir.file("mixed.safetensors"), mixed, {}); });
  EXPECT_NE(msg.find("expected one scale layout for every layer of an operand file"), std::string::npos) << msg;
}

TEST(BlockScaling, OperandFileShapesAndMetadataAreChecked) {
  qc::test::TempDir dir("block-scaling-bad");
  const std::vector<qc::LayerOperands> layers = qc::synth_operands(block_options("2x256x200"));
  const qc::LayerOperands& l = layers.front();
  const auto write = [&](const std::string& name, std::vector<int64_t> a_shape, std::map<std::string, std::string> md) {
    std::vector<std::pair<std::string, qc::Tensor>> t;
    t.emplace_back("l.a_q", qc::Tensor::borrow(qc::DType::e4m3, {l.m, l.k}, reinterpret_cast<const std::byte*>(l.a_q.data()), l.keepalive));
    t.emplace_back("l.w_q", qc::Tensor::borrow(qc::DType::e4m3, {l.n, l.k}, reinterpret_cast<const std::byte*>(l.w_q.data()), l.keepalive));
    t.emplace_back("l.w_scale", qc::Tensor::borrow(qc::DType::f32, {2, 2}, reinterpret_cast<const std::byte*>(l.w_scale.data()), l.keepalive));
    int64_t count = 1;
    for (int64_t d : a_shape) count *= d;
    const std::vector<float> sa(static_cast<size_t>(count), 0.01f);
    t.emplace_back("l.a_scale", qc::Tensor::from_bytes(qc::DType::f32, std::move(a_shape), std::as_bytes(std::span(sa))));
    qc::write_safetensors(dir.file(name), t, md);
    return dir.file(name);
  };
  const std::map<std::string, std::string> md{{"act_scale", "per-token-group:128"}, {"weight_scale", "per-block:128x128"}};
  EXPECT_NO_THROW(qc::load_operands(write("ok.safetensors", {2, 2}, md)));
  std::string msg = qc::test::input_error([&] { qc::load_operands(write("a.safetensors", {2, 3}, md)); });
  EXPECT_NE(msg.find("layer `l`, tensor `a_scale`: expected shape [2, 2] (per-token-group:128 scales: ceil(2/1) rows of "
                     "a_q by ceil(200/128) along K), found [2, 3]"),
            std::string::npos)
      << msg;
  msg = qc::test::input_error([&] { qc::load_operands(write("none.safetensors", {2, 2}, {})); });
  EXPECT_NE(msg.find("a scale per K group or block needs the file's metadata `act_scale`"), std::string::npos) << msg;
  msg = qc::test::input_error(
      [&] { qc::load_operands(write("fmt.safetensors", {2, 2}, {{"act_scale", "per-token-group:128"}, {"weight_scale", "per-block:128x128"}, {"scale_fmt", "e8m0"}})); });
  EXPECT_NE(msg.find("metadata `scale_fmt`: expected \"ue8m0\""), std::string::npos) << msg;
  msg = qc::test::input_error([&] { qc::load_operands(write("ue.safetensors", {2, 2}, {{"act_scale", "per-token-group:128"}, {"weight_scale", "per-block:128x128"}, {"scale_fmt", "ue8m0"}})); });
  EXPECT_NE(msg.find("field `a_scale`[0,0]: expected a power of two"), std::string::npos) << msg;
  msg = qc::test::input_error([&] { qc::load_operands(write("gran.safetensors", {2, 2}, {{"act_scale", "per-block:1x128"}})); });
  EXPECT_NE(msg.find("metadata `act_scale` `per-block:1x128`: expected per-token, per-tensor or per-token-group:<g>"),
            std::string::npos)
      << msg;
}

TEST(BlockScaling, Ue8m0CeilIsTheSmallestPowerOfTwoAtOrAbove) {
  EXPECT_EQ(qc::ue8m0_ceil(1.0f), 1.0f);
  EXPECT_EQ(qc::ue8m0_ceil(0x1.000002p0f), 2.0f);  // one ulp above: the next power
  EXPECT_EQ(qc::ue8m0_ceil(0x1.fffffep-3f), 0.25f);
  EXPECT_EQ(qc::ue8m0_ceil(0x1p-126f), 0x1p-126f);
  EXPECT_EQ(qc::ue8m0_ceil(0x1p-140f), 0x1p-126f);  // subnormal: the smallest normal power
  EXPECT_EQ(qc::ue8m0_ceil(0x1.8p127f), 0x1p127f);  // clamped, as DeepGEMM's ceil_to_ue8m0
}

TEST(BlockScaling, GroupQuantizersOnDesignedRows) {
  // One row of 5 in groups of 4: group 0 = {448*2^-7 * 3 = 10.5, ties, -x}, group 1 the partial one.
  const std::vector<float> x = {10.5f, -10.5f, 0.1171875f, 0.0f, 3.0f};
  std::vector<uint8_t> q(5);
  std::vector<float> s(2);
  qc::quantize_activations_fp8_groups(ElementType::e4m3, qc::GroupQuantizer::vllm, 4, false, x.data(), 1, 5, q.data(), s.data());
  EXPECT_EQ(s[0], 10.5f / 448.0f);
  EXPECT_EQ(s[1], 3.0f / 448.0f);
  EXPECT_EQ(q[0], 0x7E);  // 10.5 / s = 448 (or a rounding of it that e4m3 takes to 448)
  EXPECT_EQ(q[1], 0xFE);
  EXPECT_EQ(q[3], 0x00);
  EXPECT_EQ(q[4], 0x7E);  // the partial group's own absmax
  // All-zero group: each kernel's floor.
  const std::vector<float> zeros(4, 0.0f);
  std::vector<uint8_t> qz(4);
  float sz = 0;
  qc::quantize_activations_fp8_groups(ElementType::e4m3, qc::GroupQuantizer::vllm, 4, false, zeros.data(), 1, 4, qz.data(), &sz);
  EXPECT_EQ(sz, 1e-10f / 448.0f);
  EXPECT_EQ(qz, std::vector<uint8_t>(4, 0x00));
  qc::quantize_activations_fp8_groups(ElementType::e4m3, qc::GroupQuantizer::vllm, 4, true, zeros.data(), 1, 4, qz.data(), &sz);
  EXPECT_EQ(sz, qc::ue8m0_ceil(1e-10f));  // vLLM floors the UE8M0 scale at 1e-10: 2^-33
  EXPECT_EQ(sz, 0x1p-33f);
  qc::quantize_activations_fp8_groups(ElementType::e4m3, qc::GroupQuantizer::deepgemm, 4, false, zeros.data(), 1, 4, qz.data(), &sz);
  EXPECT_EQ(sz, 1e-4f / 448.0f);
  qc::quantize_activations_fp8_groups(ElementType::e4m3, qc::GroupQuantizer::sglang, 4, false, zeros.data(), 1, 4, qz.data(), &sz);
  EXPECT_EQ(sz, 1e-10f * (1.0f / 448.0f));
  // UE8M0: the scale rounds up, so the largest code stays <= 448 (no saturation needed at the absmax).
  qc::quantize_activations_fp8_groups(ElementType::e4m3, qc::GroupQuantizer::vllm, 4, true, x.data(), 1, 5, q.data(), s.data());
  EXPECT_EQ(s[0], 0.03125f);  // ceil_pow2(10.5/448 = 0.0234375) = 2^-5
  EXPECT_EQ(qc::e4m3fn_to_f32(q[0]), 320.0f);  // 10.5/2^-5 = 336, a tie between 320 and 352: even
  const std::string msg = qc::test::input_error([&] {
    qc::quantize_activations_fp8_groups(ElementType::e5m2, qc::GroupQuantizer::vllm, 4, false, x.data(), 1, 5, q.data(), s.data());
  });
  EXPECT_NE(msg.find("expected e4m3"), std::string::npos) << msg;
}

TEST(BlockScaling, BlockQuantizerOnDesignedBlocks) {
  // 3x3 weights in blocks of 2x2: partial blocks at both edges.
  const std::vector<float> w = {1, -2, 0.5f, 0.25f, 4, 0, 0, 0, 0};
  std::vector<uint8_t> q(9);
  std::vector<float> s(4);
  qc::quantize_weights_fp8_blocks(ElementType::e4m3, qc::BlockQuantizer::deepgemm, 2, 2, false, w.data(), 3, 3, q.data(), s.data());
  EXPECT_EQ(s[0], 4.0f / 448.0f);    // block (0,0): {1, -2, 0.25, 4}
  EXPECT_EQ(s[1], 0.5f / 448.0f);    // block (0,1): {0.5, 0}
  EXPECT_EQ(s[3], 1e-4f / 448.0f);   // block (1,1): {0}: DeepGEMM's 1e-4 floor
  EXPECT_EQ(q[4], 0x7E);             // 4 * (1/s) ~ 448
  qc::quantize_weights_fp8_blocks(ElementType::e4m3, qc::BlockQuantizer::compressed_tensors, 2, 2, false, w.data(), 3, 3, q.data(), s.data());
  EXPECT_EQ(s[3], 0x1p-23f);  // compressed-tensors: a zero scale becomes fp32's epsilon
  const std::string msg = qc::test::input_error([&] {
    qc::quantize_weights_fp8_blocks(ElementType::e4m3, qc::BlockQuantizer::compressed_tensors, 2, 2, true, w.data(), 3, 3, q.data(), s.data());
  });
  EXPECT_NE(msg.find("compressed-tensors has no UE8M0 format"), std::string::npos) << msg;
}

TEST(BlockScaling, ArmsRefuseLayersOfTheOtherScaling) {
  const qc::LayerOperands block = qc::synth_operands(block_options("4x32x256")).at(0);
  qc::SynthOptions f8;
  f8.shapes = "4x32x256";
  f8.element = "e4m3";
  const qc::LayerOperands plain = qc::synth_operands(f8).at(0);
  std::string msg = qc::test::input_error([&] { qc::make_arm("cpu:fp8-hopper-fp8-chain")->run(block); });
  EXPECT_NE(msg.find("arm `cpu:fp8-hopper-fp8-chain` accumulates without scales"), std::string::npos) << msg;
  EXPECT_NE(msg.find("per-token-group:128 x per-block:128x128 scales"), std::string::npos) << msg;
  msg = qc::test::input_error([&] { qc::make_arm("cpu:fp8-block-triton")->run(plain); });
  EXPECT_NE(msg.find("arm `cpu:fp8-block-triton` is a block-scaled FP8 arm (model block-triton) and cannot run layer "
                     "`layer0`"),
            std::string::npos)
      << msg;
  msg = qc::test::input_error([&] { qc::make_arm("cpu:vllm-cutlass")->run(block); });
  EXPECT_NE(msg.find("is an INT8 arm"), std::string::npos) << msg;
  const qc::ArmOutput out = qc::make_arm("cpu:fp8-block-triton")->run(block);
  ASSERT_TRUE(out.d.has_value());
  for (size_t i = 0; i < out.y.size(); ++i) EXPECT_EQ(out.y[i], qc::f32_to_bf16((*out.d)[i])) << i;
}

}  // namespace
