// `qconform invariance --arm A OPS`: check C8 on one arm (docs/invariance.md). Every layer's rows run
// in batches of several sizes and with other batch mates, compared bit for bit with the layer run
// whole, and the differences compared with what the run records claim; with `--tp`, the layer at
// several tensor-parallel degrees under a named reduction model.
#include <fmt/format.h>

#include "checks/c8_invariance.hpp"
#include "checks/c8_tp.hpp"
#include "cli/cli.hpp"
#include "cli/distributed.hpp"
#include "cli/lists.hpp"
#include "cli/paths.hpp"
#include "core/fileio.hpp"
#include "core/operands_io.hpp"
#include "core/results_json.hpp"
#include "dist/dist.hpp"

namespace qc::cli {
namespace {

struct InvarianceArgs {
  std::string arm, operands, json, batch_sizes, mates = "ordered,shuffled,replaced", layers, tp, style = "auto",
                                               reduction = "ring", collective, claims = "records";
  uint64_t seed = 0;
  bool no_refine = false, gpu_per_rank = false;
};

bool selected(const std::vector<std::string>& wanted, const std::string& layer) {
  if (wanted.empty()) return true;
  for (const std::string& w : wanted) {
    if (layer == w || layer.find(w) != std::string::npos) return true;
  }
  return false;
}

VerbRunner setup_invariance(CLI::App& app) {
  auto a = std::make_shared<InvarianceArgs>();
  app.add_option("operands", a->operands, "operands file (safetensors, or the index of a sharded set)")->required();
  app.add_option("--arm", a->arm, "the arm to check (see `qconform arms`)")->required();
  app.add_option("--batch-sizes", a->batch_sizes,
                 "batch sizes M' to run each layer's rows in (default: 1..4, the CUDA-graph sizes, the engines' "
                 "bucket edges, up to the layer's M)");
  app.add_option("--mates", a->mates, "batch mates: ordered, shuffled, replaced")->capture_default_str();
  app.add_option("--layers", a->layers, "only layers whose name contains one of these (comma-separated)");
  app.add_option("--claims", a->claims,
                 "what predicts each batch: records (the run records' claims per shape) or declared (the arm's "
                 "declaration alone)")
      ->capture_default_str();
  app.add_flag("--no-refine", a->no_refine, "do not bisect between tested sizes where variance switches");
  app.add_option("--tp", a->tp, "tensor-parallel degrees to simulate, e.g. 1,2,4,8 (replaces the batch sweep)");
  app.add_option("--tp-style", a->style, "auto (o_proj, down_proj row-parallel), column or row")->capture_default_str();
  app.add_option("--reduction", a->reduction,
                 "the reduction model expected: sequential, ring, ring:<chunk>, tree, +fp32 for fp32 partial sums")
      ->capture_default_str();
  app.add_option("--collective", a->collective,
                 "what sums the partials (default: the --reduction model, run step by step); mutant:tree-from-<T> "
                 "is a positive control");
  add_non_negative_option(app, "--seed", a->seed, "seed of the shuffled and synthetic batch mates");
  app.add_option("--json", a->json, "write the results as JSON");
  add_gpu_per_rank_option(app, a->gpu_per_rank);
  return [a] {
    std::vector<PathUse> paths_in;
    add_arm_inputs(paths_in, "--arm", a->arm);
    add_operand_inputs(paths_in, "operands", a->operands);
    check_output_paths(paths_in, {{"--json", a->json}});
    // Under mpirun the tensor-parallel shards run on the ranks (rank_shard_runner); the batch sweep runs
    // in one process.
    const bool ranks = dist::world().size > 1;
    QC_INPUT(!ranks || !a->tp.empty(),
             "qconform invariance under mpirun ({} ranks) runs --tp only (each rank runs its tensor-parallel "
             "shards); run the batch sweep without mpirun",
             dist::world().size);
    if (a->gpu_per_rank) use_gpu_of_local_rank();
    QC_INPUT(a->claims == "records" || a->claims == "declared", "--claims: expected records or declared, found `{}`",
             a->claims);
    const OperandSet set = open_operands(a->operands, false);
    auto arm = make_arm(a->arm);
    const std::vector<std::string> wanted = a->layers.empty() ? std::vector<std::string>{} : split_commas(a->layers);
    nlohmann::json layers = nlohmann::json::array();
    std::vector<std::optional<std::string>> verdicts;
    std::vector<LayerInvariance> batch_results;
    const bool tp = !a->tp.empty();
    TpOptions tpo;
    InvarianceOptions io;
    if (tp) {
      tpo.degrees.clear();
      for (int64_t d : parse_positive_list("--tp", a->tp)) {
        QC_INPUT(d <= 1024, "--tp: expected degrees of at most 1024, found {}", d);
        tpo.degrees.push_back(static_cast<int>(d));
      }
      tpo.style = a->style, tpo.declared = a->reduction, tpo.collective = a->collective;
      tpo.use_records = a->claims == "records";
      if (ranks) tpo.run_shards = rank_shard_runner(), tpo.placement = rank_shard_placement();
    } else {
      if (!a->batch_sizes.empty()) io.batch_sizes = parse_positive_list("--batch-sizes", a->batch_sizes);
      io.mates = split_commas(a->mates);
      io.seed = a->seed, io.refine = !a->no_refine, io.use_records = a->claims == "records";
    }
    size_t checked = 0;
    for (size_t i = 0; i < set.size(); ++i) {
      if (!selected(wanted, set.headers[i].name)) continue;
      ++checked;
      const LayerOperands ops = set.load(i);
      if (tp) {
        const LayerTp r = layer_tp(*arm, ops, tpo);
        if (!r.compared) continue;  // a rank that only ran its shards
        fmt::print("{}\n", describe(r));
        layers.push_back(to_json(r));
        verdicts.push_back(r.verdict);
      } else {
        LayerInvariance r = layer_invariance(*arm, ops, io);
        fmt::print("{}\n", describe(r));
        layers.push_back(to_json(r));
        verdicts.push_back(r.verdict);
        batch_results.push_back(std::move(r));
      }
    }
    QC_INPUT(checked > 0, "--layers `{}`: no layer of {} matches", a->layers, a->operands);
    if (!dist::world().root()) return kExitOk;  // rank 0 compares, prints and writes
    const std::optional<std::string> worst = combine_invariance(verdicts);
    fmt::print("C8 invariance ({}) of {} over {} layer(s): {}\n", tp ? "tensor-parallel degrees" : "batch sizes and mates",
               a->arm, checked, worst.value_or("nothing compared (null)"));
    if (!a->json.empty()) {
      nlohmann::json doc = results_envelope(
          "invariance", {{"arm", a->arm}, {"operands", a->operands}, {"mode", tp ? "tp" : "batch"},
                         {"claims", a->claims}, {"layers", layers},
                         {"verdict", worst ? nlohmann::json(*worst) : nlohmann::json()}});
      if (!tp) doc["check"] = c8_check(a->arm, batch_results);
      write_file_atomic(a->json, doc.dump(1) + "\n");
    }
    return worst && *worst == kVariantUnexplained ? kExitCheckFailed : kExitOk;
  };
}

RegisterVerb register_invariance{
    {"invariance",
     "C8: one arm's rows across batch sizes, batch mates (or --tp degrees), bit for bit, against the run records' claims",
     57, setup_invariance}};

}  // namespace
}  // namespace qc::cli
