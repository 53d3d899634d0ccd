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

// What `threads = 0` means: every hardware thread, unless the process was given a share of them
// (`set_thread_share`: the ranks of an MPI job on one host split its cores, qc::dist::init).
inline std::atomic<int>& thread_share() {
  static std::atomic<int> share{0};
  return share;
}
inline void set_thread_share(int threads) { thread_share() = threads; }
inline int hardware_threads() {
  const int share = thread_share();
  return share > 0 ? share : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
}

inline int resolve_threads(int threads) { return threads > 0 ? threads : hardware_threads(); }

// Whether this thread is a worker of a `parallel_for` (a loop nested in one may choose to run serially
// instead of starting a pool per item).
inline bool& in_parallel_worker() {
  thread_local bool inside = false;
  return inside;
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
      in_parallel_worker() = true;
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
