// The decoder: each block against a straightforward fp64 reference written here (differently
// from src/model/decoder.cpp), a whole tiny model against an fp64 forward without KV cache, the
// llama2.c loaders (legacy on the real stories260K, v1 on a file written here), malformed
// checkpoints, and stories260K's greedy stories.
//
// Build and run: cmake --build build --target qconform_unit_tests &&
//   ./build/tests/qconform_unit_tests --gtest_filter='Model*'
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <bit>
#include <chrono>
#include <cmath>
#include <complex>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <sstream>

#include "qconform/error.hpp"
#include "model/model.hpp"
#include "model/tokenizer.hpp"

namespace {

using qc::Decoder;
using qc::DecoderLayer;
using qc::Model;
using qc::ModelConfig;
using qc::RopeStyle;

const std::string kStoriesDir = std::string(QC_SHARED_DIR) + "/models/stories260K";
const std::string kStoriesBin = kStoriesDir + "/stories260K.bin";
const std::string kStoriesTok = kStoriesDir + "/tok512.bin";

bool stories_present() { return std::filesystem::exists(kStoriesBin) && std::filesystem::exists(kStoriesTok); }
#define SKIP_WITHOUT_STORIES()                                                                    \
  do {                                                                                            \
    if (!stories_present()) GTEST_SKIP() << "stories260K not found in " << kStoriesDir            \
                                         << " (the shared model folder is absent on this machine)"; \
  } while (0)

std::vector<float> random_floats(std::mt19937& rng, size_t n, float lo, float hi) {
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

// Compares `got` (fp32) against an fp64 reference: |got - ref| <= abs_tol + rel_tol·|ref|,
// NaN/inf never pass. Reports the worst element with both values and the fp32 bit pattern.
void expect_close(const std::vector<float>& got, const std::vector<double>& ref, double rel_tol, double abs_tol,
                  const std::string& what) {
  ASSERT_EQ(got.size(), ref.size()) << what;
  size_t bad = 0, worst = 0;
  double worst_excess = -1;
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::fabs(static_cast<double>(got[i]) - ref[i]);
    const double tol = abs_tol + rel_tol * std::fabs(ref[i]);
    const bool ok = std::isfinite(got[i]) && std::isfinite(ref[i]) && err <= tol;
    if (!ok) ++bad;
    const double excess = std::isfinite(err) ? err - tol : INFINITY;
    if (excess > worst_excess) {
      worst_excess = excess;
      worst = i;
    }
  }
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << got.size() << " elements out of tolerance; worst at index "
                     << worst << ": got " << got[worst] << " (0x" << std::hex << std::bit_cast<uint32_t>(got[worst])
                     << std::dec << "), reference " << ref[worst] << ", |diff| "
                     << std::fabs(got[worst] - ref[worst]);
}

constexpr double kFp32Ulp = 1.0 / (1 << 23);  // relative spacing of fp32 at 1

// ---- blocks ----

TEST(ModelBlocks, MatmulMatchesLongDoubleReference) {
  std::mt19937 rng(1);
  const int64_t M = 3, N = 7, K = 300;
  const auto x = random_floats(rng, M * K, -2, 2), w = random_floats(rng, N * K, -1, 1), b = random_floats(rng, N, -1, 1);
  std::vector<float> y(M * N);
  qc::matmul_fp32(x.data(), M, w.data(), b.data(), N, K, y.data());
  std::vector<double> ref(M * N);
  double max_abs_sum = 0;
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      long double s = b[n], abs_sum = std::fabs(b[n]);
      for (int64_t k = K - 1; k >= 0; --k) {  // reverse order: a different summation
        s += static_cast<long double>(x[m * K + k]) * w[n * K + k];
        abs_sum += std::fabs(static_cast<long double>(x[m * K + k]) * w[n * K + k]);
      }
      ref[m * N + n] = static_cast<double>(s);
      max_abs_sum = std::max(max_abs_sum, static_cast<double>(abs_sum));
    }
  // One fp32 rounding (half an ulp, taken as one) plus the double sum's error K·2^-53·Σ|terms|.
  expect_close(y, ref, kFp32Ulp, K * std::ldexp(1.0, -52) * max_abs_sum, "matmul_fp32");
}

TEST(ModelBlocks, RmsNormMatchesReference) {
  std::mt19937 rng(2);
  for (int64_t n : {1, 8, 64, 1000}) {
    const auto x = random_floats(rng, n, -3, 3), w = random_floats(rng, n, 0.5, 1.5);
    const float eps = 1e-5f;
    std::vector<float> out(n);
    qc::rmsnorm(out.data(), x.data(), w.data(), n, eps);
    long double ss = 0;
    for (int64_t i = n - 1; i >= 0; --i) ss += static_cast<long double>(x[i]) * x[i];
    const long double rms = std::sqrt(ss / n + eps);
    std::vector<double> ref(n);
    for (int64_t i = 0; i < n; ++i) ref[i] = static_cast<double>(x[i] / rms * w[i]);
    expect_close(out, ref, 2 * kFp32Ulp, 0, "rmsnorm n=" + std::to_string(n));
    // In place gives the same bits.
    std::vector<float> in_place = x;
    qc::rmsnorm(in_place.data(), in_place.data(), w.data(), n, eps);
    EXPECT_EQ(0, std::memcmp(in_place.data(), out.data(), sizeof(float) * n)) << "rmsnorm in place, n=" << n;
  }
}

// RoPE references: interleaved as complex multiplication (Meta's `torch.view_as_complex`),
// rotate_half as Hugging Face writes it: q·cos + rotate_half(q)·sin with cos/sin = cat(f, f).
std::vector<double> rope_reference(const std::vector<float>& v, int64_t n_heads, int64_t hd, int64_t pos, double theta,
                                   RopeStyle style) {
  std::vector<double> out(v.size());
  for (int64_t h = 0; h < n_heads; ++h) {
    const float* x = v.data() + h * hd;
    double* o = out.data() + h * hd;
    if (style == RopeStyle::interleaved) {
      for (int64_t i = 0; i < hd / 2; ++i) {
        const double angle = pos / std::pow(theta, static_cast<double>(2 * i) / hd);
        const std::complex<double> z = std::complex<double>(x[2 * i], x[2 * i + 1]) * std::polar(1.0, angle);
        o[2 * i] = z.real();
        o[2 * i + 1] = z.imag();
      }
    } else {
      std::vector<double> cos(hd), sin(hd), rot(hd);
      for (int64_t j = 0; j < hd; ++j) {
        const double angle = pos / std::pow(theta, static_cast<double>(2 * (j % (hd / 2))) / hd);
        cos[j] = std::cos(angle);
        sin[j] = std::sin(angle);
        rot[j] = j < hd / 2 ? -static_cast<double>(x[j + hd / 2]) : x[j - hd / 2];
      }
      for (int64_t j = 0; j < hd; ++j) o[j] = x[j] * cos[j] + rot[j] * sin[j];
    }
  }
  return out;
}

TEST(ModelBlocks, RopeMatchesReferenceInBothConventions) {
  std::mt19937 rng(3);
  for (RopeStyle style : {RopeStyle::interleaved, RopeStyle::rotate_half}) {
    for (int64_t hd : {2, 8, 128}) {
      for (int64_t pos : {0, 1, 17, 511, 40000}) {
        const int64_t n_heads = 3;
        const double theta = hd == 128 ? 1e6 : 1e4;
        const auto v = random_floats(rng, n_heads * hd, -2, 2);
        std::vector<double> c(hd / 2), s(hd / 2);
        qc::rope_angles(pos, hd, theta, c.data(), s.data());
        std::vector<float> got = v;
        qc::rope_rotate(got.data(), n_heads, hd, c.data(), s.data(), style);
        const auto ref = rope_reference(v, n_heads, hd, pos, theta, style);
        // |rotated| <= |pair| <= 2·sqrt(2): an absolute bound of a few fp32 ulps at that scale.
        expect_close(got, ref, 0, 4 * 2.83 * kFp32Ulp,
                     fmt::format("rope style={} hd={} pos={}", style == RopeStyle::interleaved ? "interleaved" : "rotate_half", hd, pos));
        if (pos == 0) {
          EXPECT_EQ(0, std::memcmp(got.data(), v.data(), sizeof(float) * v.size())) << "pos 0 is the identity";
        }
      }
    }
  }
}

// Attention reference: full score matrix with an explicit -inf mask, GQA by materializing the
// repeated KV heads (HF `repeat_kv`), softmax with the mask's zeros, all in long double.
std::vector<double> attention_reference(const std::vector<float>& q, int64_t M, int64_t pos0, const std::vector<float>& k,
                                        const std::vector<float>& v, int64_t H, int64_t KVH, int64_t hd) {
  const int64_t T = pos0 + M, rep = H / KVH;
  std::vector<long double> kr(T * H * hd), vr(T * H * hd);  // [T, H, hd] after repeat_kv
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t d = 0; d < hd; ++d) {
        kr[(t * H + h) * hd + d] = k[(t * KVH + h / rep) * hd + d];
        vr[(t * H + h) * hd + d] = v[(t * KVH + h / rep) * hd + d];
      }
  std::vector<double> out(M * H * hd);
  for (int64_t h = 0; h < H; ++h)
    for (int64_t i = 0; i < M; ++i) {
      std::vector<long double> s(T);
      for (int64_t j = 0; j < T; ++j) {
        long double dot = 0;
        for (int64_t d = 0; d < hd; ++d) dot += q[(i * H + h) * hd + d] * kr[(j * H + h) * hd + d];
        s[j] = j <= pos0 + i ? dot / std::sqrt(static_cast<long double>(hd)) : -INFINITY;
      }
      const long double mx = *std::max_element(s.begin(), s.end());
      long double z = 0;
      for (auto& e : s) z += (e = std::exp(e - mx));
      for (int64_t d = 0; d < hd; ++d) {
        long double acc = 0;
        for (int64_t j = 0; j < T; ++j) acc += s[j] / z * vr[(j * H + h) * hd + d];
        out[(i * H + h) * hd + d] = static_cast<double>(acc);
      }
    }
  return out;
}

TEST(ModelBlocks, CausalGqaAttentionMatchesReference) {
  std::mt19937 rng(4);
  struct Case { int64_t M, pos0, H, KVH, hd; };
  for (const Case cs : {Case{5, 0, 4, 2, 8}, Case{1, 9, 8, 4, 8}, Case{3, 4, 6, 1, 16}, Case{7, 0, 2, 2, 4}}) {
    const int64_t T = cs.pos0 + cs.M;
    const auto q = random_floats(rng, cs.M * cs.H * cs.hd, -3, 3);
    const auto k = random_floats(rng, T * cs.KVH * cs.hd, -3, 3);
    const auto v = random_floats(rng, T * cs.KVH * cs.hd, -1, 1);
    std::vector<float> out(cs.M * cs.H * cs.hd);
    for (const RopeStyle style : {RopeStyle::interleaved, RopeStyle::rotate_half}) {
      qc::causal_attention(q.data(), cs.M, cs.pos0, k.data(), v.data(), cs.H, cs.KVH, cs.hd, style, out.data());
    // Outputs are convex combinations of values in [-1, 1]: an absolute tolerance of a few ulps of 1.
    expect_close(out, attention_reference(q, cs.M, cs.pos0, k, v, cs.H, cs.KVH, cs.hd), 0, 4 * kFp32Ulp,
                 fmt::format("attention M={} pos0={} H={} KVH={} hd={} style={}", cs.M, cs.pos0, cs.H, cs.KVH, cs.hd,
                             static_cast<int>(style)));
    }
  }
}

TEST(ModelBlocks, AttentionIgnoresFuturePositions) {
  // Row 0 of a 4-row prefill must not change when rows 1..3 of K and V change.
  std::mt19937 rng(5);
  const int64_t M = 4, H = 2, KVH = 1, hd = 4;
  const auto q = random_floats(rng, M * H * hd, -1, 1);
  auto k = random_floats(rng, M * KVH * hd, -1, 1), v = random_floats(rng, M * KVH * hd, -1, 1);
  std::vector<float> a(M * H * hd), b(M * H * hd);
  qc::causal_attention(q.data(), M, 0, k.data(), v.data(), H, KVH, hd, RopeStyle::interleaved, a.data());
  for (size_t i = KVH * hd; i < k.size(); ++i) k[i] += 5, v[i] -= 7;
  qc::causal_attention(q.data(), M, 0, k.data(), v.data(), H, KVH, hd, RopeStyle::interleaved, b.data());
  EXPECT_EQ(0, std::memcmp(a.data(), b.data(), sizeof(float) * H * hd)) << "row 0 saw a future position";
  EXPECT_NE(0, std::memcmp(a.data() + H * hd, b.data() + H * hd, sizeof(float) * H * hd)) << "row 1 ignored position 1";
}

TEST(ModelBlocks, SwigluMatchesReference) {
  std::mt19937 rng(6);
  const auto g = random_floats(rng, 1000, -12, 12), u = random_floats(rng, 1000, -3, 3);
  std::vector<float> h(1000);
  qc::swiglu(h.data(), g.data(), u.data(), 1000);
  std::vector<double> ref(1000);
  // silu(g) = g·sigmoid(g) = g·(1 + tanh(g/2))/2: a different formula for the same function.
  for (int i = 0; i < 1000; ++i) ref[i] = 0.5 * g[i] * (1.0 + std::tanh(0.5 * static_cast<double>(g[i]))) * u[i];
  expect_close(h, ref, 2 * kFp32Ulp, 1e-300, "swiglu");
}

// ---- a whole tiny model against an fp64 forward without KV cache ----

Model random_model(const ModelConfig& c, uint32_t seed) {
  std::mt19937 rng(seed);
  Model m;
  m.config = c;
  m.source = "random model seed " + std::to_string(seed);
  const int64_t D = c.hidden, q_dim = c.n_heads * c.head_dim, kv_dim = c.n_kv_heads * c.head_dim;
  m.embed = random_floats(rng, c.vocab * D, -1, 1);
  m.final_norm = random_floats(rng, D, 0.5, 1.5);
  if (!c.tie_embeddings) m.lm_head = random_floats(rng, c.vocab * D, -0.5, 0.5);
  auto lin = [&](std::string name, int64_t n, int64_t k, bool bias) {
    qc::LinearLayer l;
    l.name = std::move(name);
    l.n_out = n;
    l.k_in = k;
    const float a = 1.0f / std::sqrt(static_cast<float>(k));
    l.weight = random_floats(rng, n * k, -a, a);
    if (bias) l.bias = random_floats(rng, n, -0.2f, 0.2f);
    return l;
  };
  for (int64_t i = 0; i < c.n_layers; ++i) {
    qc::DecoderLayer L;
    const std::string p = "layers." + std::to_string(i) + ".";
    L.attn_norm = random_floats(rng, D, 0.5, 1.5);
    L.ffn_norm = random_floats(rng, D, 0.5, 1.5);
    if (c.qk_norm) L.q_norm = random_floats(rng, c.head_dim, 0.5, 1.5), L.k_norm = random_floats(rng, c.head_dim, 0.5, 1.5);
    L.q = lin(p + "self_attn.q_proj", q_dim, D, c.qkv_bias);
    L.k = lin(p + "self_attn.k_proj", kv_dim, D, c.qkv_bias);
    L.v = lin(p + "self_attn.v_proj", kv_dim, D, c.qkv_bias);
    L.o = lin(p + "self_attn.o_proj", D, q_dim, false);
    L.gate = lin(p + "mlp.gate_proj", c.intermediate, D, false);
    L.up = lin(p + "mlp.up_proj", c.intermediate, D, false);
    L.down = lin(p + "mlp.down_proj", D, c.intermediate, false);
    m.layers.push_back(std::move(L));
  }
  return m;
}

// HF-style forward over the whole sequence at once, in double, no cache: logits [T, vocab].
std::vector<double> reference_forward(const Model& m, const std::vector<int32_t>& toks) {
  const ModelConfig& c = m.config;
  const int64_t T = toks.size(), D = c.hidden, hd = c.head_dim, H = c.n_heads, KVH = c.n_kv_heads;
  using Mat = std::vector<double>;
  auto norm = [&](const double* x, const std::vector<float>& w, int64_t n, double* o) {
    double ss = 0;
    for (int64_t i = 0; i < n; ++i) ss += x[i] * x[i];
    const double r = 1 / std::sqrt(ss / n + c.rms_eps);
    for (int64_t i = 0; i < n; ++i) o[i] = x[i] * r * w[i];
  };
  auto linear = [&](const Mat& x, const qc::LinearLayer& l) {
    Mat y(T * l.n_out);
    for (int64_t t = 0; t < T; ++t)
      for (int64_t n = 0; n < l.n_out; ++n) {
        double s = l.bias.empty() ? 0 : l.bias[n];
        for (int64_t k = 0; k < l.k_in; ++k) s += x[t * l.k_in + k] * l.weight[n * l.k_in + k];
        y[t * l.n_out + n] = s;
      }
    return y;
  };
  auto rope = [&](Mat& x, int64_t heads) {
    for (int64_t t = 0; t < T; ++t)
      for (int64_t h = 0; h < heads; ++h) {
        std::vector<float> tmp(hd);
        double* p = &x[(t * heads + h) * hd];
        // Rotate through the block test's reference (already pinned against complex/HF formulas),
        // but on doubles: build the rotation matrix per pair directly.
        for (int64_t i = 0; i < hd / 2; ++i) {
          const double ang = t * std::pow(c.rope_theta, -2.0 * i / hd);
          const int64_t a = c.rope_style == RopeStyle::interleaved ? 2 * i : i;
          const int64_t b = c.rope_style == RopeStyle::interleaved ? 2 * i + 1 : i + hd / 2;
          const double x0 = p[a], x1 = p[b];
          p[a] = x0 * std::cos(ang) - x1 * std::sin(ang);
          p[b] = x1 * std::cos(ang) + x0 * std::sin(ang);
        }
      }
  };
  Mat x(T * D);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t d = 0; d < D; ++d) x[t * D + d] = m.embed[toks[t] * D + d];
  for (const qc::DecoderLayer& L : m.layers) {
    Mat xn(T * D);
    for (int64_t t = 0; t < T; ++t) norm(&x[t * D], L.attn_norm, D, &xn[t * D]);
    Mat q = linear(xn, L.q), k = linear(xn, L.k), v = linear(xn, L.v);
    if (c.qk_norm) {
      for (int64_t r = 0; r < T * H; ++r) norm(&q[r * hd], L.q_norm, hd, &q[r * hd]);
      for (int64_t r = 0; r < T * KVH; ++r) norm(&k[r * hd], L.k_norm, hd, &k[r * hd]);
    }
    rope(q, H);
    rope(k, KVH);
    Mat att(T * H * hd, 0.0);
    for (int64_t h = 0; h < H; ++h) {
      const int64_t kh = h * KVH / H;  // = h / (H/KVH)
      for (int64_t i = 0; i < T; ++i) {
        std::vector<double> s(i + 1);
        double mx = -INFINITY, z = 0;
        for (int64_t j = 0; j <= i; ++j) {
          double dot = 0;
          for (int64_t d = 0; d < hd; ++d) dot += q[(i * H + h) * hd + d] * k[(j * KVH + kh) * hd + d];
          s[j] = dot / std::sqrt(static_cast<double>(hd));
          mx = std::max(mx, s[j]);
        }
        for (auto& e : s) z += (e = std::exp(e - mx));
        for (int64_t j = 0; j <= i; ++j)
          for (int64_t d = 0; d < hd; ++d) att[(i * H + h) * hd + d] += s[j] / z * v[(j * KVH + kh) * hd + d];
      }
    }
    Mat o = linear(att, L.o);
    for (int64_t i = 0; i < T * D; ++i) x[i] += o[i];
    for (int64_t t = 0; t < T; ++t) norm(&x[t * D], L.ffn_norm, D, &xn[t * D]);
    Mat g = linear(xn, L.gate), u = linear(xn, L.up);
    for (size_t i = 0; i < g.size(); ++i) g[i] = g[i] / (1 + std::exp(-g[i])) * u[i];
    Mat dn = linear(g, L.down);
    for (int64_t i = 0; i < T * D; ++i) x[i] += dn[i];
  }
  Mat logits(T * c.vocab);
  const float* head = m.head_weight();
  for (int64_t t = 0; t < T; ++t) {
    std::vector<double> xn(D);
    norm(&x[t * D], m.final_norm, D, xn.data());
    for (int64_t n = 0; n < c.vocab; ++n) {
      double s = 0;
      for (int64_t d = 0; d < D; ++d) s += xn[d] * head[n * D + d];
      logits[t * c.vocab + n] = s;
    }
  }
  return logits;
}

ModelConfig tiny_config(const std::string& arch) {
  ModelConfig c;
  c.arch = arch;
  c.hidden = 32;
  c.intermediate = 48;
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.head_dim = 8;
  c.vocab = 40;
  c.max_seq_len = 64;
  if (arch == "llama2c") {
    c.rope_style = RopeStyle::interleaved;
    c.tie_embeddings = true;
  } else if (arch == "qwen3") {
    c.rope_style = RopeStyle::rotate_half;
    c.rope_theta = 1e6;
    c.rms_eps = 1e-6f;
    c.head_dim = 16;  // n_heads·head_dim (64) != hidden (32), as Qwen3 allows
    c.qk_norm = true;
  } else if (arch == "qwen2") {
    c.rope_style = RopeStyle::rotate_half;
    c.qkv_bias = true;
    c.n_kv_heads = 1;
  }
  c.validate(arch);
  return c;
}

class ModelTiny : public ::testing::TestWithParam<std::string> {};

TEST_P(ModelTiny, PrefillMatchesFp64ReferenceAndDecodeMatchesPrefillBitwise) {
  const Model m = random_model(tiny_config(GetParam()), 7);
  const std::vector<int32_t> toks = {1, 5, 39, 0, 17, 17, 22, 3, 11, 30, 2, 8};
  Decoder dec(m);
  std::vector<float> prefill;
  dec.forward(toks, qc::LogitRows::all, prefill);
  const auto ref = reference_forward(m, toks);
  double scale = 0;
  for (double r : ref) scale = std::max(scale, std::fabs(r));
  // Every stored activation is an fp32 rounding (~2^-24 relative) of a value the reference keeps
  // in double; a dozen roundings per layer through two layers stay far below 2^-16 of the scale.
  // A wiring error (wrong head, pair, mask or bias) moves logits by O(scale).
  expect_close(prefill, ref, 0, std::ldexp(scale, -16), "tiny " + GetParam() + " prefill vs fp64 reference");

  // Decode one token at a time through the KV cache: the same per-row arithmetic, so the same bits.
  dec.reset();
  std::vector<float> step, decoded;
  for (int32_t t : toks) {
    dec.forward(std::span<const int32_t>(&t, 1), qc::LogitRows::all, step);
    decoded.insert(decoded.end(), step.begin(), step.end());
  }
  ASSERT_EQ(decoded.size(), prefill.size());
  for (size_t i = 0; i < prefill.size(); ++i) {
    ASSERT_EQ(std::bit_cast<uint32_t>(decoded[i]), std::bit_cast<uint32_t>(prefill[i]))
        << "position " << i / m.config.vocab << " logit " << i % m.config.vocab << ": decode " << decoded[i]
        << " prefill " << prefill[i];
  }
  // A split prefill (5 then 7 tokens) gives the same bits too.
  dec.reset();
  std::vector<float> a, b;
  dec.forward(std::span(toks).first(5), qc::LogitRows::all, a);
  dec.forward(std::span(toks).subspan(5), qc::LogitRows::last, b);
  EXPECT_EQ(0, std::memcmp(b.data(), prefill.data() + (toks.size() - 1) * m.config.vocab, sizeof(float) * m.config.vocab));
}

INSTANTIATE_TEST_SUITE_P(ModelArchs, ModelTiny, ::testing::Values("llama2c", "qwen3", "qwen2"));

TEST(ModelDecoder, EveryLinearLayerGoesThroughTheLinearFnAndCapture) {
  const Model m = random_model(tiny_config("qwen2"), 8);
  std::vector<std::string> linear_calls, captured;
  std::vector<int64_t> rows;
  auto linear = [&](const qc::LinearLayer& l, const float* x, int64_t M, float* y) {
    linear_calls.push_back(l.name);
    rows.push_back(M);
    qc::fp32_linear(l, x, M, y);
  };
  auto capture = [&](const qc::LinearLayer& l, const float* x, int64_t M, const float* y) {
    captured.push_back(l.name);
    // The capture sees the rows the layer saw and what it produced.
    std::vector<float> again(M * l.n_out);
    qc::fp32_linear(l, x, M, again.data());
    EXPECT_EQ(0, std::memcmp(again.data(), y, sizeof(float) * again.size())) << l.name;
  };
  Decoder dec(m, linear, capture);
  std::vector<float> logits;
  const std::vector<int32_t> toks = {1, 2, 3, 4, 5};
  dec.forward(toks, qc::LogitRows::last, logits);
  std::vector<std::string> expected;
  for (const qc::LinearLayer* l : m.linear_layers()) expected.push_back(l->name);
  EXPECT_EQ(linear_calls, expected);
  EXPECT_EQ(captured, expected);
  for (int64_t r : rows) EXPECT_EQ(r, 5) << "prefill must send all M rows through each linear layer";
  EXPECT_EQ(expected.size(), 14u);
  EXPECT_EQ(expected[0], "layers.0.self_attn.q_proj");
  EXPECT_EQ(expected[13], "layers.1.mlp.down_proj");
}

TEST(ModelDecoder, ModeOptionsAreCheckedAsInputErrors) {
  auto expect_input_error = [](auto&& fn, const char* needle) {
    try {
      fn();
      ADD_FAILURE() << "expected an input error mentioning " << needle;
    } catch (const qc::Error& e) {
      EXPECT_EQ(e.kind(), qc::ErrorKind::input) << e.what();
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  expect_input_error([] { qc::make_linear_fn(qc::LinearMode::fp32, "cpu:vllm-cutlass"); }, "mode fp32 runs no arm");
  expect_input_error([] {
    qc::W8a8Options o;
    o.pow2 = true;
    qc::make_linear_fn(qc::LinearMode::fp32, o);
  }, "--pow2");
  expect_input_error([] { qc::make_linear_fn(qc::LinearMode::w8a8, "cpu:no-such-epilogue"); }, "no-such-epilogue");
  expect_input_error([] {
    qc::W8a8Options o;
    o.act_quantizer = "static";
    qc::W8a8Linear l(o);
  }, "static");
  EXPECT_THROW(qc::parse_linear_mode("int4"), qc::Error);
  EXPECT_EQ(qc::parse_linear_mode("fp32"), qc::LinearMode::fp32);
  EXPECT_EQ(qc::parse_linear_mode("w8a8"), qc::LinearMode::w8a8);
}

TEST(ModelDecoder, RejectsTokensOutOfRangeAndSequencesBeyondMaxSeqLen) {
  const Model m = random_model(tiny_config("llama2c"), 9);
  Decoder dec(m);
  std::vector<float> logits;
  const std::vector<int32_t> bad = {1, 40};
  EXPECT_THROW(dec.forward(bad, qc::LogitRows::all, logits), qc::Error);
  dec.reset();
  const std::vector<int32_t> too_long(65, 3);
  EXPECT_THROW(dec.forward(too_long, qc::LogitRows::all, logits), qc::Error);
}

TEST(ModelRecords, Top2AndRecordFormatRoundTrip) {
  const std::vector<float> l = {1.5f, 3.25f, NAN, 3.25f, -2.0f, 0.1f};
  const qc::PositionRecord r = qc::top2(l.data(), l.size());
  EXPECT_EQ(r.top1_id, 1);  // lowest id on ties
  EXPECT_EQ(r.top2_id, 3);
  EXPECT_EQ(r.margin, 0.0f);
  qc::PositionRecord s = qc::top2(std::vector<float>{0.1f, 1e-8f, 16777217.0f}.data(), 3);
  s.prompt = "p\"1";
  s.position = 4;
  s.token = 2;
  const auto j = nlohmann::json::parse(qc::format_record(s));
  EXPECT_EQ(j["prompt"], "p\"1");
  EXPECT_EQ(j["top1_logit"].get<float>(), 16777217.0f);
  EXPECT_EQ(j["top2_logit"].get<float>(), 0.1f) << "floats must round-trip exactly";
  EXPECT_EQ(j["margin"].get<float>(), 16777217.0f - 0.1f);
  EXPECT_EQ(qc::format_record(s).find("{\"prompt\": "), 0u);
}

// ---- loaders ----

std::vector<uint8_t> file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}
std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("qc_test_model_" + std::to_string(::getpid()) + "_" + name)).string();
}
void write_bytes(const std::string& path, const std::vector<uint8_t>& b) {
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(b.data()), b.size());
}
float float_at(const std::vector<uint8_t>& b, size_t float_index, size_t header) {
  float f;
  std::memcpy(&f, b.data() + header + 4 * float_index, 4);
  return f;
}

TEST(ModelLoader, LegacyStories260K) {
  SKIP_WITHOUT_STORIES();
  const Model m = qc::load_llama2c(kStoriesBin);
  const ModelConfig& c = m.config;
  EXPECT_EQ(c.hidden, 64);
  EXPECT_EQ(c.intermediate, 172);
  EXPECT_EQ(c.n_layers, 5);
  EXPECT_EQ(c.n_heads, 8);
  EXPECT_EQ(c.n_kv_heads, 4);
  EXPECT_EQ(c.head_dim, 8);
  EXPECT_EQ(c.vocab, 512);
  EXPECT_EQ(c.max_seq_len, 512);
  EXPECT_TRUE(c.tie_embeddings);
  EXPECT_EQ(c.rope_style, RopeStyle::interleaved);
  EXPECT_EQ(m.sha256.rfind("sha256:", 0), 0u);
  // Spot-check tensors against offsets computed here from run.c's layout.
  const auto b = file_bytes(kStoriesBin);
  const size_t H = 28, V = 512, D = 64, L = 5, KV = 32, F = 172;
  EXPECT_EQ(m.embed[0], float_at(b, 0, H));
  EXPECT_EQ(m.layers[0].attn_norm[0], float_at(b, V * D, H));
  const size_t wq = V * D + L * D, wk = wq + L * D * D, wv = wk + L * KV * D, wo = wv + L * KV * D;
  const size_t rms_ffn = wo + L * D * D, w1 = rms_ffn + L * D, w2 = w1 + L * F * D, w3 = w2 + L * D * F;
  const size_t rms_final = w3 + L * F * D;
  EXPECT_EQ(m.layers[2].q.weight[5], float_at(b, wq + 2 * D * D + 5, H));
  EXPECT_EQ(m.layers[4].k.weight.back(), float_at(b, wk + 5 * KV * D - 1, H));
  EXPECT_EQ(m.layers[1].v.weight[0], float_at(b, wv + KV * D, H));
  EXPECT_EQ(m.layers[3].o.weight[7], float_at(b, wo + 3 * D * D + 7, H));
  EXPECT_EQ(m.layers[3].ffn_norm[1], float_at(b, rms_ffn + 3 * D + 1, H));
  EXPECT_EQ(m.layers[1].gate.weight[2], float_at(b, w1 + F * D + 2, H));
  EXPECT_EQ(m.layers[1].down.weight[2], float_at(b, w2 + D * F + 2, H));
  EXPECT_EQ(m.layers[1].up.weight[2], float_at(b, w3 + F * D + 2, H));
  EXPECT_EQ(m.final_norm[63], float_at(b, rms_final + 63, H));
  EXPECT_EQ(b.size(), H + 4 * (rms_final + D + 512 * 8));  // + freq_cis real and imag
}

// The bytes of a llama2.c checkpoint written by hand, little-endian as export.py packs them (written
// here, not by the library).
struct HandWritten {
  std::vector<uint8_t> bytes;
  void i32(int32_t v) { append(&v, 4); }
  void floats(const std::vector<float>& v) { append(v.data(), v.size() * sizeof(float)); }
  // One tensor of every layer, layer after layer: a norm, or a projection's weight.
  void per_layer(const Model& m, std::vector<float> DecoderLayer::*norm) {
    for (const DecoderLayer& l : m.layers) floats(l.*norm);
  }
  void per_layer(const Model& m, qc::LinearLayer DecoderLayer::*projection) {
    for (const DecoderLayer& l : m.layers) floats((l.*projection).weight);
  }

 private:
  void append(const void* p, size_t n) {
    bytes.insert(bytes.end(), static_cast<const uint8_t*>(p), static_cast<const uint8_t*>(p) + n);
  }
};

// A v1 file, the way export.py's `version1_export` writes it.
std::vector<uint8_t> write_v1_by_hand(const Model& m) {
  const ModelConfig& c = m.config;
  HandWritten out;
  out.bytes = {'2', '4', 'k', 'a'};  // struct.pack('I', 0x616b3432)
  out.i32(1);
  for (int64_t v : {c.hidden, c.intermediate, c.n_layers, c.n_heads, c.n_kv_heads, c.vocab, c.max_seq_len}) out.i32(static_cast<int32_t>(v));
  out.bytes.push_back(c.tie_embeddings ? 1 : 0);
  out.bytes.resize(256, 0);
  out.per_layer(m, &DecoderLayer::attn_norm);
  out.per_layer(m, &DecoderLayer::ffn_norm);
  out.floats(m.final_norm);
  out.floats(m.embed);
  // w1 (gate), w2 (down), w3 (up).
  for (auto p : {&DecoderLayer::q, &DecoderLayer::k, &DecoderLayer::v, &DecoderLayer::o, &DecoderLayer::gate,
                 &DecoderLayer::down, &DecoderLayer::up}) {
    out.per_layer(m, p);
  }
  if (!c.tie_embeddings) out.floats(m.lm_head);
  return out.bytes;
}

// Legacy layout with an untied classifier (negative vocab_size).
std::vector<uint8_t> write_legacy_by_hand(const Model& m) {
  const ModelConfig& c = m.config;
  HandWritten out;
  for (int64_t v : {c.hidden, c.intermediate, c.n_layers, c.n_heads, c.n_kv_heads}) out.i32(static_cast<int32_t>(v));
  out.i32(static_cast<int32_t>(c.tie_embeddings ? c.vocab : -c.vocab));
  out.i32(static_cast<int32_t>(c.max_seq_len));
  out.floats(m.embed);
  out.per_layer(m, &DecoderLayer::attn_norm);
  for (auto p : {&DecoderLayer::q, &DecoderLayer::k, &DecoderLayer::v, &DecoderLayer::o}) out.per_layer(m, p);
  out.per_layer(m, &DecoderLayer::ffn_norm);
  for (auto p : {&DecoderLayer::gate, &DecoderLayer::down, &DecoderLayer::up}) out.per_layer(m, p);
  out.floats(m.final_norm);
  out.floats(std::vector<float>(c.max_seq_len * c.head_dim, 0.25f));  // freq_cis_real + _imag
  if (!c.tie_embeddings) out.floats(m.lm_head);
  return out.bytes;
}

void expect_same_model(const Model& a, const Model& b) {
  EXPECT_EQ(a.config.tie_embeddings, b.config.tie_embeddings);
  EXPECT_EQ(a.embed, b.embed);
  EXPECT_EQ(a.final_norm, b.final_norm);
  EXPECT_EQ(a.lm_head, b.lm_head);
  ASSERT_EQ(a.layers.size(), b.layers.size());
  for (size_t i = 0; i < a.layers.size(); ++i) {
    EXPECT_EQ(a.layers[i].attn_norm, b.layers[i].attn_norm) << i;
    EXPECT_EQ(a.layers[i].ffn_norm, b.layers[i].ffn_norm) << i;
  }
  const auto la = a.linear_layers(), lb = b.linear_layers();
  for (size_t i = 0; i < la.size(); ++i) {
    EXPECT_EQ(la[i]->name, lb[i]->name);
    EXPECT_EQ(la[i]->weight, lb[i]->weight) << la[i]->name;
  }
}

TEST(ModelLoader, V1AndLegacyFilesWrittenByHandLoadBackExactly) {
  for (bool tied : {true, false}) {
    ModelConfig c = tiny_config("llama2c");
    c.tie_embeddings = tied;
    Model m = random_model(c, tied ? 10 : 11);
    // Names as the loader gives them.
    for (size_t i = 0; i < m.layers.size(); ++i) EXPECT_EQ(m.layers[i].gate.name, "layers." + std::to_string(i) + ".mlp.gate_proj");
    const std::string v1 = temp_path(tied ? "v1_tied.bin" : "v1_untied.bin");
    const std::string legacy = temp_path(tied ? "legacy_tied.bin" : "legacy_untied.bin");
    const auto v1_bytes = write_v1_by_hand(m);
    write_bytes(v1, v1_bytes);
    write_bytes(legacy, write_legacy_by_hand(m));
    const Model a = qc::load_llama2c(v1), b = qc::load_llama2c(legacy);
    expect_same_model(a, m);
    expect_same_model(b, m);
    EXPECT_EQ(qc::encode_llama2c_v1(a), v1_bytes) << "the library's v1 writer disagrees with export.py's layout";
    std::filesystem::remove(v1);
    std::filesystem::remove(legacy);
  }
}

void expect_input_error(const std::vector<uint8_t>& bytes, const std::vector<std::string>& needles) {
  const std::string path = temp_path("bad.bin");
  write_bytes(path, bytes);
  try {
    qc::load_llama2c(path);
    ADD_FAILURE() << "no error for a malformed checkpoint (expected " << needles[0] << ")";
  } catch (const qc::Error& e) {
    EXPECT_EQ(e.kind(), qc::ErrorKind::input) << e.what();
    const std::string what = e.what();
    EXPECT_NE(what.find(path), std::string::npos) << "message must name the file: " << what;
    for (const std::string& n : needles) EXPECT_NE(what.find(n), std::string::npos) << "missing `" << n << "` in: " << what;
  }
  std::filesystem::remove(path);
}

TEST(ModelLoader, MalformedCheckpointsAreClearInputErrors) {
  const Model m = random_model(tiny_config("llama2c"), 12);
  const auto legacy = write_legacy_by_hand(m);
  const auto v1 = write_v1_by_hand(m);
  auto truncated = legacy;
  truncated.resize(truncated.size() - 4);
  expect_input_error(truncated, {"legacy", std::to_string(legacy.size()), std::to_string(truncated.size()), "too short"});
  auto longer = v1;
  longer.push_back(0);
  expect_input_error(longer, {"v1", std::to_string(v1.size()), std::to_string(longer.size()), "trailing"});
  expect_input_error({1, 2, 3}, {"header"});
  auto zero_layers = legacy;
  std::memset(zero_layers.data() + 8, 0, 4);
  expect_input_error(zero_layers, {"n_layers", "positive"});
  auto bad_kv = legacy;
  const int32_t three = 3;
  std::memcpy(bad_kv.data() + 16, &three, 4);
  expect_input_error(bad_kv, {"n_kv_heads", "divisor"});
  auto v2 = v1;
  const int32_t two = 2;
  std::memcpy(v2.data() + 4, &two, 4);
  expect_input_error(v2, {"version", "Q8_0"});
  auto huge = legacy;
  const int32_t big = 1 << 30;
  for (int off : {0, 4, 8}) std::memcpy(huge.data() + off, &big, 4);
  expect_input_error(huge, {"2^63"});
  EXPECT_THROW(qc::load_llama2c(temp_path("does_not_exist.bin")), qc::Error);
}

// ---- the real model ----

// A word is English-like when, stripped of surrounding punctuation, it is letters with at most
// an initial capital and optional internal apostrophes ("didn't", "Lily's"), or nothing at all
// (pure punctuation such as "-").
bool english_like(const std::string& word) {
  const std::string punct = ".,!?;:\"'()-";
  size_t b = 0, e = word.size();
  while (b < e && punct.find(word[b]) != std::string::npos) ++b;
  while (e > b && punct.find(word[e - 1]) != std::string::npos) --e;
  for (size_t i = b; i < e; ++i) {
    const char ch = word[i];
    const bool ok = std::islower(static_cast<unsigned char>(ch)) || (i == b && std::isupper(static_cast<unsigned char>(ch))) ||
                    (ch == '\'' && i > b && i + 1 < e);
    if (!ok) return false;
  }
  return true;
}

TEST(ModelStories, GreedyStoryFromEmptyPromptIsEnglishAndPrefillMatchesDecode) {
  SKIP_WITHOUT_STORIES();
  const Model m = qc::load_llama2c(kStoriesBin);
  const qc::Tokenizer tok = qc::Tokenizer::load_llama2c(kStoriesTok, m.config.vocab);
  Decoder dec(m);
  const auto prompt = tok.encode("", /*bos=*/true, /*eos=*/false);
  ASSERT_EQ(prompt, std::vector<int32_t>{1});
  const auto t0 = std::chrono::steady_clock::now();
  const qc::GenerateResult g = qc::generate_greedy(dec, prompt, 256, 0);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const std::string text = tok.decode(g.tokens);
  RecordProperty("tokens_per_second", std::to_string(g.records.size() / seconds));
  std::printf("stories260K fp32 greedy: %zu tokens in %.3f s (%.0f tokens/s)\n%s\n", g.records.size(), seconds,
              g.records.size() / seconds, text.c_str());
  ASSERT_GE(g.records.size(), 100u) << "the story stopped early: " << text;
  std::istringstream words_in(text);
  std::string w;
  size_t n = 0, good = 0;
  std::set<std::string> distinct;
  std::string bad_examples;
  while (words_in >> w) {
    ++n;
    distinct.insert(w);
    if (english_like(w)) ++good;
    else if (bad_examples.size() < 200) bad_examples += " [" + w + "]";
  }
  EXPECT_GE(n, 50u) << text;
  EXPECT_GE(good * 10, n * 9) << good << " of " << n << " words English-like; not:" << bad_examples << "\n" << text;
  EXPECT_GE(distinct.size(), 30u) << "degenerate repetition:\n" << text;
  for (const char* common : {" the ", " was ", " a "}) EXPECT_NE(text.find(common), std::string::npos) << common;
  for (const auto& r : g.records) EXPECT_EQ(r.token, r.top1_id);

  // Prefill vs decode: both paths run each row through the same arithmetic in the same order
  // (per-row linear layers, per-row attention over the cache), so the bound is zero: the logits
  // must agree bit for bit. Any KV-cache or position bug shows up as O(1) differences.
  const qc::PrefillDecodeComparison cmp = qc::compare_prefill_decode(dec, g);
  EXPECT_EQ(cmp.positions, static_cast<int64_t>(g.records.size()));
  EXPECT_EQ(cmp.top1_disagreements, 0);
  EXPECT_EQ(cmp.bitwise_different, 0);
  EXPECT_EQ(cmp.max_abs_diff, 0.0);

  // Replay of the generated sequence reproduces every record exactly.
  const auto replayed = qc::replay(dec, g.tokens, 0);
  for (const auto& r : g.records) {
    const auto& q = replayed[static_cast<size_t>(r.position)];
    EXPECT_EQ(qc::format_record(q), qc::format_record(r));
  }
}

TEST(ModelStories, Fp32AccumulationStaysWithinRoundingOfTheReference) {
  // A LinearFn that accumulates in fp32 (llama2.c's `matmul`) instead of double: the logits move
  // only by accumulated rounding. Bound: 2^-12 of the largest |logit| (each of the ~60 linear
  // outputs on a path carries a relative error below K·2^-24 ≈ 2^-16 for K ≤ 172, and the
  // network is well conditioned); a real difference in the model would move logits by O(1).
  SKIP_WITHOUT_STORIES();
  const Model m = qc::load_llama2c(kStoriesBin);
  auto fp32_acc = [](const qc::LinearLayer& l, const float* x, int64_t M, float* y) {
    for (int64_t r = 0; r < M; ++r)
      for (int64_t n = 0; n < l.n_out; ++n) {
        float s = 0.0f;
        for (int64_t k = 0; k < l.k_in; ++k) s += x[r * l.k_in + k] * l.weight[n * l.k_in + k];
        y[r * l.n_out + n] = s;
      }
  };
  Decoder ref(m), alt(m, fp32_acc);
  std::vector<int32_t> toks = {1};
  for (int i = 0; i < 63; ++i) toks.push_back(static_cast<int32_t>((i * 37 + 11) % 509 + 3));
  std::vector<float> a, b;
  ref.forward(toks, qc::LogitRows::all, a);
  alt.forward(toks, qc::LogitRows::all, b);
  double scale = 0, max_diff = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_TRUE(std::isfinite(a[i]) && std::isfinite(b[i])) << i;
    scale = std::max(scale, std::fabs(static_cast<double>(a[i])));
    max_diff = std::max(max_diff, std::fabs(static_cast<double>(a[i]) - b[i]));
  }
  std::printf("fp32 vs double accumulation: max |logit diff| %.3g, logit scale %.3g\n", max_diff, scale);
  EXPECT_GT(max_diff, 0.0) << "the two accumulations should differ somewhere (else this test tests nothing)";
  EXPECT_LE(max_diff, std::ldexp(scale, -12));
}

}  // namespace
