// Comparison of two bf16 outputs of the same layer: what differs, by how much, and where.
//
// Non-finite values are sorted out before any distance is computed: ulp distances are taken
// over finite pairs only, and a NaN can never pass as "close".
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

namespace qc {

struct DiffElement {
  std::string layer;
  int64_t row = 0, col = 0;
  uint16_t a_bits = 0, b_bits = 0;
  double a = 0, b = 0;
  int64_t ulp = -1;  // ordered bf16 distance, -1 when either side is not finite
};

struct CompareOptions {
  // An element is near zero when |a| < near_zero_fraction × RMS of the finite elements of `a`
  // (the reference side) in the same layer; such elements are reported apart from the relative
  // statistics, where a tiny denominator would dominate.
  double near_zero_fraction = 1e-2;
  size_t max_listed = 10;  // first differing elements kept with coordinates and bit patterns
};

struct Comparison {
  int64_t total = 0;
  int64_t bitwise_diff = 0;      // bit patterns differ (signed zeros and NaN payloads count)
  int64_t signed_zero_diff = 0;  // +0 vs −0 pairs (included in bitwise_diff)
  int64_t nan_a = 0, nan_b = 0, inf_a = 0, inf_b = 0, subnormal_a = 0, subnormal_b = 0;
  int64_t nonfinite_pairs = 0;    // pairs where at least one side is NaN or inf
  int64_t nonfinite_diff = 0;     // such pairs whose bit patterns differ (never "within tolerance")
  int64_t finite_pairs = 0;
  std::map<int64_t, int64_t> ulp_histogram;  // over finite pairs, distance -> count (0 included)
  int64_t max_ulp = 0;                       // over finite pairs
  double max_rel = 0;                        // |a-b|/|a| in fp64 over finite, non-near-zero pairs
  int64_t near_zero = 0, near_zero_diff = 0;
  double near_zero_max_abs = 0;
  std::vector<DiffElement> first;            // the first `max_listed` differing elements

  bool bit_identical() const { return bitwise_diff == 0; }
  // Count of finite pairs farther apart than `ulps`.
  int64_t beyond_ulps(int64_t ulps) const;
  // Adds another comparison's counts (layers into a total); keeps the first `max_listed` elements.
  void merge(const Comparison& other, size_t max_listed);
};

// |a| below this is near zero: `near_zero_fraction` × RMS of the finite elements of `a`.
double near_zero_limit(std::span<const uint16_t> a, const CompareOptions& options);

// a, b: [rows, cols] bf16 bit patterns, row-major. `a` is the reference side for near-zero.
Comparison compare_bf16(std::span<const uint16_t> a, std::span<const uint16_t> b, int64_t rows, int64_t cols,
                        const std::string& layer = "", const CompareOptions& options = {});

// Rows [row0, row1) of the same comparison, with the near-zero limit computed beforehand over the
// whole of `a` (near_zero_limit). Blocks of rows compared this way and merged in row order equal
// compare_bf16 over the whole (what it does on every core, and what verify's element pass uses).
Comparison compare_bf16_rows(std::span<const uint16_t> a, std::span<const uint16_t> b, int64_t row0, int64_t row1,
                             int64_t cols, const std::string& layer, double near_zero, size_t max_listed);
// The scalar reference of `compare_bf16_rows`, one pair at a time; `compare_bf16_rows` takes the
// equal pairs in SIMD lanes and must return the same comparison, field for field (tests/unit/
// test_layer_checks.cpp, `Compare.FastRowsEqualTheReference`).
Comparison compare_bf16_rows_reference(std::span<const uint16_t> a, std::span<const uint16_t> b, int64_t row0,
                                       int64_t row1, int64_t cols, const std::string& layer, double near_zero,
                                       size_t max_listed);

// One line per differing element: coordinates, both values, both bit patterns, ulp distance.
std::string describe(const DiffElement& d);

void to_json(nlohmann::json& j, const Comparison& c);
// A Comparison's `ulp_histogram` as JSON: an object keyed by the decimal distance.
nlohmann::json ulp_histogram_json(const std::map<int64_t, int64_t>& histogram);
void to_json(nlohmann::json& j, const DiffElement& d);
// The inverses (lossless: the values of a DiffElement are read back from its bit patterns, so
// non-finite values, which JSON cannot hold, survive): how the ranks of an MPI job send per-layer
// results to rank 0. nlohmann::json errors on malformed input.
void from_json(const nlohmann::json& j, Comparison& c);
void from_json(const nlohmann::json& j, DiffElement& d);

}  // namespace qc
