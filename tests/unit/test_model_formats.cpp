// Model formats: synth-model writes, the loaders read. HF vs llama2.c of the same weights (their
// q/k rows permuted for the other rotary layout) forward bit for bit; Qwen2/Qwen3 and bf16 round
// trips; compressed-tensors checkpoints run exactly like the in-memory quantization; the pow2
// rewrite changes scales only and never touches IN; malformed configs and checkpoints are
// input errors naming the field. compressed-tensors FP8 ("float-quantized") checkpoints round-trip
// their codes and scales, run exactly like the in-memory FP8 quantization, take the pow2 rewrite,
// and every malformed FP8 config or tensor is an input error naming the field.
//
// Build and run: cmake --build build --target qconform_unit_tests &&
//   ./build/tests/qconform_unit_tests --gtest_filter='ModelFormats*'
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>

#include "qconform/error.hpp"
#include "core/fileio.hpp"
#include "model/model.hpp"
#include "qconform/numerics.hpp"
#include "core/safetensors.hpp"
#include "core/sha256.hpp"

namespace {

namespace fs = std::filesystem;

struct TempDir {
  std::string path;
  explicit TempDir(const std::string& tag) {
    path = (fs::temp_directory_path() / fmt::format("qc_formats_{}_{}", tag, ::getpid())).string();
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
  std::string operator/(const std::string& name) const { return path + "/" + name; }
};

std::vector<float> forward_all(const qc::Model& m, const std::vector<int32_t>& toks,
                               qc::LinearFn fn = qc::fp32_linear) {
  qc::Decoder dec(m, std::move(fn));
  std::vector<float> logits;
  dec.forward(toks, qc::LogitRows::all, logits);
  return logits;
}

void expect_bitwise(const std::vector<float>& a, const std::vector<float>& b, const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  int64_t bad = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::bit_cast<uint32_t>(a[i]) != std::bit_cast<uint32_t>(b[i]) && ++bad <= 3) {
      ADD_FAILURE() << what << " at " << i << ": " << a[i] << " (0x" << std::hex << std::bit_cast<uint32_t>(a[i])
                    << ") vs " << b[i] << " (0x" << std::bit_cast<uint32_t>(b[i]) << std::dec << ")";
    }
  }
  EXPECT_EQ(bad, 0) << what;
}

void expect_same_tensors(const qc::Model& a, const qc::Model& b) {
  EXPECT_EQ(a.embed, b.embed);
  EXPECT_EQ(a.final_norm, b.final_norm);
  EXPECT_EQ(a.lm_head, b.lm_head);
  ASSERT_EQ(a.layers.size(), b.layers.size());
  const auto la = a.linear_layers(), lb = b.linear_layers();
  for (size_t i = 0; i < la.size(); ++i) {
    EXPECT_EQ(la[i]->name, lb[i]->name);
    EXPECT_EQ(la[i]->weight, lb[i]->weight) << la[i]->name;
    EXPECT_EQ(la[i]->bias, lb[i]->bias) << la[i]->name;
  }
  for (size_t i = 0; i < a.layers.size(); ++i) {
    EXPECT_EQ(a.layers[i].attn_norm, b.layers[i].attn_norm);
    EXPECT_EQ(a.layers[i].q_norm, b.layers[i].q_norm);
    EXPECT_EQ(a.layers[i].k_norm, b.layers[i].k_norm);
  }
}

const std::vector<int32_t> kTokens = {1, 17, 200, 3, 99, 45, 45, 250, 8, 130, 61, 7};

bool is_weight_scale(const std::string& name) {
  return name.size() >= 13 && name.substr(name.size() - 13) == ".weight_scale";
}

// `qconform pow2`'s rewrite of one safetensors file, checked independently: the same tensors and
// metadata, every tensor byte-identical (codes, INT8 or FP8, included) except `*.weight_scale`, whose
// every value (F32 or BF16, in its own dtype) is the nearest power of two in log2 of the original
// (the threshold 2^(e+1/2) is irrational: no ties).
void expect_pow2_rewrite(const std::string& in, const std::string& out) {
  const qc::SafetensorsFile a = qc::read_safetensors(in);
  const qc::SafetensorsFile b = qc::read_safetensors(out);
  EXPECT_EQ(a.metadata, b.metadata);
  ASSERT_EQ(a.names(), b.names());
  auto value = [](const qc::Tensor& t, int64_t i) -> double {
    return t.dtype() == qc::DType::bf16 ? qc::bf16_to_f32(t.span<uint16_t>()[static_cast<size_t>(i)])
                                         : t.span<float>()[static_cast<size_t>(i)];
  };
  for (const auto& [name, ta] : a.tensors) {
    const qc::Tensor& tb = b.at(name);
    ASSERT_EQ(ta.dtype(), tb.dtype()) << name;
    ASSERT_EQ(ta.shape(), tb.shape()) << name;
    if (!is_weight_scale(name)) {
      EXPECT_EQ(qc::sha256_hex(ta.bytes()), qc::sha256_hex(tb.bytes())) << name << ": codes or other tensors changed";
      continue;
    }
    for (int64_t i = 0; i < ta.numel(); ++i) {
      ASSERT_EQ(value(tb, i), std::exp2(std::round(std::log2(value(ta, i))))) << name << "[" << i << "] from " << value(ta, i);
    }
  }
}

TEST(ModelFormats, HfAndLlama2cOfTheSameWeightsForwardBitForBit) {
  TempDir t("hf_ll");
  const qc::Model m = qc::synth_model(qc::synth_config("tiny"), 5);
  qc::save_model(m, t / "hf", qc::ModelFormat::hf);
  qc::save_model(m, t / "ll", qc::ModelFormat::llama2c);
  const qc::Model hf = qc::load_model(t / "hf");
  const qc::Model ll = qc::load_model(t / "ll");
  EXPECT_EQ(hf.config.rope_style, qc::RopeStyle::rotate_half);
  EXPECT_EQ(ll.config.rope_style, qc::RopeStyle::interleaved);
  expect_same_tensors(m, hf);
  // The llama2.c file holds the permuted q/k rows: permuting back gives the same tensors.
  expect_same_tensors(m, qc::with_rope_style(ll, qc::RopeStyle::rotate_half));
  EXPECT_NE(ll.layers[0].q.weight, m.layers[0].q.weight) << "the rotary permutation was not applied";
  const auto a = forward_all(hf, kTokens), b = forward_all(ll, kTokens), c = forward_all(m, kTokens);
  expect_bitwise(a, b, "hf vs llama2c forward");
  expect_bitwise(a, c, "hf vs in-memory forward");
  // Same in w8a8: per-channel quantization is invariant under a row permutation.
  expect_bitwise(forward_all(hf, kTokens, qc::W8a8Linear({})), forward_all(ll, kTokens, qc::W8a8Linear({})),
                 "hf vs llama2c w8a8 forward");
}

TEST(ModelFormats, Qwen2Qwen3AndBf16RoundTripThroughHf) {
  TempDir t("qwen");
  for (const char* name : {"tiny-qwen3", "tiny-qwen2", "tiny"}) {
    for (const char* dtype : {"f32", "bf16"}) {
      qc::ModelConfig c = qc::synth_config(name);
      c.dtype = dtype;
      const qc::Model m = qc::synth_model(c, 9);
      const std::string dir = t / fmt::format("{}-{}", name, dtype);
      qc::save_model(m, dir, qc::ModelFormat::hf);
      const qc::Model r = qc::load_model(dir);
      SCOPED_TRACE(dir);
      EXPECT_EQ(r.config.dtype, dtype);
      EXPECT_EQ(r.config.qk_norm, c.qk_norm);
      EXPECT_EQ(r.config.qkv_bias, c.qkv_bias);
      EXPECT_EQ(r.config.head_dim, c.head_dim);
      EXPECT_EQ(r.config.rms_eps, c.rms_eps);
      EXPECT_EQ(r.config.rope_theta, c.rope_theta);
      EXPECT_EQ(r.config.tie_embeddings, c.tie_embeddings);
      expect_same_tensors(m, r);
      expect_bitwise(forward_all(m, kTokens), forward_all(r, kTokens), dir);
      // The safetensors file stores the declared dtype.
      const qc::SafetensorsFile f = qc::read_safetensors(dir + "/model.safetensors");
      EXPECT_EQ(f.at("model.norm.weight").dtype(), std::string(dtype) == "bf16" ? qc::DType::bf16 : qc::DType::f32);
    }
  }
}

TEST(ModelFormats, CompressedTensorsRunsExactlyLikeTheInMemoryQuantization) {
  TempDir t("ct");
  for (const char* dtype : {"f32", "bf16"}) {
    qc::ModelConfig c = qc::synth_config("tiny-qwen3");
    c.dtype = dtype;
    const qc::Model m = qc::synth_model(c, 21);
    const std::string dir = t / fmt::format("ct-{}", dtype);
    qc::save_model(m, dir, qc::ModelFormat::compressed_tensors);
    const qc::Model q = qc::load_model(dir);
    SCOPED_TRACE(dir);
    ASSERT_TRUE(q.layers[0].q.quantized());
    const qc::SafetensorsFile f = qc::read_safetensors(dir + "/model.safetensors");
    const qc::Tensor& w = f.at("model.layers.1.mlp.down_proj.weight");
    const qc::Tensor& s = f.at("model.layers.1.mlp.down_proj.weight_scale");
    EXPECT_EQ(w.dtype(), qc::DType::i8);
    EXPECT_EQ(s.dtype(), std::string(dtype) == "bf16" ? qc::DType::bf16 : qc::DType::f32);
    EXPECT_EQ(s.shape(), (std::vector<int64_t>{c.hidden, 1}));
    // Every weight is within half a step of its dequantized code (the scale is absmax/127.5); the
    // bf16 path rounds the quotient w/scale to bf16 first (spacing up to 0.5 below 128): 0.75 steps.
    const double steps = std::string(dtype) == "bf16" ? 0.75 : 0.5;
    const qc::LinearLayer& orig = m.layers[1].down;
    const qc::LinearLayer& ql = q.layers[1].down;
    for (int64_t n = 0; n < ql.n_out; ++n) {
      for (int64_t k = 0; k < ql.k_in; ++k) {
        const double err = std::fabs(double(orig.weight[n * ql.k_in + k]) - double(ql.weight_q[n * ql.k_in + k]) * ql.weight_scale[n]);
        // Slack 1e-5: the fp32 roundings of the scale and of the quotient.
        ASSERT_LE(err, steps * ql.weight_scale[n] * (1 + 1e-5)) << "n=" << n << " k=" << k;
      }
    }
    qc::W8a8Options o;
    o.weight_dtype = qc::weight_scale_dtype_for(c);
    for (const bool pow2 : {false, true}) {
      o.pow2 = pow2;
      expect_bitwise(forward_all(q, kTokens, qc::W8a8Linear(o)), forward_all(m, kTokens, qc::W8a8Linear(o)),
                     fmt::format("checkpoint vs in-memory quantization, pow2={}", pow2));
    }
    // Mode fp32 of a quantized checkpoint runs its dequantized weights.
    for (size_t i = 0; i < ql.weight.size(); ++i) {
      ASSERT_EQ(ql.weight[i], static_cast<float>(ql.weight_q[i]) * ql.weight_scale[i / ql.k_in]);
    }
  }
}

TEST(ModelFormats, Pow2RewriteChangesScalesOnlyAndNeverTouchesIn) {
  TempDir t("pow2");
  qc::ModelConfig c = qc::synth_config("tiny-qwen2");
  c.dtype = "bf16";
  const qc::Model m = qc::synth_model(c, 4);
  const std::string in = t / "in", out = t / "out";
  qc::save_model(m, in, qc::ModelFormat::compressed_tensors, {{"tokens.jsonl", "{\"prompt\": 0, \"tokens\": [1, 2]}\n"}});
  std::map<std::string, std::string> before;
  for (const auto& e : fs::directory_iterator(in)) before[e.path().filename()] = qc::sha256_file(e.path().string());

  EXPECT_THROW(qc::pow2_checkpoint(in, in), qc::Error);
  const qc::Pow2Report r = qc::pow2_checkpoint(in, out);
  EXPECT_EQ(r.scale_tensors, 14);
  EXPECT_GT(r.scales_changed, 0);
  EXPECT_THROW(qc::pow2_checkpoint(in, out), qc::Error) << "an existing OUT must be refused";

  for (const auto& e : fs::directory_iterator(in)) {
    EXPECT_EQ(before.at(e.path().filename()), qc::sha256_file(e.path().string())) << "IN changed: " << e.path();
  }
  EXPECT_EQ(qc::sha256_file(in + "/config.json"), qc::sha256_file(out + "/config.json"));
  EXPECT_EQ(qc::sha256_file(in + "/tokens.jsonl"), qc::sha256_file(out + "/tokens.jsonl"));
  expect_pow2_rewrite(in + "/model.safetensors", out + "/model.safetensors");
  // The rewritten checkpoint runs exactly like `--pow2` in memory on the original.
  qc::W8a8Options o;
  o.arm = "cpu:vllm-cutlass-muladd";  // Qwen2 has a q/k/v bias: the plain vllm-cutlass label is ambiguous there
  o.weight_dtype = qc::WeightScaleDtype::bf16;
  const qc::Model mi = qc::load_model(in), mo = qc::load_model(out);
  qc::W8a8Options op = o;
  op.pow2 = true;
  expect_bitwise(forward_all(mo, kTokens, qc::W8a8Linear(o)), forward_all(mi, kTokens, qc::W8a8Linear(op)),
                 "pow2 checkpoint vs --pow2 in memory");

  // llama2.c and unquantized HF checkpoints have no scales: a clear input error.
  qc::save_model(qc::synth_model(qc::synth_config("tiny"), 1), t / "ll", qc::ModelFormat::llama2c);
  qc::save_model(qc::synth_model(qc::synth_config("tiny"), 1), t / "hf", qc::ModelFormat::hf);
  for (const std::string& src : {t / "ll", t / "ll/model.bin", t / "hf"}) {
    try {
      qc::pow2_checkpoint(src, t / "never");
      ADD_FAILURE() << src;
    } catch (const qc::Error& e) {
      EXPECT_EQ(e.kind(), qc::ErrorKind::input);
      EXPECT_NE(std::string(e.what()).find("no weight scales"), std::string::npos) << e.what();
    }
    EXPECT_FALSE(fs::exists(t / "never"));
  }
}

TEST(ModelFormats, SynthModelsAreDeterministic) {
  const qc::Model a = qc::synth_model(qc::synth_config("tiny-qwen3", 3), 8);
  const qc::Model b = qc::synth_model(qc::synth_config("tiny-qwen3", 3), 8);
  const qc::Model c = qc::synth_model(qc::synth_config("tiny-qwen3", 2), 8);
  const qc::Model d = qc::synth_model(qc::synth_config("tiny-qwen3", 3), 9);
  expect_same_tensors(a, b);
  EXPECT_EQ(a.layers[1].gate.weight, c.layers[1].gate.weight) << "a layer's weights must not depend on the layer count";
  EXPECT_NE(a.embed, d.embed);
  const qc::ModelConfig big = qc::synth_config("qwen3-1.7b-shaped");
  EXPECT_EQ(big.n_layers, 2);
  EXPECT_EQ(big.hidden, 2048);
  EXPECT_EQ(big.intermediate, 6144);
  EXPECT_EQ(big.n_heads * big.head_dim, 2048);
  EXPECT_EQ(big.n_kv_heads, 8);
  EXPECT_TRUE(big.qk_norm);
}

// ---- malformed inputs ----

void expect_input_error(const std::function<void()>& fn, const std::string& needle) {
  try {
    fn();
    ADD_FAILURE() << "expected an input error mentioning `" << needle << "`";
  } catch (const qc::Error& e) {
    EXPECT_EQ(e.kind(), qc::ErrorKind::input) << e.what();
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << "message: " << e.what();
  }
}

nlohmann::json json_file(const std::string& path) { return nlohmann::json::parse(qc::read_file(path)); }

// A checkpoint folder `dir` of `config` beside a copy of the safetensors file `weights`, whose loading
// must be an input error naming `needle`.
void expect_bad_checkpoint(const std::string& dir, const nlohmann::json& config, const std::string& weights,
                           const std::string& needle) {
  fs::create_directories(dir);
  fs::copy_file(weights, dir + "/model.safetensors");
  qc::write_file_atomic(dir + "/config.json", config.dump());
  SCOPED_TRACE(needle);
  expect_input_error([&] { qc::load_model(dir); }, needle);
}

TEST(ModelFormats, MalformedConfigsAndCheckpointsAreInputErrors) {
  TempDir t("bad");
  const qc::Model m = qc::synth_model(qc::synth_config("tiny"), 2);
  qc::save_model(m, t / "ct", qc::ModelFormat::compressed_tensors);
  qc::save_model(m, t / "hf", qc::ModelFormat::hf);
  const nlohmann::json ct = json_file(t / "ct/config.json");
  const nlohmann::json hf = json_file(t / "hf/config.json");
  int variant = 0;
  // `config` beside a copy of `weights_from`'s safetensors.
  auto with_config = [&](const nlohmann::json& config, const std::string& weights_from, const std::string& needle) {
    expect_bad_checkpoint(t / fmt::format("v{}", variant++), config, weights_from + "/model.safetensors", needle);
  };
  auto edit = [](nlohmann::json j, const nlohmann::json::json_pointer& p, const nlohmann::json& v) {
    if (v.is_null()) {
      j[p.parent_pointer()].erase(p.back());
    } else {
      j[p] = v;
    }
    return j;
  };
  using P = nlohmann::json::json_pointer;
  const std::string g = "/quantization_config/config_groups/group_0";
  with_config(edit(ct, P("/quantization_config/quant_method"), "gptq"), t / "ct", "quant_method");
  with_config(edit(ct, P("/quantization_config/format"), "float-quantized"), t / "ct", "quantization_config.format");
  with_config(edit(ct, P(g + "/weights/strategy"), "tensor"), t / "ct", "weights.strategy");
  with_config(edit(ct, P(g + "/weights/num_bits"), 4), t / "ct", "weights.num_bits");
  with_config(edit(ct, P(g + "/weights/group_size"), 128), t / "ct", "weights.group_size");
  with_config(edit(ct, P(g + "/input_activations/dynamic"), false), t / "ct", "input_activations.dynamic");
  with_config(edit(ct, P(g + "/input_activations"), nullptr), t / "ct", "input_activations");
  with_config(edit(ct, P(g + "/targets"), nlohmann::json::array({"Attention"})), t / "ct", "targets");
  with_config(edit(ct, P("/quantization_config/config_groups/group_1"), ct["quantization_config"]["config_groups"]["group_0"]), t / "ct", "config_groups");
  with_config(edit(ct, P("/quantization_config/ignore"), nlohmann::json::array({"lm_head", "model.layers.0.mlp.down_proj"})), t / "ct", "ignore");
  with_config(edit(hf, P("/model_type"), "mistral"), t / "hf", "model_type");
  with_config(edit(hf, P("/hidden_size"), nullptr), t / "hf", "hidden_size");
  with_config(edit(hf, P("/rope_scaling"), nlohmann::json{{"type", "linear"}, {"factor", 2}}), t / "hf", "rope_scaling");
  with_config(edit(hf, P("/hidden_act"), "gelu"), t / "hf", "hidden_act");
  with_config(edit(hf, P("/num_key_value_heads"), 3), t / "hf", "n_kv_heads");
  with_config(edit(hf, P("/torch_dtype"), "bfloat16"), t / "hf", "torch_dtype");
  // Config and weights that do not match.
  with_config(edit(hf, P("/intermediate_size"), 180), t / "hf", "mlp.gate_proj.weight");
  with_config(edit(hf, P("/tie_word_embeddings"), true), t / "hf", "lm_head.weight");
  with_config(edit(hf, P("/num_hidden_layers"), 1), t / "hf", "layers.1");
  with_config(hf, t / "ct", "expected dtype F32 or BF16");  // int8 weights under an unquantized config
  with_config(ct, t / "hf", "model.layers.0.self_attn.q_proj.weight");  // fp32 weights under a quantized config
  expect_input_error([&] { qc::load_model(t / "nothing-here"); }, "nothing-here");
  {
    const std::string dir = t / "badjson";
    fs::create_directories(dir);
    fs::copy_file(t / "hf/model.safetensors", dir + "/model.safetensors");
    qc::write_file_atomic(dir + "/config.json", "{\"model_type\": ");
    expect_input_error([&] { qc::load_model(dir); }, "invalid JSON");
  }
  // save_model never overwrites, and llama2.c cannot hold Qwen3.
  expect_input_error([&] { qc::save_model(m, t / "hf", qc::ModelFormat::hf); }, "does not exist");
  expect_input_error([&] { qc::save_model(qc::synth_model(qc::synth_config("tiny-qwen3"), 1), t / "q3", qc::ModelFormat::llama2c); },
                     "llama2.c format");
  EXPECT_FALSE(fs::exists(t / "q3"));
}

// ---- compressed-tensors FP8 ("float-quantized") ----

qc::W8a8Options fp8_run(qc::WeightScaling scaling, const qc::ModelConfig& c, bool pow2 = false) {
  qc::W8a8Options o;
  o.fp8 = qc::Fp8Quantization{};
  o.fp8->weight_scaling = scaling;
  o.weight_dtype = qc::weight_scale_dtype_for(c);
  o.pow2 = pow2;
  return o;
}

void expect_same_fp8_layers(const qc::Model& a, const qc::Model& b) {
  const auto la = a.linear_layers(), lb = b.linear_layers();
  ASSERT_EQ(la.size(), lb.size());
  for (size_t i = 0; i < la.size(); ++i) {
    SCOPED_TRACE(la[i]->name);
    EXPECT_EQ(lb[i]->weight_type, qc::ElementType::e4m3);
    EXPECT_EQ(la[i]->weight_type, lb[i]->weight_type);
    EXPECT_EQ(la[i]->weight_scaling, lb[i]->weight_scaling);
    EXPECT_EQ(la[i]->weight_q, lb[i]->weight_q) << "codes changed";
    EXPECT_EQ(la[i]->weight_scale, lb[i]->weight_scale) << "scales changed";
    expect_bitwise(la[i]->weight, lb[i]->weight, la[i]->name + " dequantized weight");
  }
}

TEST(ModelFormats, Fp8CheckpointRoundTripsCodesAndScalesAndRunsLikeTheInMemoryQuantization) {
  TempDir t("fp8");
  for (const char* dtype : {"f32", "bf16"}) {
    for (const qc::WeightScaling scaling : {qc::WeightScaling::per_channel, qc::WeightScaling::per_tensor}) {
      qc::ModelConfig c = qc::synth_config("tiny-qwen3");
      c.dtype = dtype;
      const qc::Model m = qc::synth_model(c, 23);
      const qc::Model q = qc::fp8_quantized(m, scaling);
      const std::string dir = t / fmt::format("fp8-{}-{}", dtype, qc::to_string(scaling));
      SCOPED_TRACE(dir);
      qc::save_model(q, dir, qc::ModelFormat::compressed_tensors_fp8);
      const qc::Model r = qc::load_model(dir);
      expect_same_fp8_layers(q, r);
      expect_same_tensors(q, r);
      const qc::WeightStorage w = qc::weight_storage(r);
      EXPECT_TRUE(w.quantized);
      EXPECT_EQ(w.type, qc::ElementType::e4m3);
      EXPECT_EQ(w.scaling, scaling);
      // The file: F8_E4M3 codes, scales in the model dtype, [N,1] per channel and [1] per tensor.
      const qc::SafetensorsFile f = qc::read_safetensors(dir + "/model.safetensors");
      const qc::Tensor& wt = f.at("model.layers.1.mlp.down_proj.weight");
      const qc::Tensor& st = f.at("model.layers.1.mlp.down_proj.weight_scale");
      EXPECT_EQ(wt.dtype(), qc::DType::e4m3);
      EXPECT_EQ(st.dtype(), std::string(dtype) == "bf16" ? qc::DType::bf16 : qc::DType::f32);
      const std::vector<int64_t> scale_shape =
          scaling == qc::WeightScaling::per_tensor ? std::vector<int64_t>{1} : std::vector<int64_t>{c.hidden, 1};
      EXPECT_EQ(st.shape(), scale_shape);
      const nlohmann::json cfg = nlohmann::json::parse(qc::read_file(dir + "/config.json"));
      EXPECT_EQ(cfg["quantization_config"]["format"], "float-quantized");
      EXPECT_EQ(cfg["quantization_config"]["config_groups"]["group_0"]["weights"]["type"], "float");
      EXPECT_EQ(cfg["quantization_config"]["config_groups"]["group_0"]["weights"]["strategy"],
                scaling == qc::WeightScaling::per_tensor ? "tensor" : "channel");
      // Written again from what was read: the same bytes.
      qc::save_model(r, dir + "-again", qc::ModelFormat::compressed_tensors_fp8);
      EXPECT_EQ(qc::sha256_file(dir + "/model.safetensors"), qc::sha256_file(dir + "-again/model.safetensors"));
      EXPECT_EQ(qc::sha256_file(dir + "/config.json"), qc::sha256_file(dir + "-again/config.json"));
      // Mode w8a8-fp8 on the checkpoint = on the unquantized model quantized in memory, bit for bit
      // (and with --pow2): the checkpoint's codes and scales are used as they are.
      for (const bool pow2 : {false, true}) {
        expect_bitwise(forward_all(r, kTokens, qc::W8a8Linear(fp8_run(scaling, c, pow2))),
                       forward_all(m, kTokens, qc::W8a8Linear(fp8_run(scaling, c, pow2))),
                       fmt::format("FP8 checkpoint vs in-memory FP8 quantization, pow2={}", pow2));
      }
      // Mode fp32 runs the dequantization fp32(value(code) · scale).
      const qc::LinearLayer& l = r.layers[0].gate;
      for (size_t i = 0; i < l.weight.size(); ++i) {
        ASSERT_EQ(l.weight[i], qc::e4m3fn_to_f32(static_cast<uint8_t>(l.weight_q[i])) * l.weight_scale[i / l.k_in]) << i;
      }
    }
  }
  // An unquantized model saved as compressed-tensors-fp8 is quantized per channel, as fp8_quantized does.
  const qc::Model m = qc::synth_model(qc::synth_config("tiny"), 4);
  qc::save_model(m, t / "direct", qc::ModelFormat::compressed_tensors_fp8);
  qc::save_model(qc::fp8_quantized(m, qc::WeightScaling::per_channel), t / "via", qc::ModelFormat::compressed_tensors_fp8);
  EXPECT_EQ(qc::sha256_file(t / "direct/model.safetensors"), qc::sha256_file(t / "via/model.safetensors"));
  EXPECT_EQ(qc::parse_model_format("compressed-tensors-fp8"), qc::ModelFormat::compressed_tensors_fp8);
  EXPECT_EQ(qc::to_string(qc::ModelFormat::compressed_tensors_fp8), "compressed-tensors-fp8");
  // A per-tensor scale stored as a scalar [] reads the same as [1].
  {
    const std::string dir = t / "fp8-f32-per-tensor";
    const std::string scalar = t / "scalar";
    fs::create_directories(scalar);
    fs::copy_file(dir + "/config.json", scalar + "/config.json");
    const qc::SafetensorsFile f = qc::read_safetensors(dir + "/model.safetensors");
    std::vector<std::pair<std::string, qc::Tensor>> tensors;
    for (const auto& [name, tensor] : f.tensors) {
      if (is_weight_scale(name)) {
        qc::Tensor s0 = qc::Tensor::empty(tensor.dtype(), {});
        std::memcpy(s0.mutable_bytes().data(), tensor.bytes().data(), tensor.bytes().size());
        tensors.emplace_back(name, std::move(s0));
      } else {
        tensors.emplace_back(name, tensor);
      }
    }
    qc::write_safetensors(scalar + "/model.safetensors", tensors, f.metadata);
    expect_same_fp8_layers(qc::load_model(dir), qc::load_model(scalar));
  }
}

TEST(ModelFormats, Pow2RewriteOfAnFp8CheckpointRoundsScalesOnly) {
  TempDir t("fp8pow2");
  for (const qc::WeightScaling scaling : {qc::WeightScaling::per_channel, qc::WeightScaling::per_tensor}) {
    qc::ModelConfig c = qc::synth_config("tiny-qwen3");
    c.dtype = scaling == qc::WeightScaling::per_channel ? "bf16" : "f32";
    const std::string in = t / fmt::format("in-{}", qc::to_string(scaling)), out = t / fmt::format("out-{}", qc::to_string(scaling));
    SCOPED_TRACE(in);
    qc::save_model(qc::fp8_quantized(qc::synth_model(c, 6), scaling), in, qc::ModelFormat::compressed_tensors_fp8);
    const std::string before = qc::sha256_file(in + "/model.safetensors");
    const qc::Pow2Report r = qc::pow2_checkpoint(in, out);
    EXPECT_EQ(r.scale_tensors, 14);
    EXPECT_GT(r.scales_changed, 0);
    EXPECT_EQ(before, qc::sha256_file(in + "/model.safetensors")) << "IN changed";
    EXPECT_EQ(qc::sha256_file(in + "/config.json"), qc::sha256_file(out + "/config.json"));
    expect_pow2_rewrite(in + "/model.safetensors", out + "/model.safetensors");
    // The probe checkpoint runs exactly like --pow2 in memory on the original.
    const qc::Model mi = qc::load_model(in), mo = qc::load_model(out);
    expect_bitwise(forward_all(mo, kTokens, qc::W8a8Linear(fp8_run(scaling, c))),
                   forward_all(mi, kTokens, qc::W8a8Linear(fp8_run(scaling, c, /*pow2=*/true))),
                   "FP8 pow2 checkpoint vs --pow2 in memory");
  }
}

TEST(ModelFormats, MalformedFp8ConfigsAndCheckpointsAreInputErrors) {
  TempDir t("fp8bad");
  const qc::Model m = qc::synth_model(qc::synth_config("tiny"), 2);
  qc::save_model(m, t / "fp8", qc::ModelFormat::compressed_tensors_fp8);
  qc::save_model(qc::fp8_quantized(m, qc::WeightScaling::per_tensor), t / "fp8t", qc::ModelFormat::compressed_tensors_fp8);
  qc::save_model(m, t / "ct", qc::ModelFormat::compressed_tensors);
  const nlohmann::json fp8 = json_file(t / "fp8/config.json");
  const nlohmann::json fp8t = json_file(t / "fp8t/config.json");
  const nlohmann::json ct = json_file(t / "ct/config.json");
  int variant = 0;
  auto with_files = [&](const nlohmann::json& config, const std::string& weights, const std::string& needle) {
    expect_bad_checkpoint(t / fmt::format("v{}", variant++), config, weights, needle);
  };
  auto edit = [](nlohmann::json j, const std::string& p, const nlohmann::json& v) {
    j[nlohmann::json::json_pointer(p)] = v;
    return j;
  };
  const std::string g = "/quantization_config/config_groups/group_0";
  const std::string w = t / "fp8/model.safetensors";
  with_files(edit(fp8, "/quantization_config/format", "float8"), w, "quantization_config.format");
  with_files(edit(fp8, g + "/format", "int-quantized"), w, "group_0.format");
  with_files(edit(fp8, g + "/weights/type", "int"), w, "weights.type");
  with_files(edit(fp8, g + "/weights/num_bits", 4), w, "weights.num_bits");
  with_files(edit(fp8, g + "/weights/strategy", "group"), w, "weights.strategy");
  with_files(edit(fp8, g + "/weights/symmetric", false), w, "weights.symmetric");
  with_files(edit(fp8, g + "/weights/dynamic", true), w, "weights.dynamic");
  with_files(edit(fp8, g + "/weights/block_structure", nlohmann::json::array({128, 128})), w, "weights.block_structure");
  with_files(edit(fp8, g + "/input_activations/type", "int"), w, "input_activations.type");
  with_files(edit(fp8, g + "/input_activations/strategy", "tensor"), w, "input_activations.strategy");
  with_files(edit(fp8, g + "/input_activations/dynamic", false), w, "input_activations.dynamic");
  with_files(edit(ct, "/quantization_config/format", "float-quantized"), t / "ct/model.safetensors", "format");
  // Config and tensors that do not match.
  with_files(fp8, t / "ct/model.safetensors", "expected dtype F8_E4M3");   // int8 codes under an FP8 config
  with_files(ct, w, "expected dtype I8");                                  // FP8 codes under an INT8 config
  with_files(fp8, t / "fp8t/model.safetensors", "weight_scale");           // [1] scales under strategy channel
  with_files(fp8t, w, "weight_scale");                                     // [N,1] scales under strategy tensor
  {
    // A NaN code (e4m3fn S.1111.111) in a weight: refused with its coordinates.
    const qc::SafetensorsFile f = qc::read_safetensors(w);
    std::vector<std::pair<std::string, qc::Tensor>> tensors;
    for (const auto& [name, tensor] : f.tensors) {
      qc::Tensor c = tensor.clone();
      if (name == "model.layers.0.mlp.up_proj.weight") c.mutable_bytes()[5 * 64 + 3] = std::byte{0xFF};
      tensors.emplace_back(name, std::move(c));
    }
    qc::write_safetensors(t / "nan.safetensors", tensors, f.metadata);
    with_files(fp8, t / "nan.safetensors", "model.layers.0.mlp.up_proj.weight` element [5, 3]");
  }
  // Writers refuse a model quantized to the other format.
  const qc::Model fp8_model = qc::load_model(t / "fp8");
  expect_input_error([&] { qc::save_model(fp8_model, t / "never", qc::ModelFormat::compressed_tensors); },
                     "compressed-tensors-fp8");
  expect_input_error([&] { qc::fp8_quantized(qc::load_model(t / "ct"), qc::WeightScaling::per_channel); }, "int-quantized");
  expect_input_error([&] { qc::fp8_quantized(fp8_model, qc::WeightScaling::per_tensor); }, "per-channel");
  EXPECT_FALSE(fs::exists(t / "never"));
  // The cheap config peek agrees with the loaded model.
  EXPECT_EQ(qc::peek_checkpoint(t / "fp8t").weights.scaling, qc::WeightScaling::per_tensor);
  EXPECT_EQ(qc::peek_checkpoint(t / "ct").weights.type, qc::ElementType::int8);
  EXPECT_FALSE(qc::peek_checkpoint(t / "nothing").weights.quantized);
}

}  // namespace
