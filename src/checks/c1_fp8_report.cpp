// The FP8 accumulation-model measurement as JSON and as the printout a person reads
// (c1_fp8_model.hpp); the measurement itself is c1_fp8_model.cpp.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "accum/fp8_model.hpp"
#include "checks/c1_fp8_model.hpp"
#include "qconform/numerics.hpp"

namespace qc {

namespace {
std::string fbits(float f) { return fmt::format("{:#010x} ({:.9g})", f32_bits(f), f); }
}  // namespace

namespace {
nlohmann::json model_json(const Fp8AccumModel& m) {
  return {{"step_k", m.step_k},
          {"term_bits", m.term_bits},
          {"term_rounding", rounding_tag(m.term_rounding)},
          {"result_bits", m.result_bits},
          {"result_rounding", rounding_tag(m.result_rounding)},
          {"alignment", m.alignment == AccumAlignment::exponent_sum ? "exponent_sum" : "exact_exponent"},
          {"promote_steps", m.promote_steps},
          {"promote_bits", m.promote_bits},
          {"promote_rounding", rounding_tag(m.promote_rounding)},
          {"splits", m.splits},
          {"formula", accumulation_formula(m)}};
}
}  // namespace

nlohmann::json to_json(const Fp8Measurement& r) {
  nlohmann::json ev = nlohmann::json::array();
  for (const auto& e : r.evidence) {
    nlohmann::json alts = nlohmann::json::array();
    for (const auto& a : e.alternatives) {
      nlohmann::json x = {{"value", a.value}};
      if (a.probe.empty()) {
        x["eliminated_by"] = nullptr;
        x["note"] = "no probe separates it: equivalent on these probes";
      } else {
        x["eliminated_by"] = a.probe;
        x["observed"] = fbits(a.observed);
        x["predicted"] = fbits(a.predicted);
      }
      alts.push_back(x);
    }
    ev.push_back({{"parameter", e.parameter}, {"value", e.value}, {"declared", e.declared}, {"alternatives", alts}});
  }
  nlohmann::json probes = nlohmann::json::array();
  for (const Fp8Probe& p : r.probes) {
    nlohmann::json terms = nlohmann::json::array();
    if (p.family != "random") {
      for (const auto& t : p.terms) terms.push_back({t.pos, fmt::format("{:#04x}", t.a), fmt::format("{:#04x}", t.w)});
    }
    probes.push_back({{"id", p.id}, {"family", p.family}, {"k", p.k}, {"terms", terms}, {"observed", fbits(p.observed)}});
  }
  nlohmann::json eq = nlohmann::json::array();
  for (const auto& m : r.equivalent) eq.push_back(model_json(m));
  return {{"declared", r.declared_name},
          {"observed_through", r.observed_through},
          {"output_format", r.output_format.empty() ? nlohmann::json(nullptr) : nlohmann::json(r.output_format)},
          {"declared_model", r.declared_known ? model_json(r.declared) : nlohmann::json(nullptr)},
          {"verdict", r.verdict},
          {"reason", r.reason},
          {"measured", r.measured ? model_json(r.model) : nlohmann::json(nullptr)},
          {"named", r.model_name},
          {"equivalent", eq},
          {"differing_fields", r.differing_fields},
          {"order", r.order},
          {"evidence", ev},
          {"contradiction", r.contradiction},
          {"candidates_tried", r.candidates_tried},
          {"split_k_runs", r.split_k_runs},
          {"record", r.record},
          {"confirmation",
           {{"outputs", r.confirm_outputs},
            {"matching", r.confirm_matching},
            {"declared_matching", r.confirm_declared_matching},
            {"shapes", r.confirmation}}},
          {"probes", probes},
          {"seconds", r.seconds},
          {"seconds_parts", {{"probes", r.seconds_probes}, {"search", r.seconds_search}, {"confirmation", r.seconds_confirm}}}};
}

std::string describe(const Fp8Measurement& r) {
  std::string s = fmt::format("FP8 accumulation model of {} (declares {}), measured with {} probes through {}\n",
                              r.arm.label, r.declared_name.empty() ? "nothing" : r.declared_name, r.probes.size(),
                              r.observed_through.empty() ? std::string("fp8_accumulate") : r.observed_through);
  for (const std::string& note : r.split_k_runs) s += fmt::format("  NOTE: the arm's record says split-K: {}\n", note);
  if (r.measured) {
    s += fmt::format("\n  {:<17} {:<16} {:<16} {}\n", "parameter", "measured", "declared", "evidence (alternative: first probe it fails)");
    for (const auto& e : r.evidence) {
      std::vector<std::string> alts;
      for (const auto& a : e.alternatives) {
        alts.push_back(a.probe.empty() ? fmt::format("{}: not separated (equivalent)", a.value)
                                       : fmt::format("{}: {} gives {}, predicts {}", a.value, a.probe, fbits(a.observed),
                                                     fbits(a.predicted)));
      }
      s += fmt::format("  {:<17} {:<16} {:<16} {}\n", e.parameter, e.value, e.declared,
                       alts.empty() ? std::string("(no alternative acts)") : alts.front());
      for (size_t i = 1; i < alts.size(); ++i) s += fmt::format("  {:<51} {}\n", "", alts[i]);
    }
    s += fmt::format("\n  model:   {}\n  named:   {}\n  order:   {}\n", accumulation_formula(r.model),
                     r.model_name.empty() ? std::string("none (not a named model)") : r.model_name, r.order);
    if (r.equivalent.size() > 1) {
      s += fmt::format("  class:   {} parameter sets explain every probe, e.g.\n", r.equivalent.size());
      for (size_t i = 1; i < r.equivalent.size() && i < 6; ++i) {
        s += fmt::format("           {}\n", accumulation_formula(r.equivalent[i]));
      }
    }
  }
  s += fmt::format("\n  verdict: {}\n  {}\n", r.verdict, r.reason);
  if (r.contradiction.contains("declared_first_miss") && r.verdict == "not a model of this family") {
    const auto& p = r.contradiction["declared_first_miss"];
    s += fmt::format("  the declared model first fails probe {}: the arm gives {}, the model {}\n", p["id"].get<std::string>(),
                     p["observed"].get<std::string>(), p["predicted"].get<std::string>());
  }
  s += fmt::format("  confirmation on random randn*2 e4m3 operands:");
  for (const auto& row : r.confirmation) {
    s += fmt::format(" {}x{}x{}", row["m"].get<int64_t>(), row["n"].get<int64_t>(), row["k"].get<int64_t>());
  }
  s += "\n";
  if (r.measured) {
    s += fmt::format("    measured model: {} of {} outputs {}\n", r.confirm_matching, r.confirm_outputs,
                     r.output_format.empty() ? "equal bit for bit"
                                             : fmt::format("agree through the {} output (one of the two {} neighbours of d, or d)",
                                                           r.output_format, r.output_format));
  }
  if (r.confirm_declared_matching >= 0) {
    s += fmt::format("    declared model: {} of {} outputs equal bit for bit\n", r.confirm_declared_matching,
                     r.confirm_outputs);
  }
  s += fmt::format("  ({} parameter sets tried; {:.1f} s: probes through the arm {:.1f} s, search {:.1f} s, "
                   "confirmation {:.1f} s)\n",
                   r.candidates_tried, r.seconds, r.seconds_probes, r.seconds_search, r.seconds_confirm);
  return s;
}

}  // namespace qc
