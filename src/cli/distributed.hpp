// The command-line options of the verbs that run as the ranks of an MPI job (docs/distributed.md);
// what they select is orchestrate/ranks.hpp.
#pragma once

#include <CLI/CLI.hpp>

#include <string>

#include "core/operands_io.hpp"
#include "dist/dist.hpp"
#include "orchestrate/ranks.hpp"

namespace qc::cli {

// `--shard-size SIZE` of synth and capture: write a sharded operand set (docs/formats.md).
inline void add_shard_size_option(CLI::App& app, std::string& size) {
  app.add_option("--shard-size", size,
                 "write a sharded set: shards of at most SIZE bytes (e.g. 2G) beside the index given as --out "
                 "NAME.index.json, read layer by layer");
}

// Whether a verb may read the operands' digests beside its work (`open_operands(..., digest_beside)`) and
// check them when it is done. Not a sharded set's under several ranks: each rank checks its shards as it maps
// them, before its results go to rank 0, which cannot wait for another rank's digests.
inline bool digests_beside_the_work(const std::string& operands) {
  return !(is_index_path(operands) && dist::world().size > 1);
}

// `--gpu-per-rank` (use_gpu_of_local_rank).
inline void add_gpu_per_rank_option(CLI::App& app, bool& flag) {
  app.add_flag("--gpu-per-rank", flag,
               "under MPI: each rank uses the GPU of its rank on its host (local rank i takes device i)");
}

}  // namespace qc::cli
