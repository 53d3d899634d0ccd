// verify's reference side of an FP8 pair (verify.cpp): per (layer, rows), the layer's codes and the
// fp32 accumulators of every model a run claims (block-scaled pairs: per run, under its scales), and
// the arms' exposed accumulators; per run of a block pair, the block models and C5's jurisdiction.
#pragma once

#include <array>
#include <chrono>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "accum/fp8_model.hpp"
#include "arms/cuda/cuda.hpp"
#include "checks/element_pass.hpp"
#include "checks/verify.hpp"
#include "epilogue/block_models.hpp"
#include "qconform/arm.hpp"

namespace qc {

// Wall seconds per phase, in first-seen order (`VerifyResult::seconds`).
using PhaseSeconds = std::vector<std::pair<std::string, double>>;

inline void add_seconds(PhaseSeconds& seconds, std::string_view phase, double dt) {
  for (auto& [name, total] : seconds) {
    if (name == phase) return void(total += dt);
  }
  seconds.emplace_back(phase, dt);
}

inline double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// The reference side of an FP8 pair for one (layer, rows): the layer's codes, the fp32 accumulators
// of every model a run claims, evaluated once each (on the host, or on the GPU when verify's
// reference is the GPU; the codes do not depend on the scale regime), and the fp32 accumulators the
// arms expose (`Arm::fp8_accumulate`, e4m3 x e4m3 codes only) with the model that call claimed.
// Models are evaluated by the element passes that need them and, on a GPU reference, ahead of them
// beside the run loop (`prefetch`, started by `fp8_layer_reference`): `mu` serializes the
// evaluations; the passes read the vectors through pointers, which stay valid (std::map nodes do
// not move). An arm that declares `ArmInfo::concurrent_calls` is asked for its accumulator beside the
// run loop too (`accumulators`); the others on the run loop's thread, before the layer's runs.
struct Fp8LayerReference {
  Fp8LayerCodes codes;
  VerifyReference where = VerifyReference::cpu;
  int threads = 0;
  // Read only after `wait_accumulators`.
  std::vector<float> arm_acc[2];                // empty when `acc_note[s]` says why
  std::string acc_model[2];                     // the model the accumulator call claimed
  bool has_acc[2] = {false, false};
  std::string acc_note[2];
  double acc_seconds[2] = {0, 0};               // the accumulator calls' time (their phases)
  bool acc_beside[2] = {false, false};          // made beside the run loop

  const std::vector<float>* model(const std::string& name);
  // Block pairs: a block model's D under one run's scales (`scaled`: these rows with the regime's
  // scales), evaluated on the host. The runs of a (layer, rows) are passed one after another, so the
  // models of a previous regime are dropped when the next regime's are made.
  const std::vector<float>* block_model(const std::string& name, ScaleMode mode, const LayerOperands& scaled);
  // Block pairs of two chains: 1 where some K block's chain result differs between the models, else 0
  // (whatever the scales: computed once per (layer, rows)).
  const std::vector<uint8_t>& chains_differ(const BlockModel& a, const BlockModel& b, const LayerOperands& rows);
  // The evaluation time since the last call (the phase "reference accumulation (declared models)").
  double take_seconds() {
    std::lock_guard lock(mu);
    return std::exchange(seconds, 0.0);
  }
  // Arm s's accumulator call, its claimed model or the reason it has none. Input errors other than
  // the arm's refusal propagate.
  void call_accumulator(int s, Arm& arm, const ArmInfo& info, const LayerOperands& rows);
  // Waits for the accumulator calls made beside the run loop; rethrows what they threw.
  void wait_accumulators() const {
    const std::shared_future<void> calls = accumulators;  // a copy per waiter (element passes run on their threads)
    if (calls.valid()) calls.get();
  }
  // The accumulator calls' time as phases, once (the first run of the layer that finishes adds it).
  void take_accumulator_seconds(PhaseSeconds& to) {
    for (int s = 0; s < 2; ++s) {
      const double t = std::exchange(acc_seconds[s], 0.0);
      if (t > 0) add_seconds(to, fmt::format("arm {} fp32 accumulator{}", s ? "B" : "A", acc_beside[s] ? " (beside the runs)" : ""), t);
    }
  }

 private:
  std::mutex mu;
  std::map<std::string, std::vector<float>> d;  // by model name (block models: name@regime)
  std::optional<std::vector<uint8_t>> chain_mask;  // `chains_differ` of the chains `chain_pair` names
  std::string chain_pair;
  std::optional<GpuFp8Codes> gpu;
  double seconds = 0;

 public:
  // Declared last, destroyed first: their destructors wait for the tasks, which use the members above.
  std::shared_future<void> accumulators;
  std::future<void> prefetch;
};

// The reference of one (layer, rows): its codes; the accumulators of the arms that take no concurrent
// calls asked for now, the others' beside the run loop; on a GPU reference the declared models started
// there. A block pair's reference holds the codes only (its models are made per run, `block_model`).
std::shared_ptr<Fp8LayerReference> fp8_layer_reference(Arm* arms[2], const ArmInfo infos[2], const LayerOperands& rows,
                                                       VerifyReference where, int threads);

// The element passes' comparison of the exposed accumulators for one (layer, rows), made by whichever
// pass comes first (they run one after another; `call_once` says so without relying on it).
struct Fp8AccumulatorCheck {
  std::once_flag once;
  ElementTally tally;
};

// A block pair's run reference: each modelled arm's block model under this run's scales, each arm's
// exposed D with it, and under power-of-two scales C5's jurisdiction. There, every scale product is exact
// and every promotion form gives the same D, so the arms must agree bitwise wherever their chains agree
// in every K block; where the chains differ the models predict the difference. `key` marks the elements
// where they differ (D of A, and D of B made unequal there), and the return value counts the elements
// whose chains agree but whose models' D do not: a scale product left fp32's exact range (subnormal or
// overflowing), outside the probe's jurisdiction. `key_store` of `f` owns B's key.
int64_t block_run_reference(Fp8RunReference& f, Fp8LayerReference& ref, const LayerOperands& ops, ScaleMode mode,
                            const std::array<const ArmOutput*, 2>& out);

}  // namespace qc
