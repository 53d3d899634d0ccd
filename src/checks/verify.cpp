// Layer-level verification, the pipeline that feeds C2–C6: both arms on identical operands under
// each scale regime (the run loop), the element pass of each run beside the next run's arms
// (element_pass.cpp), and the merge of the per-layer runs into the checks, one file each:
// c2_range.cpp, c3_shared_operands.cpp, c4_accumulator.cpp, c5_pow2.cpp, c6_tolerance.cpp.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <utility>

#include "accum/fp8_model.hpp"
#include "arms/cuda/cuda.hpp"
#include "epilogue/block_models.hpp"
#include "checks/c2_range.hpp"
#include "checks/c3_shared_operands.hpp"
#include "checks/c5_pow2.hpp"
#include "checks/layer_checks.hpp"
#include "checks/element_pass.hpp"
#include "checks/fp8_reference.hpp"
#include "qconform/epilogue.hpp"
#include "qconform/error.hpp"
#include "checks/verify.hpp"
#include "checks/verify_internal.hpp"
#include "checks/verify_resident.hpp"
#include "core/numerics_checked.hpp"
#include "qconform/numerics.hpp"
#include "core/name_table.hpp"
#include "core/parallel.hpp"

namespace qc {

// The arm's declared formula (null: none). An FP8 arm's is its declared epilogue over the fp32 GEMM
// result; an FP8 arm that names none (cuBLASLt, which scales inside the library) is held to
// `fp8-scaled`, the one FP8 epilogue (the FP8 sweep applies it to every FP8 arm too).
const Epilogue* verify_declared_formula(const ArmInfo& info) {
  if (info.block()) return nullptr;  // bf16 = RNE(D) is part of the block model
  if (info.fp8()) {
    return info.epilogue.empty() || info.epilogue == fp8_epilogue().name ? &fp8_epilogue() : &epilogue(info.epilogue);
  }
  return info.epilogue.empty() ? nullptr : &epilogue(info.epilogue);
}

namespace {

// The exact accumulators of one (layer, rows) slice, on the host or on the GPU's CUDA cores.
ExactAccumulators exact_acc(const LayerOperands& ops, VerifyReference where, int threads) {
  const AccumShape s{ops.m, ops.n, ops.k};
  return where == VerifyReference::gpu ? exact_accumulate_gpu(ops.a_q.data(), ops.w_q.data(), s)
                                       : exact_accumulate(ops.a_q.data(), ops.w_q.data(), s, threads);
}

// Adds the wall time of `fn` to `seconds[phase]` and returns what `fn` returns.
template <class Fn>
auto timed(PhaseSeconds& seconds, std::string_view phase, Fn&& fn) {
  const auto t0 = std::chrono::steady_clock::now();
  if constexpr (std::is_void_v<decltype(fn())>) {
    fn();
    add_seconds(seconds, phase, seconds_since(t0));
  } else {
    auto r = fn();
    add_seconds(seconds, phase, seconds_since(t0));
    return r;
  }
}


}  // namespace

std::string claimed_model(const nlohmann::json& extra, const std::string& declared) {
  if (!accumulation_model_refusal(extra).empty()) return "";
  if (extra.is_object() && extra.contains("accumulation_model") && extra["accumulation_model"].is_string()) {
    return extra["accumulation_model"].get<std::string>();
  }
  return declared;
}

std::string accumulation_model_refusal(const nlohmann::json& extra) {
  if (!extra.is_object() || !extra.contains("accumulation_model_refused")) return "";
  const nlohmann::json& why = extra["accumulation_model_refused"];
  return why.is_string() ? why.get<std::string>() : why.dump();
}

constexpr NameRow<VerifyReference> kReferenceNames[] = {
    {VerifyReference::automatic, "auto"}, {VerifyReference::cpu, "cpu"}, {VerifyReference::gpu, "gpu"}};

VerifyReference verify_reference_from_name(std::string_view name) {
  if (const auto r = value_of(kReferenceNames, name)) return *r;
  QC_FAIL_INPUT("--reference: unknown value `{}`; expected {}", name, names_or(kReferenceNames));
}

VerifyReference resolve_reference(VerifyReference requested) {
  std::string why;
  const bool gpu = cuda_available(&why);
  if (requested == VerifyReference::automatic) return gpu ? VerifyReference::gpu : VerifyReference::cpu;
  QC_INPUT(requested != VerifyReference::gpu || gpu, "--reference gpu: no usable CUDA device: {}", why);
  return requested;
}

std::string reference_description(VerifyReference where) {
  return where == VerifyReference::gpu
             ? "exact accumulation on the CUDA cores of " + cuda_device_description() +
                   " (integer multiply-adds, never the tensor cores); formulas, comparisons and operand checks on the "
                   "host"
             : "exact accumulation on the host (Highway SIMD); formulas, comparisons and operand checks on the host";
}

constexpr NameRow<ScaleMode> kScaleModeNames[] = {
    {ScaleMode::real, "real"}, {ScaleMode::pow2_channel, "pow2-channel"}, {ScaleMode::pow2_layer, "pow2-layer"}};

std::string_view scale_mode_name(ScaleMode mode) { return name_of(kScaleModeNames, mode); }

ScaleMode scale_mode_from_name(std::string_view name, std::string_view option) {
  if (const auto m = value_of(kScaleModeNames, name)) return *m;
  QC_FAIL_INPUT("{}: unknown scale regime `{}`; expected {}", option, name, names_or(kScaleModeNames));
}

LayerOperands apply_scale_mode(const LayerOperands& ops, ScaleMode mode) {
  if (mode == ScaleMode::real) return ops;
  std::vector<float> sa(ops.a_scale.begin(), ops.a_scale.end());
  std::vector<float> sw(ops.w_scale.begin(), ops.w_scale.end());
  if (mode == ScaleMode::pow2_channel) {
    for (float& s : sw) s = pow2_nearest_log2(s);
    // Block-scaled: the activation group scales too (UE8M0-like), so that every product C*sa*sb of the
    // promotion is exact and the promotion forms agree (docs/checks.md, "C5 on block-scaled pairs").
    if (ops.block_scaled()) {
      for (float& s : sa) s = pow2_nearest_log2(s);
    }
  } else {
    const auto geometric_mean = [](const std::vector<float>& v) {
      double log_sum = 0;
      for (float s : v) log_sum += std::log2(static_cast<double>(s));
      return static_cast<float>(std::exp2(log_sum / static_cast<double>(v.size())));
    };
    std::fill(sa.begin(), sa.end(), pow2_nearest_log2(geometric_mean(sa)));
    std::fill(sw.begin(), sw.end(), pow2_nearest_log2(geometric_mean(sw)));
  }
  return with_scales(ops, std::move(sa), std::move(sw));
}

LayerOperands first_rows(const LayerOperands& ops, int64_t m, std::string_view option) {
  QC_INPUT(m >= 1 && m <= ops.m, "{}: layer `{}` has {} rows, cannot take the first {}", option, ops.name, ops.m, m);
  LayerOperands out = ops;
  out.m = m;
  out.a_q = ops.a_q.first(static_cast<size_t>(m * ops.k));
  out.a_scale = ops.a_scale.first(static_cast<size_t>(m * ops.a_scaling.scale_cols(ops.k)));
  return out;
}

bool VerifyResult::all_passed() const {
  return std::none_of(checks.begin(), checks.end(), [](const CheckResult& c) { return c.verdict == Verdict::fail; });
}

std::string VerifyResult::stage_sentence() const {
  return stage ? fmt::format("the {} stage: {}", stage_name(*stage), stage_detail) : "";
}

// A run's element tally folded into its evidence: C4 and C2 part two (the exposed accumulators
// against the exact one, the safe verdict), the formula and model counts, C5 under power-of-two
// scales. `fp8`: an FP8 pair's reference of this (layer, rows), each count only where the arm
// claims its model.
void fold_tally(LayerRun& run, const ElementTally& t, bool a_has_acc, bool b_has_acc, const Fp8LayerReference* fp8,
                const Epilogue* formula_a, const Epilogue* formula_b) {
  // C4 and C2 part two: exposed accumulators against the exact one and the safe verdict.
  const auto count_if = [](bool taken, int64_t v) { return taken ? std::optional<int64_t>(v) : std::nullopt; };
  run.arm[0].acc_mismatch = count_if(a_has_acc, t.acc_mismatch[0]);
  run.arm[1].acc_mismatch = count_if(b_has_acc, t.acc_mismatch[1]);
  run.acc_first_mismatch = t.acc_first;
  run.prediction_held = t.safe_contradicted == 0;
  if (fp8) {
    // FP8: each count only where the arm claims its model on this run (else none: unmodelled).
    const Fp8LayerReference& f = *fp8;
    const bool modelled[2] = {run.arm[0].unmodelled.empty(), run.arm[1].unmodelled.empty()};
    std::vector<std::string> notes;
    if (run.block) {
      // Block pairs: each arm's D of this run against its block model of this run (when both exist).
      const bool exposed[2] = {a_has_acc, b_has_acc};
      for (int s = 0; s < 2; ++s) {
        run.arm[s].acc_mismatch = count_if(exposed[s] && modelled[s], t.acc_mismatch[s]);
        if (!exposed[s]) notes.push_back(fmt::format("{}: exposes no fp32 accumulator D with its run", s ? "B" : "A"));
      }
    } else {
      // The accumulator is compared with the model its own call claimed, whatever the run claimed.
      for (int s = 0; s < 2; ++s) {
        run.arm[s].acc_mismatch = count_if(f.has_acc[s], t.acc_mismatch[s]);
        if (!f.acc_note[s].empty()) notes.push_back(fmt::format("{}: {}", s ? "B" : "A", f.acc_note[s]));
      }
    }
    run.acc_note = fmt::format("{}", fmt::join(notes, "; "));
    for (int s = 0; s < 2; ++s) run.arm[s].formula_mismatch = count_if(modelled[s], t.formula_mismatch[s]);
    run.model_first = t.model_first;
    if (modelled[0] && modelled[1]) {
      run.predicted_diff = t.predicted_diff;
      run.predicted_equals_observed = t.predicted_vs_observed == 0;
      run.model_acc_diff = t.model_acc_diff;
      if (run.mode != ScaleMode::real) {
        run.pow2_excluded = t.pow2_excluded;
        run.pow2_violations = t.pow2_violations;
        run.pow2_first = t.pow2_first;
      }
    }
    return;
  }
  run.arm[0].formula_mismatch = count_if(formula_a != nullptr, t.formula_mismatch[0]);
  run.arm[1].formula_mismatch = count_if(formula_b != nullptr, t.formula_mismatch[1]);
  if (formula_a && formula_b) {
    run.predicted_diff = t.predicted_diff;
    run.predicted_equals_observed = t.predicted_vs_observed == 0;
  }
  // C5: under power-of-two scales, bitwise identity is required in safe layers.
  if (run.mode != ScaleMode::real) {
    run.pow2_excluded = t.pow2_excluded;
    run.pow2_violations = t.pow2_violations;
    run.pow2_first = t.pow2_first;
  }
}

// A (layer, rows, scale regime) run before the arms run: its coordinates and C2's pinned verdicts.
LayerRun new_run(const std::string& layer, int64_t m, ScaleMode mode, const LayerOperands& ops,
                 const LayerPrediction& pred, ArmKind kind) {
  LayerRun run;
  run.layer = layer;
  run.m = m;
  run.n = ops.n;
  run.k = ops.k;
  run.mode = mode;
  run.safe = pred.safe;
  run.int32_overflow = pred.stats.int32_overflow_count > 0;
  if (kind != ArmKind::int8) {  // C2's range has no meaning for a floating-point accumulation
    run.fp8 = true;
    run.block = kind == ArmKind::fp8_block;
    run.scaling = ops.scaling_description();
    run.safe = false;
    run.int32_overflow = false;
  }
  return run;
}

// FP8: the model each arm's run claims (or why it is unmodelled: an arm that declares no model is
// unmodelled on every run, whatever its record says), into the run and the element pass's reference.
std::shared_ptr<Fp8RunReference> claim_models(LayerRun& run, const ArmInfo (&infos)[2], const RunRecord& record_a,
                                              const RunRecord& record_b) {
  auto fp8_run = std::make_shared<Fp8RunReference>();
  for (int s = 0; s < 2; ++s) {
    const ArmInfo& info = infos[s];
    const RunRecord& record = s ? record_b : record_a;
    const bool declared = !info.accumulation_model.empty();
    run.arm[s].unmodelled = declared ? accumulation_model_refusal(record.extra) : std::string(kUndeclaredModel);
    run.arm[s].model = declared ? claimed_model(record.extra, info.accumulation_model) : std::string();
    fp8_run->modelled[s] = !run.arm[s].model.empty();
    fp8_run->model[s] = run.arm[s].model;
  }
  return fp8_run;
}

namespace {

// The pair's kind, checked: two INT8 arms, two FP8 arms of unscaled models, or two block-scaled FP8
// arms; `reference_text` (the INT8 reference's description on entry) describes an FP8 pair's reference.
ArmKind check_pair_format(const ArmInfo& info_a, const ArmInfo& info_b, const Epilogue* formula_a,
                             const Epilogue* formula_b, VerifyReference reference, bool python,
                             std::string& reference_text) {
  // An FP8 pair: both arms are FP8 arms, and the reference is each arm's declared model (an arm whose
  // model is unknown is unmodelled on every run: nothing predicts its outputs).
  const ArmKind kind = info_a.kind();
  const bool fp8 = kind != ArmKind::int8;
  QC_INPUT(fp8 == info_b.fp8(),
           "{}: `{}` is {} but `{}` is {}: verify compares two arms of the same format (FP8 arms take FP8 codes, "
           "docs/accumulation.md)",
           python ? "arm_a, arm_b" : "--arms", info_a.label, arm_kind_name(kind), info_b.label, arm_kind_name(info_b.kind()));
  const ArmInfo infos[2] = {info_a, info_b};
  // A block-scaled pair: both arms declare block models, whose scales act inside the accumulation.
  const bool block = kind == ArmKind::fp8_block;
  QC_INPUT(kind == info_b.kind(),
           "--arms: `{}` declares {} but `{}` declares {}: verify compares two block-scaled FP8 arms (block models, "
           "on block-scaled layers) or two FP8 arms of unscaled models, never one of each (no layer runs on both)",
           info_a.label, info_a.block() ? "a block-scaled arm" : info_a.accumulation_model, info_b.label,
           info_b.block() ? "a block-scaled arm" : info_b.accumulation_model);
  if (block) {
    for (const ArmInfo& i : infos) {
      if (!i.accumulation_model.empty()) (void)fp8_block_model(i.accumulation_model);  // a name it can evaluate
    }
    reference_text = fmt::format(
        "the declared block models (A: {}, B: {}) evaluated on the layer's FP8 codes and each run's scales {}: per K "
        "block the model's chain from zero, its promotion form into an fp32 D, bf16 = RNE(D)",
        info_a.accumulation_model.empty() ? "undeclared" : info_a.accumulation_model,
        info_b.accumulation_model.empty() ? "undeclared" : info_b.accumulation_model,
        reference == VerifyReference::gpu
            ? "on the CUDA cores of " + cuda_device_description() +
                  " (src/arms/cuda/kernels/fp8_block_model.cu: the chain kernels per K block, then the header's "
                  "promotion; never the tensor cores)"
            : std::string("on the host (Highway)"));
  } else if (fp8) {
    for (const ArmInfo& i : infos) {
      if (!i.accumulation_model.empty()) (void)fp8_accumulation_model(i.accumulation_model);  // a name it can evaluate
    }
    const auto model_of = [](const ArmInfo& i) {
      return i.accumulation_model.empty() ? std::string("none declared, unmodelled") : i.accumulation_model;
    };
    reference_text = fmt::format(
        "the declared accumulation models (A: {}, B: {}; on a run whose record names another, such as cuBLASLt's "
        "split-K form, that one) evaluated on the layer's FP8 codes {}, then each arm's declared epilogue (A: {}, "
        "B: {}) on the host",
        model_of(info_a), model_of(info_b),
        reference == VerifyReference::gpu ? "on " + cuda_device_description() + " (the models' CUDA evaluation)"
                                          : "on the host (Highway)",
        formula_a->name, formula_b->name);
  }
  return kind;
}


// C3 and the two runs: each arm on `ops`, the operands compared byte for byte with a copy taken
// before (`first_run`: the full comparison) after each; the layer's records are the first run's.
std::pair<ArmOutput, ArmOutput> run_both_arms(Arm& arm_a, Arm& arm_b, const LayerOperands& ops, bool first_run,
                                              int threads, PhaseSeconds& seconds, LayerRun& run,
                                              LayerVerification& layer) {
  const OperandSnapshot snapshot = timed(seconds, "operand snapshot (C3)",
                                         [&] { return OperandSnapshot(ops, first_run, threads); });
  const auto changed = [&] {
    return timed(seconds, "operand snapshot (C3)", [&] { return snapshot.first_change(ops); });
  };
  ArmOutput out_a = timed(seconds, "arm A", [&] { return arm_a.run(ops); });
  const std::string after_a = changed();
  ArmOutput out_b = timed(seconds, "arm B", [&] { return arm_b.run(ops); });
  const std::string after_b = after_a.empty() ? changed() : after_a;
  run.operands_identical = after_a.empty() && after_b.empty();
  if (!after_a.empty()) run.operands_note = "arm A modified its operands: " + after_a;
  if (after_a.empty() && !after_b.empty()) run.operands_note = "arm B modified its operands: " + after_b;
  if (layer.record_a.arm.empty()) layer.record_a = out_a.record;
  if (layer.record_b.arm.empty()) layer.record_b = out_b.record;
  for (const ArmOutput* out : {&out_a, &out_b}) {
    QC_INPUT(static_cast<int64_t>(out->y.size()) == ops.m * ops.n,
             "arm {} returned {} outputs for layer `{}`, expected {}x{}", out->record.arm, out->y.size(), ops.name,
             ops.m, ops.n);
    QC_INPUT(!out->acc || static_cast<int64_t>(out->acc->size()) == ops.m * ops.n,
             "arm {} returned an accumulator of {} elements for layer `{}`, expected {}x{}", out->record.arm,
             out->acc->size(), ops.name, ops.m, ops.n);
  }
  return {std::move(out_a), std::move(out_b)};
}

// What a run's element pass needs, moved onto the task that runs it beside the next run's arms.
struct ElementPassJob {
  const VerifyOptions* options;
  bool safe;
  const Epilogue *formula_a, *formula_b;
  std::shared_ptr<const ExactAccumulators> exact;
  LayerOperands ops;
  std::string label;
  ScaleMode mode;
  bool block;
  std::shared_ptr<Fp8LayerReference> fp8_ref;
  std::shared_ptr<Fp8RunReference> fp8_run;
  std::shared_ptr<Fp8AccumulatorCheck> fp8_acc;
  ArmOutput a, b;
};

// The element pass of one run (formulas, A vs B, C2, C4-C6) and its seconds.
std::pair<ElementPass, double> run_element_pass(ElementPassJob& j) {
  if (j.fp8_run && j.block) {  // the block models of this run's scales, and C5's jurisdiction
    const int64_t excluded = block_run_reference(*j.fp8_run, *j.fp8_ref, j.ops, j.mode, {&j.a, &j.b});
    const auto t0 = std::chrono::steady_clock::now();
    ElementPass pass = element_pass(ElementContext{.ops = j.ops,
                                                   .label = j.label,
                                                   .mode = j.mode,
                                                   .safe = false,
                                                   .exact = *j.exact,
                                                   .out = {&j.a, &j.b},
                                                   .formula = {nullptr, nullptr},
                                                   .compare = j.options->compare,
                                                   .threads = j.options->threads,
                                                   .fp8 = j.fp8_run.get()});
    pass.tally.pow2_excluded = excluded;
    return std::pair(std::move(pass), seconds_since(t0));
  }
  if (j.fp8_run) {  // the claimed models' accumulators (timed as the reference's phase, not this one)
    j.fp8_ref->wait_accumulators();
    for (int s = 0; s < 2; ++s) {
      if (j.fp8_ref->has_acc[s]) {  // the arms' exposed accumulators and the models their calls claimed
        j.fp8_run->arm_acc[s] = &j.fp8_ref->arm_acc[s];
        j.fp8_run->acc_model[s] = j.fp8_ref->acc_model[s];
      }
      if (j.fp8_run->modelled[s]) j.fp8_run->d[s] = j.fp8_ref->model(j.fp8_run->model[s]);
      if (j.fp8_run->arm_acc[s] != nullptr) j.fp8_run->acc_d[s] = j.fp8_ref->model(j.fp8_run->acc_model[s]);
    }
  }
  const auto t0 = std::chrono::steady_clock::now();
  if (j.fp8_run) {  // the exposed accumulators against their models: once per (layer, rows), by its first pass
    std::call_once(j.fp8_acc->once, [&] { j.fp8_acc->tally = fp8_accumulator_tally(*j.fp8_run, j.ops, j.options->threads); });
    j.fp8_run->acc_tally = &j.fp8_acc->tally;
  }
  ElementPass pass = element_pass(ElementContext{.ops = j.ops,
                                                 .label = j.label,
                                                 .mode = j.mode,
                                                 .safe = j.safe,
                                                 .exact = *j.exact,
                                                 .out = {&j.a, &j.b},
                                                 .formula = {j.formula_a, j.formula_b},
                                                 .compare = j.options->compare,
                                                 .threads = j.options->threads,
                                                 .fp8 = j.fp8_run.get()});
  return std::pair(std::move(pass), seconds_since(t0));
}

// The layers a selection runs: its own list, or every layer.
std::vector<size_t> selected_layers(const VerifySelection& selection, size_t layer_count) {
  if (selection.only) return selection.layers;
  std::vector<size_t> all(layer_count);
  for (size_t i = 0; i < layer_count; ++i) all[i] = i;
  return all;
}

// QC_INPUT unless the pinned prediction of layer `li` is of the same layer as the operands'.
void check_prediction_of(size_t li, const LayerPrediction& pred, const LayerOperands& full) {
  QC_INPUT(pred.name == full.name && pred.stats.shape.m == full.m && pred.stats.shape.n == full.n &&
               pred.stats.shape.k == full.k,
           "predictions layer {} is `{}` {}x{}x{}, operands layer is `{}` {}x{}x{}: expected the same layers in order", li,
           pred.name, pred.stats.shape.m, pred.stats.shape.n, pred.stats.shape.k, full.name, full.m, full.n, full.k);
}

// C2 part one: the pinned predictions must be the exact statistics of these operands (those computed
// beside the arms, else now), and their `safe` verdicts must follow from them. INT8 only: C2 does not
// apply to a floating-point accumulation.
void check_pinned_statistics(LayerVerification& layer, const LayerOperands& full, const LayerPrediction& pred,
                             std::future<RangeStats>& stats, PhaseSeconds& seconds, int threads) {
  const RangeStats fresh = timed(seconds, "waiting for range statistics (C2)", [&] {
    return stats.valid() ? stats.get() : exact_range_stats(full.a_q.data(), full.w_q.data(), {full.m, full.n, full.k}, threads);
  });
  layer.stale = c2_stale_prediction(full.name, pred, fresh);
}



// What the host pipeline's runs of one (layer, rows) share: an FP8 pair's reference (the declared models,
// the arms' exposed accumulators, on the codes; no integer reference) and the check of those accumulators
// (they do not depend on the scale regime: the first run's element pass compares them with their models,
// the others take its counts: the same JSON, a third of the work); an INT8 pair's exact accumulators, and
// when these are the layer's rows C2's statistics computed from them beside the arms (into `stats`).
struct HostRowsReference {
  std::shared_ptr<Fp8LayerReference> fp8_ref;
  std::shared_ptr<Fp8AccumulatorCheck> fp8_acc;
  std::shared_ptr<const ExactAccumulators> exact;
};
HostRowsReference host_rows_reference(Arm* arms[2], const ArmInfo infos[2], const LayerOperands& rows, bool fp8,
                                      bool layer_rows, VerifyReference reference, int threads, PhaseSeconds& seconds,
                                      std::future<RangeStats>& stats) {
  HostRowsReference r;
  if (fp8) {
    r.fp8_ref = fp8_layer_reference(arms, infos, rows, reference, threads);
    r.fp8_acc = std::make_shared<Fp8AccumulatorCheck>();
    r.exact = std::make_shared<const ExactAccumulators>();
    return r;
  }
  r.exact = std::make_shared<const ExactAccumulators>(
      timed(seconds, "reference accumulation", [&] { return exact_acc(rows, reference, threads); }));
  if (layer_rows) {
    stats = std::async(std::launch::async, [exact = r.exact, rows, threads] {
      return range_stats(rows.a_q.data(), rows.w_q.data(), {rows.m, rows.n, rows.k}, *exact, threads);
    });
  }
  return r;
}

// Verify's device pipeline where it takes the pair (docs/gpu.md, "verify on the device"), set up, and the
// reference described as it; null where it does not.
std::unique_ptr<ResidentVerifier> device_pipeline(Arm& a, Arm& b, const Epilogue* formula_a, const Epilogue* formula_b,
                                                  VerifyReference reference, const VerifyOptions& options,
                                                  VerifiedLayers& result) {
  if (!ResidentVerifier::refusal(a.info(), b.info(), formula_a, formula_b, reference).empty()) return nullptr;
  auto resident = timed(result.seconds, "the device pipeline set up (the CUDA context, streams)",
                        [&] { return std::make_unique<ResidentVerifier>(a, b, formula_a, formula_b, options); });
  result.reference = resident->reference_description();
  return resident;
}

// The selected layers in order, each loaded once: the device pipeline asks for the next one ahead (to
// upload it beside the current one's runs), and takes it from here when its turn comes. With `beside`
// (the default; QC_VERIFY_OVERLAP=0 turns it off) the one after that is loaded on a thread of its own
// meanwhile (mapping a shard, checking a layer's scales: ~1.3 ms a layer of a 70B model on the H100
// machine, which the run loop's thread would otherwise spend between the runs); a layer that fails to
// load fails where it did when loaded in turn: when it is asked for.
struct LayerSequence {
  const LayerLoader& load;
  const std::vector<size_t>& selected;
  PhaseSeconds& seconds;
  bool load_beside = false;
  std::optional<std::pair<size_t, LayerOperands>> ahead = std::nullopt;
  std::optional<std::pair<size_t, std::future<LayerOperands>>> beside = std::nullopt;

  LayerOperands take(size_t si) {
    std::optional<std::pair<size_t, LayerOperands>> held = std::exchange(ahead, std::nullopt);
    if (held && held->first == selected[si]) return std::move(held->second);
    return timed(seconds, "layer load", [&] { return load(selected[si]); });
  }
  const LayerOperands* next(size_t si) {
    if (si + 1 >= selected.size()) return nullptr;
    const size_t li = selected[si + 1];
    std::optional<std::pair<size_t, std::future<LayerOperands>>> loading = std::exchange(beside, std::nullopt);
    LayerOperands l = loading && loading->first == li
                          ? timed(seconds, "layer load (the wait for the one loaded beside)", [&] { return loading->second.get(); })
                          : timed(seconds, "layer load", [&] { return load(li); });
    if (load_beside && si + 2 < selected.size()) {
      beside.emplace(selected[si + 2], std::async(std::launch::async, [this, after = selected[si + 2]] { return load(after); }));
    }
    ahead.emplace(li, std::move(l));
    return &ahead->second;
  }
};

}  // namespace

std::string device_pipeline_refusal(Arm& a, Arm& b, const VerifyOptions& options) {
  const ArmInfo info_a = a.info(), info_b = b.info();
  return ResidentVerifier::refusal(info_a, info_b, verify_declared_formula(info_a), verify_declared_formula(info_b),
                                   resolve_reference(options.reference));
}

VerifiedLayers verify_layer_runs(Arm& arm_a, Arm& arm_b, size_t layer_count, const LayerLoader& load,
                                 const PredictionSet& predictions, const VerifyOptions& options,
                                 const VerifySelection& selection,
                                 const std::function<void(size_t, size_t, const std::string&)>& progress) {
  const auto started = std::chrono::steady_clock::now();
  VerifiedLayers result;
  const ArmInfo info_a = arm_a.info(), info_b = arm_b.info();
  const Epilogue* formula_a = verify_declared_formula(info_a);
  const Epilogue* formula_b = verify_declared_formula(info_b);
  const VerifyReference reference = resolve_reference(options.reference);
  result.reference = reference_description(reference);
  Arm* arms[2] = {&arm_a, &arm_b};
  const ArmInfo infos[2] = {info_a, info_b};
  const bool python = options.language == UserLanguage::python;
  const ArmKind kind = check_pair_format(info_a, info_b, formula_a, formula_b, reference, python, result.reference);
  const bool fp8 = kind != ArmKind::int8, block = kind == ArmKind::fp8_block;
  std::unique_ptr<ResidentVerifier> resident = device_pipeline(arm_a, arm_b, formula_a, formula_b, reference, options, result);
  QC_INPUT(predictions.layers.size() == layer_count,
           "predictions cover {} layers but the operands have {}: expected the predictions made from these operands",
           predictions.layers.size(), layer_count);
  const std::vector<size_t> selected = selected_layers(selection, layer_count);

  const size_t m_count = options.m_sweep.empty() ? 1 : options.m_sweep.size();
  const size_t total_steps = selected.size() * m_count * options.modes.size();
  size_t step = 0;
  // The run whose element pass is in flight, and how it is folded into the result once done.
  struct PendingRun {
    LayerRun run;
    size_t layer = 0;
    bool last_of_layer = false, a_has_acc = false, b_has_acc = false;  // block pairs: the fp32 D (`ArmOutput::d`)
    std::future<std::pair<ElementPass, double>> pass;
    std::shared_ptr<Fp8LayerReference> fp8;  // FP8 pairs: the models' reference of this (layer, rows)
  };
  std::optional<PendingRun> pending;
  // A finished run joins its layer; the layer's last run hands the layer to `selection.done`.
  const auto store = [&](LayerRun run) {
    LayerVerification& layer = result.layers[pending->layer];
    layer.runs.push_back(std::move(run));
    if (pending->last_of_layer && selection.done) {
      timed(result.seconds, "layer results handed on (--resume, the ranks' merge)",
            [&] { selection.done(pending->layer, layer); });
    }
    pending.reset();
  };
  const auto finish_pending = [&] {
    if (!pending) return;
    auto [pass, seconds] = timed(result.seconds, "waiting for element passes", [&] { return pending->pass.get(); });
    add_seconds(result.seconds, "element pass (formulas, A vs B, C2, C4-C6; beside the arms)", seconds);
    if (pending->fp8) {
      pending->fp8->take_accumulator_seconds(result.seconds);  // waited for by the pass
      add_seconds(result.seconds,
                  reference == VerifyReference::gpu ? "reference accumulation (declared models; beside the arms)"
                                                    : "reference accumulation (declared models)",
                  pending->fp8->take_seconds());
    }
    LayerRun& run = pending->run;
    run.cmp = std::move(pass.cmp);
    fold_tally(run, pass.tally, pending->a_has_acc, pending->b_has_acc, pending->fp8.get(), formula_a, formula_b);
    store(std::move(run));
  };

  LayerSequence sequence{load, selected, result.seconds, resident && ResidentVerifier::overlaps_layers()};
  for (size_t si = 0; si < selected.size(); ++si) {
    const size_t li = selected[si];
    QC_CHECK(li < layer_count, "verify: layer index {} of {}", li, layer_count);
    if (selection.started) selection.started(li);
    const LayerOperands full = sequence.take(si);
    const LayerPrediction& pred = predictions.layers[li];
    LayerVerification& layer = result.layers[li];
    layer.name = full.name;
    check_prediction_of(li, pred, full);
    if (resident) finish_pending();
    // The device pipeline hands the layer on once its runs are whole (a layer's host parts finish beside
    // the next layer's runs).
    const auto hand_on = [&result, &selection, li, &layer] {
      if (selection.done) timed(result.seconds, "layer results handed on (--resume, the ranks' merge)", [&] { selection.done(li, layer); });
    };
    if (resident && resident->verify_layer(
                        full, sequence.next(si), pred, python, layer, result.seconds,
                        [&](const std::string& item) {
                          if (progress) progress(++step, total_steps, item);
                        },
                        hand_on)) {
      continue;
    }
    const std::vector<int64_t> ms = options.m_sweep.empty() ? std::vector<int64_t>{full.m} : options.m_sweep;
    std::future<RangeStats> stats;  // C2: the exact statistics of the whole layer, computed beside the arms
    for (size_t msi = 0; msi < ms.size(); ++msi) {
      const int64_t m = ms[msi];
      const LayerOperands rows = first_rows(full, m, python ? "m_sweep" : "--m-sweep");
      const auto [fp8_ref, fp8_acc, exact] =
          host_rows_reference(arms, infos, rows, fp8, m == full.m, reference, options.threads, result.seconds, stats);
      for (size_t mi = 0; mi < options.modes.size(); ++mi) {
        const ScaleMode mode = options.modes[mi];
        const LayerOperands ops = apply_scale_mode(rows, mode);
        if (progress) progress(++step, total_steps, fmt::format("{} m={} {}", full.name, m, scale_mode_name(mode)));
        LayerRun run = new_run(full.name, m, mode, ops, pred, kind);

        // C3: what each arm receives, compared byte for byte with a copy after each run.
        auto [out_a, out_b] = run_both_arms(arm_a, arm_b, ops, m == ms.front() && mi == 0, options.threads,
                                            result.seconds, run, layer);
        if (mode != ScaleMode::real) run.pow2_not_commutable = c5_not_commutable(formula_a, formula_b, ops.has_bias());
        const std::shared_ptr<Fp8RunReference> fp8_run = fp8 ? claim_models(run, infos, out_a.record, out_b.record) : nullptr;
        // The element pass runs on the host while the next run's arms run (on a GPU the two overlap).
        finish_pending();
        const bool last_of_layer = msi + 1 == ms.size() && mi + 1 == options.modes.size();
        const bool a_acc = block ? out_a.d.has_value() : out_a.acc.has_value();
        const bool b_acc = block ? out_b.d.has_value() : out_b.acc.has_value();
        PendingRun next{std::move(run), li, last_of_layer, a_acc, b_acc, {}, fp8_ref};
        const std::string label = m == full.m ? ops.name : fmt::format("{}@M={}", ops.name, m);
        next.pass = std::async(std::launch::async,
                               [job = ElementPassJob{&options, pred.safe, formula_a, formula_b, exact, ops, label, mode,
                                                     block, fp8_ref, fp8_run, fp8_acc, std::move(out_a),
                                                     std::move(out_b)}]() mutable { return run_element_pass(job); });
        pending = std::move(next);
      }
    }
    if (!fp8) check_pinned_statistics(layer, full, pred, stats, result.seconds, options.threads);
  }

  if (resident) resident->finish(result.seconds);
  finish_pending();
  result.wall_seconds = seconds_since(started);
  return result;
}

VerifyResult verify_layers(Arm& arm_a, Arm& arm_b, const std::vector<LayerOperands>& layers,
                           const PredictionSet& predictions, const VerifyOptions& options,
                           const std::function<void(size_t, size_t, const std::string&)>& progress) {
  VerifiedLayers done = verify_layer_runs(
      arm_a, arm_b, layers.size(), [&](size_t i) { return layers[i]; }, predictions, options, {}, progress);
  std::vector<LayerVerification> all;
  for (auto& [index, layer] : done.layers) all.push_back(std::move(layer));
  VerifyResult result = merge_verifications(arm_a.info(), arm_b.info(), done.reference, std::move(all), predictions, options);
  result.seconds = std::move(done.seconds);
  result.wall_seconds = done.wall_seconds;
  return result;
}

namespace {

// The stage an FP8 verdict names: the first a check's evidence names, in the data flow's order (C3:
// the operands; C4: an arm off its declared model, at the accumulation model or the epilogue), else
// the one the first failing check names. None when every check passed.
void fp8_stage(VerifyResult& r) {
  for (const LayerCheck& check : layer_checks()) {
    if (!check.evidence_stage) continue;
    if (std::optional<StageFinding> f = check.evidence_stage(r)) {
      r.stage = f->stage;
      r.stage_detail = std::move(f->detail);
      return;
    }
  }
  for (const CheckResult& c : r.checks) {
    if (c.verdict != Verdict::fail) continue;
    const LayerCheck& check = layer_check(c.id);
    StageFinding f = check.failure_stage ? check.failure_stage(c) : failed_in(c, Stage::accumulation_model);
    r.stage = f.stage;
    r.stage_detail = std::move(f.detail);
    return;
  }
}

}  // namespace

VerifyResult merge_verifications(const ArmInfo& arm_a, const ArmInfo& arm_b, const std::string& reference,
                                 std::vector<LayerVerification> layers, const PredictionSet& predictions,
                                 const VerifyOptions& options) {
  QC_CHECK(layers.size() == predictions.layers.size(), "merge_verifications: {} layers, {} predictions", layers.size(),
           predictions.layers.size());
  VerifyResult result;
  result.arm_a = arm_a;
  result.arm_b = arm_b;
  result.reference = reference;
  std::vector<std::string> stale;  // C2: pinned predictions that are not the operands' exact statistics
  for (LayerVerification& layer : layers) {
    QC_CHECK(!layer.runs.empty(), "merge_verifications: layer `{}` has no runs", layer.name);
    if (result.record_a.arm.empty()) result.record_a = layer.record_a;
    if (result.record_b.arm.empty()) result.record_b = layer.record_b;
    if (!layer.stale.empty()) stale.push_back(layer.stale);
    // C6's totals count the real-scale runs of the largest row count of each layer.
    int64_t m_total = 0;
    for (const LayerRun& r : layer.runs) m_total = std::max(m_total, r.m);
    for (LayerRun& r : layer.runs) {
      if (r.mode == ScaleMode::real && r.m == m_total) result.total_real.merge(r.cmp, options.compare.max_listed);
      result.runs.push_back(std::move(r));
    }
  }

  // ---- the checks over all runs: the registry's, each decided in its own file ----
  const LayerCheckInputs in{result.runs, predictions, stale, result.total_real, options};
  for (const LayerCheck& check : layer_checks()) result.checks.push_back(check.decide(in));
  if (!result.runs.empty() && result.runs.front().fp8) {
    fp8_stage(result);
    // Every failing check points to the stage the FP8 verdict names, with the arm and where.
    for (CheckResult& c : result.checks) {
      if (c.verdict == Verdict::fail && result.stage) c.points_to = result.stage_sentence();
    }
  }
  result.interchangeability = decide_interchangeability(facts_from_verify(result, options.language));
  return result;
}

}  // namespace qc
