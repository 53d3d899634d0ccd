// The conformance procedure end to end (C0 -> C7). Each stage writes its artefact into the output
// directory atomically; results.json and report.html come last.
#include "orchestrate/conform.hpp"
#include "orchestrate/conform_runs.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <filesystem>
#include <map>
#include <optional>

#include "qconform/arm.hpp"
#include "arms/declared_arm.hpp"
#include "checks/c1_boundary.hpp"
#include "checks/identify.hpp"
#include "checks/interchangeability.hpp"
#include "epilogue/formula_space.hpp"
#include "checks/c5_pow2.hpp"
#include "checks/c7_transfer.hpp"
#include "orchestrate/sweep.hpp"
#include "epilogue/block_models.hpp"
#include "accum/fp8_model.hpp"
#include "qconform/epilogue.hpp"
#include "dist/dist.hpp"
#include "qconform/error.hpp"
#include "core/fileio.hpp"
#include "core/limits.hpp"
#include "core/output_lock.hpp"
#include "checks/verify.hpp"
#include "checks/verify_results.hpp"
#include "qconform/manifest.hpp"
#include "model/model.hpp"
#include "core/operands_io.hpp"
#include "core/results_json.hpp"
#include "checks/c8_invariance.hpp"
#include "checks/c8_tp.hpp"
#include "qconform/report.hpp"
#include "core/sha256.hpp"
#include "synth/synth.hpp"
#include "model/tokenizer.hpp"
#include "stats/transfer.hpp"
#include "core/version.hpp"

namespace qc {

namespace {

namespace fs = std::filesystem;

// What formula an arm declares, for results.json and the report: {source: "declared", declared,
// formula (the point's notation where the row has one)}.
nlohmann::json declared_formula(const ArmInfo& info) {
  nlohmann::json f = {{"source", "declared"}, {"declared", info.epilogue}, {"formula", info.epilogue}};
  try {
    const Epilogue& e = epilogue(info.epilogue);
    if (const auto p = row_point(e)) {
      const auto sp = row_swap_point(e);
      f["formula"] = sp ? fmt::format("{}; {}: {}", formula_notation(*p), dispatch_condition(e), formula_notation(*sp))
                        : formula_notation(*p);
    }
  } catch (const Error&) {
    // A declaration outside the table (an FP8 arm's `fp8-scaled` has no point): its name is its formula.
  }
  return f;
}

// Identifies an arm that declares no epilogue (on rank 0; every rank receives the declaration) and
// returns it declared, or unchanged when identify names no single class. `summary` receives what
// results.json and the report show.
std::unique_ptr<Arm> identify_undeclared(std::unique_ptr<Arm> arm, const std::string& side, nlohmann::json& summary) {
  const bool root = dist::world().root();
  std::string declaration;
  if (root) {
    try {
      const IdentifyResult r = identify(*arm);
      summary = identify_summary(r);
      declaration = identified_declaration(r);
    } catch (const Error& e) {
      // An arm identify cannot probe (it refuses the probe operands) goes on undeclared, as before.
      if (e.kind() != ErrorKind::input) throw;
      summary = {{"source", "identify"}, {"verdict", "error"}, {"reason", e.what()}};
    }
  }
  declaration = dist::broadcast(declaration);
  if (declaration.empty()) return arm;
  const std::string provenance = root ? summary.at("provenance").get<std::string>() : std::string("identified by qconform identify");
  return declare_epilogue(std::move(arm), declaration, fmt::format("conform: the formula identified for arm {}", side), provenance);
}

// What an FP8 arm declares, for results.json and the report: its accumulation model (measured by C1)
// and the epilogue verify holds it to.
nlohmann::json declared_fp8_formula(const ArmInfo& info) {
  if (is_block_model_name(info.accumulation_model)) {  // the scales and the bf16 rounding are part of the model
    return {{"source", "declared"},
            {"declared", info.accumulation_model},
            {"accumulation_model", info.accumulation_model},
            {"formula", declared_model_formula(info.accumulation_model)}};
  }
  const std::string epilogue = info.epilogue.empty() ? std::string(fp8_epilogue().name) : info.epilogue;
  return {{"source", "declared"},
          {"declared", fmt::format("{} + {}", info.accumulation_model, epilogue)},
          {"accumulation_model", info.accumulation_model},
          {"formula", fmt::format("{}; then {}", accumulation_formula(fp8_accumulation_model(info.accumulation_model).model),
                                  epilogue)}};
}

// The FP8 pair's divergence versus reduction depth (`qconform sweep` on synthetic FP8 operands) as the
// report's `sweep` section reads it, each point with the differences the declared models explained;
// the sweep's own JSON under `sweep`.
nlohmann::json fp8_depth_curve(const ConformOptions& o) {
  SweepOptions so;
  so.arm_a = o.arm_a;
  so.arm_b = o.arm_b;
  so.ks = o.sweep_ks;
  so.m = o.sweep_m;
  so.n = o.sweep_n;
  so.seeds = o.sweep_seeds;
  so.first_seed = o.seed;
  const SweepResult r = run_sweep(so);
  nlohmann::json points = nlohmann::json::array();
  for (const SweepRow& w : r.rows) {
    points.push_back({{"k", w.k},
                      {"bitwise_diff", w.differing},
                      {"total", w.total},
                      {"max_ulp", w.max_ulp},
                      {"explained", w.explained_cells ? nlohmann::json(w.explained) : nlohmann::json(nullptr)},
                      {"explained_of", w.explained_of}});
  }
  return {{"x", "k"},
          {"description", fmt::format("{} vs {} on synthetic {}FP8 operands (M = {}, N = {}, {} seeds per K): the share "
                                      "of differing elements whose two values the declared accumulation models "
                                      "predicted exactly is the explained column",
                                      o.arm_a, o.arm_b, r.format == SweepFormat::fp8_block ? "block-scaled " : "",
                                      o.sweep_m, o.sweep_n, o.sweep_seeds)},
          {"series", {{{"name", fmt::format("{}FP8 {} vs {}", r.format == SweepFormat::fp8_block ? "block-scaled " : "",
                                            o.arm_a, o.arm_b)},
                       {"points", points}}}},
          {"sweep", to_json(r)}};
}

// ---- the stages of run_conform, in its order ----------------------------------------------------

// The options and the arm pair, before anything is made: true for an FP8 pair.
bool check_conform_inputs(const ConformOptions& o, const Arm& arm_a, const Arm& arm_b) {
  // NaN fails both comparisons; -1 (the default) means "report only".
  QC_INPUT(o.max_flip_rate == -1 || (o.max_flip_rate >= 0 && o.max_flip_rate <= 1),
           "--max-flip-rate: expected a rate in [0, 1] (omit the option to only report the rate), found {}",
           o.max_flip_rate);
  QC_INPUT(o.tolerance_ulps >= 0, "--tolerance-ulps: expected a non-negative number of ulps, found {}", o.tolerance_ulps);
  QC_INPUT(o.arm_a != o.arm_b, "--arms {},{}: expected two different arms (the treatment)", o.arm_a, o.arm_b);
  // An FP8 pair (both arms declare an accumulation model) runs the decoder in mode w8a8-fp8 and is
  // verified against the declared models (docs/accumulation.md); a mixed pair compares nothing.
  const bool fp8 = arm_a.info().fp8();
  QC_INPUT(fp8 == arm_b.info().fp8(),
           "--arms {},{}: expected two INT8 arms or two FP8 arms (an FP8 element or accumulation model), found "
           "arm A {} and arm B {}",
           o.arm_a, o.arm_b, fp8 ? "FP8" : "INT8", fp8 ? "INT8" : "FP8");
  for (const auto& [flag, value] : {std::pair{"--element", &o.element}, std::pair{"--act-scale", &o.act_scale},
                                    std::pair{"--weight-scale", &o.weight_scale}}) {
    QC_INPUT(fp8 || value->empty(), "{} `{}`: the arms {} and {} are INT8 arms; FP8 quantization applies to two FP8 arms",
             flag, *value, o.arm_a, o.arm_b);
  }
  return fp8;
}

// An arm that declares no formula (a plugin, a declared-nothing arm) is identified first: the
// identified formula is its declaration for C1 and C2-C6 (C6's predicted set), with its
// provenance in the results; `ambiguous` or `unexplained` is reported and the arm goes on
// undeclared (docs/identify.md, "conform"). Returns each arm's formula record.
std::array<nlohmann::json, 2> arm_formulas(const ConformOptions& o, std::array<std::unique_ptr<Arm>*, 2> arms) {
  std::array<nlohmann::json, 2> formulas;
  for (int side = 0; side < 2; ++side) {
    const ArmInfo info = (*arms[side])->info();
    if (!info.accumulation_model.empty()) {
      formulas[side] = declared_fp8_formula(info);  // its model is measured by C1, not identified
    } else if (info.fp8() && !o.identify) {
      formulas[side] = {{"source", "none"},
                        {"reason", "FP8 arm with no declared accumulation model; not identified (--no-identify): its "
                                   "differences are not predicted"}};
    } else if (!info.fp8() && !info.epilogue.empty()) {
      formulas[side] = declared_formula(info);
    } else if (!o.identify) {
      formulas[side] = {{"source", "none"}, {"reason", "declares no formula; not identified (--no-identify)"}};
    } else {
      *arms[side] = identify_undeclared(std::move(*arms[side]), side == 0 ? "A" : "B", formulas[side]);
    }
  }
  return formulas;
}

// Makes and locks the output directory once every input was valid, with the files conform made of its own.
void make_output_dir(const ConformOptions& o, const LoadedModel& lm) {
  std::error_code ec;
  fs::create_directories(o.out_dir, ec);
  QC_INPUT(!ec && fs::is_directory(o.out_dir), "--out {}: expected a directory that can be created, found: {}", o.out_dir,
           ec ? ec.message() : "an existing file");
  lock_output("--out", o.out_dir);
  for (const auto& [path, content] : lm.generated) write_file_atomic(path, content);
}

// C1 on each arm, combined; `failed_cases` every failed case with its arm.
struct BoundaryPair {
  CheckResult c1;
  nlohmann::json failed_cases = nlohmann::json::array();
};

BoundaryPair boundary_of_pair(Arm& arm_a, Arm& arm_b, bool root) {
  const BoundaryResult boundary_a = root ? run_boundary(arm_a) : BoundaryResult{};
  const BoundaryResult boundary_b = root ? run_boundary(arm_b) : BoundaryResult{};
  // Exit 0 means checked: an arm that ran no probe of a mandatory C1 family (an unavailable
  // device, a plugin refusing every probe) leaves nothing to compare (docs/hostile-inputs.md).
  for (const BoundaryResult* b : {&boundary_a, &boundary_b}) {
    QC_INPUT(!root || b->checked(), "C1 for arm `{}`: nothing to check: no probe of {} ran through the arm ({})",
             printable_text(b->arm.label), fmt::join(b->families_not_run, ", "), b->c1.summary);
  }
  BoundaryPair p;
  CheckResult& c1 = p.c1;
  c1 = boundary_a.c1;
  c1.verdict = combine(boundary_a.c1.verdict, boundary_b.c1.verdict);
  c1.summary = fmt::format("A: {} — B: {}", boundary_a.c1.summary, boundary_b.c1.summary);
  // Every failed case, with its arm: the case id, inputs, what the arm returned and what was expected,
  // and its own cause; the check points to the first one's.
  for (const auto& [side, b] : {std::pair{"A", &boundary_a}, std::pair{"B", &boundary_b}}) {
    for (const BoundaryCase& bc : b->cases) {
      if (bc.verdict != Verdict::fail) continue;
      if (p.failed_cases.empty()) c1.points_to = fmt::format("arm {} ({}): {}", side, printable_text(b->arm.label), bc.points_to);
      p.failed_cases.push_back({{"arm", side}, {"label", printable_text(b->arm.label)}, {"id", bc.id},
                                {"inputs", bc.inputs}, {"detail", bc.detail}, {"points_to", bc.points_to}});
    }
  }
  c1.evidence = {{"a", to_json(boundary_a)}, {"b", to_json(boundary_b)}, {"failed_cases", p.failed_cases}};
  return p;
}

// The operands of every linear layer (arm A's run; activation quantization is shared), written
// with their manifest by rank 0.
OperandSet capture_layers(const ConformOptions& o, const LoadedModel& lm, const std::string& dir, bool fp8, bool root) {
  std::vector<std::vector<int32_t>> prompt_tokens;
  for (const TokenSequence& p : lm.prompts) prompt_tokens.push_back(p.tokens);
  const std::vector<LayerOperands> captured =
      capture_operands(lm.model, w8a8_options(o, lm.model, o.arm_a, false, fp8), prompt_tokens).layers;
  const std::string ops_path = dir + "/operands.safetensors";
  // Every rank captured the same operands (the capture is deterministic); rank 0 writes them and
  // tells the others their digest.
  OperandSet ops;
  if (root) {
    save_operands(ops_path, captured, {{"source", "qconform conform capture"}, {"model", lm.description}});
    ops = load_operands(ops_path);
    std::vector<std::pair<std::string, std::string>> inputs = lm.inputs;
    inputs.emplace_back("operands", ops_path);
    write_manifest(dir + "/capture.manifest.json",
                   make_manifest("capture", o.arm_a, std::nullopt, inputs, {{"act_quantizer", o.act_quantizer}}));
  } else {
    ops.path = ops_path;
    ops.layers = captured;
  }
  ops.sha256 = dist::broadcast(ops.sha256);
  return ops;
}

// The layers as the ranks share them: their indices and their work (M x N x K).
struct LayerWork {
  std::vector<size_t> items;
  std::vector<double> cost;
};

LayerWork layer_work(const OperandSet& ops) {
  LayerWork w;
  for (size_t i = 0; i < ops.layers.size(); ++i) {
    const LayerOperands& l = ops.layers[i];
    w.items.push_back(i);
    w.cost.push_back(static_cast<double>(l.m) * static_cast<double>(l.n) * static_cast<double>(l.k));
  }
  return w;
}

// C2: predictions pinned before any comparison; `pin` their digest ("" for FP8: C2 does not apply,
// no INT32 accumulator to bound; nothing is written or pinned).
struct PinnedPredictions {
  PredictionSet predictions;
  std::string pin;
};

PinnedPredictions predict_and_pin(const OperandSet& ops, const LayerWork& work, const std::string& dir, bool fp8,
                                  bool root) {
  const dist::Shared predicted = dist::run_shared(
      work.items, work.cost, [&](const std::vector<size_t>& mine, dist::Outcome& out, std::string& in_progress) {
        for (size_t i : mine) {
          in_progress = fmt::format("predict layer {} `{}`", i, ops.layers[i].name);
          out.results[i] = to_json(predict_layer(ops.layers[i]));
        }
      });
  PinnedPredictions p;
  PredictionSet& predictions = p.predictions;
  predictions.operands_path = ops.path;
  predictions.operands_sha256 = ops.sha256;
  for (const auto& [i, l] : predicted.results) predictions.layers.push_back(layer_prediction_from_json(l));
  const std::string predictions_path = dir + "/predictions.json";
  const std::string predictions_text = dist::broadcast(to_json(predictions).dump(1) + "\n");
  predictions = prediction_set_from_json(parse_json(predictions_text, "the predictions from rank 0"), "predictions from rank 0");
  predictions.pinned = !fp8;  // pinned below, before any comparison runs
  p.pin = fp8 ? std::string() : "sha256:" + sha256_hex(std::string_view(predictions_text));
  if (root && !fp8) {
    write_file_atomic(predictions_path, predictions_text);
    QC_CHECK(sha256_file(predictions_path) == p.pin, "the predictions file changed after it was pinned");
  }
  return p;
}

// Every rank's phase timings added up into `verify`, its wall time the longest.
void add_rank_timings(VerifyResult& verify, const std::vector<nlohmann::json>& rank_info) {
  add_rank_seconds(verify, rank_info);
  for (const nlohmann::json& info : rank_info) {
    verify.wall_seconds = std::max(verify.wall_seconds, info.at("wall_seconds").get<double>());
  }
}

// The layer-level checks at the captured M and the smaller Ms of the sweep, the layers shared over
// the ranks; the merged result on rank 0 (empty elsewhere).
VerifyResult verify_layers(const ConformOptions& o, Arm& arm_a, Arm& arm_b, const OperandSet& ops,
                           const LayerWork& work, const PredictionSet& predictions, bool root) {
  VerifyOptions vo;
  vo.tolerance_ulps = o.tolerance_ulps;
  const int64_t captured_m = ops.layers.front().m;
  for (int64_t m : o.m_sweep) {
    if (m < captured_m) vo.m_sweep.push_back(m);
  }
  if (!vo.m_sweep.empty()) vo.m_sweep.push_back(captured_m);
  std::string reference;
  const dist::Shared verified = dist::run_shared(
      work.items, work.cost, [&](const std::vector<size_t>& mine, dist::Outcome& out, std::string& in_progress) {
        VerifySelection selection;
        selection.only = true;
        selection.layers = mine;
        selection.started = [&](size_t i) { in_progress = fmt::format("verify layer {} `{}`", i, ops.layers[i].name); };
        selection.done = [&](size_t i, const LayerVerification& v) { out.results[i] = to_json(v); };
        const VerifiedLayers part = verify_layer_runs(
            arm_a, arm_b, ops.layers.size(), [&](size_t i) { return ops.layers[i]; }, predictions, vo, selection);
        reference = part.reference;
        nlohmann::json seconds = nlohmann::json::array();
        for (const auto& [phase, sec] : part.seconds) seconds.push_back({phase, sec});
        out.rank_info = {{"seconds", seconds}, {"wall_seconds", part.wall_seconds}};
      });
  VerifyResult verify;
  if (!root) return verify;
  std::vector<LayerVerification> layers;
  for (const auto& [i, j] : verified.results) layers.push_back(layer_verification_from_json(j, "rank results"));
  if (reference.empty()) reference = reference_description(resolve_reference(vo.reference));
  verify = merge_verifications(arm_a.info(), arm_b.info(), reference, std::move(layers), predictions, vo);
  add_rank_timings(verify, verified.rank_info);
  return verify;
}

// The token-level runs: free-running generations, teacher-forced replays of A's sequences, and
// the power-of-two probe end to end.
struct TokenRuns {
  RunFiles gen_a, gen_b, rep_a, rep_b, pow_a, pow_b;
  std::shared_ptr<PromptRows> prompts;  // the rows each prompt fed the layers in gen_a (C8's mates), or null
};

TokenRuns run_token_level(const ConformOptions& o, const LoadedModel& lm, const std::string& dir, bool fp8,
                          const std::function<void(const std::string&)>& step) {
  TokenRuns t;
  step("generate (real scales)");
  // C8's mates from other prompts: arm A's plain generation records the rows each prompt feeds each
  // layer (a copy beside the run; its outputs are unchanged).
  std::optional<DecoderVariant> recorder;
  if (!o.invariance_mates.empty() && o.invariance_mates_from == "prompts") {
    recorder.emplace();
    recorder->prompts = t.prompts = std::make_shared<PromptRows>();
    recorder->record = true;
  }
  t.gen_a = run_model(o, lm, dir, o.arm_a, "generate", false, fp8, nullptr, "generate.A", {},
                      recorder ? &*recorder : nullptr);
  t.gen_b = run_model(o, lm, dir, o.arm_b, "generate", false, fp8, nullptr, "generate.B", {});
  step("replay (teacher forcing)");
  const std::vector<std::pair<std::string, std::string>> forced_input = {{"forced_tokens", t.gen_a.jsonl}};
  t.rep_a = run_model(o, lm, dir, o.arm_a, "replay", false, fp8, &t.gen_a.sequences, "replay.A", forced_input);
  t.rep_b = run_model(o, lm, dir, o.arm_b, "replay", false, fp8, &t.gen_a.sequences, "replay.B", forced_input);
  step("generate (power-of-two probe)");
  t.pow_a = run_model(o, lm, dir, o.arm_a, "generate", true, fp8, nullptr, "generate.pow2.A", {});
  t.pow_b = run_model(o, lm, dir, o.arm_b, "generate", true, fp8, nullptr, "generate.pow2.B", {});
  return t;
}

// C7 on the replays (flips) and the generations (identical sequences).
struct TransferPair {
  transfer::TransferResult replay, generation;
};

TransferPair transfer_of(const TokenRuns& t, uint64_t seed) {
  transfer::TransferOptions to;
  to.replay = true;
  to.seed = 20240607 ^ seed;
  to.min_bin_support = 20;
  TransferPair p{
      transfer::analyze_transfer(transfer::read_transfer_jsonl(t.rep_a.jsonl), transfer::read_transfer_jsonl(t.rep_b.jsonl), to),
      transfer::analyze_transfer(transfer::read_transfer_jsonl(t.gen_a.jsonl), transfer::read_transfer_jsonl(t.gen_b.jsonl),
                                 transfer::TransferOptions{})};
  return p;
}

// C8 end to end (`--invariance-mates`, `--invariance-tp`): per arm, the captured layers over batch sizes
// and mates (and at the TP degree), and the model run again with every linear layer's rows inside batches
// of mates, and as TP shards; the sequences compared with the runs alone (generate: per prompt; replay:
// C7's flips).
struct VariantRuns {
  DecoderVariant variant;
  RunFiles gen, rep;
  int64_t from_prompts = 0, synthetic = 0;  // mate rows of this variant's runs (mates from prompts)
};
struct ArmInvarianceRuns {
  ArmInvariance layers;                // rank 0 only
  std::vector<LayerTp> tp_layers;      // rank 0 only, with --invariance-tp
  std::optional<VariantRuns> mates, tp;
};
struct InvarianceRuns {
  bool ran = false;
  std::array<ArmInvarianceRuns, 2> arms;
};

bool invariance_requested(const ConformOptions& o) { return !o.invariance_mates.empty() || o.invariance_tp > 0; }

InvarianceRuns run_invariance(const ConformOptions& o, const LoadedModel& lm, const std::string& dir, bool fp8,
                              const TokenRuns& t, const OperandSet& ops, std::array<Arm*, 2> arms, bool root,
                              const std::function<void(const std::string&)>& step) {
  InvarianceRuns v;
  if (!invariance_requested(o)) return v;
  v.ran = true;
  step("C8 invariance (batch mates, tensor parallelism)");
  const std::array<std::string, 2> labels = {o.arm_a, o.arm_b}, sides = {"A", "B"};
  const std::vector<std::pair<std::string, std::string>> forced_input = {{"forced_tokens", t.gen_a.jsonl}};
  const auto run_variant = [&](size_t s, DecoderVariant variant, const std::string& tag) {
    VariantRuns r{std::move(variant), {}, {}};
    const int64_t p0 = r.variant.prompts ? r.variant.prompts->from_prompts.load() : 0;
    const int64_t s0 = r.variant.prompts ? r.variant.prompts->synthetic.load() : 0;
    r.gen = run_model(o, lm, dir, labels[s], "generate", false, fp8, nullptr, "generate." + tag + "." + sides[s], {},
                      &r.variant);
    r.rep = run_model(o, lm, dir, labels[s], "replay", false, fp8, &t.gen_a.sequences, "replay." + tag + "." + sides[s],
                      forced_input, &r.variant);
    if (r.variant.prompts) {
      r.from_prompts = r.variant.prompts->from_prompts.load() - p0;
      r.synthetic = r.variant.prompts->synthetic.load() - s0;
    }
    return r;
  };
  for (size_t s = 0; s < 2; ++s) {
    ArmInvarianceRuns& a = v.arms[s];
    if (!o.invariance_mates.empty()) {
      DecoderVariant d;
      d.mates = o.invariance_mates;
      d.prompts = t.prompts;
      a.mates = run_variant(s, std::move(d), "mates");
    }
    if (o.invariance_tp > 0) {
      DecoderVariant d;
      d.tp_degree = o.invariance_tp;
      d.reduction = o.invariance_reduction;
      a.tp = run_variant(s, std::move(d), fmt::format("tp{}", o.invariance_tp));
    }
    if (!root) continue;
    InvarianceOptions io;
    io.mates = {"ordered", "shuffled"};
    io.seed = o.seed;
    a.layers = arm_invariance(*arms[s], ops.size(), [&](size_t i) { return ops.load(i); }, io);
    if (o.invariance_tp > 0) {
      TpOptions to;
      to.degrees = {1, o.invariance_tp};
      to.declared = o.invariance_reduction;
      for (size_t i = 0; i < ops.size(); ++i) a.tp_layers.push_back(layer_tp(*arms[s], ops.load(i), to));
    }
  }
  return v;
}

// One decoder variant against the plain runs: its per-layer counts, the sequences (generate), the flips
// (replay) and whether every record is the same.
nlohmann::json variant_results(const VariantRuns& r, const RunFiles& gen_alone, const RunFiles& rep_alone, uint64_t seed) {
  transfer::TransferOptions replay;
  replay.replay = true;
  replay.seed = 20240607 ^ seed;
  replay.min_bin_support = 20;
  nlohmann::json j = {{"decoder", r.variant.stats->to_json()}};
  if (r.variant.prompts && !r.variant.mates.empty()) {
    // Counted over this variant's generate and replay runs: mates that are other prompts' rows, and the
    // synthetic rows used where the pool had none (a layer no other prompt reached).
    j["mate_rows"] = {{"from_other_prompts", r.from_prompts}, {"synthetic", r.synthetic}};
  }
  if (dist::world().size > 1) j["decoder"]["note"] = "rank 0's prompts only: the per-layer counts are not gathered over ranks";
  if (r.variant.tp_degree > 0) {
    nlohmann::json unsharded = nlohmann::json::object();
    std::lock_guard lock(r.variant.unsharded->mu);
    for (const auto& [layer, why] : r.variant.unsharded->unsharded) unsharded[layer] = why;
    j["degree"] = r.variant.tp_degree, j["reduction"] = r.variant.reduction, j["unsharded"] = unsharded;
  }
  j["generation"] = transfer::to_json(transfer::analyze_transfer(transfer::read_transfer_jsonl(gen_alone.jsonl),
                                                                 transfer::read_transfer_jsonl(r.gen.jsonl),
                                                                 transfer::TransferOptions{}));
  j["replay"] = transfer::to_json(
      transfer::analyze_transfer(transfer::read_transfer_jsonl(rep_alone.jsonl), transfer::read_transfer_jsonl(r.rep.jsonl), replay));
  j["records_identical"] = records_body(gen_alone.jsonl) == records_body(r.gen.jsonl) &&
                           records_body(rep_alone.jsonl) == records_body(r.rep.jsonl);
  return j;
}

// results.json `invariance`: per arm the C8 check over the captured layers, the layers (and their TP
// degrees), and each decoder variant against the plain runs.
nlohmann::json invariance_results(const InvarianceRuns& v, const TokenRuns& t, const ConformOptions& o) {
  if (!v.ran) return nullptr;
  nlohmann::json arms = nlohmann::json::array();
  const std::array<const RunFiles*, 2> gen_alone = {&t.gen_a, &t.gen_b}, rep_alone = {&t.rep_a, &t.rep_b};
  for (size_t s = 0; s < 2; ++s) {
    const ArmInvarianceRuns& a = v.arms[s];
    nlohmann::json arm = to_json(a.layers);
    arm["mates"] = a.mates ? variant_results(*a.mates, *gen_alone[s], *rep_alone[s], o.seed) : nlohmann::json();
    arm["tp"] = a.tp ? variant_results(*a.tp, *gen_alone[s], *rep_alone[s], o.seed) : nlohmann::json();
    if (a.tp) {
      nlohmann::json layers = nlohmann::json::array();
      std::vector<std::optional<std::string>> verdicts;
      for (const LayerTp& l : a.tp_layers) layers.push_back(to_json(l)), verdicts.push_back(l.verdict);
      const std::optional<std::string> worst = combine_invariance(verdicts);
      arm["tp"]["layers"] = layers;
      arm["tp"]["verdict"] = worst ? nlohmann::json(*worst) : nlohmann::json();
    }
    arms.push_back(std::move(arm));
  }
  return {{"mates", o.invariance_mates.empty() ? nlohmann::json() : nlohmann::json(o.invariance_mates)},
          {"mates_from", o.invariance_mates.empty() ? nlohmann::json() : nlohmann::json(o.invariance_mates_from == "prompts" ? "other prompts" : "synthetic rows")},
          {"tp", o.invariance_tp > 0 ? nlohmann::json{{"degree", o.invariance_tp}, {"reduction", o.invariance_reduction}}
                                     : nlohmann::json()},
          {"arms", arms}};
}

// The answer: verify's facts (C2-C6, every run), with the checks only conform runs and the tokens.
InterchangeabilityAnswer conform_answer(const VerifyResult& verify, const std::vector<CheckResult>& all,
                                        const nlohmann::json& failed_cases, const TransferPair& tr, bool fp8,
                                        bool pow2_identical) {
  InterchangeabilityFacts facts = facts_from_verify(verify, UserLanguage::cli);
  facts.failures.clear();
  for (const CheckResult& c : all) {
    if (c.verdict != Verdict::fail) continue;
    if (check_spec(c.id).per_layer) {  // verify's checks, localized as verify localized them
      facts.failures.push_back(verify_failure(c, verify));
      continue;
    }
    std::string detail = c.points_to;
    if (c.id == "C1" && !failed_cases.empty()) detail = fmt::format("case {}, {}", failed_cases[0]["id"].get<std::string>(), detail);
    facts.failures.push_back({c.id, std::string(check_stage(c.id)), detail});
  }
  facts.tokens_measured = true;
  facts.flips = static_cast<int64_t>(tr.replay.replay->n_flips);
  facts.positions = static_cast<int64_t>(tr.replay.replay->n_positions);
  facts.sequences = static_cast<int64_t>(tr.generation.sequence->n_prompts);
  facts.identical_sequences = static_cast<int64_t>(tr.generation.sequence->n_identical);
  // FP8: the two models differ under power-of-two scales too, so only INT8 pairs expect identity there.
  facts.pow2_end_to_end_identical = fp8 || pow2_identical;
  return decide_interchangeability(facts);
}

// Everything results.json holds beyond the checks.
struct ConformRecord {
  const ConformOptions& o;
  const LoadedModel& lm;
  const std::string& dir;
  const TokenRuns& runs;
  const std::array<nlohmann::json, 2>& formulas;
  const PinnedPredictions& pinned;
  const VerifyResult& verify;
  const TransferPair& transfer;
  const JoinResult& join;
  const InterchangeabilityAnswer& answer;
  const nlohmann::json& depth;
  const nlohmann::json& invariance;
  bool fp8;
};

nlohmann::json conform_results(const ConformRecord& r, const std::vector<CheckResult>& all) {
  const ConformOptions& o = r.o;
  const TokenRuns& t = r.runs;
  nlohmann::json manifest_files = nlohmann::json::array();
  for (const std::string& path : {r.dir + "/capture.manifest.json", t.gen_a.manifest, t.gen_b.manifest, t.rep_a.manifest,
                                  t.rep_b.manifest, t.pow_a.manifest, t.pow_b.manifest}) {
    manifest_files.push_back({{"path", path}, {"sha256", sha256_file(path)}, {"manifest", to_json(read_manifest(path))}});
  }
  nlohmann::json verify_json = to_json(r.verify);
  verify_json.erase("interchangeability");  // conform's answer (below) also reads C0, C1, C7 and the tokens
  for (size_t side = 0; side < 2 && side < verify_json["arms"].size(); ++side) verify_json["arms"][side]["formula"] = r.formulas[side];
  const bool fp8 = r.fp8;
  return results_envelope("results", {
      {"title", fmt::format("qconform: {} vs {}", o.arm_a, o.arm_b)},
      {"created", utc_now_iso8601()},
      {"project_version", version()},
      {"model", r.lm.description},
      {"arms", verify_json["arms"]},
      {"checks", all},
      {"predictions", fp8 ? nlohmann::json(nullptr) : to_json(r.pinned.predictions)},
      {"pin", fp8 ? nlohmann::json(nullptr) : nlohmann::json(r.pinned.pin)},
      {"verify", verify_json},
      {"transfer", transfer::to_json(r.transfer.replay)},
      {"generation", transfer::to_json(r.transfer.generation)},
      {"manifests", {{"files", manifest_files}, {"join", to_json(r.join)}}},
      {"unverified", !r.join.verified()},
      {"fp8", fp8 ? nlohmann::json{{"quantization", fp8_run_config(w8a8_options(o, r.lm.model, o.arm_a, false, true))},
                                   {"models", verify_json["fp8"]["models"]}}
                  : nlohmann::json(nullptr)},
      {"interchangeability", to_json(r.answer)},
      {"prompts", {{"source", r.lm.prompts_source},
                   {"count", r.lm.prompts.size()},
                   {"tokenizer", r.lm.tokenizer_path.empty() ? nlohmann::json(nullptr) : nlohmann::json(r.lm.tokenizer_path)},
                   {"warning", r.lm.prompts_warning.empty() ? nlohmann::json(nullptr) : nlohmann::json(r.lm.prompts_warning)}}},
      {"sweep", r.depth},
      {"invariance", r.invariance},
      {"allow_unverified", o.allow_unverified},
  });
}

}  // namespace

ConformOutcome run_conform(const ConformOptions& o, const std::function<void(int, int, const std::string&)>& progress) {
  const int kStages = 11 + (invariance_requested(o) ? 1 : 0);
  int stage = 0;
  const std::function<void(const std::string&)> step = [&](const std::string& what) {
    if (progress) progress(++stage, kStages, what);
  };
  // The output directory is made only once every input was validated (below): a run refused for
  // its inputs leaves nothing behind. What can be known of it now is checked now.
  std::error_code ec;
  QC_INPUT(!fs::exists(o.out_dir, ec) || fs::is_directory(o.out_dir, ec),
           "--out {}: expected a directory (or a path where one can be made), found an existing {}", o.out_dir,
           fs::is_symlink(o.out_dir, ec) ? "symbolic link to a non-directory" : "file");
  const std::string dir = fs::path(o.out_dir).string();
  auto arm_a = make_arm(o.arm_a);
  auto arm_b = make_arm(o.arm_b);
  const bool fp8 = check_conform_inputs(o, *arm_a, *arm_b);

  step("identify undeclared arms");
  const std::array<nlohmann::json, 2> formulas = arm_formulas(o, {&arm_a, &arm_b});

  // Under MPI (docs/distributed.md) the layers of predict and verify and the prompts of the model
  // runs are shared over the ranks; rank 0 alone runs the rest and writes every file (other ranks
  // return an outcome without results).
  const bool root = dist::world().root();
  step("model and prompts");
  const LoadedModel lm = load_model_and_prompts(o, dir);
  // The model and the mode fit (an FP8 pair refuses a bias and an INT8 checkpoint; an INT8 pair an FP8
  // checkpoint) before anything runs.
  check_checkpoint_takes_options(lm.description, weight_storage(lm.model), lm.model.config.qkv_bias,
                                 w8a8_options(o, lm.model, o.arm_a, false, fp8));
  make_output_dir(o, lm);

  step("C1 boundary suite");
  const BoundaryPair boundary = boundary_of_pair(*arm_a, *arm_b, root);
  step("capture operands");
  const OperandSet ops = capture_layers(o, lm, dir, fp8, root);
  const LayerWork work = layer_work(ops);
  step("C2 predict and pin");
  const PinnedPredictions pinned = predict_and_pin(ops, work, dir, fp8, root);
  step(check_id_range(/*per_layer_only=*/true) + " verify");
  const VerifyResult verify = verify_layers(o, *arm_a, *arm_b, ops, work, pinned.predictions, root);
  const TokenRuns runs = run_token_level(o, lm, dir, fp8, step);
  const InvarianceRuns invariance = run_invariance(o, lm, dir, fp8, runs, ops, {arm_a.get(), arm_b.get()}, root, step);
  // FP8: the depth curve (divergence versus K on synthetic FP8 operands) with the share of the
  // differences the declared models explain, for the report.
  nlohmann::json depth = nullptr;
  if (fp8 && root && !o.sweep_ks.empty()) {
    step("FP8 depth sweep");
    depth = fp8_depth_curve(o);
  }

  if (!root) return {};

  // C0: the replay runs must differ only in the arm.
  step("C0 identity contract");
  const JoinResult join = join_manifests(read_manifest(runs.rep_a.manifest), read_manifest(runs.rep_b.manifest), "arm", true);
  CheckResult c0 = join.c0;
  if (!join.verified() && o.allow_unverified) {
    c0.summary += " (proceeding: --allow-unverified)";
  }

  step("C7 transfer");
  const TransferPair tr = transfer_of(runs, o.seed);
  const CheckResult c7 = c7_transfer(tr.replay, tr.generation, o.max_flip_rate);

  // The power-of-two probe end to end, as evidence for C5: the generated positions were not
  // captured and predicted, so bitwise identity is expected there but not required by a pin.
  std::vector<CheckResult> checks = verify.checks;  // C2..C6
  CheckResult& c5 = checks[3];
  const bool pow2_identical = records_body(runs.pow_a.jsonl) == records_body(runs.pow_b.jsonl);
  size_t pow2_same_sequences = 0;
  for (size_t i = 0; i < runs.pow_a.sequences.size(); ++i) {
    pow2_same_sequences += runs.pow_a.sequences[i] == runs.pow_b.sequences[i];
  }
  c5_add_end_to_end(c5, runs.pow_a.sequences.size(), pow2_same_sequences, pow2_identical, fp8);

  std::vector<CheckResult> all{c0, boundary.c1};
  all.insert(all.end(), checks.begin(), checks.end());
  all.push_back(c7);

  const InterchangeabilityAnswer answer = conform_answer(verify, all, boundary.failed_cases, tr, fp8, pow2_identical);
  const nlohmann::json invariance_json = invariance_results(invariance, runs, o);
  nlohmann::json results =
      conform_results({o, lm, dir, runs, formulas, pinned, verify, tr, join, answer, depth, invariance_json, fp8}, all);
  ConformOutcome out;
  out.passed = std::none_of(all.begin(), all.end(), [](const CheckResult& c) { return c.verdict == Verdict::fail; });
  if (!join.verified() && o.allow_unverified) {
    out.passed = std::none_of(all.begin() + 1, all.end(), [](const CheckResult& c) { return c.verdict == Verdict::fail; });
  }
  // C8 is a property of each arm, not of the pair: an unexplained variance fails the run, the answer
  // stays the pair's.
  for (const ArmInvarianceRuns& a : invariance.ran ? invariance.arms : std::array<ArmInvarianceRuns, 2>{}) {
    out.passed = out.passed && a.layers.check.verdict != Verdict::fail;
    for (const LayerTp& l : a.tp_layers) out.passed = out.passed && l.verdict != std::optional<std::string>(kVariantUnexplained);
  }
  out.results_path = dir + "/results.json";
  out.report_path = dir + "/report.html";
  write_file_atomic(out.results_path, results.dump(1) + "\n");
  write_file_atomic(out.report_path, render_report(results));
  out.results = std::move(results);
  return out;
}

}  // namespace qc
