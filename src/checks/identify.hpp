// `qconform identify`: which point of the formula space (src/epilogue/formula_space.hpp) an arm
// computes, found by designed probes through the arm's own code path and confirmed on held-out
// synthetic operands (docs/identify.md).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "qconform/arm.hpp"

namespace qc {

struct IdentifyOptions {
  uint64_t seed = 20261201;
  int max_rounds = 16;                 // designed probe rounds at most
  std::string heldout_shapes = "tiny";  // `synth` shapes of the held-out confirmation
  std::vector<int64_t> heldout_m = {8, 80};  // both sides of each dispatch: swap-AB at M <= 16; PyTorch transposes FP8 at M = 80
  // The designed probes keep |acc| <= 2^probe_acc_bits (26 covers every design of docs/identify.md;
  // a test lowers it to leave classes that part only beyond it for the separation step).
  int probe_acc_bits = 26;
  // The jurisdiction's bound on the accumulator: |acc| <= 2^31 - 1 (INT32) by default. An arm whose
  // K keeps every accumulator below 2^24 can be identified with 24: operands beyond the bound are
  // then outside jurisdiction (docs/identify.md, "What equivalent means").
  int jurisdiction_acc_bits = 31;
};

struct IdentifyResult {
  ArmInfo arm;
  RunRecord record;
  std::string verdict;   // "identified", "ambiguous", "unexplained"
  std::string formula;   // identified: the class's formula (notation); else ""
  std::vector<std::string> named;  // production formulas of the table in the identified class
  std::string reason;    // one paragraph: why this verdict
  int64_t outputs = 0, matching = 0;  // held-out outputs, and how many the formula explains
  nlohmann::json candidates;  // {space, classes, survivors:[{formula, key, members}]}
  nlohmann::json probes;      // one entry per probe run: id, shape, bias, elements, eliminated, left
  nlohmann::json nearest;     // unexplained: the nearest candidates with residual statistics
  nlohmann::json unexplained; // unexplained: the first unexplained outputs (coordinates, values, bits)
  nlohmann::json diagnosis;   // what the residuals look like (accumulator, bias, scale, epilogue)
  // Ambiguous (and any run where several classes survived the designed probes): per pair of
  // surviving classes, the operand that separates them (probed through the arm when it is in
  // jurisdiction, else the one outside it that would), or that the search found none.
  nlohmann::json separation = nlohmann::json::array();
  // Exposed INT32 accumulators that differ from the exact dot products ({exposed, differ, first});
  // empty when none differ. Reported with any verdict; the verdict is decided by the outputs.
  nlohmann::json accumulator = nlohmann::json::object();
  // FP8 arms: the accumulation model measured through the arm (c1_fp8_model.hpp, the measurement
  // `boundary` makes), to_json of it; null for INT8 arms.
  nlohmann::json fp8_accumulation;
  // FP8 arms whose model was measured: its declaration (a table name, or `fp8-model(...)` spelled out,
  // which `fp8_accumulation_model` reads back) and formula, and the identified epilogue over `d` with
  // the named rows in its class (`fp8-scaled`); `formula` then joins the two.
  std::string accumulation_model, accumulation_formula;
  std::string epilogue_formula;
  std::vector<std::string> epilogue_named;
  // Block-scaled FP8 arms (a block model declared): the block model measured stage by stage
  // (identify_block.cpp): {declared, layout, k_block, n_block, chain, chain_formula, promotion_interval,
  // unit_scale_model, chain_measured_through, forms [{form, formula, unexplained, outputs}], model,
  // against_declaration, verdict_stage (unexplained)}; null for other arms. `block_model` the
  // identified table name (`block-<form>[+<chain>]`), the arm's declaration for verify and conform.
  nlohmann::json block;
  std::string block_model;
  double seconds = 0;
};

// FP8 arms (`ArmInfo::fp8()`, declared or not): the formula is the accumulation model measured through
// the arm (measure_fp8_accumulation: `fp8_accumulate` where the arm offers it, else `run`) then the
// epilogue identified over the FP8 space; the held-out confirmation runs FP8 `synth` layers through the
// arm, model and epilogue together.
IdentifyResult identify(Arm& arm, const IdentifyOptions& options = {});
nlohmann::json to_json(const IdentifyResult& r);
// The printout a person reads; its advice (how to see the evidence, how to declare the answer) in the
// CLI's words (flags, `qconform boundary --arm X`), or with `language` "python" in the Python binding's
// (argument names, `qconform.boundary(arm)`), so that a suggestion can be followed where it is read.
std::string describe(const IdentifyResult& r);
std::string describe(const IdentifyResult& r, const std::string& language);

// What a caller declares for an identified arm (conform, `verify --declare`, docs/identify.md "Using
// the answer"): the table's name when the class holds a named row (a shape dispatch has no formula
// string), else the formula string; for an FP8 arm `<model>; <epilogue>` (declare_formula reads it).
// "" unless the verdict is `identified`.
std::string identified_declaration(const IdentifyResult& r);
// One line of provenance: "identified by qconform identify, 6 probes, held-out 450560/450560".
std::string identify_provenance(const IdentifyResult& r);
// The identification in brief, for results.json and the report's arms section (conform):
// {source: "identified", verdict, formula, named, declared, probes, heldout {outputs, matching},
// provenance, reason, survivors (ambiguous), separation, diagnosis (unexplained)}.
nlohmann::json identify_summary(const IdentifyResult& r);

}  // namespace qc
