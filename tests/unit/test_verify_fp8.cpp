// verify on FP8 pairs (issue #14 item 4): each arm against its declared accumulation model, the
// predicted set of differing elements against the observed one, the power-of-two runs, the stage a
// failure names, unmodelled runs, and the CLI end to end.
//
//   cmake --build build -j2 --target qconform qconform_unit_tests &&
//   ./build/tests/qconform_unit_tests --gtest_filter='VerifyFp8*'
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <fmt/format.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <tuple>
#include <nlohmann/json.hpp>

#include "accum/fp8_model.hpp"
#include "checks/element_pass.hpp"
#include "orchestrate/sweep.hpp"
#include "checks/verify.hpp"
#include "checks/verify_results.hpp"
#include "verify_test_util.hpp"
#include "core/operands_io.hpp"
#include "qconform/arm.hpp"
#include "qconform/epilogue.hpp"
#include "qconform/error.hpp"
#include "qconform/numerics.hpp"
#include "qconform/report.hpp"
#include "synth/synth.hpp"
#include "temp_dir.hpp"
#include "wrapped_arm.hpp"

namespace qc {
namespace {

// An FP8 (e4m3 x e4m3) layer in memory, from the sweep's realistic FP8 operands.
LayerOperands fp8_layer(const std::string& name, int64_t m, int64_t n, int64_t k, uint64_t seed) {
  return synth_fp8_layer(name, m, n, k, seed, "test_verify_fp8");
}

// An INT8 layer whose codes are all exact in e4m3 (|code| <= 16): the FP8 arms re-encode them.
LayerOperands int8_e4m3_exact_layer(const std::string& name, int64_t m, int64_t n, int64_t k, uint64_t seed) {
  OperandStorage s;
  uint64_t st = seed;
  for (int64_t i = 0; i < m * k; ++i) s.a_q.push_back(static_cast<int8_t>(static_cast<int>(splitmix64(st) % 33) - 16));
  for (int64_t i = 0; i < n * k; ++i) s.w_q.push_back(static_cast<int8_t>(static_cast<int>(splitmix64(st) % 33) - 16));
  for (int64_t i = 0; i < m; ++i) s.a_scale.push_back(0x1.3p-7f * static_cast<float>(1 + i % 3));
  for (int64_t i = 0; i < n; ++i) s.w_scale.push_back(0x1.9p-6f * static_cast<float>(1 + i % 5));
  return make_operands(name, m, n, k, std::move(s), "test_verify_fp8");
}

std::vector<LayerOperands> fp8_layers() {
  return {fp8_layer("fp8.k256", 16, 64, 256, 1), fp8_layer("fp8.k1024", 8, 48, 1024, 2),
          fp8_layer("fp8.k4096", 4, 32, 4096, 3), int8_e4m3_exact_layer("int8codes.k2048", 6, 40, 2048, 4)};
}

using test::check;
using test::cpu_options;

// Independently of verify: the scalar reference of each model, the `fp8-scaled` epilogue, and the
// elements where the two predictions differ (and where the two accumulators differ).
struct ScalarPrediction {
  int64_t outputs_differ = 0, accumulators_differ = 0;
};
ScalarPrediction scalar_prediction(const LayerOperands& ops, const Fp8AccumModel& ma, const Fp8AccumModel& mb) {
  const Fp8LayerCodes codes = fp8_layer_codes("test", ops);
  std::vector<float> da(static_cast<size_t>(ops.m * ops.n)), db(da.size());
  fp8_model_reference(ma, codes.gemm(), da.data());
  fp8_model_reference(mb, codes.gemm(), db.data());
  std::vector<uint16_t> ya(da.size()), yb(da.size());
  apply_epilogue(fp8_epilogue(), da.data(), ops.a_scale.data(), ops.w_scale.data(), nullptr, ops.m, ops.n, ya.data());
  apply_epilogue(fp8_epilogue(), db.data(), ops.a_scale.data(), ops.w_scale.data(), nullptr, ops.m, ops.n, yb.data());
  ScalarPrediction p;
  for (size_t i = 0; i < ya.size(); ++i) {
    p.outputs_differ += ya[i] != yb[i];
    p.accumulators_differ += f32_bits(da[i]) != f32_bits(db[i]);
  }
  return p;
}

TEST(VerifyFp8, ChainVersusPromote4PredictsEveryDifference) {
  const std::vector<LayerOperands> layers = fp8_layers();
  const PredictionSet predictions = predict(layers, "memory", "");
  auto a = make_arm("cpu:fp8-hopper-fp8-chain");
  auto b = make_arm("cpu:fp8-hopper-fp8-promote4");
  const VerifyResult r = verify_layers(*a, *b, layers, predictions, cpu_options());
  for (const CheckResult& c : r.checks) EXPECT_NE(c.verdict, Verdict::fail) << c.id << ": " << c.summary;
  EXPECT_TRUE(r.all_passed());
  EXPECT_FALSE(r.stage.has_value());
  EXPECT_EQ(check(r, "C2").verdict, Verdict::not_applicable);
  EXPECT_NE(check(r, "C2").summary.find("FP8 accumulation is floating point"), std::string::npos);
  EXPECT_EQ(check(r, "C4").verdict, Verdict::pass) << check(r, "C4").summary;  // the CPU arms expose d
  EXPECT_EQ(check(r, "C5").verdict, Verdict::pass) << check(r, "C5").summary;
  EXPECT_EQ(check(r, "C6").verdict, Verdict::pass) << check(r, "C6").summary;
  ASSERT_EQ(r.runs.size(), layers.size() * 3);
  const Fp8AccumModel chain = fp8_accumulation_model("hopper-fp8-chain").model;
  const Fp8AccumModel promote4 = fp8_accumulation_model("hopper-fp8-promote4").model;
  int64_t deep_differences = 0;
  for (size_t li = 0; li < layers.size(); ++li) {
    for (size_t mi = 0; mi < 3; ++mi) {
      const LayerRun& run = r.runs[li * 3 + mi];
      const LayerOperands ops = apply_scale_mode(layers[li], run.mode);
      const ScalarPrediction want = scalar_prediction(ops, chain, promote4);
      SCOPED_TRACE(fmt::format("{} {}", run.layer, scale_mode_name(run.mode)));
      EXPECT_TRUE(run.fp8);
      EXPECT_EQ(run.arm[0].formula_mismatch, 0);
      EXPECT_EQ(run.arm[1].formula_mismatch, 0);
      EXPECT_EQ(run.arm[0].acc_mismatch, 0);
      EXPECT_EQ(run.arm[1].acc_mismatch, 0);
      EXPECT_TRUE(run.predicted_equals_observed);
      // The predicted and observed sets have the size the scalar references give.
      EXPECT_EQ(run.predicted_diff, want.outputs_differ);
      EXPECT_EQ(run.cmp.bitwise_diff, want.outputs_differ);
      EXPECT_EQ(run.model_acc_diff, want.accumulators_differ);
      EXPECT_EQ(run.pow2_violations, 0);
      if (run.k >= 1024) deep_differences += run.cmp.bitwise_diff;
    }
  }
  EXPECT_GT(deep_differences, 0) << "chain and promote4 should differ somewhere at K >= 1024";
  // The JSON names the models and says the reference was the model.
  const nlohmann::json j = to_json(r);
  // What `verify --json` writes (the runs' texts made apart and spliced) is the document's own dump.
  const nlohmann::json extra = {{"schema_version", 1}, {"invariance", {{"checked", false}}}};
  nlohmann::json whole = j;
  for (const auto& [key, value] : extra.items()) whole[key] = value;
  EXPECT_EQ(to_json_text(r, extra), whole.dump(1));
  const VerifyInputs inputs{"ops.safetensors", "sha256:00", "pred.json", "sha256:11", true};
  EXPECT_EQ(verify_results_text(r, inputs), verify_results_json(r, inputs).dump(1));
  EXPECT_THROW(to_json_text(r, {{"runs", 1}}), Error);
  EXPECT_EQ(j["fp8"]["reference"], "model");
  EXPECT_EQ(j["arms"][0]["accumulation_model"], "hopper-fp8-chain");
  EXPECT_EQ(j["arms"][1]["accumulation_model"], "hopper-fp8-promote4");
  EXPECT_EQ(j["arms"][1]["declared_epilogue"], "fp8-scaled");
  EXPECT_NE(r.reference.find("hopper-fp8-promote4"), std::string::npos) << r.reference;
  // The report shows the FP8 section with the declared models.
  const std::string html = render_report(nlohmann::json{{"schema_version", 1}, {"verify", j}}, ReportOptions{"", false});
  EXPECT_NE(html.find("FP8: each arm against its declared accumulation model"), std::string::npos);
  EXPECT_NE(html.find("<code>hopper-fp8-promote4</code>"), std::string::npos);
  EXPECT_NE(html.find("predicted set == observed set"), std::string::npos);
}

TEST(VerifyFp8, PerLayerResultsReadBackLosslessly) {
  const std::vector<LayerOperands> layers = {fp8_layer("fp8.k1024", 4, 16, 1024, 9)};
  const PredictionSet predictions = predict(layers, "memory", "");
  auto a = make_arm("mutant:fp8-rne-steps");
  auto b = make_arm("cpu:fp8-hopper-fp8-promote4");
  VerifiedLayers done = verify_layer_runs(*a, *b, 1, [&](size_t i) { return layers[i]; }, predictions, cpu_options());
  const LayerVerification& v = done.layers.at(0);
  const LayerVerification back = layer_verification_from_json(to_json(v), "test");
  ASSERT_EQ(back.runs.size(), v.runs.size());
  for (size_t i = 0; i < v.runs.size(); ++i) {
    EXPECT_TRUE(back.runs[i].fp8);
    EXPECT_EQ(back.runs[i].model_acc_diff, v.runs[i].model_acc_diff);
    EXPECT_EQ(back.runs[i].model_first, v.runs[i].model_first);
    EXPECT_EQ(back.runs[i].arm[0].formula_mismatch, v.runs[i].arm[0].formula_mismatch);
    EXPECT_EQ(back.runs[i].acc_first_mismatch, v.runs[i].acc_first_mismatch);
  }
  EXPECT_GT(v.runs[0].arm[0].formula_mismatch.value_or(0) + v.runs[0].arm[0].acc_mismatch.value_or(0), 0);
}

// The FP8 mutant declares hopper-fp8-chain but rounds to nearest: verify names the accumulation stage
// and the arm, and its first listed accumulator is the first element (row-major) where the faulty
// model and the declared one differ, as the scalar references find it.
TEST(VerifyFp8, MutantIsCaughtInTheAccumulationStage) {
  const std::vector<LayerOperands> layers = {fp8_layer("fp8.k2048", 8, 32, 2048, 5)};
  const PredictionSet predictions = predict(layers, "memory", "");
  auto mutant = make_arm("mutant:fp8-rne-steps");
  auto good = make_arm("cpu:fp8-hopper-fp8-chain");
  ASSERT_EQ(mutant->info().accumulation_model, "hopper-fp8-chain");
  const VerifyResult r = verify_layers(*mutant, *good, layers, predictions, cpu_options());
  EXPECT_FALSE(r.all_passed());
  EXPECT_EQ(r.stage, Stage::accumulation_model) << r.stage_detail;
  EXPECT_NE(r.stage_detail.find("arm A (mutant:fp8-rne-steps)"), std::string::npos) << r.stage_detail;
  EXPECT_NE(r.stage_detail.find("hopper-fp8-chain"), std::string::npos) << r.stage_detail;
  EXPECT_EQ(check(r, "C4").verdict, Verdict::fail) << check(r, "C4").summary;
  EXPECT_EQ(check(r, "C6").verdict, Verdict::fail) << check(r, "C6").summary;
  EXPECT_EQ(r.runs[0].arm[1].acc_mismatch, 0);   // the honest arm is on its model
  EXPECT_EQ(r.runs[0].arm[1].formula_mismatch, 0);

  Fp8AccumModel faulty = fp8_accumulation_model("hopper-fp8-chain").model;
  faulty.term_rounding = AccumRounding::nearest_even;
  faulty.result_rounding = AccumRounding::nearest_even;
  const Fp8LayerCodes codes = fp8_layer_codes("test", layers[0]);
  std::vector<float> want(static_cast<size_t>(8 * 32)), got(want.size());
  fp8_model_reference(fp8_accumulation_model("hopper-fp8-chain").model, codes.gemm(), want.data());
  fp8_model_reference(faulty, codes.gemm(), got.data());
  int64_t differ = 0, first = -1;
  for (size_t i = 0; i < want.size(); ++i) {
    if (f32_bits(want[i]) == f32_bits(got[i])) continue;
    ++differ;
    if (first < 0) first = static_cast<int64_t>(i);
  }
  ASSERT_GT(differ, 0) << "the faulty model should differ from hopper-fp8-chain at K = 2048";
  EXPECT_EQ(r.runs[0].arm[0].acc_mismatch, differ);
  ASSERT_FALSE(r.runs[0].acc_first_mismatch.empty());
  const std::string expected = fmt::format("A fp8.k2048[{},{}]: fp32 accumulator {} (0x{:08x}), model hopper-fp8-chain "
                                           "gives {} (0x{:08x})",
                                           first / 32, first % 32, got[first], f32_bits(got[first]), want[first],
                                           f32_bits(want[first]));
  EXPECT_EQ(r.runs[0].acc_first_mismatch[0], expected);
}

// `b` against the arm `a` names on one layer, with the layer's own predictions, the reference on the host.
VerifyResult verify_against(const std::string& a, Arm& b, const LayerOperands& layer) {
  const std::vector<LayerOperands> layers = {layer};
  auto arm_a = make_arm(a);
  return verify_layers(*arm_a, b, layers, predict(layers, "memory", ""), cpu_options());
}

// An arm whose record refuses its model on a run (cuBLASLt's split-K) is unmodelled there: neither
// checked against the model nor counted as a pass or a failure.
class RefusingArm final : public test::WrappedArm {
 public:
  RefusingArm() : WrappedArm("cpu:fp8-hopper-fp8-promote4", "test:refusing-fp8") {}
  ArmOutput run(const LayerOperands& ops) override {
    ArmOutput out = WrappedArm::run(ops);
    out.y[0] ^= 1;  // would be off the model, were it claimed
    out.record.extra["accumulation_model"] = nullptr;
    out.record.extra["accumulation_model_refused"] = "split-K 4 (reduction scheme 1): not modelled";
    return out;
  }
};

TEST(VerifyFp8, RefusedModelIsReportedUnmodelled) {
  RefusingArm b;
  const VerifyResult r = verify_against("cpu:fp8-hopper-fp8-chain", b, fp8_layer("fp8.k1024", 4, 16, 1024, 7));
  for (const LayerRun& run : r.runs) {
    EXPECT_EQ(run.arm[1].unmodelled, "split-K 4 (reduction scheme 1): not modelled");
    EXPECT_FALSE(run.arm[1].formula_mismatch.has_value());
    EXPECT_EQ(run.arm[1].model, "");
    EXPECT_EQ(run.arm[1].acc_mismatch, 0);  // its accumulator call claimed its model: that is still compared
    EXPECT_FALSE(run.predicted_diff.has_value());
    EXPECT_EQ(run.arm[0].formula_mismatch, 0);
  }
  EXPECT_NE(check(r, "C6").verdict, Verdict::fail) << check(r, "C6").summary;
  EXPECT_NE(check(r, "C6").summary.find("UNMODELLED"), std::string::npos) << check(r, "C6").summary;
  EXPECT_EQ(check(r, "C5").verdict, Verdict::not_applicable) << check(r, "C5").summary;
  EXPECT_NE(check(r, "C4").summary.find("unmodelled"), std::string::npos) << check(r, "C4").summary;
}

// An arm whose run records claim another model than the one it declares (cuBLASLt names the split-K
// form of its model on such runs) is checked against the claimed model, and the run says which.
class ClaimingArm final : public test::WrappedArm {
 public:
  ClaimingArm() : WrappedArm("cpu:fp8-blocked-4", "test:claims-blocked-4") {}
  ArmInfo info() const override {
    ArmInfo i = WrappedArm::info();
    i.accumulation_model = "hopper-fp8-promote4";  // declared; each record claims blocked-4
    return i;
  }
};

TEST(VerifyFp8, TheModelARunClaimsIsTheReference) {
  ClaimingArm b;
  const VerifyResult r = verify_against("cpu:fp8-hopper-fp8-promote4", b, fp8_layer("fp8.k2048", 4, 16, 2048, 21));
  EXPECT_TRUE(r.all_passed()) << r.stage_detail;
  int64_t differ = 0;
  for (const LayerRun& run : r.runs) {
    EXPECT_EQ(run.arm[0].model, "hopper-fp8-promote4");
    EXPECT_EQ(run.arm[1].model, "blocked-4");
    EXPECT_EQ(run.arm[1].formula_mismatch, 0);
    EXPECT_EQ(run.arm[1].acc_mismatch, 0);
    EXPECT_TRUE(run.predicted_equals_observed);
    differ += run.cmp.bitwise_diff;
  }
  EXPECT_GT(differ, 0) << "blocked-4 and hopper-fp8-promote4 should differ at K = 2048";
  EXPECT_EQ(to_json(r)["runs"][0]["models"], nlohmann::json({"hopper-fp8-promote4", "blocked-4"}));
}

TEST(VerifyFp8, MixedPairIsAnInputError) {
  const std::vector<LayerOperands> layers = {int8_e4m3_exact_layer("int8codes", 4, 16, 64, 3)};
  const PredictionSet predictions = predict(layers, "memory", "");
  auto a = make_arm("cpu:fp8-hopper-fp8-chain");
  auto b = make_arm("cpu:vllm-cutlass");
  try {
    (void)verify_layers(*a, *b, layers, predictions, cpu_options());
    FAIL() << "a mixed FP8/INT8 pair was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("same format"), std::string::npos) << e.what();
  }
}

// The CLI end to end: an FP8 operand file, exit 0 for chain vs promote4 (JSON says the reference was
// the model), exit 1 naming the stage for the mutant, exit 2 for a mixed pair.
TEST(VerifyFp8, CliEndToEnd) {
  namespace fs = std::filesystem;
  const fs::path qc = fs::path(QC_BINARY_DIR) / "qconform";
  if (!fs::exists(qc)) GTEST_SKIP() << "SKIPPED: " << qc << " is not built (cmake --build build --target qconform)";
  test::TempDir dir("verify-fp8");
  const std::string ops = dir.file("fp8.safetensors");
  save_operands(ops, {fp8_layer("fp8.k1024", 8, 32, 1024, 11), fp8_layer("fp8.k256", 4, 16, 256, 12)}, {});
  const auto run = [&](const std::string& args, std::string& out) {
    const std::string o = dir.file("stdout");
    const int st = std::system(fmt::format("'{}' {} >'{}' 2>&1", qc.string(), args, o).c_str());
    std::ifstream f(o);
    out.assign(std::istreambuf_iterator<char>(f), {});
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  };
  std::string out;
  const std::string json = dir.file("v.json");
  EXPECT_EQ(run(fmt::format("verify '{}' --arms cpu:fp8-hopper-fp8-chain,cpu:fp8-hopper-fp8-promote4 --reference cpu "
                            "--json '{}'",
                            ops, json),
                out),
            0)
      << out;
  EXPECT_NE(out.find("declares accumulation model hopper-fp8-promote4"), std::string::npos) << out;
  EXPECT_NE(out.find("FP8 verdict: every arm on its declared model"), std::string::npos) << out;
  std::ifstream jf(json);
  const nlohmann::json j = nlohmann::json::parse(jf);
  EXPECT_EQ(j["fp8"]["reference"], "model");
  EXPECT_EQ(j["fp8"]["models"], nlohmann::json({"hopper-fp8-chain", "hopper-fp8-promote4"}));
  EXPECT_EQ(j["checks"][0]["verdict"], "not-applicable");

  EXPECT_EQ(run(fmt::format("verify '{}' --arms mutant:fp8-rne-steps,cpu:fp8-hopper-fp8-chain --reference cpu", ops), out), 1)
      << out;
  EXPECT_NE(out.find("FP8 verdict: the accumulation model stage: arm A (mutant:fp8-rne-steps)"), std::string::npos) << out;

  EXPECT_EQ(run(fmt::format("verify '{}' --arms cpu:fp8-hopper-fp8-chain,cpu:vllm-cutlass --reference cpu", ops), out), 2)
      << out;
  EXPECT_NE(out.find("same format"), std::string::npos) << out;

  // `predict` (C2's INT32 range prediction) refuses an FP8 file rather than reading FP8 bytes as int8.
  const std::string pred = dir.file("p.json");
  EXPECT_EQ(run(fmt::format("predict '{}' --out '{}'", ops, pred), out), 2) << out;
  EXPECT_NE(out.find("layer `fp8.k1024` is an FP8 layer (e4m3 x e4m3)"), std::string::npos) << out;
  EXPECT_FALSE(fs::exists(pred));
}

}  // namespace
}  // namespace qc

namespace qc {
namespace {

// sweep's "explained" column: the differing elements whose two values the declared models predict.
// Counted independently here for each cell: the arms' outputs from `run`, the predictions from the
// scalar reference of each declared model and the `fp8-scaled` epilogue.
int64_t explained_by_scalar_models(const std::string& la, const std::string& lb, int64_t m, int64_t n, int64_t k,
                                   uint64_t seed, int64_t* differing) {
  const Fp8Operands o = synth_fp8_operands(m, n, k, seed);
  OperandStorage s;
  s.a_q.assign(o.a.begin(), o.a.end());
  s.w_q.assign(o.w.begin(), o.w.end());
  s.a_scale = o.a_scale;
  s.w_scale = o.w_scale;
  s.a_type = s.w_type = ElementType::e4m3;
  const LayerOperands ops = make_operands("cell", m, n, k, std::move(s), "test");
  std::vector<uint16_t> y[2], p[2];
  int i = 0;
  for (const std::string& label : {la, lb}) {
    auto arm = make_arm(label);
    y[i] = arm->run(ops).y;
    std::vector<float> d(static_cast<size_t>(m * n));
    fp8_model_reference(fp8_accumulation_model(arm->info().accumulation_model).model,
                        Fp8Gemm{o.a.data(), Fp8Format::e4m3, o.w.data(), Fp8Format::e4m3, {m, n, k}}, d.data());
    p[i] = fp8_epilogue_bf16(d.data(), o.a_scale, o.w_scale);
    ++i;
  }
  int64_t explained = 0;
  *differing = 0;
  for (size_t j = 0; j < y[0].size(); ++j) {
    if (y[0][j] == y[1][j]) continue;
    ++*differing;
    explained += y[0][j] == p[0][j] && y[1][j] == p[1][j];
  }
  return explained;
}

TEST(VerifyFp8, SweepExplainedColumnCountsWhatTheModelsPredict) {
  for (const auto& [la, lb] : {std::pair<std::string, std::string>{"cpu:fp8-hopper-fp8-chain", "cpu:fp8-hopper-fp8-promote4"},
                               std::pair<std::string, std::string>{"mutant:fp8-rne-steps", "cpu:fp8-hopper-fp8-promote4"}}) {
    const SweepOptions o{.arm_a = la, .arm_b = lb, .ks = {256, 2048}, .m = 8, .n = 32, .seeds = 2};
    const SweepResult r = run_sweep(o);
    int64_t all_differing = 0, all_explained = 0;
    for (const SweepCell& c : r.cells) {
      int64_t differing = 0;
      const int64_t want = explained_by_scalar_models(la, lb, o.m, o.n, c.k, c.seed, &differing);
      EXPECT_EQ(c.differing, differing) << la << " K=" << c.k << " seed " << c.seed;
      EXPECT_EQ(c.explained, want) << la << " K=" << c.k << " seed " << c.seed << ": " << c.explained_note;
      all_differing += differing;
      all_explained += want;
    }
    ASSERT_GT(all_differing, 0) << la;
    if (la == "mutant:fp8-rne-steps") {
      EXPECT_LT(all_explained, all_differing) << "the mutant is off its declared model: not every difference is explained";
    } else {
      EXPECT_EQ(all_explained, all_differing);
    }
    const nlohmann::json j = to_json(r);
    EXPECT_TRUE(j["rows"][1].contains("explained_share")) << j["rows"][1].dump();
    EXPECT_NE(format_sweep(r).find("explained"), std::string::npos);
  }
  // --no-explained: not computed, and said so.
  const SweepResult r = run_sweep({.arm_a = "cpu:fp8-hopper-fp8-chain", .arm_b = "cpu:fp8-hopper-fp8-promote4",
                                   .ks = {1024}, .m = 4, .n = 16, .seeds = 1, .explained = false});
  EXPECT_EQ(r.cells[0].explained, -1);
  EXPECT_EQ(to_json(r)["rows"][0]["explained"], nullptr);
  EXPECT_NE(format_sweep(r).find("not computed (--no-explained)"), std::string::npos);
}

// A cell's "explained" count uses the model each run claims, not the declared one: an arm whose records
// claim blocked-4 while it declares hopper-fp8-promote4 (as cuBLASLt claims the split-K form of its model
// on small-M, large-K cells) has every difference explained. Before session 6 the sweep evaluated the
// declared model and reported 6,180 of 13,981 differences explained on such cuBLASLt cells.
TEST(VerifyFp8, SweepExplainedColumnUsesTheModelEachRunClaims) {
  static const bool registered = [] {
    register_arm_backend(ArmBackend{"test-claims", "test: records claim blocked-4, the arm declares promote4",
                                    [] { return std::vector<std::string>{}; },
                                    [](std::string_view) -> std::unique_ptr<Arm> { return std::make_unique<ClaimingArm>(); },
                                    /*variant_is_file=*/false, /*fp8_families=*/{}});
    return true;
  }();
  ASSERT_TRUE(registered);
  const SweepResult r = run_sweep(
      {.arm_a = "cpu:fp8-hopper-fp8-promote4", .arm_b = "test-claims:blocked-4", .ks = {2048}, .m = 8, .n = 32, .seeds = 2});
  int64_t differing = 0, explained = 0;
  for (const SweepCell& c : r.cells) {
    EXPECT_EQ(c.explained, c.differing) << "K=" << c.k << " seed " << c.seed << ": " << c.explained_note;
    differing += c.differing;
    explained += c.explained;
  }
  EXPECT_GT(differing, 0) << "blocked-4 and hopper-fp8-promote4 should differ at K = 2048";
  EXPECT_EQ(explained, differing);
}

// INT8 pairs: the declared formulas on the exact accumulators explain every difference of two arms
// that follow them; an arm declaring none leaves the column empty, saying why.
TEST(VerifyFp8, SweepExplainedColumnForInt8Pairs) {
  SweepOptions o;
  o.arm_a = "cpu:vllm-cutlass";
  o.arm_b = "mutant:bf16-truncate";  // declares vllm-cutlass, truncates: its differences are not the formula's
  o.ks = {4096};
  o.m = 16;
  o.n = 64;
  o.seeds = 1;
  const SweepResult r = run_sweep(o);
  ASSERT_GT(r.cells[0].differing, 0);
  EXPECT_GE(r.cells[0].explained, 0);
  EXPECT_LT(r.cells[0].explained, r.cells[0].differing);
  o.arm_b = "cpu:vllm-triton";
  const SweepResult ok = run_sweep(o);
  EXPECT_EQ(ok.cells[0].explained, ok.cells[0].differing) << ok.cells[0].explained_note;
}

}  // namespace
}  // namespace qc

namespace qc {
namespace {

// An e5m2 x e4m3 layer: the models and the outputs are compared as for e4m3; the fp32 accumulator
// interface takes e4m3 codes only, so C4 compares nothing and says why. An M sweep runs the first rows.
TEST(VerifyFp8, E5m2ActivationsAndAnMSweep) {
  const int64_t m = 6, n = 24, k = 2048;
  OperandStorage s;
  uint64_t st = 77;
  for (int64_t i = 0; i < m * k; ++i) {
    uint8_t c = static_cast<uint8_t>(splitmix64(st));
    if (((c >> 2) & 0x1F) >= 0x18) c &= 0x9F;  // keep the e5m2 exponent moderate (and finite)
    s.a_q.push_back(static_cast<int8_t>(c));
  }
  const Fp8Operands w = synth_fp8_operands(1, n, k, 5);
  s.w_q.assign(w.w.begin(), w.w.end());
  for (int64_t i = 0; i < m; ++i) s.a_scale.push_back(0x1p-4f);
  s.w_scale = w.w_scale;
  s.a_type = ElementType::e5m2;
  s.w_type = ElementType::e4m3;
  const std::vector<LayerOperands> layers = {make_operands("e5m2xe4m3", m, n, k, std::move(s), "test")};
  const PredictionSet predictions = predict(layers, "memory", "");
  auto a = make_arm("cpu:fp8-hopper-fp8-chain");
  auto b = make_arm("cpu:fp8-hopper-fp8-promote4");
  VerifyOptions options = cpu_options();
  options.m_sweep = {1, 6};
  const VerifyResult r = verify_layers(*a, *b, layers, predictions, options);
  ASSERT_EQ(r.runs.size(), 6u);
  int64_t differ = 0;
  for (const LayerRun& run : r.runs) {
    EXPECT_EQ(run.arm[0].formula_mismatch, 0);
    EXPECT_EQ(run.arm[1].formula_mismatch, 0);
    EXPECT_FALSE(run.arm[0].acc_mismatch.has_value());
    EXPECT_NE(run.acc_note.find("e4m3 x e4m3"), std::string::npos) << run.acc_note;
    EXPECT_TRUE(run.predicted_equals_observed);
    differ += run.cmp.bitwise_diff;
  }
  EXPECT_EQ(r.runs[0].m, 1);
  EXPECT_EQ(check(r, "C4").verdict, Verdict::not_applicable) << check(r, "C4").summary;
  EXPECT_NE(check(r, "C4").summary.find("e4m3 x e4m3"), std::string::npos) << check(r, "C4").summary;
  EXPECT_TRUE(r.all_passed());
  // The predicted sets as the scalar references give them, run by run.
  const Fp8AccumModel chain = fp8_accumulation_model("hopper-fp8-chain").model;
  const Fp8AccumModel promote4 = fp8_accumulation_model("hopper-fp8-promote4").model;
  for (const LayerRun& run : r.runs) {
    const LayerOperands ops = apply_scale_mode(first_rows(layers[0], run.m), run.mode);
    EXPECT_EQ(run.predicted_diff, scalar_prediction(ops, chain, promote4).outputs_differ) << run.m;
  }
  EXPECT_GT(differ, 0);
}


// ---- The fast FP8 element pass against its scalar reference (src/checks/element_pass.cpp) ----------
//
// A case is data: its id lists the shape, which arms are modelled and expose an accumulator, how many
// of the arms' outputs and accumulators are off their models (in thousandths), the scale regime, the
// length of the "first" lists, the threads, and whether the accumulators' counts come precomputed (as
// verify hands them to each run). Every field of the two passes must be equal: the comparison of A
// with B (its JSON form, `first` included), every count, and every "first" list in order.
struct Fp8PassCase {
  int64_t m, n, k;
  bool modelled[2], exposed[2];
  unsigned outputs_off, acc_off;  // per mille of elements perturbed, per arm
  ScaleMode mode;
  size_t max_listed;
  int threads;
  bool precomputed;
  std::string id() const {
    return fmt::format("{}x{}x{} modelled={}{} exposed={}{} off={}/1000 acc_off={}/1000 {} listed={} threads={}{}", m,
                       n, k, modelled[0], modelled[1], exposed[0], exposed[1], outputs_off, acc_off,
                       scale_mode_name(mode), max_listed, threads, precomputed ? " precomputed" : "");
  }
};

void expect_same_pass(const ElementPass& fast, const ElementPass& ref, const std::string& id) {
  SCOPED_TRACE(id);
  EXPECT_EQ(nlohmann::json(fast.cmp).dump(), nlohmann::json(ref.cmp).dump());
  const ElementTally &f = fast.tally, &r = ref.tally;
  for (int s = 0; s < 2; ++s) {
    EXPECT_EQ(f.acc_mismatch[s], r.acc_mismatch[s]) << "side " << s;
    EXPECT_EQ(f.formula_mismatch[s], r.formula_mismatch[s]) << "side " << s;
  }
  EXPECT_EQ(f.predicted_diff, r.predicted_diff);
  EXPECT_EQ(f.predicted_vs_observed, r.predicted_vs_observed);
  EXPECT_EQ(f.model_acc_diff, r.model_acc_diff);
  EXPECT_EQ(f.pow2_violations, r.pow2_violations);
  EXPECT_EQ(f.pow2_excluded, r.pow2_excluded);
  EXPECT_EQ(f.safe_contradicted, r.safe_contradicted);
  EXPECT_EQ(f.acc_first, r.acc_first);
  EXPECT_EQ(f.model_first, r.model_first);
  EXPECT_EQ(nlohmann::json(f.pow2_first).dump(), nlohmann::json(r.pow2_first).dump());
}

TEST(Fp8ElementPass, FastEqualsTheReferenceFieldForField) {
  std::vector<Fp8PassCase> cases;
  const ScaleMode modes[] = {ScaleMode::real, ScaleMode::pow2_channel, ScaleMode::pow2_layer};
  int variant = 0;
  for (const auto& [m, n, k] : {std::tuple<int64_t, int64_t, int64_t>{9, 203, 1024}, {70, 4001, 32}}) {
    for (int modelled = 0; modelled < 4; ++modelled) {
      for (unsigned off : {0u, 3u, 400u}) {
        const int v = variant++;
        const bool exposed[2] = {v % 3 != 1, v % 4 != 2};
        cases.push_back({m, n, k, {(modelled & 1) != 0, (modelled & 2) != 0}, {exposed[0], exposed[1]}, off,
                         v % 2 ? off : 0u, modes[v % 3], v % 5 == 0 ? size_t{1000} : size_t{10}, v % 2 ? 3 : 1,
                         v % 3 == 0});
      }
    }
  }
  const Fp8AccumModel chain = fp8_accumulation_model("hopper-fp8-chain").model;
  const Fp8AccumModel promote4 = fp8_accumulation_model("hopper-fp8-promote4").model;
  int reached_pow2 = 0, reached_acc = 0;
  for (const Fp8PassCase& c : cases) {
    const LayerOperands layer = fp8_layer("pass.t", c.m, c.n, c.k, 7 + c.n);
    const LayerOperands ops = apply_scale_mode(layer, c.mode);
    const Fp8LayerCodes codes = fp8_layer_codes("test", ops);
    const size_t size = static_cast<size_t>(c.m * c.n);
    std::vector<float> d[2] = {std::vector<float>(size), std::vector<float>(size)};
    fp8_model_evaluate(chain, codes.gemm(), d[0].data(), 1);
    fp8_model_evaluate(promote4, codes.gemm(), d[1].data(), 1);
    // The arms: their model + epilogue, with `outputs_off` of the outputs moved (by one or two bf16
    // steps, or to a NaN or a signed zero), and the exposed accumulators with `acc_off` moved by an ulp.
    std::mt19937_64 rng(static_cast<uint64_t>(c.m * 131 + c.n + c.outputs_off));
    ArmOutput out[2];
    std::vector<float> acc[2];
    for (int s = 0; s < 2; ++s) {
      out[s].y.resize(size);
      apply_epilogue(fp8_epilogue(), d[s].data(), ops.a_scale.data(), ops.w_scale.data(), nullptr, c.m, c.n,
                     out[s].y.data(), 1);
      for (uint16_t& y : out[s].y) {
        if (rng() % 1000 >= c.outputs_off) continue;
        const unsigned how = static_cast<unsigned>(rng() % 8);
        y = how == 0 ? uint16_t{0x7fc1} : how == 1 ? static_cast<uint16_t>(y ^ 0x8000u) : static_cast<uint16_t>(y + 1 + how % 2);
      }
      acc[s] = d[s];
      for (float& x : acc[s]) {
        if (rng() % 1000 < c.acc_off) x = std::nextafter(x, INFINITY);
      }
    }
    Fp8RunReference f;
    for (int s = 0; s < 2; ++s) {
      f.modelled[s] = c.modelled[s];
      f.model[s] = c.modelled[s] ? (s ? "hopper-fp8-promote4" : "hopper-fp8-chain") : "";
      f.d[s] = c.modelled[s] ? &d[s] : nullptr;
      if (c.exposed[s]) f.arm_acc[s] = &acc[s], f.acc_d[s] = &d[s], f.acc_model[s] = s ? "hopper-fp8-promote4" : "hopper-fp8-chain";
    }
    const ExactAccumulators none;
    CompareOptions compare;
    compare.max_listed = c.max_listed;
    const ElementContext run{.ops = ops, .label = ops.name, .mode = c.mode, .safe = false, .exact = none,
                             .out = {&out[0], &out[1]}, .formula = {&fp8_epilogue(), &fp8_epilogue()},
                             .compare = compare, .threads = c.threads, .fp8 = &f};
    const ElementPass ref = element_pass_reference(run);
    ElementTally tally;
    if (c.precomputed) {
      tally = fp8_accumulator_tally(f, ops, c.threads);
      f.acc_tally = &tally;
    }
    expect_same_pass(element_pass(run), ref, c.id());
    // The cases reach what they are meant to.
    if (c.outputs_off >= 400 && (c.modelled[0] || c.modelled[1])) {
      EXPECT_GT(ref.tally.formula_mismatch[0] + ref.tally.formula_mismatch[1], 100) << c.id();
    }
    if (c.modelled[0] && c.modelled[1] && c.k >= 1024) {
      EXPECT_GT(ref.tally.model_acc_diff, 0) << c.id();
    }
    reached_pow2 += ref.tally.pow2_violations > 0;
    reached_acc += ref.tally.acc_mismatch[0] + ref.tally.acc_mismatch[1] > 10;
  }
  EXPECT_GT(reached_pow2, 0) << "no case had a power-of-two violation to list";
  EXPECT_GT(reached_acc, 0) << "no case filled the accumulator list";
}

}  // namespace
}  // namespace qc
