// `qconform verify` as a job over an operand set, below the CLI that reads its options: the pinned
// predictions (refused before anything runs when the pin does not match), the two arms with the
// epilogues declared for them, and the layers shared over the ranks of an MPI job (one rank: all of
// them) with `--resume DIR`'s journal, merged on rank 0.
#pragma once

#include <nlohmann/json.hpp>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "checks/verify.hpp"
#include "core/operands_io.hpp"
#include "orchestrate/ranks.hpp"
#include "qconform/arm.hpp"

namespace qc {

// The predictions file `file` (none: an empty set and digest), its SHA-256 checked against `pin`
// ("sha256:<hex>" or "<hex>") before anything runs; a pin without a file is refused.
struct PinnedPredictions {
  PredictionSet set;
  std::string digest;  // hex, "" without a file
};
PinnedPredictions read_pinned_predictions(const std::string& file, const std::string& pin);

// The two arms, with the epilogues `declare` gives them (A=<formula>, B=<formula>; `--declare`).
std::pair<std::unique_ptr<Arm>, std::unique_ptr<Arm>> make_declared_arms(const std::string& label_a,
                                                                         const std::string& label_b,
                                                                         const std::vector<std::string>& declare);

struct VerifyJob {
  const OperandSet& set;
  const PredictionSet& predictions;
  std::string predictions_digest;  // "" when the predictions were computed now
  std::string label_a, label_b;
  Arm& arm_a;
  Arm& arm_b;
  VerifyOptions options;
  // `--resume DIR` ("" none), and the options as given that shape a layer's result (their identity
  // beside the inputs' digests: a rerun with any of them changed is refused, naming the field).
  std::string resume;
  nlohmann::json result_options = nlohmann::json::object();
  LayerProgress progress;                          // rank 0, after each layer
  std::function<void(const std::string&)> lap;     // the job's phases (--timings), each when it ends
};

// What the ranks verified, merged on rank 0: the result, how many layers ran and how many a previous
// run in the resume directory had completed, and each rank's share.
struct ShardedVerification {
  VerifyResult result;
  size_t ran = 0, resumed = 0;
  std::vector<nlohmann::json> rank_info;
};

// The layers shared over the ranks by work, each verified with `verify_layer_runs`; a layer a
// previous run completed in the resume directory is not run again. nullopt on ranks other than 0.
std::optional<ShardedVerification> verify_sharded(const VerifyJob& job);

}  // namespace qc
