// A minimal parallel loop: items are handed out one at a time to `threads` workers; the first
// exception thrown by any item is rethrown on the calling thread after all workers stop.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace qc {

inline int resolve_threads(int threads) {
  return threads > 0 ? threads : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
}

template <class Fn>
void parallel_for(int64_t count, int threads, Fn&& fn) {
  const int workers = static_cast<int>(std::min<int64_t>(resolve_threads(threads), std::max<int64_t>(count, 1)));
  if (workers <= 1) {
    for (int64_t i = 0; i < count; ++i) fn(i);
    return;
  }
  std::atomic<int64_t> next{0};
  std::atomic<bool> failed{false};
  std::exception_ptr error;
  std::mutex error_mutex;
  std::vector<std::thread> pool;
  pool.reserve(static_cast<size_t>(workers));
  for (int t = 0; t < workers; ++t) {
    pool.emplace_back([&] {
      for (int64_t i = next++; i < count && !failed; i = next++) {
        try {
          fn(i);
        } catch (...) {
          std::lock_guard lock(error_mutex);
          if (!error) error = std::current_exception();
          failed = true;
        }
      }
    });
  }
  for (auto& th : pool) th.join();
  if (error) std::rethrow_exception(error);
}

}  // namespace qc
