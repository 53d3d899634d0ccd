// The interchangeability answer (src/checks/interchangeability.cpp): the decision over every
// combination of its facts, table-driven; then verify end to end on the four pairs whose answers the
// issue fixes (an arm against itself, two declared production formulas, an undeclared differing
// arm, a mutant), an undeclared FP8 arm, and the summary lines that may only say what was checked.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "checks/c1_boundary.hpp"
#include "checks/c7_transfer.hpp"
#include "orchestrate/conform.hpp"
#include "checks/interchangeability.hpp"
#include "checks/verify.hpp"
#include "core/suggest.hpp"
#include "qconform/arm.hpp"
#include "qconform/error.hpp"
#include "synth/synth.hpp"
#include "c_plugin.hpp"
#include "temp_dir.hpp"
#include "wrapped_arm.hpp"

namespace qc {
namespace {

// ---- the decision, table-driven -------------------------------------------------------------------

struct DecisionCase {
  std::string id;  // names the combination
  bool failed;     // a check failed (C4, the accumulation stage)
  int64_t differing, unpredicted;
  int tokens;      // 0: not measured, 1: identical, 2: differ
  bool pow2_e2e_identical;
  Interchangeability want;
  std::string reason_has;
};

TEST(Interchangeability, DecidedFromTheFactsInEveryCombination) {
  const std::vector<DecisionCase> cases = {
      {"no-failure/no-difference/no-tokens", false, 0, 0, 0, true, Interchangeability::identical, "bit-identical"},
      {"no-failure/no-difference/tokens-identical", false, 0, 0, 1, true, Interchangeability::identical,
       "generated tokens identical"},
      {"no-failure/no-difference/tokens-differ", false, 0, 0, 2, true, Interchangeability::unexplained,
       "the model runs differ"},
      {"no-failure/no-difference/pow2-e2e-differs", false, 0, 0, 1, false, Interchangeability::unexplained,
       "power-of-two generations differ"},
      {"no-failure/predicted-differences/no-tokens", false, 12, 0, 0, true, Interchangeability::explained,
       "every one predicted exactly"},
      {"no-failure/predicted-differences/tokens-differ", false, 12, 0, 2, true, Interchangeability::explained,
       "token effect measured: 3 teacher-forced flips"},
      {"no-failure/some-unpredicted", false, 12, 5, 0, true, Interchangeability::unexplained, "5 of them"},
      {"no-failure/all-unpredicted/tokens-identical", false, 12, 12, 1, true, Interchangeability::unexplained,
       "predicted by nothing"},
      {"failure/no-difference", true, 0, 0, 0, true, Interchangeability::different, "the accumulation stage"},
      {"failure/predicted-differences", true, 12, 0, 1, true, Interchangeability::different, "C4 failed"},
      {"failure/unpredicted-differences", true, 12, 12, 2, false, Interchangeability::different, "C4 failed"},
  };
  for (const DecisionCase& c : cases) {
    SCOPED_TRACE(c.id);
    InterchangeabilityFacts f;
    if (c.failed) f.failures.push_back({"C4", "accumulation", "saturation, wraparound"});
    f.runs = 3;
    f.elements = 3000;
    f.differing = c.differing;
    f.max_ulp = c.differing ? 1 : 0;
    f.unpredicted_differing = c.unpredicted;
    f.unpredicted_runs = c.unpredicted ? 1 : 0;
    if (c.unpredicted) f.unpredicted_why = {"no formula declared for B (plugin:x.so)"};
    f.advice = "run identify";
    f.predicted_by = "the declared formulas";
    f.difference_stage = "epilogue stage";
    f.tokens_measured = c.tokens != 0;
    f.positions = 100;
    f.sequences = 8;
    f.flips = c.tokens == 2 ? 3 : 0;
    f.identical_sequences = c.tokens == 2 ? 6 : 8;
    f.pow2_end_to_end_identical = c.pow2_e2e_identical;
    const InterchangeabilityAnswer a = decide_interchangeability(f);
    EXPECT_EQ(interchangeability_name(a.answer), interchangeability_name(c.want)) << a.reason;
    EXPECT_NE(a.reason.find(c.reason_has), std::string::npos) << a.reason;
    // Advice only where something can be done: differences nothing predicted (whatever the answer).
    EXPECT_EQ(a.advice.empty(), c.unpredicted == 0) << a.advice;
    const nlohmann::json j = to_json(a);
    EXPECT_EQ(j["answer"], interchangeability_name(c.want));
    EXPECT_FALSE(j["licenses"].get<std::string>().empty());
    EXPECT_EQ(j["evidence"]["differing"], c.differing);
  }
}

TEST(Interchangeability, NothingComparedIsNoAnswer) {
  const InterchangeabilityAnswer a = decide_interchangeability({});
  EXPECT_EQ(a.answer, Interchangeability::unexplained);
  EXPECT_NE(a.reason.find("nothing was compared"), std::string::npos) << a.reason;
}

// ---- verify end to end ----------------------------------------------------------------------------

// A layer on which `vllm-cutlass` and `vllm-triton` differ: 6 of its 2^20 outputs under real scales
// (the synthetic operands are the same bytes on every machine).
std::vector<LayerOperands> layers_that_differ() { return synth_operands({.shapes = "512x2048x256", .m = 512, .seed = 2}); }

// An arm that computes `inner`'s arithmetic and declares nothing: a kernel whose formula is unknown.
class Undeclared final : public test::WrappedArm {
 public:
  explicit Undeclared(const std::string& inner, bool fp8 = false, std::string label = "")
      : WrappedArm(inner, label.empty() ? "test:undeclared-" + inner : std::move(label)), fp8_(fp8) {}
  ArmInfo info() const override {
    ArmInfo i = WrappedArm::info();
    i.epilogue = fp8_ ? i.epilogue : "";
    i.accumulation_model = "";
    if (fp8_) i.element = ElementType::e4m3;
    i.exposes_accumulator = false;
    return i;
  }
  ArmOutput run(const LayerOperands& ops) override {
    ArmOutput out = WrappedArm::run(ops);
    out.record.arm = info().label;
    out.acc.reset();
    out.record.epilogue.clear();
    out.record.extra.erase("accumulation_model");
    return out;
  }

 private:
  bool fp8_;
};

VerifyOptions cpu(UserLanguage language = UserLanguage::cli) {
  VerifyOptions o;
  o.reference = VerifyReference::cpu;
  o.m_sweep = {};  // the layers' own M
  o.language = language;
  return o;
}

const CheckResult& check(const VerifyResult& r, const std::string& id) {
  for (const CheckResult& c : r.checks) {
    if (c.id == id) return c;
  }
  throw std::runtime_error("no check " + id);
}

TEST(InterchangeabilityVerify, AnArmAgainstItselfIsIdentical) {
  const std::vector<LayerOperands> layers = layers_that_differ();
  auto a = make_arm("cpu:vllm-cutlass"), b = make_arm("cpu:vllm-cutlass");
  const VerifyResult r = verify_layers(*a, *b, layers, predict(layers, "memory", ""), cpu());
  EXPECT_EQ(r.interchangeability.answer, Interchangeability::identical) << r.interchangeability.reason;
  EXPECT_EQ(to_json(r)["interchangeability"]["answer"], "identical");
  EXPECT_TRUE(r.interchangeability.advice.empty());
}

TEST(InterchangeabilityVerify, TwoDeclaredProductionFormulasAreExplained) {
  const std::vector<LayerOperands> layers = layers_that_differ();
  auto a = make_arm("cpu:vllm-cutlass"), b = make_arm("cpu:vllm-triton");
  const VerifyResult r = verify_layers(*a, *b, layers, predict(layers, "memory", ""), cpu());
  ASSERT_GT(r.total_real.bitwise_diff, 0) << "the two formulas should differ on this layer";
  EXPECT_EQ(r.interchangeability.answer, Interchangeability::explained) << r.interchangeability.reason;
  EXPECT_NE(r.interchangeability.reason.find("localized to the epilogue stage"), std::string::npos)
      << r.interchangeability.reason;
  EXPECT_NE(check(r, "C6").summary.find("predicted set == observed set in"), std::string::npos) << check(r, "C6").summary;
  const nlohmann::json j = to_json(r);
  for (const auto& run : j["runs"]) {
    EXPECT_TRUE(run["predicted_diff"].is_number()) << run.dump();
    EXPECT_TRUE(run["predicted_equals_observed"].get<bool>()) << run.dump();
  }
}

TEST(InterchangeabilityVerify, AnUndeclaredDifferingArmIsUnexplainedAndNeverClaimsAPrediction) {
  const std::vector<LayerOperands> layers = layers_that_differ();
  auto a = make_arm("cpu:vllm-cutlass");
  Undeclared b("cpu:vllm-triton");
  for (const UserLanguage language : {UserLanguage::cli, UserLanguage::python}) {
    const VerifyResult r = verify_layers(*a, b, layers, predict(layers, "memory", ""), cpu(language));
    const InterchangeabilityAnswer& ans = r.interchangeability;
    EXPECT_EQ(ans.answer, Interchangeability::unexplained) << ans.reason;
    EXPECT_NE(ans.reason.find("no formula declared for B"), std::string::npos) << ans.reason;
    if (language == UserLanguage::cli) {
      EXPECT_NE(ans.advice.find("qconform identify --arm test:undeclared-cpu:vllm-triton"), std::string::npos)
          << ans.advice;
      EXPECT_NE(ans.advice.find("--declare B="), std::string::npos) << ans.advice;
    } else {
      EXPECT_NE(ans.advice.find("qconform.identify(arm_b)"), std::string::npos) << ans.advice;
      EXPECT_NE(ans.advice.find("epilogue="), std::string::npos) << ans.advice;
      EXPECT_EQ(ans.advice.find("--"), std::string::npos) << "a CLI flag in a Python message: " << ans.advice;
    }
    // No line claims a prediction that was not made; the JSON says null, not -1 or true.
    const std::string c6 = check(r, "C6").summary;
    EXPECT_EQ(c6.find("predicted set == observed"), std::string::npos) << c6;
    EXPECT_NE(c6.find("no formula declared for B: differences not predicted (declare one, or run identify)"),
              std::string::npos)
        << c6;
    const nlohmann::json j = to_json(r);
    for (const auto& run : j["runs"]) {
      EXPECT_TRUE(run["predicted_diff"].is_null()) << run.dump();
      EXPECT_TRUE(run["predicted_equals_observed"].is_null()) << run.dump();
      EXPECT_TRUE(run["formula_mismatch"][1].is_null()) << run.dump();
      EXPECT_TRUE(run["acc_mismatch"][1].is_null()) << run.dump();
      EXPECT_TRUE(run["formula_mismatch"][0].is_number()) << run.dump();
    }
    EXPECT_TRUE(j["checks"][4]["evidence"]["runs_where_predicted_set_differs"].is_null());
  }
}

TEST(InterchangeabilityVerify, AMutantIsDifferentWithItsStageNamed) {
  // Codes of -128 and 127 only: pair sums that an int16 accumulator saturates (realistic layers may
  // never reach them: the mutant is exact there, and the answer would rightly be identical).
  OperandStorage s;
  const int64_t m = 16, n = 64, k = 1008;
  uint64_t state = 0xE87EE;
  for (int64_t i = 0; i < m * k; ++i) s.a_q.push_back((splitmix64(state) & 1) ? int8_t{127} : int8_t{-128});
  for (int64_t i = 0; i < n * k; ++i) s.w_q.push_back((splitmix64(state) & 1) ? int8_t{127} : int8_t{-128});
  s.a_scale.assign(m, 0x1p-14f);
  s.w_scale.assign(n, 0x1p-9f);
  const std::vector<LayerOperands> layers = {make_operands("extremes", m, n, k, std::move(s), "test")};
  auto a = make_arm("cpu:vllm-cutlass"), b = make_arm("mutant:int16-saturate");
  const VerifyResult r = verify_layers(*a, *b, layers, predict(layers, "memory", ""), cpu());
  EXPECT_EQ(r.interchangeability.answer, Interchangeability::different) << r.interchangeability.reason;
  EXPECT_NE(r.interchangeability.reason.find("C4 names the accumulation stage"), std::string::npos)
      << r.interchangeability.reason;
  EXPECT_EQ(r.interchangeability.evidence["failed"][0]["check"], "C4");
}

// The per-layer JSON (MPI ranks, --resume) reads null counts back as "not taken", losslessly.
TEST(InterchangeabilityVerify, NullCountsReadBackLosslessly) {
  const std::vector<LayerOperands> layers = layers_that_differ();
  auto a = make_arm("cpu:vllm-cutlass");
  Undeclared b("cpu:vllm-triton");
  const VerifiedLayers v = verify_layer_runs(a.operator*(), b, layers.size(), [&](size_t i) { return layers[i]; },
                                             predict(layers, "memory", ""), cpu());
  const LayerVerification& layer = v.layers.at(0);
  const LayerVerification back = layer_verification_from_json(to_json(layer), "test");
  EXPECT_EQ(to_json(back).dump(), to_json(layer).dump());
  EXPECT_FALSE(back.runs.at(0).predicted_diff.has_value());
  EXPECT_FALSE(back.runs.at(0).arm[1].formula_mismatch.has_value());
}

// Two declared FP8 models: every difference predicted, localized to the accumulation.
TEST(InterchangeabilityVerify, TwoDeclaredFp8ModelsAreExplained) {
  const std::vector<LayerOperands> layers =
      synth_operands({.shapes = "16x64x2048", .m = 16, .seed = 9, .element = "e4m3"});
  auto a = make_arm("cpu:fp8-hopper-fp8-promote4"), b = make_arm("cpu:fp8-hopper-fp8-chain");
  const VerifyResult r = verify_layers(*a, *b, layers, predict(layers, "memory", ""), cpu());
  ASSERT_GT(r.total_real.bitwise_diff, 0);
  EXPECT_EQ(r.interchangeability.answer, Interchangeability::explained) << r.interchangeability.reason;
  EXPECT_NE(r.interchangeability.reason.find("localized to the accumulation stage"), std::string::npos)
      << r.interchangeability.reason;
  EXPECT_NE(r.interchangeability.reason.find("no tolerance applies"), std::string::npos) << r.interchangeability.reason;
  EXPECT_TRUE(to_json(r)["interchangeability"]["evidence"]["tolerance_ulps"].is_null());
}

// ---- an FP8 arm with no declared model ------------------------------------------------------------

std::vector<LayerOperands> fp8_layers() {
  SynthOptions o;
  o.shapes = "16x64x2048";
  o.m = 16;
  o.seed = 9;
  o.element = "e4m3";
  return synth_operands(o);
}

// chain and promote4 differ by more than one ulp here, so with the default tolerance nothing admits
// the unpredicted differences (C6 fails, not localized: `different`); with a tolerance that covers
// them the pair is `unexplained`. Either way the advice says how to make them predicted.
TEST(InterchangeabilityVerify, AnUndeclaredFp8ArmIsUnexplainedWithTheAdviceToIdentify) {
  const std::vector<LayerOperands> layers = fp8_layers();
  auto a = make_arm("cpu:fp8-hopper-fp8-promote4");
  Undeclared b("cpu:fp8-hopper-fp8-chain", /*fp8=*/true);
  ASSERT_TRUE(b.info().fp8());
  ASSERT_TRUE(b.info().accumulation_model.empty());
  for (const UserLanguage language : {UserLanguage::cli, UserLanguage::python}) {
    for (const int64_t tolerance : {int64_t{1}, int64_t{1} << 14}) {
      SCOPED_TRACE(fmt::format("tolerance {} ulps, {}", tolerance, language == UserLanguage::cli ? "CLI" : "Python"));
      VerifyOptions o = cpu(language);
      o.tolerance_ulps = tolerance;
      const VerifyResult r = verify_layers(*a, b, layers, predict(layers, "memory", ""), o);
      ASSERT_GT(r.total_real.beyond_ulps(1), 0) << "chain and promote4 should differ by more than 1 ulp at K = 2048";
      for (const LayerRun& run : r.runs) {
        EXPECT_EQ(run.arm[1].unmodelled, kUndeclaredModel);
        EXPECT_FALSE(run.predicted_diff.has_value());
        EXPECT_FALSE(run.arm[1].formula_mismatch.has_value());
        EXPECT_EQ(run.arm[0].formula_mismatch, 0);  // A is still held to its model
      }
      const CheckResult& c6 = check(r, "C6");
      EXPECT_EQ(c6.summary.find("predicted set == observed"), std::string::npos) << c6.summary;
      EXPECT_NE(c6.summary.find("no accumulation model declared for B: differences not predicted"), std::string::npos)
          << c6.summary;
      const nlohmann::json j = to_json(r);
      EXPECT_TRUE(j["fp8"]["models"][1].is_null()) << j["fp8"].dump();
      EXPECT_TRUE(j["arms"][1]["fp8_model_unknown"].get<bool>());
      const InterchangeabilityAnswer& ans = r.interchangeability;
      if (tolerance == 1) {
        EXPECT_EQ(c6.verdict, Verdict::fail) << c6.summary;
        EXPECT_EQ(r.stage, Stage::not_localized) << r.stage_detail;
        EXPECT_EQ(ans.answer, Interchangeability::different) << ans.reason;
      } else {
        EXPECT_EQ(c6.verdict, Verdict::pass) << c6.summary;
        EXPECT_EQ(ans.answer, Interchangeability::unexplained) << ans.reason;
        EXPECT_NE(ans.reason.find("no accumulation model declared for B"), std::string::npos) << ans.reason;
      }
      EXPECT_NE(ans.advice.find(language == UserLanguage::python ? "qconform.identify(arm_b)" : "qconform identify --arm"),
                std::string::npos)
          << ans.advice;
      EXPECT_NE(ans.advice.find(language == UserLanguage::python ? "accumulation_model=" : "accumulation_model"),
                std::string::npos)
          << ans.advice;
    }
  }
}

// conform with an undeclared FP8 arm (reached by its label, as conform's model runs make their arms):
// it runs to the end, claims no prediction, and answers `unexplained` at best.
TEST(InterchangeabilityConform, AnUndeclaredFp8ArmRunsToAnHonestAnswer) {
  static const bool registered = [] {
    register_arm_backend({"testfp8", "test: FP8 arms that declare no accumulation model",
                          [] { return std::vector<std::string>{"undeclared-chain"}; },
                          [](std::string_view) -> std::unique_ptr<Arm> {
                            return std::make_unique<Undeclared>("cpu:fp8-hopper-fp8-chain", /*fp8=*/true,
                                                                "testfp8:undeclared-chain");
                          }});
    return true;
  }();
  ASSERT_TRUE(registered);
  test::TempDir dir("conform-fp8-undeclared");
  ConformOptions o{.arm_a = "cpu:fp8-hopper-fp8-promote4", .arm_b = "testfp8:undeclared-chain",
                   .out_dir = dir.file("out"), .synthetic_config = "tiny", .max_new = 4, .sweep_ks = {256},
                   .sweep_seeds = 1};
  // Identified first (conform's default): identify measures B's model, which then is its declaration,
  // so every difference is predicted.
  {
    ConformOptions identified = o;
    identified.out_dir = dir.file("out-identified");
    const nlohmann::json r = run_conform(identified).results;
    EXPECT_EQ(r["interchangeability"]["answer"], "explained") << r["interchangeability"].dump(1);
  }
  o.identify = false;  // as declared: nothing predicts B's outputs
  const ConformOutcome out = run_conform(o);
  const nlohmann::json& r = out.results;
  const std::string answer = r["interchangeability"]["answer"];
  ASSERT_FALSE(r["interchangeability"]["evidence"]["failed"].empty()) << r["interchangeability"].dump(1);
  // hopper-fp8-chain against hopper-fp8-promote4 differs by up to tens of ulps on the tiny model: nothing
  // predicts that, and it is beyond the tolerance (C6 fails, not localized); the advice still says how
  // to make it predicted.
  EXPECT_EQ(answer, "different") << r["interchangeability"].dump(1);
  EXPECT_EQ(r["interchangeability"]["evidence"]["failed"][0]["check"], "C6") << r["interchangeability"].dump(1);
  EXPECT_EQ(r["interchangeability"]["evidence"]["failed"][0]["stage"], "not localized") << r["interchangeability"].dump(1);
  EXPECT_NE(r["interchangeability"]["advice"].get<std::string>().find("qconform identify --arm testfp8:undeclared-chain"),
            std::string::npos)
      << r["interchangeability"].dump(1);
  for (const auto& c : r["checks"]) {
    EXPECT_EQ(c["summary"].get<std::string>().find("predicted set == observed"), std::string::npos) << c.dump();
  }
  for (const auto& run : r["verify"]["runs"]) EXPECT_TRUE(run["predicted_diff"].is_null()) << run.dump();
  EXPECT_TRUE(r["fp8"]["models"][1].is_null()) << r["fp8"].dump();
  // C1 of B measured its model and held it to nothing.
  EXPECT_EQ(r["checks"][1]["evidence"]["b"]["check"]["verdict"], "not-applicable") << r["checks"][1].dump();
}

// ---- summary lines that say only what was checked -------------------------------------------------

TEST(SummaryLines, C2WithoutAPinSaysComputedNotPinned) {
  const std::vector<LayerOperands> layers = layers_that_differ();
  auto a = make_arm("cpu:vllm-cutlass"), b = make_arm("cpu:vllm-triton");
  PredictionSet p = predict(layers, "memory", "");
  const VerifyResult computed = verify_layers(*a, *b, layers, p, cpu());
  EXPECT_NE(check(computed, "C2").summary.find("computed here, not pinned"), std::string::npos) << check(computed, "C2").summary;
  EXPECT_EQ(check(computed, "C2").summary.find("pinned predictions match"), std::string::npos);
  p.pinned = true;
  const VerifyResult pinned = verify_layers(*a, *b, layers, p, cpu());
  EXPECT_NE(check(pinned, "C2").summary.find("pinned predictions match the operands"), std::string::npos)
      << check(pinned, "C2").summary;
}

TEST(SummaryLines, C7WithoutAToleranceIsReportedNotPassed) {
  transfer::TransferResult replay, generation;
  replay.replay = transfer::ReplayResult{};
  replay.replay->n_positions = 100;
  replay.replay->n_flips = 2;
  replay.replay->flip_rate = 0.02;
  generation.sequence = transfer::SequenceResult{};
  generation.sequence->n_prompts = 4;
  generation.sequence->n_identical = 3;
  const CheckResult none = c7_transfer(replay, generation, -1);
  EXPECT_EQ(none.verdict, Verdict::reported);
  EXPECT_EQ(verdict_name(none.verdict), "reported");
  EXPECT_EQ(none.summary.rfind("reported (no tolerance set", 0), 0u) << none.summary;
  EXPECT_EQ(c7_transfer(replay, generation, 0.05).verdict, Verdict::pass);
  EXPECT_NE(c7_transfer(replay, generation, 0.05).summary.find("within the tolerance"), std::string::npos);
  EXPECT_EQ(c7_transfer(replay, generation, 0.01).verdict, Verdict::fail);
}

// ---- a failed C1 case names itself and its cause --------------------------------------------------

TEST(C1Failure, AWrappingPluginFailsTheOverflowCaseWhichNamesTheMissingRefusal) {
  test::TempDir dir("c1-wrap");
  const std::string so = test::compile_c_plugin(
      {.source = "tests/unit/plugins/wrap_arm.c", .out = dir.file("libwrap_arm.so"), .example_headers = true});
  if (so.empty()) GTEST_SKIP() << "SKIPPED: no C compiler (`cc`) to build tests/unit/plugins/wrap_arm.c";
  auto arm = make_arm("plugin-inproc:" + so);
  const BoundaryResult r = run_boundary(*arm);
  EXPECT_EQ(r.c1.verdict, Verdict::fail) << r.c1.summary;
  std::vector<const BoundaryCase*> failed;
  for (const BoundaryCase& c : r.cases) {
    if (c.verdict == Verdict::fail) failed.push_back(&c);
  }
  ASSERT_EQ(failed.size(), 1u) << r.c1.summary;
  const BoundaryCase& c = *failed[0];
  EXPECT_EQ(c.id, "accumulation/all-min/K=131072");
  EXPECT_NE(c.inputs.find("[1,131072]"), std::string::npos) << c.inputs;
  EXPECT_NE(c.inputs.find("-128"), std::string::npos) << c.inputs;
  // What the arm returned (-512: 2^31 wrapped to -2^31, times 2^-22) and what was expected (+512).
  EXPECT_NE(c.detail.find("0xc400"), std::string::npos) << c.detail;
  EXPECT_NE(c.detail.find("0x4400"), std::string::npos) << c.detail;
  EXPECT_NE(c.points_to.find("missing refusal"), std::string::npos) << c.points_to;
  EXPECT_EQ(r.c1.points_to, c.points_to);
  EXPECT_NE(r.c1.summary.find("first failure: accumulation/all-min/K=131072"), std::string::npos) << r.c1.summary;
  const std::vector<std::string> lines = describe_failed_cases(r.cases);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0].rfind("case accumulation/all-min/K=131072: inputs a_q [1,131072]", 0), 0u) << lines[0];
}

// ---- "did you mean" -------------------------------------------------------------------------------

TEST(Suggest, EditDistanceCountsSwapsAsOne) {
  EXPECT_EQ(edit_distance("", ""), 0u);
  EXPECT_EQ(edit_distance("--arms", "--arms"), 0u);
  EXPECT_EQ(edit_distance("--arsm", "--arms"), 1u);   // a swap
  EXPECT_EQ(edit_distance("--arm", "--arms"), 1u);    // an insertion
  EXPECT_EQ(edit_distance("--pairs", "--pair"), 1u);  // a deletion
  EXPECT_EQ(edit_distance("kitten", "sitting"), 3u);
  EXPECT_EQ(edit_distance("abc", ""), 3u);
}

TEST(Suggest, NearestNamesAndTheirSentence) {
  const std::vector<std::string> flags = {"--arms", "--model", "--max-new", "--max-flip-rate", "--out"};
  EXPECT_EQ(nearest_names("--arsm", flags), std::vector<std::string>{"--arms"});
  EXPECT_EQ(did_you_mean("--arsm", flags), "; did you mean `--arms`?");
  EXPECT_EQ(did_you_mean("--zzzzzzzz", flags), "");
  EXPECT_EQ(did_you_mean("--arms", flags), "");  // the name itself is no suggestion
  EXPECT_EQ(did_you_mean("--max-nwe", flags), "; did you mean `--max-new`?");
  EXPECT_EQ(did_you_mean_sentence({"a", "b", "c"}), "; did you mean `a`, `b` or `c`?");
  EXPECT_EQ(did_you_mean_sentence({}), "");
}

TEST(Suggest, AnUnknownArmNamesTheNearestLabels) {
  for (const auto& [typo, want] : {std::pair{"cpu:vllm-cutlas", "cpu:vllm-cutlass"},
                                   std::pair{"mutant:int16-saturat", "mutant:int16-saturate"},
                                   std::pair{"cpux:vllm-triton", "cpu:vllm-triton"},
                                   std::pair{"vllm-cutlass", "cpu:vllm-cutlass"}}) {
    try {
      make_arm(typo);
      ADD_FAILURE() << typo << " was accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::input);
      EXPECT_NE(std::string(e.what()).find(fmt::format("did you mean `{}`", want)), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace qc
