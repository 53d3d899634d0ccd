// Exact INT8 accumulation: public entry points, the scalar reference and range statistics.
// The SIMD kernels are in accum_kernels.cpp (Highway runtime dispatch).
//
// a [M,K] row-major int8, w [N,K] row-major int8 (Wᵀ as column-major), acc [M,N] row-major.
// Test: ./build-accum/tests/qconform_unit_tests --gtest_filter='Accum*'
#include "qconform/accumulation.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <thread>
#include <vector>

#include "accum/accum_kernels.hpp"
#include "qconform/error.hpp"
#include "core/parallel.hpp"

namespace qc {
namespace {

// K is split into blocks of this many columns for the int64 path: each block satisfies the int32
// no-overflow proof (65536·2^14 = 2^30 < 2^31) and keeps 4-byte groups aligned.
constexpr int64_t kI64BlockK = int64_t{1} << 16;
static_assert(kI64BlockK <= kAccumMaxKInt32, "each int64-path block must satisfy the int32 proof");

void check_shape(const int8_t* a, const int8_t* w, AccumShape s, const void* acc, const char* who) {
  QC_CHECK(s.m >= 0 && s.n >= 0 && s.k >= 0, "{}: negative shape m={} n={} k={}", who, s.m, s.n, s.k);
  QC_CHECK(s.m * s.k == 0 || a != nullptr, "{}: `a` is null for m={} k={}", who, s.m, s.k);
  QC_CHECK(s.n * s.k == 0 || w != nullptr, "{}: `w` is null for n={} k={}", who, s.n, s.k);
  QC_CHECK(s.m * s.n == 0 || acc != nullptr, "{}: `acc` is null for m={} n={}", who, s.m, s.n);
}

// `threads = 0`: all hardware threads, but one thread for work too small to amortize starting
// threads (about 4 M multiply-adds). An explicit count is honoured (the kernels cap it by the
// number of tasks), so tests can exercise the threaded paths on small shapes.
int resolve_threads(int threads, AccumShape s) {
  QC_CHECK(threads >= 0, "threads must be >= 0 (0 = all hardware threads), got {}", threads);
  if (threads > 0) return threads;
  if (s.m * s.n * std::max<int64_t>(s.k, 1) < (int64_t{1} << 22)) return 1;
  return hardware_threads();
}

// Range statistics, in fixed blocks of rows / weight columns on `threads` workers, merged in block
// order: the result (including which element is "first" at the maximum) does not depend on the
// thread count.
template <class T>
RangeStats range_stats_impl(const int8_t* a, const int8_t* w, AccumShape s, const T* acc, int threads) {
  // 1. Observed range of the accumulators.
  constexpr int64_t kI32Min = std::numeric_limits<int32_t>::min();
  constexpr int64_t kI32Max = std::numeric_limits<int32_t>::max();
  constexpr int64_t kBlock = int64_t{1} << 16;  // elements (or weight bytes) per block
  struct Observed {
    int64_t max_abs = 0, argmax = -1, above = 0, inexact = 0, overflow = 0;
  };
  const int64_t count = s.m * s.n;
  std::vector<Observed> parts(static_cast<size_t>((count + kBlock - 1) / kBlock));
  parallel_for(static_cast<int64_t>(parts.size()), threads, [&](int64_t b) {
    Observed& o = parts[static_cast<size_t>(b)];
    for (int64_t idx = b * kBlock; idx < std::min(count, (b + 1) * kBlock); ++idx) {
      const int64_t v = static_cast<int64_t>(acc[idx]);
      const int64_t mag = v < 0 ? -v : v;  // |acc| <= K·2^14, far from INT64_MIN
      if (mag > o.max_abs || o.argmax < 0) o.max_abs = mag, o.argmax = idx;  // first occurrence
      if (mag > kFp32ExactIntLimit) {
        ++o.above;
        // int64 -> float rounds to nearest even; a value survives the round trip iff exact.
        if (static_cast<int64_t>(static_cast<float>(v)) != v) ++o.inexact;
      }
      if (v < kI32Min || v > kI32Max) ++o.overflow;
    }
  });
  RangeParts total;
  for (const Observed& o : parts) {
    if (o.max_abs > total.max_abs || total.argmax < 0) total.max_abs = o.max_abs, total.argmax = o.argmax;
    total.above += o.above;
    total.inexact += o.inexact;
    total.overflow += o.overflow;
  }

  // 2. Data-independent bound: |Σ_k a[k]·w[n,k]| <= max|a| · Σ_k |w[n,k]| for every activation row
  // with codes of magnitude <= max|a|.
  total.a_contains_min = std::find(a, a + s.m * s.k, int8_t{-128}) != a + s.m * s.k;
  std::vector<int64_t> l1(static_cast<size_t>(s.n));
  const int64_t cols_per_block = std::max<int64_t>(1, kBlock / std::max<int64_t>(s.k, 1));
  parallel_for((s.n + cols_per_block - 1) / cols_per_block, threads, [&](int64_t b) {
    for (int64_t j = b * cols_per_block; j < std::min(s.n, (b + 1) * cols_per_block); ++j) {
      int64_t sum = 0;
      const int8_t* row = w + j * s.k;
      for (int64_t kk = 0; kk < s.k; ++kk) sum += row[kk] < 0 ? -int64_t{row[kk]} : int64_t{row[kk]};
      l1[static_cast<size_t>(j)] = sum;
    }
  });
  for (int64_t j = 0; j < s.n; ++j) {
    if (l1[static_cast<size_t>(j)] > total.l1_max) total.l1_max = l1[static_cast<size_t>(j)], total.l1_argmax = j;
  }
  return range_stats_from(s, total);
}

}  // namespace

RangeStats range_stats_from(AccumShape s, const RangeParts& p) {
  RangeStats r;
  r.shape = s;
  r.int32_overflow_impossible = s.k <= kAccumMaxKInt32;
  r.max_abs_acc = p.max_abs;
  if (p.argmax >= 0 && s.n > 0) r.argmax_m = p.argmax / s.n, r.argmax_n = p.argmax % s.n;
  r.count_above_2p24 = p.above;
  r.count_inexact_fp32 = p.inexact;
  r.int32_overflow_count = p.overflow;
  r.headroom_bits = r.max_abs_acc == 0 ? std::numeric_limits<double>::infinity()
                                       : 24.0 - std::log2(static_cast<double>(r.max_abs_acc));
  r.a_contains_min = p.a_contains_min;
  r.bound_max_a = r.a_contains_min ? 128 : 127;
  r.bound_argmax_n = p.l1_argmax;
  r.data_independent_bound = s.n == 0 ? 0 : int64_t{r.bound_max_a} * p.l1_max;
  r.bound_proves_safe = r.data_independent_bound <= kFp32ExactIntLimit;
  return r;
}

void exact_accumulate_i32(const int8_t* a, const int8_t* w, AccumShape s, int32_t* acc, int threads) {
  check_shape(a, w, s, acc, "exact_accumulate_i32");
  QC_CHECK(s.k <= kAccumMaxKInt32,
           "exact_accumulate_i32: K={} violates the no-overflow proof K*2^14 < 2^31 (K <= {}); use "
           "exact_accumulate_i64",
           s.k, kAccumMaxKInt32);
  accum_detail::gemm_i32(a, s.k, w, s.k, s.m, s.n, s.k, acc, s.n, resolve_threads(threads, s));
}

void exact_accumulate_i64(const int8_t* a, const int8_t* w, AccumShape s, int64_t* acc, int threads) {
  check_shape(a, w, s, acc, "exact_accumulate_i64");
  const int nthreads = resolve_threads(threads, s);
  const int64_t count = s.m * s.n;
  std::fill(acc, acc + count, int64_t{0});
  if (count == 0 || s.k == 0) return;
  std::vector<int32_t> block(static_cast<size_t>(count));
  for (int64_t k0 = 0; k0 < s.k; k0 += kI64BlockK) {
    const int64_t kb = std::min(kI64BlockK, s.k - k0);
    // Each block is exact in int32 (kb <= 2^16); the int64 sum of exact blocks is exact.
    accum_detail::gemm_i32(a + k0, s.k, w + k0, s.k, s.m, s.n, kb, block.data(), s.n, nthreads);
    for (int64_t idx = 0; idx < count; ++idx) acc[idx] += block[static_cast<size_t>(idx)];
  }
}

void accumulate_ref_i64(const int8_t* a, const int8_t* w, AccumShape s, int64_t* acc) {
  check_shape(a, w, s, acc, "accumulate_ref_i64");
  for (int64_t i = 0; i < s.m; ++i) {
    for (int64_t j = 0; j < s.n; ++j) {
      int64_t sum = 0;
      for (int64_t kk = 0; kk < s.k; ++kk) sum += int64_t{a[i * s.k + kk]} * int64_t{w[j * s.k + kk]};
      acc[i * s.n + j] = sum;
    }
  }
}

std::string accum_target_name() { return accum_detail::target_name(); }

ExactAccumulators exact_accumulate(const int8_t* a, const int8_t* w, AccumShape s, int threads) {
  QC_CHECK(s.m >= 0 && s.n >= 0 && s.k >= 0, "exact_accumulate: negative shape m={} n={} k={}", s.m, s.n, s.k);
  ExactAccumulators e;
  if (s.k <= kAccumMaxKInt32) {
    e.i32.resize(static_cast<size_t>(s.m * s.n));
    exact_accumulate_i32(a, w, s, e.i32.data(), threads);
  } else {
    e.i64.resize(static_cast<size_t>(s.m * s.n));
    exact_accumulate_i64(a, w, s, e.i64.data(), threads);
  }
  return e;
}

RangeStats range_stats(const int8_t* a, const int8_t* w, AccumShape s, const int32_t* acc, int threads) {
  check_shape(a, w, s, acc, "range_stats");
  QC_CHECK(s.k <= kAccumMaxKInt32,
           "range_stats: int32 accumulators with K={} cannot be trusted (K*2^14 >= 2^31); pass int64 "
           "accumulators",
           s.k);
  return range_stats_impl(a, w, s, acc, threads);
}

RangeStats range_stats(const int8_t* a, const int8_t* w, AccumShape s, const int64_t* acc, int threads) {
  check_shape(a, w, s, acc, "range_stats");
  return range_stats_impl(a, w, s, acc, threads);
}

RangeStats range_stats(const int8_t* a, const int8_t* w, AccumShape s, const ExactAccumulators& acc, int threads) {
  return acc.wide() ? range_stats(a, w, s, acc.i64.data(), threads) : range_stats(a, w, s, acc.i32.data(), threads);
}

RangeStats exact_range_stats(const int8_t* a, const int8_t* w, AccumShape s, int threads) {
  QC_CHECK(s.m >= 0 && s.n >= 0 && s.k >= 0, "exact_range_stats: negative shape m={} n={} k={}", s.m, s.n, s.k);
  return range_stats(a, w, s, exact_accumulate(a, w, s, threads), threads);
}

}  // namespace qc
