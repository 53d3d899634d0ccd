// Device time of a launch, for the CUDA benchmarks here (bench_cuda_scaled_mm, bench_cuda_sha256): CUDA
// events around each of `reps` timed calls of `launch(i)` after `warmup` untimed ones (i counts every call
// from 0, so that a launch can rotate its inputs), on the default stream; the median and the best.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
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
  for (int i = 0; i < warmup; ++i) launch(i);
  QC_CUDA_CHECK(cudaDeviceSynchronize());
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
