// Fits of a divergence prevalence versus reduction depth K (paper Section VII), all under ONE
// objective: the binomial deviance of the counts (maximum likelihood), and the exact tests that go
// with rare events (Pearson chi-square of a constant rate, Clopper–Pearson bounds).
//
// Data: for each depth K_i, x_i differing elements out of n_i compared elements (pooled over
// seeds). Rows with x_i = 0 are kept: they carry information and the deviance handles them.
//
//   D(p) = 2 Σ_i [ x_i ln(x_i / (n_i p_i)) + (n_i − x_i) ln((n_i − x_i) / (n_i (1 − p_i))) ]
//
// with 0·ln 0 = 0; a prediction p_i ∈ {0, 1} that contradicts the data gives +inf.
//
// Models (parameters as reported, in native units of K):
//   constant    p = c                          params {c}          closed form c = Σx / Σn
//   linear      p = a + b·K                    params {a, b}       p constrained to (0,1) on the
//                                                                  training K
//   power       p = c·K^α                      params {c, α}       c > 0, p < 1 on the training K
//   saturation  p = 1 − exp(−c·K^α)            params {c, α}       c > 0, α free
//
// The optimizer (docs/sweep.md): Nelder–Mead on transformed parameters (log c, α around the mean
// log K; the linear model on its end-point logits) from several data-derived starts, then a
// damped Newton (Levenberg–Marquardt) polish on the exact gradient and Hessian of the deviance.
// No preset parameter values. Held-out error is leave-one-K-out: refit without row i, deviance
// of row i under that fit, summed over i. Held-out predictions are clipped to [1e-300, 1 − 2^-53]
// (only the linear model can leave (0,1) outside its training range; its error is then large).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace qc::stats {

struct BinomialSeries {
  std::vector<double> k;       // depth of each row (> 0)
  std::vector<int64_t> count;  // x_i
  std::vector<int64_t> total;  // n_i (> 0, >= x_i)
  size_t size() const { return k.size(); }
  // QC_INPUT on inconsistent sizes, K <= 0, n <= 0, x < 0 or x > n.
  void validate() const;
};

enum class FitModel { constant, linear, power, saturation };
const char* fit_model_name(FitModel m);  // "constant", "linear", "power", "saturation"
inline constexpr FitModel kAllFitModels[] = {FitModel::constant, FitModel::linear, FitModel::power,
                                             FitModel::saturation};

// p(K) under a model with native parameters (see the table above).
double fit_predict(FitModel model, const std::vector<double>& params, double k);

// Binomial deviance of `s` under predictions `p` (one per row); +inf for an impossible row.
double binomial_deviance(const BinomialSeries& s, const std::vector<double>& p);
// Deviance of one row.
double binomial_unit_deviance(int64_t x, int64_t n, double p);

struct ModelFit {
  FitModel model = FitModel::constant;
  std::vector<double> params;        // native parameters, see above
  double deviance = 0;               // training deviance (all rows)
  double heldout_deviance = 0;       // Σ_i deviance of row i under the fit without row i (NaN if < 3 rows)
  std::vector<double> heldout_rows;  // the terms of that sum
  bool converged = false;            // gradient of the deviance vanishes (relative 1e-7) at the optimum
  std::string note;                  // why not converged, or "degenerate: ..." for data without events
};

// The maximum-likelihood fit of one model to `s` (training deviance only; `heldout_*` unset).
ModelFit fit_model(FitModel model, const BinomialSeries& s);

struct AlphaJackknife {
  std::vector<double> leave_one_out;  // α refitted without each seed
  double mean = 0, se = 0;            // jackknife mean and standard error sqrt((S−1)/S Σ(α_s − ᾱ)²)
};

struct FitReport {
  std::vector<ModelFit> models;       // constant, linear, power, saturation (with held-out deviance)
  std::string winner;                 // lowest held-out deviance ("" when held-out is undefined)
  std::optional<AlphaJackknife> power_alpha, saturation_alpha;  // when >= 2 seeds are given
};

// All four models with leave-one-K-out held-out deviance; `per_seed` (optional, the same K rows
// for each seed, summing to `pooled`) drives the seed jackknife of α.
FitReport fit_all(const BinomialSeries& pooled, const std::vector<BinomialSeries>& per_seed = {});

struct ChiSquareTest {
  double statistic = 0;  // Pearson X² = Σ_i (x_i − n_i p̂)² / (n_i p̂ (1 − p̂)), p̂ = Σx/Σn
  int df = 0;            // rows − 1
  double p_value = 1;    // P(χ²_df >= X²) (Boost.Math), 1 when p̂ ∈ {0, 1} (no variation possible)
  double pooled_rate = 0;
};
// Pearson's chi-square test that all rows share one rate (the 2×R contingency table).
ChiSquareTest chi_square_constant_rate(const BinomialSeries& s);

struct BinomialInterval {
  double estimate = 0, lower = 0, upper = 1, confidence = 0.95;
};
// Exact (Clopper–Pearson) two-sided interval: lower = B⁻¹(α/2; x, n−x+1) (0 when x = 0), upper =
// B⁻¹(1−α/2; x+1, n−x) (1 when x = n), α = 1 − confidence (Boost.Math beta quantiles).
BinomialInterval clopper_pearson(int64_t x, int64_t n, double confidence = 0.95);

}  // namespace qc::stats
