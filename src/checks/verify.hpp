// The layer-level checks of the paper's Sections III and V: range prediction (C2), shared
// operands (C3), accumulator equality (C4), the power-of-two probe (C5) and the real-scale
// tolerance with the exact predicted difference set (C6). This header is the pipeline that feeds
// them (predict.cpp, verify.cpp, element_pass.cpp); each verdict is decided in its own file,
// src/checks/c2_range.cpp … c6_tolerance.cpp.
#pragma once

#include <nlohmann/json.hpp>

#include <array>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "qconform/accumulation.hpp"
#include "qconform/arm.hpp"
#include "checks/interchangeability.hpp"
#include "qconform/check.hpp"
#include "qconform/compare.hpp"

namespace qc {

// ---- C2: range prediction -------------------------------------------------------------------

struct LayerPrediction {
  std::string name;
  RangeStats stats;
  // Safe: every accumulator converts to fp32 exactly (|acc| <= 2^24) and none leaves INT32, so
  // under power-of-two scales bitwise identity is required.
  bool safe = false;
};

struct PredictionSet {
  std::string operands_path;
  std::string operands_sha256;
  // The operands' tree digest (`sha256_tree_file`), recorded by `predict` beside the plain one; empty in
  // files written before it (and for predictions computed inside verify).
  std::string operands_sha256_tree;
  std::vector<LayerPrediction> layers;
  // Pinned: read from a predictions file whose SHA-256 was checked before any arm ran (`verify
  // --predictions P --pin SHA`, conform's own pin). False: computed in this run, so C2 only says
  // what the exact emulation found, never that a pin matches. Not part of the file.
  bool pinned = false;
};

struct PredictionSummary {
  size_t layers = 0, safe = 0, proven_safe_by_bound = 0;
  double min_headroom_bits = 0;  // +inf when every accumulator is zero
};
PredictionSummary summarize(const PredictionSet& p);

PredictionSet predict(const std::vector<LayerOperands>& layers, const std::string& operands_path,
                      const std::string& operands_sha256, int threads = 0,
                      const std::function<void(size_t, size_t)>& progress = {});
nlohmann::json to_json(const PredictionSet& p);
// One layer's prediction, and its JSON (one entry of the file's `layers`; read back losslessly,
// nlohmann::json errors on malformed input): the unit the ranks of an MPI job compute. An FP8 layer
// gets its name and shape only (C2 is about INT32 accumulators; `qconform predict` refuses FP8 files).
LayerPrediction predict_layer(const LayerOperands& ops, int threads = 0);
nlohmann::json to_json(const LayerPrediction& l);
LayerPrediction layer_prediction_from_json(const nlohmann::json& j);
PredictionSet prediction_set_from_json(const nlohmann::json& j, const std::string& file_for_errors);

// ---- scale regimes ----------------------------------------------------------------------------

enum class ScaleMode { real, pow2_channel, pow2_layer };
std::string_view scale_mode_name(ScaleMode mode);
// `option` names what gave `name` in messages (`--scales` in the CLI, `scales` from Python).
ScaleMode scale_mode_from_name(std::string_view name, std::string_view option = "--scales");
// pow2-channel: every weight scale rounded to its nearest power of two (in log2), activation
// scales untouched — the probe checkpoint's rewrite; on a block-scaled layer every activation group
// scale as well (the UE8M0 probe: each scale product in the promotion is then exact). pow2-layer: every activation scale and every
// weight scale of the layer set to one power of two each (the nearest, in log2, to the layer's
// geometric-mean scale) — the paper's layer-level regime, one point in scale space per layer.
LayerOperands apply_scale_mode(const LayerOperands& ops, ScaleMode mode);

// ---- verification -------------------------------------------------------------------------------

// Where verify computes its reference (the exact accumulators every check compares against; for an
// FP8 pair, each arm's declared accumulation model on the layer's codes).
// `gpu`: plain int64 multiply-adds on CUDA cores (never the tensor cores an arm may use); `automatic`:
// gpu when a CUDA device is usable, else cpu. The checks and their results do not depend on it.
enum class VerifyReference { automatic, cpu, gpu };
VerifyReference verify_reference_from_name(std::string_view name);  // auto, cpu, gpu
// `automatic` made concrete; `gpu` without a usable device is an input error naming the reason.
VerifyReference resolve_reference(VerifyReference requested);
std::string reference_description(VerifyReference where);

struct VerifyOptions {
  std::vector<ScaleMode> modes{ScaleMode::real, ScaleMode::pow2_channel, ScaleMode::pow2_layer};
  std::vector<int64_t> m_sweep;     // empty: the file's M only; otherwise the first m rows of each layer
  int64_t tolerance_ulps = 1;       // C6
  CompareOptions compare;
  VerifyReference reference = VerifyReference::automatic;
  int threads = 0;
  // The words of verify's messages and advice: the CLI's flags or the Python API's argument names.
  UserLanguage language = UserLanguage::cli;
};
// Why verify's device pipeline does not take this pair under `options` ("" when it does: its uploads then
// hash the tree digest's leaves of the operands on the device, docs/gpu.md).
std::string device_pipeline_refusal(Arm& a, Arm& b, const VerifyOptions& options);

// The reason an FP8 run is unmodelled when its arm declares no accumulation model at all
// (`ArmInfo::fp8_model_unknown`); any other reason is the arm's record refusing its declared model.
inline constexpr std::string_view kUndeclaredModel =
    "the arm declares no accumulation model: its model is unknown until measured (run identify)";

// The reason an FP8 arm's run record refuses its declared model (cuBLASLt's split-K:
// `extra.accumulation_model` null and `extra.accumulation_model_refused`), "" when it claims it.
// `extra` is a record's `extra` object (anything else: "").
std::string accumulation_model_refusal(const nlohmann::json& extra);
// The model an FP8 arm's run claims: its record's `extra.accumulation_model` when that names one
// (cuBLASLt names the split-K form of its declared model on such runs), "" when the record refuses
// it, else the model the arm declares. `extra` as for `accumulation_model_refusal`.
std::string claimed_model(const nlohmann::json& extra, const std::string& declared);

// What one run showed of one arm (`LayerRun::arm[0]` is arm A's, `arm[1]` arm B's).
struct ArmRunEvidence {
  // C4: elements of the arm's exposed accumulator off the exact reference (INT8) or off its declared
  // model (FP8: its fp32 D); none when the arm exposes no accumulator or, FP8, its run claims no model.
  std::optional<int64_t> acc_mismatch;
  // Outputs off the arm's own declared formula (FP8: declared model + epilogue); none when it declares
  // none (FP8: its run is unmodelled).
  std::optional<int64_t> formula_mismatch;
  std::string model;       // FP8: the model the arm's run claimed ("" when unmodelled)
  std::string unmodelled;  // FP8: non-empty: why the arm is unmodelled on this run (its record refused
                           // its model, or `kUndeclaredModel`: it declares none)
};

// One (layer, M, scale mode) run of both arms.
struct LayerRun {
  std::string layer;
  int64_t m = 0, n = 0, k = 0;
  ScaleMode mode = ScaleMode::real;
  bool safe = false;                  // from the pinned prediction
  bool int32_overflow = false;        // the layer's exact accumulators leave INT32 (C4 excludes it)
  Comparison cmp;                     // arm A vs arm B
  // C3: operand digests seen by each arm before and after it ran (unchanged and equal).
  bool operands_identical = true;
  std::string operands_note;
  std::array<ArmRunEvidence, 2> arm;  // per arm: C4's accumulator, the declared formula, the claimed model
  std::vector<std::string> acc_first_mismatch;  // C4: described coordinates
  // C2: observed max |acc| of each exposing arm vs the prediction.
  bool prediction_held = true;
  // C5 (pow2 modes): pairs excluded from the required identity (subnormal / non-finite outputs
  // or intermediates), and differences among the rest.
  int64_t pow2_excluded = 0, pow2_violations = 0;
  std::vector<DiffElement> pow2_first;
  bool pow2_not_commutable = false;   // a declared formula adds bias after a rounding
  // Declared formulas: whether the observed set of differing elements equals the set the two formulas
  // predict (`predicted_diff` none: not both arms declare a formula, nothing was predicted and
  // `predicted_equals_observed` means nothing; the JSON writes both as null).
  std::optional<int64_t> predicted_diff;
  bool predicted_equals_observed = true;
  // FP8 pairs (both arms declare an accumulation model, docs/accumulation.md): the reference is each
  // arm's declared model on the layer's codes plus its declared epilogue, so `arm[i].formula_mismatch`
  // counts outputs off the arm's model + epilogue, `arm[i].acc_mismatch` its exposed fp32 accumulator off its model,
  // `predicted_diff` the elements where model A + epilogue != model B + epilogue, and `pow2_violations`
  // the observed differences of a power-of-two run where the two models' accumulators are equal.
  bool fp8 = false;
  // Block-scaled pairs (both arms declare block models, on a layer whose scales act per K block): the
  // models' D depends on the run's scales, `acc_mismatch` counts the arm's exposed D (`ArmOutput::d`) off
  // its model, `model_acc_diff` the elements where the two models' accumulations differ (D, or under
  // power-of-two scales a K block's chain), and `pow2_excluded` those whose chains agree but whose D do
  // not (a scale product outside fp32's exact range).
  bool block = false;
  std::string scaling;                     // FP8: the layer's scale layouts (`scaling_description`)
  std::optional<int64_t> model_acc_diff;   // elements where the two models' fp32 accumulators differ bitwise (none: unmodelled)
  std::vector<std::string> model_first;    // the first outputs off their model, described with bit patterns
  std::string acc_note;                    // why an FP8 arm's accumulator was not compared ("" when it was)
};

struct VerifyResult {
  ArmInfo arm_a, arm_b;
  RunRecord record_a, record_b;
  std::string reference;             // where the exact reference ran (reference_description)
  std::vector<LayerRun> runs;
  std::vector<CheckResult> checks;   // C2, C3, C4, C5, C6 in that order
  Comparison total_real;             // all real-scale runs merged
  // FP8 pairs: the stage the verdict names (none when every check passed): the operands, the
  // accumulation model (an arm off its declared model, its accumulator exposed and off too, or not
  // exposed), the epilogue (accumulator on its model, outputs off), or not localized (differences
  // nothing declared predicts beyond the tolerance); and the sentence that says which arm and where.
  std::optional<Stage> stage;
  std::string stage_detail;
  // "the <stage> stage: <detail>" ("" when no stage is named).
  std::string stage_sentence() const;
  // The answer a team acts on (identical / explained / unexplained / different), decided from the
  // checks above (interchangeability.hpp).
  InterchangeabilityAnswer interchangeability;
  // Wall seconds per phase (arm A, arm B, reference accumulation, ...), in first-seen order: where
  // verify spent its time (`verify --timings`). The element passes run on worker threads beside the
  // next run's arms, so the phases can add up to more than `wall_seconds`.
  std::vector<std::pair<std::string, double>> seconds;
  double wall_seconds = 0;
  bool all_passed() const;
};

VerifyResult verify_layers(Arm& a, Arm& b, const std::vector<LayerOperands>& layers, const PredictionSet& predictions,
                           const VerifyOptions& options,
                           const std::function<void(size_t, size_t, const std::string&)>& progress = {});
nlohmann::json to_json(const VerifyResult& r);
// `to_json(r)` with the top-level members of `fields` added (or replacing its own, `runs` excepted), as
// the text of `dump(1)`: the same bytes, the runs' texts made on every core (`dump_with_array`).
std::string to_json_text(const VerifyResult& r, nlohmann::json fields);

// ---- verification in parts (the ranks of an MPI job, `verify --resume`) ---------------------------
//
// verify_layers = verify_layer_runs over every layer, then merge_verifications. The parts can be
// computed anywhere, in any order and in several processes: merged in layer order they give the
// same result, since every check is a function of the per-layer runs in layer order.

// What verify found in one layer: its runs and whether its pinned prediction still holds.
struct LayerVerification {
  std::string name;
  std::vector<LayerRun> runs;
  std::string stale;             // "" when the pinned prediction equals the exact statistics, else both
  RunRecord record_a, record_b;  // as the arms reported them in the layer's first run
};
// Lossless: layer_verification_from_json(to_json(v)) == v, field for field.
nlohmann::json to_json(const LayerVerification& v);
LayerVerification layer_verification_from_json(const nlohmann::json& j, const std::string& where);

// Loads layer `i` (a view into a mapped file, or a shard mapped for it and unmapped when the
// returned operands are dropped).
using LayerLoader = std::function<LayerOperands(size_t)>;

struct VerifySelection {
  bool only = false;                  // false: every layer
  std::vector<size_t> layers;         // when `only`: the layer indices to run, ascending
  std::function<void(size_t)> started;                              // before layer i loads
  std::function<void(size_t, const LayerVerification&)> done;       // once layer i's runs are complete
};

struct VerifiedLayers {
  std::map<size_t, LayerVerification> layers;  // by layer index
  std::string reference;                       // reference_description
  std::vector<std::pair<std::string, double>> seconds;
  double wall_seconds = 0;
};

VerifiedLayers verify_layer_runs(Arm& a, Arm& b, size_t layer_count, const LayerLoader& load,
                                 const PredictionSet& predictions, const VerifyOptions& options,
                                 const VerifySelection& selection = {},
                                 const std::function<void(size_t, size_t, const std::string&)>& progress = {});
// The checks C2-C6 over every layer's verification, `layers` in layer order (one per prediction).
VerifyResult merge_verifications(const ArmInfo& a, const ArmInfo& b, const std::string& reference,
                                 std::vector<LayerVerification> layers, const PredictionSet& predictions,
                                 const VerifyOptions& options);

// A layer's operands restricted to its first `m` rows (a view, no copy).
LayerOperands first_rows(const LayerOperands& ops, int64_t m, std::string_view option = "--m-sweep");

}  // namespace qc
