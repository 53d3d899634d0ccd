// The registry of the checks verify decides per layer run (C2–C6): each check's file holds its entry,
// which owns what the check does with verify's runs — its verdict, its fields of a run's JSON in both
// directions and the stage an FP8 failure of it names. verify's pipeline iterates the registry
// (merge_verifications, the run JSON, the FP8 stage), so a new per-layer check is its row of the check
// table (src/core/check.cpp), its file with its entry, and its line in `layer_checks()`.
#pragma once

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "checks/verify.hpp"
#include "qconform/check.hpp"

namespace qc {

// What the pipeline gathered, for every check to decide from.
struct LayerCheckInputs {
  const std::vector<LayerRun>& runs;           // every layer's runs, in layer order
  const PredictionSet& predictions;
  const std::vector<std::string>& stale;       // the layers whose pinned prediction is not their exact statistics
  const Comparison& total_real;                // the real-scale runs merged (the largest row count of each layer)
  const VerifyOptions& options;
};

// A stage named with the sentence that says which arm and where.
struct StageFinding {
  Stage stage = Stage::not_localized;
  std::string detail;
};

struct LayerCheck {
  std::string_view id;  // its row of the check table
  CheckResult (*decide)(const LayerCheckInputs& in);
  // Its evidence fields of one run in verify's JSON: `lossless` adds what the per-layer form (MPI
  // ranks, --resume) needs to read the run back exactly; `read_run` reads that form.
  void (*write_run)(nlohmann::json& run, const LayerRun& x, bool lossless);
  void (*read_run)(const nlohmann::json& run, LayerRun& x);
  // FP8 pairs: the stage its evidence names before any verdict is looked at (consulted in the order of
  // the registry, which is the data flow's), or none; null when the check names none this way.
  std::optional<StageFinding> (*evidence_stage)(const VerifyResult& r) = nullptr;
  // FP8 pairs: the stage a failure of it names when no evidence named one; null: `failed_in(c, the
  // accumulation model)`.
  StageFinding (*failure_stage)(const CheckResult& c) = nullptr;
};

// C2, C3, C4, C5, C6: the per-layer rows of the check table, in its order (a unit test holds the two equal).
const std::vector<LayerCheck>& layer_checks();
// The entry of `id`; an id that is not a per-layer check is an internal error.
const LayerCheck& layer_check(std::string_view id);

// "<id> failed: <summary>" at `stage`.
StageFinding failed_in(const CheckResult& c, Stage stage);

// The entries, each defined in its check's file.
extern const LayerCheck kC2Range, kC3SharedOperands, kC4Accumulator, kC5Pow2, kC6Tolerance;

// A count of a run that may not have been taken, as JSON (null when not taken) and back (null, or a
// negative count an older writer used for it, is not taken).
nlohmann::json taken_json(const std::optional<int64_t>& v);
std::optional<int64_t> taken_from_json(const nlohmann::json& v);

}  // namespace qc
