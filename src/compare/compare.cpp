#include "qconform/compare.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>

#include "compare/bf16_square_sum.hpp"
#include "compare/compare_kernels.hpp"
#include "qconform/error.hpp"
#include "qconform/numerics.hpp"
#include "core/parallel.hpp"

namespace qc {

namespace {

// Root mean square of the finite values: the exact sum of squares (bf16_square_sum.hpp) over fixed
// blocks of 2^16 on every core, rounded once; the same value whatever the thread count, and the one
// the GPU's element pass computes.
double rms_finite(std::span<const uint16_t> a) {
  constexpr size_t kBlock = size_t{1} << 16;
  const size_t blocks = (a.size() + kBlock - 1) / kBlock;
  std::vector<Bf16SquareSum> sums(blocks);
  parallel_for(static_cast<int64_t>(blocks), a.size() < (size_t{1} << 20) ? 1 : 0, [&](int64_t b) {
    Bf16SquareSum& sum = sums[static_cast<size_t>(b)];
    for (size_t i = static_cast<size_t>(b) * kBlock; i < std::min(a.size(), (static_cast<size_t>(b) + 1) * kBlock); ++i) {
      sum.add(a[i]);
    }
  });
  Bf16SquareSum total;
  for (const Bf16SquareSum& s : sums) total.merge(s);
  return total.count ? std::sqrt(total.rounded() / static_cast<double>(total.count)) : 0.0;
}

void count_classes(uint16_t b, int64_t& nan, int64_t& inf, int64_t& subnormal) {
  switch (classify_bf16(b)) {
    case FpClass::nan: ++nan; break;
    case FpClass::inf: ++inf; break;
    case FpClass::subnormal: ++subnormal; break;
    default: break;
  }
}

}  // namespace

double near_zero_limit(std::span<const uint16_t> a, const CompareOptions& options) {
  return options.near_zero_fraction * rms_finite(a);
}

int64_t Comparison::beyond_ulps(int64_t ulps) const {
  int64_t count = 0;
  for (const auto& [distance, n] : ulp_histogram) {
    if (distance > ulps) count += n;
  }
  return count;
}

void Comparison::merge(const Comparison& o, size_t max_listed) {
  total += o.total;
  bitwise_diff += o.bitwise_diff;
  signed_zero_diff += o.signed_zero_diff;
  nan_a += o.nan_a;
  nan_b += o.nan_b;
  inf_a += o.inf_a;
  inf_b += o.inf_b;
  subnormal_a += o.subnormal_a;
  subnormal_b += o.subnormal_b;
  nonfinite_pairs += o.nonfinite_pairs;
  nonfinite_diff += o.nonfinite_diff;
  finite_pairs += o.finite_pairs;
  for (const auto& [distance, n] : o.ulp_histogram) ulp_histogram[distance] += n;
  max_ulp = std::max(max_ulp, o.max_ulp);
  max_rel = std::max(max_rel, o.max_rel);
  near_zero += o.near_zero;
  near_zero_diff += o.near_zero_diff;
  near_zero_max_abs = std::max(near_zero_max_abs, o.near_zero_max_abs);
  for (const DiffElement& d : o.first) {
    if (first.size() >= max_listed) break;
    first.push_back(d);
  }
}

namespace {

// Small ulp distances are counted in an array: a map update per element would dominate the pass.
constexpr int64_t kSmallUlps = 64;
using SmallHistogram = std::array<int64_t, kSmallUlps>;

// The steps of one pair (x from `a`, the reference side, y from `b`), in the order the reference
// takes them: the classes of both sides and the non-finite pairs; then an equal finite pair, or a
// differing pair.
void count_pair_classes(Comparison& c, uint16_t x, uint16_t y) {
  count_classes(x, c.nan_a, c.inf_a, c.subnormal_a);
  count_classes(y, c.nan_b, c.inf_b, c.subnormal_b);
  if (!(bf16_is_finite(x) && bf16_is_finite(y))) ++c.nonfinite_pairs;
}

void add_equal_finite(Comparison& c, SmallHistogram& small_hist, uint16_t x, double near_zero) {
  ++c.finite_pairs;
  ++small_hist[0];
  const double xv = bf16_to_f32(x);
  c.near_zero += std::fabs(xv) < near_zero || xv == 0.0;
}

void add_differing(Comparison& c, SmallHistogram& small_hist, int64_t i, int64_t cols, uint16_t x, uint16_t y,
                   const std::string& layer, double near_zero, size_t max_listed) {
  const bool finite = bf16_is_finite(x) && bf16_is_finite(y);
  const double xv = bf16_to_f32(x), yv = bf16_to_f32(y);
  // An exact zero on the reference side has no relative difference: it is near zero too.
  const bool is_near_zero = finite && (std::fabs(xv) < near_zero || xv == 0.0);
  int64_t ulp = -1;
  if (finite) {
    ++c.finite_pairs;
    // The hot loop: the core's unchecked distance, its precondition (both finite) asserted in debug builds.
    QC_DCHECK(finite, "compare: ulp distance of a non-finite pair 0x{:04x}, 0x{:04x}", x, y);
    ulp = bf16_ordered_distance(x, y);
    if (ulp < kSmallUlps) {
      ++small_hist[ulp];
    } else {
      ++c.ulp_histogram[ulp];
    }
    c.max_ulp = std::max(c.max_ulp, ulp);
    if (is_near_zero) ++c.near_zero;
  }
  ++c.bitwise_diff;
  if (!finite) ++c.nonfinite_diff;
  if ((x & 0x7FFFu) == 0 && (y & 0x7FFFu) == 0) ++c.signed_zero_diff;
  if (finite) {
    if (is_near_zero) {
      ++c.near_zero_diff;
      c.near_zero_max_abs = std::max(c.near_zero_max_abs, std::fabs(xv - yv));
    } else {
      c.max_rel = std::max(c.max_rel, std::fabs(xv - yv) / std::fabs(xv));
    }
  }
  if (c.first.size() < max_listed) c.first.push_back(DiffElement{layer, i / cols, i % cols, x, y, xv, yv, ulp});
}

// One pair through every step: the reference, and the fast path's tail.
void add_pair(Comparison& c, SmallHistogram& small_hist, int64_t i, int64_t cols, uint16_t x, uint16_t y,
              const std::string& layer, double near_zero, size_t max_listed) {
  count_pair_classes(c, x, y);
  if (x != y) return add_differing(c, small_hist, i, cols, x, y, layer, near_zero, max_listed);
  if (bf16_is_finite(x)) add_equal_finite(c, small_hist, x, near_zero);
}

void fold_small_histogram(Comparison& c, const SmallHistogram& small_hist) {
  for (int64_t d = 0; d < kSmallUlps; ++d) {
    if (small_hist[d]) c.ulp_histogram[d] += small_hist[d];
  }
}

}  // namespace

Comparison compare_bf16_rows_reference(std::span<const uint16_t> a, std::span<const uint16_t> b, int64_t row0,
                                       int64_t row1, int64_t cols, const std::string& layer, double near_zero,
                                       size_t max_listed) {
  SmallHistogram small_hist{};
  Comparison c;
  const int64_t i0 = row0 * cols, i1 = row1 * cols;
  c.total = i1 - i0;
  for (int64_t i = i0; i < i1; ++i) add_pair(c, small_hist, i, cols, a[i], b[i], layer, near_zero, max_listed);
  fold_small_histogram(c, small_hist);
  return c;
}

// The pairs in SIMD lanes (compare_kernels.cpp): the equal ones where they are, the differing ones
// gathered. The differing pairs that make the "first" list (the first `max_listed`, in index order)
// and the pairs past the last whole vector go through the reference's own steps.
Comparison compare_bf16_rows(std::span<const uint16_t> a, std::span<const uint16_t> b, int64_t row0, int64_t row1,
                             int64_t cols, const std::string& layer, double near_zero, size_t max_listed) {
  SmallHistogram small_hist{};
  Comparison c;
  const int64_t i0 = row0 * cols, i1 = row1 * cols;
  c.total = i1 - i0;
  const uint16_t near_bits = near_zero_magnitude_bits(near_zero);
  constexpr int64_t kChunk = 4096;
  std::array<int32_t, kChunk> differ;
  std::array<uint16_t, kChunk> dx, dy, ulps;
  compare_detail::PairCounts counts;
  compare_detail::DifferCounts differing_counts;
  int64_t differing_in_lanes = 0;
  for (int64_t at = i0; at < i1; at += kChunk) {
    const int64_t len = std::min(kChunk, i1 - at);
    int64_t differing = 0;
    const int64_t covered =
        compare_detail::scan_bf16_pairs(a.data() + at, b.data() + at, len, near_bits, counts, differ.data(), differing);
    int64_t j = 0;
    for (; j < differing && c.first.size() < max_listed; ++j) {
      const int64_t i = at + differ[static_cast<size_t>(j)];
      add_differing(c, small_hist, i, cols, a[i], b[i], layer, near_zero, max_listed);
    }
    const int64_t rest = differing - j;
    for (int64_t r = 0; r < rest; ++r) {
      const int64_t i = at + differ[static_cast<size_t>(j + r)];
      dx[static_cast<size_t>(r)] = a[i], dy[static_cast<size_t>(r)] = b[i];
    }
    const int64_t in_lanes =
        compare_detail::scan_differing_pairs(dx.data(), dy.data(), rest, near_bits, differing_counts, ulps.data());
    for (int64_t r = 0; r < in_lanes; ++r) {
      const uint16_t ulp = ulps[static_cast<size_t>(r)];
      if (ulp == compare_detail::kNoUlp) continue;
      if (ulp < kSmallUlps) {
        ++small_hist[ulp];
      } else {
        ++c.ulp_histogram[ulp];
      }
    }
    differing_in_lanes += in_lanes;
    for (int64_t r = in_lanes; r < rest; ++r) {
      const int64_t i = at + differ[static_cast<size_t>(j + r)];
      add_differing(c, small_hist, i, cols, a[i], b[i], layer, near_zero, max_listed);
    }
    for (int64_t i = at + covered; i < at + len; ++i) add_pair(c, small_hist, i, cols, a[i], b[i], layer, near_zero, max_listed);
  }
  c.nan_a += counts.nan[0], c.nan_b += counts.nan[1];
  c.inf_a += counts.inf[0], c.inf_b += counts.inf[1];
  c.subnormal_a += counts.subnormal[0], c.subnormal_b += counts.subnormal[1];
  c.nonfinite_pairs += counts.nonfinite_pairs;
  c.finite_pairs += counts.equal_finite + differing_counts.finite_pairs;
  small_hist[0] += counts.equal_finite;
  c.near_zero += counts.equal_near_zero + differing_counts.near_zero;
  c.bitwise_diff += differing_in_lanes;
  c.nonfinite_diff += differing_counts.nonfinite_diff;
  c.signed_zero_diff += differing_counts.signed_zero_diff;
  c.near_zero_diff += differing_counts.near_zero_diff;
  c.max_ulp = std::max(c.max_ulp, differing_counts.max_ulp);
  c.max_rel = std::max(c.max_rel, differing_counts.max_rel);
  c.near_zero_max_abs = std::max(c.near_zero_max_abs, differing_counts.near_zero_max_abs);
  fold_small_histogram(c, small_hist);
  return c;
}

Comparison compare_bf16(std::span<const uint16_t> a, std::span<const uint16_t> b, int64_t rows, int64_t cols,
                        const std::string& layer, const CompareOptions& options) {
  QC_CHECK(static_cast<int64_t>(a.size()) == rows * cols && static_cast<int64_t>(b.size()) == rows * cols,
           "compare_bf16: expected {}x{} elements on both sides, found {} and {}", rows, cols, a.size(), b.size());
  const double near_zero = near_zero_limit(a, options);
  const int64_t total = rows * cols;
  // Large outputs in row blocks on every core, merged in order (so `first` keeps the first elements).
  const int64_t blocks = total < (int64_t{1} << 20) ? 1 : std::min<int64_t>(rows, 4 * resolve_threads(0));
  std::vector<Comparison> parts(static_cast<size_t>(std::max<int64_t>(blocks, 1)));
  const int64_t rows_per_block = blocks ? (rows + blocks - 1) / blocks : 0;
  parallel_for(blocks, 0, [&](int64_t k) {
    const int64_t r0 = std::min(rows, k * rows_per_block), r1 = std::min(rows, (k + 1) * rows_per_block);
    parts[k] = compare_bf16_rows(a, b, r0, r1, cols, layer, near_zero, options.max_listed);
  });
  Comparison c = std::move(parts[0]);
  for (size_t k = 1; k < parts.size(); ++k) c.merge(parts[k], options.max_listed);
  c.total = total;
  return c;
}

std::string describe(const DiffElement& d) {
  return fmt::format("{}[{},{}]: {:.9g} (0x{:04x}) vs {:.9g} (0x{:04x}), {}", d.layer, d.row, d.col, d.a,
                     d.a_bits, d.b, d.b_bits, d.ulp >= 0 ? fmt::format("{} ulp", d.ulp) : std::string("non-finite"));
}

void to_json(nlohmann::json& j, const DiffElement& d) {
  j = {{"layer", d.layer}, {"row", d.row},
       {"col", d.col},     {"a", d.a},
       {"b", d.b},         {"a_bits", fmt::format("0x{:04x}", d.a_bits)},
       {"b_bits", fmt::format("0x{:04x}", d.b_bits)}, {"ulp", d.ulp}};
}

nlohmann::json ulp_histogram_json(const std::map<int64_t, int64_t>& histogram) {
  nlohmann::json hist = nlohmann::json::object();
  for (const auto& [distance, n] : histogram) hist.emplace(std::to_string(distance), n);
  return hist;
}

void to_json(nlohmann::json& j, const Comparison& c) {
  nlohmann::json hist = ulp_histogram_json(c.ulp_histogram);
  j = {{"total", c.total},
       {"bitwise_diff", c.bitwise_diff},
       {"signed_zero_diff", c.signed_zero_diff},
       {"nan", {c.nan_a, c.nan_b}},
       {"inf", {c.inf_a, c.inf_b}},
       {"subnormal", {c.subnormal_a, c.subnormal_b}},
       {"nonfinite_pairs", c.nonfinite_pairs},
       {"nonfinite_diff", c.nonfinite_diff},
       {"finite_pairs", c.finite_pairs},
       {"ulp_histogram", hist},
       {"max_ulp", c.max_ulp},
       {"max_rel", c.max_rel},
       {"near_zero", c.near_zero},
       {"near_zero_diff", c.near_zero_diff},
       {"near_zero_max_abs", c.near_zero_max_abs},
       {"first", c.first}};
}

namespace {

uint16_t bits_from_hex(const nlohmann::json& j) {
  const std::string s = j.get<std::string>();
  size_t used = 0;
  const unsigned long v = std::stoul(s, &used, 16);
  QC_INPUT(used == s.size() && v <= 0xFFFF, "expected a 16-bit pattern such as 0x3f80, found `{}`", s);
  return static_cast<uint16_t>(v);
}

}  // namespace

void from_json(const nlohmann::json& j, DiffElement& d) {
  d.layer = j.at("layer").get<std::string>();
  d.row = j.at("row").get<int64_t>();
  d.col = j.at("col").get<int64_t>();
  d.a_bits = bits_from_hex(j.at("a_bits"));
  d.b_bits = bits_from_hex(j.at("b_bits"));
  d.a = bf16_to_f32(d.a_bits);
  d.b = bf16_to_f32(d.b_bits);
  d.ulp = j.at("ulp").get<int64_t>();
}

void from_json(const nlohmann::json& j, Comparison& c) {
  c = Comparison{};
  c.total = j.at("total").get<int64_t>();
  c.bitwise_diff = j.at("bitwise_diff").get<int64_t>();
  c.signed_zero_diff = j.at("signed_zero_diff").get<int64_t>();
  c.nan_a = j.at("nan").at(0).get<int64_t>(), c.nan_b = j.at("nan").at(1).get<int64_t>();
  c.inf_a = j.at("inf").at(0).get<int64_t>(), c.inf_b = j.at("inf").at(1).get<int64_t>();
  c.subnormal_a = j.at("subnormal").at(0).get<int64_t>(), c.subnormal_b = j.at("subnormal").at(1).get<int64_t>();
  c.nonfinite_pairs = j.at("nonfinite_pairs").get<int64_t>();
  c.nonfinite_diff = j.at("nonfinite_diff").get<int64_t>();
  c.finite_pairs = j.at("finite_pairs").get<int64_t>();
  for (const auto& [distance, n] : j.at("ulp_histogram").items()) c.ulp_histogram[std::stoll(distance)] = n.get<int64_t>();
  c.max_ulp = j.at("max_ulp").get<int64_t>();
  c.max_rel = j.at("max_rel").get<double>();
  c.near_zero = j.at("near_zero").get<int64_t>();
  c.near_zero_diff = j.at("near_zero_diff").get<int64_t>();
  c.near_zero_max_abs = j.at("near_zero_max_abs").get<double>();
  c.first = j.at("first").get<std::vector<DiffElement>>();
}

}  // namespace qc
