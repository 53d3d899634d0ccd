// Mode w8a8: one quantized linear layer against an emulation written here from the formulas of
// `../shared/reference/production-epilogues.md` (no qconform quantizer, accumulator or epilogue
// code), thread-count independence of the fp32 matmul, and on the real stories260K:
// vllm-cutlass vs vllm-triton (measured and printed), the power-of-two probe (asserted bit for
// bit), and capture -> predict -> verify agreeing with what the model run saw.
//
// Build and run: cmake --build build --target qconform_unit_tests &&
//   ./build/tests/qconform_unit_tests --gtest_filter='ModelW8a8*'
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <random>

#include "qconform/arm.hpp"
#include "qconform/error.hpp"
#include "checks/verify.hpp"
#include "model/model.hpp"
#include "qconform/numerics.hpp"
#include "core/operands_io.hpp"
#include "model/tokenizer.hpp"

namespace {

const std::string kStoriesDir = std::string(QC_SHARED_DIR) + "/models/stories260K";
const std::string kStoriesBin = kStoriesDir + "/stories260K.bin";
const std::string kStoriesTok = kStoriesDir + "/tok512.bin";

#define SKIP_WITHOUT_STORIES()                                                                        \
  do {                                                                                                \
    if (!std::filesystem::exists(kStoriesBin) || !std::filesystem::exists(kStoriesTok))               \
      GTEST_SKIP() << "stories260K not found in " << kStoriesDir << " (the shared model folder is absent)"; \
  } while (0)

std::string temp_dir(const std::string& tag) {
  const auto p = std::filesystem::temp_directory_path() / fmt::format("qc_w8a8_{}_{}", tag, ::getpid());
  std::filesystem::remove_all(p);
  std::filesystem::create_directories(p);
  return p.string();
}

// ---- the emulation (independent of src/epilogue, src/accum and quantize.cpp) ----

int8_t sat_rne(float v) {
  if (std::isnan(v)) return 0;
  const double r = std::nearbyint(static_cast<double>(v));  // default rounding mode: half to even
  return static_cast<int8_t>(std::clamp(r, -128.0, 127.0));
}

uint16_t bf16_ref(float v) { return qc::ref::f32_to_bf16(v); }

// y [M,N] bf16 of vllm-cutlass (`sa * (acc * sw)`) or vllm-triton (`(acc * sa) * sw`), no bias.
std::vector<uint16_t> emulate(const std::vector<float>& x, int64_t M, const std::vector<float>& w, int64_t N,
                              int64_t K, bool cutlass, bool pow2) {
  std::vector<int8_t> wq(N * K), aq(M * K);
  std::vector<float> sw(N), sa(M);
  for (int64_t n = 0; n < N; ++n) {
    float absmax = 0;
    for (int64_t k = 0; k < K; ++k) absmax = std::max(absmax, std::fabs(w[n * K + k]));
    sw[n] = absmax / 127.5f;
    for (int64_t k = 0; k < K; ++k) wq[n * K + k] = sat_rne(w[n * K + k] / sw[n]);
    // Nearest power of two in log2: the threshold 2^(e+1/2) is irrational, so round() never ties.
    if (pow2) sw[n] = static_cast<float>(std::exp2(std::round(std::log2(static_cast<double>(sw[n])))));
  }
  for (int64_t m = 0; m < M; ++m) {
    float absmax = 0;
    for (int64_t k = 0; k < K; ++k) absmax = std::max(absmax, std::fabs(x[m * K + k]));
    sa[m] = absmax / 127.0f;
    const float inv = 127.0f / absmax;
    for (int64_t k = 0; k < K; ++k) aq[m * K + k] = sat_rne(x[m * K + k] * inv);
  }
  std::vector<uint16_t> y(M * N);
  for (int64_t m = 0; m < M; ++m) {
    for (int64_t n = 0; n < N; ++n) {
      int64_t acc = 0;
      for (int64_t k = 0; k < K; ++k) acc += int64_t{aq[m * K + k]} * wq[n * K + k];
      const float a = static_cast<float>(acc);
      const float v = cutlass ? sa[m] * (a * sw[n]) : (a * sa[m]) * sw[n];
      y[m * N + n] = bf16_ref(v);
    }
  }
  return y;
}

TEST(ModelW8a8, LinearLayerEqualsTheFormulasEmulatedHere) {
  std::mt19937 rng(11);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const int64_t M = 5, N = 48, K = 96;
  qc::LinearLayer layer;
  layer.name = "layers.0.self_attn.q_proj";
  layer.n_out = N;
  layer.k_in = K;
  for (int64_t i = 0; i < N * K; ++i) layer.weight.push_back(0.05f * nd(rng));
  std::vector<float> x(M * K);
  for (float& v : x) v = nd(rng);
  x[3] = 40.0f;  // an outlier channel, as real activations have
  for (const bool pow2 : {false, true}) {
    for (const char* arm : {"cpu:vllm-cutlass", "cpu:vllm-triton"}) {
      qc::W8a8Options o;
      o.arm = arm;
      o.pow2 = pow2;
      qc::W8a8Linear lin(o);
      std::vector<float> y(M * N);
      lin(layer, x.data(), M, y.data());
      const auto ref = emulate(x, M, layer.weight, N, K, std::string(arm) == "cpu:vllm-cutlass", pow2);
      int64_t bad = 0;
      for (int64_t i = 0; i < M * N; ++i) {
        const uint16_t got = qc::f32_to_bf16(y[i]);
        const bool widened_exactly = qc::bf16_to_f32(got) == y[i];
        if (got != ref[i] || !widened_exactly) {
          if (++bad <= 5) {
            ADD_FAILURE() << arm << " pow2=" << pow2 << " at (" << i / N << "," << i % N << "): got " << y[i]
                          << " (0x" << std::hex << got << "), emulated " << qc::bf16_to_f32(ref[i]) << " (0x"
                          << ref[i] << std::dec << ")";
          }
        }
      }
      EXPECT_EQ(bad, 0) << arm << " pow2=" << pow2;
    }
  }
}

TEST(ModelW8a8, WeightsAreQuantizedOncePerLayerAndObserved) {
  const qc::Model m = qc::synth_model(qc::synth_config("tiny"), 3);
  qc::W8a8Linear lin(qc::W8a8Options{});
  std::map<std::string, const int8_t*> w_ptr;
  int64_t calls = 0, moved = 0;
  lin.set_observer([&](const qc::LayerOperands& ops, const qc::ArmOutput& out) {
    ++calls;
    EXPECT_EQ(out.y.size(), static_cast<size_t>(ops.m * ops.n));
    auto [it, fresh] = w_ptr.emplace(ops.name, ops.w_q.data());
    if (!fresh && it->second != ops.w_q.data()) ++moved;
  });
  qc::Decoder dec(m, lin);
  std::vector<float> logits;
  const std::vector<int32_t> toks = {1, 7, 9, 4};
  dec.forward(toks, qc::LogitRows::last, logits);
  const int32_t next[1] = {5};
  dec.forward(next, qc::LogitRows::last, logits);
  EXPECT_EQ(calls, 2 * 14);
  EXPECT_EQ(w_ptr.size(), 14u);
  EXPECT_EQ(moved, 0) << "a layer's int8 weights were recomputed instead of cached";
  for (float v : logits) ASSERT_TRUE(std::isfinite(v));
}

TEST(ModelW8a8, Fp32MatmulIsBitIdenticalForAnyThreadCount) {
  std::mt19937 rng(12);
  std::uniform_real_distribution<float> d(-1, 1);
  const int64_t M = 3, N = 301, K = 2050;  // N not a multiple of the block or the chain count
  std::vector<float> x(M * K), w(N * K), b(N);
  for (float& v : x) v = d(rng);
  for (float& v : w) v = d(rng);
  for (float& v : b) v = d(rng);
  std::vector<float> y1(M * N), y;
  qc::matmul_fp32(x.data(), M, w.data(), b.data(), N, K, y1.data(), 1);
  for (int threads : {2, 3, 7, 0}) {
    y.assign(M * N, 0);
    qc::matmul_fp32(x.data(), M, w.data(), b.data(), N, K, y.data(), threads);
    EXPECT_EQ(0, std::memcmp(y.data(), y1.data(), sizeof(float) * y.size())) << "threads=" << threads;
  }
  // A direct per-element check that the blocked kernel is the plain ascending-k double sum.
  for (int64_t n : {0L, 7L, 8L, 300L}) {
    double a = 0;
    for (int64_t k = 0; k < K; ++k) a += static_cast<double>(x[K + k]) * w[n * K + k];
    a += b[n];
    EXPECT_EQ(std::bit_cast<uint32_t>(static_cast<float>(a)), std::bit_cast<uint32_t>(y1[N + n])) << "n=" << n;
  }
}

// ---- stories260K ----

struct ArmRun {
  qc::GenerateResult gen;
  std::vector<float> replay_logits;
  std::vector<qc::PositionRecord> replay_records;
};

ArmRun run_arm(const qc::Model& m, const std::string& arm, bool pow2, const std::vector<int32_t>& prompt,
               const std::vector<int32_t>& forced) {
  qc::W8a8Options o;
  o.arm = arm;
  o.pow2 = pow2;
  qc::Decoder dec(m, qc::make_linear_fn(qc::LinearMode::w8a8, o));
  ArmRun r;
  r.gen = qc::generate_greedy(dec, prompt, 200, 0);
  r.replay_records = qc::replay(dec, forced, 0, &r.replay_logits);
  return r;
}

int64_t bitwise_diff(const std::vector<float>& a, const std::vector<float>& b) {
  int64_t n = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) n += std::bit_cast<uint32_t>(a[i]) != std::bit_cast<uint32_t>(b[i]);
  return n + static_cast<int64_t>(std::max(a.size(), b.size()) - std::min(a.size(), b.size()));
}

TEST(ModelW8a8Stories, CutlassVsTritonMeasuredAndPow2ProbeBitIdentical) {
  SKIP_WITHOUT_STORIES();
  const qc::Model m = qc::load_model(kStoriesBin);
  const qc::Tokenizer tok = qc::Tokenizer::load_llama2c(kStoriesTok, m.config.vocab);
  const std::vector<int32_t> prompt = tok.encode("", true, false);
  // The forced sequence for replay: the fp32 model's own greedy story.
  qc::Decoder ref(m);
  const std::vector<int32_t> forced = qc::generate_greedy(ref, prompt, 200, 0).tokens;

  for (const bool pow2 : {false, true}) {
    const ArmRun a = run_arm(m, "cpu:vllm-cutlass", pow2, prompt, forced);
    const ArmRun b = run_arm(m, "cpu:vllm-triton", pow2, prompt, forced);
    size_t first_divergence = 0;
    while (first_divergence < std::min(a.gen.tokens.size(), b.gen.tokens.size()) &&
           a.gen.tokens[first_divergence] == b.gen.tokens[first_divergence]) {
      ++first_divergence;
    }
    const bool same_sequence = a.gen.tokens == b.gen.tokens;
    int64_t flips = 0;
    for (size_t p = 0; p < a.replay_records.size(); ++p) flips += a.replay_records[p].top1_id != b.replay_records[p].top1_id;
    const int64_t gen_logit_diff = bitwise_diff(a.gen.logits, b.gen.logits);
    const int64_t replay_logit_diff = bitwise_diff(a.replay_logits, b.replay_logits);
    fmt::print("[stories260K w8a8{}] cutlass vs triton: generated {} / {} tokens, sequences {} (first divergence at "
               "token {}); decode logits differing bitwise {} of {}; replay of the fp32 story ({} positions): {} "
               "top-1 flips, {} of {} logits differ bitwise\n",
               pow2 ? " --pow2" : "", a.gen.tokens.size(), b.gen.tokens.size(),
               same_sequence ? "identical" : "differ", first_divergence, gen_logit_diff, a.gen.logits.size(),
               a.replay_records.size(), flips, replay_logit_diff, a.replay_logits.size());
    fmt::print("  cutlass: {}\n", tok.decode(a.gen.tokens));
    if (!same_sequence) fmt::print("  triton:  {}\n", tok.decode(b.gen.tokens));
    if (pow2) {
      // With power-of-two weight scales both epilogues are exact products in either order.
      EXPECT_TRUE(same_sequence) << "first divergence at token " << first_divergence;
      EXPECT_EQ(gen_logit_diff, 0);
      EXPECT_EQ(replay_logit_diff, 0);
      EXPECT_EQ(flips, 0);
    }
    EXPECT_GT(a.gen.records.size(), 20u) << "w8a8 stopped almost at once: the quantized model is broken";
  }
}

TEST(ModelW8a8Stories, CaptureAgreesWithTheModelRunAndPredictVerifyRunOnIt) {
  SKIP_WITHOUT_STORIES();
  const qc::Model m = qc::load_model(kStoriesBin);
  const qc::Tokenizer tok = qc::Tokenizer::load_llama2c(kStoriesTok, m.config.vocab);
  const std::vector<std::vector<int32_t>> prompts = {tok.encode("Once upon a time", true, false),
                                                     tok.encode("The little dog was happy because", true, false)};
  qc::W8a8Options o;
  o.arm = "cpu:vllm-cutlass";
  const qc::CaptureResult cap = qc::capture_operands(m, o, prompts);
  ASSERT_EQ(cap.layers.size(), m.linear_layers().size());

  // What the model's linear layers produced, seen through the decoder's own CaptureFn in a
  // separate run (fresh weight cache, fresh arm).
  std::map<std::string, std::vector<float>> produced;
  qc::Decoder dec(m, qc::W8a8Linear(o), [&](const qc::LinearLayer& l, const float*, int64_t M, const float* y) {
    auto& v = produced[l.name];
    v.insert(v.end(), y, y + M * l.n_out);
  });
  std::vector<float> logits;
  for (const auto& p : prompts) {
    dec.reset();
    dec.forward(p, qc::LogitRows::last, logits);
  }
  const int64_t rows = static_cast<int64_t>(prompts[0].size() + prompts[1].size());
  for (size_t i = 0; i < cap.layers.size(); ++i) {
    const qc::LayerOperands& ops = cap.layers[i];
    ASSERT_EQ(ops.m, rows) << ops.name;
    const std::vector<float>& y = produced.at(ops.name);
    ASSERT_EQ(y.size(), cap.outputs[i].size()) << ops.name;
    for (size_t j = 0; j < y.size(); ++j) {
      ASSERT_EQ(std::bit_cast<uint32_t>(y[j]), std::bit_cast<uint32_t>(qc::bf16_to_f32(cap.outputs[i][j])))
          << ops.name << " element " << j;
    }
  }

  // The operand file, read back, reproduces the model's outputs through the same arm...
  const std::string dir = temp_dir("capture");
  const std::string path = dir + "/ops.safetensors";
  qc::save_operands(path, cap.layers, {{"source", "test capture"}});
  const qc::OperandSet set = qc::load_operands(path);
  ASSERT_EQ(set.layers.size(), cap.layers.size());
  auto arm = qc::make_arm("cpu:vllm-cutlass");
  for (size_t i = 0; i < set.layers.size(); ++i) {
    EXPECT_EQ(set.layers[i].name, cap.layers[i].name);
    const qc::ArmOutput out = arm->run(set.layers[i]);
    EXPECT_EQ(out.y, cap.outputs[i]) << set.layers[i].name;
  }
  // ...and predict + verify run on it: every layer of stories260K is safe, and the power-of-two
  // probe holds between the two epilogues.
  const qc::PredictionSet pred = qc::predict(set.layers, path, set.sha256);
  for (const auto& lp : pred.layers) EXPECT_TRUE(lp.safe) << lp.name << " max|acc| " << lp.stats.max_abs_acc;
  auto arm_b = qc::make_arm("cpu:vllm-triton");
  const qc::VerifyResult vr = qc::verify_layers(*arm, *arm_b, set.layers, pred, qc::VerifyOptions{});
  for (const qc::CheckResult& c : vr.checks) fmt::print("[capture->verify] {} {}: {}\n", c.id, c.title, c.summary);
  fmt::print("[capture->verify] {} layers x {} rows; real-scale differences cutlass vs triton: {} of {}\n",
             set.layers.size(), rows, vr.total_real.bitwise_diff, vr.total_real.total);
  EXPECT_TRUE(vr.all_passed()) << qc::to_json(vr)["checks"].dump(1);
  std::filesystem::remove_all(dir);
}

}  // namespace
