// Unit tests of src/stats/stats.hpp against second implementations written differently
// (brute-force pair counts, the min–max formula for isotonic regression, materialized bootstrap
// resamples, closed-form Beta quantiles). The scikit-learn peers are in tests/peer/test_stats_peer.py.
// Run: ./build/tests/qconform_unit_tests --gtest_filter='Stats*'
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <set>

#include "qconform/error.hpp"
#include "stats/stats.hpp"

namespace st = qc::stats;

namespace {

std::uint64_t bits(double v) {
  std::uint64_t b;
  std::memcpy(&b, &v, sizeof b);
  return b;
}

// NaN never passes: the comparison is written so that a NaN on either side fails.
::testing::AssertionResult near(double ours, double expected, double tol, const std::string& what) {
  if (std::isfinite(ours) && std::isfinite(expected) && std::abs(ours - expected) <= tol) {
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure() << what << ": ours " << ours << " (0x" << std::hex << bits(ours)
                                       << ") expected " << expected << " (0x" << bits(expected) << std::dec
                                       << ") tol " << tol;
}

struct Case {
  std::vector<double> score, w;
  std::vector<int> y;
};

// Scores on a coarse grid (many ties), labels correlated with the score, optional weights.
Case random_case(st::Rng& rng, std::size_t n, bool weighted) {
  Case c;
  for (std::size_t i = 0; i < n; ++i) {
    double s = static_cast<double>(st::uniform_index(rng, 7));
    c.score.push_back(s);
    c.y.push_back(st::uniform_index(rng, 10) < 2 + static_cast<std::uint64_t>(s) ? 1 : 0);
    if (weighted) c.w.push_back(0.25 * static_cast<double>(1 + st::uniform_index(rng, 8)));
  }
  c.y[0] = 1;
  c.y[1] = 0;
  return c;
}

double w_at(const Case& c, std::size_t i) { return c.w.empty() ? 1.0 : c.w[i]; }

double brute_auc(const Case& c) {
  double num = 0, pos = 0, neg = 0;
  for (std::size_t i = 0; i < c.y.size(); ++i) {
    (c.y[i] ? pos : neg) += w_at(c, i);
    for (std::size_t j = 0; j < c.y.size(); ++j) {
      if (c.y[i] == 1 && c.y[j] == 0) {
        double wij = w_at(c, i) * w_at(c, j);
        num += c.score[i] > c.score[j] ? wij : c.score[i] == c.score[j] ? 0.5 * wij : 0.0;
      }
    }
  }
  return num / (pos * neg);
}

double brute_ap(const Case& c) {
  std::set<double, std::greater<>> thresholds(c.score.begin(), c.score.end());
  double total_pos = 0;
  for (std::size_t i = 0; i < c.y.size(); ++i) total_pos += c.y[i] * w_at(c, i);
  double ap = 0, prev_recall = 0;
  for (double t : thresholds) {
    double tp = 0, fp = 0;
    for (std::size_t i = 0; i < c.y.size(); ++i) {
      if (c.score[i] >= t) (c.y[i] ? tp : fp) += w_at(c, i);
    }
    double recall = tp / total_pos;
    ap += (recall - prev_recall) * tp / (tp + fp);
    prev_recall = recall;
  }
  return ap;
}

}  // namespace

TEST(StatsRng, Mt19937_64IsTheStandardSequence) {
  // The C++ standard ([rand.predef]) fixes the 10000th output of a default-constructed engine.
  st::Rng rng = st::make_rng(5489u);
  std::uint64_t v = 0;
  for (int i = 0; i < 10000; ++i) v = rng();
  EXPECT_EQ(v, 9981545732273789042ull);
}

TEST(StatsRng, UniformIndexAndPermutation) {
  st::Rng rng = st::make_rng(1);
  std::vector<int> count(6, 0);
  for (int i = 0; i < 60000; ++i) ++count[st::uniform_index(rng, 6)];
  for (int k = 0; k < 6; ++k) EXPECT_NEAR(count[k], 10000, 400) << "value " << k;  // ~4 sd
  auto p = st::random_permutation(rng, 50);
  std::vector<std::size_t> sorted = p;
  std::sort(sorted.begin(), sorted.end());
  for (std::size_t i = 0; i < 50; ++i) EXPECT_EQ(sorted[i], i);
  st::Rng r1 = st::make_rng(99), r2 = st::make_rng(99);
  EXPECT_EQ(st::random_permutation(r1, 20), st::random_permutation(r2, 20));
}

TEST(StatsRanking, AucAndApEqualBruteForceWithTiesAndWeights) {
  st::Rng rng = st::make_rng(42);
  for (int k = 0; k < 200; ++k) {
    Case c = random_case(rng, 2 + st::uniform_index(rng, 80), k % 2 == 1);
    std::string id = "case " + std::to_string(k) + " n=" + std::to_string(c.y.size());
    EXPECT_TRUE(near(st::roc_auc(c.y, c.score, c.w), brute_auc(c), 1e-13, "auc " + id));
    EXPECT_TRUE(near(st::average_precision(c.y, c.score, c.w), brute_ap(c), 1e-13, "ap " + id));
  }
}

TEST(StatsRanking, UndefinedIsNaNAndBadLabelsAreInputErrors) {
  std::vector<double> s{1, 2, 3};
  std::vector<int> all_pos{1, 1, 1}, bad{0, 2, 1};
  EXPECT_TRUE(std::isnan(st::roc_auc(all_pos, s)));
  EXPECT_THROW(st::roc_auc(bad, s), qc::Error);
  std::vector<double> nan_score{1, NAN, 3};
  std::vector<int> y{0, 1, 1};
  EXPECT_THROW(st::roc_auc(y, nan_score), qc::Error);
}

namespace {
// Min–max formula for the weighted non-increasing isotonic fit on distinct sorted x:
// fit_j = min_{i<=j} max_{k>=j} Av(i..k).
std::vector<double> minmax_isotonic(const std::vector<double>& y, const std::vector<double>& w) {
  std::size_t m = y.size();
  std::vector<double> fit(m);
  for (std::size_t j = 0; j < m; ++j) {
    double best = INFINITY;
    for (std::size_t i = 0; i <= j; ++i) {
      double inner = -INFINITY;
      for (std::size_t k = j; k < m; ++k) {
        double sw = 0, swy = 0;
        for (std::size_t t = i; t <= k; ++t) {
          sw += w[t];
          swy += w[t] * y[t];
        }
        inner = std::max(inner, swy / sw);
      }
      best = std::min(best, inner);
    }
    fit[j] = best;
  }
  return fit;
}
}  // namespace

TEST(StatsIsotonic, EqualsMinMaxFormulaWithTiedX) {
  st::Rng rng = st::make_rng(3);
  for (int k = 0; k < 100; ++k) {
    std::size_t n = 1 + st::uniform_index(rng, 40);
    std::vector<double> x, y, w;
    for (std::size_t i = 0; i < n; ++i) {
      x.push_back(static_cast<double>(st::uniform_index(rng, 12)));
      y.push_back(static_cast<double>(st::uniform_index(rng, 1000)) / 100.0 - 0.3 * x.back());
      w.push_back(0.5 + static_cast<double>(st::uniform_index(rng, 4)));
    }
    // Reference: merge tied x by weighted mean, then the min–max formula.
    std::vector<double> ux(x), uy, uw;
    std::sort(ux.begin(), ux.end());
    ux.erase(std::unique(ux.begin(), ux.end()), ux.end());
    for (double v : ux) {
      double sw = 0, swy = 0;
      for (std::size_t i = 0; i < n; ++i) {
        if (x[i] == v) {
          sw += w[i];
          swy += w[i] * y[i];
        }
      }
      uy.push_back(swy / sw);
      uw.push_back(sw);
    }
    std::vector<double> ref = minmax_isotonic(uy, uw);
    std::vector<double> ours = st::isotonic_decreasing(x, y, w);
    for (std::size_t i = 0; i < n; ++i) {
      std::size_t j = static_cast<std::size_t>(std::lower_bound(ux.begin(), ux.end(), x[i]) - ux.begin());
      EXPECT_TRUE(near(ours[i], ref[j], 1e-12, "isotonic case " + std::to_string(k) + " i=" + std::to_string(i)));
    }
    st::IsotonicFit fit = st::isotonic_fit_decreasing(x, y, w);
    for (std::size_t j = 1; j < fit.y.size(); ++j) EXPECT_LE(fit.y[j], fit.y[j - 1]) << "case " << k;
  }
}

TEST(StatsIsotonic, PredictInterpolatesAndClips) {
  std::vector<double> x{0, 1, 2, 3}, y{1, 1, 0, 0};
  st::IsotonicFit fit = st::isotonic_fit_decreasing(x, y);
  EXPECT_EQ(fit.predict(-5), 1.0);
  EXPECT_EQ(fit.predict(1.5), 0.5);
  EXPECT_EQ(fit.predict(9), 0.0);
  std::vector<double> zero_w{1, 0, 1, 1};
  EXPECT_THROW(st::isotonic_fit_decreasing(x, y, zero_w), qc::Error);
}

TEST(StatsBrier, DefinitionAndRange) {
  std::vector<int> y{1, 0, 1, 1};
  std::vector<double> p{0.9, 0.2, 0.5, 1.0}, w{1, 2, 3, 4};
  EXPECT_TRUE(near(st::brier_score(y, p), (0.01 + 0.04 + 0.25 + 0.0) / 4, 1e-15, "brier"));
  EXPECT_TRUE(near(st::brier_score(y, p, w), (0.01 + 0.08 + 0.75) / 10, 1e-15, "weighted brier"));
  std::vector<double> bad{0.9, 1.2, 0.5, 1.0};
  EXPECT_THROW(st::brier_score(y, bad), qc::Error);
}

TEST(StatsBins, TiesNeverSplitAndSupportHolds) {
  st::Rng rng = st::make_rng(8);
  for (int k = 0; k < 100; ++k) {
    std::size_t n = 1 + st::uniform_index(rng, 500);
    std::vector<double> x;
    for (std::size_t i = 0; i < n; ++i) x.push_back(static_cast<double>(st::uniform_index(rng, 25)) * 0.125);
    std::size_t min_support = st::uniform_index(rng, 80);
    st::Bins b = st::quantile_bins_merged(x, 10, min_support);
    ASSERT_EQ(b.support.size(), b.edges.size() + 1);
    std::vector<std::size_t> count(b.support.size(), 0);
    for (double v : x) ++count[b.bin_of(v)];
    EXPECT_EQ(count, b.support) << "case " << k;
    for (std::size_t j = 0; j < b.support.size(); ++j) {
      if (n >= std::max<std::size_t>(min_support, 1)) {
        EXPECT_GE(b.support[j], std::max<std::size_t>(min_support, 1));
      }
      if (j > 0) {
        EXPECT_LT(b.x_max[j - 1], b.x_min[j]) << "a tie split across bins " << j - 1 << "," << j;
      }
    }
  }
}

TEST(StatsBootstrap, WeightedReplicatesEqualMaterializedResamples) {
  st::Rng data_rng = st::make_rng(17);
  Case c = random_case(data_rng, 300, false);
  std::vector<std::int64_t> cluster;
  for (std::size_t i = 0; i < 300; ++i) cluster.push_back(static_cast<std::int64_t>(100 + i / 15));  // 20 clusters
  st::RankedScores ranked(c.score);
  st::BootstrapCI ci = st::cluster_bootstrap_ci(
      cluster, [&](std::span<const double> w) { return ranked.roc_auc(c.y, w); }, 200, 0.9, 4242);
  ASSERT_EQ(ci.n_valid, 200u);
  // Second implementation: draw the same clusters, copy their observations, and score the copy.
  st::Rng rng = st::make_rng(4242);
  std::vector<double> reps;
  for (int r = 0; r < 200; ++r) {
    std::vector<double> s;
    std::vector<int> y;
    for (int d = 0; d < 20; ++d) {
      std::uint64_t g = st::uniform_index(rng, 20);
      for (std::size_t i = g * 15; i < g * 15 + 15; ++i) {
        s.push_back(c.score[i]);
        y.push_back(c.y[i]);
      }
    }
    reps.push_back(st::roc_auc(y, s));
    EXPECT_TRUE(near(ci.replicates[static_cast<std::size_t>(r)], reps.back(), 1e-12, "replicate " + std::to_string(r)));
  }
  std::sort(reps.begin(), reps.end());
  // numpy linear quantile at 0.05 and 0.95 of 200 values: h = 199 q.
  double h = 199 * 0.05;
  double lo = reps[9] + (h - 9) * (reps[10] - reps[9]);
  EXPECT_TRUE(near(ci.lo, lo, 1e-12, "ci lo"));
  EXPECT_LE(ci.lo, ci.hi);
  st::BootstrapCI again = st::cluster_bootstrap_ci(
      cluster, [&](std::span<const double> w) { return ranked.roc_auc(c.y, w); }, 200, 0.9, 4242);
  EXPECT_EQ(bits(again.lo), bits(ci.lo));
  EXPECT_EQ(bits(again.hi), bits(ci.hi));
}

TEST(StatsBeta, SmoothedRateAndClosedFormQuantiles) {
  st::SmoothedRate r0 = st::beta11_rate(0, 0);
  EXPECT_TRUE(near(r0.p, 0.5, 0, "p(0/0)"));
  EXPECT_TRUE(near(r0.lo, 0.025, 1e-14, "Beta(1,1) 2.5%"));
  EXPECT_TRUE(near(r0.hi, 0.975, 1e-14, "Beta(1,1) 97.5%"));
  // k = 0 of n: posterior Beta(1, n+1), quantile q = 1 − (1−q)^(1/(n+1)).
  st::SmoothedRate r = st::beta11_rate(0, 40);
  EXPECT_TRUE(near(r.p, 1.0 / 42, 1e-16, "p(0/40)"));
  EXPECT_TRUE(near(r.hi, 1 - std::pow(0.025, 1.0 / 41), 1e-13, "Beta(1,41) 97.5%"));
}
