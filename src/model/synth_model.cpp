// Seeded random models (`qconform synth-model`): realistic shapes, gibberish text, real arithmetic.
//
// Determinism: every tensor draws from its own splitmix64 stream seeded by (seed, FNV-1a of the
// tensor's name), so a model with more layers shares its first layers with a smaller one; uniforms
// are 24-bit integers scaled by 2^-24 (exact), normals are Irwin–Hall sums of four uniforms scaled
// by sqrt(3) and the standard deviation in double (IEEE-exact operations and a correctly rounded
// sqrt only, no libm transcendental), rounded to fp32 once. The same seed gives the same bytes on
// every machine.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <iterator>

#include "qconform/error.hpp"
#include "core/limits.hpp"
#include "model/model.hpp"
#include "qconform/numerics.hpp"
#include "synth/synth.hpp"

namespace qc {

namespace {

uint64_t fnv1a(std::string_view s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (char ch : s) {
    h ^= static_cast<uint8_t>(ch);
    h *= 0x100000001b3ull;
  }
  return h;
}

struct Stream {
  uint64_t state;
  Stream(uint64_t seed, std::string_view name) : state(seed ^ fnv1a(name)) {}
  double uniform() { return static_cast<double>(splitmix64(state) >> 40) * 0x1p-24; }
  double normal() { return (uniform() + uniform() + uniform() + uniform() - 2.0) * std::sqrt(3.0); }
};

std::vector<float> normals(uint64_t seed, const std::string& name, int64_t n, double mean, double sigma, bool bf16) {
  Stream s(seed, name);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) {
    x = static_cast<float>(mean + sigma * s.normal());
    if (bf16) x = bf16_to_f32(f32_to_bf16(x));
  }
  return v;
}

// The synthetic configurations (`synth-model --config`), one row each, all of 2 layers unless
// `layers` says otherwise. tiny-qwen3's head_dim is explicit and != hidden / heads, as in Qwen3;
// qwen3-1.7b-shaped has Qwen3-1.7B's shapes but a vocabulary of 4096 (Qwen3's is 151936), which keeps
// the head and the files small.
struct SynthShape {
  std::string_view name, arch;
  int64_t hidden, intermediate, n_heads, n_kv_heads, head_dim, vocab, max_seq_len;
  double rope_theta;
  float rms_eps;
  bool tie_embeddings, qk_norm, qkv_bias;
};
constexpr SynthShape kSynthShapes[] = {
    // name, arch, hidden, intermediate, heads, kv heads, head_dim, vocab, max_seq_len, rope_theta, rms_eps,
    // tied embeddings, QK-norm, q/k/v bias
    {"tiny", "llama", 64, 176, 4, 2, 16, 256, 128, 10000.0, 1e-5f, false, false, false},
    {"tiny-qwen2", "qwen2", 64, 176, 4, 2, 16, 256, 128, 10000.0, 1e-5f, true, false, true},
    {"tiny-qwen3", "qwen3", 64, 128, 4, 2, 32, 256, 128, 1000000.0, 1e-6f, true, true, false},
    {"qwen3-1.7b-shaped", "qwen3", 2048, 6144, 16, 8, 128, 4096, 4096, 1000000.0, 1e-6f, true, true, false},
};

}  // namespace

ModelConfig synth_config(std::string_view name, int64_t layers) {
  const SynthShape* s = std::find_if(std::begin(kSynthShapes), std::end(kSynthShapes),
                                     [&](const SynthShape& x) { return x.name == name; });
  if (s == std::end(kSynthShapes)) {
    QC_FAIL_INPUT("--config: expected `tiny`, `tiny-qwen2`, `tiny-qwen3` or `qwen3-1.7b-shaped`, found `{}`", name);
  }
  ModelConfig c{.arch = std::string(s->arch), .hidden = s->hidden, .intermediate = s->intermediate, .n_layers = 2,
                .n_heads = s->n_heads, .n_kv_heads = s->n_kv_heads, .head_dim = s->head_dim, .vocab = s->vocab,
                .max_seq_len = s->max_seq_len, .rope_theta = s->rope_theta, .rms_eps = s->rms_eps,
                .rope_style = RopeStyle::rotate_half, .tie_embeddings = s->tie_embeddings, .qk_norm = s->qk_norm,
                .qkv_bias = s->qkv_bias, .bos_id = 1};
  if (layers > 0) c.n_layers = layers;
  QC_INPUT(layers >= 0, "--layers: expected a positive count, found {}", layers);
  c.validate(fmt::format("synth config {}", name));
  return c;
}

Model synth_model(const ModelConfig& config, uint64_t seed) {
  config.validate("synth model");
  QC_INPUT(config.dtype == "f32" || config.dtype == "bf16", "--dtype: expected f32 or bf16, found `{}`", config.dtype);
  {
    // Memory before allocating: the model's fp32 parameters, plus about twice as much again while
    // a writer holds the converted tensors and their serialized bytes.
    const double D = static_cast<double>(config.hidden), I = static_cast<double>(config.intermediate);
    const double q = static_cast<double>(config.n_heads * config.head_dim);
    const double kv = static_cast<double>(config.n_kv_heads * config.head_dim);
    const double per_layer = D * q * 2 + D * kv * 2 + D * I * 3 + 2 * D;
    const double params = static_cast<double>(config.n_layers) * per_layer +
                          static_cast<double>(config.vocab) * D * (config.tie_embeddings ? 1 : 2) + D;
    check_memory_estimate(params * 4 * 3, fmt::format("synth model with --layers {} (hidden {}, intermediate {}, vocab "
                                                      "{}: {:.3g} parameters)",
                                                      config.n_layers, config.hidden, config.intermediate, config.vocab,
                                                      params));
  }
  const bool bf16 = config.dtype == "bf16";
  Model m;
  m.config = config;
  const ModelConfig& c = m.config;
  const int64_t D = c.hidden, I = c.intermediate, hd = c.head_dim;
  const int64_t q_dim = c.n_heads * hd, kv_dim = c.n_kv_heads * hd;
  m.embed = normals(seed, "embed_tokens", c.vocab * D, 0.0, 1.0, bf16);
  auto linear = [&](const std::string& name, int64_t n, int64_t k, bool bias) {
    LinearLayer l;
    l.name = name;
    l.n_out = n;
    l.k_in = k;
    l.weight = normals(seed, name + ".weight", n * k, 0.0, 1.0 / std::sqrt(static_cast<double>(k)), bf16);
    if (bias) l.bias = normals(seed, name + ".bias", n, 0.0, 0.1, bf16);
    return l;
  };
  m.layers.resize(static_cast<size_t>(c.n_layers));
  for (int64_t i = 0; i < c.n_layers; ++i) {
    DecoderLayer& L = m.layers[static_cast<size_t>(i)];
    const std::string p = fmt::format("layers.{}.", i);
    L.attn_norm = normals(seed, p + "input_layernorm", D, 1.0, 0.1, bf16);
    L.ffn_norm = normals(seed, p + "post_attention_layernorm", D, 1.0, 0.1, bf16);
    if (c.qk_norm) {
      L.q_norm = normals(seed, p + "self_attn.q_norm", hd, 1.0, 0.1, bf16);
      L.k_norm = normals(seed, p + "self_attn.k_norm", hd, 1.0, 0.1, bf16);
    }
    L.q = linear(p + "self_attn.q_proj", q_dim, D, c.qkv_bias);
    L.k = linear(p + "self_attn.k_proj", kv_dim, D, c.qkv_bias);
    L.v = linear(p + "self_attn.v_proj", kv_dim, D, c.qkv_bias);
    L.o = linear(p + "self_attn.o_proj", D, q_dim, false);
    L.gate = linear(p + "mlp.gate_proj", I, D, false);
    L.up = linear(p + "mlp.up_proj", I, D, false);
    L.down = linear(p + "mlp.down_proj", D, I, false);
  }
  m.final_norm = normals(seed, "norm", D, 1.0, 0.1, bf16);
  if (!c.tie_embeddings) m.lm_head = normals(seed, "lm_head", c.vocab * D, 0.0, 1.0 / std::sqrt(double(D)), bf16);
  m.source = fmt::format("synth seed={}", seed);
  m.check_shapes();
  return m;
}

}  // namespace qc
