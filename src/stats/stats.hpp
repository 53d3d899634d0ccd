// Statistics for the token-transfer analysis (check C7) and the report: ranking metrics with
// ties, isotonic regression, Brier score, merged quantile bins, a cluster bootstrap, and the one
// seeded random number generator they share.
//
// Every function is pure (inputs are spans, results are values) and deterministic: the only
// randomness comes from `qc::Rng`, seeded explicitly. Definitions, tie rules and seeding are
// written out in docs/statistics.md; the peer tests (tests/peer/test_stats_peer.py) hold
// `roc_auc`, `average_precision`, `isotonic_decreasing` and `brier_score` to scikit-learn at
// 1e-12 on data with ties.
//
// Conventions: `labels` are 0/1 (1 = positive, e.g. "the token flipped"); `scores` rank
// positives high (pass `-margin` to let a small margin predict a flip); `weights` may be empty
// (every weight 1) or hold one finite weight >= 0 per observation. Metrics that are undefined on
// the data (no positive or no negative) return NaN, never a number that could pass a tolerance.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <random>
#include <span>
#include <vector>

namespace qc::stats {

// ---------------------------------------------------------------------------------------------
// Random numbers
// ---------------------------------------------------------------------------------------------

// The generator: `std::mt19937_64` constructed directly from the 64-bit seed
// (`std::mt19937_64(seed)`), whose output sequence the C++ standard fixes bit for bit. We never
// use `std::uniform_int_distribution` (its algorithm differs between standard libraries); the
// two draws below are spelled out so that a seed reproduces the same resamples everywhere.
using Rng = std::mt19937_64;

inline Rng make_rng(std::uint64_t seed) { return Rng(seed); }

// Uniform integer in [0, n), n >= 1, by rejection: draws `u = rng()` until
// `u < 2^64 - (2^64 mod n)` and returns `u mod n` (no modulo bias).
std::uint64_t uniform_index(Rng& rng, std::uint64_t n);

// Fisher–Yates: for i = n-1 down to 1, swap element i with element `uniform_index(rng, i+1)`.
// Returns that permutation of 0..n-1.
std::vector<std::size_t> random_permutation(Rng& rng, std::size_t n);

// ---------------------------------------------------------------------------------------------
// Ranking metrics
// ---------------------------------------------------------------------------------------------

// Scores sorted once (descending) with their tie groups, so that AUC and AP can be recomputed
// in O(n) for many weightings of the same observations (the cluster bootstrap resamples by
// weighting each observation with its cluster's multiplicity).
class RankedScores {
 public:
  explicit RankedScores(std::span<const double> scores);  // scores must be finite
  std::size_t size() const { return order_.size(); }
  // Mann–Whitney AUC: P(score_pos > score_neg) + 1/2 P(tie), weighted.
  double roc_auc(std::span<const int> labels, std::span<const double> weights = {}) const;
  // Average precision over distinct thresholds (tied scores form one threshold).
  double average_precision(std::span<const int> labels, std::span<const double> weights = {}) const;

 private:
  std::vector<std::size_t> order_;        // indices by descending score
  std::vector<std::size_t> group_start_;  // start of each tie group in `order_`, plus size()
};

// ROC-AUC with ties counted 1/2 (the Mann–Whitney statistic divided by n_pos·n_neg):
//   AUC = Σ_groups w⁺_g (W⁻_below(g) + ½ w⁻_g) / (W⁺ W⁻),
// groups = sets of equal score, W⁻_below(g) = negative weight with a score below group g.
// Equals `sklearn.metrics.roc_auc_score` (which integrates the ROC curve by trapezoids).
double roc_auc(std::span<const int> labels, std::span<const double> scores, std::span<const double> weights = {});

// Average precision with grouped ties, as `sklearn.metrics.average_precision_score`:
//   AP = Σ_k (R_k − R_{k−1}) P_k over distinct thresholds t_k in descending order, where
//   P_k = TP_k / (TP_k + FP_k) and R_k = TP_k / W⁺ count every observation with score >= t_k.
double average_precision(std::span<const int> labels, std::span<const double> scores,
                         std::span<const double> weights = {});

// ---------------------------------------------------------------------------------------------
// Isotonic regression
// ---------------------------------------------------------------------------------------------

// A fitted non-increasing step function, as `sklearn.isotonic.IsotonicRegression(increasing=False)`
// stores it: the distinct x values (ascending) and the fitted value at each.
struct IsotonicFit {
  std::vector<double> x;       // distinct x, ascending
  std::vector<double> y;       // fitted value at each x, non-increasing
  std::vector<double> weight;  // total weight at each x
  // Linear interpolation between the fitted points, clipped to the end values outside
  // [x.front(), x.back()] (sklearn's `out_of_bounds="clip"`).
  double predict(double at) const;
};

// Weighted least-squares non-increasing fit of y on x by pool adjacent violators. Observations
// with equal x are first merged into one point (y = weighted mean, weight = sum), as sklearn does.
// Weights must be finite and > 0 (sklearn drops zero weights; we refuse them).
IsotonicFit isotonic_fit_decreasing(std::span<const double> x, std::span<const double> y,
                                    std::span<const double> weights = {});

// The fitted value at every input x, in input order (sklearn's `fit(x, y, w).predict(x)`).
std::vector<double> isotonic_decreasing(std::span<const double> x, std::span<const double> y,
                                        std::span<const double> weights = {});

// ---------------------------------------------------------------------------------------------
// Probability scores
// ---------------------------------------------------------------------------------------------

// Brier score: Σ w_i (y_i − p_i)² / Σ w_i (sklearn's `brier_score_loss` for binary y), with
// compensated (Neumaier) summation.
double brier_score(std::span<const int> labels, std::span<const double> probs, std::span<const double> weights = {});

// ---------------------------------------------------------------------------------------------
// Merged quantile bins
// ---------------------------------------------------------------------------------------------

// Bins over the real line: bin b holds lo_b <= x < hi_b with lo_0 = −inf and hi_last = +inf;
// `edges` are the interior boundaries (ascending, distinct), so there are edges.size()+1 bins.
struct Bins {
  std::vector<double> edges;
  std::vector<std::size_t> support;  // observations per bin on the data the bins were built from
  std::vector<double> x_min, x_max;  // smallest and largest observed x in each bin
  std::size_t bin_of(double x) const;  // index of the bin holding x
};

// Quantile bins merged to a minimum support. Steps (docs/statistics.md):
// 1. Sort x; candidate edges e_j = x_(⌊j·n/B⌋) (0-based order statistics), j = 1..B−1; drop
//    duplicates. Ties are never split: equal x always share a bin.
// 2. While some bin has support < max(min_support, 1): take the smallest such bin (the leftmost
//    among equals) and merge it with its neighbour of smaller support (the left one on a tie).
// With n < min_support everything ends in one bin.
Bins quantile_bins_merged(std::span<const double> x, std::size_t initial_bins, std::size_t min_support);

// ---------------------------------------------------------------------------------------------
// Cluster bootstrap
// ---------------------------------------------------------------------------------------------

struct BootstrapCI {
  double lo = std::numeric_limits<double>::quiet_NaN();
  double hi = std::numeric_limits<double>::quiet_NaN();
  double level = 0.95;
  std::size_t n_resamples = 0;  // requested
  std::size_t n_valid = 0;      // replicates whose statistic was finite
  std::uint64_t seed = 0;
  std::vector<double> replicates;  // the finite replicate values, in draw order
};

// Percentile bootstrap over clusters. `cluster[i]` is the cluster of observation i (any
// integers; G = number of distinct values, ordered by first appearance). Each replicate draws G
// clusters with replacement (`uniform_index(rng, G)`, G draws, rng = make_rng(seed)), gives
// every observation the multiplicity of its cluster as weight, and evaluates `statistic(weights)`.
// Non-finite replicates (e.g. an AUC with no positive drawn) are skipped and counted. The interval
// is the (1−level)/2 and (1+level)/2 quantiles of the finite replicates, linear interpolation
// between order statistics (numpy's default `quantile` method).
BootstrapCI cluster_bootstrap_ci(std::span<const std::int64_t> cluster,
                                 const std::function<double(std::span<const double>)>& statistic,
                                 std::size_t n_resamples, double level, std::uint64_t seed);

// Quantile q in [0,1] of sorted values, numpy's linear method: h = (n−1)q, x_⌊h⌋ + (h−⌊h⌋)(x_⌊h⌋+1 − x_⌊h⌋).
double quantile_sorted(std::span<const double> sorted, double q);

// Beta(1,1)-smoothed rate (k+1)/(n+2) and the equal-tailed `level` interval of the Beta(k+1, n−k+1)
// posterior.
struct SmoothedRate {
  double p, lo, hi;
};
SmoothedRate beta11_rate(double k, double n, double level = 0.95);

}  // namespace qc::stats
