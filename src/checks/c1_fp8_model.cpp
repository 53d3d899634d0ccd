// C1 for FP8 arms: measuring the arm's accumulation model (c1_fp8_model.hpp, docs/accumulation.md).
//
// The probes are fixed designs (../shared/reference/fp8-accumulation.md: one large term plus small
// terms to read off the kept bits, sums whose truncated and rounded results differ, terms placed
// across K boundaries): each is a dot product with a few nonzero terms, run through the arm's own
// `fp8_accumulate` in batches (probe i is row i of `a` and row i of `w`; its output the diagonal
// element d[i,i]). A parameter set explains a probe when `accum_model::evaluate` (the one evaluation
// of a model) gives the arm's fp32 bits. The measurement eliminates parameter sets in two stages:
//   1. structure: (step_k, interleave, promote_steps, splits) under a few representative arithmetics, against
//      the `structure` probes (a term 2^6 then two terms 2^-18 straddling a position j: the small
//      terms survive only if a promotion or split boundary separates them from the large one; the
//      outcome does not depend on the bits kept as long as 8 <= bits <= 24 and promotion is fp32);
//   2. arithmetic: for every surviving structure, every term precision (exact or 8..25 bits, rz or
//      rn, either alignment rule), result precision (8..23 bits, rz or rn) and promotion add
//      (23, 22, 21, 20, 16 or 13 bits, rz or rn), against every probe (cheap probes first, and a
//      probe that eliminates a parameter set moves forward: the order adapts, the set checked not).
// The survivors are one equivalence class (on these probes); a parameter's evidence is the first
// probe that each single-field alternative fails to predict.
#include "checks/c1_fp8_model.hpp"

#include "checks/c1_fp8_probes.hpp"
#include "checks/fp8_model_fields.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <optional>
#include <random>
#include <set>
#include <tuple>

#include "accum/fp8_model.hpp"
#include "core/parallel.hpp"
#include "qconform/error.hpp"
#include "qconform/numerics.hpp"

namespace qc {

namespace {

using fp8_fields::canonical;
using fp8_fields::key;
using fp8_fields::same;
using fp8_fields::same_spelling;

std::string fbits(float f) { return fmt::format("{:#010x} ({:.9g})", f32_bits(f), f); }

// Dense rows of a probe.
struct Rows {
  std::vector<uint8_t> a, w;
};
Rows rows_of(const Fp8Probe& p) {
  Rows r{std::vector<uint8_t>(static_cast<size_t>(p.k), 0), std::vector<uint8_t>(static_cast<size_t>(p.k), 0)};
  for (const auto& t : p.terms) {
    r.a[static_cast<size_t>(t.pos)] = t.a;
    r.w[static_cast<size_t>(t.pos)] = t.w;
  }
  return r;
}

float predict(const Fp8AccumModel& m, const Rows& r, int64_t k) {
  return accum_model::evaluate(m, r.a.data(), Fp8Format::e4m3, r.w.data(), Fp8Format::e4m3, k);
}

// "split_k 6 (reduction scheme 2)" when a run's record says cuBLASLt did not make one pass.
std::string split_k_note(const nlohmann::json& record) {
  const nlohmann::json* extra = record.contains("extra") ? &record.at("extra") : &record;
  if (!extra->is_object() || !extra->contains("split_k") || !extra->at("split_k").is_number_integer()) return "";
  const long long s = extra->at("split_k").get<long long>();
  if (s <= 1) return "";
  return fmt::format("split_k {} (reduction scheme {})", s, extra->value("reduction_scheme", -1LL));
}

class Measurer {
 public:
  Measurer(Arm& arm, const Fp8MeasureOptions& o) : arm_(arm), o_(o) {}

  Fp8Measurement run() {
    const auto t0 = std::chrono::steady_clock::now();
    r_.arm = arm_.info();
    r_.declared_name = r_.arm.accumulation_model;
    if (!r_.declared_name.empty()) {
      try {
        r_.declared = canonical(fp8_accumulation_model(r_.declared_name).model);
        r_.declared_known = true;
      } catch (const Error&) {
        r_.declared_known = false;
      }
    }
    const auto since = [](std::chrono::steady_clock::time_point t) {
      return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
    };
    r_.probes = design_fp8_probes(o_.seed);
    if (o_.through_run) {
      r_.observed_through = "run (unit scales, the arm's own output rounding)";
      calibrate_output();
      for (Fp8Probe& v : readable_fp8_variants(r_.probes)) r_.probes.push_back(std::move(v));
    } else {
      r_.observed_through = "fp8_accumulate (the unscaled fp32 d)";
    }
    run_probes();
    r_.seconds_probes = since(t0);
    const auto t1 = std::chrono::steady_clock::now();
    rows_.reserve(r_.probes.size());
    for (const Fp8Probe& p : r_.probes) rows_.push_back(rows_of(p));
    const std::vector<Fp8AccumModel> structures = stage_structure();
    std::vector<Fp8AccumModel> survivors;
    if (!structures.empty()) survivors = stage_arithmetic(structures);
    conclude(survivors);
    r_.seconds_search = since(t1);
    const auto t2 = std::chrono::steady_clock::now();
    confirm();
    r_.seconds_confirm = since(t2);
    r_.seconds = since(t0);
    return r_;
  }

 private:
  // Every probe through the arm, batched by K: probe i is row i of a and of w, its output d[i,i].
  void run_probes() {
    std::vector<int64_t> ks;
    for (const Fp8Probe& p : r_.probes) {
      if (std::find(ks.begin(), ks.end(), p.k) == ks.end()) ks.push_back(p.k);
    }
    for (int64_t k : ks) {
      std::vector<size_t> idx;
      for (size_t i = 0; i < r_.probes.size(); ++i) {
        if (r_.probes[i].k == k) idx.push_back(i);
      }
      const int64_t p = static_cast<int64_t>(idx.size());
      const int64_t n = (p + 15) / 16 * 16, m = std::max<int64_t>((p + 15) / 16 * 16, o_.min_rows);
      std::vector<uint8_t> a(static_cast<size_t>(m * k), 0), w(static_cast<size_t>(n * k), 0);
      for (int64_t i = 0; i < p; ++i) {
        for (const auto& t : r_.probes[idx[static_cast<size_t>(i)]].terms) {
          a[static_cast<size_t>(i * k + t.pos)] = t.a;
          w[static_cast<size_t>(i * k + t.pos)] = t.w;
        }
      }
      nlohmann::json record;
      const std::vector<float> d = observe(a, w, m, n, k, record);
      if (r_.record.is_null()) r_.record = record;
      const std::string note = split_k_note(record);
      if (!note.empty()) r_.split_k_runs.push_back(fmt::format("probes M={} N={} K={}: {}", m, n, k, note));
      for (int64_t i = 0; i < p; ++i) r_.probes[idx[static_cast<size_t>(i)]].observed = d[static_cast<size_t>(i * n + i)];
    }
  }

  bool is_readable(size_t probe) const { return r_.probes[probe].id.rfind("readable/", 0) == 0; }

  bool explains(const Fp8AccumModel& m, size_t probe) const {
    return matches(predict(m, rows_[probe], r_.probes[probe].k), r_.probes[probe].observed);
  }

  // Whether the arm's observation agrees with a model's `d`: bit for bit through `fp8_accumulate`;
  // through `run`, as Fp8MeasureOptions::through_run says (the output is some conversion of `d`).
  bool matches(float predicted, float observed) const {
    if (!o_.through_run) return f32_bits(predicted) == f32_bits(observed);
    const auto exact_in = [&](bool f16) {
      return f16 ? f16_to_f32(f32_to_f16(predicted)) == predicted : bf16_to_f32(f32_to_bf16(predicted)) == predicted;
    };
    if (std::isfinite(predicted) && exact_in(false) && exact_in(true)) return f32_bits(predicted) == f32_bits(observed);
    const float mag = std::fabs(predicted);
    if (!(mag >= 0x1p-14f && mag <= 65504.0f)) return true;  // an fp16 path would leave its normal range: no constraint
    // The two neighbours of `d` in the output format (every monotone chain of roundings ends on one).
    const bool f16 = output_f16_;
    const uint16_t down = f16 ? f32_to_f16(predicted) : f32_to_bf16_rz(predicted);
    const float dv = f16 ? f16_to_f32(down) : bf16_to_f32(down);
    uint16_t other = down;
    if (dv != predicted) other = std::fabs(dv) < mag ? static_cast<uint16_t>(down + 1) : static_cast<uint16_t>(down - 1);
    const float ov = f16 ? f16_to_f32(other) : bf16_to_f32(other);
    return f32_bits(observed) == f32_bits(dv) || f32_bits(observed) == f32_bits(ov);
  }

  // The arm's observation of one batch: `d` through `fp8_accumulate`, or through `run` the layer with
  // unit scales and no bias, the output widened to fp32.
  std::vector<float> observe(const std::vector<uint8_t>& a, const std::vector<uint8_t>& w, int64_t m, int64_t n, int64_t k,
                             nlohmann::json& record) {
    if (!o_.through_run) {
      std::vector<float> d = arm_.fp8_accumulate(a.data(), w.data(), m, n, k, record, o_.threads);
      QC_INPUT(static_cast<int64_t>(d.size()) == m * n, "arm {}: fp8_accumulate returned {} outputs, expected {} ({}x{})",
               r_.arm.label, d.size(), m * n, m, n);
      return d;
    }
    ArmOutput out = arm_.run(unit_scale_layer(a, w, m, n, k, fmt::format("fp8-probe-{}x{}x{}", m, n, k)));
    QC_INPUT(static_cast<int64_t>(out.y.size()) == m * n, "arm {}: run returned {} outputs for an FP8 probe, expected {} ({}x{})",
             r_.arm.label, out.y.size(), m * n, m, n);
    nlohmann::json rec;
    to_json(rec, out.record);
    record = rec;
    std::vector<float> d(out.y.size());
    for (size_t i = 0; i < d.size(); ++i) d[i] = output_f16_ ? f16_to_f32(out.y[i]) : bf16_to_f32(out.y[i]);
    return d;
  }

  // An e4m3 layer of codes `a` [m,k], `w` [n,k] with unit scales and no bias: what `run` is given here.
  static LayerOperands unit_scale_layer(const std::vector<uint8_t>& a, const std::vector<uint8_t>& w, int64_t m, int64_t n,
                                        int64_t k, std::string name) {
    OperandStorage st;
    st.a_q.assign(reinterpret_cast<const int8_t*>(a.data()), reinterpret_cast<const int8_t*>(a.data()) + a.size());
    st.w_q.assign(reinterpret_cast<const int8_t*>(w.data()), reinterpret_cast<const int8_t*>(w.data()) + w.size());
    st.a_scale.assign(static_cast<size_t>(m), 1.0f);
    st.w_scale.assign(static_cast<size_t>(n), 1.0f);
    st.a_type = st.w_type = ElementType::e4m3;
    return make_operands(std::move(name), m, n, k, std::move(st), "FP8 accumulation probe through run, unit scales");
  }

  // Through `run`: which format the arm returns, from d = 1 (one product 1 x 1) with unit scales.
  void calibrate_output() {
    const int64_t m = 16, n = 16, k = 16;
    std::vector<uint8_t> a(static_cast<size_t>(m * k), 0), w(static_cast<size_t>(n * k), 0);
    a[0] = w[0] = 0x38;  // e4m3fn 1.0
    const ArmOutput out = arm_.run(unit_scale_layer(a, w, m, n, k, "fp8-output-format"));
    QC_INPUT(out.y.size() == static_cast<size_t>(m * n), "arm {}: run returned {} outputs for a {}x{} layer", r_.arm.label,
             out.y.size(), m, n);
    QC_INPUT(out.y[0] == 0x3F80 || out.y[0] == 0x3C00,
             "arm {}: with a = w = 1.0 at k = 0 and unit scales, y[0,0] is 0x{:04x}; expected 1.0 as bf16 (0x3f80) or "
             "fp16 (0x3c00): the arm's output is not its layer's scaled product (identify measures FP8 arms that return "
             "y = epilogue(d, a_scale, w_scale))",
             r_.arm.label, out.y[0]);
    output_f16_ = out.y[0] == 0x3C00;
    r_.output_format = output_f16_ ? "fp16" : "bf16";
  }

  // Probes in [0, count) of `order` that m explains before the first it does not (count = all).
  size_t explained_prefix(const Fp8AccumModel& m, const std::vector<size_t>& order) const {
    size_t i = 0;
    while (i < order.size() && explains(m, order[i])) ++i;
    return i;
  }

  // The same, learning: a probe that eliminates `m` moves to the front of its run of equal-K
  // probes in `order` (a copy per work item), so that the next parameter sets meet the probes that
  // eliminate most first. The set of probes checked is unchanged: only the order adapts.
  std::pair<size_t, size_t> explained_prefix_adaptive(const Fp8AccumModel& m, std::vector<size_t>& order) const {
    size_t i = 0;
    while (i < order.size() && explains(m, order[i])) ++i;
    if (i == order.size()) return {i, SIZE_MAX};
    const size_t miss = order[i];
    size_t s0 = i;
    while (s0 > 0 && r_.probes[order[s0 - 1]].k == r_.probes[miss].k) --s0;
    std::rotate(order.begin() + static_cast<std::ptrdiff_t>(s0), order.begin() + static_cast<std::ptrdiff_t>(i),
                order.begin() + static_cast<std::ptrdiff_t>(i) + 1);
    return {i, miss};
  }

  // Remember the parameter set that explained the most probes before its first miss (`miss`, a
  // probe index; SIZE_MAX: none), for the report when nothing explains them all.
  void note_best(const Fp8AccumModel& m, size_t prefix, size_t miss) {
    if (prefix <= best_prefix_seen_.load(std::memory_order_relaxed) && best_) return;
    std::lock_guard lock(mu_);
    best_prefix_seen_ = std::max(best_prefix_seen_.load(), prefix);
    if (!best_ || prefix > best_prefix_) {
      best_ = m;
      best_prefix_ = prefix;
      best_miss_ = miss;
    }
  }

  // Stage 1: which (step_k, interleave, promote_steps, splits) explain the structure probes under some
  // representative arithmetic.
  std::vector<Fp8AccumModel> stage_structure() {
    std::vector<size_t> order;
    for (size_t i = 0; i < r_.probes.size(); ++i) {
      if (r_.probes[i].family == "structure" && (!o_.through_run || is_readable(i))) order.push_back(i);
    }
    std::vector<Fp8AccumModel> reps;
    for (AccumRounding pr : {AccumRounding::nearest_even, AccumRounding::toward_zero}) {
      Fp8AccumModel fp32;  // exact terms, rn23 results
      fp32.term_bits = -1;
      fp32.result_bits = 23;
      fp32.result_rounding = AccumRounding::nearest_even;
      fp32.promote_rounding = pr;
      reps.push_back(fp32);
      Fp8AccumModel narrow;  // 13-bit rz terms and results
      narrow.term_bits = 13;
      narrow.result_bits = 13;
      narrow.term_rounding = narrow.result_rounding = AccumRounding::toward_zero;
      narrow.promote_rounding = pr;
      reps.push_back(narrow);
      // 25-bit rz terms, rz fp32 results: the Hopper f16/bf16 tensor-core step (MMA-Sim), where a small
      // term beside a large one survives a step that the other two lose or keep at other boundaries.
      Fp8AccumModel wide;
      wide.term_bits = 25;
      wide.result_bits = 23;
      wide.term_rounding = wide.result_rounding = AccumRounding::toward_zero;
      wide.promote_rounding = pr;
      reps.push_back(wide);
    }
    std::vector<Fp8AccumModel> cands;
    for (int sk : {1, 2, 4, 8, 16, 32, 64, 0}) {
      for (int g : {0, 1, 2, 4, 8}) {  // K order, or steps in pairs interleaved by g (mma.sync's halves: 2)
        if (g > 0 && (sk <= g || sk % g != 0)) continue;
        for (int ps : {0, 1, 2, 3, 4, 5, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 256, 512}) {
          if (sk == 0 && ps != 0) continue;
          if (ps * std::max(sk, 1) > kFp8LongK / 2) continue;
          for (int sp : {1, 2, 3, 4, 8}) {
            Fp8AccumModel s;
            s.step_k = sk;
            s.interleave = g;
            s.promote_steps = ps;
            s.splits = sp;
            cands.push_back(s);
          }
        }
      }
    }
    std::vector<char> keep(cands.size(), 0);
    parallel_for(static_cast<int64_t>(cands.size()), o_.threads, [&](int64_t c) {
      for (const Fp8AccumModel& rep : reps) {
        if (cands[c].step_k == 0 && rep.term_bits >= 0) continue;
        Fp8AccumModel m = rep;
        m.step_k = cands[c].step_k;
        m.interleave = cands[c].interleave;
        m.promote_steps = cands[c].promote_steps;
        m.splits = cands[c].splits;
        m = canonical(m);
        const size_t prefix = explained_prefix(m, order);
        note_best(m, prefix, prefix < order.size() ? order[prefix] : SIZE_MAX);
        if (prefix == order.size()) {
          keep[c] = 1;
          break;
        }
      }
    });
    r_.candidates_tried += static_cast<int64_t>(cands.size() * reps.size());
    std::vector<Fp8AccumModel> out;
    for (size_t c = 0; c < cands.size(); ++c) {
      if (keep[c]) out.push_back(cands[c]);
    }
    if (out.empty()) contradiction("structure", order);
    return out;
  }

  // Stage 2: every arithmetic on every surviving structure, against every probe (cheap ones first).
  std::vector<Fp8AccumModel> stage_arithmetic(const std::vector<Fp8AccumModel>& structures) {
    std::vector<size_t> order(r_.probes.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    // Cheap probes first; of the long ones, the promotion probes (they separate the promotion adds)
    // before the structure probes (stage 1 used them already). Through `run`, the readable variants
    // before the originals, whose outputs constrain d only to its bf16 neighbours.
    std::stable_sort(order.begin(), order.end(), [&](size_t x, size_t y) {
      const auto key = [&](size_t i) {
        return std::make_tuple(o_.through_run && !is_readable(i), r_.probes[i].k, r_.probes[i].family == "structure");
      };
      return key(x) < key(y);
    });
    struct Terms {
      int bits;
      AccumRounding r;
      AccumAlignment al;
    };
    std::vector<Terms> terms{{-1, AccumRounding::toward_zero, AccumAlignment::exponent_sum}};
    for (int t = 8; t <= 25; ++t) {
      for (AccumRounding r : {AccumRounding::toward_zero, AccumRounding::nearest_even}) {
        for (AccumAlignment al : {AccumAlignment::exponent_sum, AccumAlignment::exact_exponent}) terms.push_back({t, r, al});
      }
    }
    std::vector<std::pair<int, AccumRounding>> results, promotes;
    for (int b = 8; b <= 23; ++b) {
      for (AccumRounding r : {AccumRounding::toward_zero, AccumRounding::nearest_even}) results.emplace_back(b, r);
    }
    // The promotion add: fp32 and a few narrower widths (a promotion narrower than the chain it
    // adds is not a design anyone ships; 13 covers "the same width as the Hopper step").
    for (int b : {23, 22, 21, 20, 16, 13}) {
      for (AccumRounding r : {AccumRounding::nearest_even, AccumRounding::toward_zero}) promotes.emplace_back(b, r);
    }
    // One work item per (structure, term spelling); the loops inside stop at the first miss.
    std::vector<std::pair<size_t, size_t>> items;
    for (size_t s = 0; s < structures.size(); ++s) {
      for (size_t t = 0; t < terms.size(); ++t) {
        if (terms[t].bits >= 0 && (structures[s].step_k < 1 || structures[s].step_k > accum_model::kMaxStepChunk)) continue;
        items.emplace_back(s, t);
      }
    }
    std::vector<std::vector<Fp8AccumModel>> found(items.size());
    std::vector<int64_t> tried(items.size(), 0);
    parallel_for(static_cast<int64_t>(items.size()), o_.threads, [&](int64_t it) {
      const Fp8AccumModel& st = structures[items[it].first];
      const Terms& tt = terms[items[it].second];
      const size_t np = st.promote_steps > 0 ? promotes.size() : 1;
      std::vector<size_t> local = order;
      for (const auto& [rb, rr] : results) {
        for (size_t pi = 0; pi < np; ++pi) {
          Fp8AccumModel m = st;
          m.term_bits = tt.bits;
          m.term_rounding = tt.r;
          m.alignment = tt.al;
          m.result_bits = rb;
          m.result_rounding = rr;
          if (st.promote_steps > 0) {
            m.promote_bits = promotes[pi].first;
            m.promote_rounding = promotes[pi].second;
          }
          const Fp8AccumModel raw = m;
          m = canonical(m);
          if (!same_spelling(raw, m)) {
            // Another spelling of a behaviour: evaluate its canonical spelling once.
            std::lock_guard lock(mu_);
            if (!respelled_.insert(key(m)).second) continue;
          }
          ++tried[it];
          const auto [prefix, miss] = explained_prefix_adaptive(m, local);
          note_best(m, prefix, miss);
          if (miss == SIZE_MAX) found[it].push_back(m);
        }
      }
    });
    std::vector<Fp8AccumModel> out;
    for (size_t it = 0; it < items.size(); ++it) {
      r_.candidates_tried += tried[it];
      for (const Fp8AccumModel& m : found[it]) {
        if (std::none_of(out.begin(), out.end(), [&](const Fp8AccumModel& y) { return same(m, y); })) out.push_back(m);
      }
    }
    if (out.empty()) contradiction("arithmetic", order);
    return out;
  }

  nlohmann::json probe_json(size_t i, std::optional<float> predicted = std::nullopt) const {
    const Fp8Probe& p = r_.probes[i];
    nlohmann::json terms = nlohmann::json::array();
    if (p.family != "random") {
      for (const auto& t : p.terms) {
        terms.push_back({{"k", t.pos},
                         {"a", fmt::format("{:#04x}", t.a)},
                         {"w", fmt::format("{:#04x}", t.w)},
                         {"product", static_cast<double>(e4m3fn_to_f32(t.a)) * e4m3fn_to_f32(t.w)}});
      }
    }
    nlohmann::json j = {{"id", p.id}, {"family", p.family}, {"k", p.k}, {"terms", terms}, {"observed", fbits(p.observed)}};
    if (predicted) j["predicted"] = fbits(*predicted);
    return j;
  }

  void contradiction(const std::string& stage, const std::vector<size_t>&) {
    r_.contradiction = {{"stage", stage}, {"candidates", r_.candidates_tried}};
    if (best_ && best_miss_ != SIZE_MAX) {
      r_.contradiction["nearest"] = accumulation_formula(*best_);
      r_.contradiction["nearest_explained_probes"] = best_prefix_;
      r_.contradiction["probe"] = probe_json(best_miss_, predict(*best_, rows_[best_miss_], r_.probes[best_miss_].k));
    }
    if (r_.declared_known) {
      for (size_t i = 0; i < r_.probes.size(); ++i) {
        if (!explains(r_.declared, i)) {
          r_.contradiction["declared_first_miss"] = probe_json(i, predict(r_.declared, rows_[i], r_.probes[i].k));
          break;
        }
      }
    }
  }

  // Smaller is simpler: K order, no promotion, one range, exact terms, k = 1, then the fewest bits.
  static std::tuple<int, int, int, int, int, int> simplicity(const Fp8AccumModel& m) {
    return {m.interleave != 0, m.promote_steps != 0, m.splits != 1, m.term_bits >= 0 ? 1 : 0, m.step_k, m.result_bits};
  }

  void conclude(const std::vector<Fp8AccumModel>& survivors) {
    if (survivors.empty()) {
      r_.measured = false;
      r_.verdict = "not a model of this family";
      const std::string probe =
          r_.contradiction.contains("probe")
              ? fmt::format("probe {} (d = {}; the nearest parameter set, which explains {} probes before it, predicts {})",
                            r_.contradiction["probe"]["id"].get<std::string>(),
                            r_.contradiction["probe"]["observed"].get<std::string>(),
                            r_.contradiction["nearest_explained_probes"].get<size_t>(),
                            r_.contradiction["probe"]["predicted"].get<std::string>())
              : std::string("every probe");
      r_.reason = fmt::format("no parameter set of the {} tried explains every probe ({} stage); contradicted by {}",
                              r_.candidates_tried, r_.contradiction["stage"].get<std::string>(), probe);
      return;
    }
    r_.measured = true;
    std::vector<Fp8AccumModel> cls = survivors;
    auto rep = cls.end();
    if (r_.declared_known) {
      rep = std::find_if(cls.begin(), cls.end(), [&](const Fp8AccumModel& m) { return same(m, r_.declared); });
    }
    if (rep == cls.end()) {
      rep = std::find_if(cls.begin(), cls.end(), [&](const Fp8AccumModel& m) { return !named_model_of(m).empty(); });
    }
    if (rep == cls.end()) {
      rep = std::min_element(cls.begin(), cls.end(), [](const Fp8AccumModel& x, const Fp8AccumModel& y) {
        return simplicity(x) < simplicity(y);
      });
    }
    r_.model = *rep;
    r_.model_name = named_model_of(r_.model);
    r_.equivalent.push_back(r_.model);
    for (const Fp8AccumModel& m : cls) {
      if (!same(m, r_.model)) r_.equivalent.push_back(m);
    }
    const std::string within = r_.model.interleave == 0
                                   ? std::string("ascending")
                                   : fmt::format("in pairs of steps over {} positions, interleaved by {}",
                                                 2 * r_.model.step_k, r_.model.interleave);
    r_.order = r_.model.splits == 1 ? within + ", single pass"
                                    : fmt::format("K in {} contiguous ranges (split-K), each {}", r_.model.splits, within);
    // Evidence: every single-field alternative and the first probe it does not predict.
    for (const char* f : fp8_fields::names()) {
      Fp8ParameterEvidence ev;
      ev.parameter = f;
      ev.value = fp8_fields::value(r_.model, f);
      ev.declared = r_.declared_known ? fp8_fields::value(r_.declared, f) : std::string("-");
      for (const Fp8AccumModel& alt : fp8_fields::alternatives(r_.model, f)) {
        Fp8ParameterEvidence::Alternative a;
        a.value = fp8_fields::value(alt, f);
        for (size_t i = 0; i < r_.probes.size(); ++i) {
          const float pr = predict(alt, rows_[i], r_.probes[i].k);
          if (!matches(pr, r_.probes[i].observed)) {
            a.probe = r_.probes[i].id;
            a.observed = r_.probes[i].observed;
            a.predicted = pr;
            break;
          }
        }
        ev.alternatives.push_back(a);
      }
      r_.evidence.push_back(std::move(ev));
    }
    if (!r_.declared_known) {
      r_.verdict = "differs from declaration";
      r_.reason = r_.declared_name.empty()
                      ? std::string("the arm declares no accumulation model")
                      : fmt::format("the arm declares `{}`, which is not a model qconform knows ({})", r_.declared_name,
                                    fmt::join(fp8_accumulation_model_names(), ", "));
    } else if (std::any_of(cls.begin(), cls.end(), [&](const Fp8AccumModel& m) { return same(m, r_.declared); })) {
      r_.verdict = "matches declaration";
      r_.reason = fmt::format("the declared model {} explains all {} probes{}", r_.declared_name, r_.probes.size(),
                              cls.size() > 1 ? fmt::format(" ({} parameter sets explain them: an equivalence class on "
                                                           "these probes)",
                                                           cls.size())
                                             : std::string(", and no other parameter set tried does"));
    } else {
      r_.verdict = "differs from declaration";
      r_.differing_fields = model_differences(r_.model, r_.declared);
      for (size_t i = 0; i < r_.probes.size(); ++i) {
        if (!explains(r_.declared, i)) {
          r_.contradiction["declared_first_miss"] = probe_json(i, predict(r_.declared, rows_[i], r_.probes[i].k));
          break;
        }
      }
      r_.reason = fmt::format("the measured model differs from the declared {} in {}", r_.declared_name,
                              fmt::join(r_.differing_fields, "; "));
      if (r_.contradiction.contains("declared_first_miss")) {
        const auto& p = r_.contradiction["declared_first_miss"];
        r_.reason += fmt::format("; e.g. probe {}: the arm gives {}, the declared model {}", p["id"].get<std::string>(),
                                 p["observed"].get<std::string>(), p["predicted"].get<std::string>());
      }
    }
  }

  // Random realistic operands the probes never used: the measured (and the declared) model
  // against the arm, bit for bit.
  void confirm() {
    Fp8ConfirmCodes codes(o_.seed);
    int64_t declared_matching = 0;
    for (const auto& sh : o_.confirm_shapes) {
      const int64_t m = sh[0], n = sh[1], k = sh[2];
      const std::vector<uint8_t> a = codes.next(m * k), w = codes.next(n * k);
      nlohmann::json record;
      const std::vector<float> d = observe(a, w, m, n, k, record);
      const std::string note = split_k_note(record);
      if (!note.empty()) r_.split_k_runs.push_back(fmt::format("confirmation M={} N={} K={}: {}", m, n, k, note));
      const Fp8Gemm g{a.data(), Fp8Format::e4m3, w.data(), Fp8Format::e4m3, {m, n, k}};
      nlohmann::json row = {{"m", m}, {"n", n}, {"k", k}, {"outputs", m * n}};
      if (!note.empty()) row["split_k"] = note;
      auto count = [&](const Fp8AccumModel& model, nlohmann::json& first) {
        std::vector<float> e(static_cast<size_t>(m * n));
        fp8_model_evaluate(model, g, e.data(), o_.threads);
        int64_t same_bits = 0;
        for (size_t i = 0; i < e.size(); ++i) {
          if (matches(e[i], d[i])) {
            ++same_bits;
          } else if (first.is_null()) {
            first = fmt::format("d[{},{}]: arm {}, model {}", static_cast<int64_t>(i) / n, static_cast<int64_t>(i) % n,
                                fbits(d[i]), fbits(e[i]));
          }
        }
        return same_bits;
      };
      if (r_.measured) {
        nlohmann::json first;
        const int64_t ok = count(r_.model, first);
        row["matching"] = ok;
        if (!first.is_null()) row["first_mismatch"] = first;
        r_.confirm_matching += ok;
      }
      if (r_.declared_known) {
        nlohmann::json first;
        const int64_t ok = count(r_.declared, first);
        row["declared_matching"] = ok;
        if (!first.is_null()) row["declared_first_mismatch"] = first;
        declared_matching += ok;
      }
      r_.confirm_outputs += m * n;
      r_.confirmation.push_back(row);
    }
    if (r_.declared_known) r_.confirm_declared_matching = declared_matching;
    if (r_.measured && r_.confirm_matching != r_.confirm_outputs) {
      // The probes admit the parameter set, realistic operands do not: not this family after all.
      r_.verdict = "not a model of this family";
      std::string first;
      for (const auto& row : r_.confirmation) {
        if (row.contains("first_mismatch")) {
          first = fmt::format("M={} N={} K={} {}", row["m"].get<int64_t>(), row["n"].get<int64_t>(),
                              row["k"].get<int64_t>(), row["first_mismatch"].get<std::string>());
          break;
        }
      }
      r_.reason = fmt::format("every probe is explained by {}, but the confirmation on random operands is not: {} of {} "
                              "outputs differ (first: {})",
                              accumulation_formula(r_.model), r_.confirm_outputs - r_.confirm_matching,
                              r_.confirm_outputs, first);
    }
  }

  Arm& arm_;
  Fp8MeasureOptions o_;
  Fp8Measurement r_;
  std::vector<Rows> rows_;
  std::mutex mu_;
  std::optional<Fp8AccumModel> best_;
  std::atomic<size_t> best_prefix_seen_{0};
  std::set<std::array<int32_t, 11>> respelled_;
  bool output_f16_ = false;  // through `run`: the arm returns fp16 bit patterns (calibrate_output)
  size_t best_prefix_ = 0, best_miss_ = SIZE_MAX;
};

}  // namespace

std::vector<std::string> model_differences(const Fp8AccumModel& measured, const Fp8AccumModel& declared) {
  std::vector<std::string> out;
  const Fp8AccumModel x = canonical(measured), y = canonical(declared);
  for (const char* f : fp8_fields::names()) {
    const std::string field = f;
    // A field that does not act in one of the two is a consequence of another difference.
    if ((field == "term_rounding" || field == "alignment") && (x.term_bits < 0 || y.term_bits < 0)) continue;
    if ((field == "promote_bits" || field == "promote_rounding") && (x.promote_steps == 0 || y.promote_steps == 0)) {
      continue;
    }
    const std::string a = fp8_fields::value(x, f), b = fp8_fields::value(y, f);
    if (a != b) out.push_back(fmt::format("{}: {} (declared {})", f, a, b));
  }
  return out;
}

std::string named_model_of(const Fp8AccumModel& m) {
  for (const NamedAccumModel& r : fp8_accumulation_models()) {
    if (same(r.model, m)) return r.name;
  }
  const Fp8AccumModel c = canonical(m);
  if (c.step_k == 1 && c.term_bits < 0 && c.result_bits == 23 && c.result_rounding == AccumRounding::nearest_even) {
    if (c.splits == 1 && c.promote_steps > 0 && c.promote_bits == 23 &&
        c.promote_rounding == AccumRounding::nearest_even) {
      const std::string name = fmt::format("blocked-{}", c.promote_steps);
      if (same(fp8_accumulation_model(name).model, c)) return name;
    }
    if (c.splits > 1 && c.promote_steps == 0) {
      const std::string name = fmt::format("split-k-{}", c.splits);
      if (same(fp8_accumulation_model(name).model, c)) return name;
    }
  }
  return "";
}

Fp8Measurement measure_fp8_accumulation(Arm& arm, const Fp8MeasureOptions& options) {
  // An arm without fp8_accumulate (every INT8 arm) refuses the first probe batch with an input
  // error naming it.
  return Measurer(arm, options).run();
}

}  // namespace qc
