// C6, real-scale tolerance (c6_tolerance.hpp).
#include "checks/c6_tolerance.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <string>

namespace qc {

CheckResult c6_tolerance(const std::vector<LayerRun>& runs, const Comparison& total_real, int64_t tolerance_ulps) {
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
