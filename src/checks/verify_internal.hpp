// What verify.cpp and verify_json.cpp share. Internal to src/checks.
#pragma once

#include <memory>
#include <string>

#include "checks/verify.hpp"
#include "qconform/arm.hpp"
#include "qconform/epilogue.hpp"

namespace qc {

// The arm's declared formula (null: none). An FP8 arm's is its declared epilogue over the fp32 GEMM
// result; an FP8 arm that names none (cuBLASLt, which scales inside the library) is held to
// `fp8-scaled`, the one FP8 epilogue (the FP8 sweep applies it to every FP8 arm too).
const Epilogue* verify_declared_formula(const ArmInfo& info);

struct ElementTally;
struct Fp8LayerReference;
struct Fp8RunReference;

// A run's element tally folded into its evidence (C2's part two, C4, C5, C6); `fp8`: an FP8 pair's
// reference of the run's (layer, rows).
void fold_tally(LayerRun& run, const ElementTally& t, bool a_has_acc, bool b_has_acc, const Fp8LayerReference* fp8,
                const Epilogue* formula_a, const Epilogue* formula_b);
// FP8: the model each arm's run claims (or why it is unmodelled), from the runs' records, into the run
// and the element pass's reference.
std::shared_ptr<Fp8RunReference> claim_models(LayerRun& run, const ArmInfo (&infos)[2], const RunRecord& record_a,
                                              const RunRecord& record_b);
// A (layer, rows, scale regime) run before the arms run: its coordinates and C2's pinned verdicts.
LayerRun new_run(const std::string& layer, int64_t m, ScaleMode mode, const LayerOperands& ops,
                 const LayerPrediction& pred, ArmKind kind);

}  // namespace qc
