// `qconform verify` as a job (verify_job.hpp).
#include "orchestrate/verify_job.hpp"

#include <fmt/format.h>

#include <chrono>
#include <map>

#include "arms/declared_arm.hpp"
#include "checks/verify_results.hpp"
#include "core/fileio.hpp"
#include "core/limits.hpp"
#include "core/results_json.hpp"
#include "core/sha256.hpp"
#include "core/version.hpp"
#include "dist/dist.hpp"
#include "qconform/error.hpp"

namespace qc {

namespace {

std::string strip_prefix(std::string pin) { return pin.rfind("sha256:", 0) == 0 ? pin.substr(7) : pin; }

// `--resume DIR`'s journal; its identity the digests of every input and every option that shapes a
// layer's result.
ResumeDir resume_journal(const VerifyJob& job, const std::vector<std::string>& names) {
  nlohmann::json arm_files = nlohmann::json::object();
  for (const std::string& label : {job.label_a, job.label_b}) {
    if (const std::string file = arm_file_of(label); !file.empty() && !job.resume.empty()) {
      arm_files[label] = "sha256:" + sha256_file(file);
    }
  }
  nlohmann::json identity = {
      {"operands", job.set.sha256},
      {"predictions", job.predictions_digest.empty() ? "computed" : job.predictions_digest},
      {"arms", {job.label_a, job.label_b}},
      {"arm_files", arm_files},
      {"qconform", version()},
      {"kind", results_kind("verify")}};
  identity.update(job.result_options);
  return ResumeDir(job.resume, identity, names);
}

}  // namespace

PinnedPredictions read_pinned_predictions(const std::string& file, const std::string& pin) {
  PinnedPredictions p;
  if (!file.empty()) {
    const std::string text = read_file(file);
    p.digest = sha256_hex(std::string_view(text));
    QC_INPUT(!pin.empty(), "--predictions {} given without --pin: expected the SHA-256 that `predict` printed", file);
    QC_INPUT(strip_prefix(pin) == p.digest,
             "{}: --pin expected sha256:{}, found sha256:{}: the predictions file is not the one that was pinned", file,
             strip_prefix(pin), p.digest);
    p.set = prediction_set_from_json(parse_json(text, file), file);
    p.set.pinned = true;  // its digest was checked against the pin above
  } else {
    QC_INPUT(pin.empty(), "--pin given without --predictions");
  }
  return p;
}

std::pair<std::unique_ptr<Arm>, std::unique_ptr<Arm>> make_declared_arms(const std::string& label_a,
                                                                         const std::string& label_b,
                                                                         const std::vector<std::string>& declare) {
  auto arm_a = make_arm(label_a);
  auto arm_b = make_arm(label_b);
  for (const std::string& d : declare) {
    const size_t eq = d.find('=');
    const std::string side = eq == std::string::npos ? "" : d.substr(0, eq);
    QC_INPUT(side == "A" || side == "B", "--declare `{}`: expected A=<formula> or B=<formula>", d);
    auto& arm = side == "A" ? arm_a : arm_b;
    arm = declare_epilogue(std::move(arm), d.substr(eq + 1), fmt::format("--declare {}", side));
  }
  return {std::move(arm_a), std::move(arm_b)};
}

std::optional<ShardedVerification> verify_sharded(const VerifyJob& job) {
  const dist::World& world = dist::world();
  const OperandSet& set = job.set;
  const auto lap = [&](const std::string& phase) {
    if (job.lap) job.lap(phase);
  };
  std::vector<std::string> names;
  for (const LayerHeader& h : set.headers) names.push_back(h.name);
  const ResumeDir resume = resume_journal(job, names);
  const std::map<size_t, nlohmann::json> resumed = broadcast_done(world.root() ? resume.load() : std::map<size_t, nlohmann::json>{});
  const std::vector<size_t> todo = remaining(set.size(), resumed);
  const std::vector<double> all_costs = layer_costs(set);
  std::vector<double> cost;
  for (size_t i : todo) cost.push_back(all_costs[i]);
  lap("arms made, the resume directory read");
  const auto started = std::chrono::steady_clock::now();
  std::string reference;
  // One rank without --resume: the layers' results stay objects. They become JSON only where they
  // travel (to rank 0, into the resume directory), which for an FP8 pair's ulp histograms costs
  // as much as a tenth of the verification.
  const bool in_memory = world.size == 1 && !resume.enabled();
  std::map<size_t, LayerVerification> kept;
  const dist::Shared shared = dist::run_shared(todo, cost, [&](const std::vector<size_t>& mine, dist::Outcome& out,
                                                                std::string& in_progress) {
    VerifySelection selection;
    selection.only = true;
    selection.layers = mine;
    selection.started = [&](size_t i) { in_progress = fmt::format("layer {} `{}`", i, names[i]); };
    selection.done = [&](size_t i, const LayerVerification& v) {
      if (in_memory) return;  // `kept`, below
      nlohmann::json j = to_json(v);
      resume.store(i, j);
      // Kept as its compact text until the merge: a parsed tree takes six times the memory,
      // which over hundreds of layers is most of what a long run would hold (docs/hostile-inputs.md, "Soak").
      out.results[i] = j.dump();
    };
    const VerifiedLayers part = verify_layer_runs(
        job.arm_a, job.arm_b, set.size(), [&](size_t i) { return set.load(i); }, job.predictions, job.options, selection,
        [&](size_t i, size_t n, const std::string& item) {
          if (world.root() && job.progress) job.progress(i, n, item);
        });
    reference = part.reference;
    if (in_memory) kept = std::move(part.layers);
    nlohmann::json seconds = nlohmann::json::array();
    for (const auto& [phase, sec] : part.seconds) seconds.push_back({phase, sec});
    out.rank_info = {{"seconds", seconds}, {"wall_seconds", part.wall_seconds}, {"layers", mine.size()}};
  }, layer_groups(set, todo));
  lap("the verification (verify_layer_runs; its phases above)");
  if (!world.root()) return std::nullopt;  // rank 0 merges, reports and writes

  std::vector<LayerVerification> layers;
  for (size_t i = 0; i < set.size(); ++i) {
    if (in_memory) {
      layers.push_back(std::move(kept.at(i)));
      continue;
    }
    const bool was_resumed = resumed.count(i) != 0;
    const nlohmann::json& j = was_resumed ? resumed.at(i) : shared.results.at(i);
    layers.push_back(layer_verification_from_json(
        j.is_string() ? parse_json(j.get_ref<const std::string&>(), fmt::format("the result of layer {}", i)) : j,
        was_resumed ? job.resume : "rank results"));
  }
  if (reference.empty()) reference = reference_description(resolve_reference(job.options.reference));
  ShardedVerification v{
      merge_verifications(job.arm_a.info(), job.arm_b.info(), reference, std::move(layers), job.predictions, job.options),
      todo.size(), resumed.size(), shared.rank_info};
  // Timings: every rank's phases added up (CPU-side seconds of the whole job); wall: the job's.
  add_rank_seconds(v.result, shared.rank_info);
  v.result.wall_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  return v;
}

}  // namespace qc
