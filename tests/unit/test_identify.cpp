// `qconform identify` on every built-in CPU arm (its declared formula, or the class containing
// it), on the mutants (faults come out unexplained, with a diagnosis of the stage), and on arms
// written here from formulas outside the table with their own arithmetic (identified exactly,
// every held-out output explained).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "checks/identify.hpp"
#include "epilogue/formula_space.hpp"
#include "qconform/accumulation.hpp"
#include "qconform/arm.hpp"
#include "qconform/epilogue.hpp"
#include "qconform/error.hpp"
#include "qconform/numerics.hpp"

namespace qc {
namespace {

bool has_diagnosis(const IdentifyResult& r, const std::string& kind) {
  for (const auto& d : r.diagnosis) {
    if (d["kind"] == kind) return true;
  }
  return false;
}

TEST(Identify, EveryCpuArmIsItsDeclaredFormula) {
  for (const std::string& label : list_arms()) {
    // Every CPU arm; of the oneDNN family (where built) the default and one with a bias path: the
    // others share its matmul and differ only in the epilogue the cpu arms already cover.
    const bool onednn = label == "onednn:s8s8" || label == "onednn:s8s8-vllm-triton";
    if (label.rfind("cpu:", 0) != 0 && !onednn) continue;
    // Block-scaled arms: each identified as its own block model in tests/unit/test_identify_block.cpp
    // (IdentifyBlock.EveryCpuBlockArmIsIdentifiedAsItsOwnForm), not again here.
    if (label.starts_with("cpu:fp8-block-")) continue;
    auto arm = make_arm(label);
    const IdentifyResult r = identify(*arm);
    if (!arm->info().accumulation_model.empty()) {
      // cpu:fp8-<model>: identified as its measured accumulation model (tests/unit/test_fp8_boundary.cpp).
      EXPECT_EQ(r.verdict, "identified") << label << "\n" << describe(r);
      EXPECT_EQ(r.named, std::vector<std::string>{arm->info().accumulation_model}) << label << "\n" << describe(r);
      continue;
    }
    if (onednn) {
      // The expectation comes from the kernel oneDNN reports it ran (its accumulation model, as
      // onednn_accumulation() names it: docs/plugins.md), never from this CPU.
      const std::string model = r.record.extra.value("accumulation_model", "");
      ASSERT_FALSE(model.empty() || model == "unmodelled")
          << label << ": oneDNN ran a kernel without a measured accumulation model: " << r.record.extra.dump();
      if (model == "int16 pair saturation") {
        // Without VNNI, pairs of products saturate at int16: no epilogue explains the outputs, and
        // identify must say the accumulator is at fault rather than name a formula.
        EXPECT_EQ(r.verdict, "unexplained") << label << " (" << model << ")\n" << describe(r);
        EXPECT_TRUE(has_diagnosis(r, "accumulator")) << label << " (" << model << ")\n" << describe(r);
        continue;
      }
    }
    const std::string declared = arm->info().epilogue;
    ASSERT_EQ(r.verdict, "identified") << label << "\n" << describe(r);
    EXPECT_NE(std::find(r.named.begin(), r.named.end(), declared), r.named.end())
        << label << " declares " << declared << ", identified " << r.formula << "\n" << describe(r);
    EXPECT_GT(r.outputs, 0) << label;
    EXPECT_EQ(r.matching, r.outputs) << label;
    // The CPU arms expose the exact accumulator. (oneDNN's exposed s32 is rounded through fp32
    // beyond 2^24 on this path: reported by identify as a finding, not asserted here.)
    if (!onednn) {
      EXPECT_TRUE(r.accumulator.empty()) << label << ": " << r.accumulator.dump();
    }
    // The identified formula is a point whose class holds the declared row's point.
    if (declared != "sglang-sm90") {
      EXPECT_EQ(formula_class_key(parse_formula(r.formula)), formula_class_key(parse_formula(declared))) << label;
    }
  }
}

TEST(Identify, MutantsComeOutAsFaults) {
  for (const std::string& label : list_arms()) {
    if (label.rfind("mutant:", 0) != 0) continue;
    auto arm = make_arm(label);
    const IdentifyResult r = identify(*arm);
    const ArmInfo info = arm->info();
    if (!info.accumulation_model.empty()) {
      // mutant:fp8-rne-steps: an FP8 arm that rounds each step to nearest even while declaring
      // hopper-fp8-chain. Its arithmetic IS a point of the FP8 space (a model with rn13 steps), so
      // identify names that model, unnamed, and says it differs from the declaration.
      EXPECT_EQ(r.verdict, "identified") << label << "\n" << describe(r);
      EXPECT_TRUE(r.named.empty()) << label << "\n" << describe(r);
      EXPECT_NE(r.formula.find("C <- rn13("), std::string::npos) << describe(r);
      EXPECT_NE(describe(r).find("differs from declaration"), std::string::npos) << describe(r);
      continue;
    }
    if (label == "mutant:int32-wrap") {
      // Wrapping needs an accumulator beyond INT32, outside the jurisdiction of an INT8 kernel: in
      // jurisdiction this arm IS vllm-cutlass (documented in docs/identify.md).
      EXPECT_EQ(r.verdict, "identified") << describe(r);
      EXPECT_EQ(r.named, std::vector<std::string>{"vllm-cutlass"}) << describe(r);
      continue;
    }
    ASSERT_EQ(r.verdict, "unexplained") << label << "\n" << describe(r);
    EXPECT_FALSE(r.nearest.empty()) << label;
    EXPECT_FALSE(r.diagnosis.empty()) << label;
    if (info.breaks_stage == "accumulation") {
      EXPECT_TRUE(has_diagnosis(r, "accumulator")) << label << "\n" << describe(r);
      EXPECT_FALSE(r.accumulator.empty()) << label;
    } else if (label == "mutant:wrong-scale") {
      EXPECT_TRUE(has_diagnosis(r, "scale")) << describe(r);
    } else {
      // The epilogue mutants drop the bias they are given.
      EXPECT_TRUE(has_diagnosis(r, "bias")) << label << "\n" << describe(r);
    }
  }
}

// An FP8 kernel whose accumulation changes with M (mutant-shape:fp8-splitk-m8 splits K in 4 for
// M <= 8, and identify's designed probes run at larger M): the model is measured at the probes' M,
// and the arm's unscaled entry shows the held-out M = 8 layers off it. identify charges the
// difference to the accumulation, not the epilogue, and identifies the epilogue over the arm's own d.
// (A Triton FP8 kernel that takes mma.sync for a 16-row tile and wgmma above it is this case.)
TEST(Identify, AnFp8AccumulationThatChangesWithMIsChargedToTheAccumulation) {
  auto arm = make_arm("mutant-shape:fp8-splitk-m8");
  const IdentifyResult r = identify(*arm);
  ASSERT_EQ(r.verdict, "unexplained") << describe(r);
  EXPECT_EQ(identified_declaration(r), "");
  ASSERT_EQ(r.diagnosis.size(), 1u) << describe(r);
  EXPECT_EQ(r.diagnosis[0]["stage"], "the accumulation") << describe(r);
  const auto& layers = r.diagnosis[0]["layers"];
  ASSERT_FALSE(layers.empty()) << describe(r);
  for (const auto& l : layers) EXPECT_NE(l.get<std::string>().find("/M=8 ("), std::string::npos) << l;  // only where it splits
  EXPECT_GT(r.accumulator.value("differ", int64_t{0}), 0) << describe(r);
  EXPECT_NE(r.reason.find("identified as bf16(rn32(rn32(d * sa) * sw)) = fp8-scaled"), std::string::npos) << r.reason;
  EXPECT_NE(r.reason.find("(hopper-fp8-chain)"), std::string::npos) << r.reason;
}

// An arm written with its own arithmetic (plain C++ operators, std::nextafter, the numerics
// conversions), not through `apply_point`: the exact accumulator, then `body`.
template <typename Body>
class HandArm final : public Arm {
 public:
  HandArm(std::string label, Body body) : label_(std::move(label)), body_(body) {}
  ArmInfo info() const override {
    ArmInfo i;
    i.label = label_;
    i.description = "test arm";
    return i;
  }
  ArmOutput run(const LayerOperands& ops) override {
    ArmOutput out;
    const ExactAccumulators acc = exact_accumulate(ops.a_q.data(), ops.w_q.data(), {ops.m, ops.n, ops.k});
    for (int64_t m = 0; m < ops.m; ++m) {
      for (int64_t n = 0; n < ops.n; ++n) {
        const size_t e = static_cast<size_t>(m * ops.n + n);
        const int64_t a = acc.wide() ? acc.i64[e] : acc.i32[e];
        out.y.push_back(body_(a, ops.a_scale[m], ops.w_scale[n], ops.has_bias() ? std::optional<float>(bf16_to_f32(ops.bias[n])) : std::nullopt));
      }
    }
    out.record.arm = label_;
    return out;
  }

 private:
  std::string label_;
  Body body_;
};

float bf16_round(float x) { return bf16_to_f32(f32_to_bf16(x)); }
float rz32(int64_t acc) {
  float f = static_cast<float>(acc);
  if (std::fabs(static_cast<long double>(f)) > std::fabs(static_cast<long double>(acc))) f = std::nextafter(f, 0.0f);
  return f;
}

TEST(Identify, FormulasOutsideTheTableAreIdentifiedExactly) {
  // RZ conversion, the activation scale cast to bf16, Triton order, bias added in fp32 before an RZ output.
  auto a = [](int64_t acc, float sa, float sw, std::optional<float> b) {
    const float y = (rz32(acc) * bf16_round(sa)) * sw;
    return f32_to_bf16_rz(b ? y + *b : y);
  };
  HandArm<decltype(a)> arm_a("test:rz-bf16sa", a);
  const IdentifyResult ra = identify(arm_a);
  ASSERT_EQ(ra.verdict, "identified") << describe(ra);
  EXPECT_EQ(formula_class_key(parse_formula(ra.formula)),
            formula_class_key(parse_formula("bf16_rz(rn32(rn32(rn32(f32_rz(acc) * bf16(sa)) * sw) + f32(bias)))")))
      << ra.formula;
  EXPECT_TRUE(ra.named.empty());
  EXPECT_EQ(ra.matching, ra.outputs);
  EXPECT_GT(ra.outputs, 10000);

  // fp32 accumulator, the scales multiplied first and rounded to bf16, fp16 output, no bias.
  auto b = [](int64_t acc, float sa, float sw, std::optional<float> bias) -> uint16_t {
    if (bias) throw Error(ErrorKind::input, "test arm takes no bias", __FILE__, __LINE__, "bias");
    return f32_to_f16(static_cast<float>(acc) * bf16_round(sw * sa));
  };
  HandArm<decltype(b)> arm_b("test:f16-out", b);
  const IdentifyResult rb = identify(arm_b);
  ASSERT_EQ(rb.verdict, "identified") << describe(rb);
  EXPECT_EQ(formula_class_key(parse_formula(rb.formula)), formula_class_key(parse_formula("f16(rn32(f32(acc) * bf16(rn32(sw * sa))))")))
      << rb.formula;
  EXPECT_EQ(rb.matching, rb.outputs);
}

// PyTorch's eager W8A8 (torchao `int_scaled_matmul`: `c * scales` with c int32 and bf16 scales):
// type promotion turns the int32 into a bf16 through a float (two roundings), and every product is
// computed in fp32 and stored in bf16; the bias is a bf16 add. Written with plain operators and the
// fp32 -> bf16 conversion only.
uint16_t torch_two_step(int64_t acc, float sa, float sw, std::optional<float> bias) {
  const float c = bf16_round(static_cast<float>(acc));       // int32 -> float (RNE) -> bf16 (RNE)
  const float y1 = bf16_round(c * bf16_round(sa));            // bf16 * bf16: computed in fp32, stored bf16
  const float y2 = bf16_round(y1 * bf16_round(sw));
  return f32_to_bf16(bias ? y2 + *bias : y2);                 // + bf16 bias: fp32 add, stored bf16
}

TEST(Identify, ThePyTorchTwoStepConversionIsAPointOfTheSpace) {
  HandArm<decltype(&torch_two_step)> arm("test:torch-two-step", &torch_two_step);
  const IdentifyResult r = identify(arm);
  ASSERT_EQ(r.verdict, "identified") << describe(r);
  EXPECT_EQ(formula_class_key(parse_formula(r.formula)),
            formula_class_key(parse_formula(
                "bf16(rn32(f32(bf16(rn32(bf16(rn32(bf16(f32(acc)) * bf16(sa))) * bf16(sw)))) + f32(bias)))")))
      << r.formula;
  EXPECT_EQ(parse_formula(r.formula).conv, AccConversion::bf16_via_f32) << r.formula;
  EXPECT_EQ(r.matching, r.outputs);
  EXPECT_GT(r.outputs, 10000);
}

// #26: a bias-free kernel equal to a named formula without its bias term is named after it.
uint16_t sm89_without_bias(int64_t acc, float sa, float sw, std::optional<float> bias) {
  if (bias) throw Error(ErrorKind::input, "test arm takes no bias", __FILE__, __LINE__, "bias");
  return f32_to_bf16(static_cast<float>(acc) * (sw * sa));
}

TEST(Identify, ABiasFreeKernelIsTheNamedFormulaWithoutItsBias) {
  HandArm<decltype(&sm89_without_bias)> arm("test:sm89-no-bias", &sm89_without_bias);
  const IdentifyResult r = identify(arm);
  ASSERT_EQ(r.verdict, "identified") << describe(r);
  EXPECT_EQ(r.named, std::vector<std::string>{"sglang-sm89 (no bias)"}) << describe(r);
  EXPECT_NE(describe(r).find("named:   sglang-sm89 (no bias)"), std::string::npos) << describe(r);
  // Declared, it is its formula (the named row would take a bias the kernel refuses).
  EXPECT_EQ(identified_declaration(r), r.formula);
  // The class listing shows each member once, and not the formula line again.
  const auto& members = r.candidates["survivors"][0]["member_formulas"];
  std::set<std::string> seen;
  for (const auto& f : members) {
    EXPECT_TRUE(seen.insert(f.get<std::string>()).second) << f;
    EXPECT_NE(f.get<std::string>(), r.formula);
  }
}

// A conversion outside the space (fp32 round half away from zero: it parts from RNE on the ties
// beyond 2^24) is unexplained, and the diagnosis names the stage: the accumulator conversion, not
// the accumulator (the exact integer accumulation has no freedom), with the nearest candidate.
uint16_t rna_conversion(int64_t acc, float sa, float sw, std::optional<float> bias) {
  if (bias) throw Error(ErrorKind::input, "test arm takes no bias", __FILE__, __LINE__, "bias");
  const long double a = static_cast<long double>(acc);
  float f = static_cast<float>(acc);
  const float other = std::nextafter(f, static_cast<long double>(f) < a ? INFINITY : -INFINITY);
  const long double df = std::fabs(static_cast<long double>(f) - a), dother = std::fabs(static_cast<long double>(other) - a);
  if (dother == df && std::fabs(other) > std::fabs(f)) f = other;  // a tie: away from zero
  return f32_to_bf16(sa * (f * sw));
}

TEST(Identify, AConversionOutsideTheSpaceIsLocalizedToTheConversion) {
  HandArm<decltype(&rna_conversion)> arm("test:rna-conversion", &rna_conversion);
  const IdentifyResult r = identify(arm);
  ASSERT_EQ(r.verdict, "unexplained") << describe(r);
  EXPECT_FALSE(has_diagnosis(r, "accumulator")) << describe(r);
  const nlohmann::json* stage = nullptr;
  for (const auto& d : r.diagnosis) {
    if (d["kind"] == "stage") stage = &d;
  }
  ASSERT_NE(stage, nullptr) << describe(r);
  EXPECT_EQ((*stage)["stage"], "the accumulator conversion") << stage->dump(1);
  EXPECT_EQ((*stage)["region"], "|acc| > 2^24") << stage->dump(1);
  EXPECT_EQ(formula_class_key(parse_formula((*stage)["nearest"].get<std::string>())),
            formula_class_key(parse_formula("vllm-cutlass")))
      << stage->dump(1);
  EXPECT_GT((*stage)["unexplained_inside"].get<int64_t>(), 0);
  // Every separating output it lists lies beyond 2^24 and is what the arm gives, not the nearest.
  ASSERT_FALSE((*stage)["first"].empty());
  for (const auto& u : (*stage)["first"]) {
    EXPECT_GT(std::llabs(u["acc"].get<int64_t>()), int64_t{1} << 24) << u;
    EXPECT_NE(u["got"], u["formula_gives"]) << u;
  }
  EXPECT_NE(describe(r).find("the accumulator conversion: no candidate of the space explains the outputs with |acc| > 2^24"),
            std::string::npos)
      << describe(r);
}

// Two classes that part only beyond 2^24: the accumulator converted to fp32 RNE or toward zero
// (exact below 2^24). The arm converts toward zero, CUTLASS order, no bias.
uint16_t rz_cutlass(int64_t acc, float sa, float sw, std::optional<float> bias) {
  if (bias) throw Error(ErrorKind::input, "test arm takes no bias", __FILE__, __LINE__, "bias");
  return f32_to_bf16(sa * (rz32(acc) * sw));
}

// The bits a separation entry says a formula gives ("0x3cb6 (0.0222)" -> 0x3cb6).
uint16_t gives_bits(const nlohmann::json& g) { return static_cast<uint16_t>(std::stoul(g.get<std::string>().substr(0, 6), nullptr, 16)); }

TEST(Identify, ClassesThatPartOnlyOutsideJurisdictionAreAmbiguousWithTheOperandThatWouldSeparateThem) {
  HandArm<decltype(&rz_cutlass)> arm("test:rz-cutlass", &rz_cutlass);
  IdentifyOptions o;
  o.probe_acc_bits = 24;         // the designed probes stay at |acc| <= 2^24 ...
  o.jurisdiction_acc_bits = 24;  // ... and so does the jurisdiction (a kernel whose K keeps acc below 2^24)
  const IdentifyResult r = identify(arm, o);
  ASSERT_EQ(r.verdict, "ambiguous") << describe(r);
  EXPECT_EQ(r.matching, r.outputs);
  // The arm's own formula is one of the classes left.
  const std::string own = formula_class_key(parse_formula("bf16(rn32(sa * rn32(f32_rz(acc) * sw)))"));
  bool own_left = false;
  for (const auto& c : r.candidates["survivors"]) own_left |= c["key"] == own;
  EXPECT_TRUE(own_left) << describe(r);
  ASSERT_FALSE(r.separation.empty()) << describe(r);
  for (const auto& e : r.separation) {
    SCOPED_TRACE(e.dump());
    // Every pair is separable, and only outside jurisdiction: by an accumulator beyond 2^24.
    ASSERT_EQ(e["separable"], "outside jurisdiction");
    const int64_t acc = e["operand"]["acc"].get<int64_t>();
    EXPECT_GT(std::llabs(acc), int64_t{1} << 24);
    EXPECT_NE(e["outside"].dump().find("2^24"), std::string::npos);
    EXPECT_NE(e["summary"].get<std::string>().find("would separate: acc="), std::string::npos);
    // Re-evaluated here: both formulas at the operand give the bits reported, and they differ.
    const float sa = std::strtof(e["operand"]["sa"].get<std::string>().c_str(), nullptr);
    const float sw = std::strtof(e["operand"]["sw"].get<std::string>().c_str(), nullptr);
    ASSERT_EQ(e["operand"]["bias"], "none");
    const uint16_t ya = formula::apply_point(parse_formula(e["a"].get<std::string>()), acc, sa, sw, false, 0.0f);
    const uint16_t yb = formula::apply_point(parse_formula(e["b"].get<std::string>()), acc, sa, sw, false, 0.0f);
    EXPECT_EQ(ya, gives_bits(e["gives"][0]));
    EXPECT_EQ(yb, gives_bits(e["gives"][1]));
    EXPECT_NE(ya, yb);
  }
  EXPECT_NE(describe(r).find("would separate: acc="), std::string::npos) << describe(r);
}

TEST(Identify, ASeparatingOperandInJurisdictionIsProbedThroughTheArm) {
  // The same arm, the probes still capped at 2^24, the jurisdiction INT32 (the default): the
  // operand that separates RNE from RZ is in jurisdiction, so identify builds a probe from it,
  // runs it through the arm and names the arm's own class.
  HandArm<decltype(&rz_cutlass)> arm("test:rz-cutlass", &rz_cutlass);
  IdentifyOptions o;
  o.probe_acc_bits = 24;
  const IdentifyResult r = identify(arm, o);
  ASSERT_EQ(r.verdict, "identified") << describe(r);
  EXPECT_EQ(formula_class_key(parse_formula(r.formula)), formula_class_key(parse_formula("bf16(rn32(sa * rn32(f32_rz(acc) * sw)))")))
      << describe(r);
  EXPECT_EQ(r.matching, r.outputs);
  ASSERT_FALSE(r.separation.empty()) << describe(r);
  bool separation_probe = false;
  for (const auto& p : r.probes) separation_probe |= p["id"].get<std::string>().rfind("separate", 0) == 0 && p["eliminated"].get<int64_t>() > 0;
  EXPECT_TRUE(separation_probe) << describe(r);
  for (const auto& e : r.separation) {
    EXPECT_EQ(e["separable"], "in jurisdiction: probed") << e.dump();
    EXPECT_GT(std::llabs(e["operand"]["acc"].get<int64_t>()), int64_t{1} << 24) << e.dump();
  }
  // Without the cap the designed probes alone separate them (no separation step needed).
  const IdentifyResult d = identify(arm);
  ASSERT_EQ(d.verdict, "identified") << describe(d);
  EXPECT_EQ(d.formula, r.formula);
}

}  // namespace
}  // namespace qc
