// verify's device pipeline, the host side (docs/gpu.md, "verify on the device"): when the reference is
// on the GPU and both arms run on device-resident operands, each layer is uploaded once for every row
// count, scale regime, both arms and the reference, the operands are compared with their copies there
// (C3), and the element pass runs there (arms/cuda/gpu_verify.cpp); the host receives counts, and lists
// from the few rows that hold the listed elements, through its own element pass over those rows.
// INT8 pairs against the exact accumulators computed there; FP8 pairs (per-tensor, per-token and
// per-channel scales) against the declared models evaluated there. Block-scaled pairs, and layers the
// pipeline cannot take, run on the host's pipeline (verify.cpp).
#pragma once

#include <functional>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "arms/cuda/cuda.hpp"
#include "checks/element_pass.hpp"
#include "checks/fp8_reference.hpp"  // PhaseSeconds
#include "checks/verify.hpp"

namespace qc {

class ResidentVerifier {
 public:
  // Why the pipeline does not run this pair ("" when it does): the reference is not on the GPU, an arm is
  // not resident, the pair is block-scaled FP8, or a declared formula has no device instance.
  static std::string refusal(const ArmInfo& a, const ArmInfo& b, const Epilogue* formula_a, const Epilogue* formula_b,
                             VerifyReference reference);
  ResidentVerifier(Arm& a, Arm& b, const Epilogue* formula_a, const Epilogue* formula_b, const VerifyOptions& options);
  ~ResidentVerifier();
  // What `VerifyResult::reference` says of a verify the pipeline ran.
  std::string reference_description() const;

  // Every run of layer `full` (each row count of the sweep, each scale regime) into `layer`, and for an
  // INT8 pair C2's fresh statistics into `layer.stale`; false (nothing run) when the pipeline cannot take
  // the layer, which the host's pipeline then runs. `step` reports each run as the host's loop does.
  // `next`: the layer the caller runs next, uploaded ahead beside this layer's runs (null: none).
  // `done` is called once every run is in `layer`: before this returns, or with `overlaps_layers()` for an
  // INT8 pair by the next `verify_layer` or by `finish` (the host's parts of the runs go on beside the next
  // layer's runs).
  bool verify_layer(const LayerOperands& full, const LayerOperands* next, const LayerPrediction& pred, bool python,
                    LayerVerification& layer, PhaseSeconds& seconds, const std::function<void(const std::string&)>& step,
                    std::function<void()> done);
  // The layer whose runs' host parts still run, joined into it and handed to its `done` (nothing: none).
  void finish(PhaseSeconds& seconds);
  // On by default (QC_VERIFY_OVERLAP=0 turns it off; docs/gpu.md): the run loop's work across layers
  // overlapped: the layer after next loaded on a thread of its own (`LayerSequence`, verify.cpp), a
  // layer's host parts finished beside the next layer's runs, and the next upload waiting for the exact
  // sums ahead only when their layer was not taken (`GpuVerifyLayer::prefetch`).
  static bool overlaps_layers();
  // With `overlaps_layers`, an FP8 layer's host parts too (on by default; QC_FP8_OVERLAP=0 turns it off).
  static bool fp8_layers_overlap();

 private:
  // What the FP8 runs of one (layer, rows) share: the arms' exposed accumulators against their models.
  struct Fp8Rows;
  void arms_run(const LayerOperands& ops, LayerVerification& layer, PhaseSeconds& seconds, RunRecord (&records)[2]);
  void take_operand_check(const GpuPassCounts& counts, const LayerOperands& ops, LayerRun& run) const;
  // A run whose device part is done: its host part (the element pass over the listed rows, the merge,
  // the fold) on a task of its own, with that part's seconds.
  using PendingRun = std::future<std::pair<LayerRun, double>>;
  PendingRun int8_run(const LayerOperands& ops, const std::string& label, LayerRun run, LayerVerification& layer,
                      PhaseSeconds& seconds);
  void fp8_accumulators(const LayerOperands& rows, Fp8Rows& shared, PhaseSeconds& seconds);
  PendingRun fp8_run(const LayerOperands& ops, const std::string& label, LayerRun run,
                     std::shared_ptr<const Fp8Rows> shared, LayerVerification& layer, PhaseSeconds& seconds);
  int64_t sample_row(int64_t m) { return (runs_++ * 7919) % m; }
  // The runs' host parts joined in order into their layer.
  void join(std::vector<PendingRun>& pending, LayerVerification& layer, PhaseSeconds& seconds);

  Arm* arms_[2];
  ArmInfo infos_[2];
  const Epilogue* formula_[2];
  const VerifyOptions& options_;
  bool fp8_;
  std::unique_ptr<GpuVerifyLayer> gpu_;
  std::vector<NamedAccumModel> declared_;  // FP8: the arms' declared models
  int64_t runs_ = 0;  // the runs so far, which choose each run's sampled row
  // A layer whose runs' host parts go on beside the next layer's runs. Declared last, so destroyed
  // first: its tasks, which read this object's members, are waited for before those go.
  struct Unfinished {
    LayerVerification* layer = nullptr;
    std::vector<PendingRun> pending;
    std::function<void()> done;
  };
  std::optional<Unfinished> unfinished_;
};

}  // namespace qc
