// `qconform conform --arms A,B`: the conformance procedure C0 -> C7 with a verdict table, the
// results JSON and a self-contained HTML report.
#include <fmt/format.h>


#include "checks/c8_tp.hpp"
#include "cli/cli.hpp"
#include "cli/paths.hpp"
#include "dist/dist.hpp"
#include "cli/lists.hpp"
#include "cli/progress.hpp"
#include "qconform/check.hpp"
#include "orchestrate/conform.hpp"
#include "core/fileio.hpp"
#include "qconform/error.hpp"

namespace qc::cli {
namespace {

// One line per arm: the formula it declares, the one identify found (with its provenance), or why none.
std::string formula_line(const char* side, const nlohmann::json& arm) {
  // The label and the reasons come from the arm (a plugin's path and messages): escaped.
  const std::string label = printable_text(arm.value("label", std::string("?")));
  const nlohmann::json f = arm.value("formula", nlohmann::json::object());
  const std::string source = f.value("source", std::string("none"));
  if (source == "declared") return fmt::format("arm {} {}: declares {} = {}", side, label, f.value("declared", ""), f.value("formula", ""));
  if (source == "none") return fmt::format("arm {} {}: no formula ({})", side, label, f.value("reason", std::string("declares none")));
  const std::string verdict = f.value("verdict", std::string("?"));
  if (verdict == "identified") {
    const auto named = f.value("named", std::vector<std::string>{});
    return fmt::format("arm {} {}: identified {}{} ({}); declared as `{}` for C1-C6", side, label, f.value("formula", ""),
                       named.empty() ? std::string() : fmt::format(" = {}", fmt::join(named, ", ")), f.value("provenance", ""),
                       f.value("declared", ""));
  }
  std::string detail;
  if (f.contains("survivors")) detail += fmt::format(" ({} classes left)", f["survivors"].size());
  if (f.contains("diagnosis")) {
    std::vector<std::string> kinds;
    for (const auto& d : f["diagnosis"]) kinds.push_back(d.value("kind", std::string("?")));
    detail += fmt::format(" (diagnosis: {})", fmt::join(kinds, ", "));
  }
  return fmt::format("arm {} {}: identify says {}: {}{}; conform goes on without a declared formula for this arm (details: "
                     "results.json arms[].formula, or `qconform identify --arm {}`)",
                     side, label, verdict, printable_text(f.value("reason", ""), 2000), detail, label);
}

// C8 per arm (conform --invariance-mates / --invariance-tp): the check, then one line per decoder variant.
void print_invariance(const nlohmann::json& inv) {
  if (!inv.is_object()) return;
  fmt::print("\ninvariance (C8, each arm; batch mates {} ({}), tensor parallel {}):\n", inv["mates"].dump(),
             inv["mates_from"].is_string() ? inv["mates_from"].get<std::string>() : "-",
             inv["tp"].is_object() ? inv["tp"].dump() : "null");
  const auto variant_line = [](const char* what, const nlohmann::json& v) {
    if (!v.is_object()) return;
    const auto& seq = v["generation"]["sequence"];
    fmt::print("{:<30}{}: in the model {} of {} outputs differ from {}; sequences: {} of {} identical; replay: {} "
               "flips in {} positions\n",
               "", what, v["decoder"]["differing"].get<int64_t>(), v["decoder"]["elements"].get<int64_t>(),
               v["decoder"]["baseline"].get<std::string>(), seq["identical"].get<int64_t>(),
               seq["prompts"].get<int64_t>(), v["replay"]["replay"]["flips"].dump(),
               v["replay"]["replay"]["positions"].dump());
  };
  for (const auto& a : inv["arms"]) {
    const auto& c = a["check"];
    fmt::print("{:<4}{:<26}{:<22}{}\n", c["id"].get<std::string>(), c["title"].get<std::string>(),
               c["verdict"].get<std::string>(), c["summary"].get<std::string>());
    variant_line("batch mates", a["mates"]);
    if (a["tp"].is_object()) {
      fmt::print("{:<30}captured layers at TP 1 and {}: {}\n", "", a["tp"]["degree"].get<int>(),
                 a["tp"]["verdict"].is_string() ? a["tp"]["verdict"].get<std::string>() : "nothing compared (null)");
    }
    variant_line("tensor parallel", a["tp"]);
  }
}

VerbRunner setup_conform(CLI::App& app) {
  auto o = std::make_shared<ConformOptions>();
  auto arms = std::make_shared<std::string>(o->arm_a + "," + o->arm_b);
  app.add_option("--arms", *arms, "the two arms A,B (A is the reference)")->capture_default_str();
  app.add_option("--model", o->model, "llama2.c checkpoint or HF / compressed-tensors directory (default: a seeded "
                                      "synthetic W8A8 model)");
  app.add_option("--tokenizer", o->tokenizer,
                 "llama2.c tokenizer (text prompts); default: the first tok*.bin beside a llama2.c --model, as `make "
                 "demo` finds it (without one conform warns that it falls back to random-token prompts)");
  app.add_option("--prompts", o->prompts, "prompts: text lines (with --tokenizer) or token JSONL");
  app.add_option("--out", o->out_dir, "output directory")->capture_default_str();
  add_positive_option(app, "--max-new", o->max_new, "tokens to generate per prompt");
  add_non_negative_option(app, "--seed", o->seed, "seed of the synthetic model and prompts");
  app.add_option("--synthetic-config", o->synthetic_config, "synthetic model: tiny or qwen3-1.7b-shaped")
      ->capture_default_str();
  add_positive_option(app, "--synthetic-layers", o->synthetic_layers, "decoder layers of the synthetic model");
  app.add_option("--act-quantizer", o->act_quantizer, "activation quantizer: vllm, sglang or reciprocal")->capture_default_str();
  add_non_negative_option(app, "--tolerance-ulps", o->tolerance_ulps, "C6 tolerance in bf16 ulps");
  app.add_option("--max-flip-rate", o->max_flip_rate, "C7 tolerance on the teacher-forced flip rate (without it C7 only reports: verdict `reported`)")
      ->check(finite_in(0, 1));
  app.add_flag("--allow-unverified", o->allow_unverified, "proceed when the identity contract (C0) fails; recorded");
  app.add_option("--element", o->element,
                 "FP8 arms: element types, activations-weights: e4m3 (default), e5m2, e5m2-e4m3 or e4m3-e5m2 (as "
                 "`generate --mode w8a8-fp8`)");
  app.add_option("--act-scale", o->act_scale,
                 "FP8 arms: activation scales per-token (default) or per-tensor (vLLM's dynamic paths); block-scaled "
                 "arms (cpu:fp8-block-<form>): per-token-group:<g> (default per-token-group:128)");
  app.add_option("--weight-scale", o->weight_scale,
                 "FP8 arms: weight scales per-channel (default; an FP8 checkpoint's own) or per-tensor; block-scaled "
                 "arms: per-block:<rows>x<cols> (default per-block:128x128, a block-scaled checkpoint's own)");
  auto sweep_ks = std::make_shared<std::string>();
  app.add_option("--sweep-k", *sweep_ks,
                 "FP8 arms: the depth curve's K values (comma list; default 256,512,1024,2048,4096,8192; `none`: no curve)");
  app.add_flag("--identify,!--no-identify", o->identify,
               "run `identify` on an arm that declares no formula; its identified formula is then its declaration for "
               "C1-C6 (default on; --no-identify skips it)");
  auto invariance_mates = std::make_shared<std::string>();
  app.add_option("--invariance-mates", *invariance_mates,
                 "C8 end to end: also check each arm's invariance (its captured layers over batch sizes and mates, and "
                 "the model run with every linear layer's rows inside batches of this many synthetic rows more, e.g. "
                 "0,15,63,127; per layer and per sequence in results.json and the report; docs/invariance.md)");
  app.add_option("--invariance-mates-from", o->invariance_mates_from,
                 "with --invariance-mates: prompts (each prompt's rows inside batches of the rows other prompts fed the "
                 "same layer) or synthetic (rows of the call's magnitude)")
      ->capture_default_str()
      ->check(CLI::IsMember({"prompts", "synthetic"}));
  app.add_option("--invariance-tp", o->invariance_tp,
                 "C8 at a tensor-parallel degree: each arm's captured layers at TP 1 and this degree, and the model run "
                 "with every linear layer as that many shards (o_proj, down_proj split K and all-reduced), compared per "
                 "layer and per sequence with the plain run")
      ->check(non_negative_integer(o->invariance_tp));
  app.add_option("--invariance-reduction", o->invariance_reduction,
                 "with --invariance-tp: the all-reduce model, sequential, ring, ring:<chunk>, tree, +fp32")
      ->capture_default_str();
  return [=] {
    std::tie(o->arm_a, o->arm_b) = parse_pair("--arms", *arms);
    if (!invariance_mates->empty()) o->invariance_mates = parse_count_list("--invariance-mates", *invariance_mates);
    if (o->invariance_tp > 0) parse_reduction_model(o->invariance_reduction, "--invariance-reduction");
    if (*sweep_ks == "none") {
      o->sweep_ks.clear();
    } else if (!sweep_ks->empty()) {
      o->sweep_ks = parse_positive_list("--sweep-k", *sweep_ks);
    }
    std::vector<PathUse> paths_in;
    add_model_inputs(paths_in, "--model", o->model);
    paths_in.push_back({"--tokenizer", o->tokenizer});
    paths_in.push_back({"--prompts", o->prompts});
    add_arm_inputs(paths_in, "--arms", o->arm_a);
    add_arm_inputs(paths_in, "--arms", o->arm_b);
    check_inputs_outside_directory(paths_in, {"--out", o->out_dir});
    Progress progress("conform");
    const ConformOutcome outcome =
        run_conform(*o, [&](int i, int n, const std::string& what) { progress.update(static_cast<size_t>(i), static_cast<size_t>(n), what); });
    progress.finish();
    if (!dist::world().root()) return kExitOk;  // rank 0 reports and writes
    const auto& r = outcome.results;
    fmt::print("qconform conform: {} vs {} on {}\n", o->arm_a, o->arm_b, r["model"].get<std::string>());
    // The answer first: what a team may do with the pair (docs/checks.md, "The interchangeability answer").
    const nlohmann::json& answer = r["interchangeability"];
    fmt::print("interchangeability: {} — {}\n", answer["answer"].get<std::string>(), answer["reason"].get<std::string>());
    if (answer["advice"].is_string()) fmt::print("  next: {}\n", answer["advice"].get<std::string>());
    fmt::print("\nprompts: {}\n", r["prompts"]["source"].get<std::string>());
    if (r["prompts"]["warning"].is_string()) fmt::print("WARNING: {}\n", r["prompts"]["warning"].get<std::string>());
    for (size_t side = 0; side < r["arms"].size(); ++side) fmt::print("{}\n", formula_line(side == 0 ? "A" : "B", r["arms"][side]));
    fmt::print("\n");
    fmt::print("{:<4}{:<26}{:<22}{}\n", "", "check", "verdict", "evidence");
    for (const auto& c : r["checks"]) {
      fmt::print("{:<4}{:<26}{:<22}{}\n", c["id"].get<std::string>(), c["title"].get<std::string>(),
                 c["verdict"].get<std::string>(), c["summary"].get<std::string>());
      if (c["verdict"] != "fail") continue;
      fmt::print("{:<30}points to: {}\n", "", c["points_to"].get<std::string>());
      // C1: each failed case by name, its inputs, what the arm returned against what was expected.
      for (const auto& f : c["evidence"].value("failed_cases", nlohmann::json::array())) {
        // The cause is printed once: the check's "points to" above already names the first case's.
        const std::string cause = f["points_to"].get<std::string>();
        fmt::print("{:<30}case {} (arm {} {}): inputs {}; {}{}\n", "", f["id"].get<std::string>(),
                   f["arm"].get<std::string>(), f["label"].get<std::string>(), f["inputs"].get<std::string>(),
                   printable_text(f["detail"].get<std::string>(), 2000),
                   c["points_to"].get<std::string>().ends_with(cause) ? "" : "; points to " + cause);
      }
    }
    print_invariance(r["invariance"]);
    fmt::print("\npredictions pinned: {}\nresults: {}\nreport:  {}\n",
               r["pin"].is_string() ? r["pin"].get<std::string>() : "none (FP8 pair: C2 does not apply)",
               outcome.results_path, outcome.report_path);
    fmt::print("{}\n", outcome.passed ? "checks: no falsifiable check failed (the answer above says what that licenses)"
                                      : "checks: a check FAILED (see points-to above)");
    return outcome.passed ? kExitOk : kExitCheckFailed;
  };
}

RegisterVerb register_conform{{"conform", "The conformance procedure " + check_id_range() + " on two arms and a model, with an HTML report",
                               5, setup_conform}};

}  // namespace
}  // namespace qc::cli
