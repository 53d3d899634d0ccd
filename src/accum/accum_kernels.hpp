// Internal interface of the exact INT8 accumulator kernels (src/accum/accum_kernels.cpp) and the
// tiny worker pool they share. Not part of the public API: include/qconform/accumulation.hpp is.
#pragma once

#include <atomic>
#include <cstdint>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace qc::accum_detail {

// `c[i*ldc + j] = Σ_{kk<k} a[i*lda + kk] · w[j*ldw + kk]` for i < m, j < n, computed exactly in
// int32. Precondition (checked by the callers): k·2^14 < 2^31. Runs on `threads` threads (>= 1).
void gemm_i32(const int8_t* a, int64_t lda, const int8_t* w, int64_t ldw, int64_t m, int64_t n, int64_t k,
              int32_t* c, int64_t ldc, int threads);

// Name of the Highway target HWY_DYNAMIC_DISPATCH selects for `gemm_i32`.
const char* target_name();

// Runs `fn(worker_index)` on `threads` workers (the calling thread is worker 0) and joins them.
// The first exception thrown by any worker is rethrown here after all workers finished.
template <class Fn>
void run_workers(int threads, Fn&& fn) {
  if (threads <= 1) {
    fn(0);
    return;
  }
  std::exception_ptr first_error;
  std::mutex error_mutex;
  auto guarded = [&](int worker) {
    try {
      fn(worker);
    } catch (...) {
      std::lock_guard<std::mutex> lock(error_mutex);
      if (!first_error) first_error = std::current_exception();
    }
  };
  std::vector<std::thread> pool;
  pool.reserve(static_cast<size_t>(threads - 1));
  for (int t = 1; t < threads; ++t) pool.emplace_back(guarded, t);
  guarded(0);
  for (auto& th : pool) th.join();
  if (first_error) std::rethrow_exception(first_error);
}

}  // namespace qc::accum_detail
