// Exact INT8 accumulation: `acc[m,n] = Σ_k a[m,k]·w[n,k]` as exact integers, and the range
// statistics that decide whether a layer's accumulators have an alibi (paper Section III).
//
// Layouts: `a` [M,K] row-major int8, `w` [N,K] row-major int8 (Wᵀ as column-major), `acc` [M,N]
// row-major. Raw pointers so that this header depends on nothing else in qconform.
//
// Exactness facts this API is built on (see docs/performance.md, "Exact accumulator"):
// - Every product of two int8 values lies in [-128·127, (-128)·(-128)] = [-16256, 16384], so
//   |acc| <= K·2^14. If K·2^14 < 2^31 (K < 131072), no INT32 accumulator can overflow and the
//   result is independent of reduction order: `exact_accumulate_i32` requires this.
// - For any K, `exact_accumulate_i64` sums K-blocks that each satisfy the proof into int64.
// - Every integer with |acc| <= 2^24 converts to float32 exactly; the unsafe set is
//   |acc| > 2^24 (2^24 itself is exact; 2^24+1 is the first integer that rounds).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace qc {

// Shape of one accumulation: `a` [m,k], `w` [n,k], `acc` [m,n].
struct AccumShape {
  int64_t m, n, k;
};

// The largest K for which INT32 accumulation provably cannot overflow: K·2^14 < 2^31.
inline constexpr int64_t kAccumMaxKInt32 = (int64_t{1} << 17) - 1;  // 131071
static_assert(kAccumMaxKInt32 * 16384 < (int64_t{1} << 31), "the no-overflow proof must hold at kAccumMaxKInt32");
static_assert((kAccumMaxKInt32 + 1) * 16384 >= (int64_t{1} << 31), "kAccumMaxKInt32 must be the largest such K");

// Every integer with |x| <= 2^24 is exactly representable in float32.
inline constexpr int64_t kFp32ExactIntLimit = int64_t{1} << 24;

// Exact int32 accumulators (SIMD, Highway runtime dispatch, multi-threaded). Requires the
// no-overflow proof K·2^14 < 2^31, i.e. K <= kAccumMaxKInt32 (QC_CHECK otherwise).
// `threads = 0` means every hardware thread, or this process's share of them (qc::hardware_threads).
void exact_accumulate_i32(const int8_t* a, const int8_t* w, AccumShape s, int32_t* acc, int threads = 0);

// Exact int64 accumulators for any K: K is split into blocks below the int32 proof, each block
// accumulated exactly in int32 by the same kernel, and the blocks summed in int64.
void exact_accumulate_i64(const int8_t* a, const int8_t* w, AccumShape s, int64_t* acc, int threads = 0);

// A layer's exact accumulators in the narrowest type that holds them: INT32 when K <= kAccumMaxKInt32
// (no value can leave INT32), INT64 otherwise (`wide()`).
struct ExactAccumulators {
  std::vector<int32_t> i32;
  std::vector<int64_t> i64;
  bool wide() const { return !i64.empty(); }
};
ExactAccumulators exact_accumulate(const int8_t* a, const int8_t* w, AccumShape s, int threads = 0);

// The named scalar reference (obviously correct, slow): int64 triple loop, no SIMD, no threads.
void accumulate_ref_i64(const int8_t* a, const int8_t* w, AccumShape s, int64_t* acc);

// The Highway target the dispatcher selects on this machine for the accumulator kernel
// (e.g. "AVX3_DL", which uses VNNI `vpdpbusd` with an exact offset correction, or "AVX3",
// "AVX2", ... which use sign-extension to int16 and `pmaddwd`). Recorded in run identities.
std::string accum_target_name();

struct RangeStats {
  AccumShape shape{0, 0, 0};
  // Observed maximum |acc| and its first coordinates in row-major order (-1 when M·N == 0).
  int64_t max_abs_acc = 0;
  int64_t argmax_m = -1;
  int64_t argmax_n = -1;
  // Elements with |acc| > 2^24: the set for which exact conversion to fp32 is not guaranteed.
  int64_t count_above_2p24 = 0;
  // Elements whose value actually changes when converted to fp32 (round-to-nearest-even):
  // a subset of `count_above_2p24` (e.g. 2^24+2 is still exact, 2^24+1 is not).
  int64_t count_inexact_fp32 = 0;
  // 24 - log2(max|acc|): >= 0 iff no element exceeds 2^24 (0 exactly at max|acc| = 2^24, which
  // is still exact), negative when some element exceeds it. +infinity when max|acc| == 0.
  double headroom_bits = 0.0;
  // The proof K·2^14 < 2^31 (K <= 131071). We use the plain bound 2^14 per product; the
  // tighter bound (only (-128)·(-128) reaches 2^14, every other product is <= 16256) is not
  // needed for any realistic K and is not used.
  bool int32_overflow_impossible = true;
  // Elements whose exact value leaves [-2^31, 2^31-1] (0 whenever the proof holds; only an
  // int64 accumulator array can exhibit a nonzero count).
  int64_t int32_overflow_count = 0;
  // Data-independent bound: bound_max_a · max_n Σ_k |w[n,k]|. It holds for every activation
  // whose codes have magnitude <= bound_max_a. bound_max_a is 127 (symmetric codes, the
  // compressed-tensors/vLLM convention) unless `a` actually contains -128, then 128.
  int64_t data_independent_bound = 0;
  int32_t bound_max_a = 127;
  bool a_contains_min = false;      // `a` contains -128 (so bound_max_a is 128)
  int64_t bound_argmax_n = -1;      // the column n achieving max_n Σ_k |w[n,k]|
  bool bound_proves_safe = true;    // data_independent_bound <= 2^24
};

// Range statistics of accumulators `acc` computed from `a` and `w` (the operands are used for
// the data-independent bound). The int32 overload requires the no-overflow proof (QC_CHECK).
// `threads`: 0 = all hardware threads; the result does not depend on it.
RangeStats range_stats(const int8_t* a, const int8_t* w, AccumShape s, const int32_t* acc, int threads = 0);
RangeStats range_stats(const int8_t* a, const int8_t* w, AccumShape s, const int64_t* acc, int threads = 0);
RangeStats range_stats(const int8_t* a, const int8_t* w, AccumShape s, const ExactAccumulators& acc, int threads = 0);

// Convenience: computes the exact accumulators (int32 when the proof holds, int64 otherwise)
// and returns their range statistics.
RangeStats exact_range_stats(const int8_t* a, const int8_t* w, AccumShape s, int threads = 0);

}  // namespace qc
