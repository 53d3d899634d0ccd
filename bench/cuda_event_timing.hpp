// Device time of a launch, for the CUDA benchmarks here (bench_cuda_scaled_mm, bench_cuda_sha256): CUDA
// events around each of `reps` timed calls of `launch(i)` after untimed ones (i counts every call from 0, so
// that a launch can rotate its inputs), on the default stream; the median and the best. The untimed calls
// are `warmup` at least and go on for 25 ms of wall time at least: the first timed launch of a shape used to
// follow the host's comparison of the previous one, with the GPU idle and its clocks down (an 8192^3 timing
// of ours 0.83 ms first and 0.70 ms when timed again, H100, docs/performance.md).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <vector>

#include "arms/cuda/cuda_common.hpp"

namespace qc::bench {

struct EventTiming {
  double median_ms = 0;
  double best_ms = 0;
};

template <typename F>
EventTiming time_launches(F&& launch, int warmup, int reps) {
  cudaEvent_t start, stop;
  QC_CUDA_CHECK(cudaEventCreate(&start));
  QC_CUDA_CHECK(cudaEventCreate(&stop));
  const auto begun = std::chrono::steady_clock::now();
  int done = 0;
  while (done < warmup || (std::chrono::steady_clock::now() - begun < std::chrono::milliseconds(25) && done < 100000)) {
    for (int j = 0; j < 4; ++j) launch(done++);
    QC_CUDA_CHECK(cudaDeviceSynchronize());
  }
  warmup = done;
  std::vector<float> t(static_cast<size_t>(reps));
  for (int i = 0; i < reps; ++i) {
    QC_CUDA_CHECK(cudaEventRecord(start));
    launch(warmup + i);
    QC_CUDA_CHECK(cudaEventRecord(stop));
    QC_CUDA_CHECK(cudaEventSynchronize(stop));
    QC_CUDA_CHECK(cudaEventElapsedTime(&t[static_cast<size_t>(i)], start, stop));
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  std::sort(t.begin(), t.end());
  return {t[t.size() / 2], t.front()};
}

}  // namespace qc::bench
