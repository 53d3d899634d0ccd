// identify's diagnosis of an unexplained arm (docs/identify.md, "Verdicts"): the nearest candidates
// with their residual statistics, the first unexplained outputs, and where the space is exceeded:
// the stage whose behaviour no candidate matches (the accumulator conversion beyond 2^24, the bias,
// the weight scales' indexing), with the nearest candidate and the outputs that separate it. An INT8
// arm's accumulator is blamed only on evidence, its exposed INT32 accumulators: the exact integer
// accumulation has no legal freedom (the integer alibi), so residuals that look like "another
// accumulator" are a conversion or epilogue difference until an exposed accumulator says otherwise.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <functional>

#include "checks/identify_internal.hpp"
#include "epilogue/formula_space.hpp"
#include "qconform/error.hpp"

namespace qc::identify_detail {

namespace {

// One output a candidate does not explain, as the printout and JSON list it.
nlohmann::json unexplained_output(const Observation& o, int64_t i, int64_t j, const FormulaPoint& p, uint16_t want) {
  const size_t e = static_cast<size_t>(i * o.n + j);
  const int64_t d = static_cast<int64_t>(bf16_ordered(o.y[e])) - bf16_ordered(want);
  nlohmann::json u = {{"probe", o.id},
                      {"m", i},
                      {"n", j},
                      {"sa", fmt::format("{:a}", o.sa[i])},
                      {"sw", fmt::format("{:a}", o.sw[j])},
                      {"bias", o.bias.empty() ? std::string("none") : bits16(o.bias[j], Precision::bf16)},
                      {"got", bits16(o.y[e], p.out)},
                      {"formula_gives", bits16(want, p.out)},
                      {"ordered_difference", d}};
  if (o.d.empty()) {
    u["acc"] = o.acc[e];
  } else {
    u["d"] = fmt::format("{:a}", o.d[e]);
  }
  return u;
}

// A region of the operands where one stage of the formula rounds (and elsewhere it is exact), for
// the stage localization: `contains` says whether an element lies in it.
struct StageRegion {
  std::string stage;   // "the accumulator conversion"
  std::string inside;  // "|acc| > 2^24"
  std::string outside;
  std::function<bool(const Observation&, size_t)> contains;
};

std::vector<StageRegion> stage_regions(FormulaInput input) {
  std::vector<StageRegion> v;
  if (input == FormulaInput::integer) {
    // The integer conversions round beyond the significand of their format: fp32 (2^24), fp16 (2^11), bf16 (2^8).
    for (int bits : {24, 11, 8}) {
      v.push_back({"the accumulator conversion", fmt::format("|acc| > 2^{}", bits), fmt::format("|acc| <= 2^{}", bits),
                   [bits](const Observation& o, size_t e) { return std::llabs(o.acc[e]) > (int64_t{1} << bits); }});
    }
  } else {
    v.push_back({"the conversion of d", "d not exact in fp16", "d exact in fp16", [](const Observation& o, size_t e) {
                   return f16_to_f32(f32_to_f16(o.d[e])) != o.d[e];
                 }});
    v.push_back({"the conversion of d", "d not exact in bf16", "d exact in bf16", [](const Observation& o, size_t e) {
                   return bf16_to_f32(f32_to_bf16(o.d[e])) != o.d[e];
                 }});
  }
  return v;
}

}  // namespace

// The residual statistics of candidate `c` over every observation it can be compared on, and the
// first outputs it does not explain.
Identifier::Residuals Identifier::residuals(const Candidate& c) const {
  Residuals r;
  for (const Observation& o : obs_) {
    if (o.refused) continue;
    if (!o.bias.empty() && c.refuses_bias()) continue;
    const FormulaPoint& p = c.at(o.m, o.n);
    for (int64_t i = 0; i < o.m; ++i) {
      for (int64_t j = 0; j < o.n; ++j) {
        const size_t e = static_cast<size_t>(i * o.n + j);
        const uint16_t want = eval_element(p, o, i, j, o.bias_at(j));
        ++r.total;
        if (want == o.y[e]) continue;
        ++r.bad;
        ++r.hist[std::clamp<int64_t>(static_cast<int64_t>(bf16_ordered(o.y[e])) - bf16_ordered(want), -4, 4)];
        if (!o.bias.empty()) {
          ++r.biased_bad;
          if (eval_element(p, o, i, j, std::nullopt) == o.y[e]) ++r.bias_ignored;
        }
        for (int64_t dj : {int64_t{1}, o.n - 1}) {
          // The element with the weight scale of a neighbouring column.
          Operand op;
          op.acc = o.acc.empty() ? 0 : o.acc[e];
          op.d = o.d.empty() ? 0.0f : o.d[e];
          op.sa = o.sa[i];
          op.sw = o.sw[(j + dj) % o.n];
          op.bias = o.bias_at(j);
          if (eval(p, op) == o.y[e]) {
            ++r.other_column;
            break;
          }
        }
        if (r.first.size() < 8) r.first.push_back(unexplained_output(o, i, j, p, want));
      }
    }
  }
  return r;
}

// Where the space is exceeded: the smallest region of one stage (the accumulator conversion beyond
// 2^24, 2^11, 2^8; an FP8 `d` not exact in fp16 or bf16) outside of which some candidate explains
// every probe output. That candidate is the nearest; it is then held to every output outside the
// region (held-out ones included). Null when no region localizes the residuals.
nlohmann::json Identifier::localize_stage(const std::vector<const Candidate*>& order) const {
  constexpr size_t kExamined = 64;  // the nearest candidates by their share of disagreements
  for (const StageRegion& region : stage_regions(input_)) {
    const Candidate* nearest = nullptr;
    int64_t nearest_inside_bad = 0;
    for (size_t k = 0; k < order.size() && k < kExamined; ++k) {
      const Candidate& c = *order[k];
      int64_t outside_bad = 0, inside_bad = 0;
      for (const Observation& o : obs_) {
        if (o.heldout || o.refused || (!o.bias.empty() && c.refuses_bias())) continue;
        const FormulaPoint& p = c.at(o.m, o.n);
        for (int64_t i = 0; i < o.m && outside_bad == 0; ++i) {
          for (int64_t j = 0; j < o.n; ++j) {
            const size_t e = static_cast<size_t>(i * o.n + j);
            if (eval_element(p, o, i, j, o.bias_at(j)) == o.y[e]) continue;
            (region.contains(o, e) ? inside_bad : outside_bad) += 1;
          }
        }
        if (outside_bad > 0) break;
      }
      if (outside_bad == 0 && inside_bad > 0 && (!nearest || inside_bad < nearest_inside_bad)) {
        nearest = &c;
        nearest_inside_bad = inside_bad;
      }
    }
    if (!nearest) continue;
    // The nearest against every output, the held-out ones included.
    int64_t inside = 0, inside_bad = 0, outside = 0, outside_bad = 0;
    std::map<int64_t, int64_t> hist;
    nlohmann::json first = nlohmann::json::array();
    for (const Observation& o : obs_) {
      if (o.refused || (!o.bias.empty() && nearest->refuses_bias())) continue;
      const FormulaPoint& p = nearest->at(o.m, o.n);
      for (int64_t i = 0; i < o.m; ++i) {
        for (int64_t j = 0; j < o.n; ++j) {
          const size_t e = static_cast<size_t>(i * o.n + j);
          const bool in = region.contains(o, e);
          (in ? inside : outside) += 1;
          const uint16_t want = eval_element(p, o, i, j, o.bias_at(j));
          if (want == o.y[e]) continue;
          (in ? inside_bad : outside_bad) += 1;
          if (!in) continue;
          ++hist[std::clamp<int64_t>(static_cast<int64_t>(bf16_ordered(o.y[e])) - bf16_ordered(want), -4, 4)];
          if (first.size() < 5) first.push_back(unexplained_output(o, i, j, p, want));
        }
      }
    }
    if (outside_bad > 0) continue;  // the held-out outputs part them outside the region too
    const int64_t ones = (hist.count(1) ? hist[1] : 0) + (hist.count(-1) ? hist[-1] : 0);
    nlohmann::json h = nlohmann::json::object();
    for (const auto& [d, count] : hist) h[d <= -4 ? "<=-4" : d >= 4 ? ">=4" : std::to_string(d)] = count;
    return {{"kind", "stage"},
            {"stage", region.stage},
            {"region", region.inside},
            {"nearest", nearest->notation},
            {"outputs_inside", inside},
            {"unexplained_inside", inside_bad},
            {"outputs_outside", outside},
            {"ordered_difference_histogram", h},
            {"first", first},
            {"summary", fmt::format(
                            "{}: no candidate of the space explains the outputs with {}; the nearest, {}, explains all {} "
                            "outputs with {} and misses {} of the {} with {} ({} of them by one step of the output type). "
                            "The behaviour of this stage is outside the space (e.g. another rounding of the conversion)",
                            region.stage, region.inside, nearest->notation, outside, region.outside, inside_bad, inside,
                            region.inside, ones)}};
  }
  return nullptr;
}

void Identifier::describe_unexplained() {
  // The nearest candidates: fewest disagreements over everything each was compared on.
  std::vector<const Candidate*> order;
  for (const Candidate& c : cands_) order.push_back(&c);
  std::stable_sort(order.begin(), order.end(), [](const Candidate* a, const Candidate* b) {
    const double ra = static_cast<double>(a->mismatches) / std::max<int64_t>(a->compared, 1);
    const double rb = static_cast<double>(b->mismatches) / std::max<int64_t>(b->compared, 1);
    return ra < rb;
  });
  r_.nearest = nlohmann::json::array();
  nlohmann::json diag = diagnose_bias_and_accumulator();
  // The residuals are analysed against the formula the arm declares, when it declares a point of
  // the space (a faulty kernel is best described against what it claims), else the nearest one.
  std::vector<const Candidate*> analysed(order.begin(), order.begin() + std::min<size_t>(3, order.size()));
  const Candidate* declared = declared_candidate();
  if (declared && std::find(analysed.begin(), analysed.end(), declared) == analysed.end()) analysed.push_back(declared);
  const Candidate* primary = declared ? declared : analysed.front();
  nlohmann::json firsts;
  const auto has = [&](const char* kind) {
    return std::any_of(diag.begin(), diag.end(), [&](const nlohmann::json& d) { return d["kind"] == kind; });
  };
  for (size_t rank = 0; rank < analysed.size(); ++rank) {
    const Candidate& c = *analysed[rank];
    const Residuals res = residuals(c);
    nlohmann::json h = nlohmann::json::object();
    for (const auto& [d, count] : res.hist) h[d <= -4 ? "<=-4" : d >= 4 ? ">=4" : std::to_string(d)] = count;
    r_.nearest.push_back({{"formula", c.notation},
                          {"role", &c == declared ? (rank < 3 ? "nearest, declared" : "declared") : "nearest"},
                          {"outputs", res.total},
                          {"unexplained", res.bad},
                          {"unexplained_per_million", res.total ? 1e6 * static_cast<double>(res.bad) / static_cast<double>(res.total) : 0.0},
                          {"ordered_difference_histogram", h}});
    if (firsts.is_null() && !res.first.empty() && (&c == primary || rank + 1 == analysed.size())) firsts = res.first;
    if (&c != primary || res.bad == 0) continue;
    // What the residuals of the primary candidate look like.
    const bool bias_dropped = res.biased_bad > 0 && res.bias_ignored == res.biased_bad;
    if (bias_dropped && !has("bias")) {
      diag.push_back({{"kind", "bias"},
                      {"summary", fmt::format("with a bias, all {} unexplained outputs equal the formula WITHOUT the bias: "
                                              "the arm ignores the bias it is given",
                                              res.biased_bad)}});
    }
    if (res.other_column == res.bad) {
      diag.push_back({{"kind", "scale"},
                      {"summary", fmt::format("every unexplained output ({}) is the formula with the weight scale of a "
                                              "neighbouring column: the weight scales are indexed wrongly",
                                              res.bad)}});
    }
  }
  if (!has("bias") && !has("scale") && !has("without-bias")) {
    const nlohmann::json stage = localize_stage(order);
    if (!stage.is_null()) diag.push_back(stage);
  }
  if (std::none_of(diag.begin(), diag.end(), [](const nlohmann::json& d) { return d["kind"] != "without-bias"; })) {
    diag.push_back(epilogue_diagnosis(*primary, declared != nullptr));
  }
  r_.diagnosis = diag;
  r_.unexplained = firsts.is_null() ? nlohmann::json::array() : firsts;
}

// No stage localized: the arithmetic is outside the space, or a fault. For an INT8 arm the
// accumulator is not the suspect (order-free exact integers; C4 checks exposed accumulators).
nlohmann::json Identifier::epilogue_diagnosis(const Candidate& c, bool declared) const {
  const Residuals res = residuals(c);
  const int64_t ones = (res.hist.count(1) ? res.hist.at(1) : 0) + (res.hist.count(-1) ? res.hist.at(-1) : 0);
  const bool exposed = std::any_of(obs_.begin(), obs_.end(), [](const Observation& o) { return o.acc_exposed > 0; });
  const std::string alibi =
      input_ == FormulaInput::fp32
          ? (r_.arm.offers_unscaled()
                 ? std::string("the accumulation model was measured and confirmed first, and every formula was evaluated "
                               "over the arm's own d (its fp8_accumulate), so the epilogue is the suspect")
                 : std::string("the accumulation model was measured and confirmed on random outputs first, so the epilogue "
                               "is the suspect; the arm offers no unscaled entry, so a layer whose d the model does not give "
                               "(another tile or instruction at some shape) looks the same"))
      : exposed ? std::string("the exposed INT32 accumulators equal the exact dot products")
                : std::string("the arm exposes no accumulator: INT32 accumulation of int8 operands is exact and "
                              "order-free, so the conversion and the epilogue are the suspects (C4 checks an exposed "
                              "accumulator)");
  return {{"kind", "epilogue"},
          {"summary", fmt::format("no formula of the space explains the outputs, and no single stage localizes the "
                                  "difference; the {} differs in {} of {} outputs ({} of them by one ulp): epilogue "
                                  "arithmetic outside the space (another rounding step, precision or order), or a fault; {}",
                                  declared ? "declared formula" : "nearest", res.bad, res.total, ones, alibi)}};
}

// The declared formula's candidate when the arm declares a point of the space or a named shape
// dispatch between two.
const Candidate* Identifier::declared_candidate() const {
  if (r_.arm.epilogue.empty()) return nullptr;
  try {
    const Epilogue& e = epilogue(r_.arm.epilogue);
    const auto p = row_point(e);
    if (!p || p->input != input_) return nullptr;
    const auto s = row_swap_point(e);
    for (const Candidate& c : cands_) {
      if (!s && !c.dispatch && c.main == *p) return &c;
      if (s && c.dispatch && c.via == e.kind && c.main == *p && c.swapped == *s) return &c;
    }
  } catch (const Error&) {
    return nullptr;  // a declaration that is no formula (verify reports it); nothing to analyse against
  }
  return nullptr;
}

// Evidence that needs no nearest candidate: exposed accumulators that differ from the exact ones,
// and a bias-free behaviour that explains everything without a bias (and whether the bias is dropped).
nlohmann::json Identifier::diagnose_bias_and_accumulator() const {
  nlohmann::json diag = nlohmann::json::array();
  int64_t acc_wrong = 0, acc_exposed = 0;
  std::vector<std::string> acc_first;
  for (const Observation& o : obs_) {
    acc_wrong += o.acc_wrong;
    acc_exposed += o.acc_exposed;
    for (const std::string& s : o.acc_first) {
      if (acc_first.size() < 3) acc_first.push_back(s);
    }
  }
  const Candidate* plain = nullptr;
  for (const Candidate& c : cands_) {
    if (c.plain_alive && !plain) plain = &c;
  }
  if (plain) {
    const std::vector<std::string> named = named_without_bias(*plain);
    diag.push_back({{"kind", "without-bias"},
                    {"summary", fmt::format("without a bias every output is explained by {}{}; the unexplained outputs come "
                                            "with a bias",
                                            plain->notation,
                                            named.empty() ? std::string(" (no production formula of the table)")
                                                          : fmt::format(" (as {})", fmt::join(named, ", ")))},
                    {"formula", plain->notation}});
    int64_t biased = 0, ignored = 0;
    for (const Observation& o : obs_) {
      if (o.bias.empty() || o.refused) continue;
      const FormulaPoint& p = plain->at(o.m, o.n);
      for (int64_t i = 0; i < o.m; ++i) {
        for (int64_t j = 0; j < o.n; ++j) {
          ++biased;
          ignored += eval_element(p, o, i, j, std::nullopt) == o.y[static_cast<size_t>(i * o.n + j)];
        }
      }
    }
    if (biased > 0 && ignored == biased) {
      diag.push_back({{"kind", "bias"},
                      {"summary", fmt::format("with a bias, all {} outputs equal that formula WITHOUT the bias: the arm "
                                              "ignores the bias it is given",
                                              biased)}});
    }
  }
  if (acc_wrong > 0) {
    diag.push_back({{"kind", "accumulator"},
                    {"summary", input_ == FormulaInput::fp32
                                    ? fmt::format("accumulation: {} of {} fp32 d values of the arm's fp8_accumulate differ "
                                                  "from the measured model's; the epilogue is not the first suspect",
                                                  acc_wrong, acc_exposed)
                                    : fmt::format("accumulator fault: {} of {} exposed INT32 accumulators differ from the "
                                                  "exact dot products; the epilogue is not the first suspect",
                                                  acc_wrong, acc_exposed)},
                    {"first", acc_first}});
  }
  return diag;
}

}  // namespace qc::identify_detail
