// `qconform verify OPS --arms A,B`: both arms on identical operands, per layer and in total, with
// the checks C2–C6. A pin that does not match the predictions file is refused before any arm runs.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <future>
#include <optional>
#include <sstream>

#include <unistd.h>

#include "cli/cli.hpp"
#include "qconform/check.hpp"
#include "cli/paths.hpp"
#include "cli/distributed.hpp"
#include "cli/lists.hpp"
#include "cli/progress.hpp"
#include "cli/run_manifest.hpp"
#include "qconform/error.hpp"
#include "core/limits.hpp"
#include "core/fileio.hpp"
#include "arms/cuda/cuda.hpp"
#include "checks/c8_invariance.hpp"
#include "checks/verify.hpp"
#include "checks/verify_results.hpp"
#include "orchestrate/verify_job.hpp"
#include "core/operands_io.hpp"
#include "core/results_json.hpp"
#include "core/sha256.hpp"
#include "core/version.hpp"

namespace qc::cli {
namespace {

void print_table(const VerifyResult& r, bool per_layer) {
  if (per_layer) {
    fmt::print("{:<40} {:>5} {:>13} {:>6} {:>14} {:>6} {:>12} {:>6}\n", "layer", "M", "scales", "safe", "diff (ppm)",
               "maxulp", "acc A/B", "pred=obs");
    for (const LayerRun& x : r.runs) {
      const auto acc = [](const std::optional<int64_t>& v) { return v ? std::to_string(*v) : std::string("-"); };
      fmt::print("{:<40} {:>5} {:>13} {:>6} {:>6} ({:>5.1f}) {:>6} {:>12} {:>6}\n", x.layer, x.m, scale_mode_name(x.mode),
                 x.fp8 ? "-" : (x.safe ? "yes" : "NO"), x.cmp.bitwise_diff, 1e6 * static_cast<double>(x.cmp.bitwise_diff) / x.cmp.total,
                 x.cmp.max_ulp, acc(x.arm[0].acc_mismatch) + "/" + acc(x.arm[1].acc_mismatch),
                 x.predicted_diff ? (x.predicted_equals_observed ? "yes" : "NO")
                                  : (x.arm[0].unmodelled.empty() && x.arm[1].unmodelled.empty() ? "-" : "unmod"));
    }
  }
  // Totals per scale regime.
  struct Total {
    Comparison c;
    size_t runs = 0, differing = 0;
  };
  std::map<std::string, Total> totals;
  for (const LayerRun& x : r.runs) {
    Total& t = totals[std::string(scale_mode_name(x.mode))];
    t.c.merge(x.cmp, 0);
    ++t.runs;
    t.differing += x.cmp.bitwise_diff > 0;
  }
  fmt::print("\n{:<13} {:>8} {:>14} {:>14} {:>10} {:>7}\n", "scales", "runs", "elements", "differ", "ppm", "maxulp");
  for (const auto& [mode, t] : totals) {
    fmt::print("{:<13} {:>8} {:>14} {:>14} {:>10.2f} {:>7}   ({} runs with a difference)\n", mode, t.runs, t.c.total,
               t.c.bitwise_diff, 1e6 * static_cast<double>(t.c.bitwise_diff) / std::max<int64_t>(t.c.total, 1),
               t.c.max_ulp, t.differing);
  }
  fmt::print("\n");
  for (const CheckResult& c : r.checks) {
    fmt::print("{:<3} {:<22} {:<21} {}\n", c.id, c.title, verdict_name(c.verdict), c.summary);
    if (c.verdict == Verdict::fail) fmt::print("    points to: {}\n", c.points_to);
    const auto& first = c.evidence.contains("first") ? c.evidence["first"] : nlohmann::json::array();
    for (const auto& f : first) {
      if (c.verdict == Verdict::fail) fmt::print("    {}\n", f.is_string() ? f.get<std::string>() : f.dump());
    }
  }
  if (r.arm_a.fp8()) {
    // FP8: the verdict names the stage (operands, accumulation model, epilogue) and the arm; with no
    // failure it says only what was compared.
    bool all_predicted = !r.runs.empty(), any_modelled = false;
    for (const LayerRun& x : r.runs) {
      all_predicted = all_predicted && x.predicted_diff.has_value();
      any_modelled = any_modelled || x.arm[0].formula_mismatch || x.arm[1].formula_mismatch;
    }
    const std::string clean = all_predicted  ? "every arm on its declared model; predicted set == observed set"
                              : any_modelled ? "every modelled arm on its declared model; the differences with an "
                                               "unmodelled arm were not predicted"
                                             : "no arm was checked against a model (none declared or claimed)";
    fmt::print("\nFP8 verdict: {}\n", r.stage ? r.stage_sentence() : clean);
    for (const LayerRun& x : r.runs) {
      for (const auto& [side, why] : {std::pair{"A", &x.arm[0].unmodelled}, std::pair{"B", &x.arm[1].unmodelled}}) {
        if (!why->empty()) {
          fmt::print("  unmodelled: arm {} on {} m={} {}: {}\n", side, x.layer, x.m, scale_mode_name(x.mode), *why);
        }
      }
    }
  }
  if (r.total_real.bitwise_diff > 0) {
    const bool predicted = std::all_of(r.runs.begin(), r.runs.end(), [](const LayerRun& x) { return x.predicted_diff.has_value(); });
    fmt::print("\nfirst real-scale differences ({}):\n",
               !predicted ? "not predicted: an arm declares no formula or model, or refused it"
               : r.arm_a.fp8() ? "each predicted by the declared models unless C6 says otherwise"
                                  : "each predicted by the declared formulas unless C6 says otherwise");
    for (const DiffElement& d : r.total_real.first) fmt::print("  {}\n", describe(d));
  }
}

// Seconds since this process started (Linux: /proc/self/stat's start time against /proc/uptime, in
// clock ticks); negative where that cannot be read.
double seconds_since_process_start() {
  std::ifstream stat("/proc/self/stat"), uptime("/proc/uptime");
  std::string line;
  double up = 0;
  if (!std::getline(stat, line) || !(uptime >> up)) return -1;
  // Field 22 (starttime), counted after the command name's closing parenthesis (field 2).
  std::istringstream rest(line.substr(line.rfind(')') + 2));
  std::string field;
  for (int i = 3; i <= 22; ++i) rest >> field;
  const long ticks = sysconf(_SC_CLK_TCK);
  return rest && ticks > 0 ? up - std::stod(field) / static_cast<double>(ticks) : -1;
}

// The process's own phases around `verify_layer_runs` (--timings): each lap is the time since the last.
struct Laps {
  std::chrono::steady_clock::time_point last = std::chrono::steady_clock::now();
  std::vector<std::pair<std::string, double>> phases;
  void lap(std::string name) {
    const auto now = std::chrono::steady_clock::now();
    phases.emplace_back(std::move(name), std::chrono::duration<double>(now - last).count());
    last = now;
  }
};

void print_timings(const VerifyResult& r, const Laps& laps) {
  fmt::print("\ntime by phase (seconds; element passes run beside the next run's arms, so phases overlap)\n");
  for (const auto& [phase, s] : r.seconds) {
    fmt::print("  {:<62} {:>8.2f}  {:>5.1f} %\n", phase, s, 100 * s / std::max(r.wall_seconds, 1e-9));
  }
  fmt::print("  {:<62} {:>8.2f}\n", "wall", r.wall_seconds);
  fmt::print("this process around the verification (seconds, one after another)\n");
  for (const auto& [phase, s] : laps.phases) fmt::print("  {:<62} {:>8.2f}\n", phase, s);
}

// verify's options, as the command line gives them.
struct VerifyCli {
  std::string operands, arms, predictions, pin, scales = "real,pow2-channel,pow2-layer", m_sweep, json, manifest,
      reference = "auto";
  int64_t tolerance = 1;
  bool per_layer = false, timings = false, gpu_per_rank = false, invariance = false;
  std::string resume;
  std::vector<std::string> declare;
};

// The lines before the table: the pair, the answer, the ranks, the kernels, the models, the reference.
void print_header(const VerifyResult& result, const VerifyCli& o, const std::string& label_a, const std::string& label_b,
                  const OperandSet& set, size_t layers_run, size_t layers_resumed) {
  const dist::World& world = dist::world();
  fmt::print("verify {} vs {} on {} ({} layers, {})\n", label_a, label_b, o.operands, set.size(), set.sha256);
  // The answer first: what a team may do with the pair (docs/checks.md, "The interchangeability answer").
  fmt::print("{}", describe(result.interchangeability));
  if (world.size > 1 || layers_resumed != 0) {
    fmt::print("{} layers run on {} rank{} ({}){}\n", layers_run, world.size, world.size == 1 ? "" : "s",
               dist::description(), layers_resumed == 0 ? "" : fmt::format(", {} resumed from {}", layers_resumed, o.resume));
  }
  fmt::print("A: {}\nB: {}\n", result.record_a.kernel, result.record_b.kernel);
  for (const ArmInfo* arm : {&result.arm_a, &result.arm_b}) {
    if (!arm->accumulation_model.empty()) {
      fmt::print("{} declares accumulation model {}\n", arm->label, arm->accumulation_model);
    } else if (arm->fp8()) {
      fmt::print("{} is an FP8 arm that declares no accumulation model: its outputs are not predicted\n", arm->label);
    }
  }
  fmt::print("reference: {}\n\n", result.reference);
}

void add_verify_options(CLI::App& app, VerifyCli& o) {
  app.add_option("operands", o.operands, "operands file (safetensors, or the index of a sharded set)")->required();
  app.add_option("--arms", o.arms, "the two arms, A,B (see `qconform arms`)")->required();
  app.add_option("--predictions", o.predictions, "pinned predictions from `qconform predict` (else computed now)");
  app.add_option("--pin", o.pin, "SHA-256 of the predictions file, as `predict` printed it");
  app.add_option("--scales", o.scales, "scale regimes: real, pow2-channel, pow2-layer")->capture_default_str();
  app.add_option("--m-sweep", o.m_sweep, "row counts to run, e.g. 1,4,16,64,512 (first rows of each layer)");
  app.add_option("--tolerance-ulps", o.tolerance, "C6 tolerance in bf16 ulps")
      ->capture_default_str()
      ->check(non_negative_integer(o.tolerance));
  app.add_flag("--per-layer", o.per_layer, "print one line per (layer, M, scales) run");
  app.add_flag("--invariance", o.invariance,
               "also run C8 on each arm (rank 0): every layer's rows in batches of the default sizes with ordered and "
               "shuffled mates (docs/invariance.md); exit 1 when a variance is unexplained");
  app.add_option("--reference", o.reference,
                 "where the exact reference accumulators are computed: auto (the GPU when one is usable), cpu, gpu")
      ->capture_default_str();
  app.add_flag("--timings", o.timings, "print where the time went (arms, reference side, checks), in wall seconds");
  app.add_option("--json", o.json, "write the results as JSON");
  app.add_option("--resume", o.resume,
                 "keep each completed layer's result in this directory and skip the layers a previous run completed "
                 "there (digest-checked; a directory of a run with other inputs or options is refused, naming them; "
                 "locked while the run writes it)");
  app.add_option("--declare", o.declare,
                 "declare the epilogue an arm computes, A=<formula> or B=<formula>: a name of `qconform arms` or a "
                 "formula string of the formula space (what `qconform identify` prints); for an FP8 arm also "
                 "B='<accumulation model>; <epilogue over d>' (identify's `declare it` line); verify then checks that "
                 "arm against it bit for bit and predicts the differences exactly (repeatable)");
  add_gpu_per_rank_option(app, o.gpu_per_rank);
  add_manifest_option(app, o.manifest);
}

// C8 (opt-in): each arm's invariance over batch sizes and mates, beside the pair's checks; printed,
// and returned as the results JSON's `invariance` (`failed`: some arm's C8 failed).
nlohmann::json verify_invariance(const std::vector<Arm*>& arms, const OperandSet& set, bool& failed) {
  InvarianceOptions io;
  io.mates = {"ordered", "shuffled"};
  nlohmann::json invariance = nlohmann::json::array();
  for (Arm* arm : arms) {
    const ArmInvariance r = arm_invariance(*arm, set.size(), [&](size_t i) { return set.load(i); }, io);
    const CheckResult& c = r.check;
    fmt::print("{:<3} {:<22} {:<21} {}\n", c.id, c.title, verdict_name(c.verdict), c.summary);
    for (const LayerInvariance& l : r.layers) {
      if (l.verdict && *l.verdict != kInvariant) fmt::print("{}", describe(l));
    }
    failed = failed || c.verdict == Verdict::fail;
    invariance.push_back(to_json(r));
  }
  return invariance;
}

// verify's results JSON (--json), with C8's `invariance` when it ran.
std::string results_json_text(const VerifyCli& o, const VerifyResult& result, const OperandSet& set,
                              const std::string& predictions_digest, const nlohmann::json& invariance) {
  nlohmann::json extra = nlohmann::json::object();
  if (o.invariance) extra["invariance"] = invariance;
  return verify_results_text(result,
                             {set.path, set.sha256, o.predictions,
                              predictions_digest.empty() ? "" : "sha256:" + predictions_digest, !o.predictions.empty()},
                             extra) +
         "\n";
}

// verify's results JSON (`json`: made beside the table, or made here when not valid) and its run manifest,
// each phase a lap: both made, then written together, both durable before either is in place.
void write_outputs(const VerifyCli& o, const VerifyResult& result, const OperandSet& set,
                   const std::string& predictions_digest, const nlohmann::json& invariance,
                   std::future<std::string> json, Laps& laps) {
  std::vector<std::pair<std::string, std::string>> outputs;
  if (!o.json.empty()) {
    const bool beside = json.valid();
    outputs.emplace_back(o.json, beside ? json.get() : results_json_text(o, result, set, predictions_digest, invariance));
    laps.lap(beside ? "the results JSON made (beside the table: the wait for it)" : "the results JSON made");
  }
  std::vector<std::pair<std::string, std::string>> inputs = {{"operands", o.operands}};
  if (!o.predictions.empty()) inputs.emplace_back("predictions", o.predictions);
  // The operands and the predictions were hashed by this run already (a sharded set's digest is its index's).
  std::map<std::string, std::string> digests = {{o.operands, set.sha256}};
  if (!o.predictions.empty()) digests[o.predictions] = "sha256:" + predictions_digest;
  auto manifest = run_manifest_file(o.manifest, o.json, "verify", o.arms, result.record_a, inputs,
                                    {{"arm_b", result.record_b}, {"scales", o.scales}, {"m_sweep", o.m_sweep},
                                     {"tolerance_ulps", o.tolerance}},
                                    digests);
  if (!manifest.first.empty()) outputs.push_back(std::move(manifest));
  laps.lap("the manifest made");
  write_files_atomic(outputs);
  laps.lap("the JSON and the manifest written");
}

int run_verify(const VerifyCli& o) {
  Laps laps;
  if (const double s = seconds_since_process_start(); s >= 0) {
    laps.phases.emplace_back("process start to verify (loader, libraries, command line)", s);
  }
  if (o.gpu_per_rank) use_gpu_of_local_rank();
  const auto [label_a, label_b] = parse_pair("--arms", o.arms);
  // A device arm on either side, or the device's reference asked for: the CUDA context is made beside the
  // checks and the opening of the operands below (`--reference auto` waits for the pair's own choice).
  if (label_a.rfind("cuda:", 0) == 0 || label_b.rfind("cuda:", 0) == 0 || o.reference == "gpu") start_cuda_early();
  std::vector<PathUse> paths_in = {{"--predictions", o.predictions}};
  add_operand_inputs(paths_in, "OPS", o.operands);
  add_arm_inputs(paths_in, "--arms", label_a);
  add_arm_inputs(paths_in, "--arms", label_b);
  check_output_paths(paths_in, {{"--json", o.json}, {"--manifest", manifest_path(o.manifest, o.json)}});
  VerifyOptions options;
  options.modes.clear();
  for (const std::string& s : split_commas(o.scales)) options.modes.push_back(scale_mode_from_name(s));
  if (!o.m_sweep.empty()) options.m_sweep = parse_positive_list("--m-sweep", o.m_sweep);
  QC_INPUT(o.tolerance >= 0, "--tolerance-ulps: expected a non-negative number of ulps, found {}", o.tolerance);
  options.tolerance_ulps = o.tolerance;
  options.reference = verify_reference_from_name(o.reference);

  // The pin is checked before anything runs.
  auto [predictions, predictions_digest] = read_pinned_predictions(o.predictions, o.pin);
  laps.lap("paths checked, the pinned predictions read (when given)");
  // Unless something keys on the operands' digest before the layers run (a --resume journal), the digest
  // is read beside the verification and, with pinned predictions, checked against theirs when it is done,
  // before anything is printed or written.
  const bool digest_beside = o.resume.empty() && digests_beside_the_work(o.operands);
  // A single file whose pinned predictions record its tree digest: the tree digest is read beside instead (on
  // every core), and once it equals theirs the file holds the bytes `predict` hashed, so the plain SHA-256 it
  // recorded is this file's (docs/formats.md, "Tree digest").
  const bool by_tree = digest_beside && !o.predictions.empty() && !predictions.operands_sha256_tree.empty() &&
                       !is_index_path(o.operands);
  // Where the device pipeline takes the pair, it hashes the tree leaves of the arrays it uploads, on the
  // device; the digests are then finished after the verification from those and the rest of each file.
  auto [arm_a, arm_b] = make_declared_arms(label_a, label_b, o.declare);
  const bool device_leaves = digest_beside && device_pipeline_refusal(*arm_a, *arm_b, options).empty();
  laps.lap("the arms made");
  OperandSet set = open_operands(o.operands, /*with_digest=*/!by_tree, digest_beside, device_leaves);
  std::future<std::string> tree;
  if (by_tree) {
    tree = std::async(device_leaves ? std::launch::deferred : std::launch::async,
                      [path = o.operands, leaves = set.tree_leaves] { return sha256_tree_file(path, 0, leaves.get()); });
  }
  laps.lap(device_leaves   ? "open the operands (map, validate; the digests' leaves to be hashed on the device as uploaded)"
           : by_tree       ? "open the operands (map, validate; the tree digest beside the verification)"
           : digest_beside ? "open the operands (map, validate; SHA-256 beside the verification)"
                           : "open the operands (map, validate, SHA-256)");
  const auto check_predicted_operands = [&] {
    QC_INPUT(predictions.operands_sha256 == set.sha256,
             "{}: field `operands.sha256`: expected {} (the digest of {}), found {}: predictions were made from other "
             "operands",
             o.predictions, set.sha256, o.operands, predictions.operands_sha256);
  };
  if (!o.predictions.empty()) {
    if (!digest_beside) check_predicted_operands();
  } else {
    Progress progress("predict");
    predictions = predict_shared(set, /*everywhere=*/true, progress.updater());
    progress.finish();
    laps.lap("predictions computed (no --predictions)");
  }

  Progress progress("verify");
  const VerifyJob job{set,     predictions, predictions_digest, label_a, label_b, *arm_a, *arm_b, options, o.resume,
                      {{"scales", o.scales}, {"m_sweep", o.m_sweep}, {"tolerance_ulps", o.tolerance}, {"declare", o.declare}},
                      progress.updater(), [&](const std::string& phase) { laps.lap(phase); }};
  std::optional<ShardedVerification> v = verify_sharded(job);
  progress.finish();
  if (by_tree) {
    const std::string found = tree.get();
    const uint64_t given = set.tree_leaves ? set.tree_leaves->given_count() : 0;
    laps.lap(device_leaves ? fmt::format("the operands' tree digest finished ({} of its {} leaves hashed on the device)",
                                         given, set.tree_leaves->count())
                           : std::string("waiting for the operands' tree digest (read beside the verification)"));
    if (found == predictions.operands_sha256_tree) {
      set.sha256 = predictions.operands_sha256;  // the same bytes: the plain digest predict read of them
                                                 // (well formed: prediction_set_from_json)
    } else {
      // Predictions of an earlier tree definition (docs/formats.md, "Tree digest") differ from every file's
      // tree digest today: the plain SHA-256 decides.
      set.sha256 = sha256_file(o.operands);
      laps.lap("the operands' SHA-256 read (their tree digest is not the predictions')");
      QC_INPUT(set.sha256 == predictions.operands_sha256,
               "{}: field `operands.sha256_tree`: expected {} (the tree digest of {}), found {}: predictions were made "
               "from other operands (field `operands.sha256`: expected {}, found {})",
               o.predictions, found, o.operands, predictions.operands_sha256_tree, set.sha256,
               predictions.operands_sha256);
    }
  } else if (digest_beside) {
    set.await_sha256();
    laps.lap(device_leaves ? "the operands' digests finished (tree leaves hashed on the device, the rest read now)"
             : set.sha256_from_record
                 ? "waiting for the operands' SHA-256 (beside; its tree digest found in the digest record)"
                 : "waiting for the operands' SHA-256 (read beside the verification)");
    if (o.predictions.empty()) {
      predictions.operands_sha256 = set.sha256;  // computed now, before the digest was there
    } else {
      check_predicted_operands();
    }
  }
  if (!v) return kExitOk;  // not rank 0
  const VerifyResult& result = v->result;
  // The results JSON is made beside the table (both only read the result), unless C8 runs first.
  std::future<std::string> json;
  if (!o.json.empty() && !o.invariance) {
    json = std::async(std::launch::async,
                      [&] { return results_json_text(o, result, set, predictions_digest, nlohmann::json()); });
  }
  print_header(result, o, label_a, label_b, set, v->ran, v->resumed);
  print_table(result, o.per_layer);
  laps.lap("merge the layers' results, print the table");
  const auto timings = [&] {
    if (!o.timings) return;
    print_timings(result, laps);
    if (dist::world().size > 1) {
      // The balance of the work sharing: each rank's layers and the wall time of its share.
      for (size_t r = 0; r < v->rank_info.size(); ++r) {
        const nlohmann::json& info = v->rank_info[r];
        fmt::print("  rank {:<3} {:>5} layers  {:>8.2f} s\n", r, info.value("layers", 0), info.value("wall_seconds", 0.0));
      }
    }
  };
  bool invariance_failed = false;
  const nlohmann::json invariance =
      o.invariance ? verify_invariance({arm_a.get(), arm_b.get()}, set, invariance_failed) : nlohmann::json();
  if (o.invariance) laps.lap("C8 (--invariance)");
  write_outputs(o, result, set, predictions_digest, invariance, std::move(json), laps);
  // What the process holds is released here, in order, so that --timings can say what the exit costs;
  // what remains after the timings is the runtime's own teardown (the CUDA context, static objects).
  arm_a.reset();
  arm_b.reset();
  laps.lap("the arms released (their device buffers and library handles)");
  set.layers.clear();
  set.loader = nullptr;
  laps.lap("the operands released (unmapped)");
  timings();
  return result.all_passed() && !invariance_failed ? kExitOk : kExitCheckFailed;
}

VerbRunner setup_verify(CLI::App& app) {
  auto o = std::make_shared<VerifyCli>();
  add_verify_options(app, *o);
  return [o] { return run_verify(*o); };
}

RegisterVerb register_verify{{"verify", "Run two arms on identical operands: checks " + check_id_range(/*per_layer_only=*/true) + " per layer and in total", 40,
                              setup_verify}};

}  // namespace
}  // namespace qc::cli
