// The check table (C0–C8) as data, and the verdicts every check reports.
#include "qconform/check.hpp"

#include <fmt/format.h>

#include "core/name_table.hpp"
#include "qconform/error.hpp"

namespace qc {

const std::vector<CheckSpec>& check_table() {
  // `proves` follows the conformance table of the design; `points_to` and `exclusions` are the words
  // every results JSON has carried (docs/results-schema.md). The code that decides each verdict is
  // src/checks/c<N>_*.cpp.
  static const std::vector<CheckSpec> table = {
      {"C0", "identity contract",
       "the two runs share operands, model, prompts, config, engine; the only declared difference is the treatment "
       "(the arm); the kernel that actually ran is recorded from the arm itself",
       "provenance, not arithmetic", {}, /*falsifiable=*/true, /*per_layer=*/false, Stage::provenance},
      {"C1", "arithmetic preconditions",
       "on this device and arm: ±(2^24−1), ±2^24 round-trip int→fp32, ±(2^24+1) does not; integer accumulation exact "
       "against INT64 (random and all-extreme operands, K up to 32768); power-of-two scaling commutes with rounding "
       "for finite normals and ±0; bf16 rounding midpoints; subnormals are not flushed (FTZ/DAZ)",
       "the hardware, compiler flags (FTZ/DAZ, fast-math, contraction) or the arm's conversion",
       {"subnormal range and overflow to inf of the power-of-two argument (tested, reported as outside "
        "jurisdiction)"},
       /*falsifiable=*/true, /*per_layer=*/false, Stage::arithmetic},
      {"C2", "range prediction",
       "exact emulation: no |acc| ≥ 2^31; per layer the max |acc|, headroom bits below 2^24, count above 2^24; pinned "
       "by SHA-256 before any comparison runs",
       "accumulator width / operand capture", {}, /*falsifiable=*/true, /*per_layer=*/true, Stage::accumulator_range},
      {"C3", "shared operands", "both arms received byte-identical quantized activations, scales and weights",
       "activation quantization upstream of the GEMM, or an arm writing into its inputs", {}, /*falsifiable=*/true, /*per_layer=*/true, Stage::operands},
      {"C4", "accumulator equality",
       "every arm that exposes its INT32 accumulator equals the exact emulation, bit for bit",
       "the accumulation stage: saturation, wraparound, dropped K tail, float accumulation",
       {"layers whose exact accumulators leave INT32 (reported by C2)"}, /*falsifiable=*/true, /*per_layer=*/true, Stage::accumulation,
       "the accumulation stage: the arm accumulates otherwise than its declared model (fraction bits, rounding, "
       "instruction k, promotion interval, K order)"},
      {"C5", "power-of-two probe",
       "with weight scales rounded to powers of two (and, separately, all scales set to one power of two per layer), "
       "outputs are bit-identical for finite normal outputs in layers predicted safe",
       "epilogue structure beyond the two scale products: bias after rounding, FMA contraction, non-RNE rounding",
       {"elements whose exact value or an exact intermediate is subnormal or overflows (counted; decided from exact "
        "values, so a NaN or inf from an arm is a violation)",
        "layers predicted unsafe by C2",
        "declared formulas outside one commutation class: bias after a bf16 rounding, or one rounding (exact) against "
        "two (fp32 then bf16)"},
       /*falsifiable=*/true, /*per_layer=*/true, Stage::epilogue},
      {"C6", "real-scale tolerance",
       "under real scales, differences are ≤ the tolerance (default 1 bf16 ulp, finite pairs, ordered bit-pattern "
       "distance); rate and distribution reported; when both arms declare formulas, the observed set of differing "
       "elements equals the predicted set",
       "extra rounding steps or reduced precision in the epilogue", {"near-zero elements reported separately"},
       /*falsifiable=*/false, /*per_layer=*/true, Stage::epilogue},
      {"C7", "token transfer",
       "teacher-forced single-step flip rate, its dependence on the logit margin (ROC-AUC, calibrated flip "
       "probability), sequence-level agreement",
       "decision-boundary sensitivity of the model/workload", {"greedy decoding", "the pinned prompts"},
       /*falsifiable=*/false, /*per_layer=*/false, Stage::token},
      // C8 (issue #31, src/checks/c8_*.cpp): opt-in (`qconform invariance`, `verify --invariance`).
      {"C8", "invariance",
       "every row of a layer gets the same bits in batches of every tested size (1 to M, the engines' bucket edges "
       "included) and with other batch mates; where it does not, the differing elements are exactly those the run "
       "records' claimed formulas or models predict for each batch shape (and, with --tp, for each tensor-parallel "
       "degree under the named reduction model)",
       "a kernel whose algorithm changes with the batch shape (tile, swap-AB, split-K) or a reduction whose order "
       "changes with the degree, not recorded in its run record",
       {"the quantizer upstream of the GEMM (dynamic per-tensor activation scales depend on the batch)",
        "tensor-parallel degrees whose shards would split a scale block of a block-scaled layer (not applicable)"},
       /*falsifiable=*/true, /*per_layer=*/false, Stage::invariance},
  };
  return table;
}

std::string check_id_range(bool per_layer_only) {
  std::string first, last;
  for (const CheckSpec& c : check_table()) {
    if (per_layer_only && !c.per_layer) continue;
    if (first.empty()) first = c.id;
    last = c.id;
  }
  return first + "-" + last;
}

const CheckSpec& check_spec(std::string_view id) {
  for (const CheckSpec& s : check_table()) {
    if (s.id == id) return s;
  }
  QC_FAIL("check `{}` is not in the check table (C0..C8)", id);
}

CheckResult make_check(std::string_view id, Verdict verdict, bool fp8) {
  const CheckSpec& spec = check_spec(id);
  CheckResult c;
  c.id = spec.id;
  c.title = spec.title;
  c.verdict = verdict;
  c.points_to = fp8 && !spec.fp8_points_to.empty() ? spec.fp8_points_to : spec.points_to;
  c.exclusions = spec.exclusions;
  c.falsifiable = spec.falsifiable;
  return c;
}

std::string check_table_markdown() {
  // A `|` inside a cell would end it (`|acc|`).
  const auto cell = [](std::string_view s) {
    std::string out;
    for (char ch : s) {
      if (ch == '|') out += '\\';
      out += ch;
    }
    return out;
  };
  std::string md = "| check | what it proves | a violation points first to | exclusions | kind |\n|---|---|---|---|---|\n";
  for (const CheckSpec& s : check_table()) {
    std::string exclusions;
    for (const std::string& e : s.exclusions) exclusions += (exclusions.empty() ? "" : "; ") + cell(e);
    md += fmt::format("| {} {} | {} | {} | {} | {} |\n", s.id, cell(s.title), cell(s.proves), cell(s.points_to),
                      exclusions.empty() ? "none" : exclusions, s.falsifiable ? "falsifiable" : "tolerance-based");
  }
  return md;
}

constexpr NameRow<Verdict> kVerdictNames[] = {{Verdict::pass, "pass"},
                                               {Verdict::fail, "fail"},
                                               {Verdict::not_applicable, "not-applicable"},
                                               {Verdict::outside_jurisdiction, "outside-jurisdiction"},
                                               {Verdict::reported, "reported"}};

std::string_view verdict_name(Verdict v) { return name_of(kVerdictNames, v); }

constexpr NameRow<Stage> kStageNames[] = {
    {Stage::provenance, "provenance"},     {Stage::arithmetic, "arithmetic"},
    {Stage::operands, "operands"},         {Stage::accumulator_range, "accumulator range"},
    {Stage::accumulation, "accumulation"}, {Stage::accumulation_model, "accumulation model"},
    {Stage::epilogue, "epilogue"},         {Stage::token, "token"},
    {Stage::invariance, "invariance"},     {Stage::not_localized, "not localized"}};

std::string_view stage_name(Stage s) { return name_of(kStageNames, s); }

std::string_view check_stage(std::string_view id) { return stage_name(check_spec(id).stage); }

void to_json(nlohmann::json& j, const CheckResult& r) {
  j = {{"id", r.id},           {"title", r.title},         {"verdict", verdict_name(r.verdict)},
       {"summary", r.summary}, {"evidence", r.evidence},   {"points_to", r.points_to},
       {"exclusions", r.exclusions}, {"falsifiable", r.falsifiable}};
}

Verdict combine(Verdict a, Verdict b) {
  if (a == Verdict::fail || b == Verdict::fail) return Verdict::fail;
  if (a == Verdict::pass || b == Verdict::pass) return Verdict::pass;
  return a;
}

}  // namespace qc
