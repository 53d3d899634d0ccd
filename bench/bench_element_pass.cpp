// Benchmark of verify's per-run element pass (`qc::element_pass`, src/checks/element_pass.cpp: SIMD
// lanes for the counts, the model outputs a few rows at a time) against the named baseline in the
// same run: its scalar reference (`qc::element_pass_reference`, the pass as it was before issue #14's
// host work: whole-tile epilogues, then one element at a time). Before timing, the two passes are
// compared field for field on the benchmarked run (a benchmark of wrong code is worthless); a
// mismatch aborts the run. Also the INT8 pass on the same shape (the goal of #14: an FP8 verify no
// slower than the INT8 one).
//
//   cmake --build build -j2 --target bench_element_pass
//   ./build/bench/bench_element_pass --benchmark_min_time=1
// Shape: M = 512, N = 6144 (qwen3-1.7b's gate_proj at verify's M = 512), one thread. FP8: the model
// accumulators d_A ~ N(0, 300²) fp32, d_B = d_A with 40 % of its elements moved up by 0 to 2^16 fp32
// ulps (so about 20 % of the bf16 outputs differ, as chain vs promote4 on synth's qwen3 layers), scales
// as vLLM's per-token and per-channel ones, each arm's outputs and exposed accumulator its model's (a
// passing run: nothing to list). INT8: exact int32 accumulators ~ U(-2^20, 2^20), `vllm-cutlass` vs
// `vllm-triton` with their own formulas' outputs. Counter `elements/s`: M·N / time.
#include "bench_main.hpp"

#if __has_include(<benchmark/benchmark.h>)
#include <benchmark/benchmark.h>

#include <nlohmann/json.hpp>

#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "checks/element_pass.hpp"
#include "qconform/epilogue.hpp"
#include "qconform/numerics.hpp"

namespace {

constexpr int64_t kM = 512, kN = 6144;

struct Run {
  qc::LayerOperands ops;
  std::vector<float> d[2];
  qc::ArmOutput out[2], int8_out[2];
  qc::ExactAccumulators exact, no_exact;
  qc::Fp8RunReference fp8;
  qc::ElementTally acc_tally;
  qc::CompareOptions compare;

  Run() {
    std::mt19937_64 rng(1);
    std::normal_distribution<float> nd(0.0f, 300.0f);
    qc::OperandStorage st;
    st.a_q.resize(kM * 8);
    st.w_q.resize(kN * 8);
    for (int64_t m = 0; m < kM; ++m) st.a_scale.push_back(0x1p-7f * (1.0f + static_cast<float>(rng() % 1000) / 1000.0f));
    for (int64_t n = 0; n < kN; ++n) st.w_scale.push_back(0x1p-9f * (1.0f + static_cast<float>(rng() % 1000) / 1000.0f));
    st.a_type = st.w_type = qc::ElementType::e4m3;
    ops = qc::make_operands("bench.gate_proj", kM, kN, 8, std::move(st), "bench_element_pass");
    const size_t size = static_cast<size_t>(kM * kN);
    d[0].resize(size), d[1].resize(size);
    for (size_t i = 0; i < size; ++i) {
      d[0][i] = nd(rng);
      d[1][i] = rng() % 10 < 4 ? qc::f32_from_bits(qc::f32_bits(d[0][i]) + static_cast<uint32_t>(rng() % 65536)) : d[0][i];
    }
    exact.i32.resize(size);
    for (int32_t& a : exact.i32) a = static_cast<int32_t>(rng() % (1u << 21)) - (1 << 20);
    const qc::Epilogue* int8_formula[2] = {&qc::epilogue("vllm-cutlass"), &qc::epilogue("vllm-triton")};
    for (int s = 0; s < 2; ++s) {
      out[s].y.resize(size);
      qc::apply_epilogue(qc::fp8_epilogue(), d[s].data(), ops.a_scale.data(), ops.w_scale.data(), nullptr, kM, kN,
                         out[s].y.data(), 1);
      int8_out[s].y.resize(size);
      qc::apply_epilogue(*int8_formula[s], exact.i32.data(), ops.a_scale.data(), ops.w_scale.data(), nullptr, kM, kN,
                         int8_out[s].y.data(), 1);
      int8_out[s].acc = exact.i32;
      fp8.model[s] = fp8.acc_model[s] = s ? "B" : "A";
      fp8.d[s] = fp8.arm_acc[s] = fp8.acc_d[s] = &d[s];
    }
    acc_tally = qc::fp8_accumulator_tally(fp8, ops, 1);
  }
  // FP8: `precomputed` as verify's second and third runs of a (layer, rows) (the accumulators' counts
  // handed over), else as its first.
  qc::ElementContext fp8_context(qc::ScaleMode mode, bool precomputed) {
    fp8.acc_tally = precomputed ? &acc_tally : nullptr;
    return qc::ElementContext{.ops = ops, .label = ops.name, .mode = mode, .safe = false, .exact = no_exact,
                              .out = {&out[0], &out[1]}, .formula = {&qc::fp8_epilogue(), &qc::fp8_epilogue()},
                              .compare = compare, .threads = 1, .fp8 = &fp8};
  }
  qc::ElementContext int8_context(qc::ScaleMode mode) {
    return qc::ElementContext{.ops = ops, .label = ops.name, .mode = mode, .safe = true, .exact = exact,
                              .out = {&int8_out[0], &int8_out[1]},
                              .formula = {&qc::epilogue("vllm-cutlass"), &qc::epilogue("vllm-triton")},
                              .compare = compare, .threads = 1};
  }
};
Run& run() {
  static Run r;
  return r;
}

std::string fingerprint(const qc::ElementPass& p) {
  const qc::ElementTally& t = p.tally;
  return nlohmann::json(p.cmp).dump() +
         nlohmann::json({t.acc_mismatch, t.formula_mismatch, t.safe_contradicted, t.predicted_diff,
                         t.predicted_vs_observed, t.pow2_excluded, t.pow2_violations, t.model_acc_diff, t.acc_first,
                         t.model_first, t.pow2_first})
             .dump();
}

void check_equal() {
  for (qc::ScaleMode mode : {qc::ScaleMode::real, qc::ScaleMode::pow2_layer}) {
    const std::string ref = fingerprint(qc::element_pass_reference(run().fp8_context(mode, false)));
    for (bool pre : {false, true}) {
      if (fingerprint(qc::element_pass(run().fp8_context(mode, pre))) != ref) {
        std::fprintf(stderr, "bench_element_pass: the fast FP8 pass differs from the reference: not timing\n");
        std::exit(1);
      }
    }
    if (fingerprint(qc::element_pass(run().int8_context(mode))) !=
        fingerprint(qc::element_pass_reference(run().int8_context(mode)))) {
      std::fprintf(stderr, "bench_element_pass: the fast INT8 pass differs from the reference: not timing\n");
      std::exit(1);
    }
  }
}

void count(benchmark::State& state) {
  state.counters["elements/s"] =
      benchmark::Counter(static_cast<double>(kM * kN), benchmark::Counter::kIsIterationInvariantRate);
}

void BM_Fp8Reference(benchmark::State& state, qc::ScaleMode mode) {
  const qc::ElementContext c = run().fp8_context(mode, false);
  for (auto _ : state) benchmark::DoNotOptimize(qc::element_pass_reference(c));
  count(state);
}

void BM_Fp8Fast(benchmark::State& state, qc::ScaleMode mode, bool precomputed) {
  const qc::ElementContext c = run().fp8_context(mode, precomputed);
  for (auto _ : state) benchmark::DoNotOptimize(qc::element_pass(c));
  count(state);
}

void BM_Int8(benchmark::State& state, qc::ScaleMode mode, bool fast) {
  const qc::ElementContext c = run().int8_context(mode);
  for (auto _ : state) benchmark::DoNotOptimize(fast ? qc::element_pass(c) : qc::element_pass_reference(c));
  count(state);
}

}  // namespace

int main(int argc, char** argv) {
  check_equal();
  for (const auto& [name, mode] : {std::pair{"real", qc::ScaleMode::real}, std::pair{"pow2-layer", qc::ScaleMode::pow2_layer}}) {
    const std::string n = name;
    benchmark::RegisterBenchmark(("fp8/reference/" + n).c_str(), BM_Fp8Reference, mode)->Unit(benchmark::kMillisecond)->UseRealTime();
    benchmark::RegisterBenchmark(("fp8/fast-first-run/" + n).c_str(), BM_Fp8Fast, mode, false)->Unit(benchmark::kMillisecond)->UseRealTime();
    benchmark::RegisterBenchmark(("fp8/fast/" + n).c_str(), BM_Fp8Fast, mode, true)->Unit(benchmark::kMillisecond)->UseRealTime();
    benchmark::RegisterBenchmark(("int8/reference/" + n).c_str(), BM_Int8, mode, false)->Unit(benchmark::kMillisecond)->UseRealTime();
    benchmark::RegisterBenchmark(("int8/fast/" + n).c_str(), BM_Int8, mode, true)->Unit(benchmark::kMillisecond)->UseRealTime();
  }
  return qc::bench::run_registered(argc, argv);
}
#else
QC_BENCH_SKIPPED_MAIN
#endif
