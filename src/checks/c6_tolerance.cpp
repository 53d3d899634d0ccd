// C6, real-scale tolerance (c6_tolerance.hpp).
#include "checks/c6_tolerance.hpp"
#include "checks/layer_checks.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <map>
#include <string>

namespace qc {

namespace {

// The words for what was predicted: both arms declared (every run predicted), one, or neither.
std::string declared_part(bool declared_a, bool declared_b, const char* what, int64_t off, const std::string& sets) {
  if (declared_a && declared_b) return fmt::format("declared {}s: {} outputs off their {}; {}", what, off, what, sets);
  if (!declared_a && !declared_b) {
    return fmt::format("no {} declared for A or B: differences not predicted (declare them, or run identify)", what);
  }
  return fmt::format("{}'s declared {}: {} outputs off it; no {} declared for {}: differences not predicted (declare "
                     "one, or run identify)",
                     declared_a ? "A" : "B", what, off, what, declared_a ? "B" : "A");
}

// FP8: the claim is that each arm's outputs are its declared model + epilogue bit for bit and that the
// observed set of differing elements is the predicted one; the ulp distances are reported (the models
// predict their values, so no tolerance decides anything). Differences nothing can predict, because
// an arm declares no model at all, are held to the tolerance instead; runs whose arm's record refused
// the model it declares are listed, neither passed nor failed.
CheckResult c6_fp8(const std::vector<LayerRun>& runs, const Comparison& t, int64_t tolerance_ulps) {
  CheckResult c6 = make_check("C6", Verdict::not_applicable);
  int64_t off_model = 0, predicted = 0, sets_differ = 0, compared_runs = 0;
  std::vector<std::string> unmodelled, first;
  bool undeclared[2] = {false, false};
  Comparison unpredicted;  // real-scale runs of an arm that declares no model (the largest M of each layer)
  std::map<std::string, int64_t> m_full;
  for (const LayerRun& r : runs) m_full[r.layer] = std::max(m_full[r.layer], r.m);
  for (const LayerRun& r : runs) {
    off_model += r.arm[0].formula_mismatch.value_or(0) + r.arm[1].formula_mismatch.value_or(0);
    for (const std::string& s : r.model_first) {
      if (first.size() < 10) first.push_back(s);
    }
    const std::string* why[2] = {&r.arm[0].unmodelled, &r.arm[1].unmodelled};
    for (int s = 0; s < 2; ++s) {
      if (*why[s] == kUndeclaredModel) {
        undeclared[s] = true;
      } else if (!why[s]->empty() && unmodelled.size() < 10) {
        unmodelled.push_back(fmt::format("{} {} m={} {}: {}", s ? "B" : "A", r.layer, r.m, scale_mode_name(r.mode), *why[s]));
      }
    }
    const bool no_model = *why[0] == kUndeclaredModel || *why[1] == kUndeclaredModel;
    if (no_model && r.mode == ScaleMode::real && r.m == m_full[r.layer]) unpredicted.merge(r.cmp, 0);
    if (!r.predicted_diff) continue;
    ++compared_runs;
    predicted += *r.predicted_diff;
    sets_differ += !r.predicted_equals_observed;
  }
  const bool any_modelled = std::any_of(runs.begin(), runs.end(), [](const LayerRun& r) {
    return r.arm[0].formula_mismatch || r.arm[1].formula_mismatch;
  });
  const bool any_undeclared = undeclared[0] || undeclared[1];
  const int64_t beyond = unpredicted.beyond_ulps(tolerance_ulps);
  if (any_modelled || any_undeclared) {
    c6.verdict = (off_model || sets_differ || beyond || unpredicted.nonfinite_diff) ? Verdict::fail : Verdict::pass;
  }
  c6.summary = fmt::format("real scales: {} of {} elements differ, max {} ulp", t.bitwise_diff, t.total, t.max_ulp);
  if (compared_runs > 0) {
    c6.summary += fmt::format(" (reported; no tolerance applies where the models predict each value); {} outputs off "
                              "their declared model + epilogue; predicted set {} observed set in {} of {} runs ({} "
                              "elements predicted to differ)",
                              off_model, sets_differ ? "!=" : "==", sets_differ ? sets_differ : compared_runs,
                              compared_runs, predicted);
  } else if (any_modelled) {
    c6.summary += fmt::format("; {} outputs off their declared model + epilogue; nothing predicted the differences",
                              off_model);
  }
  if (any_undeclared) {
    c6.summary += fmt::format(
        "; {}: differences not predicted (declare one, or run identify), so the tolerance applies to them: {} of {} "
        "elements differ, max {} ulp (tolerance {}), {} beyond",
        undeclared[0] && undeclared[1] ? std::string("no accumulation model declared for A or B")
                                       : fmt::format("no accumulation model declared for {}", undeclared[0] ? "A" : "B"),
        unpredicted.bitwise_diff, unpredicted.total, unpredicted.max_ulp, tolerance_ulps, beyond);
    if (unpredicted.nonfinite_diff) c6.summary += fmt::format(", {} non-finite pairs differ", unpredicted.nonfinite_diff);
  }
  if (!unmodelled.empty()) {
    c6.summary += fmt::format("; UNMODELLED runs (the arm's record refused its model; neither passed nor failed): {}",
                              fmt::join(unmodelled, "; "));
  }
  const auto or_null = [](bool known, int64_t v) { return known ? nlohmann::json(v) : nlohmann::json(nullptr); };
  c6.evidence = {{"comparison", t},
                 {"tolerance_ulps", tolerance_ulps},
                 {"tolerance_applies", any_undeclared},
                 {"beyond_tolerance", t.beyond_ulps(tolerance_ulps)},
                 {"formula_mismatches", or_null(any_modelled, off_model)},
                 {"first", first},
                 {"predicted_elements", or_null(compared_runs > 0, predicted)},
                 {"runs_compared", compared_runs},
                 {"runs_where_predicted_set_differs", or_null(compared_runs > 0, sets_differ)},
                 {"unpredicted", any_undeclared ? nlohmann::json(unpredicted) : nlohmann::json(nullptr)},
                 {"unpredicted_beyond_tolerance", or_null(any_undeclared, beyond)},
                 {"unmodelled", unmodelled}};
  return c6;
}

}  // namespace

CheckResult c6_tolerance(const std::vector<LayerRun>& runs, const Comparison& total_real, int64_t tolerance_ulps) {
  if (!runs.empty() && runs.front().fp8) return c6_fp8(runs, total_real, tolerance_ulps);
  CheckResult c6 = make_check("C6", Verdict::not_applicable);
  const Comparison& t = total_real;
  int64_t mismatch_formula = 0, predicted_set_wrong = 0, real_runs = 0, predicted_runs = 0;
  bool declared_a = !runs.empty(), declared_b = !runs.empty();
  for (const LayerRun& r : runs) {
    mismatch_formula += r.arm[0].formula_mismatch.value_or(0) + r.arm[1].formula_mismatch.value_or(0);
    declared_a = declared_a && r.arm[0].formula_mismatch.has_value();
    declared_b = declared_b && r.arm[1].formula_mismatch.has_value();
    if (r.predicted_diff) {
      ++predicted_runs;
      predicted_set_wrong += !r.predicted_equals_observed;
    }
    if (r.mode == ScaleMode::real) ++real_runs;
  }
  if (real_runs) {
    const int64_t beyond = t.beyond_ulps(tolerance_ulps);
    const bool nonfinite_mismatch = t.nonfinite_diff > 0;
    c6.verdict = (beyond || nonfinite_mismatch || mismatch_formula || predicted_set_wrong) ? Verdict::fail : Verdict::pass;
    const std::string sets =
        fmt::format("predicted set {} observed set in {} of {} runs", predicted_set_wrong ? "!=" : "==",
                    predicted_set_wrong ? predicted_set_wrong : predicted_runs, predicted_runs);
    c6.summary = fmt::format("real scales: {} of {} elements differ ({:.2f} per million), max {} ulp (tolerance {}), {} "
                             "beyond; {}",
                             t.bitwise_diff, t.total, 1e6 * static_cast<double>(t.bitwise_diff) / std::max<int64_t>(t.total, 1),
                             t.max_ulp, tolerance_ulps, beyond,
                             declared_part(declared_a, declared_b, "formula", mismatch_formula, sets));
  }
  // A layer whose exact accumulators leave INT32 (C2 predicted it) differs in any INT32 kernel
  // that wraps or saturates: the difference is attributed to that overflow, not to the epilogue.
  std::vector<std::string> overflow_layers;
  for (const LayerRun& r : runs) {
    const bool differs =
        r.cmp.bitwise_diff > 0 || r.arm[0].formula_mismatch.value_or(0) > 0 || r.arm[1].formula_mismatch.value_or(0) > 0;
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
                 {"formula_mismatches", declared_a || declared_b ? nlohmann::json(mismatch_formula) : nlohmann::json(nullptr)},
                 {"runs_predicted", predicted_runs},
                 {"runs_where_predicted_set_differs",
                  predicted_runs > 0 ? nlohmann::json(predicted_set_wrong) : nlohmann::json(nullptr)}};
  return c6;
}

// C6's run evidence: each arm's outputs off its declared formula (FP8: model + epilogue) and the first
// of them, and the predicted set of differing elements against the observed one.
const LayerCheck kC6Tolerance = {
    .id = "C6",
    .decide = [](const LayerCheckInputs& in) { return c6_tolerance(in.runs, in.total_real, in.options.tolerance_ulps); },
    .write_run =
        [](nlohmann::json& j, const LayerRun& x, bool) {
          j["formula_mismatch"] = {taken_json(x.arm[0].formula_mismatch), taken_json(x.arm[1].formula_mismatch)};
          // Nothing predicted (not both arms declare a formula) is null, and so is its equality.
          j["predicted_diff"] = taken_json(x.predicted_diff);
          j["predicted_equals_observed"] =
              x.predicted_diff ? nlohmann::json(x.predicted_equals_observed) : nlohmann::json(nullptr);
          if (x.fp8) j["model_first"] = x.model_first;
        },
    .read_run =
        [](const nlohmann::json& j, LayerRun& x) {
          for (int s = 0; s < 2; ++s) x.arm[s].formula_mismatch = taken_from_json(j.at("formula_mismatch").at(s));
          x.predicted_diff = taken_from_json(j.at("predicted_diff"));  // written before as -1 too
          const nlohmann::json& equal = j.at("predicted_equals_observed");
          x.predicted_equals_observed = equal.is_null() || equal.get<bool>();
          if (x.fp8) x.model_first = j.at("model_first").get<std::vector<std::string>>();
        },
    // Differences no declared model predicts beyond the tolerance (an arm declares none): the stage
    // cannot be named, the tolerance is what failed.
    .failure_stage =
        [](const CheckResult& c) {
          const nlohmann::json beyond = c.evidence.value("unpredicted_beyond_tolerance", nlohmann::json(nullptr));
          if (!beyond.is_number() || beyond.get<int64_t>() <= 0) return failed_in(c, Stage::accumulation_model);
          return StageFinding{Stage::not_localized,
                              fmt::format("{} differences that no declared model predicts exceed the tolerance (an arm "
                                          "declares no accumulation model: declare it, or run identify); {}",
                                          beyond.get<int64_t>(), c.summary)};
        },
};

}  // namespace qc
