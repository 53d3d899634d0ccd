// Fits of prevalence versus depth (src/stats/fits.cpp): recovery of known laws from seeded
// binomial draws, the deviance against a direct log-likelihood-ratio formula, the chi-square
// test against the full 2xR Pearson sum, and Clopper–Pearson bounds against their defining
// binomial tail equations (Boost.Math's binomial distribution, not the beta quantiles used).
#include <gtest/gtest.h>

#include <boost/math/distributions/binomial.hpp>

#include <cmath>
#include <random>

#include "qconform/error.hpp"
#include "stats/fits.hpp"

namespace st = qc::stats;

namespace {

const std::vector<double> kKs{512, 1024, 2048, 4096, 8192, 16384, 32768};
constexpr int64_t kCell = 512 * 1024;

// Counts per seed drawn from p(K); returns the pooled series and fills `per_seed`.
st::BinomialSeries draw(const std::function<double(double)>& p, int seeds, uint64_t rng_seed,
                        std::vector<st::BinomialSeries>* per_seed = nullptr) {
  std::mt19937_64 rng(rng_seed);
  st::BinomialSeries pooled;
  pooled.k = kKs;
  pooled.count.assign(kKs.size(), 0);
  pooled.total.assign(kKs.size(), 0);
  for (int s = 0; s < seeds; ++s) {
    st::BinomialSeries one;
    one.k = kKs;
    for (size_t i = 0; i < kKs.size(); ++i) {
      std::binomial_distribution<int64_t> b(kCell, p(kKs[i]));
      one.count.push_back(b(rng));
      one.total.push_back(kCell);
      pooled.count[i] += one.count[i];
      pooled.total[i] += kCell;
    }
    if (per_seed) per_seed->push_back(one);
  }
  return pooled;
}

const st::ModelFit& model(const st::FitReport& r, st::FitModel m) {
  for (const auto& f : r.models) {
    if (f.model == m) return f;
  }
  throw std::runtime_error("model missing");
}

}  // namespace

TEST(SweepFits, RecoversSaturationLawAndWinsHeldOut) {
  std::vector<st::BinomialSeries> seeds;
  const auto s = draw([](double k) { return 1 - std::exp(-0.004 * std::pow(k, 0.52)); }, 5, 42, &seeds);
  const st::FitReport r = st::fit_all(s, seeds);
  const st::ModelFit& sat = model(r, st::FitModel::saturation);
  EXPECT_TRUE(sat.converged) << sat.note;
  EXPECT_NEAR(sat.params[1], 0.52, 0.01) << "alpha";
  EXPECT_NEAR(sat.params[0], 0.004, 0.0004) << "c";
  EXPECT_EQ(r.winner, "saturation");
  ASSERT_TRUE(r.saturation_alpha.has_value());
  EXPECT_EQ(r.saturation_alpha->leave_one_out.size(), 5u);
  EXPECT_NEAR(r.saturation_alpha->mean, 0.52, 0.01);
  EXPECT_GT(r.saturation_alpha->se, 0.0);
  EXPECT_LT(r.saturation_alpha->se, 0.01);
  // The fit is an optimum: nudging either parameter raises the deviance.
  for (int j = 0; j < 2; ++j) {
    for (double f : {1 - 1e-5, 1 + 1e-5}) {
      auto p = sat.params;
      p[static_cast<size_t>(j)] *= f;
      std::vector<double> pr;
      for (double k : s.k) pr.push_back(st::fit_predict(st::FitModel::saturation, p, k));
      EXPECT_GT(st::binomial_deviance(s, pr), sat.deviance) << "param " << j << " factor " << f;
    }
  }
}

TEST(SweepFits, RecoversPowerAndLinearLaws) {
  const auto pw = draw([](double k) { return 2e-4 * std::pow(k, 0.6); }, 5, 7);
  const st::FitReport rp = st::fit_all(pw);
  EXPECT_NEAR(model(rp, st::FitModel::power).params[1], 0.6, 0.01);
  EXPECT_NEAR(model(rp, st::FitModel::power).params[0], 2e-4, 2e-5);
  EXPECT_EQ(rp.winner, "power");
  const auto ln = draw([](double k) { return 0.01 + 4e-6 * k; }, 5, 9);
  const st::FitReport rl = st::fit_all(ln);
  EXPECT_NEAR(model(rl, st::FitModel::linear).params[0], 0.01, 5e-4);
  EXPECT_NEAR(model(rl, st::FitModel::linear).params[1], 4e-6, 5e-8);
  EXPECT_EQ(rl.winner, "linear");
  // The constant model's MLE is the pooled rate, exactly.
  double sx = 0, sn = 0;
  for (size_t i = 0; i < ln.size(); ++i) sx += static_cast<double>(ln.count[i]), sn += static_cast<double>(ln.total[i]);
  EXPECT_DOUBLE_EQ(model(rl, st::FitModel::constant).params[0], sx / sn);
}

TEST(SweepFits, DevianceMatchesLikelihoodRatio) {
  // D = 2 (lnL(saturated) − lnL(p)), computed directly with std::log (0 ln 0 = 0).
  const std::vector<std::tuple<int64_t, int64_t, double>> cases{
      {3, 1000, 0.002}, {0, 1000, 0.01}, {1000, 1000, 0.9}, {500, 1000, 0.5}, {7, 2621440, 2.5e-6}};
  for (auto [x, n, p] : cases) {
    const double xd = static_cast<double>(x), nd = static_cast<double>(n);
    const double sat = (x ? xd * std::log(xd / nd) : 0) + (n - x ? (nd - xd) * std::log((nd - xd) / nd) : 0);
    const double fit = (x ? xd * std::log(p) : 0) + (n - x ? (nd - xd) * std::log(1 - p) : 0);
    const double want = 2 * (sat - fit);
    EXPECT_NEAR(st::binomial_unit_deviance(x, n, p), want, 1e-9 * std::max(1.0, want)) << x << "/" << n << " p=" << p;
  }
  EXPECT_TRUE(std::isinf(st::binomial_unit_deviance(1, 10, 0.0)));
  EXPECT_EQ(st::binomial_unit_deviance(0, 10, 0.0), 0.0);
  EXPECT_TRUE(std::isnan(st::binomial_unit_deviance(1, 10, std::nan(""))));
}

TEST(SweepFits, ChiSquareOnConstantRateAndOnATrend) {
  // INT8-like: a few ppm at every K, zero rows included.
  const auto flat = draw([](double) { return 4e-6; }, 1, 3);
  const st::ChiSquareTest t = st::chi_square_constant_rate(flat);
  EXPECT_EQ(t.df, 6);
  // Full Pearson sum over both cells of the 2x7 table (a different formula, same statistic).
  double sx = 0, sn = 0;
  for (size_t i = 0; i < flat.size(); ++i) sx += static_cast<double>(flat.count[i]), sn += static_cast<double>(flat.total[i]);
  const double pb = sx / sn;
  double x2 = 0;
  for (size_t i = 0; i < flat.size(); ++i) {
    const double n = static_cast<double>(flat.total[i]), x = static_cast<double>(flat.count[i]);
    x2 += (x - n * pb) * (x - n * pb) / (n * pb) + ((n - x) - n * (1 - pb)) * ((n - x) - n * (1 - pb)) / (n * (1 - pb));
  }
  EXPECT_NEAR(t.statistic, x2, 1e-9 * x2);
  EXPECT_GT(t.p_value, 1e-3) << "constant-rate data rejected: X2=" << t.statistic;
  EXPECT_LE(t.p_value, 1.0);
  const auto trend = draw([](double k) { return 1e-6 * k / 512; }, 1, 4);
  EXPECT_LT(st::chi_square_constant_rate(trend).p_value, 1e-6);
  // No events: nothing can vary.
  st::BinomialSeries zero{{512, 1024}, {0, 0}, {100, 100}};
  EXPECT_EQ(st::chi_square_constant_rate(zero).p_value, 1.0);
  const st::FitReport rz = st::fit_all(zero);
  EXPECT_EQ(model(rz, st::FitModel::constant).deviance, 0.0);
}

TEST(SweepFits, ClopperPearsonSolvesItsTailEquations) {
  using boost::math::binomial_distribution;
  for (auto [x, n] : std::vector<std::pair<int64_t, int64_t>>{{0, 100}, {1, 100}, {18, 3670016}, {50, 100}, {100, 100}}) {
    for (double conf : {0.95, 0.99}) {
      const st::BinomialInterval b = st::clopper_pearson(x, n, conf);
      const double a = 1 - conf;
      const double nd = static_cast<double>(n), xd = static_cast<double>(x);
      if (x == 0) {
        EXPECT_EQ(b.lower, 0.0);
        EXPECT_NEAR(b.upper, 1 - std::pow(a / 2, 1 / nd), 1e-12);  // closed form for x = 0
      } else {
        // P(X >= x | lower) = a/2.
        const double tail = boost::math::cdf(boost::math::complement(binomial_distribution<>(nd, b.lower), xd - 1));
        EXPECT_NEAR(tail, a / 2, 1e-9) << x << "/" << n;
      }
      if (x == n) {
        EXPECT_EQ(b.upper, 1.0);
      } else {
        // P(X <= x | upper) = a/2.
        EXPECT_NEAR(boost::math::cdf(binomial_distribution<>(nd, b.upper), xd), a / 2, 1e-9) << x << "/" << n;
      }
      EXPECT_LE(b.lower, b.estimate);
      EXPECT_GE(b.upper, b.estimate);
    }
  }
  EXPECT_THROW(st::clopper_pearson(5, 4), qc::Error);
}
