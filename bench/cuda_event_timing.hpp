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
#include <stdexcept>
#include <string>
#include <vector>

#include "arms/cuda/cuda_common.hpp"
#include "arms/cuda/kernels/gpu_delay.cuh"
#include "core/env_setting.hpp"

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

// Two launches compared in one run (issue #32, item 6: "measured in one run beside it"): `rounds` rounds, the
// order swapped each round (A B, B A, ...), each side timed as one batch of `batch` launches back to back
// between two events, so that neither side always runs first on a warmer or cooler GPU. The ratio is B's
// time over A's per round (above 1: A is faster); its median and range, and each side's median time per
// launch. Queued ahead: a delay kernel (gpu_delay.cuh) holds the stream while the host queues the whole
// batch, so the batch's kernels run back to back on the device (as in a CUDA graph's replay) and a slower
// host launch path is not charged to the kernel: the fifteenth session found our M = 512 launches as
// short as 16 us. The host's time to queue one launch is measured beside (median per side), and `late`
// counts the batches whose queueing outlasted the delay (their kernels may have waited on the host).
// QC_BENCH_QUEUE_AHEAD=0: no delay kernel (the measure of the sessions before the fifteenth).
struct PairedTiming {
  double a_ms = 0, b_ms = 0;
  double ratio_median = 0, ratio_min = 0, ratio_max = 0;
  double a_host_us = 0, b_host_us = 0;
  int rounds = 0, batch = 0, late = 0;
  bool ahead = true;  // queued ahead behind the delay kernel
};

template <typename FA, typename FB>
PairedTiming time_alternating(FA&& launch_a, FB&& launch_b, int rounds, double batch_ms = 10.0) {
  const EventTiming guess = time_launches(launch_a, 5, 5);  // also the warm-up of both
  time_launches(launch_b, 5, 5);
  PairedTiming r;
  r.rounds = rounds;
  r.batch = static_cast<int>(std::clamp(batch_ms / std::max(guess.median_ms, 1e-4), 1.0, 200.0));
  cudaEvent_t start, stop;
  QC_CUDA_CHECK(cudaEventCreate(&start));
  QC_CUDA_CHECK(cudaEventCreate(&stop));
  int calls = 0;
  const bool ahead = env_int("QC_BENCH_QUEUE_AHEAD", 1, 0, 1) == 1;
  r.ahead = ahead;
  double delay_us = 3000;  // then 1.5 times the longest queueing seen, and 200 us more
  std::vector<double> host_a, host_b;
  const auto batch = [&](auto& launch, std::vector<double>& host) {
    if (const std::string err = ahead ? cuda_kernels::launch_gpu_delay(static_cast<uint64_t>(delay_us * 1e3), nullptr) : "";
        !err.empty())
      throw std::runtime_error(err);
    QC_CUDA_CHECK(cudaEventRecord(start));
    const auto t0 = std::chrono::steady_clock::now();
    for (int j = 0; j < r.batch; ++j) launch(calls++);
    const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
    host.push_back(us / r.batch);
    r.late += ahead && us > delay_us;
    delay_us = std::max(delay_us, 1.5 * us + 200);
    QC_CUDA_CHECK(cudaEventRecord(stop));
    QC_CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0;
    QC_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    return static_cast<double>(ms) / r.batch;
  };
  std::vector<double> a, b, ratio;
  for (int i = 0; i < rounds; ++i) {
    double ta = 0, tb = 0;
    if (i % 2 == 0) {
      ta = batch(launch_a, host_a), tb = batch(launch_b, host_b);
    } else {
      tb = batch(launch_b, host_b), ta = batch(launch_a, host_a);
    }
    a.push_back(ta), b.push_back(tb), ratio.push_back(tb / ta);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  const auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  r.a_ms = median(a), r.b_ms = median(b), r.ratio_median = median(ratio);
  r.a_host_us = median(host_a), r.b_host_us = median(host_b);
  r.ratio_min = *std::min_element(ratio.begin(), ratio.end());
  r.ratio_max = *std::max_element(ratio.begin(), ratio.end());
  return r;
}

}  // namespace qc::bench
