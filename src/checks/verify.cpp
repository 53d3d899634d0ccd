// Layer-level verification: both arms on identical operands under each scale regime, and the
// checks C2–C6 over the runs.
#include <fmt/format.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <optional>

#include "qconform/epilogue.hpp"
#include "qconform/error.hpp"
#include "qconform/layer_checks.hpp"
#include "qconform/numerics.hpp"
#include "qconform/parallel.hpp"
#include "qconform/sha256.hpp"

namespace qc {

namespace {

template <class T>
std::span<const std::byte> as_bytes_of(std::span<const T> s) {
  return std::as_bytes(s);
}

// Digest of everything an arm receives.
std::string operands_digest(const LayerOperands& ops, bool with_weights) {
  std::string d = sha256_hex(as_bytes_of(ops.a_q)) + sha256_hex(as_bytes_of(ops.a_scale)) +
                  sha256_hex(as_bytes_of(ops.w_scale)) + sha256_hex(as_bytes_of(ops.bias));
  if (with_weights) d += sha256_hex(as_bytes_of(ops.w_q));
  return d;
}

// The exact accumulator of one (layer, rows) slice, INT32 when no value can leave INT32.
struct ExactAcc {
  std::vector<int32_t> i32;
  std::vector<int64_t> i64;  // used when K is beyond the INT32 proof
  bool wide() const { return !i64.empty(); }
  int64_t at(size_t i) const { return wide() ? i64[i] : int64_t{i32[i]}; }
};

ExactAcc exact_acc(const LayerOperands& ops, int threads) {
  ExactAcc e;
  const AccumShape s{ops.m, ops.n, ops.k};
  if (ops.k <= kAccumMaxKInt32) {
    e.i32.resize(static_cast<size_t>(ops.m * ops.n));
    exact_accumulate_i32(ops.a_q.data(), ops.w_q.data(), s, e.i32.data(), threads);
  } else {
    e.i64.resize(static_cast<size_t>(ops.m * ops.n));
    exact_accumulate_i64(ops.a_q.data(), ops.w_q.data(), s, e.i64.data(), threads);
  }
  return e;
}

std::vector<uint16_t> emulate(const Epilogue& e, const ExactAcc& acc, const LayerOperands& ops, int threads) {
  std::vector<uint16_t> y(static_cast<size_t>(ops.m * ops.n));
  const uint16_t* bias = ops.has_bias() ? ops.bias.data() : nullptr;
  if (acc.wide()) {
    apply_epilogue(e, acc.i64.data(), ops.a_scale.data(), ops.w_scale.data(), bias, ops.m, ops.n, y.data(), threads);
  } else {
    apply_epilogue(e, acc.i32.data(), ops.a_scale.data(), ops.w_scale.data(), bias, ops.m, ops.n, y.data(), threads);
  }
  return y;
}

// Everything verify checks element by element, over a block of rows (blocks run in parallel and
// merge in order, so the "first" lists keep the first offending elements).
struct ElementTally {
  int64_t acc_mismatch[2] = {0, 0}, formula_mismatch[2] = {0, 0};
  int64_t safe_contradicted = 0, predicted_diff = 0, predicted_vs_observed = 0;
  int64_t pow2_excluded = 0, pow2_violations = 0;
  std::vector<std::string> acc_first;
  std::vector<DiffElement> pow2_first;

  void merge(const ElementTally& o, size_t max_listed) {
    for (int s = 0; s < 2; ++s) {
      acc_mismatch[s] += o.acc_mismatch[s];
      formula_mismatch[s] += o.formula_mismatch[s];
    }
    safe_contradicted += o.safe_contradicted;
    predicted_diff += o.predicted_diff;
    predicted_vs_observed += o.predicted_vs_observed;
    pow2_excluded += o.pow2_excluded;
    pow2_violations += o.pow2_violations;
    for (const auto& f : o.acc_first) {
      if (acc_first.size() < 10) acc_first.push_back(f);
    }
    for (const auto& d : o.pow2_first) {
      if (pow2_first.size() < max_listed) pow2_first.push_back(d);
    }
  }
};

ElementTally tally_elements(const LayerOperands& ops, ScaleMode mode, bool safe, const ExactAcc& exact,
                            const ArmOutput& out_a, const ArmOutput& out_b, const std::vector<uint16_t>* pred_a,
                            const std::vector<uint16_t>* pred_b, size_t max_listed, int threads) {
  const int64_t rows = ops.m, cols = ops.n;
  const int64_t blocks = rows * cols < (int64_t{1} << 18) ? 1 : std::min<int64_t>(rows, 4 * resolve_threads(threads));
  const int64_t per = (rows + blocks - 1) / blocks;
  std::vector<ElementTally> parts(static_cast<size_t>(blocks));
  const ArmOutput* outs[2] = {&out_a, &out_b};
  const std::vector<uint16_t>* preds[2] = {pred_a, pred_b};
  parallel_for(blocks, threads, [&](int64_t k) {
    ElementTally& t = parts[k];
    const int64_t i0 = std::min(rows, k * per) * cols, i1 = std::min(rows, (k + 1) * per) * cols;
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t row = i / cols, col = i % cols;
      const int64_t want = exact.at(static_cast<size_t>(i));
      for (int s = 0; s < 2; ++s) {
        if (outs[s]->acc) {
          const int64_t got = (*outs[s]->acc)[i];
          if (got != want) {
            ++t.acc_mismatch[s];
            if (t.acc_first.size() < 10) {
              t.acc_first.push_back(fmt::format("{} {}[{},{}]: acc {} (0x{:08x}), exact {}", s ? "B" : "A", ops.name, row,
                                                col, got, static_cast<uint32_t>(got), want));
            }
          }
          if (safe && std::abs(got) > kFp32ExactIntLimit) ++t.safe_contradicted;
        }
        if (preds[s]) t.formula_mismatch[s] += (*preds[s])[i] != outs[s]->y[i];
      }
      const uint16_t x = out_a.y[i], y = out_b.y[i];
      if (pred_a && pred_b) {
        const bool predicted = (*pred_a)[i] != (*pred_b)[i];
        t.predicted_diff += predicted;
        t.predicted_vs_observed += predicted != (x != y);
      }
      if (mode == ScaleMode::real) continue;
      if (!pow2_in_jurisdiction(want, ops.a_scale[row], ops.w_scale[col])) {
        ++t.pow2_excluded;
      } else if (x != y) {
        ++t.pow2_violations;
        if (t.pow2_first.size() < max_listed) {
          const bool finite = bf16_is_finite(x) && bf16_is_finite(y);
          t.pow2_first.push_back(DiffElement{ops.name, row, col, x, y, bf16_to_f32(x), bf16_to_f32(y),
                                             finite ? bf16_ulp_distance(x, y) : -1});
        }
      }
    }
  });
  ElementTally total = std::move(parts[0]);
  for (size_t k = 1; k < parts.size(); ++k) total.merge(parts[k], max_listed);
  return total;
}

const Epilogue* declared(const ArmInfo& info) { return info.epilogue.empty() ? nullptr : &epilogue(info.epilogue); }

}  // namespace

std::string_view scale_mode_name(ScaleMode mode) {
  switch (mode) {
    case ScaleMode::real: return "real";
    case ScaleMode::pow2_channel: return "pow2-channel";
    case ScaleMode::pow2_layer: return "pow2-layer";
  }
  return "?";
}

ScaleMode scale_mode_from_name(std::string_view name) {
  for (ScaleMode m : {ScaleMode::real, ScaleMode::pow2_channel, ScaleMode::pow2_layer}) {
    if (scale_mode_name(m) == name) return m;
  }
  QC_FAIL_INPUT("--scales: unknown scale regime `{}`; expected real, pow2-channel or pow2-layer", name);
}

LayerOperands apply_scale_mode(const LayerOperands& ops, ScaleMode mode) {
  if (mode == ScaleMode::real) return ops;
  std::vector<float> sa(ops.a_scale.begin(), ops.a_scale.end());
  std::vector<float> sw(ops.w_scale.begin(), ops.w_scale.end());
  if (mode == ScaleMode::pow2_channel) {
    for (float& s : sw) s = pow2_nearest_log2(s);
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

LayerOperands first_rows(const LayerOperands& ops, int64_t m) {
  QC_INPUT(m >= 1 && m <= ops.m, "--m-sweep: layer `{}` has {} rows, cannot take the first {}", ops.name, ops.m, m);
  LayerOperands out = ops;
  out.m = m;
  out.a_q = ops.a_q.first(static_cast<size_t>(m * ops.k));
  out.a_scale = ops.a_scale.first(static_cast<size_t>(m));
  return out;
}

bool VerifyResult::all_passed() const {
  return std::none_of(checks.begin(), checks.end(), [](const CheckResult& c) { return c.verdict == Verdict::fail; });
}

VerifyResult verify_layers(Arm& arm_a, Arm& arm_b, const std::vector<LayerOperands>& layers,
                           const PredictionSet& predictions, const VerifyOptions& options,
                           const std::function<void(size_t, size_t, const std::string&)>& progress) {
  VerifyResult result;
  result.arm_a = arm_a.info();
  result.arm_b = arm_b.info();
  const Epilogue* formula_a = declared(result.arm_a);
  const Epilogue* formula_b = declared(result.arm_b);
  QC_INPUT(predictions.layers.size() == layers.size(),
           "predictions cover {} layers but the operands have {}: expected the predictions made from these operands",
           predictions.layers.size(), layers.size());

  // C2 part one: the pinned predictions must be the exact statistics of these operands.
  int64_t stale_predictions = 0;
  std::vector<std::string> stale_first;

  const size_t m_count = options.m_sweep.empty() ? 1 : options.m_sweep.size();
  const size_t total_steps = layers.size() * m_count * options.modes.size();
  size_t step = 0;
  for (size_t li = 0; li < layers.size(); ++li) {
    const LayerOperands& full = layers[li];
    const LayerPrediction& pred = predictions.layers[li];
    QC_INPUT(pred.name == full.name && pred.stats.shape.m == full.m && pred.stats.shape.n == full.n &&
                 pred.stats.shape.k == full.k,
             "predictions layer {} is `{}` {}x{}x{}, operands layer is `{}` {}x{}x{}: expected the same layers in order", li,
             pred.name, pred.stats.shape.m, pred.stats.shape.n, pred.stats.shape.k, full.name, full.m, full.n, full.k);
    const std::vector<int64_t> ms = options.m_sweep.empty() ? std::vector<int64_t>{full.m} : options.m_sweep;
    const int64_t m_total = *std::max_element(ms.begin(), ms.end());  // the runs C6's totals count
    std::optional<RangeStats> fresh;  // C2: the exact statistics of the whole layer
    for (int64_t m : ms) {
      const LayerOperands rows = first_rows(full, m);
      const ExactAcc exact = exact_acc(rows, options.threads);
      if (m == full.m) {
        fresh = exact.wide() ? range_stats(rows.a_q.data(), rows.w_q.data(), {m, rows.n, rows.k}, exact.i64.data())
                             : range_stats(rows.a_q.data(), rows.w_q.data(), {m, rows.n, rows.k}, exact.i32.data());
      }
      for (size_t mi = 0; mi < options.modes.size(); ++mi) {
        const ScaleMode mode = options.modes[mi];
        const LayerOperands ops = apply_scale_mode(rows, mode);
        if (progress) progress(++step, total_steps, fmt::format("{} m={} {}", full.name, m, scale_mode_name(mode)));
        LayerRun run;
        run.layer = full.name;
        run.m = m;
        run.n = ops.n;
        run.k = ops.k;
        run.mode = mode;
        run.safe = pred.safe;
        run.int32_overflow = pred.stats.int32_overflow_count > 0;

        // C3: what each arm receives, digested before and after each run (weights once per slice).
        const bool with_weights = mi == 0;
        const std::string before = operands_digest(ops, with_weights);
        ArmOutput out_a = arm_a.run(ops);
        const std::string between = operands_digest(ops, with_weights);
        ArmOutput out_b = arm_b.run(ops);
        const std::string after = operands_digest(ops, with_weights);
        run.operands_identical = before == between && between == after;
        if (!run.operands_identical) {
          run.operands_note = before != between ? "arm A modified its operands" : "arm B modified its operands";
        }
        if (result.record_a.arm.empty()) result.record_a = out_a.record;
        if (result.record_b.arm.empty()) result.record_b = out_b.record;
        for (const ArmOutput* out : {&out_a, &out_b}) {
          QC_INPUT(static_cast<int64_t>(out->y.size()) == ops.m * ops.n,
                   "arm {} returned {} outputs for layer `{}`, expected {}x{}", out->record.arm, out->y.size(), ops.name,
                   ops.m, ops.n);
        }
        run.cmp = compare_bf16(out_a.y, out_b.y, ops.m, ops.n,
                               m == full.m ? ops.name : fmt::format("{}@M={}", ops.name, m), options.compare);

        // Declared formulas: emulated on the exact accumulator (each arm against its own formula,
        // and the predicted difference set).
        std::optional<std::vector<uint16_t>> pred_a, pred_b;
        if (formula_a) pred_a = emulate(*formula_a, exact, ops, options.threads);
        if (formula_b) pred_b = emulate(*formula_b, exact, ops, options.threads);
        for (const ArmOutput* out : {&out_a, &out_b}) {
          QC_INPUT(!out->acc || static_cast<int64_t>(out->acc->size()) == ops.m * ops.n,
                   "arm {} returned an accumulator of {} elements for layer `{}`, expected {}x{}", out->record.arm,
                   out->acc->size(), ops.name, ops.m, ops.n);
        }
        if (mode != ScaleMode::real) {
          // Declared formulas must share a commutation class (docs/epilogues.md): bias after a bf16
          // rounding has none, and `exact` rounds once where the fp32 formulas round twice.
          if (formula_a && formula_b) {
            const std::string_view ca = formula_a->pow2_class(ops.has_bias()), cb = formula_b->pow2_class(ops.has_bias());
            run.pow2_not_commutable = ca.empty() || cb.empty() || ca != cb;
          } else {
            run.pow2_not_commutable = ops.has_bias() && ((formula_a && formula_a->bias_after_rounding()) ||
                                                         (formula_b && formula_b->bias_after_rounding()));
          }
        }
        const ElementTally t = tally_elements(ops, mode, pred.safe, exact, out_a, out_b, pred_a ? &*pred_a : nullptr,
                                              pred_b ? &*pred_b : nullptr, options.compare.max_listed, options.threads);
        // C4 and C2 part two: exposed accumulators against the exact one and the safe verdict.
        run.acc_mismatch_a = out_a.acc ? t.acc_mismatch[0] : -1;
        run.acc_mismatch_b = out_b.acc ? t.acc_mismatch[1] : -1;
        run.acc_first_mismatch = t.acc_first;
        run.prediction_held = t.safe_contradicted == 0;
        if (pred_a) run.formula_mismatch_a = t.formula_mismatch[0];
        if (pred_b) run.formula_mismatch_b = t.formula_mismatch[1];
        if (pred_a && pred_b) {
          run.predicted_diff = t.predicted_diff;
          run.predicted_equals_observed = t.predicted_vs_observed == 0;
        }
        // C5: under power-of-two scales, bitwise identity is required in safe layers.
        if (mode != ScaleMode::real) {
          run.pow2_excluded = t.pow2_excluded;
          run.pow2_violations = t.pow2_violations;
          run.pow2_first = t.pow2_first;
        } else if (m == m_total) {
          result.total_real.merge(run.cmp, options.compare.max_listed);
        }
        result.runs.push_back(std::move(run));
      }
    }
    // C2 part one: the pinned predictions must be the exact statistics of these operands, and
    // their `safe` verdicts must follow from them.
    if (!fresh) fresh = exact_range_stats(full.a_q.data(), full.w_q.data(), {full.m, full.n, full.k}, options.threads);
    const bool fresh_safe = fresh->max_abs_acc <= kFp32ExactIntLimit && fresh->int32_overflow_count == 0;
    if (fresh->max_abs_acc != pred.stats.max_abs_acc || fresh->count_above_2p24 != pred.stats.count_above_2p24 ||
        fresh->int32_overflow_count != pred.stats.int32_overflow_count || fresh_safe != pred.safe) {
      ++stale_predictions;
      if (stale_first.size() < 5) {
        stale_first.push_back(fmt::format("{}: predicted max|acc| {} ({} above 2^24, safe {}), exact {} ({} above 2^24, "
                                          "safe {})",
                                          full.name, pred.stats.max_abs_acc, pred.stats.count_above_2p24, pred.safe,
                                          fresh->max_abs_acc, fresh->count_above_2p24, fresh_safe));
      }
    }
  }

  // ---- the checks over all runs ----
  CheckResult c2 = make_check("C2", "range prediction", Verdict::pass);
  c2.points_to = "accumulator width / operand capture";
  size_t safe_layers = 0;
  for (const LayerPrediction& p : predictions.layers) safe_layers += p.safe;
  int64_t held_violations = 0;
  for (const LayerRun& r : result.runs) held_violations += !r.prediction_held;
  if (stale_predictions || held_violations) c2.verdict = Verdict::fail;
  c2.summary = fmt::format("{}/{} layers predicted safe (|acc| <= 2^24); pinned predictions {} the operands; {} runs "
                           "contradicted by an arm's accumulator",
                           safe_layers, predictions.layers.size(), stale_predictions ? "DO NOT match" : "match",
                           held_violations);
  c2.evidence = {{"safe_layers", safe_layers},
                 {"layers", predictions.layers.size()},
                 {"stale_predictions", stale_predictions},
                 {"stale_first", stale_first},
                 {"contradicted_runs", held_violations}};

  CheckResult c3 = make_check("C3", "shared operands", Verdict::pass);
  c3.points_to = "activation quantization upstream of the GEMM, or an arm writing into its inputs";
  int64_t c3_bad = 0;
  std::vector<std::string> c3_first;
  for (const LayerRun& r : result.runs) {
    if (!r.operands_identical) {
      ++c3_bad;
      if (c3_first.size() < 5) c3_first.push_back(fmt::format("{} m={} {}: {}", r.layer, r.m, scale_mode_name(r.mode), r.operands_note));
    }
  }
  if (c3_bad) c3.verdict = Verdict::fail;
  c3.summary = fmt::format("both arms received byte-identical operands (SHA-256 before and after each run) in {}/{} runs",
                           result.runs.size() - c3_bad, result.runs.size());
  c3.evidence = {{"runs", result.runs.size()}, {"modified", c3_bad}, {"first", c3_first}};

  CheckResult c4 = make_check("C4", "accumulator equality", Verdict::not_applicable);
  c4.points_to = "the accumulation stage: saturation, wraparound, dropped K tail, float accumulation";
  c4.exclusions = {"layers whose exact accumulators leave INT32 (reported by C2)"};
  int64_t c4_runs = 0, c4_mismatch = 0;
  std::vector<std::string> c4_first;
  int64_t c4_excluded = 0;
  for (const LayerRun& r : result.runs) {
    if (r.int32_overflow) {
      ++c4_excluded;
      continue;
    }
    for (int64_t mm : {r.acc_mismatch_a, r.acc_mismatch_b}) {
      if (mm < 0) continue;
      ++c4_runs;
      c4_mismatch += mm;
    }
    for (const std::string& s : r.acc_first_mismatch) {
      if (c4_first.size() < 10) c4_first.push_back(s);
    }
  }
  if (c4_runs) c4.verdict = c4_mismatch ? Verdict::fail : Verdict::pass;
  c4.summary = c4_runs ? fmt::format("{} exposed accumulators compared with the exact INT64 reference: {} elements differ",
                                     c4_runs, c4_mismatch)
                       : "neither arm exposes its accumulator";
  c4.evidence = {{"compared", c4_runs}, {"mismatched_elements", c4_mismatch}, {"first", c4_first},
                 {"excluded_runs_int32_overflow", c4_excluded}};

  CheckResult c5 = make_check("C5", "power-of-two probe", Verdict::not_applicable);
  c5.points_to = "epilogue structure beyond the two scale products: bias after rounding, FMA contraction, non-RNE rounding";
  c5.exclusions = {"elements whose exact value or an exact intermediate is subnormal or overflows (counted; decided "
                   "from exact values, so a NaN or inf from an arm is a violation)",
                   "layers predicted unsafe by C2",
                   "declared formulas outside one commutation class: bias after a bf16 rounding, or one rounding "
                   "(exact) against two (fp32 then bf16)"};
  int64_t c5_runs = 0, c5_violations = 0, c5_excluded = 0, c5_not_commutable = 0, c5_unsafe = 0;
  std::vector<std::string> c5_first;
  for (const LayerRun& r : result.runs) {
    if (r.mode == ScaleMode::real) continue;
    if (!r.safe) {
      ++c5_unsafe;
      continue;
    }
    if (r.pow2_not_commutable) {
      ++c5_not_commutable;
      continue;
    }
    ++c5_runs;
    c5_excluded += r.pow2_excluded;
    c5_violations += r.pow2_violations;
    if (r.pow2_violations) {
      for (const DiffElement& d : r.pow2_first) {
        if (c5_first.size() < 10) c5_first.push_back(fmt::format("{} ({})", describe(d), scale_mode_name(r.mode)));
      }
    }
  }
  if (c5_runs) c5.verdict = c5_violations ? Verdict::fail : Verdict::pass;
  c5.summary = c5_runs ? fmt::format("{} power-of-two runs in safe layers: {} elements differ bitwise ({} excluded as "
                                     "subnormal/non-finite; {} runs not commutable; {} unsafe runs skipped)",
                                     c5_runs, c5_violations, c5_excluded, c5_not_commutable, c5_unsafe)
                       : "no power-of-two run in a safe, commutable layer";
  c5.evidence = {{"runs", c5_runs},           {"violations", c5_violations}, {"excluded", c5_excluded},
                 {"not_commutable_runs", c5_not_commutable}, {"unsafe_runs", c5_unsafe}, {"first", c5_first}};

  CheckResult c6 = make_check("C6", "real-scale tolerance", Verdict::not_applicable);
  c6.falsifiable = false;
  c6.points_to = "extra rounding steps or reduced precision in the epilogue";
  c6.exclusions = {"near-zero elements reported separately"};
  const Comparison& t = result.total_real;
  int64_t mismatch_formula = 0, predicted_set_wrong = 0, real_runs = 0;
  for (const LayerRun& r : result.runs) {
    mismatch_formula += std::max<int64_t>(0, r.formula_mismatch_a) + std::max<int64_t>(0, r.formula_mismatch_b);
    predicted_set_wrong += !r.predicted_equals_observed;
    if (r.mode == ScaleMode::real) ++real_runs;
  }
  if (real_runs) {
    const int64_t beyond = t.beyond_ulps(options.tolerance_ulps);
    const bool nonfinite_mismatch = t.nonfinite_diff > 0;
    c6.verdict = (beyond || nonfinite_mismatch || mismatch_formula || predicted_set_wrong) ? Verdict::fail : Verdict::pass;
    c6.summary = fmt::format("real scales: {} of {} elements differ ({:.2f} per million), max {} ulp (tolerance {}), {} "
                             "beyond; declared formulas: {} outputs off their formula, predicted set {} observed",
                             t.bitwise_diff, t.total, 1e6 * static_cast<double>(t.bitwise_diff) / std::max<int64_t>(t.total, 1),
                             t.max_ulp, options.tolerance_ulps, beyond, mismatch_formula,
                             predicted_set_wrong ? "!=" : "==");
  }
  c6.evidence = {{"comparison", t},
                 {"tolerance_ulps", options.tolerance_ulps},
                 {"formula_mismatches", mismatch_formula},
                 {"runs_where_predicted_set_differs", predicted_set_wrong}};

  result.checks = {c2, c3, c4, c5, c6};
  return result;
}

nlohmann::json to_json(const VerifyResult& r) {
  nlohmann::json runs = nlohmann::json::array();
  for (const LayerRun& x : r.runs) {
    runs.push_back({{"layer", x.layer},
                    {"m", x.m},
                    {"n", x.n},
                    {"k", x.k},
                    {"scales", scale_mode_name(x.mode)},
                    {"safe", x.safe},
                    {"bitwise_diff", x.cmp.bitwise_diff},
                    {"total", x.cmp.total},
                    {"max_ulp", x.cmp.max_ulp},
                    {"max_rel", x.cmp.max_rel},
                    {"ulp_histogram", nlohmann::json(x.cmp)["ulp_histogram"]},
                    {"subnormal", {x.cmp.subnormal_a, x.cmp.subnormal_b}},
                    {"nonfinite_pairs", x.cmp.nonfinite_pairs},
                    {"operands_identical", x.operands_identical},
                    {"acc_mismatch", {x.acc_mismatch_a, x.acc_mismatch_b}},
                    {"prediction_held", x.prediction_held},
                    {"pow2_excluded", x.pow2_excluded},
                    {"pow2_violations", x.pow2_violations},
                    {"pow2_not_commutable", x.pow2_not_commutable},
                    {"formula_mismatch", {x.formula_mismatch_a, x.formula_mismatch_b}},
                    {"predicted_diff", x.predicted_diff},
                    {"predicted_equals_observed", x.predicted_equals_observed},
                    {"first", x.cmp.first}});
  }
  const auto info = [](const ArmInfo& i, const RunRecord& rec) {
    return nlohmann::json{{"label", i.label},
                          {"description", i.description},
                          {"epilogue", i.epilogue},
                          {"exposes_accumulator", i.exposes_accumulator},
                          {"record", rec}};
  };
  return {{"arms", {info(r.arm_a, r.record_a), info(r.arm_b, r.record_b)}},
          {"checks", r.checks},
          {"total_real", r.total_real},
          {"runs", runs}};
}

}  // namespace qc
