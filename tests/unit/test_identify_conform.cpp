// `conform` identifies an arm that declares no formula before anything else, and the identified
// formula is that arm's declaration for the rest of conform (C6's predicted set); `--no-identify`
// (ConformOptions::identify = false) leaves it undeclared. The arm is a plugin with the example
// arm's arithmetic (`vllm-triton`) and no declared formula (tests/unit/plugins/undeclared_arm.c),
// compiled here.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <cstdlib>

#include "core/fileio.hpp"
#include "orchestrate/conform.hpp"
#include "qconform/arm.hpp"
#include "qconform/report.hpp"
#include "c_plugin.hpp"
#include "temp_dir.hpp"

namespace qc {
namespace {

// `fault`: built with -DUNDECLARED_FAULT (every seventh output's last bit flipped).
std::string compile_undeclared_plugin(const test::TempDir& dir, bool fault = false) {
  return test::compile_c_plugin({.source = "tests/unit/plugins/undeclared_arm.c",
                                 .out = dir.file(fault ? "libundeclared_fault.so" : "libundeclared_arm.so"),
                                 .flags = fault ? "-DUNDECLARED_FAULT" : "",
                                 .example_headers = true});
}

TEST(ConformIdentify, AnUndeclaredArmIsIdentifiedAndItsFormulaDeclared) {
  test::TempDir dir("conform-identify");
  const std::string so = compile_undeclared_plugin(dir);
  if (so.empty()) GTEST_SKIP() << "SKIPPED: no C compiler (`cc`) to build tests/unit/plugins/undeclared_arm.c";
  const std::string label = "plugin-inproc:" + so;
  ASSERT_TRUE(make_arm(label)->info().epilogue.empty()) << "the test plugin must declare no formula";

  ConformOptions o;
  o.arm_a = "cpu:vllm-cutlass";
  o.arm_b = label;
  o.synthetic_config = "tiny";
  o.max_new = 4;
  o.out_dir = dir.file("identify");
  const ConformOutcome with = run_conform(o);
  const nlohmann::json& arms = with.results.at("arms");
  ASSERT_EQ(arms.size(), 2u);
  // Arm A declares its formula; arm B is identified as the arithmetic the plugin runs.
  EXPECT_EQ(arms[0]["formula"]["source"], "declared") << arms[0].dump(1);
  EXPECT_EQ(arms[0]["formula"]["declared"], "vllm-cutlass");
  const nlohmann::json& f = arms[1].at("formula");
  ASSERT_EQ(f["verdict"], "identified") << f.dump(1);
  EXPECT_EQ(f["declared"], "vllm-triton") << f.dump(1);
  EXPECT_GT(f["heldout"]["outputs"].get<int64_t>(), 0);
  EXPECT_EQ(f["heldout"]["matching"], f["heldout"]["outputs"]);
  EXPECT_EQ(f["provenance"], fmt::format("identified by qconform identify, {} probes, held-out {}/{}", f["probes"].get<int64_t>(),
                                         f["heldout"]["matching"].get<int64_t>(), f["heldout"]["outputs"].get<int64_t>()));
  // ... and declared for the rest of conform: verify ran it as vllm-triton, checked it against that
  // formula and predicted the differences with A exactly (predicted_diff is null when an arm declares
  // nothing).
  EXPECT_EQ(arms[1]["epilogue"], "vllm-triton");
  EXPECT_NE(arms[1]["description"].get<std::string>().find(f["provenance"].get<std::string>()), std::string::npos);
  int64_t runs = 0;
  for (const auto& run : with.results["verify"]["runs"]) {
    ++runs;
    EXPECT_GE(run["predicted_diff"].get<int64_t>(), 0) << run.dump();
    EXPECT_EQ(run["formula_mismatch"], nlohmann::json::array({0, 0})) << run.dump();
    EXPECT_TRUE(run["predicted_equals_observed"].get<bool>()) << run.dump();
  }
  EXPECT_GT(runs, 0);
  EXPECT_TRUE(with.passed);
  // The report shows the identified formula.
  const std::string html = read_file(with.report_path);
  EXPECT_NE(html.find(html_escape(f["formula"].get<std::string>())), std::string::npos);
  EXPECT_NE(html.find("identified by <code>qconform identify</code>"), std::string::npos);

  // --no-identify: the arm goes on undeclared, as before.
  o.identify = false;
  o.out_dir = dir.file("no-identify");
  const ConformOutcome without = run_conform(o);
  const nlohmann::json& b = without.results.at("arms")[1];
  EXPECT_EQ(b["formula"]["source"], "none") << b.dump(1);
  EXPECT_EQ(b["epilogue"], "");
  for (const auto& run : without.results["verify"]["runs"]) EXPECT_TRUE(run["predicted_diff"].is_null()) << run.dump();
}

TEST(ConformIdentify, AnUnexplainedArmIsReportedAndGoesOnUndeclared) {
  test::TempDir dir("conform-unexplained");
  const std::string so = compile_undeclared_plugin(dir, /*fault=*/true);
  if (so.empty()) GTEST_SKIP() << "SKIPPED: no C compiler (`cc`) to build tests/unit/plugins/undeclared_arm.c";
  ConformOptions o;
  o.arm_a = "cpu:vllm-cutlass";
  o.arm_b = "plugin-inproc:" + so;
  o.synthetic_config = "tiny";
  o.max_new = 4;
  o.out_dir = dir.file("out");
  const ConformOutcome out = run_conform(o);
  const nlohmann::json& b = out.results.at("arms")[1];
  const nlohmann::json& f = b.at("formula");
  EXPECT_EQ(f["source"], "identify") << f.dump(1);
  ASSERT_EQ(f["verdict"], "unexplained") << f.dump(1);
  EXPECT_FALSE(f["diagnosis"].empty()) << f.dump(1);
  EXPECT_EQ(f["declared"], "");
  EXPECT_FALSE(f.contains("provenance"));
  // Conform went on without a declaration for B, as before.
  EXPECT_EQ(b["epilogue"], "");
  for (const auto& run : out.results["verify"]["runs"]) EXPECT_TRUE(run["predicted_diff"].is_null()) << run.dump();
  const std::string html = read_file(out.report_path);
  EXPECT_NE(html.find(">unexplained</span>"), std::string::npos);
  EXPECT_NE(html.find("conform went on without a declared formula for this arm"), std::string::npos);
}

// A block-scaled FP8 plugin that declares nothing (QC_ARM_FLAG_FP8_BLOCK): conform identifies its block
// model first (blocks, chain, promotion form, through its own `run`), declares it with its provenance, and
// verify then holds the plugin's D to it and predicts every difference with A (issue #30 item 5).
// tests/unit/plugins/undeclared_block_arm.c is that plugin.
TEST(ConformIdentify, AnUndeclaredBlockScaledPluginIsIdentifiedAndItsBlockModelDeclared) {
  test::TempDir dir("conform-identify-block");
  const std::string so = test::compile_c_plugin(
      {.source = "tests/unit/plugins/undeclared_block_arm.c", .out = dir.file("libundeclared_block.so"), .libm = true});
  if (so.empty()) GTEST_SKIP() << "SKIPPED: no C compiler (`cc`) to build tests/unit/plugins/undeclared_block_arm.c";
  const std::string label = "plugin-inproc:" + so;
  const ArmInfo info = make_arm(label)->info();
  ASSERT_TRUE(info.block() && info.accumulation_model.empty() && info.fp8_model_unknown()) << info.description;

  ConformOptions o;
  o.arm_a = "cpu:fp8-block-triton";
  o.arm_b = label;
  o.synthetic_config = "tiny";
  o.max_new = 4;
  o.sweep_ks.clear();
  o.out_dir = dir.file("identify");
  const ConformOutcome with = run_conform(o);
  const nlohmann::json& arms = with.results.at("arms");
  ASSERT_EQ(arms.size(), 2u);
  const nlohmann::json& f = arms[1].at("formula");
  ASSERT_EQ(f["verdict"], "identified") << f.dump(1);
  EXPECT_EQ(f["declared"], "block-deepgemm+exact") << f.dump(1);
  EXPECT_EQ(arms[1]["accumulation_model"], "block-deepgemm+exact") << arms[1].dump(1);
  int64_t runs = 0, differing = 0;
  for (const auto& run : with.results["verify"]["runs"]) {
    ++runs;
    ASSERT_FALSE(run["predicted_equals_observed"].is_null()) << run.dump();
    EXPECT_TRUE(run["predicted_equals_observed"].get<bool>()) << run.dump();
    differing += run["bitwise_diff"].get<int64_t>();
  }
  EXPECT_GT(runs, 0);
  EXPECT_GT(differing, 0) << "block-triton+hopper chain against exact sums: some outputs differ, all predicted";
  EXPECT_EQ(with.results["interchangeability"]["answer"], "explained") << with.results["interchangeability"].dump(1);

  // --no-identify: the arm runs undeclared and nothing predicts its outputs (null, never "pass").
  o.identify = false;
  o.out_dir = dir.file("no-identify");
  const ConformOutcome without = run_conform(o);
  EXPECT_EQ(without.results.at("arms")[1]["formula"]["source"], "none");
  for (const auto& run : without.results["verify"]["runs"]) EXPECT_TRUE(run["predicted_equals_observed"].is_null()) << run.dump();
}

}  // namespace
}  // namespace qc
