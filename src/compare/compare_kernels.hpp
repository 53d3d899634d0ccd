// Internal interface of the Highway fast path of `compare_bf16_rows` (src/compare/compare_kernels.cpp).
// Not part of the public API: include/qconform/compare.hpp is. The scalar reference it must equal
// is `compare_bf16_rows_reference` (compare.cpp); tests/unit/test_layer_checks.cpp checks the two
// bit for bit.
#pragma once

#include <cstdint>

namespace qc::compare_detail {

// What the fast scan counts over every pair it covers.
struct PairCounts {
  int64_t nan[2] = {0, 0}, inf[2] = {0, 0}, subnormal[2] = {0, 0};  // per side, as `classify_bf16` says
  int64_t nonfinite_pairs = 0;                                      // either side NaN or inf
  int64_t equal_finite = 0;                                         // equal bit patterns, finite
  int64_t equal_near_zero = 0;                                      // of those, |a| below the limit or zero
};

// The pairs [0, n) of `a`, `b` (bf16 bit patterns) in whole vectors; returns how many it covered
// (n rounded down to a whole number of vectors; the caller takes the rest with the scalar code).
// Adds to `c` the classes of both sides of every covered pair, the non-finite pairs, and for the
// equal finite pairs their count and how many are near zero: magnitude bits (`a & 0x7fff`) below
// `near_zero_bits`, or zero. Writes the index of every covered pair whose bit patterns differ to
// `differ` (room for n), in increasing order, and their number to `differ_count`.
int64_t scan_bf16_pairs(const uint16_t* a, const uint16_t* b, int64_t n, uint16_t near_zero_bits, PairCounts& c,
                        int32_t* differ, int64_t& differ_count);

// What the fast path adds up over differing pairs (bit patterns differ; the classes and non-finite
// pairs are `scan_bf16_pairs`' part), the fields of `Comparison` of the same names.
struct DifferCounts {
  int64_t finite_pairs = 0, near_zero = 0, nonfinite_diff = 0, signed_zero_diff = 0, near_zero_diff = 0;
  int64_t max_ulp = 0;
  double max_rel = 0, near_zero_max_abs = 0;
};

// Sentinel of `ulp` for a pair with a non-finite side (finite distances are at most 2 * 0x7f7f).
inline constexpr uint16_t kNoUlp = 0xffff;

// Differing pairs [0, n) of `x`, `y` (gathered: pair j is x[j], y[j], and x[j] != y[j]) in whole
// vectors; returns how many it covered. Adds to `c` what `add_differing` (compare.cpp) adds, except
// the ulp histogram and the "first" list: it writes each covered pair's ulp distance to `ulp[j]`
// (`kNoUlp` when a side is NaN or inf), and the caller counts them. `near_zero_bits` as above.
int64_t scan_differing_pairs(const uint16_t* x, const uint16_t* y, int64_t n, uint16_t near_zero_bits,
                             DifferCounts& c, uint16_t* ulp);

// The Highway target the dispatcher selects for the scans here.
const char* compare_target();

}  // namespace qc::compare_detail
