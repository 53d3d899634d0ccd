// The interchangeability answer (interchangeability.hpp): the decision, and the facts of a verify run.
#include "checks/interchangeability.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "checks/verify.hpp"
#include "core/name_table.hpp"

namespace qc {

namespace {
using I = Interchangeability;
constexpr NameRow<I> kInterchangeabilityNames[] = {
    {I::identical, "identical"}, {I::explained, "explained"}, {I::unexplained, "unexplained"}, {I::different, "different"}};
}  // namespace

std::string_view interchangeability_name(Interchangeability a) { return name_of(kInterchangeabilityNames, a); }

std::string_view interchangeability_licenses(Interchangeability a) {
  // docs/checks.md, "The interchangeability answer", says the same in more words.
  switch (a) {
    case Interchangeability::identical:
      return "swap the kernels freely on what was checked: every output was bit-identical (re-run verify for other "
             "shapes, devices or models)";
    case Interchangeability::explained:
      return "swap them knowing exactly which outputs change, by how much and why: every difference is predicted by "
             "the declared formulas or models and localized to its stage; decide on the measured token effect";
    case Interchangeability::unexplained:
      return "do not treat them as interchangeable yet: nothing failed, but some differences are predicted by nothing; "
             "declare or identify the missing formula or model and re-run";
    case Interchangeability::different:
      return "not interchangeable: a falsifiable check failed; fix the stage it names before any swap";
  }
  return "";
}

namespace {

std::string token_effect(const InterchangeabilityFacts& f) {
  if (!f.tokens_measured) return "";
  return fmt::format("; token effect measured: {} teacher-forced flips in {} positions, {} of {} free-running "
                     "sequences identical",
                     f.flips, f.positions, f.identical_sequences, f.sequences);
}

bool tokens_differ(const InterchangeabilityFacts& f) {
  return f.tokens_measured && (f.flips > 0 || f.identical_sequences < f.sequences);
}

}  // namespace

InterchangeabilityAnswer decide_interchangeability(const InterchangeabilityFacts& f) {
  InterchangeabilityAnswer a;
  nlohmann::json failures = nlohmann::json::array();
  for (const auto& x : f.failures) failures.push_back({{"check", x.check}, {"stage", x.stage}, {"detail", x.detail}});
  a.evidence = {{"failed", failures},
                {"runs", f.runs},
                {"elements", f.elements},
                {"differing", f.differing},
                {"max_ulp", f.max_ulp},
                {"unpredicted_runs", f.unpredicted_runs},
                {"unpredicted_differing", f.unpredicted_differing},
                {"unpredicted_why", f.unpredicted_why},
                {"tolerance_ulps", f.tolerance_applies ? nlohmann::json(f.tolerance_ulps) : nlohmann::json(nullptr)},
                {"stage", f.differing > 0 && f.unpredicted_differing == 0 ? nlohmann::json(f.difference_stage)
                                                                          : nlohmann::json(nullptr)}};
  if (f.undecided_beyond_tolerance >= 0) a.evidence["undecided_beyond_tolerance"] = f.undecided_beyond_tolerance;
  if (f.tokens_measured) {
    a.evidence["tokens"] = {{"flips", f.flips},
                            {"positions", f.positions},
                            {"sequences", f.sequences},
                            {"identical_sequences", f.identical_sequences},
                            {"pow2_end_to_end_identical", f.pow2_end_to_end_identical}};
  }
  // What would make unpredicted differences predicted is worth saying whatever the answer (a failure
  // of the tolerance on differences nothing predicted included).
  if (f.unpredicted_differing > 0) a.advice = f.advice;
  // 1. A failed check decides: the pair is not interchangeable, and the first failure names the stage.
  if (!f.failures.empty()) {
    a.answer = Interchangeability::different;
    const auto& first = f.failures.front();
    std::vector<std::string> ids;
    for (const auto& x : f.failures) ids.push_back(x.check);
    a.reason = fmt::format("{} failed; {} names the {} stage: {}", fmt::join(ids, ", "),
                           ids.size() == 1 ? std::string("it") : "the first, " + first.check, first.stage, first.detail);
    return a;
  }
  // 2. Nothing compared: no answer can be claimed from it.
  if (f.runs == 0) {
    a.answer = Interchangeability::unexplained;
    a.reason = "nothing was compared (no run of both arms)";
    return a;
  }
  // 3. No difference anywhere.
  if (f.differing == 0) {
    if (!tokens_differ(f) && f.pow2_end_to_end_identical) {
      a.answer = Interchangeability::identical;
      a.reason = fmt::format("bit-identical in every regime that ran: {} runs, {} elements, 0 differ{}", f.runs,
                             f.elements,
                             f.tokens_measured ? fmt::format("; generated tokens identical ({} of {} sequences, 0 "
                                                             "flips in {} positions)",
                                                             f.identical_sequences, f.sequences, f.positions)
                                               : std::string());
      return a;
    }
    a.answer = Interchangeability::unexplained;
    a.reason = fmt::format("the layers are bit-identical ({} runs), but the model runs differ ({} flips, {} of {} "
                           "sequences identical{}): a difference no layer-level run saw or predicted",
                           f.runs, f.flips, f.identical_sequences, f.sequences,
                           f.pow2_end_to_end_identical ? "" : "; the power-of-two generations differ");
    return a;
  }
  // 4. Differences that nothing predicted: within the tolerance (a check would have failed otherwise),
  // but not explained.
  if (f.unpredicted_differing > 0) {
    a.answer = Interchangeability::unexplained;
    a.reason = fmt::format(
        "{} of the {} elements compared in {} runs (every scale regime and row count) differ (max {} ulp{}); {} of "
        "them, in {} runs, were predicted by nothing: {}{}{}",
        f.differing, f.elements, f.runs, f.max_ulp,
        f.tolerance_applies ? fmt::format(", tolerance {}", f.tolerance_ulps) : std::string(), f.unpredicted_differing,
        f.unpredicted_runs, fmt::join(f.unpredicted_why, "; "),
        f.undecided_beyond_tolerance > 0
            ? fmt::format(" ({} of them beyond the {}-ulp tolerance, not decided by C6)", f.undecided_beyond_tolerance,
                          f.tolerance_ulps)
            : std::string(),
        token_effect(f));
    return a;
  }
  // 5. Every difference predicted exactly, and every check passed.
  a.answer = Interchangeability::explained;
  a.reason = fmt::format("{} of the {} elements compared in {} runs (every scale regime and row count) differ (max {} "
                         "ulp{}), every one predicted exactly by {} and localized to the {}{}",
                         f.differing, f.elements, f.runs, f.max_ulp,
                         f.tolerance_applies ? fmt::format(", within the tolerance of {}", f.tolerance_ulps)
                                             : std::string(", each value predicted, so no tolerance applies"),
                         f.predicted_by, f.difference_stage, token_effect(f));
  return a;
}

nlohmann::json to_json(const InterchangeabilityAnswer& a) {
  return {{"answer", interchangeability_name(a.answer)},
          {"reason", a.reason},
          {"licenses", interchangeability_licenses(a.answer)},
          {"evidence", a.evidence},
          {"advice", a.advice.empty() ? nlohmann::json(nullptr) : nlohmann::json(a.advice)}};
}

std::string describe(const InterchangeabilityAnswer& a) {
  std::string s = fmt::format("interchangeability: {} — {}\n", interchangeability_name(a.answer), a.reason);
  if (!a.advice.empty()) s += fmt::format("  next: {}\n", a.advice);
  return s;
}

namespace {

// What to run or declare so that an arm's differences become predicted, in the user's words.
std::string advice_for(const ArmInfo& arm, char side, UserLanguage language) {
  const std::string py = side == 'A' ? "arm_a" : "arm_b";
  if (arm.fp8()) {
    return language == UserLanguage::python
               ? fmt::format("run `qconform.identify({})`, which measures its accumulation model, and declare it as "
                             "`qconform.arm(fn, accumulation_model=<model>)`",
                             py)
               : fmt::format("run `qconform identify --arm {}`, which measures its accumulation model, and declare it "
                             "(a plugin's `accumulation_model` field)",
                             arm.label);
  }
  return language == UserLanguage::python
             ? fmt::format("run `qconform.identify({})` and pass the formula it names as `qconform.arm(fn, "
                           "epilogue=<formula>)`",
                           py)
             : fmt::format("run `qconform identify --arm {}` and pass the formula it names as `--declare {}=<formula>` "
                           "(conform identifies such an arm itself unless --no-identify)",
                           arm.label, side);
}

}  // namespace

InterchangeabilityFacts::Failure verify_failure(const CheckResult& c, const VerifyResult& r) {
  const bool localized = r.arm_a.fp8() && r.stage;
  std::string detail = localized && !r.stage_detail.empty() ? r.stage_detail : c.points_to;
  if (const std::string prefix = c.id + " failed: "; detail.starts_with(prefix)) detail.erase(0, prefix.size());
  return {c.id, std::string(localized ? stage_name(*r.stage) : check_stage(c.id)), detail};
}

InterchangeabilityFacts facts_from_verify(const VerifyResult& r, UserLanguage language) {
  InterchangeabilityFacts f;
  const bool fp8 = r.arm_a.fp8();
  for (const CheckResult& c : r.checks) {
    if (c.verdict == Verdict::fail) f.failures.push_back(verify_failure(c, r));
  }
  for (const CheckResult& c : r.checks) {
    if (c.id == "C6" && c.evidence.contains("tolerance_ulps")) f.tolerance_ulps = c.evidence["tolerance_ulps"].get<int64_t>();
  }
  int64_t unmodelled_runs = 0, undecided_beyond = 0;
  bool model_acc_differ = false;
  for (const LayerRun& x : r.runs) {
    ++f.runs;
    f.elements += x.cmp.total;
    f.differing += x.cmp.bitwise_diff;
    f.max_ulp = std::max(f.max_ulp, x.cmp.max_ulp);
    model_acc_differ = model_acc_differ || x.model_acc_diff.value_or(0) > 0;
    if (x.predicted_diff || x.cmp.bitwise_diff == 0) continue;
    ++f.unpredicted_runs;
    f.unpredicted_differing += x.cmp.bitwise_diff;
    // A run whose arm's record refused the model it declares: C6 lists it and decides nothing on it.
    const bool refused = std::any_of(x.arm.begin(), x.arm.end(), [](const ArmRunEvidence& e) {
      return !e.unmodelled.empty() && e.unmodelled != kUndeclaredModel;
    });
    if (refused) {
      ++unmodelled_runs;
      undecided_beyond += x.cmp.beyond_ulps(f.tolerance_ulps);
    }
  }
  if (unmodelled_runs > 0) {
    f.undecided_beyond_tolerance = undecided_beyond;
    f.unpredicted_why.push_back(fmt::format("{} runs where an arm's record refused its declared model (e.g. "
                                            "cuBLASLt's split-K): listed as unmodelled",
                                            unmodelled_runs));
  }
  std::vector<std::string> advice;
  for (const auto& [arm, side] : {std::pair{&r.arm_a, 'A'}, std::pair{&r.arm_b, 'B'}}) {
    const bool undeclared = arm->fp8() ? arm->accumulation_model.empty() : arm->epilogue.empty();
    if (!undeclared || f.unpredicted_runs == 0) continue;
    f.unpredicted_why.insert(f.unpredicted_why.begin() + static_cast<std::ptrdiff_t>(advice.size()),
                             fmt::format("no {} declared for {} ({})", arm->fp8() ? "accumulation model" : "formula",
                                         side, arm->label));
    advice.push_back(advice_for(*arm, side, language));
  }
  f.advice = fmt::format("{}", fmt::join(advice, "; "));
  // FP8: the models predict each value, so no tolerance applies, except to the differences of an arm
  // that declares no model (C6 holds those to it).
  f.tolerance_applies = !fp8 || std::any_of(r.runs.begin(), r.runs.end(), [](const LayerRun& x) {
    return x.arm[0].unmodelled == kUndeclaredModel || x.arm[1].unmodelled == kUndeclaredModel;
  });
  f.predicted_by = fp8 ? "the declared accumulation models and epilogues" : "the declared formulas";
  f.difference_stage = !fp8 ? "epilogue stage (the accumulators are exact and shared)"
                            : model_acc_differ ? "accumulation stage (the two models' fp32 accumulators differ)"
                                               : "epilogue stage";
  return f;
}

}  // namespace qc
