// The one reading of an arm label (`parse_arm_label`, `arm_file_of`: src/arms/registry.cpp), the FP8
// arm lists the backends register (`fp8_arm_families`), the check ranges of the table
// (`check_id_range`) and the enum name tables (src/core/name_table.hpp).
//
// Run: ./build/tests/qconform_unit_tests --gtest_filter='ArmLabel*:NameTable*:CheckIdRange*'
#include <gtest/gtest.h>

#include <string>

#include "core/name_table.hpp"
#include "qconform/arm.hpp"
#include "qconform/check.hpp"
#include "qconform/error.hpp"

namespace qc {
namespace {

TEST(ArmLabel, SplitsAtTheFirstColon) {
  const auto cpu = parse_arm_label("cpu:vllm-cutlass");
  ASSERT_TRUE(cpu.has_value());
  EXPECT_EQ(cpu->backend, "cpu");
  EXPECT_EQ(cpu->variant, "vllm-cutlass");
  // A plugin path may hold colons of its own: only the first one splits.
  const auto plugin = parse_arm_label("plugin-inproc:./a:b.so");
  ASSERT_TRUE(plugin.has_value());
  EXPECT_EQ(plugin->backend, "plugin-inproc");
  EXPECT_EQ(plugin->variant, "./a:b.so");
  EXPECT_FALSE(parse_arm_label("no-colon").has_value());
  EXPECT_FALSE(parse_arm_label(":variant").has_value());
  const auto empty_variant = parse_arm_label("plugin:");
  ASSERT_TRUE(empty_variant.has_value());
  EXPECT_EQ(empty_variant->variant, "");
}

// The output-path check protects the file of every backend that registers `variant_is_file`, both
// plugin modes included; a built-in arm or an unknown backend loads no file.
TEST(ArmLabel, FileOfEveryBackendThatLoadsOne) {
  EXPECT_EQ(arm_file_of("plugin:./libx.so"), "./libx.so");
  EXPECT_EQ(arm_file_of("plugin-inproc:./libx.so"), "./libx.so");
  EXPECT_EQ(arm_file_of("plugin-inproc:/abs/path/lib.so"), "/abs/path/lib.so");
  EXPECT_EQ(arm_file_of("cpu:vllm-cutlass"), "");
  EXPECT_EQ(arm_file_of("nosuchbackend:./libx.so"), "");
  EXPECT_EQ(arm_file_of("plugin"), "");
  for (const ArmBackend& b : arm_backends()) {
    EXPECT_EQ(b.variant_is_file, b.prefix == "plugin" || b.prefix == "plugin-inproc") << b.prefix;
  }
}

// make_arm reads labels with the same parser: a label without `backend:` is refused the same way.
TEST(ArmLabel, MakeArmRefusesALabelWithoutBackend) {
  try {
    (void)make_arm("vllm-cutlass");
    FAIL() << "expected an input error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::input);
    EXPECT_NE(std::string(e.what()).find("expected `backend:variant`"), std::string::npos) << e.what();
  }
}

// The FP8 arm lists of the messages come from the backends' registrations, in registration order.
TEST(ArmLabel, Fp8FamiliesFromTheBackends) {
  const std::string all = fp8_arm_families(Fp8Families::all);
  const std::string unscaled = fp8_arm_families(Fp8Families::unscaled);
  const std::string block = fp8_arm_families(Fp8Families::block);
  // The CPU block family first; a CUDA build adds its block arms after it.
  EXPECT_EQ(block.rfind("cpu:fp8-block-<form>", 0), 0u) << block;
  EXPECT_EQ(unscaled.rfind("cpu:fp8-<model>", 0), 0u) << unscaled;
  EXPECT_EQ(all.rfind("cpu:fp8-<model>, cpu:fp8-block-<form> (block-scaled)", 0), 0u) << all;
  EXPECT_EQ(unscaled.find("block"), std::string::npos) << unscaled;
  for (const ArmBackend& b : arm_backends()) {
    for (const Fp8ArmFamily& f : b.fp8_families) {
      EXPECT_EQ(f.label.rfind(b.prefix + ":", 0), 0u) << f.label << " registered by " << b.prefix;
      EXPECT_NE(all.find(f.label), std::string::npos) << f.label;
      const bool listed = (", " + block + ", ").find(", " + f.label + ", ") != std::string::npos;
      EXPECT_EQ(listed, f.block_scaled) << f.label << " in the block list `" << block << "`";
    }
  }
}

TEST(CheckIdRange, FollowsTheTable) {
  EXPECT_EQ(check_id_range(), check_table().front().id + "-" + check_table().back().id);
  EXPECT_EQ(check_id_range(), "C0-C8");  // C8: invariance
  EXPECT_EQ(check_id_range(/*per_layer_only=*/true), "C2-C6");
  for (const CheckSpec& c : check_table()) {
    EXPECT_EQ(c.per_layer, c.id >= "C2" && c.id <= "C6") << c.id;
  }
}

enum class Colour { red, green, blue, unnamed };
constexpr NameRow<Colour> kColourNames[] = {{Colour::red, "red"}, {Colour::green, "green"}, {Colour::blue, "blue"}};

TEST(NameTable, BothDirectionsAndTheMessageList) {
  EXPECT_EQ(name_of(kColourNames, Colour::green), "green");
  EXPECT_EQ(name_of(kColourNames, Colour::unnamed), "?");
  ASSERT_TRUE(value_of(kColourNames, "blue").has_value());
  EXPECT_EQ(*value_of(kColourNames, "blue"), Colour::blue);
  EXPECT_FALSE(value_of(kColourNames, "Blue").has_value());
  EXPECT_EQ(names_or(kColourNames), "red, green or blue");
  EXPECT_EQ(names_or(kColourNames, "`"), "`red`, `green` or `blue`");
  static_assert(name_of(kColourNames, Colour::red) == "red");
}

}  // namespace
}  // namespace qc
