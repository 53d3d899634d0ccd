// Block-scaled FP8 checkpoints and the decoder in block-FP8 mode (issue #28 item 6): the Hugging Face
// `quant_method: fp8` format (`weight_block_size`, `weight_scale_inv`) and compressed-tensors' block
// strategy, written by `save_model` and read by `load_model` with their codes and scales bit for bit;
// the hf-fp8 checkpoint runs exactly like the in-memory block quantization; capture in block mode
// writes operands that verify reads; malformed block configs are input errors naming the field. The
// files are read by the safetensors library in tests/peer/test_block_peer.py.
//
//   ./build/tests/qconform_unit_tests --gtest_filter='BlockCheckpoints*'
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "checks/verify.hpp"
#include "core/fileio.hpp"
#include "core/operands_io.hpp"
#include "qconform/arm.hpp"
#include "core/safetensors.hpp"
#include "input_error.hpp"
#include "model/model.hpp"
#include "qconform/numerics.hpp"
#include "temp_dir.hpp"

namespace qc {
namespace {

const std::vector<int32_t> kTokens = {1, 17, 200, 5, 90, 31, 7};

std::vector<float> forward_all(const Model& m, LinearFn fn) {
  Decoder dec(m, std::move(fn));
  std::vector<float> logits;
  dec.forward(kTokens, LogitRows::all, logits);
  return logits;
}

W8a8Options block_run(const std::string& act, const std::string& weight, const WeightStorage& stored) {
  W8a8Options o;
  o.fp8 = fp8_quantization("", act, weight, stored);
  return o;
}

void expect_same_block_layers(const Model& a, const Model& b) {
  const auto la = a.linear_layers(), lb = b.linear_layers();
  ASSERT_EQ(la.size(), lb.size());
  for (size_t i = 0; i < la.size(); ++i) {
    EXPECT_EQ(la[i]->weight_q, lb[i]->weight_q) << la[i]->name;
    ASSERT_EQ(la[i]->weight_scale.size(), lb[i]->weight_scale.size()) << la[i]->name;
    for (size_t j = 0; j < la[i]->weight_scale.size(); ++j) {
      EXPECT_EQ(f32_bits(la[i]->weight_scale[j]), f32_bits(lb[i]->weight_scale[j])) << la[i]->name << " " << j;
    }
    EXPECT_EQ(la[i]->weight_blocks, lb[i]->weight_blocks) << la[i]->name;
    EXPECT_EQ(la[i]->weight, lb[i]->weight) << la[i]->name;  // the dequantization
  }
}

TEST(BlockCheckpoints, HfFp8AndCompressedTensorsBlockRoundTripAndRunLikeTheInMemoryQuantization) {
  test::TempDir t("block-ckpt");
  const Model m = synth_model(synth_config("tiny-qwen3"), 31);
  const ScaleLayout blocks = ScaleLayout::block(32, 32);
  struct Format {
    ModelFormat format;
    BlockQuantizer quantizer;
    const char* scale_key;
  } formats[] = {{ModelFormat::hf_fp8, BlockQuantizer::deepgemm, ".weight_scale_inv"},
                 {ModelFormat::compressed_tensors_fp8_block, BlockQuantizer::compressed_tensors, ".weight_scale"}};
  for (const Format& f : formats) {
    const std::string dir = t.file(std::string(to_string(f.format)));
    SCOPED_TRACE(dir);
    save_model(m, dir, f.format, {}, blocks);
    const Model r = load_model(dir);
    expect_same_block_layers(fp8_block_quantized(m, blocks, f.quantizer), r);
    const WeightStorage w = weight_storage(r);
    ASSERT_TRUE(w.blocks.has_value());
    EXPECT_EQ(*w.blocks, blocks);
    const SafetensorsFile file = read_safetensors(dir + "/model.safetensors");
    const Tensor& st = file.at(std::string("model.layers.0.mlp.down_proj") + f.scale_key);
    EXPECT_EQ(st.dtype(), DType::f32);
    const LinearLayer& down = r.layers[0].down;
    EXPECT_EQ(st.shape(), (std::vector<int64_t>{(down.n_out + 31) / 32, (down.k_in + 31) / 32}));
    EXPECT_EQ(file.at("model.layers.0.mlp.down_proj.weight").dtype(), DType::e4m3);
    // Mode w8a8-fp8 takes the checkpoint's blocks (activations in groups of its K block) and its codes.
    const W8a8Options from_ckpt = block_run("", "", weight_storage(r));
    EXPECT_EQ(from_ckpt.fp8->act_scale_spec(), "per-token-group:32");
    const std::vector<float> got = forward_all(r, W8a8Linear(from_ckpt));
    if (f.format == ModelFormat::hf_fp8) {  // DeepGEMM's quantizer is the in-memory one: bit for bit
      const std::vector<float> want = forward_all(m, W8a8Linear(block_run("per-token-group:32", "per-block:32x32", {})));
      ASSERT_EQ(got.size(), want.size());
      for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(f32_bits(got[i]), f32_bits(want[i])) << i;
    }
    // Written again from what was read: the same tensors.
    save_model(r, dir + "-again", f.format);
    EXPECT_EQ(read_file(dir + "/model.safetensors"), read_file(dir + "-again/model.safetensors"));
    EXPECT_EQ(read_file(dir + "/config.json"), read_file(dir + "-again/config.json"));
  }
  const nlohmann::json hf = nlohmann::json::parse(read_file(t.file("hf-fp8") + "/config.json"));
  EXPECT_EQ(hf["quantization_config"],
            nlohmann::json::parse(R"({"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
                                      "weight_block_size": [32, 32]})"));
}

TEST(BlockCheckpoints, TheDecoderRefusesArmsOfTheOtherScaling) {
  const std::string msg = test::input_error(
      [] { W8a8Linear(W8a8Options{.arm = "cpu:fp8-hopper-fp8-chain", .fp8 = fp8_quantization("", "per-token-group:128", "per-block:128x128", {})}); });
  EXPECT_NE(msg.find("expected a block-scaled FP8 arm"), std::string::npos) << msg;
  const std::string msg2 = test::input_error([] { fp8_quantization("", "per-token-group:64", "per-block:128x128", {}); });
  EXPECT_NE(msg2.find("that cut K alike"), std::string::npos) << msg2;
  const std::string msg3 = test::input_error([] { fp8_quantization("e5m2", "per-token-group:128", "per-block:128x128", {}); });
  EXPECT_NE(msg3.find("block-scaled FP8 is e4m3 x e4m3"), std::string::npos) << msg3;
}

TEST(BlockCheckpoints, CaptureInBlockModeWritesOperandsThatVerifyReads) {
  const Model m = synth_model(synth_config("tiny"), 8);
  W8a8Options o = block_run("per-token-group:32", "per-block:32x32", {});
  const CaptureResult cap = capture_operands(m, o, {{1, 5, 9, 200}, {1, 3}});
  ASSERT_FALSE(cap.layers.empty());
  for (const LayerOperands& l : cap.layers) {
    EXPECT_TRUE(l.block_scaled()) << l.name;
    EXPECT_EQ(l.scaling_description(), "per-token-group:32 x per-block:32x32");
  }
  test::TempDir t("block-capture");
  save_operands(t.file("ops.safetensors"), cap.layers, {{"source", "test"}});
  const OperandSet back = load_operands(t.file("ops.safetensors"));
  auto a = make_arm("cpu:fp8-block-triton");
  auto b = make_arm("cpu:fp8-block-deepgemm");
  VerifyOptions vo;
  vo.reference = VerifyReference::cpu;
  const VerifyResult r = verify_layers(*a, *b, back.layers, predict(back.layers, "memory", ""), vo);
  EXPECT_TRUE(r.all_passed());
  // The arm re-run on the file reproduces every output of the model run.
  for (size_t i = 0; i < back.layers.size(); ++i) EXPECT_EQ(a->run(back.layers[i]).y, cap.outputs[i]) << back.layers[i].name;
}

TEST(BlockCheckpoints, MalformedBlockConfigsAreInputErrors) {
  test::TempDir t("block-bad");
  const Model m = synth_model(synth_config("tiny"), 3);
  save_model(m, t.file("good"), ModelFormat::hf_fp8, {}, ScaleLayout::block(32, 32));
  save_model(m, t.file("ct"), ModelFormat::compressed_tensors_fp8_block, {}, ScaleLayout::block(32, 32));
  struct Bad {
    const char* base;
    std::function<void(nlohmann::json&)> edit;
    const char* says;
  } bads[] = {
      {"good", [](nlohmann::json& q) { q.erase("weight_block_size"); }, "per-tensor Hugging Face fp8 checkpoints are not read"},
      {"good", [](nlohmann::json& q) { q["weight_block_size"] = {128}; }, "field `quantization_config.weight_block_size`: expected [rows, cols]"},
      {"good", [](nlohmann::json& q) { q["activation_scheme"] = "static"; }, "field `quantization_config.activation_scheme`: expected \"dynamic\""},
      {"good", [](nlohmann::json& q) { q["kv_scale"] = 1; }, "field `quantization_config.kv_scale`: not a field"},
      {"good", [](nlohmann::json& q) { q["weight_block_size"] = {64, 64}; }, "tensor `model.layers.0.self_attn.q_proj.weight_scale_inv`"},
      {"ct", [](nlohmann::json& q) { q["config_groups"]["group_0"]["input_activations"]["group_size"] = 64; },
       "input_activations.group_size`: expected 32, found 64"},
      {"ct", [](nlohmann::json& q) { q["config_groups"]["group_0"]["weights"]["block_structure"] = nullptr; },
       "weights.block_structure`: expected [rows, cols]"},
  };
  int i = 0;
  for (const Bad& b : bads) {
    const std::string dir = t.file("bad" + std::to_string(i++));
    std::filesystem::copy(t.file(b.base), dir, std::filesystem::copy_options::recursive);
    nlohmann::json cfg = nlohmann::json::parse(read_file(dir + "/config.json"));
    b.edit(cfg["quantization_config"]);
    std::ofstream(dir + "/config.json") << cfg.dump(2);
    const std::string msg = test::input_error([&] { load_model(dir); });
    EXPECT_NE(msg.find(b.says), std::string::npos) << b.says << "\n" << msg;
  }
}

}  // namespace
}  // namespace qc
