// The registry of verify's per-layer checks (src/checks/layer_checks.hpp): it is the table's
// per-layer rows in the table's order, each check names its stage from its row, writes and reads its
// own fields of a run (disjoint from every other check's), and the FP8 stage a failure names comes
// from the check that failed.
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "checks/layer_checks.hpp"
#include "checks/verify.hpp"
#include "qconform/arm.hpp"
#include "qconform/check.hpp"
#include "qconform/error.hpp"
#include "orchestrate/sweep.hpp"
#include "synth/synth.hpp"
#include "verify_test_util.hpp"

namespace qc {
namespace {

TEST(CheckRegistry, IsThePerLayerRowsOfTheTableInItsOrder) {
  std::vector<std::string> rows, registry;
  for (const CheckSpec& s : check_table()) {
    if (s.per_layer) rows.push_back(s.id);
  }
  for (const LayerCheck& c : layer_checks()) {
    registry.emplace_back(c.id);
    EXPECT_EQ(&layer_check(c.id), &c) << c.id;
    EXPECT_NE(c.decide, nullptr) << c.id;
    EXPECT_NE(c.write_run, nullptr) << c.id;
    EXPECT_NE(c.read_run, nullptr) << c.id;
  }
  EXPECT_EQ(registry, (std::vector<std::string>{"C2", "C3", "C4", "C5", "C6"}));
  EXPECT_EQ(registry, rows);
  EXPECT_THROW(layer_check("C0"), Error);  // decided by its own stage, not per layer
  EXPECT_THROW(layer_check("C8"), Error);
}

// The stage each row names, as docs/checks.md's "points to" column describes it.
TEST(CheckRegistry, EachRowNamesTheStageItGuards) {
  const std::vector<std::pair<std::string, Stage>> expected = {
      {"C0", Stage::provenance}, {"C1", Stage::arithmetic}, {"C2", Stage::accumulator_range},
      {"C3", Stage::operands},   {"C4", Stage::accumulation}, {"C5", Stage::epilogue},
      {"C6", Stage::epilogue},   {"C7", Stage::token},        {"C8", Stage::invariance}};
  ASSERT_EQ(expected.size(), check_table().size());
  for (const auto& [id, stage] : expected) EXPECT_EQ(check_spec(id).stage, stage) << id;
  EXPECT_EQ(check_stage("C4"), "accumulation");
  EXPECT_EQ(check_stage("C2"), "accumulator range");
  // Every stage has its own name (the name table is complete).
  std::set<std::string> names;
  for (Stage s : {Stage::provenance, Stage::arithmetic, Stage::operands, Stage::accumulator_range, Stage::accumulation,
                  Stage::accumulation_model, Stage::epilogue, Stage::token, Stage::invariance, Stage::not_localized}) {
    const std::string name(stage_name(s));
    EXPECT_FALSE(name.empty());
    EXPECT_TRUE(names.insert(name).second) << name;
  }
}

TEST(CheckRegistry, MakeCheckTakesTheFp8FormOfItsRow) {
  for (const CheckSpec& s : check_table()) {
    const CheckResult c = make_check(s.id, Verdict::pass, /*fp8=*/true);
    EXPECT_EQ(c.points_to, s.fp8_points_to.empty() ? s.points_to : s.fp8_points_to) << s.id;
  }
  ASSERT_FALSE(check_spec("C4").fp8_points_to.empty());
  EXPECT_NE(check_spec("C4").fp8_points_to, check_spec("C4").points_to);
  EXPECT_NE(make_check("C4", Verdict::fail, true).points_to.find("declared model"), std::string::npos);
}

// Real runs: INT8 with a mutant (C5 fails) and an FP8 pair on its models.
std::vector<VerifyResult> real_results() {
  SynthOptions o;
  o.shapes = "tiny";
  o.m = 16;
  o.seed = 5;
  const std::vector<LayerOperands> layers = synth_operands(o);
  std::vector<VerifyResult> results;
  {
    auto a = make_arm("cpu:vllm-cutlass"), b = make_arm("mutant:bf16-truncate");
    results.push_back(verify_layers(*a, *b, layers, predict(layers, "mem", ""), test::cpu_options()));
  }
  const std::vector<LayerOperands> fp8 = {synth_fp8_layer("fp8.k512", 8, 32, 512, 7, "test_check_registry")};
  auto a = make_arm("cpu:fp8-hopper-fp8-chain"), b = make_arm("cpu:fp8-hopper-fp8-promote4");
  results.push_back(verify_layers(*a, *b, fp8, predict(fp8, "mem", ""), test::cpu_options()));
  return results;
}

// Each check's fields of a run: its own keys (no two checks write one key), present in verify's
// JSON, and read back to the same fields (what it writes again equals what it wrote).
TEST(CheckRegistry, EachCheckOwnsItsFieldsOfARunBothWays) {
  for (const VerifyResult& r : real_results()) {
    ASSERT_FALSE(r.runs.empty());
    const nlohmann::json published = to_json(r)["runs"];
    ASSERT_EQ(published.size(), r.runs.size());
    for (size_t i = 0; i < r.runs.size(); ++i) {
      const LayerRun& x = r.runs[i];
      std::set<std::string> owner_keys;
      for (const LayerCheck& c : layer_checks()) {
        nlohmann::json mine = nlohmann::json::object(), lossless = nlohmann::json::object();
        c.write_run(mine, x, /*lossless=*/false);
        c.write_run(lossless, x, /*lossless=*/true);
        for (const auto& [key, value] : mine.items()) {
          EXPECT_TRUE(owner_keys.insert(key).second) << c.id << " writes `" << key << "`, another check's field";
          ASSERT_TRUE(published[i].contains(key)) << c.id << ": " << key;
          EXPECT_EQ(published[i][key], value) << c.id << ": " << key;
        }
        LayerRun back;
        back.fp8 = x.fp8;
        back.block = x.block;
        c.read_run(lossless, back);
        nlohmann::json again = nlohmann::json::object();
        c.write_run(again, back, /*lossless=*/true);
        EXPECT_EQ(again, lossless) << c.id << " on " << x.layer;
      }
      EXPECT_FALSE(owner_keys.empty());
    }
  }
}

TEST(CheckRegistry, RealRunsDecideEveryCheckFromItsRow) {
  const std::vector<VerifyResult> results = real_results();
  for (const VerifyResult& r : results) {
    ASSERT_EQ(r.checks.size(), layer_checks().size());
    for (size_t i = 0; i < r.checks.size(); ++i) EXPECT_EQ(r.checks[i].id, layer_checks()[i].id);
  }
  EXPECT_EQ(test::check(results[0], "C5").verdict, Verdict::fail);
  EXPECT_FALSE(results[0].stage.has_value()) << "INT8 pairs name no FP8 stage";
  EXPECT_TRUE(results[1].all_passed()) << results[1].stage_sentence();
  EXPECT_FALSE(results[1].stage.has_value());
  EXPECT_EQ(results[1].stage_sentence(), "");
}

// A hand-built FP8 result: the stage each check's evidence or failure names.
VerifyResult fp8_result_with(const LayerRun& x) {
  VerifyResult r;
  r.arm_a.label = "test:a";
  r.arm_b.label = "test:b";
  r.arm_a.accumulation_model = r.arm_b.accumulation_model = "hopper-fp8-chain";
  r.runs = {x};
  return r;
}

TEST(CheckRegistry, Fp8EvidenceNamesItsStage) {
  LayerRun x;
  x.layer = "l0";
  x.m = 4;
  x.fp8 = true;
  const LayerCheck& c3 = layer_check("C3");
  const LayerCheck& c4 = layer_check("C4");
  ASSERT_NE(c3.evidence_stage, nullptr);
  ASSERT_NE(c4.evidence_stage, nullptr);
  EXPECT_EQ(layer_check("C2").evidence_stage, nullptr);
  // The data flow's order: operands come before the accumulation in the registry.
  EXPECT_LT(&c3 - layer_checks().data(), &c4 - layer_checks().data());

  EXPECT_FALSE(c3.evidence_stage(fp8_result_with(x)).has_value());
  EXPECT_FALSE(c4.evidence_stage(fp8_result_with(x)).has_value());

  LayerRun changed = x;
  changed.operands_identical = false;
  changed.operands_note = "arm B wrote into w_q";
  const auto operands = c3.evidence_stage(fp8_result_with(changed));
  ASSERT_TRUE(operands.has_value());
  EXPECT_EQ(operands->stage, Stage::operands);
  EXPECT_NE(operands->detail.find("arm B wrote into w_q"), std::string::npos) << operands->detail;

  LayerRun acc_off = x;
  acc_off.arm[1].acc_mismatch = 3;
  acc_off.arm[1].formula_mismatch = 2;
  const auto model = c4.evidence_stage(fp8_result_with(acc_off));
  ASSERT_TRUE(model.has_value());
  EXPECT_EQ(model->stage, Stage::accumulation_model);
  EXPECT_NE(model->detail.find("arm B (test:b)"), std::string::npos) << model->detail;

  LayerRun outputs_off = x;  // the accumulator compared and on its model, the outputs off
  outputs_off.arm[0].acc_mismatch = 0;
  outputs_off.arm[0].formula_mismatch = 5;
  const auto epilogue = c4.evidence_stage(fp8_result_with(outputs_off));
  ASSERT_TRUE(epilogue.has_value());
  EXPECT_EQ(epilogue->stage, Stage::epilogue);

  LayerRun unexposed = x;  // no accumulator to clear the epilogue: the model is named
  unexposed.arm[0].formula_mismatch = 5;
  const auto not_cleared = c4.evidence_stage(fp8_result_with(unexposed));
  ASSERT_TRUE(not_cleared.has_value());
  EXPECT_EQ(not_cleared->stage, Stage::accumulation_model);
  EXPECT_NE(not_cleared->detail.find("exposes no fp32 accumulator"), std::string::npos) << not_cleared->detail;
}

TEST(CheckRegistry, Fp8FailureNamesTheStageOfTheCheckThatFailed) {
  CheckResult c5 = make_check("C5", Verdict::fail);
  c5.summary = "2 differences";
  ASSERT_NE(layer_check("C5").failure_stage, nullptr);
  EXPECT_EQ(layer_check("C5").failure_stage(c5).stage, Stage::epilogue);
  EXPECT_EQ(layer_check("C5").failure_stage(c5).detail, "C5 failed: 2 differences");

  const LayerCheck& c6 = layer_check("C6");
  ASSERT_NE(c6.failure_stage, nullptr);
  CheckResult tolerance = make_check("C6", Verdict::fail);
  tolerance.summary = "beyond 1 ulp";
  tolerance.evidence["unpredicted_beyond_tolerance"] = 7;
  const StageFinding unlocalized = c6.failure_stage(tolerance);
  EXPECT_EQ(unlocalized.stage, Stage::not_localized);
  EXPECT_NE(unlocalized.detail.find("7 differences that no declared model predicts"), std::string::npos)
      << unlocalized.detail;
  tolerance.evidence["unpredicted_beyond_tolerance"] = 0;
  EXPECT_EQ(c6.failure_stage(tolerance).stage, Stage::accumulation_model);

  // C2 and C4 name the default: the accumulation model.
  EXPECT_EQ(layer_check("C2").failure_stage, nullptr);
  EXPECT_EQ(layer_check("C4").failure_stage, nullptr);
  EXPECT_EQ(failed_in(make_check("C4", Verdict::fail), Stage::accumulation_model).stage, Stage::accumulation_model);
}

}  // namespace
}  // namespace qc
