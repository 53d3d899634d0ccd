// The LLaMA/Qwen3-family forward pass (fp32 activations, double reductions), after llama2.c's
// run.c `forward`, generalized to M rows per call so that prefill sends M rows through every
// linear layer. Built with -ffp-contract=off: no product is fused into a sum behind our back.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "qconform/error.hpp"
#include "core/name_table.hpp"
#include "model/model.hpp"
#include "core/parallel.hpp"

namespace qc {

void ModelConfig::validate(const std::string& source) const {
  auto positive = [&](int64_t v, const char* field) {
    QC_INPUT(v > 0, "{}: config field `{}`: expected a positive value, found {}", source, field, v);
  };
  positive(hidden, "hidden");
  positive(intermediate, "intermediate");
  positive(n_layers, "n_layers");
  positive(n_heads, "n_heads");
  positive(n_kv_heads, "n_kv_heads");
  positive(head_dim, "head_dim");
  positive(vocab, "vocab");
  positive(max_seq_len, "max_seq_len");
  QC_INPUT(n_heads % n_kv_heads == 0, "{}: config field `n_kv_heads`: expected a divisor of n_heads = {}, found {}",
           source, n_heads, n_kv_heads);
  QC_INPUT(head_dim % 2 == 0, "{}: config field `head_dim`: expected an even value (RoPE rotates pairs), found {}",
           source, head_dim);
  QC_INPUT(std::isfinite(rope_theta) && rope_theta > 0, "{}: config field `rope_theta`: expected > 0, found {}",
           source, rope_theta);
  QC_INPUT(std::isfinite(rms_eps) && rms_eps >= 0, "{}: config field `rms_eps`: expected >= 0, found {}", source,
           rms_eps);
  QC_INPUT(bos_id >= 0 && bos_id < vocab, "{}: config field `bos_id`: expected in [0, {}), found {}", source, vocab,
           bos_id);
}

std::vector<const LinearLayer*> Model::linear_layers() const {
  std::vector<const LinearLayer*> out;
  for (const DecoderLayer& l : layers) {
    for (const LinearLayer* p : {&l.q, &l.k, &l.v, &l.o, &l.gate, &l.up, &l.down}) out.push_back(p);
  }
  return out;
}

void Model::check_shapes() const {
  const ModelConfig& c = config;
  auto size_is = [&](size_t found, int64_t expected, const std::string& what) {
    QC_CHECK(found == static_cast<size_t>(expected), "{}: tensor `{}`: expected {} floats, found {}", source, what,
             expected, found);
  };
  size_is(embed.size(), c.vocab * c.hidden, "embed");
  size_is(final_norm.size(), c.hidden, "final_norm");
  size_is(lm_head.size(), c.tie_embeddings ? 0 : c.vocab * c.hidden, "lm_head");
  QC_CHECK(static_cast<int64_t>(layers.size()) == c.n_layers, "{}: {} layers, config says {}", source, layers.size(),
           c.n_layers);
  const int64_t q_dim = c.n_heads * c.head_dim, kv_dim = c.n_kv_heads * c.head_dim;
  for (size_t i = 0; i < layers.size(); ++i) {
    const DecoderLayer& l = layers[i];
    size_is(l.attn_norm.size(), c.hidden, fmt::format("layers.{}.input_layernorm", i));
    size_is(l.ffn_norm.size(), c.hidden, fmt::format("layers.{}.post_attention_layernorm", i));
    size_is(l.q_norm.size(), c.qk_norm ? c.head_dim : 0, fmt::format("layers.{}.self_attn.q_norm", i));
    size_is(l.k_norm.size(), c.qk_norm ? c.head_dim : 0, fmt::format("layers.{}.self_attn.k_norm", i));
    auto linear_is = [&](const LinearLayer& ll, int64_t n, int64_t k, bool has_bias) {
      QC_CHECK(ll.n_out == n && ll.k_in == k, "{}: `{}` is [{},{}], expected [{},{}]", source, ll.name, ll.n_out,
               ll.k_in, n, k);
      size_is(ll.weight.size(), n * k, ll.name + ".weight");
      size_is(ll.bias.size(), has_bias ? n : 0, ll.name + ".bias");
    };
    linear_is(l.q, q_dim, c.hidden, c.qkv_bias);
    linear_is(l.k, kv_dim, c.hidden, c.qkv_bias);
    linear_is(l.v, kv_dim, c.hidden, c.qkv_bias);
    linear_is(l.o, c.hidden, q_dim, false);
    linear_is(l.gate, c.intermediate, c.hidden, false);
    linear_is(l.up, c.intermediate, c.hidden, false);
    linear_is(l.down, c.hidden, c.intermediate, false);
  }
}

// ---- the fp32 linear layer ----

namespace {

// Output channels [n0, n1) of every row. Eight channels at a time give the CPU eight independent
// addition chains; each chain still adds its products in ascending k, so the result does not
// depend on the blocking (nor on how blocks are spread over threads).
void matmul_fp32_block(const float* x, int64_t M, const float* w, const float* bias, int64_t N, int64_t K,
                       float* y, int64_t n0, int64_t n1) {
  constexpr int64_t kChains = 8;
  for (int64_t m = 0; m < M; ++m) {
    const float* xr = x + m * K;
    float* yr = y + m * N;
    int64_t n = n0;
    for (; n + kChains <= n1; n += kChains) {
      const float* wr[kChains];
      for (int64_t j = 0; j < kChains; ++j) wr[j] = w + (n + j) * K;
      double a[kChains] = {};
      for (int64_t k = 0; k < K; ++k) {
        const double xk = xr[k];
        for (int64_t j = 0; j < kChains; ++j) a[j] += xk * wr[j][k];
      }
      for (int64_t j = 0; j < kChains; ++j) {
        if (bias) a[j] += bias[n + j];
        yr[n + j] = static_cast<float>(a[j]);
      }
    }
    for (; n < n1; ++n) {
      const float* wr = w + n * K;
      double a = 0;
      for (int64_t k = 0; k < K; ++k) a += static_cast<double>(xr[k]) * wr[k];
      if (bias) a += bias[n];
      yr[n] = static_cast<float>(a);
    }
  }
}

}  // namespace

void matmul_fp32(const float* x, int64_t M, const float* w, const float* bias, int64_t N, int64_t K, float* y,
                 int threads) {
  QC_CHECK(threads >= 0, "matmul_fp32: threads must be >= 0, got {}", threads);
  // Starting threads costs tens of microseconds: below ~2 M multiply-adds one thread is faster.
  constexpr int64_t kBlock = 32, kMinWorkForThreads = int64_t{1} << 21;
  if (threads == 0 && M * N * K < kMinWorkForThreads) threads = 1;
  const int64_t blocks = (N + kBlock - 1) / kBlock;
  parallel_for(blocks, threads, [&](int64_t b) {
    matmul_fp32_block(x, M, w, bias, N, K, y, b * kBlock, std::min(N, (b + 1) * kBlock));
  });
}

void fp32_linear(const LinearLayer& layer, const float* x, int64_t M, float* y) {
  matmul_fp32(x, M, layer.weight.data(), layer.bias.empty() ? nullptr : layer.bias.data(), layer.n_out, layer.k_in,
              y);
}

constexpr NameRow<LinearMode> kLinearModeNames[] = {
    {LinearMode::fp32, "fp32"}, {LinearMode::w8a8, "w8a8"}, {LinearMode::w8a8_fp8, "w8a8-fp8"}};

LinearMode parse_linear_mode(std::string_view text) {
  if (const auto m = value_of(kLinearModeNames, text)) return *m;
  QC_FAIL_INPUT("--mode: expected {}, found `{}`", names_or(kLinearModeNames, "`"), text);
}

std::string_view to_string(LinearMode mode) { return name_of(kLinearModeNames, mode); }

std::string_view default_arm(LinearMode mode, bool block_scaled) {
  switch (mode) {
    case LinearMode::fp32: return "";
    case LinearMode::w8a8: return "cpu:vllm-cutlass";
    // cuBLASLt's default FP8 path (not the fast accumulation) follows this model (docs/accumulation.md);
    // block-scaled, SGLang's and vLLM's Triton kernel (measured on the H200) follows block-triton.
    case LinearMode::w8a8_fp8: return block_scaled ? "cpu:fp8-block-triton" : "cpu:fp8-hopper-fp8-promote4";
  }
  return "";
}

LinearMode linear_mode(const W8a8Options& options) {
  return options.fp8 ? LinearMode::w8a8_fp8 : LinearMode::w8a8;
}

LinearFn make_linear_fn(LinearMode mode, std::string_view arm_label) {
  W8a8Options options;
  options.arm = std::string(arm_label);
  if (mode == LinearMode::fp32) {
    QC_INPUT(arm_label.empty(), "--arm `{}`: mode fp32 runs no arm (use --mode w8a8)", arm_label);
    return fp32_linear;
  }
  return make_linear_fn(mode, options);
}

LinearFn make_linear_fn(LinearMode mode, const W8a8Options& options) {
  switch (mode) {
    case LinearMode::fp32:
      QC_INPUT(!options.pow2, "--pow2: mode fp32 has no weight scales to round (use --mode w8a8)");
      QC_INPUT(!options.fp8, "--element/--act-scale/--weight-scale: mode fp32 quantizes nothing (use --mode w8a8-fp8)");
      return fp32_linear;
    case LinearMode::w8a8:
      QC_INPUT(!options.fp8, "--element/--act-scale/--weight-scale: mode w8a8 quantizes to INT8; expected no FP8 "
               "quantization, found one (use --mode w8a8-fp8)");
      return W8a8Linear(options);
    case LinearMode::w8a8_fp8: {
      W8a8Options o = options;
      if (!o.fp8) o.fp8 = Fp8Quantization{};
      return W8a8Linear(std::move(o));
    }
  }
  QC_FAIL("unknown LinearMode {}", static_cast<int>(mode));
}

// ---- blocks ----

void rmsnorm(float* out, const float* x, const float* w, int64_t n, float eps) {
  double ss = 0;
  for (int64_t i = 0; i < n; ++i) ss += static_cast<double>(x[i]) * x[i];
  const double inv = 1.0 / std::sqrt(ss / static_cast<double>(n) + static_cast<double>(eps));
  for (int64_t i = 0; i < n; ++i) out[i] = static_cast<float>(static_cast<double>(w[i]) * (x[i] * inv));
}

void rope_angles(int64_t pos, int64_t head_dim, double theta, double* cos_out, double* sin_out) {
  for (int64_t i = 0; i < head_dim / 2; ++i) {
    const double freq = std::pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(head_dim));
    const double angle = static_cast<double>(pos) * freq;
    cos_out[i] = std::cos(angle);
    sin_out[i] = std::sin(angle);
  }
}

void rope_rotate(float* vec, int64_t n_heads, int64_t head_dim, const double* cos, const double* sin,
                 RopeStyle style) {
  const int64_t half = head_dim / 2;
  for (int64_t h = 0; h < n_heads; ++h) {
    float* v = vec + h * head_dim;
    for (int64_t i = 0; i < half; ++i) {
      // The two elements of pair i: adjacent (llama2.c) or half a head apart (HF rotate_half).
      const int64_t a = style == RopeStyle::interleaved ? 2 * i : i;
      const int64_t b = style == RopeStyle::interleaved ? 2 * i + 1 : i + half;
      const double v0 = v[a], v1 = v[b];
      v[a] = static_cast<float>(v0 * cos[i] - v1 * sin[i]);
      v[b] = static_cast<float>(v0 * sin[i] + v1 * cos[i]);
    }
  }
}

void causal_attention(const float* q, int64_t M, int64_t pos0, const float* k_cache, const float* v_cache,
                      int64_t n_heads, int64_t n_kv_heads, int64_t head_dim, RopeStyle style, float* out) {
  const int64_t q_dim = n_heads * head_dim, kv_dim = n_kv_heads * head_dim;
  const int64_t group = n_heads / n_kv_heads;
  const double scale = 1.0 / std::sqrt(static_cast<double>(head_dim));
  const int64_t half = head_dim / 2;
  // The two elements of RoPE pair i (see `rope_rotate`): scores are summed pair by pair.
  const int64_t stride_a = style == RopeStyle::interleaved ? 2 : 1;
  const int64_t offset_b = style == RopeStyle::interleaved ? 1 : half;
  std::vector<double> p(static_cast<size_t>(pos0 + M));
  std::vector<double> acc(static_cast<size_t>(head_dim));
  for (int64_t t = 0; t < M; ++t) {
    const int64_t visible = pos0 + t + 1;  // the causal mask: positions 0 .. pos0+t
    for (int64_t h = 0; h < n_heads; ++h) {
      const float* qh = q + t * q_dim + h * head_dim;
      const int64_t kvh = h / group;
      double max_score = -INFINITY;
      for (int64_t j = 0; j < visible; ++j) {
        const float* kj = k_cache + j * kv_dim + kvh * head_dim;
        double s = 0;
        for (int64_t i = 0; i < half; ++i) {
          const int64_t a = stride_a * i, b = a + offset_b;
          s += static_cast<double>(qh[a]) * kj[a] + static_cast<double>(qh[b]) * kj[b];
        }
        p[j] = s * scale;
        if (p[j] > max_score) max_score = p[j];
      }
      double denom = 0;
      for (int64_t j = 0; j < visible; ++j) {
        p[j] = std::exp(p[j] - max_score);
        denom += p[j];
      }
      std::fill(acc.begin(), acc.end(), 0.0);
      for (int64_t j = 0; j < visible; ++j) {
        const float* vj = v_cache + j * kv_dim + kvh * head_dim;
        for (int64_t d = 0; d < head_dim; ++d) acc[d] += p[j] * vj[d];
      }
      float* oh = out + t * q_dim + h * head_dim;
      for (int64_t d = 0; d < head_dim; ++d) oh[d] = static_cast<float>(acc[d] / denom);
    }
  }
}

void swiglu(float* h, const float* gate, const float* up, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const double g = gate[i];
    h[i] = static_cast<float>(g / (1.0 + std::exp(-g)) * static_cast<double>(up[i]));
  }
}

// ---- the decoder ----

Decoder::Decoder(const Model& model, LinearFn linear, CaptureFn capture)
    : model_(model), linear_(std::move(linear)), capture_(std::move(capture)) {
  QC_CHECK(static_cast<bool>(linear_), "Decoder needs a LinearFn");
  model_.check_shapes();
  k_cache_.resize(static_cast<size_t>(model.config.n_layers));
  v_cache_.resize(static_cast<size_t>(model.config.n_layers));
}

void Decoder::linear(const LinearLayer& layer, const float* x, int64_t M, float* y) {
  linear_(layer, x, M, y);
  if (capture_) capture_(layer, x, M, y);
}

void Decoder::forward(std::span<const int32_t> tokens, LogitRows rows, std::vector<float>& logits) {
  const ModelConfig& c = model_.config;
  const int64_t M = static_cast<int64_t>(tokens.size());
  QC_CHECK(M > 0, "forward needs at least one token");
  QC_INPUT(pos_ + M <= c.max_seq_len, "{}: a sequence of {} tokens exceeds the model's max_seq_len {}", model_.source,
           pos_ + M, c.max_seq_len);
  const int64_t D = c.hidden, hd = c.head_dim, I = c.intermediate;
  const int64_t q_dim = c.n_heads * hd, kv_dim = c.n_kv_heads * hd;
  auto sized = [](std::vector<float>& v, int64_t n) {
    v.resize(static_cast<size_t>(n));
    return v.data();
  };
  float* x = sized(x_, M * D);
  float* xb = sized(xb_, M * std::max(D, q_dim));
  float* q = sized(q_, M * q_dim);
  float* k = sized(k_, M * kv_dim);
  float* v = sized(v_, M * kv_dim);
  float* att = sized(att_, M * q_dim);
  float* hb = sized(hb_, M * I);
  float* hb2 = sized(hb2_, M * I);

  for (int64_t t = 0; t < M; ++t) {
    const int32_t tok = tokens[static_cast<size_t>(t)];
    QC_INPUT(tok >= 0 && tok < c.vocab, "token {} at position {}: expected an id in [0, {}) of {}", tok, pos_ + t,
             c.vocab, model_.source);
    std::memcpy(x + t * D, model_.embed.data() + static_cast<int64_t>(tok) * D, sizeof(float) * D);
  }
  // The rotary angles of each row's position, shared by every layer.
  cos_.resize(static_cast<size_t>(M * hd / 2));
  sin_.resize(static_cast<size_t>(M * hd / 2));
  for (int64_t t = 0; t < M; ++t) rope_angles(pos_ + t, hd, c.rope_theta, &cos_[t * hd / 2], &sin_[t * hd / 2]);

  for (int64_t l = 0; l < c.n_layers; ++l) {
    const DecoderLayer& L = model_.layers[static_cast<size_t>(l)];
    // Attention block.
    for (int64_t t = 0; t < M; ++t) rmsnorm(xb + t * D, x + t * D, L.attn_norm.data(), D, c.rms_eps);
    linear(L.q, xb, M, q);
    linear(L.k, xb, M, k);
    linear(L.v, xb, M, v);
    for (int64_t t = 0; t < M; ++t) {
      if (c.qk_norm) {
        for (int64_t h = 0; h < c.n_heads; ++h) rmsnorm(q + t * q_dim + h * hd, q + t * q_dim + h * hd, L.q_norm.data(), hd, c.rms_eps);
        for (int64_t h = 0; h < c.n_kv_heads; ++h) rmsnorm(k + t * kv_dim + h * hd, k + t * kv_dim + h * hd, L.k_norm.data(), hd, c.rms_eps);
      }
      rope_rotate(q + t * q_dim, c.n_heads, hd, &cos_[t * hd / 2], &sin_[t * hd / 2], c.rope_style);
      rope_rotate(k + t * kv_dim, c.n_kv_heads, hd, &cos_[t * hd / 2], &sin_[t * hd / 2], c.rope_style);
    }
    std::vector<float>& kc = k_cache_[static_cast<size_t>(l)];
    std::vector<float>& vc = v_cache_[static_cast<size_t>(l)];
    kc.resize(static_cast<size_t>((pos_ + M) * kv_dim));
    vc.resize(static_cast<size_t>((pos_ + M) * kv_dim));
    std::memcpy(kc.data() + pos_ * kv_dim, k, sizeof(float) * M * kv_dim);
    std::memcpy(vc.data() + pos_ * kv_dim, v, sizeof(float) * M * kv_dim);
    causal_attention(q, M, pos_, kc.data(), vc.data(), c.n_heads, c.n_kv_heads, hd, c.rope_style, att);
    linear(L.o, att, M, xb);
    for (int64_t i = 0; i < M * D; ++i) x[i] += xb[i];

    // MLP block.
    for (int64_t t = 0; t < M; ++t) rmsnorm(xb + t * D, x + t * D, L.ffn_norm.data(), D, c.rms_eps);
    linear(L.gate, xb, M, hb);
    linear(L.up, xb, M, hb2);
    swiglu(hb, hb, hb2, M * I);
    linear(L.down, hb, M, xb);
    for (int64_t i = 0; i < M * D; ++i) x[i] += xb[i];
  }

  const int64_t first = rows == LogitRows::all ? 0 : M - 1;
  const int64_t n_rows = M - first;
  for (int64_t t = first; t < M; ++t) rmsnorm(x + t * D, x + t * D, model_.final_norm.data(), D, c.rms_eps);
  logits.resize(static_cast<size_t>(n_rows * c.vocab));
  // The head is unquantized in every mode: it never goes through the LinearFn.
  matmul_fp32(x + first * D, n_rows, model_.head_weight(), nullptr, c.vocab, D, logits.data());
  pos_ += M;
}

}  // namespace qc
