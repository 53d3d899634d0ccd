// conform --invariance-mates (C8 end to end, issue #31 item 3): each arm's captured layers over batch
// sizes and mates, the model run with every linear layer's rows inside batches of mates, and the report's
// C8 section per layer and per sequence. `cpu:sglang-sm90` is a real shape dispatch (SGLang's swap-AB
// rule, which in the tiny model switches at M = 16 / 17 on a down_proj), so its rows change bits with the
// batch: the check must find it variant and predicted, count the outputs that differ inside the model, and keep the invariant arm
// invariant. Without the option nothing of C8 runs or is written.
#include <gtest/gtest.h>


#include "core/fileio.hpp"
#include "orchestrate/conform.hpp"
#include "qconform/report.hpp"
#include "temp_dir.hpp"

namespace qc {
namespace {

TEST(ConformInvariance, EachArmPerLayerAndPerSequenceInResultsAndReport) {
  test::TempDir dir("conform-invariance");
  ConformOptions o{.arm_a = "cpu:vllm-cutlass", .arm_b = "cpu:sglang-sm90", .out_dir = dir.file("with"),
                   .synthetic_config = "tiny", .max_new = 6, .invariance_mates = {0, 15, 63, 127}, .invariance_tp = 2};
  const ConformOutcome out = run_conform(o);
  const nlohmann::json& inv = out.results.at("invariance");
  ASSERT_TRUE(inv.is_object());
  EXPECT_EQ(inv["mates"], nlohmann::json({0, 15, 63, 127}));
  EXPECT_EQ(inv["mates_from"], "other prompts");
  ASSERT_EQ(inv["arms"].size(), 2u);
  const nlohmann::json& a = inv["arms"][0];
  const nlohmann::json& b = inv["arms"][1];
  EXPECT_EQ(a["arm"], "cpu:vllm-cutlass");
  EXPECT_EQ(b["arm"], "cpu:sglang-sm90");
  // Per captured layer: every layer checked, each with its own verdict; A invariant (the integer alibi and
  // a per-element epilogue), B variant and predicted where its swap-AB rule moves with the batch.
  const size_t layers = a["layers"].size();
  ASSERT_GT(layers, 0u);
  EXPECT_EQ(b["layers"].size(), layers);
  EXPECT_EQ(a["check"]["verdict"], "pass") << a["check"].dump();
  EXPECT_EQ(b["check"]["verdict"], "reported") << b["check"].dump();
  size_t variant = 0;
  for (const nlohmann::json& l : b["layers"]) {
    if (l["verdict"] == "invariant") continue;
    ++variant;
    EXPECT_EQ(l["verdict"], "variant, predicted") << l.dump();
    EXPECT_FALSE(l["thresholds"].empty()) << l.dump();
    for (const nlohmann::json& c : l["configs"]) EXPECT_EQ(c["mispredicted"], 0) << c.dump();
  }
  EXPECT_GT(variant, 0u);
  // Inside the model: every linear layer counted, the invariant arm's outputs all equal to the rows alone.
  EXPECT_GT(a["mates"]["decoder"]["calls"].get<int64_t>(), 0);
  EXPECT_EQ(a["mates"]["decoder"]["differing"], 0);
  EXPECT_GT(b["mates"]["decoder"]["differing"].get<int64_t>(), 0) << b["mates"]["decoder"].dump();
  // Per sequence: one row per prompt, alone against with mates; the invariant arm's all identical.
  const nlohmann::json& seq = a["mates"]["generation"]["sequence"];
  EXPECT_EQ(seq["per_prompt"].size(), out.results["prompts"]["count"].get<size_t>());
  EXPECT_EQ(seq["identical"], seq["prompts"]);
  EXPECT_TRUE(a["mates"]["records_identical"].get<bool>());
  EXPECT_EQ(a["mates"]["replay"]["replay"]["flips"], 0);
  // The mates are the rows other prompts fed each layer: every layer is reached by every prompt, so no
  // synthetic row was needed.
  EXPECT_GT(a["mates"]["mate_rows"]["from_other_prompts"].get<int64_t>(), 0) << a["mates"].dump();
  EXPECT_EQ(a["mates"]["mate_rows"]["synthetic"], 0) << a["mates"].dump();
  // TP 2: the row-parallel layers' bf16 partials are rounded per shard, so the model's outputs move
  // (counted per layer), and every captured layer at TP 2 is predicted element for element.
  const nlohmann::json& tp = a["tp"];
  ASSERT_TRUE(tp.is_object());
  EXPECT_EQ(tp["degree"], 2);
  EXPECT_GT(tp["decoder"]["differing"].get<int64_t>(), 0) << tp["decoder"].dump();
  EXPECT_NE(tp["verdict"], "variant, unexplained") << tp.dump();
  ASSERT_EQ(tp["layers"].size(), layers);
  bool row_parallel_moved = false;
  for (const nlohmann::json& l : tp["layers"]) {
    const nlohmann::json& d = l["degrees"][1];
    if (!d["applicable"].get<bool>()) continue;
    EXPECT_EQ(d["predicted_equals_observed"], true) << l.dump();
    row_parallel_moved = row_parallel_moved || (l["style"] == "row-parallel" && d["observed_diff"].get<int64_t>() > 0);
  }
  EXPECT_TRUE(row_parallel_moved);
  EXPECT_EQ(tp["generation"]["sequence"]["per_prompt"].size(), seq["per_prompt"].size());
  EXPECT_TRUE(out.passed);
  // The report shows the section: both arms, the per-sequence table.
  const std::string html = read_file(out.report_path);
  EXPECT_NE(html.find("<section id=\"invariance\">"), std::string::npos);
  EXPECT_NE(html.find("cpu:sglang-sm90</code> <span class=\"verdict reported\">"), std::string::npos);
  EXPECT_NE(html.find("per sequence"), std::string::npos);
  EXPECT_NE(html.find("<h4>Tensor parallel 2 (ring)</h4>"), std::string::npos);

  // Without the option: nothing of C8 runs, results say null, the report has no section.
  o.invariance_mates.clear();
  o.invariance_tp = 0;
  o.out_dir = dir.file("without");
  const ConformOutcome plain = run_conform(o);
  EXPECT_TRUE(plain.results.at("invariance").is_null());
  EXPECT_EQ(read_file(plain.report_path).find("<section id=\"invariance\">"), std::string::npos);
}

}  // namespace
}  // namespace qc
