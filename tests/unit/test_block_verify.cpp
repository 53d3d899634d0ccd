// verify and boundary on block-scaled FP8 pairs (issue #28 items 4 and 5): each cpu:fp8-block-* arm on
// its declared block model (its outputs and its exposed D), the predicted set of differing elements
// against the observed one, C5 under power-of-two scales (the UE8M0 alibi: arms whose chains agree in
// every K block agree bit for bit, whatever their promotion forms; where the chains differ, every
// difference predicted), C2 not applicable with its reason, the stage a faulty arm is localized to, and
// boundary measuring an arm's chain, K block and promotion form.
//
//   cmake --build build -j2 --target qconform_unit_tests &&
//   ./build/tests/qconform_unit_tests --gtest_filter='BlockVerify*'
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "checks/c1_boundary.hpp"
#include "checks/verify.hpp"
#include "verify_test_util.hpp"
#include "epilogue/block_models.hpp"
#include "input_error.hpp"
#include "qconform/arm.hpp"
#include "qconform/numerics.hpp"
#include "synth/synth.hpp"
#include "wrapped_arm.hpp"

namespace qc {
namespace {

std::vector<LayerOperands> block_layers(bool ue8m0) {
  SynthOptions o;
  o.shapes = "24x160x520,24x96x256";  // partial blocks at N (160 = 128 + 32) and K (520 = 4*128 + 8)
  o.element = "e4m3";
  o.act_scale = "per-token-group:128";
  o.weight_scale = "per-block:128x128";
  o.ue8m0 = ue8m0;
  return synth_operands(o);
}

using test::check;
using test::cpu_options;

VerifyResult verify_pair(const std::string& a, const std::string& b, const std::vector<LayerOperands>& layers) {
  auto arm_a = make_arm(a);
  auto arm_b = make_arm(b);
  return verify_layers(*arm_a, *arm_b, layers, predict(layers, "memory", ""), cpu_options());
}

// Independently of verify: the two block models' scalar references on the layer, bf16 = RNE(D), and
// the count of differing outputs.
int64_t predicted_differences(const LayerOperands& ops, const std::string& a, const std::string& b) {
  const Fp8LayerCodes codes = fp8_layer_codes("test", ops);
  const Fp8BlockGemm g = fp8_block_gemm("test", codes, ops);
  std::vector<float> da(static_cast<size_t>(ops.m * ops.n)), db(da.size());
  fp8_block_reference(fp8_block_model(a), g, da.data());
  fp8_block_reference(fp8_block_model(b), g, db.data());
  int64_t n = 0;
  for (size_t i = 0; i < da.size(); ++i) n += f32_to_bf16(da[i]) != f32_to_bf16(db[i]);
  return n;
}

TEST(BlockVerify, TwoFormsOfOneChainPredictedEqualsObservedAndPow2Identical) {
  const std::vector<LayerOperands> layers = block_layers(false);
  const VerifyResult r = verify_pair("cpu:fp8-block-triton", "cpu:fp8-block-deepgemm", layers);
  for (const CheckResult& c : r.checks) EXPECT_NE(c.verdict, Verdict::fail) << c.id << ": " << c.summary;
  EXPECT_FALSE(r.stage.has_value());
  EXPECT_EQ(check(r, "C2").verdict, Verdict::not_applicable);
  EXPECT_NE(check(r, "C2").summary.find("block-scaled FP8 accumulation is floating point and its scales act inside it"),
            std::string::npos)
      << check(r, "C2").summary;
  EXPECT_EQ(check(r, "C4").verdict, Verdict::pass) << check(r, "C4").summary;  // the CPU block arms expose D
  EXPECT_EQ(check(r, "C5").verdict, Verdict::pass) << check(r, "C5").summary;
  EXPECT_EQ(check(r, "C6").verdict, Verdict::pass) << check(r, "C6").summary;
  ASSERT_EQ(r.runs.size(), layers.size() * 3);
  int64_t real_d_differences = 0;
  for (const LayerRun& x : r.runs) {
    EXPECT_TRUE(x.fp8 && x.block) << x.layer;
    EXPECT_EQ(x.scaling, "per-token-group:128 x per-block:128x128");
    EXPECT_EQ(x.arm[0].acc_mismatch, 0) << x.layer;
    EXPECT_EQ(x.arm[1].acc_mismatch, 0) << x.layer;
    EXPECT_EQ(x.arm[0].formula_mismatch, 0) << x.layer;
    EXPECT_EQ(x.arm[1].formula_mismatch, 0) << x.layer;
    EXPECT_TRUE(x.predicted_equals_observed) << x.layer << " " << scale_mode_name(x.mode);
    EXPECT_EQ(x.predicted_diff, x.cmp.bitwise_diff) << x.layer;
    if (x.mode == ScaleMode::real) {
      real_d_differences += x.model_acc_diff.value();  // the forms' D differ in fp32 ulps; bf16 hides most of it
      const LayerOperands* ops = nullptr;
      for (const LayerOperands& l : layers) ops = l.name == x.layer ? &l : ops;
      ASSERT_NE(ops, nullptr);
      EXPECT_EQ(x.predicted_diff, predicted_differences(*ops, "block-triton", "block-deepgemm")) << x.layer;
    } else {
      // The UE8M0 alibi: the same chain per block, every scale product exact: bitwise identity.
      EXPECT_EQ(x.cmp.bitwise_diff, 0) << x.layer << " " << scale_mode_name(x.mode);
      EXPECT_EQ(x.model_acc_diff, 0) << x.layer;
      EXPECT_EQ(x.pow2_violations, 0) << x.layer;
      EXPECT_EQ(x.pow2_excluded, 0) << x.layer;
    }
  }
  EXPECT_GT(real_d_differences, 0) << "the two forms' fp32 D should differ under real scales";
}

TEST(BlockVerify, Ue8m0OperandsGiveZeroDifferencesBetweenForms) {
  const std::vector<LayerOperands> layers = block_layers(true);
  const VerifyResult r = verify_pair("cpu:fp8-block-triton", "cpu:fp8-block-deepgemm-nofma", layers);
  EXPECT_TRUE(r.all_passed());
  for (const LayerRun& x : r.runs) {
    EXPECT_EQ(x.cmp.bitwise_diff, 0) << x.layer << " " << scale_mode_name(x.mode);
    EXPECT_EQ(x.predicted_diff, 0) << x.layer;
  }
}

TEST(BlockVerify, ChainsThatDifferArePredictedExactlyUnderPow2) {
  const std::vector<LayerOperands> layers = block_layers(false);
  const VerifyResult r = verify_pair("cpu:fp8-block-triton", "cpu:fp8-block-triton+sequential", layers);
  EXPECT_TRUE(r.all_passed()) << check(r, "C5").summary << "\n" << check(r, "C6").summary;
  int64_t pow2_differences = 0;
  for (const LayerRun& x : r.runs) {
    EXPECT_TRUE(x.predicted_equals_observed) << x.layer;
    if (x.mode == ScaleMode::real) continue;
    pow2_differences += x.cmp.bitwise_diff;
    EXPECT_EQ(x.pow2_violations, 0) << x.layer;
    EXPECT_GE(x.model_acc_diff.value(), x.cmp.bitwise_diff) << x.layer;  // every difference where some chain differs
  }
  EXPECT_GT(pow2_differences, 0) << "the Hopper chain and an fp32 sum should differ at some K block";
}

// An arm that runs one block model and declares another: verify localizes it to its accumulation model.
class Mislabeled final : public test::DeclaringArm {
 public:
  Mislabeled(const std::string& runs, std::string declares)
      : DeclaringArm("cpu:fp8-" + runs, "test:mislabeled", std::move(declares), /*unscaled=*/false) {}
};

TEST(BlockVerify, AnArmOffItsDeclaredFormIsLocalizedToItsAccumulation) {
  const std::vector<LayerOperands> layers = block_layers(false);
  Mislabeled faulty("block-deepgemm", "block-triton");
  auto b = make_arm("cpu:fp8-block-triton");
  const VerifyResult r = verify_layers(faulty, *b, layers, predict(layers, "memory", ""), cpu_options());
  // Its D is off its model (C4); its bf16 outputs mostly are not (a form moves D by fp32 ulps), so C6 may
  // or may not see it: the exposed D is what localizes the arm.
  EXPECT_EQ(check(r, "C4").verdict, Verdict::fail) << check(r, "C4").summary;
  EXPECT_EQ(check(r, "C5").verdict, Verdict::pass) << check(r, "C5").summary;  // pow2: forms agree, so does it
  EXPECT_EQ(r.stage, Stage::accumulation_model);
  EXPECT_NE(r.stage_detail.find("arm A (test:mislabeled) is off its declared accumulation model block-triton"),
            std::string::npos)
      << r.stage_detail;
}

TEST(BlockVerify, ABlockArmAndAnUnscaledArmAreNoPair) {
  const std::vector<LayerOperands> layers = block_layers(false);
  const std::string msg = test::input_error([&] { verify_pair("cpu:fp8-block-triton", "cpu:fp8-hopper-fp8-chain", layers); });
  EXPECT_NE(msg.find("verify compares two block-scaled FP8 arms"), std::string::npos) << msg;
}

TEST(BlockVerify, BoundaryMeasuresChainBlockAndForm) {
  BoundaryOptions o;
  o.block.structure.confirm_shapes = {{128, 16, 512}};  // keep the unit test short
  for (const char* label : {"cpu:fp8-block-triton", "cpu:fp8-block-deepgemm-nofma"}) {
    auto arm = make_arm(label);
    const BoundaryResult r = run_boundary(*arm, o);
    ASSERT_TRUE(r.block.has_value()) << label;
    EXPECT_EQ(r.c1.verdict, Verdict::pass) << label << ": " << r.c1.summary << "\n" << describe(*r.block);
    EXPECT_EQ(r.block->chain, "hopper-fp8-chain") << describe(*r.block);
    EXPECT_EQ(r.block->promotion_interval, 128);
    const std::string form = std::string(label).substr(std::string("cpu:fp8-block-").size());
    EXPECT_EQ(r.block->form_class, std::vector<std::string>{form}) << describe(*r.block);
  }
  // Declared triton, runs deepgemm: the form is measured as deepgemm.
  Mislabeled faulty("block-deepgemm", "block-triton");
  const BoundaryResult r = run_boundary(faulty, o);
  EXPECT_EQ(r.c1.verdict, Verdict::fail);
  EXPECT_EQ(r.block->verdict, "differs from declaration") << describe(*r.block);
  EXPECT_NE(r.block->reason.find("form: deepgemm (declared triton)"), std::string::npos) << r.block->reason;
}

}  // namespace
}  // namespace qc
