// The end of every Google Benchmark binary here (bench_element_pass, bench_fp8_model, bench_fp8_model_gpu):
// `run_registered` runs what `main` registered; without Google Benchmark at build time the file
// defines QC_BENCH_SKIPPED_MAIN instead, a main that says SKIPPED.
#pragma once

#if __has_include(<benchmark/benchmark.h>)
#include <benchmark/benchmark.h>

namespace qc::bench {
inline int run_registered(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
}  // namespace qc::bench
#else
#include <cstdio>
#define QC_BENCH_SKIPPED_MAIN                                                                         \
  int main() {                                                                                        \
    std::printf("SKIPPED: Google Benchmark (benchmark/benchmark.h) was not found at build time\n");   \
    return 0;                                                                                         \
  }
#endif
