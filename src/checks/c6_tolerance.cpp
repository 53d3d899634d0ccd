// C6, real-scale tolerance (c6_tolerance.hpp).
#include "checks/c6_tolerance.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <string>

namespace qc {

namespace {

// FP8: the claim is that each arm's outputs are its declared model + epilogue bit for bit and that the
// observed set of differing elements is the predicted one; the ulp distances are reported (the models
// predict their values, so no tolerance decides anything).
CheckResult c6_fp8(const std::vector<LayerRun>& runs, const Comparison& t, int64_t tolerance_ulps) {
  CheckResult c6 = make_check("C6", Verdict::not_applicable);
  int64_t off_model = 0, predicted = 0, sets_differ = 0, compared_runs = 0, real_runs = 0;
  std::vector<std::string> unmodelled, first;
  for (const LayerRun& r : runs) {
    off_model += std::max<int64_t>(0, r.formula_mismatch_a) + std::max<int64_t>(0, r.formula_mismatch_b);
    for (const std::string& s : r.model_first) {
      if (first.size() < 10) first.push_back(s);
    }
    if (r.mode == ScaleMode::real) ++real_runs;
    for (const auto& [side, why] : {std::pair{"A", &r.unmodelled_a}, std::pair{"B", &r.unmodelled_b}}) {
      if (!why->empty() && unmodelled.size() < 10) {
        unmodelled.push_back(fmt::format("{} {} m={} {}: {}", side, r.layer, r.m, scale_mode_name(r.mode), *why));
      }
    }
    if (r.predicted_diff < 0) continue;
    ++compared_runs;
    predicted += r.predicted_diff;
    sets_differ += !r.predicted_equals_observed;
  }
  const bool any_modelled = std::any_of(runs.begin(), runs.end(), [](const LayerRun& r) {
    return r.formula_mismatch_a >= 0 || r.formula_mismatch_b >= 0;
  });
  if (any_modelled) c6.verdict = (off_model || sets_differ) ? Verdict::fail : Verdict::pass;
  c6.summary = fmt::format("real scales: {} of {} elements differ, max {} ulp (reported; no tolerance applies: the "
                           "models predict each value); {} outputs off their declared model + epilogue; predicted set "
                           "{} observed set in {} of {} runs ({} elements predicted to differ)",
                           t.bitwise_diff, t.total, t.max_ulp, off_model, sets_differ ? "!=" : "==",
                           sets_differ ? sets_differ : compared_runs, compared_runs, predicted);
  if (!unmodelled.empty()) {
    c6.summary += fmt::format("; UNMODELLED runs (the arm's record refused its model; neither passed nor failed): {}",
                              fmt::join(unmodelled, "; "));
  }
  c6.evidence = {{"comparison", t},
                 {"tolerance_ulps", tolerance_ulps},
                 {"tolerance_applies", false},
                 {"beyond_tolerance", t.beyond_ulps(tolerance_ulps)},
                 {"formula_mismatches", off_model},
                 {"first", first},
                 {"predicted_elements", predicted},
                 {"runs_compared", compared_runs},
                 {"runs_where_predicted_set_differs", sets_differ},
                 {"unmodelled", unmodelled}};
  return c6;
}

}  // namespace

CheckResult c6_tolerance(const std::vector<LayerRun>& runs, const Comparison& total_real, int64_t tolerance_ulps) {
  if (!runs.empty() && runs.front().fp8) return c6_fp8(runs, total_real, tolerance_ulps);
  CheckResult c6 = make_check("C6", Verdict::not_applicable);
  const Comparison& t = total_real;
  int64_t mismatch_formula = 0, predicted_set_wrong = 0, real_runs = 0;
  for (const LayerRun& r : runs) {
    mismatch_formula += std::max<int64_t>(0, r.formula_mismatch_a) + std::max<int64_t>(0, r.formula_mismatch_b);
    predicted_set_wrong += !r.predicted_equals_observed;
    if (r.mode == ScaleMode::real) ++real_runs;
  }
  if (real_runs) {
    const int64_t beyond = t.beyond_ulps(tolerance_ulps);
    const bool nonfinite_mismatch = t.nonfinite_diff > 0;
    c6.verdict = (beyond || nonfinite_mismatch || mismatch_formula || predicted_set_wrong) ? Verdict::fail : Verdict::pass;
    c6.summary = fmt::format("real scales: {} of {} elements differ ({:.2f} per million), max {} ulp (tolerance {}), {} "
                             "beyond; declared formulas: {} outputs off their formula, predicted set {} observed",
                             t.bitwise_diff, t.total, 1e6 * static_cast<double>(t.bitwise_diff) / std::max<int64_t>(t.total, 1),
                             t.max_ulp, tolerance_ulps, beyond, mismatch_formula,
                             predicted_set_wrong ? "!=" : "==");
  }
  // A layer whose exact accumulators leave INT32 (C2 predicted it) differs in any INT32 kernel
  // that wraps or saturates: the difference is attributed to that overflow, not to the epilogue.
  std::vector<std::string> overflow_layers;
  for (const LayerRun& r : runs) {
    const bool differs = r.cmp.bitwise_diff > 0 || r.formula_mismatch_a > 0 || r.formula_mismatch_b > 0;
    if (r.int32_overflow && differs &&
        std::find(overflow_layers.begin(), overflow_layers.end(), r.layer) == overflow_layers.end()) {
      overflow_layers.push_back(r.layer);
    }
  }
  if (c6.verdict == Verdict::fail && !overflow_layers.empty()) {
    c6.points_to = fmt::format(
        "the INT32 overflow C2 predicted in {} layer(s) ({}): their exact accumulators leave INT32, so an INT32 kernel "
        "wraps or saturates there; not evidence against the epilogue",
        overflow_layers.size(), fmt::join(overflow_layers.begin(),
                                          overflow_layers.begin() + std::min<size_t>(overflow_layers.size(), 5), ", "));
    c6.summary += fmt::format("; includes {} layer(s) with the INT32 overflow C2 predicted", overflow_layers.size());
  }
  c6.evidence = {{"comparison", t},
                 {"int32_overflow_layers_with_differences", overflow_layers},
                 {"tolerance_ulps", tolerance_ulps},
                 {"formula_mismatches", mismatch_formula},
                 {"runs_where_predicted_set_differs", predicted_set_wrong}};
  return c6;
}

}  // namespace qc
