// C7, token transfer: the teacher-forced single-step flip rate, its dependence on the logit margin
// (ROC-AUC with a cluster bootstrap CI) and sequence-level agreement. The statistics are
// `transfer::analyze_transfer` (src/stats/transfer.cpp, docs/statistics.md); the verdict is here.
#pragma once

#include "qconform/check.hpp"
#include "stats/transfer.hpp"

namespace qc {

// `replay`: the teacher-forced replays of both arms (options.replay); `generation`: their free-running
// generations. `max_flip_rate` < 0: report only (pass); else the replay's flip rate must not exceed it.
CheckResult c7_transfer(const transfer::TransferResult& replay, const transfer::TransferResult& generation,
                        double max_flip_rate);

}  // namespace qc
