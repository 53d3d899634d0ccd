// Binomial-deviance fits of prevalence versus depth, the constant-rate chi-square test and
// Clopper–Pearson bounds (see fits.hpp for the definitions and docs/sweep.md for the method).
#include "stats/fits.hpp"

#include <boost/math/distributions/beta.hpp>
#include <boost/math/distributions/chi_squared.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <limits>
#include <numeric>
#include <optional>

#include "core/name_table.hpp"
#include "qconform/error.hpp"

namespace qc::stats {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

using Vec2 = std::array<double, 2>;

// One row's contribution, from ln p and ln(1 − p) (computed by each model without cancellation).
double unit_deviance_logs(double x, double n, double log_p, double log_q) {
  double d = 0;
  if (x > 0) {
    if (log_p == -kInf) return kInf;
    d += x * ((std::log(x) - std::log(n)) - log_p);
  }
  if (n - x > 0) {
    if (log_q == -kInf) return kInf;
    d += (n - x) * (std::log1p(-x / n) - log_q);
  }
  // Rounding can make a perfect fit's deviance a hair negative; the deviance is >= 0.
  return std::max(0.0, 2.0 * d);
}

// The data with the coordinates every model works in: tau = ln K − mean ln K (so that the
// intercept and slope of the log-linear models are nearly uncorrelated), kappa = K / max K.
struct Problem {
  std::vector<double> x, n, tau, kappa;
  double tau_bar = 0, k_scale = 1;
  double sum_x = 0, sum_n = 0;
  size_t rows() const { return x.size(); }
};

Problem make_problem(const BinomialSeries& s) {
  Problem p;
  const size_t r = s.size();
  for (size_t i = 0; i < r; ++i) p.tau_bar += std::log(s.k[i]);
  p.tau_bar /= static_cast<double>(r);
  p.k_scale = *std::max_element(s.k.begin(), s.k.end());
  for (size_t i = 0; i < r; ++i) {
    p.x.push_back(static_cast<double>(s.count[i]));
    p.n.push_back(static_cast<double>(s.total[i]));
    p.tau.push_back(std::log(s.k[i]) - p.tau_bar);
    p.kappa.push_back(s.k[i] / p.k_scale);
    p.sum_x += p.x.back();
    p.sum_n += p.n.back();
  }
  return p;
}

// p, ln p, ln(1 − p) and the first and second derivatives of p with respect to the internal
// parameters θ (2 of them). `feasible` is false where the model leaves (0, 1).
struct RowEval {
  double p = 0, log_p = 0, log_q = 0;
  Vec2 dp{};
  std::array<double, 3> d2p{};  // (00, 01, 11)
  bool feasible = true;
};

// Internal parameters: linear θ = (a, b̃) with p = a + b̃·κ; power and saturation θ = (u, α)
// with η = exp(u + α·τ), p = η (power) or p = 1 − exp(−η) (saturation).
RowEval eval_row(FitModel model, const Vec2& t, double tau, double kappa) {
  RowEval e;
  switch (model) {
    case FitModel::linear: {
      e.p = t[0] + t[1] * kappa;
      e.feasible = e.p > 0 && e.p < 1;
      e.log_p = e.p > 0 ? std::log(e.p) : -kInf;
      e.log_q = e.p < 1 ? std::log1p(-e.p) : -kInf;
      e.dp = {1.0, kappa};
      e.d2p = {0, 0, 0};
      break;
    }
    case FitModel::power: {
      const double z = t[0] + t[1] * tau;
      e.p = std::exp(z);
      e.log_p = z;
      e.feasible = e.p < 1;
      e.log_q = e.p < 1 ? std::log1p(-e.p) : -kInf;
      e.dp = {e.p, e.p * tau};
      e.d2p = {e.p, e.p * tau, e.p * tau * tau};
      break;
    }
    case FitModel::saturation: {
      const double z = t[0] + t[1] * tau;
      const double eta = std::exp(z);
      e.p = -std::expm1(-eta);
      e.log_q = -eta;
      e.log_p = std::log(e.p);
      e.feasible = e.p > 0 && eta < kInf;
      // dp/dz = (1 − p)·η; d²p/dz² = (1 − p)·η·(1 − η).
      const double q = std::exp(-eta);
      const double d1 = q * eta, d2 = q * eta * (1 - eta);
      e.dp = {d1, d1 * tau};
      e.d2p = {d2, d2 * tau, d2 * tau * tau};
      break;
    }
    case FitModel::constant: QC_FAIL("eval_row: the constant model has a closed form");
  }
  return e;
}

double deviance_at(FitModel model, const Problem& pr, const Vec2& t) {
  double d = 0;
  for (size_t i = 0; i < pr.rows(); ++i) {
    const RowEval e = eval_row(model, t, pr.tau[i], pr.kappa[i]);
    if (!e.feasible || !std::isfinite(e.p)) return kInf;
    d += unit_deviance_logs(pr.x[i], pr.n[i], e.log_p, e.log_q);
    if (!std::isfinite(d)) return kInf;
  }
  return d;
}

// Gradient and Hessian of the deviance at θ (exact).
void derivatives(FitModel model, const Problem& pr, const Vec2& t, Vec2& g, std::array<double, 3>& h) {
  g = {0, 0};
  h = {0, 0, 0};
  for (size_t i = 0; i < pr.rows(); ++i) {
    const RowEval e = eval_row(model, t, pr.tau[i], pr.kappa[i]);
    const double x = pr.x[i], n = pr.n[i], q = 1 - e.p;
    // ln L_i = x ln p + (n − x) ln(1 − p); D = −2 Σ ln L_i + const.
    const double r = x / e.p - (n - x) / q;                  // d lnL / dp
    const double w = x / (e.p * e.p) + (n - x) / (q * q);    // −d² lnL / dp²
    g[0] += -2 * r * e.dp[0];
    g[1] += -2 * r * e.dp[1];
    h[0] += 2 * (w * e.dp[0] * e.dp[0] - r * e.d2p[0]);
    h[1] += 2 * (w * e.dp[0] * e.dp[1] - r * e.d2p[1]);
    h[2] += 2 * (w * e.dp[1] * e.dp[1] - r * e.d2p[2]);
  }
}

// Nelder–Mead (standard coefficients 1, 2, 1/2, 1/2) on a 2-parameter function that may return
// +inf outside its domain. Stops when the simplex's function spread and size are both tiny.
Vec2 nelder_mead(const std::function<double(const Vec2&)>& f, Vec2 x0, double step, int max_iter) {
  std::array<Vec2, 3> s{x0, x0, x0};
  s[1][0] += step;
  s[2][1] += step;
  std::array<double, 3> fs{f(s[0]), f(s[1]), f(s[2])};
  for (int it = 0; it < max_iter; ++it) {
    std::array<int, 3> idx{0, 1, 2};
    std::sort(idx.begin(), idx.end(), [&](int a, int b) { return fs[a] < fs[b]; });
    const Vec2 best = s[idx[0]], mid = s[idx[1]], worst = s[idx[2]];
    const double fb = fs[idx[0]], fm = fs[idx[1]], fw = fs[idx[2]];
    const double size = std::max({std::fabs(mid[0] - best[0]), std::fabs(mid[1] - best[1]),
                                  std::fabs(worst[0] - best[0]), std::fabs(worst[1] - best[1])});
    if (std::isfinite(fw) && fw - fb <= 1e-14 * (1 + std::fabs(fb)) && size < 1e-10) break;
    const Vec2 c{(best[0] + mid[0]) / 2, (best[1] + mid[1]) / 2};
    auto along = [&](double t) { return Vec2{c[0] + t * (worst[0] - c[0]), c[1] + t * (worst[1] - c[1])}; };
    const Vec2 xr = along(-1.0);
    const double fr = f(xr);
    Vec2 next = xr;
    double fnext = fr;
    bool shrink = false;
    if (fr < fb) {
      const Vec2 xe = along(-2.0);
      const double fe = f(xe);
      if (fe < fr) next = xe, fnext = fe;
    } else if (fr >= fm) {
      const Vec2 xc = fr < fw ? along(-0.5) : along(0.5);
      const double fc = f(xc);
      if (fc < std::min(fr, fw)) {
        next = xc, fnext = fc;
      } else {
        shrink = true;
      }
    }
    if (shrink) {
      for (int j : {idx[1], idx[2]}) {
        s[j] = {(s[j][0] + best[0]) / 2, (s[j][1] + best[1]) / 2};
        fs[j] = f(s[j]);
      }
    } else {
      s[idx[2]] = next;
      fs[idx[2]] = fnext;
    }
  }
  const int b = static_cast<int>(std::min_element(fs.begin(), fs.end()) - fs.begin());
  return s[b];
}

struct PolishResult {
  Vec2 t;
  double f;
  bool converged;
};

// Damped Newton (Levenberg–Marquardt) on the exact gradient and Hessian of the deviance; every
// accepted step lowers the deviance and stays feasible. Converged when the Newton decrement
// gᵀH⁻¹g is below 1e-20 (deviance units) with H positive definite, or the relative gradient
// is below 1e-7.
PolishResult polish(FitModel model, const Problem& pr, Vec2 t) {
  // The undamped Newton step when the Hessian is positive definite (nullopt otherwise).
  auto newton_step = [&](const Vec2& g, const std::array<double, 3>& h) -> std::optional<Vec2> {
    const double det = h[0] * h[2] - h[1] * h[1];
    if (!(h[0] > 0 && det > 0)) return std::nullopt;
    return Vec2{-(h[2] * g[0] - h[1] * g[1]) / det, -(h[0] * g[1] - h[1] * g[0]) / det};
  };
  auto small = [&](const Vec2& step) {
    return std::fabs(step[0]) <= 1e-11 * (1 + std::fabs(t[0])) && std::fabs(step[1]) <= 1e-11 * (1 + std::fabs(t[1]));
  };
  double f = deviance_at(model, pr, t);
  double lambda = 1e-6;
  bool converged = false;
  for (int it = 0; it < 500 && std::isfinite(f); ++it) {
    Vec2 g;
    std::array<double, 3> h;
    derivatives(model, pr, t, g, h);
    // Near the optimum the deviance cannot resolve the last digits (it is a sum of large terms),
    // but the exact gradient can: a tiny Newton step means the optimum is reached.
    if (const auto step = newton_step(g, h); step && small(*step)) {
      const Vec2 tn{t[0] + (*step)[0], t[1] + (*step)[1]};
      const double fn = deviance_at(model, pr, tn);
      if (std::isfinite(fn)) t = tn, f = fn;
      converged = true;
      break;
    }
    bool accepted = false;
    while (lambda < 1e16) {
      const double a = h[0] + lambda * std::max(std::fabs(h[0]), 1e-300);
      const double c = h[2] + lambda * std::max(std::fabs(h[2]), 1e-300);
      const double dt = a * c - h[1] * h[1];
      if (!(dt > 0) || !(a > 0)) {
        lambda = std::max(lambda * 10, 1e-6);
        continue;
      }
      const Vec2 step{-(c * g[0] - h[1] * g[1]) / dt, -(a * g[1] - h[1] * g[0]) / dt};
      const Vec2 tn{t[0] + step[0], t[1] + step[1]};
      const double fn = deviance_at(model, pr, tn);
      if (fn < f || (fn == f && !small(step))) {
        t = tn;
        f = fn;
        accepted = true;
        lambda = std::max(lambda / 10, 1e-12);
        break;
      }
      lambda *= 10;
    }
    if (!accepted) break;
  }
  // The deviance stopped resolving improvements before the step became tiny: finish with pure
  // Newton steps driven by the exact gradient, as long as they keep shrinking (quadratic
  // convergence) and stay feasible.
  double last = kInf;
  for (int it = 0; it < 30 && !converged && std::isfinite(f); ++it) {
    Vec2 g;
    std::array<double, 3> h;
    derivatives(model, pr, t, g, h);
    const auto step = newton_step(g, h);
    if (!step) break;
    const double size = std::max(std::fabs((*step)[0]) / (1 + std::fabs(t[0])), std::fabs((*step)[1]) / (1 + std::fabs(t[1])));
    if (!(size < last) || size > 1e-6) break;
    const Vec2 tn{t[0] + (*step)[0], t[1] + (*step)[1]};
    const double fn = deviance_at(model, pr, tn);
    if (!std::isfinite(fn)) break;
    t = tn, f = fn, last = size;
    if (size <= 1e-13) converged = true;
  }
  return {t, f, converged};
}

double logit(double p) { return std::log(p / (1 - p)); }
double sigmoid(double z) { return z >= 0 ? 1 / (1 + std::exp(-z)) : std::exp(z) / (1 + std::exp(z)); }

// Weighted least squares of y on z (weights w): returns (intercept, slope).
Vec2 least_squares(const std::vector<double>& z, const std::vector<double>& y, const std::vector<double>& w) {
  double sw = 0, sz = 0, sy = 0;
  for (size_t i = 0; i < z.size(); ++i) sw += w[i], sz += w[i] * z[i], sy += w[i] * y[i];
  const double mz = sz / sw, my = sy / sw;
  double szz = 0, szy = 0;
  for (size_t i = 0; i < z.size(); ++i) szz += w[i] * (z[i] - mz) * (z[i] - mz), szy += w[i] * (z[i] - mz) * (y[i] - my);
  const double slope = szz > 0 ? szy / szz : 0;
  return {my - slope * mz, slope};
}

// Starts derived from the data: the constant-rate point and a least-squares fit of the model's
// linearizing transform to smoothed empirical rates (x + 1/2) / (n + 1).
std::vector<Vec2> starts(FitModel model, const Problem& pr) {
  const double pbar = std::clamp(pr.sum_x / pr.sum_n, 1e-12, 1 - 1e-12);
  std::vector<double> ph, w;
  for (size_t i = 0; i < pr.rows(); ++i) {
    ph.push_back((pr.x[i] + 0.5) / (pr.n[i] + 1));
    w.push_back(pr.x[i] + 0.5);
  }
  std::vector<Vec2> out;
  switch (model) {
    case FitModel::linear: {
      // In end-point logit coordinates (what Nelder–Mead searches).
      out.push_back({logit(pbar), logit(pbar)});
      const Vec2 ls = least_squares(pr.kappa, ph, w);
      const double kmin = *std::min_element(pr.kappa.begin(), pr.kappa.end());
      const double lo = std::clamp(ls[0] + ls[1] * kmin, pbar * 1e-3, 1 - 1e-9);
      const double hi = std::clamp(ls[0] + ls[1] * 1.0, pbar * 1e-3, 1 - 1e-9);
      out.push_back({logit(lo), logit(hi)});
      break;
    }
    case FitModel::power: {
      std::vector<double> y;
      for (double v : ph) y.push_back(std::log(v));
      out.push_back({std::log(pbar), 0.0});
      out.push_back(least_squares(pr.tau, y, w));
      break;
    }
    case FitModel::saturation: {
      std::vector<double> y;
      for (double v : ph) y.push_back(std::log(-std::log1p(-v)));
      const double u0 = std::log(-std::log1p(-pbar));
      out.push_back({u0, 0.0});
      out.push_back(least_squares(pr.tau, y, w));
      out.push_back({u0, 0.5});
      out.push_back({u0, 1.0});
      break;
    }
    case FitModel::constant: break;
  }
  return out;
}

// Linear model: Nelder–Mead coordinates are the logits of p at the smallest and largest K.
Vec2 linear_from_endpoints(const Problem& pr, const Vec2& e) {
  const double kmin = *std::min_element(pr.kappa.begin(), pr.kappa.end());
  const double kmax = *std::max_element(pr.kappa.begin(), pr.kappa.end());
  const double plo = sigmoid(e[0]), phi = sigmoid(e[1]);
  if (kmax == kmin) return {(plo + phi) / 2, 0.0};
  const double b = (phi - plo) / (kmax - kmin);
  return {plo - b * kmin, b};
}

std::vector<double> to_native(FitModel model, const Problem& pr, const Vec2& t) {
  switch (model) {
    case FitModel::linear: return {t[0], t[1] / pr.k_scale};
    case FitModel::power:
    case FitModel::saturation: return {std::exp(t[0] - t[1] * pr.tau_bar), t[1]};
    case FitModel::constant: break;
  }
  QC_FAIL("to_native: unexpected model");
}

BinomialSeries without_row(const BinomialSeries& s, size_t skip) {
  BinomialSeries r;
  for (size_t i = 0; i < s.size(); ++i) {
    if (i == skip) continue;
    r.k.push_back(s.k[i]);
    r.count.push_back(s.count[i]);
    r.total.push_back(s.total[i]);
  }
  return r;
}

}  // namespace

void BinomialSeries::validate() const {
  QC_INPUT(count.size() == k.size() && total.size() == k.size() && !k.empty(),
           "binomial series: expected equal non-empty lengths of k, count, total; found {}, {}, {}", k.size(),
           count.size(), total.size());
  for (size_t i = 0; i < k.size(); ++i) {
    QC_INPUT(std::isfinite(k[i]) && k[i] > 0, "binomial series: row {}: expected K > 0, found {}", i, k[i]);
    QC_INPUT(total[i] > 0 && count[i] >= 0 && count[i] <= total[i],
             "binomial series: row {} (K={}): expected 0 <= count <= total and total > 0, found count={} total={}", i,
             k[i], count[i], total[i]);
  }
}

namespace {
constexpr NameRow<FitModel> kFitModelNames[] = {
    {FitModel::constant, "constant"}, {FitModel::linear, "linear"}, {FitModel::power, "power"}, {FitModel::saturation, "saturation"}};
}  // namespace

const char* fit_model_name(FitModel m) { return name_of(kFitModelNames, m).data(); }

double fit_predict(FitModel model, const std::vector<double>& params, double k) {
  switch (model) {
    case FitModel::constant: return params.at(0);
    case FitModel::linear: return params.at(0) + params.at(1) * k;
    case FitModel::power: return params.at(0) * std::exp(params.at(1) * std::log(k));
    case FitModel::saturation: return -std::expm1(-params.at(0) * std::exp(params.at(1) * std::log(k)));
  }
  return kNaN;
}

double binomial_unit_deviance(int64_t x, int64_t n, double p) {
  if (std::isnan(p)) return kNaN;
  const double log_p = p > 0 ? std::log(p) : -kInf;
  const double log_q = p < 1 ? std::log1p(-p) : -kInf;
  return unit_deviance_logs(static_cast<double>(x), static_cast<double>(n), log_p, log_q);
}

double binomial_deviance(const BinomialSeries& s, const std::vector<double>& p) {
  QC_CHECK(p.size() == s.size(), "binomial_deviance: {} predictions for {} rows", p.size(), s.size());
  double d = 0;
  for (size_t i = 0; i < s.size(); ++i) d += binomial_unit_deviance(s.count[i], s.total[i], p[i]);
  return d;
}

ModelFit fit_model(FitModel model, const BinomialSeries& s) {
  s.validate();
  const Problem pr = make_problem(s);
  ModelFit fit;
  fit.model = model;
  fit.heldout_deviance = kNaN;
  const double pbar = pr.sum_x / pr.sum_n;
  if (model == FitModel::constant) {
    fit.params = {pbar};
    fit.converged = true;
  } else if (pr.sum_x == 0 || pr.sum_x == pr.sum_n) {
    // The likelihood is maximized on the boundary (p ≡ 0 or p ≡ 1): every model reproduces it,
    // and the shape parameters are not identified.
    fit.params = model == FitModel::linear ? std::vector<double>{pbar, 0.0} : std::vector<double>{kNaN, kNaN};
    if (pr.sum_x == 0 && model != FitModel::linear) fit.params[0] = 0;
    fit.note = pr.sum_x == 0 ? "degenerate: no event in any row (p = 0 fits exactly; shape not identified)"
                             : "degenerate: every element is an event (p = 1)";
  } else if (pr.rows() == 1) {
    // One row cannot identify two parameters: report the flat solution through it.
    fit.params = model == FitModel::linear     ? std::vector<double>{pbar, 0.0}
                 : model == FitModel::power    ? std::vector<double>{pbar, 0.0}
                                               : std::vector<double>{-std::log1p(-pbar), 0.0};
    fit.note = "one row: the slope is not identified";
  }
  if (model != FitModel::constant && fit.note.empty()) {
    // Nelder–Mead from every start on the transformed parameters, then a restart from the best,
    // then the Newton polish. The best deviance over all starts wins.
    std::function<double(const Vec2&)> f;
    if (model == FitModel::linear) {
      f = [&](const Vec2& e) { return deviance_at(model, pr, linear_from_endpoints(pr, e)); };
    } else {
      f = [&](const Vec2& t) { return deviance_at(model, pr, t); };
    }
    Vec2 best{};
    double fbest = kInf;
    for (const Vec2& x0 : starts(model, pr)) {
      if (!std::isfinite(f(x0))) continue;
      Vec2 x = nelder_mead(f, x0, 0.5, 4000);
      x = nelder_mead(f, x, 0.05, 4000);
      const double fx = f(x);
      if (fx < fbest) fbest = fx, best = x;
    }
    QC_CHECK(std::isfinite(fbest), "fit_model({}): no start has a finite deviance", fit_model_name(model));
    Vec2 t = model == FitModel::linear ? linear_from_endpoints(pr, best) : best;
    const PolishResult r = polish(model, pr, t);
    fit.params = to_native(model, pr, r.t);
    fit.converged = r.converged;
    if (!r.converged) {
      fit.note = model == FitModel::linear ? "optimum on the boundary of p in (0,1) or not converged"
                                           : "not converged (flat or boundary likelihood)";
    }
  }
  std::vector<double> p;
  for (double k : s.k) p.push_back(fit_predict(model, fit.params, k));
  if (std::isnan(fit.params.back())) std::fill(p.begin(), p.end(), pbar);  // degenerate: p ≡ 0 or p ≡ 1
  // Reported in native parameters, so that a reader can reproduce the number from `params`.
  fit.deviance = binomial_deviance(s, p);
  return fit;
}

FitReport fit_all(const BinomialSeries& pooled, const std::vector<BinomialSeries>& per_seed) {
  pooled.validate();
  FitReport report;
  const size_t r = pooled.size();
  for (FitModel model : kAllFitModels) {
    ModelFit fit = fit_model(model, pooled);
    if (r >= 3) {
      fit.heldout_deviance = 0;
      for (size_t i = 0; i < r; ++i) {
        const ModelFit sub = fit_model(model, without_row(pooled, i));
        // A fit to rows without any event predicts p ≡ 0 (its shape is not identified).
        const bool no_event = sub.note.rfind("degenerate: no event", 0) == 0;
        const double p = std::clamp(no_event ? 0.0 : fit_predict(model, sub.params, pooled.k[i]), 1e-300, 1 - 0x1p-53);
        const double d = binomial_unit_deviance(pooled.count[i], pooled.total[i], p);
        fit.heldout_rows.push_back(d);
        fit.heldout_deviance += d;
      }
    }
    report.models.push_back(std::move(fit));
  }
  double best = kInf;
  for (const ModelFit& m : report.models) {
    if (m.heldout_deviance < best) best = m.heldout_deviance, report.winner = fit_model_name(m.model);
  }
  if (per_seed.size() >= 2) {
    for (const BinomialSeries& seed : per_seed) {
      seed.validate();
      QC_INPUT(seed.k == pooled.k, "fit_all: every per-seed series must have the pooled K rows");
    }
    for (FitModel model : {FitModel::power, FitModel::saturation}) {
      AlphaJackknife jk;
      for (size_t s = 0; s < per_seed.size(); ++s) {
        BinomialSeries rest = pooled;
        for (size_t i = 0; i < r; ++i) {
          rest.count[i] -= per_seed[s].count[i];
          rest.total[i] -= per_seed[s].total[i];
        }
        jk.leave_one_out.push_back(fit_model(model, rest).params.at(1));
      }
      const double S = static_cast<double>(per_seed.size());
      jk.mean = std::accumulate(jk.leave_one_out.begin(), jk.leave_one_out.end(), 0.0) / S;
      double ss = 0;
      for (double a : jk.leave_one_out) ss += (a - jk.mean) * (a - jk.mean);
      jk.se = std::sqrt((S - 1) / S * ss);
      (model == FitModel::power ? report.power_alpha : report.saturation_alpha) = jk;
    }
  }
  return report;
}

ChiSquareTest chi_square_constant_rate(const BinomialSeries& s) {
  s.validate();
  ChiSquareTest t;
  double sx = 0, sn = 0;
  for (size_t i = 0; i < s.size(); ++i) sx += static_cast<double>(s.count[i]), sn += static_cast<double>(s.total[i]);
  t.pooled_rate = sx / sn;
  t.df = static_cast<int>(s.size()) - 1;
  if (sx == 0 || sx == sn || t.df == 0) return t;  // no variation is possible: X² = 0, p = 1
  for (size_t i = 0; i < s.size(); ++i) {
    const double n = static_cast<double>(s.total[i]);
    const double e = n * t.pooled_rate;
    const double d = static_cast<double>(s.count[i]) - e;
    t.statistic += d * d / (e * (1 - t.pooled_rate));
  }
  t.p_value = boost::math::cdf(boost::math::complement(boost::math::chi_squared(t.df), t.statistic));
  return t;
}

BinomialInterval clopper_pearson(int64_t x, int64_t n, double confidence) {
  QC_INPUT(n > 0 && x >= 0 && x <= n, "clopper_pearson: expected 0 <= x <= n, n > 0; found x={} n={}", x, n);
  QC_INPUT(confidence > 0 && confidence < 1, "clopper_pearson: expected confidence in (0,1), found {}", confidence);
  BinomialInterval b;
  b.confidence = confidence;
  b.estimate = static_cast<double>(x) / static_cast<double>(n);
  const double alpha = 1 - confidence;
  const double xd = static_cast<double>(x), nd = static_cast<double>(n);
  b.lower = x == 0 ? 0.0 : boost::math::quantile(boost::math::beta_distribution<>(xd, nd - xd + 1), alpha / 2);
  b.upper = x == n ? 1.0 : boost::math::quantile(boost::math::beta_distribution<>(xd + 1, nd - xd), 1 - alpha / 2);
  return b;
}

}  // namespace qc::stats
