// Ranking metrics, isotonic regression, Brier score, merged quantile bins and the cluster
// bootstrap declared in src/stats/stats.hpp. Definitions: docs/statistics.md.
// Test: ./build/tests/qconform_unit_tests --gtest_filter='Stats*' and
//       QCONFORM_BUILD=$PWD/build python3 -m pytest -q tests/peer/test_stats_peer.py
#include "stats/stats.hpp"

#include <algorithm>
#include <boost/math/special_functions/beta.hpp>
#include <cmath>
#include <numeric>
#include <unordered_map>

#include "qconform/error.hpp"

namespace qc::stats {

namespace {

// Neumaier's compensated sum: the error does not grow with n, so our sums agree with numpy's
// pairwise sums far inside the 1e-12 the peer tests ask for.
struct CompensatedSum {
  double sum = 0.0, comp = 0.0;
  void add(double v) {
    double t = sum + v;
    comp += std::abs(sum) >= std::abs(v) ? (sum - t) + v : (v - t) + sum;
    sum = t;
  }
  double value() const { return sum + comp; }
};

void check_labels_weights(std::span<const int> labels, std::size_t n, std::span<const double> weights,
                          const char* what) {
  QC_INPUT(labels.size() == n, "{}: labels: expected {} values (one per score), found {}", what, n, labels.size());
  QC_INPUT(weights.empty() || weights.size() == n, "{}: weights: expected none or {} values, found {}", what, n,
           weights.size());
  for (std::size_t i = 0; i < n; ++i) {
    QC_INPUT(labels[i] == 0 || labels[i] == 1, "{}: labels[{}]: expected 0 or 1, found {}", what, i, labels[i]);
    if (!weights.empty()) {
      QC_INPUT(std::isfinite(weights[i]) && weights[i] >= 0.0, "{}: weights[{}]: expected a finite weight >= 0, found {}",
               what, i, weights[i]);
    }
  }
}

inline double weight_at(std::span<const double> weights, std::size_t i) { return weights.empty() ? 1.0 : weights[i]; }

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

}  // namespace

// --------------------------------------------------------------------------------------------
// Random numbers

std::uint64_t uniform_index(Rng& rng, std::uint64_t n) {
  QC_CHECK(n >= 1, "uniform_index needs n >= 1, got {}", n);
  // 2^64 mod n computed in 64 bits: (2^64 − n) mod n == 2^64 mod n.
  const std::uint64_t rem = (std::uint64_t{0} - n) % n;
  const std::uint64_t limit = std::uint64_t{0} - rem;  // 2^64 − rem (0 means "accept all")
  while (true) {
    std::uint64_t u = rng();
    if (rem == 0 || u < limit) return u % n;
  }
}

std::vector<std::size_t> random_permutation(Rng& rng, std::size_t n) {
  std::vector<std::size_t> p(n);
  std::iota(p.begin(), p.end(), std::size_t{0});
  for (std::size_t i = n; i-- > 1;) {
    std::size_t j = static_cast<std::size_t>(uniform_index(rng, i + 1));
    std::swap(p[i], p[j]);
  }
  return p;
}

// --------------------------------------------------------------------------------------------
// Ranking metrics

RankedScores::RankedScores(std::span<const double> scores) : order_(scores.size()) {
  for (std::size_t i = 0; i < scores.size(); ++i) {
    QC_INPUT(std::isfinite(scores[i]), "scores[{}]: expected a finite score, found {}", i, scores[i]);
  }
  std::iota(order_.begin(), order_.end(), std::size_t{0});
  // Stable so that the order inside a tie group is the input order (it does not affect results).
  std::stable_sort(order_.begin(), order_.end(), [&](std::size_t a, std::size_t b) { return scores[a] > scores[b]; });
  for (std::size_t k = 0; k < order_.size(); ++k) {
    if (k == 0 || scores[order_[k]] != scores[order_[k - 1]]) group_start_.push_back(k);
  }
  group_start_.push_back(order_.size());
}

double RankedScores::roc_auc(std::span<const int> labels, std::span<const double> weights) const {
  check_labels_weights(labels, order_.size(), weights, "roc_auc");
  // Walk the tie groups from the lowest score up, keeping the negative weight strictly below.
  // With unit weights every product and sum is an integer (or half-integer) below 2^53, so the
  // numerator is exact and the result has a single rounding (the final division).
  double neg_below = 0.0, numerator = 0.0, pos_total = 0.0;
  for (std::size_t g = group_start_.size() - 1; g-- > 0;) {
    double pos = 0.0, neg = 0.0;
    for (std::size_t k = group_start_[g]; k < group_start_[g + 1]; ++k) {
      std::size_t i = order_[k];
      (labels[i] == 1 ? pos : neg) += weight_at(weights, i);
    }
    numerator += pos * (neg_below + 0.5 * neg);
    neg_below += neg;
    pos_total += pos;
  }
  if (pos_total <= 0.0 || neg_below <= 0.0) return kNaN;
  return numerator / (pos_total * neg_below);
}

double RankedScores::average_precision(std::span<const int> labels, std::span<const double> weights) const {
  check_labels_weights(labels, order_.size(), weights, "average_precision");
  double pos_total = 0.0;
  for (std::size_t i = 0; i < order_.size(); ++i) {
    if (labels[i] == 1) pos_total += weight_at(weights, i);
  }
  if (pos_total <= 0.0) return kNaN;
  // Thresholds in descending order; each tie group is one threshold (one point of the curve).
  double tp = 0.0, fp = 0.0;
  CompensatedSum ap;
  for (std::size_t g = 0; g + 1 < group_start_.size(); ++g) {
    double pos = 0.0, neg = 0.0;
    for (std::size_t k = group_start_[g]; k < group_start_[g + 1]; ++k) {
      std::size_t i = order_[k];
      (labels[i] == 1 ? pos : neg) += weight_at(weights, i);
    }
    tp += pos;
    fp += neg;
    if (pos > 0.0) ap.add((pos / pos_total) * (tp / (tp + fp)));
  }
  return ap.value();
}

double roc_auc(std::span<const int> labels, std::span<const double> scores, std::span<const double> weights) {
  return RankedScores(scores).roc_auc(labels, weights);
}

double average_precision(std::span<const int> labels, std::span<const double> scores,
                         std::span<const double> weights) {
  return RankedScores(scores).average_precision(labels, weights);
}

// --------------------------------------------------------------------------------------------
// Isotonic regression

double IsotonicFit::predict(double at) const {
  QC_CHECK(!x.empty(), "IsotonicFit::predict on an empty fit");
  if (at <= x.front()) return y.front();
  if (at >= x.back()) return y.back();
  std::size_t hi = static_cast<std::size_t>(std::upper_bound(x.begin(), x.end(), at) - x.begin());
  std::size_t lo = hi - 1;
  if (at == x[lo]) return y[lo];
  double t = (at - x[lo]) / (x[hi] - x[lo]);
  return y[lo] + t * (y[hi] - y[lo]);
}

IsotonicFit isotonic_fit_decreasing(std::span<const double> x, std::span<const double> y,
                                    std::span<const double> weights) {
  const std::size_t n = x.size();
  QC_INPUT(y.size() == n, "isotonic: y: expected {} values (one per x), found {}", n, y.size());
  QC_INPUT(weights.empty() || weights.size() == n, "isotonic: weights: expected none or {} values, found {}", n,
           weights.size());
  QC_INPUT(n > 0, "isotonic: expected at least one observation, found none");
  for (std::size_t i = 0; i < n; ++i) {
    QC_INPUT(std::isfinite(x[i]) && std::isfinite(y[i]), "isotonic: observation {}: expected finite x and y, found {} {}",
             i, x[i], y[i]);
    QC_INPUT(weights.empty() || (std::isfinite(weights[i]) && weights[i] > 0.0),
             "isotonic: weights[{}]: expected a finite weight > 0, found {}", i, weights[i]);
  }
  std::vector<std::size_t> order(n);
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return x[a] < x[b]; });

  // 1. Merge equal x into one point: y = weighted mean, weight = total (sklearn's `_make_unique`).
  IsotonicFit fit;
  std::vector<double> wy;
  for (std::size_t k = 0; k < n; ++k) {
    std::size_t i = order[k];
    double w = weight_at(weights, i);
    if (fit.x.empty() || x[i] != fit.x.back()) {
      fit.x.push_back(x[i]);
      fit.weight.push_back(0.0);
      wy.push_back(0.0);
    }
    fit.weight.back() += w;
    wy.back() += w * y[i];
  }
  const std::size_t m = fit.x.size();

  // 2. Pool adjacent violators for a non-increasing fit: push points left to right as blocks and
  //    merge the last two blocks while the earlier one's mean is below the later one's.
  struct Block {
    double sum_wy, sum_w;
    std::size_t first, count;
    double mean() const { return sum_wy / sum_w; }
  };
  std::vector<Block> blocks;
  for (std::size_t j = 0; j < m; ++j) {
    blocks.push_back({wy[j], fit.weight[j], j, 1});
    while (blocks.size() >= 2 && blocks[blocks.size() - 2].mean() <= blocks.back().mean()) {
      Block last = blocks.back();
      blocks.pop_back();
      blocks.back().sum_wy += last.sum_wy;
      blocks.back().sum_w += last.sum_w;
      blocks.back().count += last.count;
    }
  }
  fit.y.assign(m, 0.0);
  for (const Block& b : blocks) {
    double v = b.mean();
    for (std::size_t j = b.first; j < b.first + b.count; ++j) fit.y[j] = v;
  }
  return fit;
}

std::vector<double> isotonic_decreasing(std::span<const double> x, std::span<const double> y,
                                        std::span<const double> weights) {
  IsotonicFit fit = isotonic_fit_decreasing(x, y, weights);
  std::vector<double> out(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    std::size_t j = static_cast<std::size_t>(std::lower_bound(fit.x.begin(), fit.x.end(), x[i]) - fit.x.begin());
    out[i] = fit.y[j];  // x[i] is one of the fitted points
  }
  return out;
}

// --------------------------------------------------------------------------------------------
// Brier score

double brier_score(std::span<const int> labels, std::span<const double> probs, std::span<const double> weights) {
  check_labels_weights(labels, probs.size(), weights, "brier_score");
  CompensatedSum num, den;
  for (std::size_t i = 0; i < probs.size(); ++i) {
    QC_INPUT(std::isfinite(probs[i]) && probs[i] >= 0.0 && probs[i] <= 1.0,
             "brier_score: probs[{}]: expected a probability in [0, 1], found {}", i, probs[i]);
    double w = weight_at(weights, i);
    double d = static_cast<double>(labels[i]) - probs[i];
    num.add(w * (d * d));
    den.add(w);
  }
  if (!(den.value() > 0.0)) return kNaN;
  return num.value() / den.value();
}

// --------------------------------------------------------------------------------------------
// Merged quantile bins

std::size_t Bins::bin_of(double x) const {
  return static_cast<std::size_t>(std::upper_bound(edges.begin(), edges.end(), x) - edges.begin());
}

Bins quantile_bins_merged(std::span<const double> x, std::size_t initial_bins, std::size_t min_support) {
  for (std::size_t i = 0; i < x.size(); ++i) {
    QC_INPUT(std::isfinite(x[i]), "quantile_bins_merged: x[{}]: expected a finite value, found {}", i, x[i]);
  }
  std::vector<double> s(x.begin(), x.end());
  std::sort(s.begin(), s.end());
  const std::size_t n = s.size();
  const std::size_t B = std::max<std::size_t>(initial_bins, 1);

  // 1. Candidate edges at order statistics; an edge equal to the minimum would open an empty
  //    first bin, duplicates would open empty bins: both are dropped.
  Bins bins;
  for (std::size_t j = 1; j < B && n > 0; ++j) {
    double e = s[(j * n) / B];
    if (e == s.front()) continue;
    if (!bins.edges.empty() && e == bins.edges.back()) continue;
    bins.edges.push_back(e);
  }
  auto recount = [&] {
    bins.support.clear();
    std::size_t prev = 0;
    for (double e : bins.edges) {
      std::size_t pos = static_cast<std::size_t>(std::lower_bound(s.begin(), s.end(), e) - s.begin());
      bins.support.push_back(pos - prev);
      prev = pos;
    }
    bins.support.push_back(n - prev);
  };
  recount();

  // 2. Merge the smallest under-supported bin into its smaller neighbour until none is left.
  const std::size_t need = std::max<std::size_t>(min_support, 1);
  while (bins.support.size() > 1) {
    std::size_t b = bins.support.size();
    for (std::size_t k = 0; k < bins.support.size(); ++k) {
      if (bins.support[k] < need && (b == bins.support.size() || bins.support[k] < bins.support[b])) b = k;
    }
    if (b == bins.support.size()) break;
    bool left;
    if (b == 0) {
      left = false;
    } else if (b + 1 == bins.support.size()) {
      left = true;
    } else {
      left = bins.support[b - 1] <= bins.support[b + 1];
    }
    std::size_t a = left ? b - 1 : b;  // merge bins a and a+1: drop the edge between them
    bins.support[a] += bins.support[a + 1];
    bins.support.erase(bins.support.begin() + static_cast<std::ptrdiff_t>(a + 1));
    bins.edges.erase(bins.edges.begin() + static_cast<std::ptrdiff_t>(a));
  }

  // Observed range in each bin (NaN for an empty bin, which only happens when n == 0).
  std::size_t start = 0;
  for (std::size_t b = 0; b < bins.support.size(); ++b) {
    std::size_t end = start + bins.support[b];
    bins.x_min.push_back(end > start ? s[start] : kNaN);
    bins.x_max.push_back(end > start ? s[end - 1] : kNaN);
    start = end;
  }
  return bins;
}

// --------------------------------------------------------------------------------------------
// Cluster bootstrap

double quantile_sorted(std::span<const double> sorted, double q) {
  if (sorted.empty()) return kNaN;
  QC_CHECK(q >= 0.0 && q <= 1.0, "quantile_sorted: q = {} outside [0, 1]", q);
  double h = static_cast<double>(sorted.size() - 1) * q;
  std::size_t lo = static_cast<std::size_t>(std::floor(h));
  if (lo + 1 >= sorted.size()) return sorted.back();
  double frac = h - static_cast<double>(lo);
  return sorted[lo] + frac * (sorted[lo + 1] - sorted[lo]);
}

BootstrapCI cluster_bootstrap_ci(std::span<const std::int64_t> cluster,
                                 const std::function<double(std::span<const double>)>& statistic,
                                 std::size_t n_resamples, double level, std::uint64_t seed) {
  QC_INPUT(level > 0.0 && level < 1.0, "cluster_bootstrap_ci: level: expected a value in (0, 1), found {}", level);
  BootstrapCI ci;
  ci.level = level;
  ci.n_resamples = n_resamples;
  ci.seed = seed;
  std::unordered_map<std::int64_t, std::size_t> dense_of;
  std::vector<std::size_t> dense(cluster.size());
  for (std::size_t i = 0; i < cluster.size(); ++i) {
    auto [it, inserted] = dense_of.try_emplace(cluster[i], dense_of.size());
    dense[i] = it->second;
  }
  const std::size_t G = dense_of.size();
  if (G == 0) return ci;
  Rng rng = make_rng(seed);
  std::vector<double> count(G), weights(cluster.size());
  for (std::size_t r = 0; r < n_resamples; ++r) {
    std::fill(count.begin(), count.end(), 0.0);
    for (std::size_t d = 0; d < G; ++d) count[uniform_index(rng, G)] += 1.0;
    for (std::size_t i = 0; i < cluster.size(); ++i) weights[i] = count[dense[i]];
    double v = statistic(weights);
    if (std::isfinite(v)) ci.replicates.push_back(v);
  }
  ci.n_valid = ci.replicates.size();
  std::vector<double> sorted = ci.replicates;
  std::sort(sorted.begin(), sorted.end());
  ci.lo = quantile_sorted(sorted, (1.0 - level) / 2.0);
  ci.hi = quantile_sorted(sorted, (1.0 + level) / 2.0);
  return ci;
}

SmoothedRate beta11_rate(double k, double n, double level) {
  QC_CHECK(k >= 0.0 && n >= k, "beta11_rate: need 0 <= k <= n, got k={} n={}", k, n);
  double a = k + 1.0, b = n - k + 1.0;
  return {a / (a + b), boost::math::ibeta_inv(a, b, (1.0 - level) / 2.0),
          boost::math::ibeta_inv(a, b, (1.0 + level) / 2.0)};
}

}  // namespace qc::stats
