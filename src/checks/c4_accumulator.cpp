// C4, accumulator equality (c4_accumulator.hpp).
#include "checks/c4_accumulator.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

namespace qc {

namespace {

// FP8: each exposed fp32 accumulator against the arm's declared model, bitwise; runs where the arm's
// record refused its model are unmodelled, neither passed nor failed.
CheckResult c4_fp8(const std::vector<LayerRun>& runs) {
  CheckResult c4 = make_check("C4", Verdict::not_applicable);
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
  c4.points_to = "the accumulation stage: the arm accumulates otherwise than its declared model (fraction bits, "
                 "rounding, instruction k, promotion interval, K order)";
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

}  // namespace qc
