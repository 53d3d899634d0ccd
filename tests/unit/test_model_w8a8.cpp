// Mode w8a8: one quantized linear layer against an emulation written here from the formulas of
// `../shared/reference/production-epilogues.md` (no qconform quantizer, accumulator or epilogue
// code), thread-count independence of the fp32 matmul, and on the real stories260K:
// vllm-cutlass vs vllm-triton (measured and printed), the power-of-two probe (asserted bit for
// bit), and capture -> predict -> verify agreeing with what the model run saw.
// Mode w8a8-fp8 (`ModelW8a8Fp8.*`): the operands the arm receives are the FP8 quantizers applied by
// hand, bit for bit; generation is deterministic and the two Hopper models give different logits;
// every refusal (library and CLI, exit 2, before a model is loaded); capture -> verify with two FP8 arms.
//
// Build and run: cmake --build build --target qconform qconform_unit_tests &&
//   ./build/tests/qconform_unit_tests --gtest_filter='ModelW8a8*'
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>

#include "qconform/arm.hpp"
#include "qconform/error.hpp"
#include "checks/verify.hpp"
#include "model/model.hpp"
#include "core/numerics_checked.hpp"
#include "core/numerics_ref.hpp"
#include "qconform/numerics.hpp"
#include "core/operands_io.hpp"
#include "model/tokenizer.hpp"
#include "epilogue/quantize.hpp"
#include "input_error.hpp"
#include "temp_dir.hpp"

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

// ---- mode w8a8-fp8 ----

qc::W8a8Options fp8_options(const std::string& arm, qc::Fp8Quantization f = {}) {
  qc::W8a8Options o;
  o.arm = arm;
  o.fp8 = f;
  return o;
}

// One layer through `W8a8Linear` in FP8 mode for each quantization choice: what the arm received
// (seen by the observer) is `quantize_weights_fp8` and `quantize_activations_fp8` applied here by
// hand, codes and scales bit for bit (pow2: the scales then rounded); the arm got an FP8 layer and
// the output is that arm run on the hand-made layer.
TEST(ModelW8a8Fp8, OperandsAreTheFp8QuantizersAppliedByHand) {
  std::mt19937 rng(21);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const int64_t M = 6, N = 40, K = 160;  // K > 128: promote4 promotes inside the row
  qc::LinearLayer layer;
  layer.name = "layers.0.mlp.down_proj";
  layer.n_out = N;
  layer.k_in = K;
  for (int64_t i = 0; i < N * K; ++i) layer.weight.push_back(qc::bf16_to_f32(qc::f32_to_bf16(0.05f * nd(rng))));
  std::vector<float> x(M * K);
  for (float& v : x) v = nd(rng);
  x[5] = 60.0f;  // an outlier channel
  using E = qc::ElementType;
  const std::vector<qc::Fp8Quantization> choices = {
      {E::e4m3, E::e4m3, qc::Fp8ActScaling::per_token, qc::WeightScaling::per_channel},
      {E::e5m2, E::e4m3, qc::Fp8ActScaling::per_tensor, qc::WeightScaling::per_tensor},
      {E::e4m3, E::e5m2, qc::Fp8ActScaling::per_token, qc::WeightScaling::per_tensor},
      {E::e5m2, E::e5m2, qc::Fp8ActScaling::per_tensor, qc::WeightScaling::per_channel}};
  for (const qc::Fp8Quantization& f : choices) {
    for (const qc::WeightScaleDtype dtype : {qc::WeightScaleDtype::f32, qc::WeightScaleDtype::bf16}) {
      for (const bool pow2 : {false, true}) {
        const std::string id = fmt::format("element={} act={} weight={} dtype={} pow2={}",
                                           qc::element_types_spec(f.act, f.weight), qc::to_string(f.act_scaling),
                                           qc::to_string(f.weight_scaling),
                                           dtype == qc::WeightScaleDtype::bf16 ? "bf16" : "f32", pow2);
        SCOPED_TRACE(id);
        qc::W8a8Options o = fp8_options("cpu:fp8-hopper-fp8-promote4", f);
        o.pow2 = pow2;
        o.weight_dtype = dtype;
        qc::W8a8Linear lin(o);
        std::vector<qc::LayerOperands> seen;
        lin.set_observer([&](const qc::LayerOperands& ops, const qc::ArmOutput&) { seen.push_back(ops); });
        std::vector<float> y(M * N);
        lin(layer, x.data(), M, y.data());
        ASSERT_EQ(seen.size(), 1u);
        const qc::LayerOperands& ops = seen[0];

        // By hand: the quantizers on the layer's fp32 weight and on the input rows.
        qc::OperandStorage h;
        h.a_type = f.act;
        h.w_type = f.weight;
        h.a_q.resize(M * K);
        h.a_scale.resize(M);
        h.w_q.resize(N * K);
        h.w_scale.resize(N);
        qc::quantize_activations_fp8(f.act, f.act_scaling, x.data(), M, K, reinterpret_cast<uint8_t*>(h.a_q.data()),
                                     h.a_scale.data());
        qc::quantize_weights_fp8(f.weight, f.weight_scaling, layer.weight.data(), N, K,
                                 reinterpret_cast<uint8_t*>(h.w_q.data()), h.w_scale.data(), dtype);
        if (pow2) {
          for (float& v : h.w_scale) v = qc::pow2_nearest_log2(v);
        }
        EXPECT_TRUE(ops.fp8());
        EXPECT_EQ(ops.a_type, f.act);
        EXPECT_EQ(ops.w_type, f.weight);
        EXPECT_FALSE(ops.has_bias());
        auto first_diff = [](auto a, const auto& b) {
          for (size_t i = 0; i < a.size(); ++i) {
            if (std::memcmp(&a[i], &b[i], sizeof(a[i])) != 0) return static_cast<int64_t>(i);
          }
          return int64_t{-1};
        };
        ASSERT_EQ(ops.a_q.size(), h.a_q.size());
        ASSERT_EQ(ops.w_q.size(), h.w_q.size());
        const int64_t da = first_diff(ops.a_q, h.a_q), dw = first_diff(ops.w_q, h.w_q);
        EXPECT_EQ(da, -1) << "a_q[" << da / K << "," << da % K << "]: 0x" << std::hex
                          << int(uint8_t(ops.a_q[std::max<int64_t>(da, 0)])) << " vs by hand 0x"
                          << int(uint8_t(h.a_q[std::max<int64_t>(da, 0)]));
        EXPECT_EQ(dw, -1) << "w_q[" << dw / K << "," << dw % K << "]: 0x" << std::hex
                          << int(uint8_t(ops.w_q[std::max<int64_t>(dw, 0)])) << " vs by hand 0x"
                          << int(uint8_t(h.w_q[std::max<int64_t>(dw, 0)]));
        EXPECT_EQ(first_diff(ops.a_scale, h.a_scale), -1);
        EXPECT_EQ(first_diff(ops.w_scale, h.w_scale), -1);
        if (f.weight_scaling == qc::WeightScaling::per_tensor) {
          for (float v : ops.w_scale) ASSERT_EQ(v, ops.w_scale[0]) << "per-tensor scales repeated per channel";
        }
        // The arm on the hand-made FP8 layer gives the model run's outputs, and says it ran its model.
        auto arm = qc::make_arm("cpu:fp8-hopper-fp8-promote4");
        const qc::ArmOutput ref = arm->run(qc::make_operands(layer.name, M, N, K, std::move(h), "by hand"));
        int64_t bad = 0;
        for (int64_t i = 0; i < M * N; ++i) {
          if (qc::f32_to_bf16(y[i]) != ref.y[i] && ++bad <= 3) {
            ADD_FAILURE() << "(" << i / N << "," << i % N << "): model run 0x" << std::hex << qc::f32_to_bf16(y[i])
                          << ", arm on the hand-made layer 0x" << ref.y[i];
          }
        }
        EXPECT_EQ(bad, 0);
        EXPECT_EQ(lin.arm_info().accumulation_model, "hopper-fp8-promote4");
        EXPECT_NE(ops.source.find("w8a8-fp8"), std::string::npos) << ops.source;
      }
    }
  }
}

// The first differing logit of two runs, printed; the count of differing logits returned.
int64_t report_logit_diff(const std::vector<float>& a, const std::vector<float>& b, int64_t vocab, const std::string& what) {
  int64_t n = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    if (std::bit_cast<uint32_t>(a[i]) == std::bit_cast<uint32_t>(b[i])) continue;
    if (n++ == 0) {
      fmt::print("[{}] first differing logit at (position {}, token {}): {} (0x{:08x}) vs {} (0x{:08x})\n", what,
                 static_cast<int64_t>(i) / vocab, static_cast<int64_t>(i) % vocab, a[i], std::bit_cast<uint32_t>(a[i]),
                 b[i], std::bit_cast<uint32_t>(b[i]));
    }
  }
  return n + static_cast<int64_t>(std::max(a.size(), b.size()) - std::min(a.size(), b.size()));
}

// A cpu:fp8 arm's run is a function of its inputs: the same generation twice is bit-identical, and
// per-token scales keep rows independent, so prefill and decode agree bit for bit. The two Hopper
// models differ where K > 128 (promote4 adds each 128-product chain into fp32; chain keeps truncating):
// tiny's down_proj has K = 176, and some logit must differ.
TEST(ModelW8a8Fp8, GenerationIsDeterministicAndChainDiffersFromPromote4) {
  const qc::Model m = qc::synth_model(qc::synth_config("tiny"), 7);
  const std::vector<int32_t> prompt = {1, 17, 200, 3, 99, 45, 7, 250};
  auto run = [&](const std::string& arm, std::vector<float>* replay_logits) {
    qc::Decoder dec(m, qc::make_linear_fn(qc::LinearMode::w8a8_fp8, fp8_options(arm)));
    qc::GenerateResult g = qc::generate_greedy(dec, prompt, 12, 0);
    if (replay_logits) qc::replay(dec, g.tokens, 0, replay_logits);
    const qc::PrefillDecodeComparison c = qc::compare_prefill_decode(dec, g);
    EXPECT_EQ(c.bitwise_different, 0) << arm << ": prefill and decode differ (per-token FP8 rows are independent)";
    return g;
  };
  std::vector<float> replay_a, replay_b, replay_c;
  const qc::GenerateResult a = run("cpu:fp8-hopper-fp8-promote4", &replay_a);
  const qc::GenerateResult b = run("cpu:fp8-hopper-fp8-promote4", &replay_b);
  EXPECT_EQ(a.tokens, b.tokens);
  EXPECT_EQ(report_logit_diff(a.logits, b.logits, m.config.vocab, "promote4 twice, decode"), 0);
  EXPECT_EQ(report_logit_diff(replay_a, replay_b, m.config.vocab, "promote4 twice, replay"), 0);
  const qc::GenerateResult c = run("cpu:fp8-hopper-fp8-chain", &replay_c);
  const int64_t differ = report_logit_diff(replay_a, replay_c, m.config.vocab, "promote4 vs chain, replay");
  fmt::print("[w8a8-fp8 tiny] promote4 vs chain: {} of {} replay logits differ bitwise; sequences {}\n", differ,
             replay_a.size(), a.tokens == c.tokens ? "identical" : "differ");
  EXPECT_GT(differ, 0) << "the two accumulation models gave bit-identical logits on a model with K = 176";
  // Against the unquantized reference, FP8 stays close: the same model, not noise.
  qc::Decoder ref(m);
  std::vector<float> ref_logits;
  qc::replay(ref, a.tokens, 0, &ref_logits);
  double max_diff = 0, max_ref = 0;
  for (size_t i = 0; i < ref_logits.size(); ++i) {
    ASSERT_TRUE(std::isfinite(replay_a[i])) << "logit " << i;
    max_diff = std::max(max_diff, std::fabs(double(replay_a[i]) - ref_logits[i]));
    max_ref = std::max(max_ref, std::fabs(double(ref_logits[i])));
  }
  fmt::print("[w8a8-fp8 tiny] max |logit(fp8) - logit(fp32)| = {:.4g} at logit scale {:.4g}\n", max_diff, max_ref);
  EXPECT_LT(max_diff, 0.25 * max_ref);
}

TEST(ModelW8a8Fp8, ModeSpellingAndDefaults) {
  EXPECT_EQ(qc::parse_linear_mode("w8a8-fp8"), qc::LinearMode::w8a8_fp8);
  EXPECT_EQ(qc::to_string(qc::LinearMode::w8a8_fp8), "w8a8-fp8");
  EXPECT_EQ(qc::default_arm(qc::LinearMode::w8a8_fp8), "cpu:fp8-hopper-fp8-promote4");
  EXPECT_EQ(qc::default_arm(qc::LinearMode::w8a8), "cpu:vllm-cutlass");
  EXPECT_EQ(qc::W8a8Linear(fp8_options("")).options().arm, "cpu:fp8-hopper-fp8-promote4");
  EXPECT_EQ(qc::W8a8Linear(qc::W8a8Options{}).options().arm, "cpu:vllm-cutlass");
  // The spellings `qconform synth` uses, shared.
  EXPECT_EQ(qc::parse_fp8_act_scaling("per-tensor"), qc::Fp8ActScaling::per_tensor);
  EXPECT_EQ(qc::parse_weight_scaling("per-channel"), qc::WeightScaling::per_channel);
  EXPECT_EQ(qc::element_types_spec(qc::ElementType::e5m2, qc::ElementType::e4m3), "e5m2-e4m3");
  EXPECT_EQ(qc::element_types_spec(qc::ElementType::e4m3, qc::ElementType::e4m3), "e4m3");
  for (const char* spec : {"int8", "e4m3", "e5m2", "e5m2-e4m3", "e4m3-e5m2"}) {
    const auto [a, w] = qc::parse_element_types(spec);
    EXPECT_EQ(qc::element_types_spec(a, w), spec);
  }
  EXPECT_NE(qc::test::input_error([] { qc::parse_weight_scaling("per-group"); }).find("--weight-scale `per-group`"),
            std::string::npos);
}

// Every refusal of the library: an input error naming the option and what was expected.
TEST(ModelW8a8Fp8, RefusalsNameTheOptionAndWhatWasExpected) {
  auto expect = [](const std::function<void()>& fn, std::vector<std::string> needles) {
    const std::string msg = qc::test::input_error(fn);
    for (const std::string& n : needles) EXPECT_NE(msg.find(n), std::string::npos) << "`" << n << "` not in: " << msg;
  };
  expect([] { qc::W8a8Linear l(fp8_options("cpu:vllm-cutlass")); }, {"--arm `cpu:vllm-cutlass`", "w8a8-fp8", "expected an FP8 arm"});
  expect([] {
    qc::W8a8Options o;
    o.arm = "cpu:fp8-hopper-fp8-chain";
    qc::W8a8Linear l(o);
  }, {"--arm `cpu:fp8-hopper-fp8-chain`", "expected an INT8 arm", "--mode w8a8-fp8"});
  expect([] {
    qc::W8a8Options o = fp8_options("");
    o.act_quantizer = "sglang";
    qc::W8a8Linear l(o);
  }, {"--act-quantizer `sglang`", "expected vllm"});
  expect([] {
    qc::W8a8Linear l(fp8_options("", {qc::ElementType::int8, qc::ElementType::int8}));
  }, {"--element `int8`", "expected FP8 element types"});
  expect([] { qc::make_linear_fn(qc::LinearMode::w8a8, fp8_options("")); }, {"mode w8a8", "--mode w8a8-fp8"});
  expect([] { qc::make_linear_fn(qc::LinearMode::fp32, fp8_options("")); }, {"mode fp32"});

  // A model with a q/k/v bias: the FP8 arms take none.
  const qc::Model qwen2 = qc::synth_model(qc::synth_config("tiny-qwen2"), 3);
  expect([&] {
    qc::Decoder dec(qwen2, qc::W8a8Linear(fp8_options("")));
    std::vector<float> logits;
    const std::vector<int32_t> t = {1, 5};
    dec.forward(t, qc::LogitRows::last, logits);
  }, {"layers.0.self_attn.q_proj", "expected no q/k/v bias"});

  // Checkpoint layers quantized for the other mode, or to another FP8 scheme.
  const qc::Model tiny = qc::synth_model(qc::synth_config("tiny"), 3);
  const qc::Model fp8_tensor = qc::fp8_quantized(tiny, qc::WeightScaling::per_tensor);
  qc::LinearLayer int8_layer = tiny.layers[0].q;
  int8_layer.weight_q.assign(int8_layer.weight.size(), 1);
  int8_layer.weight_scale.assign(int8_layer.n_out, 0.01f);
  std::vector<float> x(tiny.config.hidden, 0.5f), y(tiny.config.hidden);
  expect([&] { qc::W8a8Linear(fp8_options(""))(int8_layer, x.data(), 1, y.data()); },
         {"layers.0.self_attn.q_proj", "expected an unquantized or float-quantized (FP8) checkpoint",
          "int-quantized", "--mode w8a8"});
  expect([&] { qc::W8a8Linear(qc::W8a8Options{})(fp8_tensor.layers[0].q, x.data(), 1, y.data()); },
         {"mode w8a8 quantizes to INT8", "float-quantized", "--mode w8a8-fp8"});
  expect([&] { qc::W8a8Linear(fp8_options(""))(fp8_tensor.layers[0].q, x.data(), 1, y.data()); },
         {"--weight-scale `per-channel`", "expected the checkpoint's weight scaling per-tensor"});
  expect([&] {
    qc::W8a8Linear(fp8_options("", {qc::ElementType::e4m3, qc::ElementType::e5m2, qc::Fp8ActScaling::per_token,
                                    qc::WeightScaling::per_tensor}))(fp8_tensor.layers[0].q, x.data(), 1, y.data());
  }, {"--element `e4m3-e5m2`", "expected weights of the checkpoint's element type e4m3, found e5m2"});
  // The checkpoint's own scheme runs, and its codes reach the arm unchanged.
  qc::W8a8Linear ok(fp8_options("", {qc::ElementType::e5m2, qc::ElementType::e4m3, qc::Fp8ActScaling::per_token,
                                     qc::WeightScaling::per_tensor}));
  ok.set_observer([&](const qc::LayerOperands& ops, const qc::ArmOutput&) {
    EXPECT_EQ(0, std::memcmp(ops.w_q.data(), fp8_tensor.layers[0].q.weight_q.data(), ops.w_q.size()));
    EXPECT_EQ(std::vector<float>(ops.w_scale.begin(), ops.w_scale.end()), fp8_tensor.layers[0].q.weight_scale);
  });
  ok(fp8_tensor.layers[0].q, x.data(), 1, y.data());
}

struct CliRun {
  int rc = -1;
  std::string out;
};
CliRun run_qconform(const qc::test::TempDir& dir, const std::string& args) {
  const std::string o = dir.file("cli.out");
  const std::string qc = (std::filesystem::path(QC_BINARY_DIR) / "qconform").string();
  const int st = std::system(fmt::format("cd '{}' && '{}' {} >'{}' 2>&1", dir.file(""), qc, args, o).c_str());
  std::ifstream f(o);
  CliRun r;
  r.out.assign(std::istreambuf_iterator<char>(f), {});
  r.rc = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

#define SKIP_WITHOUT_CLI()                                                                                 \
  do {                                                                                                     \
    if (!std::filesystem::exists(std::filesystem::path(QC_BINARY_DIR) / "qconform"))                       \
      GTEST_SKIP() << "SKIPPED: qconform is not built (cmake --build build --target qconform)";              \
  } while (0)

// Through the CLI: exit 2 with the option named, for every verb; the bias and arm refusals come
// from the preflight, before any weight is read (the model directories below hold a config.json and
// no weights at all, which loading would report instead).
TEST(ModelW8a8Fp8, CliRefusalsExitTwoBeforeTheModelLoads) {
  SKIP_WITHOUT_CLI();
  qc::test::TempDir dir("w8a8-fp8-cli");
  qc::save_model(qc::synth_model(qc::synth_config("tiny-qwen2"), 1), dir.file("qwen2"), qc::ModelFormat::hf);
  qc::save_model(qc::synth_model(qc::synth_config("tiny"), 1), dir.file("tiny"), qc::ModelFormat::hf,
                 {{"tokens.jsonl", "{\"prompt\": 0, \"tokens\": [1, 5, 9]}\n"}});
  qc::save_model(qc::synth_model(qc::synth_config("tiny"), 1), dir.file("int8"), qc::ModelFormat::compressed_tensors);
  for (const char* m : {"qwen2", "tiny", "int8"}) {
    std::filesystem::create_directories(dir.file(std::string("cfg-") + m));
    std::filesystem::copy_file(dir.file(std::string(m) + "/config.json"), dir.file(std::string("cfg-") + m + "/config.json"));
  }
  struct Case {
    std::string args;
    std::vector<std::string> needles;
  };
  const std::string gen = "generate --max-new 2 --prompts tiny/tokens.jsonl";
  const std::string rep = "replay --tokens tiny/tokens.jsonl --out r.jsonl";
  const std::string cap = "capture --prompts tiny/tokens.jsonl --out c.safetensors";
  const std::vector<Case> cases = {
      {gen + " --model cfg-qwen2 --mode w8a8-fp8", {"expected no q/k/v bias"}},
      {rep + " --model cfg-qwen2 --mode w8a8-fp8", {"expected no q/k/v bias"}},
      {cap + " --model cfg-qwen2 --mode w8a8-fp8", {"expected no q/k/v bias"}},
      {gen + " --model cfg-int8 --mode w8a8-fp8", {"int-quantized", "--mode w8a8"}},
      {gen + " --model cfg-tiny --mode w8a8-fp8 --arm cpu:vllm-cutlass", {"--arm `cpu:vllm-cutlass`", "expected an FP8 arm"}},
      {rep + " --model cfg-tiny --mode w8a8 --arm cpu:fp8-hopper-fp8-chain", {"expected an INT8 arm", "--mode w8a8-fp8"}},
      {cap + " --model cfg-tiny --arm cpu:fp8-hopper-fp8-promote4", {"expected an INT8 arm", "--mode w8a8-fp8"}},
      {cap + " --model cfg-tiny --mode w8a8-fp8 --act-quantizer reciprocal", {"--act-quantizer `reciprocal`", "expected vllm"}},
      {gen + " --model cfg-tiny --mode w8a8 --element e4m3", {"--element `e4m3`", "--mode w8a8-fp8"}},
      {gen + " --model cfg-tiny --weight-scale per-tensor", {"--weight-scale `per-tensor`", "mode fp32"}},
      {cap + " --model cfg-tiny --act-scale per-tensor", {"--act-scale `per-tensor`", "mode w8a8"}},
      {gen + " --model cfg-tiny --mode w8a8-fp8 --element e4m4", {"--element `e4m4`", "expected int8, e4m3"}},
      {rep + " --model cfg-tiny --mode w8a8-fp8 --act-scale per-row", {"--act-scale `per-row`"}},
      {cap + " --model cfg-tiny --mode fp32", {"--mode fp32", "expected w8a8 or w8a8-fp8"}},
      {gen + " --model cfg-tiny --mode fp8", {"--mode", "w8a8-fp8"}},
  };
  for (const Case& c : cases) {
    const CliRun r = run_qconform(dir, c.args);
    EXPECT_EQ(r.rc, 2) << c.args << "\n" << r.out;
    for (const std::string& n : c.needles) EXPECT_NE(r.out.find(n), std::string::npos) << c.args << ": `" << n << "` not in\n" << r.out;
    EXPECT_EQ(r.out.find("no such tensor"), std::string::npos) << c.args << ": the weights were read first\n" << r.out;
  }
  EXPECT_FALSE(std::filesystem::exists(dir.file("r.jsonl")));
  EXPECT_FALSE(std::filesystem::exists(dir.file("c.safetensors")));
  // `--help` of every model verb describes the FP8 options.
  for (const char* verb : {"generate", "replay", "capture"}) {
    const CliRun r = run_qconform(dir, fmt::format("{} --help", verb));
    for (const char* opt : {"w8a8-fp8", "--element", "--act-scale", "--weight-scale", "cpu:fp8-hopper-fp8-promote4"}) {
      EXPECT_NE(r.out.find(opt), std::string::npos) << verb << " --help lacks " << opt;
    }
  }
}

// capture in mode w8a8-fp8 writes FP8 operand files: the file holds what the arm received (the arm
// re-run on it reproduces the model run's outputs), and verify with two FP8 arms reads it (library and CLI).
TEST(ModelW8a8Fp8, CaptureWritesFp8OperandsThatVerifyReads) {
  const qc::Model m = qc::synth_model(qc::synth_config("tiny"), 11);
  const std::vector<std::vector<int32_t>> prompts = {{1, 17, 200, 3, 99}, {1, 8, 130, 61, 7, 45, 250}};
  qc::W8a8Options o = fp8_options("", {qc::ElementType::e5m2, qc::ElementType::e4m3, qc::Fp8ActScaling::per_token,
                                       qc::WeightScaling::per_channel});
  const qc::CaptureResult cap = qc::capture_operands(m, o, prompts);
  ASSERT_EQ(cap.layers.size(), m.linear_layers().size());
  EXPECT_EQ(cap.record.arm, "cpu:fp8-hopper-fp8-promote4");
  qc::test::TempDir dir("w8a8-fp8-capture");
  const std::string path = dir.file("ops.safetensors");
  qc::save_operands(path, cap.layers, {{"source", "test fp8 capture"}});
  const qc::OperandSet set = qc::load_operands(path);
  ASSERT_EQ(set.layers.size(), cap.layers.size());
  auto arm = qc::make_arm("cpu:fp8-hopper-fp8-promote4");
  for (size_t i = 0; i < set.layers.size(); ++i) {
    const qc::LayerOperands& l = set.layers[i];
    EXPECT_EQ(l.a_type, qc::ElementType::e5m2) << l.name;
    EXPECT_EQ(l.w_type, qc::ElementType::e4m3) << l.name;
    EXPECT_EQ(l.m, 12) << l.name;
    EXPECT_EQ(arm->run(l).y, cap.outputs[i]) << l.name;
  }
  auto chain = qc::make_arm("cpu:fp8-hopper-fp8-chain");
  qc::VerifyOptions vo;
  vo.reference = qc::VerifyReference::cpu;
  const qc::VerifyResult vr = qc::verify_layers(*chain, *arm, set.layers, qc::predict(set.layers, path, set.sha256), vo);
  for (const qc::CheckResult& c : vr.checks) fmt::print("[fp8 capture->verify] {} {}: {}\n", c.id, c.title, c.summary);
  EXPECT_TRUE(vr.all_passed()) << qc::to_json(vr)["checks"].dump(1);

  if (!std::filesystem::exists(std::filesystem::path(QC_BINARY_DIR) / "qconform")) {
    GTEST_SKIP() << "SKIPPED (CLI part): qconform is not built";
  }
  qc::save_model(m, dir.file("model"), qc::ModelFormat::compressed_tensors_fp8,
                 {{"tokens.jsonl", "{\"prompt\": 0, \"tokens\": [1, 17, 200, 3, 99]}\n"}});
  CliRun r = run_qconform(dir, "capture --model model --prompts model/tokens.jsonl --mode w8a8-fp8 --out cli.safetensors");
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("element e4m3, act scale per-token, weight scale per-channel"), std::string::npos) << r.out;
  const qc::OperandSet cli = qc::load_operands(dir.file("cli.safetensors"));
  EXPECT_EQ(cli.metadata.at("mode"), "w8a8-fp8");
  EXPECT_EQ(cli.metadata.at("element"), "e4m3");
  EXPECT_EQ(cli.layers[0].a_type, qc::ElementType::e4m3);
  r = run_qconform(dir, "verify cli.safetensors --arms cpu:fp8-hopper-fp8-chain,cpu:fp8-hopper-fp8-promote4 --reference cpu");
  EXPECT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("FP8 verdict: every arm on its declared model"), std::string::npos) << r.out;
}

// The run headers and manifests record the FP8 choice: C0's join sees two runs that differ only in
// quantization as differing, and an FP8 run and an INT8 run as differing in mode.
TEST(ModelW8a8Fp8, HeadersAndManifestsRecordTheQuantization) {
  SKIP_WITHOUT_CLI();
  qc::test::TempDir dir("w8a8-fp8-manifest");
  qc::save_model(qc::synth_model(qc::synth_config("tiny"), 1), dir.file("m"), qc::ModelFormat::hf,
                 {{"tokens.jsonl", "{\"prompt\": 0, \"tokens\": [1, 5, 9, 33]}\n"}});
  const std::string base = "replay --model m --tokens m/tokens.jsonl --mode w8a8-fp8";
  ASSERT_EQ(run_qconform(dir, base + " --out a.jsonl").rc, 0);
  ASSERT_EQ(run_qconform(dir, base + " --act-scale per-tensor --out b.jsonl").rc, 0);
  std::ifstream fa(dir.file("a.jsonl"));
  std::string line;
  std::getline(fa, line);
  const nlohmann::json h = nlohmann::json::parse(line);
  EXPECT_EQ(h["linear_mode"], "w8a8-fp8");
  EXPECT_EQ(h["arm"], "cpu:fp8-hopper-fp8-promote4");
  EXPECT_EQ(h["element"], "e4m3");
  EXPECT_EQ(h["act_scale"], "per-token");
  EXPECT_EQ(h["weight_scale"], "per-channel");
  EXPECT_EQ(h["weight_scales"], "quantized at load (absmax/448)");
  // Same arm, other activation scaling: the join reports a difference outside any treatment.
  CliRun r = run_qconform(dir, "join a.jsonl.manifest.json b.jsonl.manifest.json");
  EXPECT_EQ(r.rc, 1) << r.out;
  EXPECT_NE(r.out.find("act_scale"), std::string::npos) << r.out;
  r = run_qconform(dir, "join a.jsonl.manifest.json b.jsonl.manifest.json --treatment config.header.act_scale");
  EXPECT_EQ(r.rc, 0) << r.out;
}

}  // namespace
