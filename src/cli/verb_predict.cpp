// `qconform predict OPS --out predictions.json`: C2's per-layer range prediction, pinned by the
// SHA-256 printed at the end (pass it to `verify --pin`).
#include <fmt/format.h>

#include <cmath>
#include <future>

#include "cli/cli.hpp"
#include "cli/paths.hpp"
#include "cli/distributed.hpp"
#include "cli/progress.hpp"
#include "core/fileio.hpp"
#include "checks/verify.hpp"
#include "core/operands_io.hpp"
#include "core/sha256.hpp"

namespace qc::cli {
namespace {

VerbRunner setup_predict(CLI::App& app) {
  auto ops_path = std::make_shared<std::string>();
  auto out = std::make_shared<std::string>();
  auto quiet = std::make_shared<bool>(false);
  app.add_option("operands", *ops_path, "operands file (safetensors, or the index of a sharded set)")->required();
  app.add_option("--out", *out, "predictions file to write (JSON)")->required();
  app.add_flag("--quiet", *quiet, "print only the summary and the pin");
  return [=] {
    std::vector<PathUse> paths_in;
    add_operand_inputs(paths_in, "OPS", *ops_path);
    check_output_paths(paths_in, {{"--out", *out}});
    // Both digests are read beside the predictions: the plain SHA-256, and the tree digest (docs/formats.md)
    // that a pinned verify of these operands checks on every core instead of the plain one, which cannot be
    // split; a single file's together, through the digest record, when it is usable ("Digest record").
    OperandSet set = open_operands(*ops_path, /*with_digest=*/true, digests_beside_the_work(*ops_path));
    const bool tree_with_plain = !is_index_path(*ops_path) && digest_record_usable();
    std::future<std::string> tree;
    if (dist::world().root() && !tree_with_plain) {
      tree = std::async(std::launch::async, [path = *ops_path] { return sha256_tree_file(path); });
    }
    for (size_t i = 0; i < set.size(); ++i) {
      const LayerOperands layer = set.load(i);
      QC_INPUT(!layer.fp8(),
               "{}: layer `{}` is an FP8 layer ({} x {}): C2's range prediction is about INT32 accumulators and "
               "the 2^24 threshold of their conversion to fp32; an FP8 GEMM accumulates in floating point, where "
               "the accumulation models predict every element instead (verify reports C2 as not applicable; "
               "docs/accumulation.md)",
               *ops_path, layer.name, element_type_name(layer.a_type), element_type_name(layer.w_type));
    }
    // Under MPI the layers are shared over the ranks; rank 0 merges them in layer order and writes.
    Progress progress("predict");
    PredictionSet p = predict_shared(set, /*everywhere=*/false, progress.updater());
    progress.finish();
    set.await_sha256();  // and the shards' digests against the index
    if (!dist::world().root()) return kExitOk;
    p.operands_sha256 = set.sha256;
    p.operands_sha256_tree = tree.valid() ? tree.get() : set.sha256_tree;
    if (p.operands_sha256_tree.empty()) p.operands_sha256_tree = sha256_tree_file(*ops_path);  // no record after all
    const std::string text = to_json(p).dump(1) + "\n";
    write_file_atomic(*out, text);
    if (!*quiet) fmt::print("{:<40} {:>16} {:>12} {:>9} {:>8} {:>14} {}\n", "layer", "MxNxK", "max|acc|", "headroom",
                            ">2^24", "bound", "verdict");
    for (const LayerPrediction& l : p.layers) {
      const RangeStats& s = l.stats;
      if (*quiet) continue;
      fmt::print("{:<40} {:>16} {:>12} {:>8.2f}b {:>8} {:>14} {}\n", l.name, fmt::format("{}x{}x{}", s.shape.m, s.shape.n, s.shape.k),
                 s.max_abs_acc, s.headroom_bits, s.count_above_2p24, s.data_independent_bound,
                 l.safe ? (s.bound_proves_safe ? "safe (proven for all inputs)" : "safe") : "UNSAFE");
    }
    const PredictionSummary sum = summarize(p);
    fmt::print("{} layers: {} predicted safe (|acc| <= 2^24), {} proven safe for every input by 127*max_n sum|w|; "
               "min headroom {:.2f} bits\npredictions: {}\npin: {}\n",
               sum.layers, sum.safe, sum.proven_safe_by_bound, sum.min_headroom_bits, *out, "sha256:" + sha256_hex(std::string_view(text)));
    return kExitOk;
  };
}

RegisterVerb register_predict{{"predict", "C2: per-layer accumulator range prediction, pinned by SHA-256", 30, setup_predict}};

}  // namespace
}  // namespace qc::cli
