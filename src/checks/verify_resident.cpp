// verify's device pipeline, the host side (verify_resident.hpp).
//
// Per layer: the operands go up once (GpuVerifyLayer::load), with an INT8 layer's exact accumulators and
// C2's statistics computed there. Per (layer, rows) of an FP8 pair: the arms' exposed fp32 accumulators,
// compared there with the models their calls claim. Per run (rows, scale regime): the scales go up, each
// arm runs on the resident operands into buffers the pipeline owns, C3 compares every operand with its
// copy on the device after each arm, and the element pass counts there (an FP8 pair's declared models
// evaluated there once per layer). The counts come back with per-row counts; the host then brings back
// the rows that hold the first elements of each list (and one sampled row), runs its own element pass
// over them (element_pass.cpp: the same steps, the host compilation), takes the lists from it, and
// requires its counts to equal the device's on every such row.
#include "checks/verify_resident.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstddef>
#include <functional>
#include <future>
#include <utility>

#include "accum/fp8_model.hpp"
#include "checks/c2_range.hpp"
#include "checks/c3_shared_operands.hpp"
#include "checks/c5_pow2.hpp"
#include "checks/verify_internal.hpp"
#include "core/env_setting.hpp"

namespace qc {

namespace ck = cuda_kernels;

struct ResidentVerifier::Fp8Rows {
  Fp8LayerReference ref;  // has_acc, acc_note, acc_model: what fold_tally reads
  ElementTally acc;       // the exposed accumulators against their models (counts and the first ten)
};

std::string ResidentVerifier::refusal(const ArmInfo& a, const ArmInfo& b, const Epilogue* formula_a,
                                      const Epilogue* formula_b, VerifyReference reference) {
  if (reference != VerifyReference::gpu) return "the reference is on the host";
  for (const ArmInfo* i : {&a, &b}) {
    if (!i->resident) return fmt::format("arm {} does not run on device-resident operands", i->label);
    if (i->kind() == ArmKind::fp8_block) return fmt::format("arm {} is a block-scaled FP8 arm", i->label);
  }
  for (const Epilogue* e : {formula_a, formula_b}) {
    if (e != nullptr && !gpu_pass_takes(*e)) return fmt::format("formula `{}` has no device instance", e->name);
  }
  return "";
}

ResidentVerifier::ResidentVerifier(Arm& a, Arm& b, const Epilogue* formula_a, const Epilogue* formula_b,
                                   const VerifyOptions& options)
    : arms_{&a, &b}, infos_{a.info(), b.info()}, formula_{formula_a, formula_b}, options_(options),
      fp8_(infos_[0].fp8()), gpu_(std::make_unique<GpuVerifyLayer>()) {
  for (const ArmInfo& i : infos_) {  // FP8: the declared models, evaluated on each next layer as it is uploaded
    if (!fp8_ || i.accumulation_model.empty()) continue;
    if (std::none_of(declared_.begin(), declared_.end(), [&](const NamedAccumModel& m) { return m.name == i.accumulation_model; })) {
      declared_.push_back(fp8_accumulation_model(i.accumulation_model));
    }
  }
}

ResidentVerifier::~ResidentVerifier() = default;

std::string ResidentVerifier::reference_description() const {
  const std::string where =
      "operands resident on " + cuda_device_description() +
      ", uploaded once per layer; the declared formulas (the device compilation of the formula text), the comparison "
      "and the operand checks on the device; the rows holding the listed elements and one sampled row per run "
      "re-checked by the host's element pass (host compilation), its counts equal to the device's";
  if (!fp8_) return "exact accumulation on the CUDA cores (integer multiply-adds, never the tensor cores); " + where;
  return fmt::format("the declared accumulation models (A: {}, B: {}; on a run whose record names another, that one) "
                     "evaluated on the layer's FP8 codes on the CUDA cores (the models' CUDA evaluation); {}",
                     infos_[0].accumulation_model.empty() ? "none declared, unmodelled" : infos_[0].accumulation_model,
                     infos_[1].accumulation_model.empty() ? "none declared, unmodelled" : infos_[1].accumulation_model,
                     where);
}

namespace {

template <class Fn>
auto timed(PhaseSeconds& seconds, std::string_view phase, Fn&& fn) {
  const auto t0 = std::chrono::steady_clock::now();
  auto r = fn();
  add_seconds(seconds, phase, seconds_since(t0));
  return r;
}

// The rows the host lists from: for each list (a row counter and its length), its rows in order up to the
// one that fills it (or all that hold any), and `sample`; ascending, once each.
std::vector<int64_t> listing_rows(const GpuPassCounts& c, int64_t m, const std::vector<std::pair<int, size_t>>& lists,
                                  int64_t sample) {
  std::vector<char> want(static_cast<size_t>(m), 0);
  for (const auto& [counter, limit] : lists) {
    size_t listed = 0;
    for (int64_t r = 0; r < m && listed < limit; ++r) {
      const uint32_t n = c.rows[static_cast<size_t>(r * ck::kRowCounters + counter)];
      if (n == 0) continue;
      want[static_cast<size_t>(r)] = 1;
      listed += n;
    }
  }
  if (sample >= 0) want[static_cast<size_t>(sample)] = 1;
  std::vector<int64_t> rows;
  for (int64_t r = 0; r < m; ++r) {
    if (want[static_cast<size_t>(r)]) rows.push_back(r);
  }
  return rows;
}

// The device's counts of `rows` against the host's pass over them (`host`, by row counter; -1: not
// compared): an internal error naming both where they differ.
void require_equal_rows(const GpuPassCounts& c, const std::vector<int64_t>& rows, const int64_t (&host)[ck::kRowCounters],
                        const std::string& label, ScaleMode mode) {
  int64_t device[ck::kRowCounters] = {};
  for (const int64_t row : rows) {
    for (int k = 0; k < ck::kRowCounters; ++k) device[k] += c.rows[static_cast<size_t>(row * ck::kRowCounters + k)];
  }
  for (int k = 0; k < ck::kRowCounters; ++k) {
    QC_CHECK(host[k] < 0 || device[k] == host[k],
             "verify's device pipeline: layer `{}` {}: on rows {} the device's element pass counts {} (row counter {}), "
             "the host's {}: the two compilations of the pass disagree",
             label, scale_mode_name(mode), fmt::join(rows, ","), device[k], k, host[k]);
  }
}

// `ops` restricted to `rows` (their activation scales; nothing else the element pass reads is per row).
struct RowSubset {
  std::vector<float> sa;
  LayerOperands ops;
  RowSubset(const LayerOperands& full, const std::vector<int64_t>& rows) : ops(full) {
    for (const int64_t r : rows) sa.push_back(full.a_scale[static_cast<size_t>(r)]);
    ops.m = static_cast<int64_t>(rows.size());
    ops.a_q = {};
    ops.a_scale = sa;
  }
};

// The host's element pass over `rows` of a run (`ops` restricted to them), its outputs `out`, against
// `exact` (INT8) or the models of `fp8`, under the run's near-zero limit; the lists name the run's rows.
ElementPass host_rows_pass(const LayerOperands& ops, const std::vector<int64_t>& rows, const std::string& label,
                           const LayerRun& run, const ExactAccumulators& exact, const ArmOutput (&out)[2],
                           const Epilogue* const (&formula)[2], const VerifyOptions& options,
                           const GpuPassCounts& counts, const Fp8RunReference* fp8) {
  const RowSubset sub(ops, rows);
  return element_pass(ElementContext{.ops = sub.ops,
                                     .label = label,
                                     .mode = run.mode,
                                     .safe = fp8 == nullptr && run.safe,
                                     .exact = exact,
                                     .out = {&out[0], &out[1]},
                                     .formula = {formula[0], formula[1]},
                                     .compare = options.compare,
                                     .threads = 1,
                                     .fp8 = fp8,
                                     .near_zero = counts.near_zero_limit,
                                     .row_ids = rows.data()});
}

// The run's comparison and tally: the device's counts, the host's lists.
ElementPass merged_pass(const GpuPassCounts& c, int64_t total, ElementPass lists) {
  ElementPass p;
  Comparison& x = p.cmp;
  const auto n = [&](int i) { return c.count[static_cast<size_t>(i)]; };
  x.total = total;
  x.bitwise_diff = n(ck::kBitwiseDiff), x.signed_zero_diff = n(ck::kSignedZeroDiff);
  x.nan_a = n(ck::kNanA), x.nan_b = n(ck::kNanB), x.inf_a = n(ck::kInfA), x.inf_b = n(ck::kInfB);
  x.subnormal_a = n(ck::kSubnormalA), x.subnormal_b = n(ck::kSubnormalB);
  x.nonfinite_pairs = n(ck::kNonfinitePairs), x.nonfinite_diff = n(ck::kNonfiniteDiff);
  x.finite_pairs = n(ck::kFinitePairs);
  x.ulp_histogram = c.ulp_histogram;
  x.max_ulp = c.max_ulp, x.max_rel = c.max_rel;
  x.near_zero = n(ck::kNearZero), x.near_zero_diff = n(ck::kNearZeroDiff), x.near_zero_max_abs = c.near_zero_max_abs;
  x.first = std::move(lists.cmp.first);
  ElementTally& t = p.tally;
  for (int s = 0; s < 2; ++s) {
    t.acc_mismatch[s] = n(ck::kAccMismatchA + s);
    t.formula_mismatch[s] = n(ck::kFormulaMismatchA + s);
  }
  t.safe_contradicted = n(ck::kSafeContradicted);
  t.predicted_diff = n(ck::kPredictedDiff), t.predicted_vs_observed = n(ck::kPredictedVsObserved);
  t.pow2_excluded = n(ck::kPow2Excluded), t.pow2_violations = n(ck::kPow2Violations);
  t.model_acc_diff = n(ck::kModelAccDiff);
  t.acc_first = std::move(lists.tally.acc_first);
  t.pow2_first = std::move(lists.tally.pow2_first);
  t.model_first = std::move(lists.tally.model_first);
  return p;
}

}  // namespace

// Each arm on the run's resident operands, then C3 against the copies (its result comes with the pass).
void ResidentVerifier::arms_run(const LayerOperands& ops, LayerVerification& layer, PhaseSeconds& seconds,
                                RunRecord (&records)[2]) {
  GpuVerifyLayer& gpu = *gpu_;
  const ResidentOperands on = timed(seconds, "the run's scales to the device", [&] { return gpu.operands(ops); });
  for (int s = 0; s < 2; ++s) {
    const ResidentOutputs out = gpu.outputs(s, !fp8_ && infos_[s].exposes_accumulator);
    records[s] = timed(seconds, s ? "arm B (launched on resident operands)" : "arm A (launched on resident operands)",
                       [&] { return arms_[s]->run_resident(on, out); });
    RunRecord& kept = s ? layer.record_b : layer.record_a;
    if (kept.arm.empty()) kept = records[s];
    gpu.check_operands(s);
  }
}

void ResidentVerifier::take_operand_check(const GpuPassCounts& counts, const LayerOperands& ops, LayerRun& run) const {
  for (int s = 0; s < 2 && run.operands_identical; ++s) {
    const std::optional<OperandChange>& c = counts.changed[s];
    if (!c) continue;
    run.operands_identical = false;
    run.operands_note =
        fmt::format("arm {} modified its operands: {}", s ? "B" : "A",
                    OperandSnapshot::describe_change(ops, c->piece, static_cast<size_t>(c->element),
                                                     reinterpret_cast<const std::byte*>(c->was.data()),
                                                     reinterpret_cast<const std::byte*>(c->now.data())));
  }
}

namespace {

// The host's part of an INT8 run, off the run loop's thread: its element pass over the listed rows (the
// lists, and its counts against the device's), merged with the device's counts, folded into the run.
LayerRun int8_host_part(LayerRun run, const LayerOperands& ops, const std::string& label, const GpuPassCounts& counts,
                        const std::vector<int64_t>& rows, const GpuRows& back, const Epilogue* const (&formula)[2],
                        const bool (&acc)[2], const VerifyOptions& options) {
  ExactAccumulators exact;
  exact.i32 = back.exact;
  ArmOutput out[2];
  for (int s = 0; s < 2; ++s) {
    out[s].y = back.y[s];
    if (!back.acc[s].empty()) out[s].acc = back.acc[s];
  }
  ElementPass host = host_rows_pass(ops, rows, label, run, exact, out, formula, options, counts, nullptr);
  const ElementTally& t = host.tally;
  require_equal_rows(counts, rows,
                     {host.cmp.bitwise_diff, t.acc_mismatch[0] + t.acc_mismatch[1], t.pow2_violations,
                      t.formula_mismatch[0] + t.formula_mismatch[1], t.predicted_diff, t.predicted_vs_observed},
                     label, run.mode);
  const ElementPass pass = merged_pass(counts, ops.m * ops.n, std::move(host));
  run.cmp = pass.cmp;
  fold_tally(run, pass.tally, acc[0], acc[1], nullptr, formula[0], formula[1]);
  return run;
}

}  // namespace

ResidentVerifier::PendingRun ResidentVerifier::int8_run(const LayerOperands& ops, const std::string& label, LayerRun run,
                                                        LayerVerification& layer, PhaseSeconds& seconds) {
  GpuVerifyLayer& gpu = *gpu_;
  RunRecord records[2];
  arms_run(ops, layer, seconds, records);
  if (run.mode != ScaleMode::real) run.pow2_not_commutable = c5_not_commutable(formula_[0], formula_[1], ops.has_bias());
  GpuPassSpec spec;
  for (int s = 0; s < 2; ++s) spec.formula[s] = formula_[s], spec.acc[s] = infos_[s].exposes_accumulator;
  spec.safe = run.safe;
  spec.pow2 = run.mode != ScaleMode::real;
  spec.near_zero_fraction = options_.compare.near_zero_fraction;
  // The run's one wait: the arms' kernels, C3 and the element pass finish in it.
  GpuPassCounts counts =
      timed(seconds, "the arms' kernels, C3 and the element pass (on the device)", [&] { return gpu.pass(spec); });
  take_operand_check(counts, ops, run);
  const size_t listed = options_.compare.max_listed;
  std::vector<int64_t> rows =
      listing_rows(counts, ops.m, {{ck::kRowDiff, listed}, {ck::kRowAcc, 10}, {ck::kRowPow2, listed}}, sample_row(ops.m));
  // The rows come back behind the run, beside the next one; the host's part waits for them.
  std::function<GpuRows()> fetch = timed(seconds, "the listed rows asked for (they come back beside the next run)",
                                         [&] { return gpu.rows(rows, spec.acc[0], spec.acc[1]); });
  const bool acc[2] = {spec.acc[0], spec.acc[1]};
  return std::async(std::launch::async, [this, run = std::move(run), ops, label, counts = std::move(counts),
                                         rows = std::move(rows), fetch = std::move(fetch), acc0 = acc[0], acc1 = acc[1]]() mutable {
    const auto t0 = std::chrono::steady_clock::now();
    const GpuRows back = std::exchange(fetch, nullptr)();  // lets its landing place go for the runs after
    const bool acc2[2] = {acc0, acc1};
    LayerRun done = int8_host_part(std::move(run), ops, label, counts, rows, back, formula_, acc2, options_);
    return std::pair(std::move(done), seconds_since(t0));
  });
}

// The arms' exposed fp32 accumulators of these rows (`accumulate_resident`), each compared on the device
// with the model its call claimed, the first ten listed from the rows that hold them (the host's steps,
// `fp8_accumulator_tally`). The notes and claims as the host's pipeline makes them (fp8_reference.cpp).
void ResidentVerifier::fp8_accumulators(const LayerOperands& rows, Fp8Rows& shared, PhaseSeconds& seconds) {
  GpuVerifyLayer& gpu = *gpu_;
  Fp8LayerReference& ref = shared.ref;
  const Fp8LayerCodes codes = fp8_layer_codes("verify (the accumulation models' reference)", rows);
  const ResidentOperands on = gpu.operands(rows);
  const float* want[2] = {nullptr, nullptr};
  for (int s = 0; s < 2; ++s) {
    if (infos_[s].accumulation_model.empty()) {
      ref.acc_note[s] = "declares no accumulation model: no model to compare its accumulator with";
      continue;
    }
    if (codes.a_format != Fp8Format::e4m3 || codes.w_format != Fp8Format::e4m3) {
      ref.acc_note[s] = fmt::format("the fp32 accumulator interface takes e4m3 x e4m3 codes; layer `{}` is {}", rows.name,
                                    codes.description);
      continue;
    }
    RunRecord record;
    try {
      record = timed(seconds, fmt::format("arm {} fp32 accumulator (launched on resident operands)", s ? "B" : "A"),
                     [&] { return arms_[s]->accumulate_resident(on, gpu.accumulator(s)); });
    } catch (const Error& e) {
      ref.acc_note[s] = fmt::format("exposes no fp32 accumulator: {}", e.what());
      continue;
    }
    ref.acc_model[s] = claimed_model(record.extra, infos_[s].accumulation_model);
    if (ref.acc_model[s].empty()) {
      ref.acc_note[s] = "the accumulator call's record refused the model: " + accumulation_model_refusal(record.extra);
      continue;
    }
    ref.has_acc[s] = true;
    want[s] = gpu.model(ref.acc_model[s], fp8_accumulation_model(ref.acc_model[s]).model);
  }
  if (!ref.has_acc[0] && !ref.has_acc[1]) return;
  const GpuPassCounts counts = timed(seconds, "the exposed accumulators against their models (on the device)",
                                     [&] { return gpu.check_accumulators(want); });
  const std::vector<int64_t> listed = listing_rows(counts, rows.m, {{ck::kRowAcc, 10}}, sample_row(rows.m));
  const float* f32[6] = {ref.has_acc[0] ? gpu.accumulator_of(0) : nullptr, ref.has_acc[1] ? gpu.accumulator_of(1) : nullptr,
                         want[0], want[1], nullptr, nullptr};
  const GpuRows back = gpu.rows_fp8(listed, f32, /*outputs=*/false)();
  const RowSubset sub(rows, listed);
  Fp8RunReference f;
  f.row_ids = listed.data();
  for (int s = 0; s < 2; ++s) {
    if (!ref.has_acc[s]) continue;
    f.arm_acc[s] = &back.f32[s];
    f.acc_d[s] = &back.f32[2 + s];
    f.acc_model[s] = ref.acc_model[s];
  }
  shared.acc = fp8_accumulator_tally(f, sub.ops, 1);
  require_equal_rows(counts, listed, {-1, shared.acc.acc_mismatch[0] + shared.acc.acc_mismatch[1], -1, -1, -1, -1},
                     rows.name, ScaleMode::real);
  shared.acc.acc_mismatch[0] = counts.count[ck::kAccMismatchA];
  shared.acc.acc_mismatch[1] = counts.count[ck::kAccMismatchB];
}

namespace {

// The host's part of an FP8 run, off the run loop's thread (as `int8_host_part`): the claimed models'
// accumulators and the arms' exposed ones over the listed rows stand in for the whole layer's.
LayerRun fp8_host_part(LayerRun run, const LayerOperands& ops, const std::string& label, const GpuPassCounts& counts,
                       const std::vector<int64_t>& rows, const GpuRows& back, Fp8RunReference& f,
                       const Fp8LayerReference& ref, const ElementTally& acc, const Epilogue* const (&formula)[2],
                       const VerifyOptions& options) {
  for (int s = 0; s < 2; ++s) {
    if (f.modelled[s]) f.d[s] = &back.f32[s];
    if (ref.has_acc[s]) f.arm_acc[s] = &back.f32[2 + s], f.acc_model[s] = ref.acc_model[s];
  }
  f.acc_tally = &acc;
  f.row_ids = rows.data();
  ArmOutput out[2];
  for (int s = 0; s < 2; ++s) out[s].y = back.y[s];
  ElementPass host = host_rows_pass(ops, rows, label, run, ExactAccumulators{}, out, formula, options, counts, &f);
  const ElementTally& t = host.tally;
  require_equal_rows(counts, rows,
                     {host.cmp.bitwise_diff, -1, t.pow2_violations, t.formula_mismatch[0] + t.formula_mismatch[1],
                      t.predicted_diff, t.predicted_vs_observed},
                     label, run.mode);
  ElementPass pass = merged_pass(counts, ops.m * ops.n, std::move(host));
  pass.tally.acc_first = acc.acc_first;
  for (int s = 0; s < 2; ++s) pass.tally.acc_mismatch[s] = acc.acc_mismatch[s];
  run.cmp = pass.cmp;
  fold_tally(run, pass.tally, false, false, &ref, formula[0], formula[1]);
  return run;
}

}  // namespace

ResidentVerifier::PendingRun ResidentVerifier::fp8_run(const LayerOperands& ops, const std::string& label, LayerRun run,
                                                       std::shared_ptr<const Fp8Rows> shared, LayerVerification& layer,
                                                       PhaseSeconds& seconds) {
  GpuVerifyLayer& gpu = *gpu_;
  RunRecord records[2];
  arms_run(ops, layer, seconds, records);
  std::shared_ptr<Fp8RunReference> claims = claim_models(run, infos_, records[0], records[1]);
  GpuFp8PassSpec spec;
  for (int s = 0; s < 2; ++s) {
    spec.formula[s] = formula_[s];
    if (claims->modelled[s]) {
      spec.d[s] = timed(seconds, "reference accumulation (declared models, on the device)",
                        [&] { return gpu.model(claims->model[s], fp8_accumulation_model(claims->model[s]).model); });
    }
  }
  spec.pow2 = run.mode != ScaleMode::real;
  spec.near_zero_fraction = options_.compare.near_zero_fraction;
  GpuPassCounts counts =
      timed(seconds, "the arms' kernels, C3 and the element pass (on the device)", [&] { return gpu.pass_fp8(spec); });
  take_operand_check(counts, ops, run);
  const size_t listed = options_.compare.max_listed;
  std::vector<int64_t> rows = listing_rows(
      counts, ops.m, {{ck::kRowDiff, listed}, {ck::kRowFormula, 10}, {ck::kRowPow2, listed}}, sample_row(ops.m));
  const Fp8LayerReference& ref = shared->ref;
  const float* f32[6] = {spec.d[0], spec.d[1], ref.has_acc[0] ? gpu.accumulator_of(0) : nullptr,
                         ref.has_acc[1] ? gpu.accumulator_of(1) : nullptr, nullptr, nullptr};
  // The rows come back behind the run, beside the next one; the host's part waits for them.
  std::function<GpuRows()> fetch = timed(seconds, "the listed rows asked for (they come back beside the next run)",
                                         [&] { return gpu.rows_fp8(rows, f32, /*outputs=*/true); });
  return std::async(std::launch::async, [this, run = std::move(run), ops, label, counts = std::move(counts),
                                         rows = std::move(rows), fetch = std::move(fetch), claims,
                                         shared = std::move(shared)]() mutable {
    const auto t0 = std::chrono::steady_clock::now();
    const GpuRows back = std::exchange(fetch, nullptr)();  // lets its landing place go for the runs after
    LayerRun done = fp8_host_part(std::move(run), ops, label, counts, rows, back, *claims, shared->ref, shared->acc,
                                  formula_, options_);
    return std::pair(std::move(done), seconds_since(t0));
  });
}

bool ResidentVerifier::verify_layer(const LayerOperands& full, const LayerOperands* next, const LayerPrediction& pred,
                                    bool python, LayerVerification& layer, PhaseSeconds& seconds,
                                    const std::function<void(const std::string&)>& step, std::function<void()> done) {
  if (!GpuVerifyLayer::refusal(full, fp8_).empty()) {
    finish(seconds);  // the layer before it is handed on before the host's pipeline runs this one
    return false;
  }
  const auto t0 = std::chrono::steady_clock::now();
  gpu_->load(full, declared_);
  if (next != nullptr) gpu_->prefetch(*next, declared_, /*only_untaken=*/overlaps_layers());
  add_seconds(seconds,
              fp8_ ? "layer upload (what was not uploaded ahead, or the wait for the upload and the models ahead)"
                   : "layer upload (what was not uploaded ahead, or the wait for the upload ahead), exact "
                     "accumulators and C2's statistics where not computed ahead",
              seconds_since(t0));
  const GpuVerifyLayer::UploadSeconds upload = gpu_->take_upload_seconds();
  if (upload.ahead > 0) add_seconds(seconds, "layer uploads ahead (beside the runs)", upload.ahead);
  if (upload.reading > 0) add_seconds(seconds, "the upload workers reading the files into pinned memory (summed over them)", upload.reading);
  if (upload.waiting > 0) add_seconds(seconds, "the upload workers waiting for a pinned slot's DMA (summed over them)", upload.waiting);
  const std::vector<int64_t> ms = options_.m_sweep.empty() ? std::vector<int64_t>{full.m} : options_.m_sweep;
  std::vector<PendingRun> unjoined;  // every run's host part, in order (joined beside the next layer's runs)
  int launched = 0;                  // FP8: the layer's runs launched, for the next layer's models (`runs_launched`)
  for (const int64_t m : ms) {
    const LayerOperands rows = first_rows(full, m, python ? "m_sweep" : "--m-sweep");
    const std::string label = m == full.m ? full.name : fmt::format("{}@M={}", full.name, m);
    // FP8: what the rows' runs share (their host parts hold it until they are done).
    const std::shared_ptr<Fp8Rows> shared = fp8_ ? std::make_shared<Fp8Rows>() : nullptr;
    if (fp8_) fp8_accumulators(rows, *shared, seconds);
    std::vector<PendingRun> pending;  // the host's parts of the runs, beside the next runs
    for (const ScaleMode mode : options_.modes) {
      const LayerOperands ops = timed(seconds, "the regime's scales (on the host)", [&] { return apply_scale_mode(rows, mode); });
      if (step) step(fmt::format("{} m={} {}", full.name, m, scale_mode_name(mode)));
      LayerRun r = new_run(full.name, m, mode, ops, pred, fp8_ ? ArmKind::fp8 : ArmKind::int8);
      pending.push_back(fp8_ ? fp8_run(ops, label, std::move(r), shared, layer, seconds)
                             : int8_run(ops, label, std::move(r), layer, seconds));
      if (fp8_) gpu_->runs_launched(++launched);
    }
    if (overlaps_layers() && (!fp8_ || fp8_layers_overlap())) {  // joined with the next layer's runs
      for (PendingRun& p : pending) unjoined.push_back(std::move(p));
      continue;
    }
    join(pending, layer, seconds);
  }
  if (!fp8_) {
    // C2 part one: the pinned prediction against the exact statistics, computed on the device.
    const RangeStats fresh = timed(seconds, "C2's statistics (on the device)", [&] { return gpu_->range_stats(); });
    layer.stale = c2_stale_prediction(full.name, pred, fresh);
  }
  if (!unjoined.empty() || unfinished_) {
    // The previous layer's host parts ran beside this layer's runs: joined and handed on now; this layer's
    // go on beside the next layer's.
    finish(seconds);
    unfinished_ = Unfinished{&layer, std::move(unjoined), std::move(done)};
    return true;
  }
  if (done) done();
  return true;
}

bool ResidentVerifier::overlaps_layers() {
  static const bool on = env_int("QC_VERIFY_OVERLAP", 1, 0, 1) != 0;
  return on;
}

bool ResidentVerifier::fp8_layers_overlap() {
  static const bool on = env_int("QC_FP8_OVERLAP", 1, 0, 1) != 0;  // timed on a device: docs/performance.md
  return on;
}

void ResidentVerifier::join(std::vector<PendingRun>& pending, LayerVerification& layer, PhaseSeconds& seconds) {
  for (PendingRun& p : pending) {
    auto [run, host_seconds] = timed(seconds, "waiting for the host's passes over the listed rows", [&] { return p.get(); });
    add_seconds(seconds, "the host's passes over the listed rows (beside the runs)", host_seconds);
    layer.runs.push_back(std::move(run));
  }
  pending.clear();
}

void ResidentVerifier::finish(PhaseSeconds& seconds) {
  std::optional<Unfinished> u = std::exchange(unfinished_, std::nullopt);
  if (!u) return;
  join(u->pending, *u->layer, seconds);
  if (u->done) u->done();
}

}  // namespace qc
