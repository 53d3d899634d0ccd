// identify's confirmation (docs/identify.md, "The probes", steps 4 to 6, and "Verdicts"): the
// held-out synthetic operands every survivor must explain, the separation of classes still left
// (operands that separate them, probed through the arm where they are in jurisdiction), the list of
// surviving classes, and the verdict.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <set>

#include "checks/identify_internal.hpp"
#include "epilogue/formula_space.hpp"
#include "synth/synth.hpp"

namespace qc::identify_detail {

namespace {

// The accumulator of an operand as printed: `acc=<integer>`, or an FP8 GEMM's `d=<hex float>`.
std::string accumulator_of(const Operand& o, bool fp8) { return fp8 ? fmt::format("d={:a}", o.d) : fmt::format("acc={}", o.acc); }

nlohmann::json operand_json(const Operand& o, bool fp8) {
  nlohmann::json j = {{"sa", fmt::format("{:a}", o.sa)},
                      {"sw", fmt::format("{:a}", o.sw)},
                      {"bias", o.bias ? bits16(*o.bias, Precision::bf16) : std::string("none")}};
  if (fp8) {
    j["d"] = fmt::format("{:a}", o.d);
  } else {
    j["acc"] = o.acc;
  }
  return j;
}

}  // namespace

void Identifier::heldout() {
  // Realistic operands the probes never used: `synth` layers, one swap-AB shape and one without,
  // with a bias where the arm takes one.
  for (size_t i = 0; i < options_.heldout_m.size(); ++i) {
    SynthOptions so;
    so.shapes = options_.heldout_shapes;
    so.m = options_.heldout_m[i];
    so.seed = options_.seed + 1000 + i;
    so.bias = bias_tested_ && !bias_refused_ && i + 1 == options_.heldout_m.size();
    if (input_ == FormulaInput::fp32) so.element = "e4m3";  // vLLM's FP8 quantizers on the same values
    for (const LayerOperands& ops : synth_operands(so)) {
      const std::string id = fmt::format("heldout/{}/M={}{}", ops.name, ops.m, so.bias ? "/bias" : "");
      Observation o = observe(ops, id, true);
      r_.outputs += o.size();
      eliminate(o);
      obs_.push_back(std::move(o));
    }
  }
}

// A pair of classes with no separating operand in jurisdiction that a probe can build: the operand
// outside it (or beyond the probes' reach) that would separate them, or that the search found none.
nlohmann::json Identifier::unresolved_pair(const Candidate& a, const Candidate& b, bool bias_ok) {
  nlohmann::json e = {{"a", a.notation}, {"b", b.notation}};
  std::vector<std::string> why;
  const auto outside = find_separator(a, b, kRowsPlain, bias_ok, /*inside=*/false, &why);
  if (!outside) {
    e["separable"] = "none found";
    e["summary"] = fmt::format(
        "no operand of {} tried in jurisdiction and {} outside it (accumulators to 2^40, scales over the whole fp32 "
        "range, subnormals, with and without a bias) separates them; their class keys differ, so equality is not "
        "proved either",
        kSeparationTries * 2, kSeparationTries);
    return e;
  }
  const FormulaPoint& pa = a.at(kRowsPlain, kCols);
  const FormulaPoint& pb = b.at(kRowsPlain, kCols);
  const uint16_t ya = eval(pa, *outside);
  const uint16_t yb = eval(pb, *outside);
  const bool fp8 = input_ == FormulaInput::fp32;
  e["separable"] = why.empty() ? "in jurisdiction, beyond the probes' reach" : "outside jurisdiction";
  e["operand"] = operand_json(*outside, fp8);
  e["gives"] = {bits16(ya, pa.out), bits16(yb, pb.out)};
  e["outside"] = why;
  e["summary"] = fmt::format(
      "would separate: {}, sa={:a}, sw={:a}, bias={} gives {} vs {}{}", accumulator_of(*outside, fp8), outside->sa, outside->sw,
      outside->bias ? bits16(*outside->bias, Precision::bf16) : std::string("none"), e["gives"][0].get<std::string>(),
      e["gives"][1].get<std::string>(),
      why.empty() ? fmt::format(" (in jurisdiction, but |acc| is beyond 2^{}, what a separation probe builds)", kSeparationAccBits)
                  : fmt::format(" (outside jurisdiction: {})", fmt::join(why, "; ")));
  return e;
}

// One probe per group (and per M rows of separators): separator i on the diagonal element (i, i)
// with its own sa (row i), sw and bias (column i); every other accumulator is 0.
void Identifier::run_separation_probes(int round, const SeparationPlan& plan, std::vector<nlohmann::json>& probed) {
  int serial = 0;
  for (const auto& [shape, list] : plan) {
    const auto [m, with_bias] = shape;
    const size_t per_probe = static_cast<size_t>(std::min<int64_t>(m, kCols));
    for (size_t first = 0; first < list.size(); first += per_probe) {
      ProbeSpec spec;
      spec.m = m;
      spec.sa.assign(static_cast<size_t>(m), 0x1p-6f);
      spec.sw.assign(kCols, 0x1p-8f);
      if (with_bias) spec.bias.assign(kCols, f32_to_bf16(0.5f));
      spec.target.assign(static_cast<size_t>(m * kCols), 0);
      spec.recipes.assign(static_cast<size_t>(m * kCols), Fp8Recipe{});
      const size_t count = std::min(per_probe, list.size() - first);
      for (size_t i = 0; i < count; ++i) {
        const Operand& o = list[first + i].o;
        spec.sa[i] = o.sa;
        spec.sw[i] = o.sw;
        if (with_bias) spec.bias[i] = *o.bias;
        spec.target[i * kCols + i] = o.acc;
        spec.recipes[i * kCols + i] = o.recipe;
      }
      const std::string id = fmt::format("separate{}.{}/M={}{}", round, serial++, m, with_bias ? "/bias" : "");
      const Observation& ob = run_probe(spec, id, static_cast<int64_t>(count));
      for (size_t i = 0; i < count; ++i) {
        const Planned& pl = list[first + i];
        const FormulaPoint& pa = pl.a->at(m, kCols);
        const FormulaPoint& pb = pl.b->at(m, kCols);
        // The element as the probe built it (an FP8 `d` is the model's in column i of the layout).
        const int64_t ii = static_cast<int64_t>(i);
        const std::optional<uint16_t> b = ob.bias_at(ii);
        probed.push_back({{"a", pl.a->notation},
                          {"b", pl.b->notation},
                          {"separable", "in jurisdiction: probed"},
                          {"probe", id},
                          {"operand", operand_json(pl.o, !ob.d.empty())},
                          {"gives", {bits16(eval_element(pa, ob, ii, ii, b), pa.out), bits16(eval_element(pb, ob, ii, ii, b), pb.out)}},
                          {"summary", fmt::format("separated in jurisdiction by {}={}, sa={:a}, sw={:a}: probed through "
                                                  "the arm as element [{},{}] of {}",
                                                  ob.d.empty() ? "acc" : "d", accumulator_text(ob, i * kCols + i), pl.o.sa,
                                                  pl.o.sw, i, i, id)}});
      }
    }
  }
}

void Identifier::separate() {
  std::vector<nlohmann::json> probed;
  const bool bias_ok = bias_tested_ && !bias_refused_;
  for (int round = 0; round <= kSeparationRounds; ++round) {
    std::map<std::string, const Candidate*> reps;
    for (const Candidate& c : cands_) {
      if (c.alive) reps.emplace(c.key, &c);
    }
    if (reps.size() <= 1) break;
    std::vector<const Candidate*> rv;
    for (const auto& [k, c] : reps) rv.push_back(c);
    // Every pair when few classes are left; else each class against the first (a separator of
    // those pairs eliminates all but one side of each).
    std::vector<std::pair<const Candidate*, const Candidate*>> pairs;
    for (size_t i = 0; i < rv.size(); ++i) {
      for (size_t j = i + 1; j < rv.size() && (rv.size() <= 8 || i == 0); ++j) pairs.emplace_back(rv[i], rv[j]);
    }
    if (pairs.size() > kSeparationPairs) pairs.resize(kSeparationPairs);  // the time bound; the next round sees the rest
    // Plan: in-jurisdiction separators, grouped by probe shape (M = 40, else `rows_swapped()`) and bias.
    SeparationPlan plan;
    std::vector<nlohmann::json> unresolved;
    for (const auto& [a, b] : pairs) {
      std::optional<Operand> found;
      int64_t m = kRowsPlain;
      for (int64_t mm : {kRowsPlain, rows_swapped()}) {
        found = find_separator(*a, *b, mm, bias_ok, /*inside=*/true, nullptr);
        if (found) {
          m = mm;
          break;
        }
      }
      if (found) {
        plan[{m, found->bias.has_value()}].push_back({a, b, *found});
      } else {
        unresolved.push_back(unresolved_pair(*a, *b, bias_ok));
      }
    }
    if (round == kSeparationRounds) {
      // The rounds are spent: what is still separable in jurisdiction is reported, not probed.
      for (const auto& [shape, list] : plan) {
        for (const Planned& pl : list) {
          unresolved.push_back({{"a", pl.a->notation},
                                {"b", pl.b->notation},
                                {"separable", "in jurisdiction, not probed"},
                                {"operand", operand_json(pl.o, input_ == FormulaInput::fp32)},
                                {"summary", fmt::format("would separate in jurisdiction: {}, sa={:a}, sw={:a} (not probed: "
                                                        "the {} separation rounds are spent)",
                                                        accumulator_of(pl.o, input_ == FormulaInput::fp32), pl.o.sa, pl.o.sw,
                                                        kSeparationRounds)}});
        }
      }
      plan.clear();
    }
    if (plan.empty()) {
      r_.separation = probed;
      for (auto& e : unresolved) r_.separation.push_back(std::move(e));
      return;
    }
    run_separation_probes(round, plan, probed);
  }
  r_.separation = probed;
}

std::vector<std::string> Identifier::named_without_bias(const Candidate& c) const {
  std::vector<std::string> out;
  for (const auto& [key, names] : named_by_key_) {
    if (key.find(" dispatch [") != std::string::npos || key.substr(0, key.find(" | ")) != c.plain_key) continue;
    for (const std::string& n : names) {
      if (std::find(out.begin(), out.end(), n) == out.end()) out.push_back(n);
    }
  }
  return out;
}

nlohmann::json Identifier::class_list() const {
  std::map<std::string, std::vector<const Candidate*>> classes;
  for (const Candidate& c : cands_) {
    if (c.alive) classes[c.key].push_back(&c);
  }
  nlohmann::json out = nlohmann::json::array();
  for (const auto& [key, members] : classes) {
    // The other members (every point has its own notation), up to 8.
    nlohmann::json ms = nlohmann::json::array();
    for (size_t i = 1; i < members.size() && ms.size() < 8; ++i) ms.push_back(members[i]->notation);
    auto it = named_by_key_.find(key);
    out.push_back({{"formula", members.front()->notation},
                   {"parameters", members.front()->dispatch ? nlohmann::json("shape dispatch") : describe_point(members.front()->main)},
                   {"key", key},
                   {"members", members.size()},
                   {"member_formulas", ms},
                   {"named", it == named_by_key_.end() ? nlohmann::json::array() : nlohmann::json(it->second)}});
  }
  return out;
}

void Identifier::conclude() {
  if (alive_classes(false) > 1) separate();
  std::set<std::string> keys;
  for (const Candidate& c : cands_) {
    if (c.alive) keys.insert(c.key);
  }
  int64_t acc_wrong = 0;
  for (const Observation& o : obs_) acc_wrong += o.acc_wrong;
  r_.candidates = {{"space", formula_space(input_).size()},
                   {"named_dispatches", cands_.size() - formula_space(input_).size()},
                   {"survivors", class_list()}};
  {
    std::set<std::string> all;
    for (const Candidate& c : cands_) all.insert(c.key);
    r_.candidates["classes"] = all.size();
  }
  if (acc_wrong > 0) {
    // The exposed accumulators are evidence about the arm's accumulation, not about which formula
    // turns its outputs out: reported with every verdict, decided by the outputs alone.
    std::vector<std::string> first;
    int64_t exposed = 0;
    for (const Observation& o : obs_) {
      exposed += o.acc_exposed;
      for (const std::string& f : o.acc_first) {
        if (first.size() < 3) first.push_back(f);
      }
    }
    r_.accumulator = {{"exposed", exposed}, {"differ", acc_wrong}, {"first", first}};
  }
  if (keys.size() == 1) {
    const Candidate* rep = nullptr;
    for (const Candidate& c : cands_) {
      if (c.alive && !rep) rep = &c;
    }
    r_.verdict = "identified";
    r_.formula = rep->notation;
    auto it = named_by_key_.find(rep->key);
    if (it != named_by_key_.end()) {
      r_.named = it->second;
    } else if (rep->refuses_bias()) {
      // A kernel that takes no bias is, on its jurisdiction, the named formula without its bias term.
      for (const std::string& n : named_without_bias(*rep)) r_.named.push_back(n + " (no bias)");
    }
    r_.matching = r_.outputs;
    r_.reason = fmt::format("one equivalence class is left after {} probes and explains all {} held-out outputs", r_.probes.size(),
                            r_.outputs);
    return;
  }
  if (keys.size() > 1) {
    r_.verdict = "ambiguous";
    r_.matching = r_.outputs;
    int64_t outside = 0, unprobed = 0, none = 0, separation_probes = 0;
    for (const auto& e : r_.separation) {
      outside += e["separable"] == "outside jurisdiction";
      none += e["separable"] == "none found";
      unprobed += e["separable"] != "outside jurisdiction" && e["separable"] != "none found" && e["separable"] != "in jurisdiction: probed";
    }
    for (const auto& p : r_.probes) separation_probes += p["id"].get<std::string>().rfind("separate", 0) == 0;
    r_.reason = fmt::format(
        "{} classes agree on every probe ({} designed, {} built from separating operands) and every held-out output; "
        "of the pairs left, {} would be separated by an operand outside jurisdiction, {} by an operand in jurisdiction "
        "that no probe ran (below), {} by none the search found (different class keys prove no difference; equal "
        "outputs on every operand tried prove no equality: docs/identify.md, \"Verdicts\")",
        keys.size(), static_cast<int64_t>(r_.probes.size()) - separation_probes, separation_probes, outside, unprobed, none);
    return;
  }
  r_.verdict = "unexplained";
  describe_unexplained();
  if (!r_.nearest.empty()) {
    const auto& n0 = r_.nearest[0];
    r_.matching = 0;
    // The nearest candidate's explained share of the held-out outputs.
    const std::string f = n0["formula"].get<std::string>();
    for (const Candidate& c : cands_) {
      if (c.notation != f) continue;
      for (const Observation& o : obs_) {
        if (o.heldout) r_.matching += o.size() - disagreements(c, o);
      }
      break;
    }
  }
  r_.reason = "no candidate of the formula space explains every output";
}

}  // namespace qc::identify_detail
