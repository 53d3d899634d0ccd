// C4, accumulator equality (c4_accumulator.hpp).
#include "checks/c4_accumulator.hpp"
#include "checks/layer_checks.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

namespace qc {

namespace {

// FP8: each exposed fp32 accumulator against the arm's declared model, bitwise; runs where the arm's
// record refused its model are unmodelled, neither passed nor failed.
CheckResult c4_fp8(const std::vector<LayerRun>& runs) {
  CheckResult c4 = make_check("C4", Verdict::not_applicable, /*fp8=*/true);
  int64_t compared = 0, mismatch = 0, unmodelled = 0, undeclared = 0;
  std::vector<std::string> first, notes;
  for (const LayerRun& r : runs) {
    for (const ArmRunEvidence& e : r.arm) {
      if (e.unmodelled == kUndeclaredModel) {
        ++undeclared;
      } else if (!e.unmodelled.empty()) {
        ++unmodelled;
      }
      if (!e.acc_mismatch) continue;
      ++compared;
      mismatch += *e.acc_mismatch;
    }
    for (const std::string& s : r.acc_first_mismatch) {
      if (first.size() < 10) first.push_back(s);
    }
    if (!r.acc_note.empty() && notes.size() < 2 &&
        std::find(notes.begin(), notes.end(), r.acc_note) == notes.end()) {
      notes.push_back(r.acc_note);
    }
  }
  if (compared) c4.verdict = mismatch ? Verdict::fail : Verdict::pass;
  c4.summary = compared ? fmt::format("{} exposed fp32 accumulators compared with each arm's declared accumulation "
                                      "model, bitwise: {} elements off their model",
                                      compared, mismatch)
                        : "no arm exposed an fp32 accumulator its model could be checked against";
  if (unmodelled) c4.summary += fmt::format("; {} arm runs unmodelled (the arm's record refused its model)", unmodelled);
  if (undeclared) c4.summary += fmt::format("; {} arm runs of an arm that declares no model (nothing to compare with)", undeclared);
  if (!notes.empty()) c4.summary += fmt::format(" ({})", fmt::join(notes, "; "));
  c4.evidence = {{"compared", compared}, {"mismatched_elements", mismatch}, {"first", first},
                 {"unmodelled_arm_runs", unmodelled}, {"undeclared_arm_runs", undeclared},
                 {"reference", "declared accumulation models"}};
  return c4;
}

}  // namespace

CheckResult c4_accumulator(const std::vector<LayerRun>& runs) {
  if (!runs.empty() && runs.front().fp8) return c4_fp8(runs);
  CheckResult c4 = make_check("C4", Verdict::not_applicable);
  int64_t c4_runs = 0, c4_mismatch = 0;
  std::vector<std::string> c4_first;
  int64_t c4_excluded = 0;
  for (const LayerRun& r : runs) {
    if (r.int32_overflow) {
      ++c4_excluded;
      continue;
    }
    for (const ArmRunEvidence& e : r.arm) {
      if (!e.acc_mismatch) continue;
      ++c4_runs;
      c4_mismatch += *e.acc_mismatch;
    }
    for (const std::string& s : r.acc_first_mismatch) {
      if (c4_first.size() < 10) c4_first.push_back(s);
    }
  }
  if (c4_runs) c4.verdict = c4_mismatch ? Verdict::fail : Verdict::pass;
  c4.summary = c4_runs ? fmt::format("{} exposed accumulators compared with the exact INT64 reference: {} elements differ",
                                     c4_runs, c4_mismatch)
                       : "neither arm exposes its accumulator";
  c4.evidence = {{"compared", c4_runs}, {"mismatched_elements", c4_mismatch}, {"first", c4_first},
                 {"excluded_runs_int32_overflow", c4_excluded}};
  return c4;
}

namespace {

// FP8 pairs: an arm off its declared model. Its exposed fp32 accumulator off the model names the
// accumulation model; the accumulator on it and the outputs off name the epilogue; no accumulator
// exposed leaves the accumulation model named (the epilogue is not ruled out).
std::optional<StageFinding> arm_off_its_model(const VerifyResult& r) {
  for (int s = 0; s < 2; ++s) {
    const ArmInfo& arm = s ? r.arm_b : r.arm_a;
    int64_t outputs_off = 0, acc_off = 0, acc_compared = 0;
    std::string first_output, first_acc, model;
    const std::string side = s ? "B" : "A";
    for (const LayerRun& x : r.runs) {
      const int64_t out = x.arm[s].formula_mismatch.value_or(0), acc = x.arm[s].acc_mismatch.value_or(0);
      outputs_off += out;
      acc_off += acc;
      const std::string& claimed = x.arm[s].model;
      if (model.empty() && (out > 0 || acc > 0) && !claimed.empty()) model = claimed;
      acc_compared += x.arm[s].acc_mismatch.has_value();
      for (const std::string& f : x.model_first) {
        if (first_output.empty() && f.starts_with(side + " ")) first_output = f;
      }
      for (const std::string& f : x.acc_first_mismatch) {
        if (first_acc.empty() && f.starts_with(side + " ")) first_acc = f;
      }
    }
    if (outputs_off == 0 && acc_off == 0) continue;
    StageFinding f;
    if (model.empty() || model == arm.accumulation_model) {
      model = arm.accumulation_model;
    } else {
      model = fmt::format("{} (its record's form of the declared {})", model, arm.accumulation_model);
    }
    if (acc_off > 0) {
      f.stage = Stage::accumulation_model;
      f.detail = fmt::format(
          "arm {} ({}) is off its declared accumulation model {}: {} fp32 accumulator elements and {} outputs differ "
          "from the model; first accumulator: {}{}",
          side, arm.label, model, acc_off, outputs_off, first_acc,
          first_output.empty() ? "" : "; first output: " + first_output);
    } else if (acc_compared > 0) {
      f.stage = Stage::epilogue;
      f.detail = fmt::format(
          "arm {} ({}): its fp32 accumulator follows its declared model {} bit for bit, but {} outputs are off the "
          "model + its declared epilogue; first: {}",
          side, arm.label, model, outputs_off, first_output);
    } else {
      f.stage = Stage::accumulation_model;
      f.detail = fmt::format(
          "arm {} ({}) is off its declared accumulation model {} + epilogue: {} outputs differ (it exposes no fp32 "
          "accumulator, so the epilogue is not ruled out); first: {}",
          side, arm.label, model, outputs_off, first_output);
    }
    return f;
  }
  return std::nullopt;
}

}  // namespace

// C4's run evidence: each arm's exposed accumulator against the reference (INT8: exact; FP8: its
// declared model) and the first mismatching coordinates; on FP8 pairs also why an accumulator was not
// compared.
const LayerCheck kC4Accumulator = {
    .id = "C4",
    .decide = [](const LayerCheckInputs& in) { return c4_accumulator(in.runs); },
    .write_run =
        [](nlohmann::json& j, const LayerRun& x, bool lossless) {
          j["acc_mismatch"] = {taken_json(x.arm[0].acc_mismatch), taken_json(x.arm[1].acc_mismatch)};
          if (x.fp8) {
            j["acc_first"] = x.acc_first_mismatch;
            j["acc_note"] = x.acc_note;
          }
          if (lossless) j["acc_first_mismatch"] = x.acc_first_mismatch;
        },
    .read_run =
        [](const nlohmann::json& j, LayerRun& x) {
          for (int s = 0; s < 2; ++s) x.arm[s].acc_mismatch = taken_from_json(j.at("acc_mismatch").at(s));
          x.acc_first_mismatch = j.at("acc_first_mismatch").get<std::vector<std::string>>();
          if (x.fp8) x.acc_note = j.at("acc_note").get<std::string>();
        },
    .evidence_stage = arm_off_its_model,
};

}  // namespace qc
