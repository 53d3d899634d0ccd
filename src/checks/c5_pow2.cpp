// C5, the power-of-two probe (c5_pow2.hpp).
#include "checks/c5_pow2.hpp"
#include "checks/layer_checks.hpp"

#include <fmt/format.h>

#include <string>
#include <string_view>

namespace qc {

bool c5_not_commutable(const Epilogue* formula_a, const Epilogue* formula_b, bool has_bias) {
  if (formula_a && formula_b) {
    const std::string_view ca = formula_a->pow2_class(has_bias), cb = formula_b->pow2_class(has_bias);
    return ca.empty() || cb.empty() || ca != cb;
  }
  return has_bias && ((formula_a && formula_a->bias_after_rounding()) || (formula_b && formula_b->bias_after_rounding()));
}

namespace {

// FP8: under power-of-two scales the epilogue cannot create a difference, so every observed difference
// must sit where the two declared models' fp32 accumulators differ.
CheckResult c5_fp8(const std::vector<LayerRun>& runs) {
  CheckResult c5 = make_check("C5", Verdict::not_applicable);
  int64_t checked = 0, differing = 0, acc_differ = 0, violations = 0, not_commutable = 0, unmodelled = 0, excluded = 0;
  std::vector<std::string> first;
  for (const LayerRun& r : runs) {
    if (r.mode == ScaleMode::real) continue;
    if (r.pow2_not_commutable) {
      ++not_commutable;
      continue;
    }
    if (!r.model_acc_diff) {
      ++unmodelled;
      continue;
    }
    ++checked;
    differing += r.cmp.bitwise_diff;
    acc_differ += *r.model_acc_diff;
    violations += r.pow2_violations;
    excluded += r.pow2_excluded;
    for (const DiffElement& d : r.pow2_first) {
      if (first.size() < 10) {
        first.push_back(fmt::format("{} ({}): {}", describe(d), scale_mode_name(r.mode),
                                    r.block ? "the two arms' chains agree in every K block there"
                                            : "the two models' fp32 accumulators are equal there"));
      }
    }
  }
  if (checked) c5.verdict = violations ? Verdict::fail : Verdict::pass;
  const bool block = !runs.empty() && runs.front().block;
  if (block) {
    // Block-scaled: with every scale a power of two every promotion form gives the same D, so the arms must
    // agree wherever their chains agree in every K block (the elements a scale product took out of fp32's
    // exact range excepted, and counted).
    c5.summary = checked ? fmt::format("{} power-of-two runs (every activation and weight scale a power of two): {} "
                                       "elements differ, {} of them where the two arms' chains agree in every K block "
                                       "(the claim is 0; the two block models' accumulations differ at {} elements, "
                                       "every one predicted; {} excluded: a scale product outside fp32's exact range); "
                                       "{} runs unmodelled",
                                       checked, differing, violations, acc_differ, excluded, unmodelled)
                         : "no power-of-two run where both arms claim their block models";
  } else {
    c5.summary = checked ? fmt::format("{} power-of-two runs: {} elements differ, {} of them where the two models' fp32 "
                                       "accumulators are equal (the claim is 0; the models' accumulators differ at {} "
                                       "elements); {} runs not commutable, {} runs unmodelled",
                                       checked, differing, violations, acc_differ, not_commutable, unmodelled)
                         : "no power-of-two run where both arms claim their models and their epilogues commute";
  }
  c5.evidence = {{"runs", checked},
                 {"differing", differing},
                 {"model_accumulators_differ", acc_differ},
                 {"violations", violations},
                 {"excluded", excluded},
                 {"block_scaled", block},
                 {"not_commutable_runs", not_commutable},
                 {"unmodelled_runs", unmodelled},
                 {"first", first}};
  return c5;
}

}  // namespace

CheckResult c5_pow2(const std::vector<LayerRun>& runs) {
  if (!runs.empty() && runs.front().fp8) return c5_fp8(runs);
  CheckResult c5 = make_check("C5", Verdict::not_applicable);
  int64_t c5_runs = 0, c5_violations = 0, c5_excluded = 0, c5_not_commutable = 0, c5_unsafe = 0;
  std::vector<std::string> c5_first;
  for (const LayerRun& r : runs) {
    if (r.mode == ScaleMode::real) continue;
    if (!r.safe) {
      ++c5_unsafe;
      continue;
    }
    if (r.pow2_not_commutable) {
      ++c5_not_commutable;
      continue;
    }
    ++c5_runs;
    c5_excluded += r.pow2_excluded;
    c5_violations += r.pow2_violations;
    if (r.pow2_violations) {
      for (const DiffElement& d : r.pow2_first) {
        if (c5_first.size() < 10) c5_first.push_back(fmt::format("{} ({})", describe(d), scale_mode_name(r.mode)));
      }
    }
  }
  if (c5_runs) c5.verdict = c5_violations ? Verdict::fail : Verdict::pass;
  c5.summary = c5_runs ? fmt::format("{} power-of-two runs in safe layers: {} elements differ bitwise ({} excluded as "
                                     "subnormal/non-finite; {} runs not commutable; {} unsafe runs skipped)",
                                     c5_runs, c5_violations, c5_excluded, c5_not_commutable, c5_unsafe)
                       : "no power-of-two run in a safe, commutable layer";
  c5.evidence = {{"runs", c5_runs},           {"violations", c5_violations}, {"excluded", c5_excluded},
                 {"not_commutable_runs", c5_not_commutable}, {"unsafe_runs", c5_unsafe}, {"first", c5_first}};
  return c5;
}

void c5_add_end_to_end(CheckResult& c5, size_t sequences, size_t identical_sequences, bool records_bit_identical,
                       bool fp8) {
  c5.evidence["end_to_end"] = {{"sequences", sequences},
                               {"identical_sequences", identical_sequences},
                               {"records_bit_identical", records_bit_identical}};
  // FP8: the two accumulation models differ, so power-of-two scales leave their differences in place;
  // the layer-level C5 above is the claim (every difference where the models' accumulators differ).
  const char* differ = fp8 ? "differ (expected: the two arms' accumulation models differ; evidence only)"
                           : "DIFFER (evidence only: those positions were not predicted)";
  c5.summary += fmt::format("; end to end with power-of-two weight scales: {}/{} sequences identical, logits {}",
                            identical_sequences, sequences, records_bit_identical ? "bit-identical" : differ);
}

// C5's run evidence (power-of-two regimes): the pairs excluded from the required identity, the
// differences among the rest and the first of them, and whether the declared formulas commute at all.
namespace {

void write_pow2_run(nlohmann::json& j, const LayerRun& x, bool lossless) {
  j["pow2_excluded"] = x.pow2_excluded;
  j["pow2_violations"] = x.pow2_violations;
  j["pow2_not_commutable"] = x.pow2_not_commutable;
  if ((x.fp8 && x.mode != ScaleMode::real) || lossless) j["pow2_first"] = x.pow2_first;
}

void read_pow2_run(const nlohmann::json& j, LayerRun& x) {
  j.at("pow2_excluded").get_to(x.pow2_excluded);
  j.at("pow2_violations").get_to(x.pow2_violations);
  j.at("pow2_first").get_to(x.pow2_first);
  j.at("pow2_not_commutable").get_to(x.pow2_not_commutable);
}

}  // namespace

const LayerCheck kC5Pow2 = {
    .id = "C5",
    .decide = [](const LayerCheckInputs& in) { return c5_pow2(in.runs); },
    .write_run = write_pow2_run,
    .read_run = read_pow2_run,
    // A power-of-two difference where the models agree: the epilogue.
    .failure_stage = [](const CheckResult& c) { return failed_in(c, Stage::epilogue); },
};

}  // namespace qc
