// `generate`/`replay --batch-mates` (C8 end to end, docs/invariance.md): the decoder's LinearFn
// wrapped so that every call's rows run inside batches of synthetic mates, and the per-layer printout.
#pragma once

#include <fmt/format.h>

#include <memory>
#include <string>

#include "checks/c8_decoder.hpp"
#include "cli/lists.hpp"
#include "dist/dist.hpp"

namespace qc::cli {

inline constexpr const char* kBatchMatesHelp =
    "C8 end to end: run every linear layer's rows inside a batch with this many synthetic rows more, cycling "
    "through the list (e.g. 0,15,63,127); prints per layer the outputs that differ from the rows run alone "
    "(docs/invariance.md)";

// `linear` itself without `--batch-mates`.
inline LinearFn linear_with_batch_mates(const LinearFn& linear, const std::string& mates,
                                        const std::shared_ptr<BatchMateStats>& stats) {
  return mates.empty() ? linear : with_batch_mates(linear, parse_count_list("--batch-mates", mates), 0, stats);
}

inline void print_batch_mates(const std::string& mates, BatchMateStats& stats, const char* items) {
  if (mates.empty()) return;
  fmt::print("{}", stats.describe());
  if (dist::world().size > 1) fmt::print("  (rank 0's {} only: the per-layer counts are not gathered over ranks)\n", items);
}

}  // namespace qc::cli
