// Benchmark of the FP8 accumulation models' fast CPU evaluation (`qc::fp8_model_evaluate`,
// src/accum/fp8_model_kernels.cpp, decoding and packing included) against the named baseline in
// the same run: the scalar reference (`qc::fp8_model_reference`, the header text
// `accum_model::evaluate` in 128-bit integers, one thread). Before timing, each model's fast result
// is compared with the reference bit for bit on the benchmarked operands (a benchmark of wrong code
// is worthless); a mismatch aborts the run.
//
//   cmake -S . -B build-bench -DCMAKE_BUILD_TYPE=Release -DQCONFORM_BUILD_BENCH=ON ...
//   cmake --build build-bench -j2 --target bench_fp8_model
//   ./build-bench/bench/bench_fp8_model --benchmark_min_time=1s
// Operands: e4m3 codes of N(0, 2²) (the H200 measurement's operands), M = 16, N = 256, K = 4096,
// seed 1. Counter `outputs/s`: M·N / time. The ratio fast/reference per model is docs/performance.md's figure.
#include "bench_main.hpp"

#if __has_include(<benchmark/benchmark.h>)
#include <benchmark/benchmark.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "accum/fp8_model.hpp"
#include "qconform/numerics.hpp"

namespace {

constexpr int64_t kM = 16, kN = 256, kK = 4096;

struct Operands {
  std::vector<uint8_t> a, w;
  Operands() {
    std::mt19937_64 rng(1);
    std::normal_distribution<float> nd(0.0f, 2.0f);
    a.resize(kM * kK);
    w.resize(kN * kK);
    for (auto& c : a) c = qc::f32_to_e4m3fn(nd(rng), true);
    for (auto& c : w) c = qc::f32_to_e4m3fn(nd(rng), true);
  }
  qc::Fp8Gemm gemm() const { return {a.data(), qc::Fp8Format::e4m3, w.data(), qc::Fp8Format::e4m3, {kM, kN, kK}}; }
};
const Operands& ops() {
  static const Operands o;
  return o;
}

const char* const kModels[] = {"hopper-fp8-chain", "hopper-fp8-promote4", "sequential", "exact"};

void check_equal(const char* model) {
  const qc::Fp8AccumModel m = qc::fp8_accumulation_model(model).model;
  std::vector<float> ref(kM * kN), fast(kM * kN);
  qc::fp8_model_reference(m, ops().gemm(), ref.data());
  qc::fp8_model_evaluate(m, ops().gemm(), fast.data());
  if (std::memcmp(ref.data(), fast.data(), ref.size() * sizeof(float)) != 0) {
    std::fprintf(stderr, "bench_fp8_model: fast evaluation of %s differs from the reference: not timing\n", model);
    std::exit(1);
  }
}

void BM_Reference(benchmark::State& state, const char* model) {
  const qc::Fp8AccumModel m = qc::fp8_accumulation_model(model).model;
  std::vector<float> d(kM * kN);
  for (auto _ : state) {
    qc::fp8_model_reference(m, ops().gemm(), d.data());
    benchmark::DoNotOptimize(d.data());
  }
  state.counters["outputs/s"] = benchmark::Counter(static_cast<double>(kM * kN), benchmark::Counter::kIsIterationInvariantRate);
}

void BM_Fast(benchmark::State& state, const char* model) {
  const qc::Fp8AccumModel m = qc::fp8_accumulation_model(model).model;
  std::vector<float> d(kM * kN);
  for (auto _ : state) {
    qc::fp8_model_evaluate(m, ops().gemm(), d.data(), static_cast<int>(state.range(0)));
    benchmark::DoNotOptimize(d.data());
  }
  state.SetLabel(qc::fast_path_name(qc::fp8_fast_path(m, ops().gemm())) + std::string(" ") + qc::fp8_model_target());
  state.counters["outputs/s"] = benchmark::Counter(static_cast<double>(kM * kN), benchmark::Counter::kIsIterationInvariantRate);
}

}  // namespace

int main(int argc, char** argv) {
  for (const char* m : kModels) check_equal(m);
  for (const char* m : kModels) {
    benchmark::RegisterBenchmark((std::string("reference/") + m).c_str(), BM_Reference, m)->Unit(benchmark::kMillisecond)->UseRealTime();
    benchmark::RegisterBenchmark((std::string("fast/") + m).c_str(), BM_Fast, m)
        ->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();
  }
  return qc::bench::run_registered(argc, argv);
}
#else
QC_BENCH_SKIPPED_MAIN
#endif
