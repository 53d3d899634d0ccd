// The result of one conformance check (C0–C8): a verdict a kernel engineer can act on, and the
// check table, the one place that says what each check proves, what a violation points to and
// under which exclusions its argument does not hold.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <string_view>
#include <vector>

namespace qc {

// `reported`: a tolerance-based check (C6, C7) given no tolerance: its figures are reported and
// nothing is decided, so it is neither a pass nor a failure.
enum class Verdict { pass, fail, not_applicable, outside_jurisdiction, reported };
std::string_view verdict_name(Verdict v);

// The stages of a quantized linear layer's data flow, in its order: what a violation is localized to.
// `accumulation model` is the FP8 form of `accumulation` (an arm off its declared model);
// `not_localized`: a difference nothing declared predicts exceeds the tolerance.
enum class Stage {
  provenance, arithmetic, operands, accumulator_range, accumulation, accumulation_model, epilogue, token, invariance,
  not_localized
};
std::string_view stage_name(Stage s);

// One row of the check table. Every `CheckResult` is built from its row (`make_check`), so the CLI,
// the JSON, the HTML report (which reads the JSON) and the generated table in docs/checks.md
// (`qconform checks --markdown`) read the same words.
struct CheckSpec {
  std::string id;         // "C4"
  std::string title;      // "accumulator equality"
  std::string proves;     // what a pass establishes
  std::string points_to;  // what a violation points to first
  std::vector<std::string> exclusions;  // where the argument makes no claim
  bool falsifiable = true;              // C0–C5; C6 and C7 are tolerance-based
  bool per_layer = false;               // decided per layer run by verify (C2–C6); else by its own stage
  Stage stage = Stage::provenance;      // the stage of the data flow it guards (a failure's stage by default)
  std::string fp8_points_to;            // its `points_to` on an FP8 pair, "" when the same
};

// C0..C8, in order.
const std::vector<CheckSpec>& check_table();
// The row of `id`; an unknown id is an internal error.
const CheckSpec& check_spec(std::string_view id);
// The ids of the table as a range, "C0-C7"; `per_layer_only`: of the checks verify decides per layer
// run, "C2-C6". Help texts and progress lines say it so, and follow the table.
std::string check_id_range(bool per_layer_only = false);
// The table as the Markdown section of docs/checks.md (between its `checks-table` markers).
std::string check_table_markdown();

struct CheckResult {
  std::string id;      // "C4"
  std::string title;   // "accumulator equality"
  Verdict verdict = Verdict::not_applicable;
  std::string summary;            // one line of evidence for the table
  nlohmann::json evidence = nlohmann::json::object();  // counts, first offending coordinates, bit patterns
  std::string points_to;          // what a violation points to first
  std::vector<std::string> exclusions;
  bool falsifiable = true;        // C0–C5; C6 and C7 are tolerance-based
};

// The check `id` with its row of the table (title, points_to, exclusions, falsifiable) and the
// initial verdict; summary and evidence are filled in as evidence accumulates. `fp8`: the row's form
// for an FP8 pair (its `fp8_points_to`).
CheckResult make_check(std::string_view id, Verdict verdict, bool fp8 = false);
// The stage check `id` guards, by name (C4 -> "accumulation"): what a failure names when nothing more
// precise is known.
std::string_view check_stage(std::string_view id);

void to_json(nlohmann::json& j, const CheckResult& r);

// Combines per-layer verdicts: any fail -> fail; else any pass -> pass; else the first verdict.
Verdict combine(Verdict a, Verdict b);

}  // namespace qc
