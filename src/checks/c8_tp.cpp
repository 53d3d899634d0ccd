// C8, tensor-parallel degrees simulated on the CPU: c8_tp.hpp.
#include "checks/c8_tp.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <numeric>

#include "qconform/error.hpp"

namespace qc {

using invariance_detail::bits_text;
using invariance_detail::ClaimPredictor;

std::string_view parallel_style_name(ParallelStyle s) {
  return s == ParallelStyle::row ? "row-parallel" : "column-parallel";
}

ParallelStyle parallel_style_of(std::string_view layer) {
  const size_t dot = layer.rfind('.');
  const std::string_view last = dot == std::string_view::npos ? layer : layer.substr(dot + 1);
  for (std::string_view row : {"o_proj", "down_proj", "out_proj", "dense_4h_to_h", "wo", "w2"}) {
    if (last == row) return ParallelStyle::row;
  }
  return ParallelStyle::column;
}

namespace {

// Why `degree` shards of `ops` cannot be cut along `style` ("" when they can): the split dimension
// divisible by the degree, and for block-scaled layers every shard boundary on a scale block (a shard
// takes whole weight blocks along N, whole activation groups and weight blocks along K).
std::string shard_blocker(const LayerOperands& ops, ParallelStyle style, int degree) {
  const bool row = style == ParallelStyle::row;
  const int64_t dim = row ? ops.k : ops.n;
  if (dim % degree != 0) return fmt::format("{} = {} is not divisible by {}", row ? "K" : "N", dim, degree);
  const int64_t width = dim / degree;
  if (!row && ops.w_scaling.block_rows > 1 && width % ops.w_scaling.block_rows != 0) {
    return fmt::format("a shard of N = {} / {} = {} columns does not hold whole weight blocks of {} rows", ops.n,
                       degree, width, ops.w_scaling.block_rows);
  }
  if (row && ops.block_scaled() && width % ops.scale_block_k() != 0) {
    return fmt::format("a shard of K = {} / {} = {} columns does not hold whole scale blocks of {} along K", ops.k,
                       degree, width, ops.scale_block_k());
  }
  return "";
}

// The scale columns [kb0, kb0 + kbs) of a [rows, cols] scale array (a k-blocked operand's K shard).
std::vector<float> scale_columns(std::span<const float> s, int64_t rows, int64_t cols, int64_t kb0, int64_t kbs) {
  std::vector<float> out(static_cast<size_t>(rows * kbs));
  for (int64_t r = 0; r < rows; ++r) std::copy_n(&s[r * cols + kb0], kbs, &out[r * kbs]);
  return out;
}

// Shard `t` of `degree` (shard_blocker said it can be cut): columns [t*N/T, (t+1)*N/T) (views; a
// per-block weight's scale rows with them), or K columns [t*K/T, (t+1)*K/T) (copies; the bias on shard
// 0 only; a k-blocked operand's scale columns of those blocks, other scales whole).
LayerOperands shard(const LayerOperands& ops, ParallelStyle style, int degree, int t) {
  LayerOperands s = ops;
  s.name = fmt::format("{} [shard {}/{}]", ops.name, t, degree);
  if (style == ParallelStyle::column) {
    const int64_t n = ops.n / degree, n0 = n * t;
    const int64_t br = ops.w_scaling.block_rows, sc = ops.w_scaling.scale_cols(ops.k);
    s.n = n;
    s.w_q = ops.w_q.subspan(static_cast<size_t>(n0 * ops.k), static_cast<size_t>(n * ops.k));
    s.w_scale = ops.w_scale.subspan(static_cast<size_t>(n0 / br * sc), static_cast<size_t>(n / br * sc));
    if (ops.has_bias()) s.bias = ops.bias.subspan(static_cast<size_t>(n0), static_cast<size_t>(n));
    return s;
  }
  struct Holder {
    std::vector<int8_t> a, w;
    std::vector<float> sa, sw;
    std::shared_ptr<const void> parent;
  };
  auto h = std::make_shared<Holder>();
  h->parent = ops.keepalive;
  const int64_t k = ops.k / degree, k0 = k * t;
  h->a.resize(static_cast<size_t>(ops.m * k));
  h->w.resize(static_cast<size_t>(ops.n * k));
  for (int64_t r = 0; r < ops.m; ++r) std::copy_n(&ops.a_q[r * ops.k + k0], k, &h->a[r * k]);
  for (int64_t r = 0; r < ops.n; ++r) std::copy_n(&ops.w_q[r * ops.k + k0], k, &h->w[r * k]);
  s.k = k;
  s.a_q = h->a;
  s.w_q = h->w;
  if (ops.block_scaled()) {
    const int64_t bk = ops.scale_block_k();
    if (ops.a_scaling.k_blocked()) {
      h->sa = scale_columns(ops.a_scale, ops.a_scaling.scale_rows(ops.m), ops.a_scaling.scale_cols(ops.k), k0 / bk, k / bk);
      s.a_scale = h->sa;
    }
    if (ops.w_scaling.k_blocked()) {
      h->sw = scale_columns(ops.w_scale, ops.w_scaling.scale_rows(ops.n), ops.w_scaling.scale_cols(ops.k), k0 / bk, k / bk);
      s.w_scale = h->sw;
    }
  }
  s.checked_a = {}, s.checked_w = {};
  if (t > 0) s.bias = {};
  s.keepalive = h;
  return s;
}

void note_once(std::string& joined, const std::string& s) {
  if (s.empty() || joined.find(s) != std::string::npos) return;
  joined += (joined.empty() ? "" : " | ") + s;
}

struct DegreeRun {
  std::vector<uint16_t> observed, predicted, declared;  // predicted/declared empty: none
  bool compared = true;  // false: this process only ran its shards (ShardRunner returned nullopt)
};

DegreeRun run_degree(Arm& arm, const ArmInfo& info, const LayerOperands& ops, ParallelStyle style, int degree,
                     Collective& collective, const ReductionModel& declared, const TpOptions& o, TpDegree& d) {
  const int64_t m = ops.m, n = ops.n;
  DegreeRun run;
  Partials obs_parts, pred_parts;
  bool predicted = true;
  std::vector<int64_t> rows(static_cast<size_t>(m));
  std::iota(rows.begin(), rows.end(), 0);
  std::vector<LayerOperands> shards;
  for (int t = 0; t < degree; ++t) shards.push_back(shard(ops, style, degree, t));
  std::vector<ArmOutput> outs;
  if (o.run_shards) {
    std::optional<std::vector<ArmOutput>> got = o.run_shards(arm, shards);
    if (!got) {
      run.compared = false;
      return run;
    }
    QC_CHECK(got->size() == shards.size(), "C8: the shard runner returned {} outputs for {} shards", got->size(),
             shards.size());
    outs = std::move(*got);
  } else {
    for (const LayerOperands& s : shards) outs.push_back(arm.run(s));
  }
  d.placement = o.placement;
  for (int t = 0; t < degree; ++t) {
    const LayerOperands& s = shards[static_cast<size_t>(t)];
    ArmOutput& out = outs[static_cast<size_t>(t)];
    QC_INPUT(static_cast<int64_t>(out.y.size()) == s.m * s.n, "arm {} returned {} outputs for shard `{}`, expected {}x{}",
             info.label, out.y.size(), s.name, s.m, s.n);
    note_once(d.kernel, out.record.kernel);
    ClaimPredictor claims(info, s);
    std::string why;
    const std::string claim = claims.claim(out.record, m, o.use_records, why);
    note_once(d.claim, claim.empty() ? "none" : claim);
    std::vector<uint16_t> pv;
    if (!claims.predict(out.record, m, rows, o.use_records, pv, why)) {
      predicted = false;
      note_once(d.note, why);
    }
    obs_parts.push_back(std::move(out.y));
    pred_parts.push_back(std::move(pv));
  }
  if (style == ParallelStyle::column) {
    // Each rank holds its columns whole: the all-gather is a copy.
    const int64_t w = n / degree;
    run.observed.resize(static_cast<size_t>(m * n));
    if (predicted) run.predicted.resize(run.observed.size());
    for (int t = 0; t < degree; ++t) {
      for (int64_t r = 0; r < m; ++r) {
        std::copy_n(&obs_parts[t][r * w], w, &run.observed[r * n + t * w]);
        if (predicted) std::copy_n(&pred_parts[t][r * w], w, &run.predicted[r * n + t * w]);
      }
    }
    if (predicted) run.declared = run.predicted;
    return run;
  }
  if (degree == 1) {
    run.observed = std::move(obs_parts[0]);
    if (predicted) run.predicted = pred_parts[0], run.declared = pred_parts[0];
    return run;
  }
  CollectiveOutcome c = collective.all_reduce(obs_parts);
  d.algorithm = c.algorithm;
  run.observed = std::move(c.out);
  if (predicted) {
    const ReductionModel recorded = parse_reduction_model(c.algorithm, "the collective's record");
    run.predicted = reduce_closed_form(o.use_records ? recorded : declared, pred_parts);
    run.declared = reduce_closed_form(declared, pred_parts);
  }
  return run;
}

}  // namespace

LayerTp layer_tp(Arm& arm, const LayerOperands& ops, const TpOptions& o) {
  ops.validate();
  QC_INPUT(!o.degrees.empty(), "--tp: expected at least one degree");
  for (int t : o.degrees) QC_INPUT(t >= 1, "--tp: expected degrees >= 1, found {}", t);
  QC_INPUT(o.style == "auto" || o.style == "column" || o.style == "row",
           "--tp-style: expected auto, column or row, found `{}`", o.style);
  LayerTp r;
  r.layer = ops.name, r.m = ops.m, r.n = ops.n, r.k = ops.k;
  r.style = o.style == "auto" ? parallel_style_of(ops.name) : o.style == "row" ? ParallelStyle::row : ParallelStyle::column;
  const ReductionModel declared = parse_reduction_model(o.declared, "--reduction");
  std::unique_ptr<Collective> collective = make_collective(o.collective.empty() ? o.declared : o.collective);
  r.collective = collective->label(), r.declared = declared.name();
  const ArmInfo info = arm.info();
  std::optional<DegreeRun> base;
  int base_degree = 0;
  std::vector<std::optional<std::string>> verdicts;
  std::string last_algorithm;
  bool declared_failed = false;
  for (int degree : o.degrees) {
    TpDegree d;
    d.degree = degree;
    if (std::string why = shard_blocker(ops, r.style, degree); !why.empty()) {
      d.applicable = false;
      d.note = std::move(why);
      r.degrees.push_back(std::move(d));
      continue;
    }
    DegreeRun run = run_degree(arm, info, ops, r.style, degree, *collective, declared, o, d);
    if (!run.compared) {
      r.compared = false;
      continue;
    }
    d.elements = static_cast<int64_t>(run.observed.size());
    const bool has_pred = !run.predicted.empty();
    if (has_pred) {
      d.predicted_mismatch = d.declared_mismatch = 0;
      for (size_t i = 0; i < run.observed.size(); ++i) {
        d.predicted_mismatch += run.observed[i] != run.predicted[i];
        d.declared_mismatch += run.observed[i] != run.declared[i];
      }
    }
    if (!base) {
      base = std::move(run);
      base_degree = degree;
      d.observed_diff = 0;
      if (has_pred) d.predicted_diff = 0, d.mispredicted = d.predicted_mismatch;
    } else {
      const bool both = has_pred && !base->predicted.empty();
      if (both) d.predicted_diff = 0, d.mispredicted = 0;
      for (size_t i = 0; i < run.observed.size(); ++i) {
        const bool od = run.observed[i] != base->observed[i];
        ElementDiff e{static_cast<int64_t>(i) / ops.n, static_cast<int64_t>(i) % ops.n, base->observed[i],
                      run.observed[i], std::nullopt};
        if (both) {
          e.predicted = run.predicted[i];
          const bool pd = run.predicted[i] != base->predicted[i];
          d.predicted_diff += pd;
          if (pd != od || run.observed[i] != run.predicted[i]) {
            ++d.mispredicted;
            if (static_cast<int>(d.first_mispredicted.size()) < o.max_listed) d.first_mispredicted.push_back(e);
          }
        }
        if (od) {
          ++d.observed_diff;
          if (static_cast<int>(d.first.size()) < o.max_listed) d.first.push_back(e);
        }
      }
    }
    // Invariant: no element moved (and none was predicted to); predicted: the differing set and every
    // value as predicted.
    if (d.observed_diff == 0 && d.predicted_diff <= 0 && d.mispredicted <= 0) {
      d.verdict = kInvariant;
    } else if (d.mispredicted == 0) {
      d.verdict = kVariantPredicted;
    } else {
      d.verdict = kVariantUnexplained;
    }
    if (!d.algorithm.empty() && !last_algorithm.empty() && d.algorithm != last_algorithm) {
      r.thresholds.push_back(fmt::format("the collective's recorded algorithm changes from {} to {} at degree {}",
                                         last_algorithm, d.algorithm, degree));
    }
    if (!d.algorithm.empty()) last_algorithm = d.algorithm;
    if (d.declared_mismatch > 0 && !declared_failed) {
      declared_failed = true;
      r.thresholds.push_back(fmt::format("the declared model {} first fails at degree {} ({} of {} elements off)",
                                         declared.name(), degree, d.declared_mismatch, d.elements));
    }
    verdicts.push_back(d.verdict);
    r.degrees.push_back(std::move(d));
  }
  (void)base_degree;
  r.verdict = combine_invariance(verdicts);
  return r;
}

using invariance_detail::count_or_null;

nlohmann::json to_json(const LayerTp& r) {
  nlohmann::json degrees = nlohmann::json::array();
  for (const TpDegree& d : r.degrees) {
    const nlohmann::json lists = invariance_detail::diff_lists(d.first, d.first_mispredicted, "first_degree");
    degrees.push_back({{"degree", d.degree}, {"applicable", d.applicable}, {"note", d.note}, {"kernel", d.kernel},
                       {"claim", d.claim}, {"algorithm", d.algorithm}, {"placement", d.placement}, {"elements", d.elements},
                       {"predicted_mismatch", count_or_null(d.predicted_mismatch)},
                       {"observed_diff", d.applicable ? nlohmann::json(d.observed_diff) : nlohmann::json()},
                       {"predicted_diff", count_or_null(d.predicted_diff)},
                       {"predicted_equals_observed", d.mispredicted < 0 ? nlohmann::json() : nlohmann::json(d.mispredicted == 0)},
                       {"mispredicted", count_or_null(d.mispredicted)},
                       {"declared_mismatch", count_or_null(d.declared_mismatch)}, {"first", lists["first"]},
                       {"first_mispredicted", lists["first_mispredicted"]}, {"verdict", d.verdict ? nlohmann::json(*d.verdict) : nlohmann::json()}});
  }
  return {{"layer", r.layer}, {"m", r.m}, {"n", r.n}, {"k", r.k}, {"style", parallel_style_name(r.style)},
          {"collective", r.collective}, {"declared", r.declared}, {"degrees", degrees}, {"thresholds", r.thresholds},
          {"verdict", r.verdict ? nlohmann::json(*r.verdict) : nlohmann::json()}};
}

std::string describe(const LayerTp& r) {
  std::string placement;
  for (const TpDegree& d : r.degrees) {
    if (!d.placement.empty()) placement = d.placement;
  }
  std::string s = fmt::format("{} (M={} N={} K={}), {}: collective {}, declared model {}{}\n", r.layer, r.m, r.n, r.k,
                              parallel_style_name(r.style), r.collective, r.declared,
                              placement.empty() ? "" : ", shards run in " + placement);
  s += fmt::format("  {:>3} {:>9} {:>9} {:>9} {:>10} {:>9} {:<22} {:<14} {}\n", "TP", "elements", "pred!=obs",
                   "differ", "predicted", "pred=obs", "verdict", "algorithm", "claim");
  const auto num = [](int64_t v) { return v < 0 ? std::string("-") : std::to_string(v); };
  for (const TpDegree& d : r.degrees) {
    if (!d.applicable) {
      s += fmt::format("  {:>3} not applicable: {}\n", d.degree, d.note);
      continue;
    }
    s += fmt::format("  {:>3} {:>9} {:>9} {:>9} {:>10} {:>9} {:<22} {:<14} {}\n", d.degree, d.elements,
                     num(d.predicted_mismatch), d.observed_diff, num(d.predicted_diff),
                     d.mispredicted < 0 ? "-" : (d.mispredicted == 0 ? "yes" : "NO"), d.verdict.value_or("-"),
                     d.algorithm.empty() ? "-" : d.algorithm, d.claim);
    for (const ElementDiff& e : d.first) {
      s += fmt::format("      differs from TP {}: row {} col {}: {} -> {}{}\n", r.degrees.front().degree, e.row, e.col,
                       bits_text(e.reference), bits_text(e.observed),
                       e.predicted ? " predicted " + bits_text(*e.predicted) : std::string());
    }
    for (const ElementDiff& e : d.first_mispredicted) {
      s += fmt::format("      NOT PREDICTED: row {} col {}: observed {} predicted {}\n", e.row, e.col,
                       bits_text(e.observed), e.predicted ? bits_text(*e.predicted) : std::string("-"));
    }
    if (!d.note.empty() && d.predicted_mismatch < 0) s += "      no prediction: " + d.note + "\n";
  }
  for (const std::string& t : r.thresholds) s += "  " + t + "\n";
  s += fmt::format("  verdict: {}\n", r.verdict.value_or("nothing compared (null)"));
  return s;
}

}  // namespace qc
