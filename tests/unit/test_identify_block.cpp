// `qconform identify` on block-scaled FP8 arms (docs/identify.md, "Block-scaled FP8 arms"): the scale
// blocks, the chain per K block and the promotion form measured through the bf16 output (and the
// unscaled entry where the arm offers one), every held-out output explained; kernels outside the table
// `unexplained` at the stage that has no candidate. The identified block model, declared back, makes
// verify predict every differing element.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <cmath>

#include "arms/declared_arm.hpp"
#include "checks/identify.hpp"
#include "checks/verify.hpp"
#include "epilogue/block_models.hpp"
#include "qconform/arm.hpp"
#include "qconform/error.hpp"
#include "qconform/numerics.hpp"
#include "synth/synth.hpp"
#include "verify_test_util.hpp"
#include "wrapped_arm.hpp"

namespace qc {
namespace {

// A cpu:fp8-block arm that declares another block model (or hides its unscaled entry): what a real
// kernel is to identify, a black box with a claim.
class Disguised final : public test::DeclaringArm {
 public:
  Disguised(const std::string& runs, std::string declares, bool unscaled)
      : DeclaringArm("cpu:fp8-" + runs, "test:disguised", std::move(declares), unscaled) {}
  ArmOutput run(const LayerOperands& ops) override {
    ArmOutput out = DeclaringArm::run(ops);
    out.d.reset();  // a kernel that returns bf16 only
    return out;
  }
};

TEST(IdentifyBlock, EveryCpuBlockArmIsIdentifiedAsItsOwnForm) {
  for (const BlockPromotion f : block_promotions()) {
    const std::string model = fmt::format("block-{}", block_promotion_name(f));
    auto arm = make_arm("cpu:fp8-" + model);
    const IdentifyResult r = identify(*arm);
    SCOPED_TRACE(describe(r));
    ASSERT_EQ(r.verdict, "identified") << model;
    EXPECT_EQ(r.block_model, model);
    EXPECT_EQ(identified_declaration(r), model);
    EXPECT_EQ(r.block["k_block"], 128);
    EXPECT_EQ(r.block["n_block"], 128);
    EXPECT_EQ(r.block["chain"], "hopper-fp8-chain");
    EXPECT_EQ(r.block["promotion_interval"], 128);
    EXPECT_NE(r.block["chain_measured_through"].get<std::string>().find("fp8_accumulate"), std::string::npos);
    EXPECT_EQ(r.block["against_declaration"], "matches the declaration");
    EXPECT_GT(r.outputs, 10000);
    EXPECT_EQ(r.matching, r.outputs);
    // Every pair of forms is separated by the designed probes' bf16 outputs.
    for (const auto& p : r.probes) {
      if (!p.contains("pairs_separated")) continue;
      for (const auto& [pair, count] : p["pairs_separated"].items()) EXPECT_GT(count.get<int64_t>(), 0) << pair;
    }
  }
}

TEST(IdentifyBlock, ArmsWithOtherChainsAreIdentifiedWithTheirChain) {
  // `sequential` is measured by the FP8 prober; `exact` (a whole-range chain per block) lies outside its
  // structures and is found among the table's named chains over whole blocks.
  for (const char* model : {"block-triton+sequential", "block-deepgemm+exact"}) {
    auto arm = make_arm(fmt::format("cpu:fp8-{}", model));
    const IdentifyResult r = identify(*arm);
    SCOPED_TRACE(describe(r));
    ASSERT_EQ(r.verdict, "identified") << model;
    EXPECT_EQ(r.block_model, model);
    EXPECT_EQ(r.matching, r.outputs);
  }
}

TEST(IdentifyBlock, ADisguisedKernelIsMeasuredThroughItsBf16OutputAndDeclaredBack) {
  // Runs block-deepgemm+sequential, claims block-triton, returns bf16 only and no unscaled entry.
  auto disguised = std::make_unique<Disguised>("block-deepgemm+sequential", "block-triton", false);
  const IdentifyResult r = identify(*disguised);
  SCOPED_TRACE(describe(r));
  ASSERT_EQ(r.verdict, "identified");
  EXPECT_EQ(r.block_model, "block-deepgemm+sequential");
  EXPECT_NE(r.block["chain_measured_through"].get<std::string>().find("run"), std::string::npos);
  EXPECT_EQ(r.block["against_declaration"], "differs from the declaration (block-triton)");
  EXPECT_EQ(r.matching, r.outputs);
  // Declared back (`verify --declare B=block-deepgemm+sequential`): verify predicts every difference
  // from cpu:fp8-block-triton.
  auto declared = declare_epilogue(std::move(disguised), identified_declaration(r), "test", "identified");
  EXPECT_EQ(declared->info().accumulation_model, "block-deepgemm+sequential");
  SynthOptions o;
  o.shapes = "24x160x520,24x96x256";
  o.element = "e4m3";
  o.act_scale = "per-token-group:128";
  o.weight_scale = "per-block:128x128";
  const std::vector<LayerOperands> layers = synth_operands(o);
  auto other = make_arm("cpu:fp8-block-triton");
  const VerifyResult v = verify_layers(*other, *declared, layers, predict(layers, "memory", ""), test::cpu_options());
  ASSERT_FALSE(v.runs.empty());
  int64_t differ = 0;
  for (const LayerRun& run : v.runs) {
    EXPECT_TRUE(run.predicted_equals_observed) << run.layer;
    EXPECT_EQ(run.arm[1].formula_mismatch, 0) << run.layer;
    differ += run.cmp.bitwise_diff;
  }
  EXPECT_GT(differ, 0) << "the chains differ somewhere on these operands";
}

// A block kernel written here: per slice of `slice` products a sequential fp32 sum from zero, then
// `promote(c, sa, sb, d)` with the scales of the K block (of the layer's layout) the slice lies in.
template <typename Promote>
class HandBlockKernel final : public Arm {
 public:
  HandBlockKernel(int64_t slice, Promote p) : slice_(slice), promote_(p) {}
  ArmInfo info() const override {
    ArmInfo i;
    i.label = fmt::format("test:hand-block-slice{}", slice_);
    i.description = "a block kernel written in the test";
    i.accumulation_model = "block-triton";  // its claim
    i.element = ElementType::e4m3;
    return i;
  }
  ArmOutput run(const LayerOperands& ops) override {
    const Fp8LayerCodes codes = fp8_layer_codes("test", ops);
    const int64_t bk = ops.scale_block_k();
    std::vector<float> a(codes.a.size()), w(codes.w.size());
    for (size_t e = 0; e < a.size(); ++e) a[e] = e4m3fn_to_f32(codes.a[e]);
    for (size_t e = 0; e < w.size(); ++e) w[e] = e4m3fn_to_f32(codes.w[e]);
    ArmOutput out;
    out.y.resize(static_cast<size_t>(ops.m * ops.n));
    for (int64_t i = 0; i < ops.m; ++i) {
      for (int64_t j = 0; j < ops.n; ++j) {
        float d = 0.0f;
        for (int64_t k0 = 0; k0 < ops.k; k0 += slice_) {
          float c = 0.0f;
          for (int64_t k = k0; k < std::min(ops.k, k0 + slice_); ++k) {
            c += a[static_cast<size_t>(i * ops.k + k)] * w[static_cast<size_t>(j * ops.k + k)];  // exact products
          }
          const int64_t b = k0 / bk;
          d = promote_(c, ops.a_scale[static_cast<size_t>(ops.a_scaling.index(i, b, ops.k))],
                       ops.w_scale[static_cast<size_t>(ops.w_scaling.index(j, b, ops.k))], d);
        }
        out.y[static_cast<size_t>(i * ops.n + j)] = f32_to_bf16(d);
      }
    }
    out.record.arm = info().label;
    return out;
  }

 private:
  int64_t slice_;
  Promote promote_;
};

float triton_promote(float c, float sa, float sb, float d) { return std::fma(c * sa, sb, d); }
float sb_first(float c, float sa, float sb, float d) { return std::fma(c * sb, sa, d); }

TEST(IdentifyBlock, AHandWrittenTritonStyleKernelIsIdentified) {
  HandBlockKernel arm(128, triton_promote);
  const IdentifyResult r = identify(arm);
  SCOPED_TRACE(describe(r));
  ASSERT_EQ(r.verdict, "identified");
  EXPECT_EQ(r.block_model, "block-triton+sequential");
  EXPECT_EQ(r.matching, r.outputs);
}

TEST(IdentifyBlock, PromotionEvery64ProductsIsUnexplainedAtTheChainLength) {
  HandBlockKernel arm(64, triton_promote);
  const IdentifyResult r = identify(arm);
  SCOPED_TRACE(describe(r));
  ASSERT_EQ(r.verdict, "unexplained");
  EXPECT_EQ(r.block["verdict_stage"], "per-block chain length");
  EXPECT_EQ(r.block["promotion_interval"], 64);
  ASSERT_EQ(r.nearest.size(), 1u);
  // The nearest block model (the chain over whole blocks) is separated by the unit-scale probes; random
  // held-out operands' bf16 outputs need not separate it.
  EXPECT_GT(r.nearest[0]["separating_probes"].get<int64_t>(), 0);
  ASSERT_FALSE(r.diagnosis[0]["first"].empty()) << "the separating outputs";
  EXPECT_NE(r.reason.find("every 64 products"), std::string::npos) << r.reason;
}

TEST(IdentifyBlock, AFormOutsideTheTableIsUnexplainedAtThePromotionForm) {
  HandBlockKernel arm(128, sb_first);  // fma(rn32(C*sb), sa, D): the weight scale first
  const IdentifyResult r = identify(arm);
  SCOPED_TRACE(describe(r));
  ASSERT_EQ(r.verdict, "unexplained");
  EXPECT_EQ(r.block["verdict_stage"], "promotion form");
  EXPECT_EQ(r.block["chain"], "sequential");
  ASSERT_FALSE(r.diagnosis[0]["first"].empty());
}

}  // namespace
}  // namespace qc
