// C8, batch invariance: c8_invariance.hpp.
#include "checks/c8_invariance.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <numeric>
#include <set>

#include "qconform/error.hpp"
#include "synth/synth.hpp"

namespace qc {

using invariance_detail::batch_rows;
using invariance_detail::bits_text;
using invariance_detail::ClaimPredictor;

std::vector<int64_t> default_batch_sizes(int64_t m) {
  std::set<int64_t> s = {1, 2, 3, 4};
  for (int64_t b = 8; b <= 512; b += (b < 64 ? 8 : 64)) s.insert(b);  // CUDA-graph capture sizes
  for (int64_t edge : {16, 32, 64, 128}) s.insert({edge - 1, edge, edge + 1});  // CUTLASS, swap-AB, mma/wgmma
  s.insert(33);                                                            // cuBLASLt split-K (measured)
  for (int64_t p = 256; p <= (int64_t{1} << 20); p *= 2) s.insert({p - 1, p, p + 1});
  std::vector<int64_t> out;
  for (int64_t b : s) {
    if (b <= m) out.push_back(b);
  }
  if (out.empty() || out.back() != m) out.push_back(m);
  return out;
}

namespace {

struct Reference {
  ArmOutput out;
  std::vector<uint16_t> predicted;
  bool has_prediction = false;
  std::string why_not;
};

void note_once(std::string& joined, const std::string& s) {
  if (s.empty()) return;
  if (joined.empty()) return void(joined = s);
  if (joined.find(s) == std::string::npos) joined += " | " + s;
}

// The rows of each batch of one configuration: layer row indices, -1 for a synthetic mate; the
// probes (rows observed) first in `probes`, their positions in the batch in `positions`.
struct Batch {
  std::vector<int64_t> rows, probes, positions;
};

std::vector<Batch> make_batches(int64_t m, int64_t b, const std::string& mates, const std::vector<int64_t>& perm) {
  const bool replaced = mates == "replaced";
  const int64_t p = replaced ? (b + 1) / 2 : b;
  std::vector<Batch> batches;
  for (int64_t start = 0, j = 0; start < m; start += p, ++j) {
    Batch x;
    for (int64_t i = start; i < std::min(start + p, m); ++i) x.probes.push_back(perm[i]);
    const int64_t fill = b - static_cast<int64_t>(x.probes.size());
    if (replaced && j % 2 == 1) x.rows.assign(fill, -1);  // synthetic mates before the probes
    for (int64_t r : x.probes) {
      x.positions.push_back(static_cast<int64_t>(x.rows.size()));
      x.rows.push_back(r);
    }
    if (replaced && j % 2 == 0) x.rows.insert(x.rows.end(), fill, -1);
    // The last batch of the layer's own rows is filled with rows from the start (mates, not observed).
    for (int64_t i = 0; !replaced && static_cast<int64_t>(x.rows.size()) < b; ++i) x.rows.push_back(perm[i]);
    batches.push_back(std::move(x));
  }
  return batches;
}

InvarianceConfig run_config(Arm& arm, const LayerOperands& ops, ClaimPredictor& claims, const Reference& ref,
                            int64_t b, const std::string& mates, const InvarianceOptions& o, bool refined) {
  InvarianceConfig c;
  c.batch = b, c.mates = mates, c.refined = refined;
  const int64_t m = ops.m, n = ops.n;
  std::vector<int64_t> perm(static_cast<size_t>(m));
  std::iota(perm.begin(), perm.end(), 0);
  if (mates == "shuffled") {
    uint64_t state = o.seed * 0x9e3779b97f4a7c15ull + static_cast<uint64_t>(b);
    for (int64_t i = m - 1; i > 0; --i) std::swap(perm[i], perm[splitmix64(state) % static_cast<uint64_t>(i + 1)]);
  }
  bool predicted = ref.has_prediction;
  int64_t pred_diff = 0, mispred = 0, claim_mis = 0, acc_diff = 0;
  bool acc_seen = false;
  std::vector<uint16_t> pv;
  for (const Batch& x : make_batches(m, b, mates, perm)) {
    const ArmOutput out = arm.run(batch_rows(ops, x.rows, o.seed + static_cast<uint64_t>(c.runs)));
    ++c.runs;
    note_once(c.kernel, out.record.kernel);
    std::string why;
    const std::string claim = claims.claim(out.record, b, o.use_records, why);
    note_once(c.claim, claim.empty() ? "none" : claim);
    const bool has = claims.predict(out.record, b, x.probes, o.use_records, pv, why);
    if (!has) note_once(c.note, why);
    predicted = predicted && has;
    if (has && ref.has_prediction) note_once(c.stage, claims.stage_between(out.record, ref.out.record, b, m, o.use_records));
    const bool accs = out.acc && ref.out.acc;
    acc_seen = acc_seen || accs;
    for (size_t i = 0; i < x.probes.size(); ++i) {
      const int64_t r = x.probes[i], pos = x.positions[i];
      for (int64_t col = 0; col < n; ++col) {
        const uint16_t got = out.y[pos * n + col], want = ref.out.y[r * n + col];
        const bool od = got != want;  // bit patterns: signed zeros and NaN payloads count
        ElementDiff e{r, col, want, got, std::nullopt};
        if (has && ref.has_prediction) {
          const uint16_t p = pv[i * n + col];
          e.predicted = p;
          const bool pd = p != ref.predicted[r * n + col];
          pred_diff += pd;
          claim_mis += got != p;
          if (pd != od) {
            ++mispred;
            if (static_cast<int>(c.first_mispredicted.size()) < o.max_listed) c.first_mispredicted.push_back(e);
          }
        }
        if (od) {
          ++c.observed_diff;
          if (static_cast<int>(c.first.size()) < o.max_listed) c.first.push_back(e);
        }
        if (accs) acc_diff += (*out.acc)[pos * n + col] != (*ref.out.acc)[r * n + col];
      }
    }
    c.rows += static_cast<int64_t>(x.probes.size());
  }
  c.elements = c.rows * n;
  if (!ref.has_prediction) note_once(c.note, "reference run: " + ref.why_not);
  if (predicted) c.predicted_diff = pred_diff, c.mispredicted = mispred, c.claim_mismatch = claim_mis;
  if (acc_seen) c.acc_diff = acc_diff;
  if (c.observed_diff == 0 && (!predicted || pred_diff == 0)) {
    c.verdict = kInvariant;
  } else if (predicted && mispred == 0) {
    c.verdict = kVariantPredicted;
  } else {
    c.verdict = kVariantUnexplained;
  }
  if (c.acc_diff > 0) note_once(c.stage, "accumulation (the exposed INT32 accumulator varied: the integer alibi is broken)");
  return c;
}

// Bisects between adjacent ordered sizes whose rows differ from the reference in one and not the other.
void refine_thresholds(Arm& arm, const LayerOperands& ops, ClaimPredictor& claims, const Reference& ref,
                       const InvarianceOptions& o, LayerInvariance& r) {
  std::map<int64_t, const InvarianceConfig*> ordered;
  for (const InvarianceConfig& c : r.configs) {
    if (c.mates == "ordered") ordered[c.batch] = &c;
  }
  std::vector<std::pair<int64_t, int64_t>> edges;
  for (auto it = ordered.begin(); it != ordered.end() && std::next(it) != ordered.end(); ++it) {
    if ((it->second->observed_diff > 0) != (std::next(it)->second->observed_diff > 0)) {
      edges.emplace_back(it->first, std::next(it)->first);
    }
  }
  std::vector<InvarianceConfig> added;
  for (auto [lo, hi] : edges) {
    bool lo_var = ordered[lo]->observed_diff > 0;
    std::string lo_claim = ordered[lo]->claim, hi_claim = ordered[hi]->claim;
    while (o.refine && hi - lo > 1) {
      const int64_t mid = lo + (hi - lo) / 2;
      InvarianceConfig c = run_config(arm, ops, claims, ref, mid, "ordered", o, true);
      if ((c.observed_diff > 0) == lo_var) {
        lo = mid, lo_claim = c.claim;
      } else {
        hi = mid, hi_claim = c.claim;
      }
      added.push_back(std::move(c));
    }
    const char* lo_words = lo_var ? "differ from" : "equal";
    const char* hi_words = lo_var ? "equal" : "differ from";
    r.thresholds.push_back(fmt::format("{}: rows {} the reference run (M={}) at M' = {} (claim {}), {} it at M' = {} "
                                       "(claim {})",
                                       hi - lo == 1 ? "threshold" : "edge (not bisected)", lo_words, ops.m, lo,
                                       lo_claim, hi_words, hi, hi_claim));
  }
  for (InvarianceConfig& c : added) r.configs.push_back(std::move(c));
  std::stable_sort(r.configs.begin(), r.configs.end(), [](const InvarianceConfig& a, const InvarianceConfig& b) {
    return a.mates != b.mates ? a.mates < b.mates : a.batch < b.batch;
  });
}

}  // namespace

std::optional<std::string> combine_invariance(const std::vector<std::optional<std::string>>& verdicts) {
  const auto rank = [](const std::string& v) { return v == kVariantUnexplained ? 2 : v == kVariantPredicted ? 1 : 0; };
  std::optional<std::string> worst;
  for (const auto& v : verdicts) {
    if (v && (!worst || rank(*v) > rank(*worst))) worst = v;
  }
  return worst;
}

LayerInvariance layer_invariance(Arm& arm, const LayerOperands& ops, const InvarianceOptions& o) {
  ops.validate();
  for (const std::string& mates : o.mates) {
    QC_INPUT(mates == "ordered" || mates == "shuffled" || mates == "replaced",
             "--mates: expected ordered, shuffled or replaced, found `{}`", mates);
  }
  for (int64_t b : o.batch_sizes) QC_INPUT(b >= 1, "--batch-sizes: expected sizes >= 1, found {}", b);
  LayerInvariance r;
  r.layer = ops.name, r.m = ops.m, r.n = ops.n, r.k = ops.k;
  ClaimPredictor claims(arm.info(), ops);
  Reference ref;
  ref.out = arm.run(ops);
  std::vector<int64_t> all(static_cast<size_t>(ops.m));
  std::iota(all.begin(), all.end(), 0);
  ref.has_prediction = claims.predict(ref.out.record, ops.m, all, o.use_records, ref.predicted, ref.why_not);
  r.reference_kernel = ref.out.record.kernel;
  std::string why;
  r.reference_claim = claims.claim(ref.out.record, ops.m, o.use_records, why);
  std::vector<int64_t> sizes;
  if (o.batch_sizes.empty()) {
    sizes = default_batch_sizes(ops.m);
  } else {
    for (int64_t b : o.batch_sizes) {
      if (b <= ops.m) sizes.push_back(b);
    }
    std::sort(sizes.begin(), sizes.end());
    sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());
  }
  for (const std::string& mates : o.mates) {
    for (int64_t b : sizes) {
      if (mates == "replaced" && b < 2) continue;  // a batch of one has no mates to replace
      r.configs.push_back(run_config(arm, ops, claims, ref, b, mates, o, false));
    }
  }
  refine_thresholds(arm, ops, claims, ref, o, r);
  std::vector<std::optional<std::string>> verdicts;
  for (const InvarianceConfig& c : r.configs) verdicts.emplace_back(c.verdict);
  r.verdict = combine_invariance(verdicts);
  if (!r.verdict) r.note = "no configuration to compare (every requested batch size exceeds the layer's M, or needs mates it cannot have)";
  return r;
}

CheckResult c8_check(const std::string& arm, const std::vector<LayerInvariance>& layers) {
  std::vector<std::optional<std::string>> verdicts;
  int64_t compared = 0, variant = 0, unexplained = 0;
  nlohmann::json per_layer = nlohmann::json::array();
  for (const LayerInvariance& l : layers) {
    verdicts.push_back(l.verdict);
    compared += l.verdict.has_value();
    variant += l.verdict && *l.verdict != kInvariant;
    unexplained += l.verdict && *l.verdict == kVariantUnexplained;
    per_layer.push_back({{"layer", l.layer}, {"verdict", l.verdict ? nlohmann::json(*l.verdict) : nlohmann::json()}});
  }
  const std::optional<std::string> worst = combine_invariance(verdicts);
  const Verdict v = !worst ? Verdict::not_applicable
                    : *worst == kInvariant ? Verdict::pass
                    : *worst == kVariantPredicted ? Verdict::reported
                                                  : Verdict::fail;
  CheckResult c = make_check("C8", v);
  c.summary = !worst ? fmt::format("{}: nothing compared", arm)
                     : fmt::format("{}: {} ({} of {} layers variant, {} unexplained)", arm, *worst, variant, compared,
                                   unexplained);
  c.evidence = {{"arm", arm}, {"verdict", worst ? nlohmann::json(*worst) : nlohmann::json()}, {"layers", per_layer}};
  return c;
}

ArmInvariance arm_invariance(Arm& arm, size_t count, const std::function<LayerOperands(size_t)>& layer,
                             const InvarianceOptions& options) {
  ArmInvariance r;
  r.arm = arm.info().label;
  for (size_t i = 0; i < count; ++i) r.layers.push_back(layer_invariance(arm, layer(i), options));
  r.check = c8_check(r.arm, r.layers);
  return r;
}

nlohmann::json to_json(const ArmInvariance& r) {
  nlohmann::json layers = nlohmann::json::array();
  for (const LayerInvariance& l : r.layers) layers.push_back(to_json(l));
  return {{"arm", r.arm}, {"check", r.check}, {"layers", layers}};
}

namespace {

std::string diff_text(const ElementDiff& e) {
  return fmt::format("row {} col {}: reference {} observed {}{}", e.row, e.col, bits_text(e.reference),
                     bits_text(e.observed), e.predicted ? " predicted " + bits_text(*e.predicted) : std::string());
}

}  // namespace

namespace invariance_detail {
nlohmann::json count_or_null(int64_t v) { return v < 0 ? nlohmann::json() : nlohmann::json(v); }
nlohmann::json diff_json(const ElementDiff& e, const char* reference_key) {
  return {{"row", e.row}, {"col", e.col}, {reference_key, bits_text(e.reference)}, {"observed", bits_text(e.observed)},
          {"predicted", e.predicted ? nlohmann::json(bits_text(*e.predicted)) : nlohmann::json()}};
}
nlohmann::json diff_lists(const std::vector<ElementDiff>& first, const std::vector<ElementDiff>& mispredicted,
                          const char* reference_key) {
  nlohmann::json a = nlohmann::json::array(), b = nlohmann::json::array();
  for (const ElementDiff& e : first) a.push_back(diff_json(e, reference_key));
  for (const ElementDiff& e : mispredicted) b.push_back(diff_json(e, reference_key));
  return {{"first", a}, {"first_mispredicted", b}};
}
}  // namespace invariance_detail

using invariance_detail::count_or_null;

nlohmann::json to_json(const LayerInvariance& r) {
  nlohmann::json configs = nlohmann::json::array();
  for (const InvarianceConfig& c : r.configs) {
    const nlohmann::json lists = invariance_detail::diff_lists(c.first, c.first_mispredicted, "reference");
    configs.push_back({{"batch", c.batch}, {"mates", c.mates}, {"refined", c.refined}, {"runs", c.runs},
                       {"rows", c.rows}, {"elements", c.elements}, {"kernel", c.kernel}, {"claim", c.claim},
                       {"stage", c.stage}, {"observed_diff", c.observed_diff},
                       {"predicted_diff", count_or_null(c.predicted_diff)},
                       {"predicted_equals_observed", c.mispredicted < 0 ? nlohmann::json() : nlohmann::json(c.mispredicted == 0)},
                       {"mispredicted", count_or_null(c.mispredicted)}, {"claim_mismatch", count_or_null(c.claim_mismatch)},
                       {"accumulator_diff", count_or_null(c.acc_diff)}, {"first", lists["first"]},
                       {"first_mispredicted", lists["first_mispredicted"]},
                       {"verdict", c.verdict}, {"note", c.note}});
  }
  return {{"layer", r.layer}, {"m", r.m}, {"n", r.n}, {"k", r.k}, {"reference_kernel", r.reference_kernel},
          {"reference_claim", r.reference_claim}, {"configs", configs}, {"thresholds", r.thresholds},
          {"verdict", r.verdict ? nlohmann::json(*r.verdict) : nlohmann::json()}, {"note", r.note}};
}

std::string describe(const LayerInvariance& r) {
  std::string s = fmt::format("{} (M={} N={} K={}): reference run at M={}: {}; claim {}\n", r.layer, r.m, r.n, r.k, r.m,
                              r.reference_kernel, r.reference_claim.empty() ? "none" : r.reference_claim);
  s += fmt::format("  {:>6} {:<9} {:>5} {:>6} {:>9} {:>9} {:>8} {:<22} {}\n", "M'", "mates", "runs", "rows", "differ",
                   "predicted", "pred=obs", "verdict", "claim");
  for (const InvarianceConfig& c : r.configs) {
    s += fmt::format("  {:>6} {:<9} {:>5} {:>6} {:>9} {:>9} {:>8} {:<22} {}{}\n", c.batch, c.mates + (c.refined ? "*" : ""),
                     c.runs, c.rows, c.observed_diff, c.predicted_diff < 0 ? "-" : std::to_string(c.predicted_diff),
                     c.mispredicted < 0 ? "-" : (c.mispredicted == 0 ? "yes" : "NO"), c.verdict, c.claim,
                     c.stage.empty() ? "" : " [stage: " + c.stage + "]");
    for (const ElementDiff& e : c.first) s += "      differs: " + diff_text(e) + "\n";
    for (const ElementDiff& e : c.first_mispredicted) s += "      NOT PREDICTED: " + diff_text(e) + "\n";
    if (!c.note.empty() && c.verdict != kInvariant) s += "      no prediction: " + c.note + "\n";
    if (c.acc_diff > 0) s += fmt::format("      accumulator elements that varied: {}\n", c.acc_diff);
  }
  for (const std::string& t : r.thresholds) s += "  " + t + "\n";
  s += fmt::format("  verdict: {}{}\n", r.verdict ? *r.verdict : "nothing compared (null)",
                   r.note.empty() ? "" : " (" + r.note + ")");
  return s;
}

}  // namespace qc
