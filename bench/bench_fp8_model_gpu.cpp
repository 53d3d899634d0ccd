// GPU timing of the FP8 accumulation models' evaluation (`qc::fp8_model_evaluate_gpu`,
// src/arms/cuda/kernels/fp8_accum_model.cu) against, in the same run and on the same shape:
// - the fp64 kernel (`Fp8GpuKernel::fp64`: the per-output fp64 evaluation, the fastest before
//   session 6), the reference kernel (`Fp8GpuKernel::reference`: accumulation.hpp's int128 text, one
//   thread per output, the only GPU evaluation before session 5), and
// - the INT8 exact accumulation that verify's INT8 reference side runs (`qc::exact_accumulate_gpu`),
//   the bar of issue #14: an FP8 verify should take no longer than an INT8 one.
// Every timed call includes the host->device copies, the kernels and the copy back (as verify
// calls them). Before timing, the fast kernel's output is compared with the CPU evaluation bit
// for bit for every timed model; a mismatch aborts the run.
//
//   cmake -S . -B build-cuda -DCMAKE_BUILD_TYPE=Release -DQCONFORM_WITH_CUDA=ON -DQCONFORM_BUILD_BENCH=ON ...
//   cmake --build build-cuda -j --target bench_fp8_model_gpu
//   ./build-cuda/bench/bench_fp8_model_gpu [--benchmark_filter=...]
// Shape: M = 256 tokens, N = 4096, K = 4096 (a 1.7B-class projection), e4m3 codes of N(0, 2²),
// seed 1; QC_BENCH_FP8_GPU_SHAPE="M,N,K" overrides it. Without CUDA or a device: prints SKIPPED.
#include "bench_main.hpp"

#if __has_include(<benchmark/benchmark.h>)
#include <benchmark/benchmark.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "accum/fp8_model.hpp"
#include "arms/cuda/cuda.hpp"
#include "qconform/numerics.hpp"

namespace {

qc::AccumShape shape() {
  static const qc::AccumShape s = [] {
    qc::AccumShape r{256, 4096, 4096};
    if (const char* e = std::getenv("QC_BENCH_FP8_GPU_SHAPE")) {
      long long m = 0, n = 0, k = 0;
      if (std::sscanf(e, "%lld,%lld,%lld", &m, &n, &k) != 3 || m < 1 || n < 1 || k < 1) {
        std::fprintf(stderr, "bench_fp8_model_gpu: QC_BENCH_FP8_GPU_SHAPE: expected \"M,N,K\" (positive), found \"%s\"\n", e);
        std::exit(2);
      }
      r = {m, n, k};
    }
    return r;
  }();
  return s;
}

struct Operands {
  std::vector<uint8_t> a, w;
  std::vector<int8_t> a8, w8;
  Operands() {
    const qc::AccumShape s = shape();
    std::mt19937_64 rng(1);
    std::normal_distribution<float> nd(0.0f, 2.0f);
    a.resize(static_cast<size_t>(s.m * s.k));
    w.resize(static_cast<size_t>(s.n * s.k));
    for (auto& c : a) c = qc::f32_to_e4m3fn(nd(rng), true);
    for (auto& c : w) c = qc::f32_to_e4m3fn(nd(rng), true);
    std::uniform_int_distribution<int> q(-127, 127);
    a8.resize(a.size());
    w8.resize(w.size());
    for (auto& c : a8) c = static_cast<int8_t>(q(rng));
    for (auto& c : w8) c = static_cast<int8_t>(q(rng));
  }
};
const Operands& ops() {
  static const Operands o;
  return o;
}

const char* const kModels[] = {"hopper-fp8-chain", "hopper-fp8-promote4", "exact", "sequential"};

void check_equal(const char* model) {
  const qc::AccumShape s = shape();
  const qc::Fp8AccumModel m = qc::fp8_accumulation_model(model).model;
  std::vector<float> cpu(static_cast<size_t>(s.m * s.n));
  qc::fp8_model_evaluate(m, {ops().a.data(), qc::Fp8Format::e4m3, ops().w.data(), qc::Fp8Format::e4m3, s}, cpu.data());
  const std::vector<float> gpu =
      qc::fp8_model_evaluate_gpu(m, ops().a.data(), qc::Fp8Format::e4m3, ops().w.data(), qc::Fp8Format::e4m3, s);
  for (size_t i = 0; i < cpu.size(); ++i) {
    if (std::memcmp(&cpu[i], &gpu[i], sizeof(float)) != 0) {
      std::fprintf(stderr, "bench_fp8_model_gpu: model %s: d[%lld,%lld]: cpu %a, gpu %a: not timing\n", model,
                   static_cast<long long>(i) / s.n, static_cast<long long>(i) % s.n, cpu[i], gpu[i]);
      std::exit(1);
    }
  }
}

void set_counters(benchmark::State& state) {
  const qc::AccumShape s = shape();
  state.counters["products/s"] =
      benchmark::Counter(static_cast<double>(s.m) * s.n * s.k, benchmark::Counter::kIsIterationInvariantRate);
}

void BM_Fp8(benchmark::State& state, const char* model, qc::Fp8GpuKernel which) {
  const qc::AccumShape s = shape();
  const qc::Fp8AccumModel m = qc::fp8_accumulation_model(model).model;
  std::string kernel;
  for (auto _ : state) {
    auto d = qc::fp8_model_evaluate_gpu(m, ops().a.data(), qc::Fp8Format::e4m3, ops().w.data(), qc::Fp8Format::e4m3, s,
                                        &kernel, which);
    benchmark::DoNotOptimize(d.data());
  }
  state.SetLabel(kernel);
  set_counters(state);
}

// What verify's reference side does per FP8 layer: the codes uploaded once, both Hopper models evaluated.
void BM_Fp8HopperPair(benchmark::State& state) {
  const qc::AccumShape s = shape();
  const qc::Fp8AccumModel chain = qc::fp8_accumulation_model("hopper-fp8-chain").model;
  const qc::Fp8AccumModel promote4 = qc::fp8_accumulation_model("hopper-fp8-promote4").model;
  for (auto _ : state) {
    const qc::GpuFp8Codes codes(ops().a.data(), qc::Fp8Format::e4m3, ops().w.data(), qc::Fp8Format::e4m3, s);
    auto d0 = codes.evaluate(chain);
    auto d1 = codes.evaluate(promote4);
    benchmark::DoNotOptimize(d0.data());
    benchmark::DoNotOptimize(d1.data());
  }
  state.SetLabel("GpuFp8Codes: one upload, hopper-fp8-chain and hopper-fp8-promote4 (verify's FP8 reference per layer)");
  const qc::AccumShape sh = shape();
  state.counters["products/s"] =
      benchmark::Counter(2.0 * static_cast<double>(sh.m) * sh.n * sh.k, benchmark::Counter::kIsIterationInvariantRate);
}

void BM_Int8(benchmark::State& state) {
  const qc::AccumShape s = shape();
  for (auto _ : state) {
    auto acc = qc::exact_accumulate_gpu(ops().a8.data(), ops().w8.data(), s);
    benchmark::DoNotOptimize(acc.i32.data());
  }
  state.SetLabel("exact_accumulate_gpu (INT8 verify's reference side)");
  set_counters(state);
}

}  // namespace

int main(int argc, char** argv) {
  std::string why;
  if (!qc::cuda_available(&why)) {
    std::printf("SKIPPED: bench_fp8_model_gpu needs a CUDA device: %s\n", why.c_str());
    return 0;
  }
  const qc::AccumShape s = shape();
  std::printf("shape M=%lld N=%lld K=%lld, %s\n", static_cast<long long>(s.m), static_cast<long long>(s.n),
              static_cast<long long>(s.k), qc::cuda_device_description().c_str());
  for (const char* m : kModels) check_equal(m);
  benchmark::RegisterBenchmark("int8/exact_accumulate_gpu", BM_Int8)->Unit(benchmark::kMillisecond)->UseRealTime();
  for (const char* m : kModels) {
    benchmark::RegisterBenchmark((std::string("fp8/") + m).c_str(), BM_Fp8, m, qc::Fp8GpuKernel::best)
        ->Unit(benchmark::kMillisecond)->UseRealTime();
  }
  benchmark::RegisterBenchmark("fp8-pair/hopper-fp8-chain+promote4", BM_Fp8HopperPair)
      ->Unit(benchmark::kMillisecond)->UseRealTime();
  for (const char* m : {"hopper-fp8-chain", "hopper-fp8-promote4"}) {
    benchmark::RegisterBenchmark((std::string("fp8-fp64-kernel/") + m).c_str(), BM_Fp8, m, qc::Fp8GpuKernel::fp64)
        ->Unit(benchmark::kMillisecond)->UseRealTime();
  }
  benchmark::RegisterBenchmark("fp8-reference-kernel/hopper-fp8-chain", BM_Fp8, "hopper-fp8-chain",
                               qc::Fp8GpuKernel::reference)
      ->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(1);
  return qc::bench::run_registered(argc, argv);
}
#else
QC_BENCH_SKIPPED_MAIN
#endif
