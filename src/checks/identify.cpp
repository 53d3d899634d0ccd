// `qconform identify` (docs/identify.md): the entry point and what it returns, as JSON, as the
// printout a person reads, and in brief for conform's declarations. The identification itself is
// `identify_detail::Identifier` (identify_internal.hpp and the identify_*.cpp files beside this one).
#include "checks/identify.hpp"
#include "epilogue/block_models.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "checks/identify_internal.hpp"

namespace qc {

IdentifyResult identify(Arm& arm, const IdentifyOptions& options) { return identify_detail::Identifier(arm, options).run(); }

nlohmann::json to_json(const IdentifyResult& r) {
  nlohmann::json j = {{"kind", "qconform-identify"},
                      {"schema_version", 1},
                      {"arm", {{"label", r.arm.label}, {"declared_epilogue", r.arm.epilogue}, {"record", r.record}}},
                      {"verdict", r.verdict},
                      {"formula", r.formula},
                      {"named", r.named},
                      {"declaration", identified_declaration(r)},
                      {"reason", r.reason},
                      {"explained", {{"outputs", r.outputs}, {"matching", r.matching}}},
                      {"candidates", r.candidates},
                      {"probes", r.probes},
                      {"nearest", r.nearest},
                      {"unexplained", r.unexplained},
                      {"diagnosis", r.diagnosis},
                      {"separation", r.separation},
                      {"accumulator", r.accumulator},
                      {"fp8_accumulation", r.fp8_accumulation},
                      {"seconds", r.seconds}};
  if (!r.block.is_null()) {
    j["block"] = r.block;
    j["block_model"] = r.block_model;
  } else if (!r.fp8_accumulation.is_null()) {
    j["fp8_epilogue"] = {{"formula", r.epilogue_formula}, {"named", r.epilogue_named}};
    j["accumulation_model"] = r.accumulation_model;
    j["accumulation_formula"] = r.accumulation_formula;
  }
  return j;
}

namespace {

// One unexplained output: "probe [m,n] acc=.. sa=.. sw=.. bias=..: got .., formula gives ..".
std::string output_line(const nlohmann::json& u) {
  const std::string acc = u.contains("d") ? "d=" + u["d"].get<std::string>() : fmt::format("acc={}", u["acc"].get<int64_t>());
  return fmt::format("{} [{},{}] {} sa={} sw={} bias={}: got {}, formula gives {}", u["probe"].get<std::string>(),
                     u["m"].get<int64_t>(), u["n"].get<int64_t>(), acc, u["sa"].get<std::string>(), u["sw"].get<std::string>(),
                     u["bias"].get<std::string>(), u["got"].get<std::string>(), u["formula_gives"].get<std::string>());
}

// The FP8 measurement before the epilogue's probes: how the model was measured and what it is.
std::string describe_fp8_accumulation(const IdentifyResult& r, const std::string& language) {
  const auto& f = r.fp8_accumulation;
  const std::string evidence = language == "python" ? "qconform.boundary(arm)" : fmt::format("qconform boundary --arm {}", r.arm.label);
  std::string s = fmt::format("\nFP8 arm: the accumulation model measured with {} designed probes through {} ({} parameter sets "
                              "tried; `{}` prints the evidence per parameter)\n",
                              f.value("probe_count", 0), f.value("observed_through", std::string("fp8_accumulate")),
                              f["candidates_tried"].get<int64_t>(), evidence);
  for (const auto& n : f["split_k_runs"]) s += fmt::format("NOTE: the arm's record says split-K: {}\n", n.get<std::string>());
  if (!r.accumulation_formula.empty()) {
    const std::string declared = f["declared"].get<std::string>();
    s += fmt::format("accumulation: {}\n  named: {}; {}\n", r.accumulation_formula,
                     r.named.empty() ? std::string("none (not a named accumulation model)") : fmt::format("{}", fmt::join(r.named, ", ")),
                     declared.empty() ? std::string("the arm declares no model")
                                      : fmt::format("against the declaration ({}): {}", declared, f["verdict"].get<std::string>()));
    const size_t members = f["equivalent"].size();
    if (members > 1) s += fmt::format("  class: {} parameter sets explain every probe\n", members);
    s += fmt::format("  confirmation: {} of {} random outputs agree\n", f["confirmation"]["matching"].get<int64_t>(),
                     f["confirmation"]["outputs"].get<int64_t>());
    s += "then the epilogue over d, identified as an INT8 arm's over its accumulator:";
  }
  return s;
}

std::string describe_probes(const IdentifyResult& r) {
  std::string s = fmt::format("\nprobes ({} designed, then held-out synth operands):\n", r.probes.size());
  for (const auto& p : r.probes) {
    s += fmt::format("  {:<22} {:>3}x{}x{:<6} {:>6} elements  {}{:>5} eliminated, {:>5} candidates in {:>4} classes left\n",
                     p["id"].get<std::string>(), p["m"].get<int64_t>(), p["n"].get<int64_t>(), p["k"].get<int64_t>(),
                     p["elements"].get<int64_t>(), p["refused"].get<bool>() ? "REFUSED (no bias) " : "",
                     p["eliminated"].get<int64_t>(), p["candidates_left"].get<int64_t>(), p["classes_left"].get<size_t>());
  }
  return s + fmt::format("  held-out: {} outputs\n", r.outputs);
}

std::string describe_identified(const IdentifyResult& r, const std::string& language) {
  const bool fp8 = !r.fp8_accumulation.is_null();
  std::string s = fmt::format("formula: {}\n", r.formula);
  if (fp8) {
    s += fmt::format("named:   {} (accumulation); {} (epilogue)\n",
                     r.named.empty() ? std::string("none") : fmt::format("{}", fmt::join(r.named, ", ")),
                     r.epilogue_named.empty() ? std::string("none") : fmt::format("{}", fmt::join(r.epilogue_named, ", ")));
  } else {
    s += fmt::format("named:   {}\n", r.named.empty() ? std::string("none (not a production formula of the table)")
                                                      : fmt::format("{}", fmt::join(r.named, ", ")));
  }
  const auto& cls = r.candidates["survivors"][0];
  if (cls["members"].get<size_t>() > 1) {
    s += fmt::format("class:   {} equivalent points (same output for every operand in jurisdiction), e.g.\n",
                     cls["members"].get<size_t>());
    for (const auto& f : cls["member_formulas"]) s += fmt::format("           {}\n", f.get<std::string>());
  }
  s += fmt::format("held-out: {} of {} outputs explained\n", r.matching, r.outputs);
  if (!r.separation.empty()) {
    s += fmt::format("separated after the designed probes ({} pair(s) of classes, by operands in jurisdiction):\n", r.separation.size());
    for (const auto& e : r.separation) s += fmt::format("  {}\n", e["summary"].get<std::string>());
  }
  const std::string d = identified_declaration(r);
  const std::string own = fp8 ? fmt::format("{}; {}", r.arm.accumulation_model, r.arm.epilogue) : r.arm.epilogue;
  if (d == own) {
    s += "the arm declares it\n";
  } else if (language == "python") {
    s += fmt::format("declare it: qconform.arm(fn{}, epilogue=\"{}\"{})\n", fp8 ? ", element=\"e4m3\"" : "",
                     fp8 ? (r.epilogue_named.empty() ? r.epilogue_formula : r.epilogue_named.front()) : d,
                     fp8 ? fmt::format(", accumulation_model=\"{}\"", r.accumulation_model) : std::string());
  } else {
    s += fmt::format("declare it: qconform verify OPS --arms A,{} --declare B='{}'\n", r.arm.label, d);
  }
  return s;
}

std::string describe_unexplained_verdict(const IdentifyResult& r) {
  std::string s = r.reason + "\n";
  for (const auto& d : r.diagnosis) s += fmt::format("  {}: {}\n", d["kind"].get<std::string>(), d["summary"].get<std::string>());
  for (const auto& d : r.diagnosis) {
    if (!d.contains("first")) continue;
    if (d["kind"] == "stage") {
      s += fmt::format("    {}\n", d.value("first_heading", std::string("the outputs that separate it from the nearest candidate:")));
    }
    for (const auto& f : d["first"]) s += fmt::format("    {}\n", f.is_string() ? f.get<std::string>() : output_line(f));
  }
  if (!r.nearest.empty() && r.nearest[0].contains("role")) {
    s += "nearest candidates:\n";
    for (const auto& n : r.nearest) {
      s += fmt::format("  [{}] {} unexplained of {} ({:.1f} per million), ordered differences {}: {}\n",
                       n["role"].get<std::string>(), n["unexplained"].get<int64_t>(), n["outputs"].get<int64_t>(),
                       n["unexplained_per_million"].get<double>(), n["ordered_difference_histogram"].dump(),
                       n["formula"].get<std::string>());
    }
  }
  if (!r.unexplained.empty() && r.unexplained[0].contains("probe")) {
    s += fmt::format("first unexplained outputs (against the {}):\n",
                     r.arm.epilogue.empty() ? "nearest candidate" : "declared formula where it is a point, else the nearest");
    for (const auto& u : r.unexplained) s += fmt::format("  {}\n", output_line(u));
  }
  return s;
}

// A block-scaled FP8 arm: the stages (identify_block.cpp), then the verdict.
std::string describe_block(const IdentifyResult& r, const std::string& language) {
  const auto& b = r.block;
  const auto text = [&](const char* key) { return b.contains(key) && !b[key].is_null() ? b[key].dump() : std::string("-"); };
  std::string s = fmt::format("identify {} (block-scaled FP8; declares {})\n  layout of the probes: {}\n", r.arm.label,
                              r.arm.accumulation_model.empty() ? "nothing" : r.arm.accumulation_model,
                              b.value("layout", std::string()));
  s += fmt::format("  1. scale blocks: K block {}, weight block along N {} (block-edge probe, power-of-two scales)\n",
                   text("k_block"), text("n_block"));
  if (b.contains("chain")) {
    s += fmt::format("  2. chain per K block: {} ({}), promoted every {} products at unit scales; {} probes through {}\n",
                     b["chain"].get<std::string>(), b["chain_formula"].get<std::string>(), b["promotion_interval"].get<int64_t>(),
                     b["chain_probes"].get<size_t>(), b["chain_measured_through"].get<std::string>());
  }
  if (b.contains("forms")) {
    s += "  3. promotion form (designed probes):\n";
    for (const auto& f : b["forms"]) {
      s += fmt::format("       {:<15} {:<40} {} of {} outputs unexplained\n", f["form"].get<std::string>(),
                       f["formula"].get<std::string>(), f["unexplained"].get<int64_t>(), f["outputs"].get<int64_t>());
    }
  }
  s += "probes:\n";
  for (const auto& p : r.probes) {
    s += fmt::format("  {:<28} {:>4}x{}x{:<5} {:>6} elements  {}\n", p["id"].get<std::string>(), p["m"].get<int64_t>(),
                     p["n"].get<int64_t>(), p["k"].get<int64_t>(), p["elements"].get<int64_t>(),
                     p.contains("pairs_separated") ? "pairs separated " + p["pairs_separated"].dump() : std::string());
  }
  s += fmt::format("\nverdict: {}\n", r.verdict);
  if (r.verdict == "identified") {
    s += fmt::format("block model: {} ({})\nformula: {}\nheld-out: {} of {} outputs explained\n", r.block_model,
                     b.value("against_declaration", std::string()), r.formula, r.matching, r.outputs);
    if (r.block_model != r.arm.accumulation_model) {
      s += language == "python"
               ? fmt::format("declare it: qconform.arm(fn, accumulation_model=\"{}\")\n", r.block_model)
               : fmt::format("declare it: qconform verify OPS --arms A,{} --declare B='{}'\n", r.arm.label, r.block_model);
    }
  } else {
    s += describe_unexplained_verdict(r);
  }
  return s + fmt::format("({:.1f} s)\n", r.seconds);
}

}  // namespace

std::string describe(const IdentifyResult& r) { return describe(r, "cli"); }

std::string describe(const IdentifyResult& r, const std::string& language) {
  if (!r.block.is_null()) return describe_block(r, language);
  std::string s = fmt::format("identify {} (declares {})\n", r.arm.label, r.arm.epilogue.empty() ? "nothing" : r.arm.epilogue);
  if (!r.fp8_accumulation.is_null()) s += describe_fp8_accumulation(r, language);
  if (!r.probes.empty() && r.probes[0].contains("eliminated")) s += describe_probes(r);
  s += fmt::format("\nverdict: {}\n", r.verdict);
  if (!r.accumulator.empty()) {
    s += r.fp8_accumulation.is_null()
             ? fmt::format("WARNING: {} of {} exposed INT32 accumulators differ from the exact dot products (the outputs "
                           "are judged on their own; C4 would fail):\n",
                           r.accumulator["differ"].get<int64_t>(), r.accumulator["exposed"].get<int64_t>())
             : fmt::format("WARNING: {} of {} fp32 d values of the arm's fp8_accumulate differ from the measured model's "
                           "(the epilogue was identified over the arm's own d):\n",
                           r.accumulator["differ"].get<int64_t>(), r.accumulator["exposed"].get<int64_t>());
    for (const auto& f : r.accumulator["first"]) s += fmt::format("  {}\n", f.get<std::string>());
  }
  if (r.verdict == "identified") {
    s += describe_identified(r, language);
  } else if (r.verdict == "ambiguous") {
    s += r.reason + "\n";
    for (const auto& c : r.candidates["survivors"]) {
      s += fmt::format("  class ({} points): {}\n", c["members"].get<size_t>(), c["formula"].get<std::string>());
    }
    s += "pairs of classes:\n";
    for (const auto& e : r.separation) {
      s += fmt::format("  {}\n    vs {}\n    {}\n", e["a"].get<std::string>(), e["b"].get<std::string>(),
                       e["summary"].get<std::string>());
    }
  } else {
    s += describe_unexplained_verdict(r);
  }
  s += fmt::format("({:.1f} s)\n", r.seconds);
  return s;
}

std::string identified_declaration(const IdentifyResult& r) {
  if (r.verdict != "identified") return "";
  if (!r.block.is_null()) return r.block_model;  // a block model: its scales and bf16 rounding included
  if (!r.fp8_accumulation.is_null()) {
    return fmt::format("{}; {}", r.accumulation_model, r.epilogue_named.empty() ? r.epilogue_formula : r.epilogue_named.front());
  }
  // A row's name when the class is the row; a kernel equal to a row without its bias is its formula.
  if (!r.named.empty() && r.named.front().find(' ') == std::string::npos) return r.named.front();
  return r.formula;
}

std::string identify_provenance(const IdentifyResult& r) {
  return fmt::format("identified by qconform identify, {} probes, held-out {}/{}", r.probes.size(), r.matching, r.outputs);
}

nlohmann::json identify_summary(const IdentifyResult& r) {
  nlohmann::json j = {{"source", "identify"},
                      {"verdict", r.verdict},
                      {"formula", r.formula},
                      {"named", r.named},
                      {"declared", identified_declaration(r)},
                      {"probes", r.probes.size()},
                      {"heldout", {{"outputs", r.outputs}, {"matching", r.matching}}},
                      {"reason", r.reason},
                      {"seconds", r.seconds}};
  if (r.verdict == "identified") j["provenance"] = identify_provenance(r);
  if (r.verdict == "ambiguous") {
    nlohmann::json classes = nlohmann::json::array();
    for (const auto& c : r.candidates["survivors"]) classes.push_back(c["formula"]);
    j["survivors"] = classes;
  }
  if (!r.separation.empty()) j["separation"] = r.separation;
  if (r.verdict == "unexplained") {
    j["diagnosis"] = r.diagnosis;
    if (!r.nearest.empty()) j["nearest"] = r.nearest[0];
  }
  if (!r.accumulator.empty()) j["accumulator"] = r.accumulator;
  if (!r.block.is_null()) j["block"] = r.block;
  return j;
}

}  // namespace qc
