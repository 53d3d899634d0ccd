// ArmInfo::kind(): the kind of layer an arm takes, from what it declares, and the refusal of a pair
// of two kinds naming both.
#include <gtest/gtest.h>

#include <string>

#include "checks/verify.hpp"
#include "qconform/arm.hpp"
#include "qconform/error.hpp"
#include "synth/synth.hpp"

namespace qc {
namespace {

TEST(ArmKind, FollowsWhatTheArmDeclares) {
  EXPECT_EQ(make_arm("cpu:vllm-cutlass")->info().kind(), ArmKind::int8);
  EXPECT_EQ(make_arm("cpu:fp8-hopper-fp8-chain")->info().kind(), ArmKind::fp8);
  EXPECT_EQ(make_arm("cpu:fp8-block-triton")->info().kind(), ArmKind::fp8_block);
  ArmInfo undeclared;  // an FP8 kernel that declares no model but takes block-scaled layers
  undeclared.element = ElementType::e4m3;
  EXPECT_EQ(undeclared.kind(), ArmKind::fp8);
  undeclared.block_scaled = true;
  EXPECT_EQ(undeclared.kind(), ArmKind::fp8_block);
  EXPECT_EQ(arm_kind_name(ArmKind::int8), "INT8");
  EXPECT_EQ(arm_kind_name(ArmKind::fp8), "FP8");
  EXPECT_EQ(arm_kind_name(ArmKind::fp8_block), "block-scaled FP8");
}

TEST(ArmKind, VerifyRefusesAPairOfTwoKindsNamingBoth) {
  SynthOptions o;
  o.shapes = "tiny";
  o.m = 4;
  const auto layers = synth_operands(o);
  auto a = make_arm("cpu:fp8-block-triton"), b = make_arm("cpu:vllm-cutlass");
  try {
    (void)verify_layers(*a, *b, layers, predict(layers, "mem", ""), VerifyOptions{});
    FAIL() << "a block-scaled FP8 arm and an INT8 arm were compared";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_EQ(e.kind(), ErrorKind::input) << what;
    EXPECT_NE(what.find("is block-scaled FP8 but `cpu:vllm-cutlass` is INT8"), std::string::npos) << what;
  }
}

}  // namespace
}  // namespace qc
