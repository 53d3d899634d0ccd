// What the verbs share when they run as the ranks of an MPI job (docs/distributed.md): the work of
// a layer, predictions computed over the ranks, C8's shards on the ranks, the GPU of a rank, and
// `--resume DIR`. The command-line options that select them are the CLI's (cli/distributed.hpp).
#pragma once

#include <nlohmann/json.hpp>

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "dist/dist.hpp"
#include "checks/c8_tp.hpp"
#include "checks/verify.hpp"
#include "core/operands_io.hpp"

namespace qc {

// The work of each layer: m·n·k multiply-adds (every arm and the reference scale with it).
std::vector<double> layer_costs(const OperandSet& set);
// The shard of each of `layers` (an id per shard file; all 0 for a single file), for run_shared's
// `group`: a shard's layers stay on one rank when the balance allows (docs/distributed.md).
std::vector<int64_t> layer_groups(const OperandSet& set, const std::vector<size_t>& layers);

// C2's predictions of every layer, the layers shared over the ranks; every rank receives the
// whole set when `everywhere` (verify needs it), else rank 0 alone (others get an empty set).
// `progress(done, total, layer)` is called on rank 0 after each of its layers.
using LayerProgress = std::function<void(size_t done, size_t total, const std::string& item)>;
PredictionSet predict_shared(const OperandSet& set, bool everywhere, const LayerProgress& progress = {});

// C8's tensor-parallel shards on the ranks of this job (`mpirun -n R qconform invariance --tp ...`):
// shard t of a degree runs on rank t mod R; every rank sends its shards' outputs and records to rank 0,
// which receives them all (in shard order) and compares; the other ranks receive nullopt. The partials
// are then summed on rank 0 by qconform's own fixed-order reduction (the collective's model, run step by
// step), not by an MPI reduction of unspecified order. An error on any rank (the arm refused its shard)
// ends every rank with that error (dist::JobFailed; rank 0 prints it). `placement` says where the
// shards ran, for the printout.
ShardRunner rank_shard_runner();
std::string rank_shard_placement();

// `--gpu-per-rank`: this rank uses the GPU of its rank on the host (the local_rank-th of
// CUDA_VISIBLE_DEVICES when set, else device local_rank), by narrowing CUDA_VISIBLE_DEVICES before
// anything touches CUDA.
void use_gpu_of_local_rank();

// `--resume DIR`: every completed layer's result is written to DIR (atomically, with the digest
// of its result and the identity of the run: the digests of its inputs and its options, field by
// field, and their digest); a rerun reads them back, checks both, and skips those layers; a file
// of a run with other inputs or options is refused, naming each field that differs. The files are read by rank 0 and written by the rank that computed the layer (DIR
// must be shared by the hosts of a multi-host job).
class ResumeDir {
 public:
  // `identity`: everything that determines the per-layer results (operand and prediction digests,
  // arms, options); `names`: the operands' layer names, in order.
  ResumeDir(std::string dir, const nlohmann::json& identity, std::vector<std::string> names);
  bool enabled() const { return !dir_.empty(); }
  // Rank 0: the stored results that pass every check (by layer index); a file written by another
  // run is an input error; one whose digest does not match is reported and recomputed.
  std::map<size_t, nlohmann::json> load() const;
  void store(size_t index, const nlohmann::json& result) const;

 private:
  std::string path_of(size_t index) const;
  std::string dir_, identity_;
  nlohmann::json identity_fields_;  // what `identity_` is the digest of, stored beside it
  std::vector<std::string> names_;
};

// "`operands` was "sha256:1.." there, is "sha256:2.." now; ...": the fields of two run identities that differ.
std::string identity_difference(const nlohmann::json& recorded, const nlohmann::json& now);

// The indices of `count` items not in `done`, and the layers' costs for them, for run_shared.
std::vector<size_t> remaining(size_t count, const std::map<size_t, nlohmann::json>& done);

// rank 0's set of resumed layer indices, known to every rank.
std::map<size_t, nlohmann::json> broadcast_done(const std::map<size_t, nlohmann::json>& on_root);

}  // namespace qc
