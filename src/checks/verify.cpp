// Layer-level verification: both arms on identical operands under each scale regime, and the
// checks C2–C6 over the runs.
#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cfloat>
#include <chrono>
#include <cmath>
#include <cstring>
#include <future>
#include <memory>
#include <optional>

#include "arms/cuda/cuda.hpp"
#include "qconform/epilogue.hpp"
#include "qconform/error.hpp"
#include "checks/verify.hpp"
#include "qconform/numerics.hpp"
#include "core/parallel.hpp"

namespace qc {

namespace {

// C3: a private copy of everything the arms receive, taken before arm A runs. After each arm the
// operands are compared with it byte for byte (1 MiB chunks on every core), and the first changed
// element is named with its coordinates, old and new value.
class OperandSnapshot {
 public:
  // `with_weights`: also the weights (verify checks them in the first run of each layer; the
  // runs of other row counts and scale regimes share the same weight bytes).
  OperandSnapshot(const LayerOperands& ops, bool with_weights, int threads)
      : with_weights_(with_weights), threads_(threads) {
    for (const Piece& p : pieces(ops)) copies_.emplace_back(p.bytes.begin(), p.bytes.end());
  }

  // "" when every operand byte is unchanged, else "w_q[12,345]: 5 (0x05) became 7 (0x07)".
  std::string first_change(const LayerOperands& ops) const {
    const std::vector<Piece> now = pieces(ops);
    for (size_t p = 0; p < now.size(); ++p) {
      const std::vector<std::byte>& was = copies_[p];
      if (now[p].bytes.size() != was.size()) {
        return fmt::format("{}: {} bytes became {}", now[p].name, was.size(), now[p].bytes.size());
      }
      constexpr size_t kChunk = size_t{1} << 20;
      const int64_t chunks = static_cast<int64_t>((was.size() + kChunk - 1) / kChunk);
      std::vector<char> differs(static_cast<size_t>(chunks), 0);
      parallel_for(chunks, was.size() < 4 * kChunk ? 1 : threads_, [&](int64_t c) {
        const size_t at = static_cast<size_t>(c) * kChunk, len = std::min(kChunk, was.size() - at);
        differs[static_cast<size_t>(c)] = std::memcmp(now[p].bytes.data() + at, was.data() + at, len) != 0;
      });
      const auto hit = std::find(differs.begin(), differs.end(), 1);
      if (hit == differs.end()) continue;
      size_t byte = static_cast<size_t>(hit - differs.begin()) * kChunk;
      while (now[p].bytes[byte] == was[byte]) ++byte;
      return describe(now[p], byte / now[p].element_size, was);
    }
    return "";
  }

 private:
  enum class Kind { i8, f32, bf16 };
  struct Piece {
    const char* name;
    std::span<const std::byte> bytes;
    Kind kind;
    size_t element_size;
    int64_t cols;  // for coordinates; 0 for vectors
  };
  std::vector<Piece> pieces(const LayerOperands& ops) const {
    std::vector<Piece> p = {{"a_q", std::as_bytes(ops.a_q), Kind::i8, 1, ops.k},
                            {"a_scale", std::as_bytes(ops.a_scale), Kind::f32, 4, 0},
                            {"w_scale", std::as_bytes(ops.w_scale), Kind::f32, 4, 0},
                            {"bias", std::as_bytes(ops.bias), Kind::bf16, 2, 0}};
    if (with_weights_) p.push_back({"w_q", std::as_bytes(ops.w_q), Kind::i8, 1, ops.k});
    return p;
  }
  static std::string describe(const Piece& p, size_t element, const std::vector<std::byte>& was) {
    const auto value = [&](const std::byte* at) {
      switch (p.kind) {
        case Kind::i8: return fmt::format("{} (0x{:02x})", static_cast<int8_t>(*at), static_cast<uint8_t>(*at));
        case Kind::f32: {
          uint32_t bits = 0;
          std::memcpy(&bits, at, 4);
          return fmt::format("{:.9g} (0x{:08x})", std::bit_cast<float>(bits), bits);
        }
        case Kind::bf16: {
          uint16_t bits = 0;
          std::memcpy(&bits, at, 2);
          return fmt::format("{:.9g} (0x{:04x})", bf16_to_f32(bits), bits);
        }
      }
      return std::string("?");
    };
    const size_t at = element * p.element_size;
    const std::string where = p.cols > 0 ? fmt::format("{}[{},{}]", p.name, static_cast<int64_t>(element) / p.cols,
                                                       static_cast<int64_t>(element) % p.cols)
                                         : fmt::format("{}[{}]", p.name, element);
    return fmt::format("{}: {} became {}", where, value(was.data() + at), value(p.bytes.data() + at));
  }

  bool with_weights_;
  int threads_;
  std::vector<std::vector<std::byte>> copies_;
};

// The exact accumulators of one (layer, rows) slice, on the host or on the GPU's CUDA cores.
ExactAccumulators exact_acc(const LayerOperands& ops, VerifyReference where, int threads) {
  const AccumShape s{ops.m, ops.n, ops.k};
  return where == VerifyReference::gpu ? exact_accumulate_gpu(ops.a_q.data(), ops.w_q.data(), s)
                                       : exact_accumulate(ops.a_q.data(), ops.w_q.data(), s, threads);
}

// Rows [r0, r1) of the declared formula `e` on the exact accumulators, into `y` (serial: the
// element pass runs blocks of rows on every core).
void emulate_rows(const Epilogue& e, const ExactAccumulators& acc, const LayerOperands& ops, int64_t r0, int64_t r1,
                  std::vector<uint16_t>& y) {
  y.resize(static_cast<size_t>((r1 - r0) * ops.n));
  apply_epilogue_rows(e, acc, ops.m, r0, r1 - r0, ops.a_scale.data(), ops.w_scale.data(),
                      ops.has_bias() ? ops.bias.data() : nullptr, ops.n, y.data(), 1);
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

// One pass over a run's elements, in blocks of rows on every core (merged in row order, so the
// "first" lists keep the first offending elements): the declared formulas on the exact
// accumulators, the comparison of A with B, and the element checks.
struct ElementPass {
  Comparison cmp;
  ElementTally tally;
};

ElementPass element_pass(const LayerOperands& ops, const std::string& label, ScaleMode mode, bool safe,
                         const ExactAccumulators& exact, const ArmOutput& out_a, const ArmOutput& out_b,
                         const Epilogue* formula_a, const Epilogue* formula_b, const CompareOptions& compare,
                         int threads) {
  const int64_t rows = ops.m, cols = ops.n;
  const size_t max_listed = compare.max_listed;
  const double near_zero = near_zero_limit(out_a.y, compare);
  const int64_t blocks = rows * cols < (int64_t{1} << 18) ? 1 : std::min<int64_t>(rows, 4 * resolve_threads(threads));
  const int64_t per = (rows + blocks - 1) / blocks;
  std::vector<ElementPass> parts(static_cast<size_t>(blocks));
  const Epilogue* formulas[2] = {formula_a, formula_b};
  parallel_for(blocks, threads, [&](int64_t k) {
    const int64_t r0 = std::min(rows, k * per), r1 = std::min(rows, (k + 1) * per);
    parts[k].cmp = compare_bf16_rows(out_a.y, out_b.y, r0, r1, cols, label, near_zero, max_listed);
    ElementTally& t = parts[k].tally;
    std::vector<uint16_t> pred[2];  // the declared formulas over these rows
    for (int s = 0; s < 2; ++s) {
      if (formulas[s]) emulate_rows(*formulas[s], exact, ops, r0, r1, pred[s]);
    }
    // Raw pointers and register counters: this loop is verify's hottest on the host.
    const int32_t* acc[2] = {out_a.acc ? out_a.acc->data() : nullptr, out_b.acc ? out_b.acc->data() : nullptr};
    const uint16_t* y[2] = {out_a.y.data(), out_b.y.data()};
    const uint16_t* p[2] = {formula_a ? pred[0].data() : nullptr, formula_b ? pred[1].data() : nullptr};
    const float* sa = ops.a_scale.data();
    const float* sw = ops.w_scale.data();
    int64_t acc_mismatch[2] = {0, 0}, formula_mismatch[2] = {0, 0}, safe_contradicted = 0, predicted_diff = 0;
    int64_t predicted_vs_observed = 0, pow2_excluded = 0, pow2_violations = 0;
    const auto pass = [&](const auto* exact_acc) {
      for (int64_t row = r0; row < r1; ++row) {
        for (int64_t col = 0; col < cols; ++col) {
          const int64_t i = row * cols + col, j = i - r0 * cols;  // j: index into this block's formulas
          const int64_t want = exact_acc[i];
          for (int s = 0; s < 2; ++s) {
            if (acc[s] != nullptr) {
              const int64_t got = acc[s][i];
              if (got != want) {
                ++acc_mismatch[s];
                if (t.acc_first.size() < 10) {
                  t.acc_first.push_back(fmt::format("{} {}[{},{}]: acc {} (0x{:08x}), exact {}", s ? "B" : "A",
                                                    ops.name, row, col, got, static_cast<uint32_t>(got), want));
                }
              }
              safe_contradicted += safe && std::abs(got) > kFp32ExactIntLimit;
            }
            if (p[s] != nullptr) formula_mismatch[s] += p[s][j] != y[s][i];
          }
          const uint16_t x = y[0][i], z = y[1][i];
          if (p[0] != nullptr && p[1] != nullptr) {
            const bool predicted = p[0][j] != p[1][j];
            predicted_diff += predicted;
            predicted_vs_observed += predicted != (x != z);
          }
          if (mode == ScaleMode::real) continue;
          if (!pow2_in_jurisdiction(want, sa[row], sw[col])) {
            ++pow2_excluded;
          } else if (x != z) {
            ++pow2_violations;
            if (t.pow2_first.size() < max_listed) {
              const bool finite = bf16_is_finite(x) && bf16_is_finite(z);
              t.pow2_first.push_back(DiffElement{ops.name, row, col, x, z, bf16_to_f32(x), bf16_to_f32(z),
                                                 finite ? bf16_ulp_distance(x, z) : -1});
            }
          }
        }
      }
    };
    if (exact.wide()) {
      pass(exact.i64.data());
    } else {
      pass(exact.i32.data());
    }
    for (int s = 0; s < 2; ++s) t.acc_mismatch[s] = acc_mismatch[s], t.formula_mismatch[s] = formula_mismatch[s];
    t.safe_contradicted = safe_contradicted, t.predicted_diff = predicted_diff;
    t.predicted_vs_observed = predicted_vs_observed, t.pow2_excluded = pow2_excluded;
    t.pow2_violations = pow2_violations;
  });
  ElementPass total = std::move(parts[0]);
  for (size_t k = 1; k < parts.size(); ++k) {
    total.cmp.merge(parts[k].cmp, max_listed);
    total.tally.merge(parts[k].tally, max_listed);
  }
  return total;
}

using PhaseSeconds = std::vector<std::pair<std::string, double>>;

void add_seconds(PhaseSeconds& seconds, std::string_view phase, double dt) {
  for (auto& [name, total] : seconds) {
    if (name == phase) return void(total += dt);
  }
  seconds.emplace_back(phase, dt);
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
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

const Epilogue* declared(const ArmInfo& info) { return info.epilogue.empty() ? nullptr : &epilogue(info.epilogue); }

}  // namespace

VerifyReference verify_reference_from_name(std::string_view name) {
  if (name == "auto") return VerifyReference::automatic;
  if (name == "cpu") return VerifyReference::cpu;
  if (name == "gpu") return VerifyReference::gpu;
  QC_FAIL_INPUT("--reference: unknown value `{}`; expected auto, cpu or gpu", name);
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

VerifiedLayers verify_layer_runs(Arm& arm_a, Arm& arm_b, size_t layer_count, const LayerLoader& load,
                                 const PredictionSet& predictions, const VerifyOptions& options,
                                 const VerifySelection& selection,
                                 const std::function<void(size_t, size_t, const std::string&)>& progress) {
  const auto started = std::chrono::steady_clock::now();
  VerifiedLayers result;
  const ArmInfo info_a = arm_a.info(), info_b = arm_b.info();
  const Epilogue* formula_a = declared(info_a);
  const Epilogue* formula_b = declared(info_b);
  const VerifyReference reference = resolve_reference(options.reference);
  result.reference = reference_description(reference);
  QC_INPUT(predictions.layers.size() == layer_count,
           "predictions cover {} layers but the operands have {}: expected the predictions made from these operands",
           predictions.layers.size(), layer_count);
  std::vector<size_t> selected = selection.layers;
  if (!selection.only) {
    selected.resize(layer_count);
    for (size_t i = 0; i < layer_count; ++i) selected[i] = i;
  }

  const size_t m_count = options.m_sweep.empty() ? 1 : options.m_sweep.size();
  const size_t total_steps = selected.size() * m_count * options.modes.size();
  size_t step = 0;
  // The run whose element pass is in flight, and how it is folded into the result once done.
  struct PendingRun {
    LayerRun run;
    size_t layer = 0;
    bool last_of_layer = false, a_has_acc = false, b_has_acc = false;
    std::future<std::pair<ElementPass, double>> pass;
  };
  std::optional<PendingRun> pending;
  const auto finish_pending = [&] {
    if (!pending) return;
    auto [pass, seconds] = timed(result.seconds, "waiting for element passes", [&] { return pending->pass.get(); });
    add_seconds(result.seconds, "element pass (formulas, A vs B, C2, C4-C6; beside the arms)", seconds);
    LayerRun& run = pending->run;
    run.cmp = std::move(pass.cmp);
    const ElementTally& t = pass.tally;
    // C4 and C2 part two: exposed accumulators against the exact one and the safe verdict.
    run.acc_mismatch_a = pending->a_has_acc ? t.acc_mismatch[0] : -1;
    run.acc_mismatch_b = pending->b_has_acc ? t.acc_mismatch[1] : -1;
    run.acc_first_mismatch = t.acc_first;
    run.prediction_held = t.safe_contradicted == 0;
    if (formula_a) run.formula_mismatch_a = t.formula_mismatch[0];
    if (formula_b) run.formula_mismatch_b = t.formula_mismatch[1];
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
    LayerVerification& layer = result.layers[pending->layer];
    layer.runs.push_back(std::move(run));
    if (pending->last_of_layer && selection.done) selection.done(pending->layer, layer);
    pending.reset();
  };

  for (const size_t li : selected) {
    QC_CHECK(li < layer_count, "verify: layer index {} of {}", li, layer_count);
    if (selection.started) selection.started(li);
    const LayerOperands full = load(li);
    const LayerPrediction& pred = predictions.layers[li];
    LayerVerification& layer = result.layers[li];
    layer.name = full.name;
    QC_INPUT(pred.name == full.name && pred.stats.shape.m == full.m && pred.stats.shape.n == full.n &&
                 pred.stats.shape.k == full.k,
             "predictions layer {} is `{}` {}x{}x{}, operands layer is `{}` {}x{}x{}: expected the same layers in order", li,
             pred.name, pred.stats.shape.m, pred.stats.shape.n, pred.stats.shape.k, full.name, full.m, full.n, full.k);
    const std::vector<int64_t> ms = options.m_sweep.empty() ? std::vector<int64_t>{full.m} : options.m_sweep;
    std::future<RangeStats> stats;  // C2: the exact statistics of the whole layer, computed beside the arms
    for (size_t msi = 0; msi < ms.size(); ++msi) {
      const int64_t m = ms[msi];
      const LayerOperands rows = first_rows(full, m);
      const auto exact = std::make_shared<const ExactAccumulators>(
          timed(result.seconds, "reference accumulation", [&] { return exact_acc(rows, reference, options.threads); }));
      if (m == full.m) {
        stats = std::async(std::launch::async, [exact, rows, threads = options.threads] {
          return range_stats(rows.a_q.data(), rows.w_q.data(), {rows.m, rows.n, rows.k}, *exact, threads);
        });
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

        // C3: what each arm receives, compared byte for byte with a copy after each run.
        const bool first_run = m == ms.front() && mi == 0;
        const OperandSnapshot snapshot = timed(result.seconds, "operand snapshot (C3)",
                                               [&] { return OperandSnapshot(ops, first_run, options.threads); });
        const auto changed = [&] {
          return timed(result.seconds, "operand snapshot (C3)", [&] { return snapshot.first_change(ops); });
        };
        ArmOutput out_a = timed(result.seconds, "arm A", [&] { return arm_a.run(ops); });
        const std::string after_a = changed();
        ArmOutput out_b = timed(result.seconds, "arm B", [&] { return arm_b.run(ops); });
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
        // The element pass runs on the host while the next run's arms run (on a GPU the two overlap).
        finish_pending();
        const bool last_of_layer = msi + 1 == ms.size() && mi + 1 == options.modes.size();
        PendingRun next{std::move(run), li, last_of_layer, out_a.acc.has_value(), out_b.acc.has_value(), {}};
        const std::string label = m == full.m ? ops.name : fmt::format("{}@M={}", ops.name, m);
        next.pass = std::async(std::launch::async, [&options, &pred, formula_a, formula_b, exact, ops, label, mode,
                                                    a = std::move(out_a), b = std::move(out_b)] {
          const auto t0 = std::chrono::steady_clock::now();
          ElementPass pass = element_pass(ops, label, mode, pred.safe, *exact, a, b, formula_a, formula_b,
                                          options.compare, options.threads);
          return std::pair(std::move(pass), seconds_since(t0));
        });
        pending = std::move(next);
      }
    }
    // C2 part one: the pinned predictions must be the exact statistics of these operands, and
    // their `safe` verdicts must follow from them.
    const RangeStats fresh = timed(result.seconds, "waiting for range statistics (C2)", [&] {
      return stats.valid() ? stats.get()
                           : exact_range_stats(full.a_q.data(), full.w_q.data(), {full.m, full.n, full.k}, options.threads);
    });
    const bool fresh_safe = fresh.max_abs_acc <= kFp32ExactIntLimit && fresh.int32_overflow_count == 0;
    if (fresh.max_abs_acc != pred.stats.max_abs_acc || fresh.count_above_2p24 != pred.stats.count_above_2p24 ||
        fresh.int32_overflow_count != pred.stats.int32_overflow_count || fresh_safe != pred.safe) {
      layer.stale = fmt::format("{}: predicted max|acc| {} ({} above 2^24, safe {}), exact {} ({} above 2^24, safe {})",
                                full.name, pred.stats.max_abs_acc, pred.stats.count_above_2p24, pred.safe,
                                fresh.max_abs_acc, fresh.count_above_2p24, fresh_safe);
    }
  }

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

VerifyResult merge_verifications(const ArmInfo& arm_a, const ArmInfo& arm_b, const std::string& reference,
                                 std::vector<LayerVerification> layers, const PredictionSet& predictions,
                                 const VerifyOptions& options) {
  QC_CHECK(layers.size() == predictions.layers.size(), "merge_verifications: {} layers, {} predictions", layers.size(),
           predictions.layers.size());
  VerifyResult result;
  result.arm_a = arm_a;
  result.arm_b = arm_b;
  result.reference = reference;
  int64_t stale_predictions = 0;
  std::vector<std::string> stale_first;
  for (LayerVerification& layer : layers) {
    QC_CHECK(!layer.runs.empty(), "merge_verifications: layer `{}` has no runs", layer.name);
    if (result.record_a.arm.empty()) result.record_a = layer.record_a;
    if (result.record_b.arm.empty()) result.record_b = layer.record_b;
    if (!layer.stale.empty()) {
      ++stale_predictions;
      if (stale_first.size() < 5) stale_first.push_back(layer.stale);
    }
    // C6's totals count the real-scale runs of the largest row count of each layer.
    int64_t m_total = 0;
    for (const LayerRun& r : layer.runs) m_total = std::max(m_total, r.m);
    for (LayerRun& r : layer.runs) {
      if (r.mode == ScaleMode::real && r.m == m_total) result.total_real.merge(r.cmp, options.compare.max_listed);
      result.runs.push_back(std::move(r));
    }
  }

  // ---- the checks over all runs ----
  CheckResult c2 = make_check("C2", Verdict::pass);
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

  CheckResult c3 = make_check("C3", Verdict::pass);
  int64_t c3_bad = 0;
  std::vector<std::string> c3_first;
  for (const LayerRun& r : result.runs) {
    if (!r.operands_identical) {
      ++c3_bad;
      if (c3_first.size() < 5) c3_first.push_back(fmt::format("{} m={} {}: {}", r.layer, r.m, scale_mode_name(r.mode), r.operands_note));
    }
  }
  if (c3_bad) c3.verdict = Verdict::fail;
  c3.summary = fmt::format("both arms received byte-identical operands (compared byte for byte with a copy taken "
                           "before the arms ran) in {}/{} runs",
                           result.runs.size() - c3_bad, result.runs.size());
  c3.evidence = {{"runs", result.runs.size()}, {"modified", c3_bad}, {"first", c3_first}};

  CheckResult c4 = make_check("C4", Verdict::not_applicable);
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

  CheckResult c5 = make_check("C5", Verdict::not_applicable);
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

  CheckResult c6 = make_check("C6", Verdict::not_applicable);
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
  // A layer whose exact accumulators leave INT32 (C2 predicted it) differs in any INT32 kernel
  // that wraps or saturates: the difference is attributed to that overflow, not to the epilogue.
  std::vector<std::string> overflow_layers;
  for (const LayerRun& r : result.runs) {
    const bool differs = r.cmp.bitwise_diff > 0 || r.formula_mismatch_a > 0 || r.formula_mismatch_b > 0;
    if (r.int32_overflow && differs &&
        std::find(overflow_layers.begin(), overflow_layers.end(), r.layer) == overflow_layers.end()) {
      overflow_layers.push_back(r.layer);
    }
  }
  if (c6.verdict == Verdict::fail && !overflow_layers.empty()) {
    c6.points_to = fmt::format(
        "the INT32 overflow C2 predicted in {} layer(s) ({}): their exact accumulators leave INT32, so an INT32 kernel "
        "wraps or saturates there; not evidence against the epilogue",
        overflow_layers.size(), fmt::join(overflow_layers.begin(),
                                          overflow_layers.begin() + std::min<size_t>(overflow_layers.size(), 5), ", "));
    c6.summary += fmt::format("; includes {} layer(s) with the INT32 overflow C2 predicted", overflow_layers.size());
  }
  c6.evidence = {{"comparison", t},
                 {"int32_overflow_layers_with_differences", overflow_layers},
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
  nlohmann::json seconds = nlohmann::json::array();
  for (const auto& [phase, s] : r.seconds) seconds.push_back({{"phase", phase}, {"seconds", s}});
  return {{"arms", {info(r.arm_a, r.record_a), info(r.arm_b, r.record_b)}},
          {"reference", r.reference},
          {"checks", r.checks},
          {"total_real", r.total_real},
          {"seconds", seconds},
          {"wall_seconds", r.wall_seconds},
          {"runs", runs}};
}

nlohmann::json to_json(const LayerVerification& v) {
  nlohmann::json runs = nlohmann::json::array();
  for (const LayerRun& x : v.runs) {
    runs.push_back({{"layer", x.layer},
                    {"m", x.m},
                    {"n", x.n},
                    {"k", x.k},
                    {"scales", scale_mode_name(x.mode)},
                    {"safe", x.safe},
                    {"int32_overflow", x.int32_overflow},
                    {"cmp", x.cmp},
                    {"operands_identical", x.operands_identical},
                    {"operands_note", x.operands_note},
                    {"acc_mismatch", {x.acc_mismatch_a, x.acc_mismatch_b}},
                    {"acc_first_mismatch", x.acc_first_mismatch},
                    {"prediction_held", x.prediction_held},
                    {"pow2_excluded", x.pow2_excluded},
                    {"pow2_violations", x.pow2_violations},
                    {"pow2_first", x.pow2_first},
                    {"pow2_not_commutable", x.pow2_not_commutable},
                    {"formula_mismatch", {x.formula_mismatch_a, x.formula_mismatch_b}},
                    {"predicted_diff", x.predicted_diff},
                    {"predicted_equals_observed", x.predicted_equals_observed}});
  }
  return {{"name", v.name}, {"stale", v.stale}, {"record_a", v.record_a}, {"record_b", v.record_b}, {"runs", runs}};
}

LayerVerification layer_verification_from_json(const nlohmann::json& j, const std::string& where) {
  try {
    LayerVerification v;
    v.name = j.at("name").get<std::string>();
    v.stale = j.at("stale").get<std::string>();
    v.record_a = j.at("record_a").get<RunRecord>();
    v.record_b = j.at("record_b").get<RunRecord>();
    for (const auto& x : j.at("runs")) {
      LayerRun r;
      r.layer = x.at("layer").get<std::string>();
      r.m = x.at("m").get<int64_t>();
      r.n = x.at("n").get<int64_t>();
      r.k = x.at("k").get<int64_t>();
      r.mode = scale_mode_from_name(x.at("scales").get<std::string>());
      r.safe = x.at("safe").get<bool>();
      r.int32_overflow = x.at("int32_overflow").get<bool>();
      r.cmp = x.at("cmp").get<Comparison>();
      r.operands_identical = x.at("operands_identical").get<bool>();
      r.operands_note = x.at("operands_note").get<std::string>();
      r.acc_mismatch_a = x.at("acc_mismatch").at(0).get<int64_t>();
      r.acc_mismatch_b = x.at("acc_mismatch").at(1).get<int64_t>();
      r.acc_first_mismatch = x.at("acc_first_mismatch").get<std::vector<std::string>>();
      r.prediction_held = x.at("prediction_held").get<bool>();
      r.pow2_excluded = x.at("pow2_excluded").get<int64_t>();
      r.pow2_violations = x.at("pow2_violations").get<int64_t>();
      r.pow2_first = x.at("pow2_first").get<std::vector<DiffElement>>();
      r.pow2_not_commutable = x.at("pow2_not_commutable").get<bool>();
      r.formula_mismatch_a = x.at("formula_mismatch").at(0).get<int64_t>();
      r.formula_mismatch_b = x.at("formula_mismatch").at(1).get<int64_t>();
      r.predicted_diff = x.at("predicted_diff").get<int64_t>();
      r.predicted_equals_observed = x.at("predicted_equals_observed").get<bool>();
      v.runs.push_back(std::move(r));
    }
    return v;
  } catch (const nlohmann::json::exception& e) {
    QC_FAIL_INPUT("{}: not a valid per-layer verify result: {}", where, e.what());
  }
}

}  // namespace qc
