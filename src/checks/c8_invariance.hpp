// C8, invariance: does one row of a layer get the same bits whatever batch it runs in (batch size,
// batch mates), and are the differences that do occur the ones the arm's run records predict?
// docs/invariance.md. The tensor-parallel half (degrees, reduction models) is c8_tp.hpp.
//
// Each layer's rows run in batches of several sizes M' (1 up to the layer's M, the engines' bucket
// edges included: `default_batch_sizes`) and with different batch mates (the layer's order, a seeded
// permutation, mates replaced by synthetic rows); every row's output is compared bit for bit with the
// same row in the reference run (the whole layer at its own M). Each batch's run record names what
// ran (kernel, tile, split-K) and claims a formula (INT8: `RunRecord::epilogue`, or the formula
// instance a shape dispatch chose, `extra.epilogue_instance`; FP8: `extra.accumulation_model` and the
// epilogue): the claim, evaluated on the batch's shape, predicts each row's output, and the predicted
// set of differing elements is compared element for element with the observed set.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "qconform/arm.hpp"
#include "qconform/check.hpp"
#include "qconform/operands.hpp"

namespace qc {

// The verdict words of C8 (per configuration, layer, arm): the rows' bits did not change; they
// changed exactly where the claims predict; they changed anywhere else (or a predicted change did
// not happen). "Nothing to compare" has no word: it is null in JSON.
inline constexpr const char* kInvariant = "invariant";
inline constexpr const char* kVariantPredicted = "variant, predicted";
inline constexpr const char* kVariantUnexplained = "variant, unexplained";

// The batch sizes C8 tries for a layer of `m` rows (each <= m, m itself included), in increasing
// order: 1..4, vLLM's CUDA-graph capture sizes 8, 16, 24, 32, 48, 64, ..., 512 (multiples of 8 and then
// of 64), and both sides of the edges where kernels switch: vLLM's CUTLASS INT8 sm90 dispatch (next
// power of two of M at 16, 32, 64, 128), SGLang's swap-AB (16, 64), qconform's own CUDA kernel
// (mma.sync up to 64, wgmma above), cuBLASLt's split-K at small M (33 measured at K = 12,288), and
// powers of two with their neighbours beyond.
std::vector<int64_t> default_batch_sizes(int64_t m);

struct InvarianceOptions {
  std::vector<int64_t> batch_sizes;  // empty: default_batch_sizes(layer M); sizes above M are dropped
  // Batch mates: "ordered" (the layer's rows in order, cut into batches), "shuffled" (a seeded
  // permutation, so every row gets other mates and another position), "replaced" (each batch half
  // the layer's rows, half synthetic rows of large codes and scales).
  std::vector<std::string> mates = {"ordered", "shuffled", "replaced"};
  uint64_t seed = 0;
  bool refine = true;      // bisect between tested sizes where variance switches (ordered mates)
  bool use_records = true;  // false: every batch is predicted from the arm's declaration alone
  int max_listed = 5;       // differing elements printed per configuration
};

// One element of a row that differs: its row in the layer, its column, the two bit patterns.
struct ElementDiff {
  int64_t row = 0, col = 0;
  uint16_t reference = 0, observed = 0;
  std::optional<uint16_t> predicted;  // the claim's value for this configuration, when there is one
};

// One configuration: batch size and mates. Every row of the layer is observed once in it.
struct InvarianceConfig {
  int64_t batch = 0;
  std::string mates;
  bool refined = false;      // added by the threshold bisection
  int64_t runs = 0, rows = 0, elements = 0;
  std::string kernel;        // what the batches' records say ran (distinct values joined by " | ")
  std::string claim;         // the claimed formula or model per batch ("" none)
  std::string stage;         // where predicted differences come from: "epilogue", "accumulation", both, or ""
  int64_t observed_diff = 0;   // elements differing from the reference run
  int64_t predicted_diff = -1; // elements the claims predict to differ (-1: no prediction)
  int64_t mispredicted = -1;   // elements in one set and not the other (-1: no prediction)
  int64_t claim_mismatch = -1; // elements where the arm's output is not its claim's value (-1: no claim)
  int64_t acc_diff = -1;       // INT8 arms exposing their accumulator: accumulator elements that varied
  std::vector<ElementDiff> first;            // first observed differences
  std::vector<ElementDiff> first_mispredicted;
  std::string verdict;         // kInvariant, kVariantPredicted, kVariantUnexplained
  std::string note;            // why there is no prediction
};

struct LayerInvariance {
  std::string layer;
  int64_t m = 0, n = 0, k = 0;
  std::string reference_kernel, reference_claim;
  std::vector<InvarianceConfig> configs;
  // Where variance starts or stops along M (ordered mates, after bisection): "M <= 32 differ, M >= 33 do not".
  std::vector<std::string> thresholds;
  std::optional<std::string> verdict;  // nullopt: nothing was compared
  std::string note;
};

// The layer's invariance under `arm`. Input errors from the arm propagate.
LayerInvariance layer_invariance(Arm& arm, const LayerOperands& ops, const InvarianceOptions& options);

// The worst verdict of several (unexplained > predicted > invariant; nullopt entries ignored).
std::optional<std::string> combine_invariance(const std::vector<std::optional<std::string>>& verdicts);

// The C8 check of a set of layers: pass when every compared layer is invariant, `reported` when the
// worst is variant-predicted (explained, not invariant), fail when one is unexplained,
// not-applicable when nothing was compared.
CheckResult c8_check(const std::string& arm, const std::vector<LayerInvariance>& layers);

nlohmann::json to_json(const LayerInvariance& r);

// C8 of one arm over the `count` layers `layer(i)` gives: each layer's invariance and the check over them
// (verify --invariance, conform --invariance).
struct ArmInvariance {
  std::string arm;
  CheckResult check;
  std::vector<LayerInvariance> layers;
};
ArmInvariance arm_invariance(Arm& arm, size_t count, const std::function<LayerOperands(size_t)>& layer,
                             const InvarianceOptions& options);
nlohmann::json to_json(const ArmInvariance& r);  // {"arm", "check", "layers"}

// The human printout: one line per configuration, the thresholds and the verdict.
std::string describe(const LayerInvariance& r);

// Helpers shared with the tensor-parallel half (c8_tp.cpp).
namespace invariance_detail {
// What one run's record claims for its shape, and the outputs that claim predicts for `rows` (layer
// row indices) of `ops` when the batch has `batch_m` rows. Holds the layer's exact INT8 accumulators
// or FP8 codes and the models evaluated so far.
class ClaimPredictor {
 public:
  ClaimPredictor(const ArmInfo& info, const LayerOperands& ops);
  ~ClaimPredictor();
  // The claim of `record` ("vllm-cutlass", "sglang-sm90 -> vllm-triton at M=16 N=2048",
  // "hopper-fp8-chain-splitk-4; fp8-scaled"), or "" with `why_not` set.
  std::string claim(const RunRecord& record, int64_t batch_m, bool use_records, std::string& why_not) const;
  // The predicted bf16 rows [rows.size(), N]; false (with `why_not`) when the record claims nothing.
  bool predict(const RunRecord& record, int64_t batch_m, std::span<const int64_t> rows, bool use_records,
               std::vector<uint16_t>& out, std::string& why_not);
  // The stages in which two claims differ ("accumulation", "epilogue", "accumulation and epilogue", "").
  std::string stage_between(const RunRecord& a, const RunRecord& b, int64_t ma, int64_t mb, bool use_records) const;

 private:
  struct Impl;
  Impl* impl_;
};
// `ops` with its activation rows replaced by `rows` (layer row indices; -1: a synthetic mate row made
// from `seed`), weights shared.
LayerOperands batch_rows(const LayerOperands& ops, std::span<const int64_t> rows, uint64_t seed);
std::string bits_text(uint16_t b);  // "0x3f80 (1)"
nlohmann::json count_or_null(int64_t v);  // null for -1 ("no prediction")
// {"first": [...], "first_mispredicted": [...]}: each {"row", "col", <reference_key>, "observed", "predicted"}.
nlohmann::json diff_lists(const std::vector<ElementDiff>& first, const std::vector<ElementDiff>& mispredicted,
                          const char* reference_key);
}  // namespace invariance_detail

}  // namespace qc
