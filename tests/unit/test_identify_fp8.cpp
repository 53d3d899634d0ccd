// `qconform identify` on FP8 arms that declare nothing (docs/identify.md, "FP8 arms"): the
// accumulation model measured (through the unscaled entry where the arm offers one, else through its
// bf16 output), then the epilogue identified over the FP8 space; every held-out output explained.
// The kernels are written here with plain float arithmetic (e4m3 decoded by hand), or are the
// cpu:fp8 arms behind a wrapper that hides their model and unscaled entry; the plugin is
// tests/unit/plugins/fp8_kernel_arm.c, compiled here. The identified declaration, given back to
// verify, makes it predict every output.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <type_traits>

#include "arms/declared_arm.hpp"
#include "checks/identify.hpp"
#include "checks/verify.hpp"
#include "epilogue/formula_space.hpp"
#include "qconform/arm.hpp"
#include "qconform/error.hpp"
#include "qconform/numerics.hpp"
#include "synth/synth.hpp"
#include "c_plugin.hpp"
#include "temp_dir.hpp"

namespace qc {
namespace {

// An FP8 arm's whole-layer entry alone: a cpu:fp8 arm with its model and unscaled entry hidden.
class RunOnly final : public Arm {
 public:
  explicit RunOnly(const std::string& model) : arm_(make_arm("cpu:fp8-" + model)), model_(model) {}
  ArmInfo info() const override {
    ArmInfo i;
    i.label = "test:run-only-" + model_;
    i.description = "cpu:fp8-" + model_ + " without its declaration or fp8_accumulate";
    i.element = ElementType::e4m3;
    return i;
  }
  ArmOutput run(const LayerOperands& ops) override { return arm_->run(ops); }

 private:
  std::unique_ptr<Arm> arm_;
  std::string model_;
};

TEST(IdentifyFp8, UndeclaredKernelsAreMeasuredThroughTheirBf16Output) {
  for (const char* model : {"hopper-fp8-chain", "hopper-fp8-promote4", "sequential", "blocked-128"}) {
    RunOnly arm(model);
    ASSERT_TRUE(arm.info().fp8() && arm.info().accumulation_model.empty() && !arm.info().offers_unscaled());
    const IdentifyResult r = identify(arm);
    SCOPED_TRACE(describe(r));
    ASSERT_EQ(r.verdict, "identified") << model;
    ASSERT_FALSE(r.named.empty()) << model;
    EXPECT_EQ(r.named[0], model);
    EXPECT_EQ(r.epilogue_named, std::vector<std::string>{"fp8-scaled"});
    EXPECT_NE(r.fp8_accumulation["observed_through"].get<std::string>().find("run"), std::string::npos);
    EXPECT_EQ(r.fp8_accumulation["output_format"], "bf16");
    EXPECT_GT(r.outputs, 10000);
    EXPECT_EQ(r.matching, r.outputs);
    EXPECT_EQ(identified_declaration(r), fmt::format("{}; fp8-scaled", model));
  }
}

float e4m3_value(uint8_t c) {
  const int e = (c >> 3) & 15, m = c & 7;
  const float v = e == 0 ? std::ldexp(static_cast<float>(m), -9) : std::ldexp(static_cast<float>(8 + m), e - 10);
  return (c & 0x80) ? -v : v;
}

// An FP8 kernel: e4m3 codes decoded by hand, a sequential fp32 sum (K ascending, or descending),
// then `body(d, sa, sw, bias)`.
template <typename Body>
class HandFp8Kernel final : public Arm {
 public:
  HandFp8Kernel(std::string label, Body body, bool descending = false)
      : label_(std::move(label)), body_(body), descending_(descending) {}
  ArmInfo info() const override {
    ArmInfo i;
    i.label = label_;
    i.description = "test FP8 kernel";
    i.element = ElementType::e4m3;
    return i;
  }
  ArmOutput run(const LayerOperands& ops) override {
    const auto* a = reinterpret_cast<const uint8_t*>(ops.a_q.data());
    const auto* w = reinterpret_cast<const uint8_t*>(ops.w_q.data());
    EXPECT_TRUE(ops.fp8()) << "the probes are e4m3 layers";
    ArmOutput out;
    for (int64_t m = 0; m < ops.m; ++m) {
      for (int64_t n = 0; n < ops.n; ++n) {
        float d = 0.0f;
        for (int64_t i = 0; i < ops.k; ++i) {
          const int64_t k = descending_ ? ops.k - 1 - i : i;
          d = d + e4m3_value(a[m * ops.k + k]) * e4m3_value(w[n * ops.k + k]);
        }
        const std::optional<float> bias = ops.has_bias() ? std::optional<float>(bf16_to_f32(ops.bias[n])) : std::nullopt;
        if constexpr (std::is_invocable_v<Body, float, float, float, std::optional<float>, int64_t, int64_t>) {
          out.y.push_back(body_(d, ops.a_scale[m], ops.w_scale[n], bias, ops.m, ops.n));  // a shape dispatch
        } else {
          out.y.push_back(body_(d, ops.a_scale[m], ops.w_scale[n], bias));
        }
      }
    }
    out.record.arm = label_;
    return out;
  }

 private:
  std::string label_;
  Body body_;
  bool descending_;
};

// PyTorch's rowwise CUTLASS FP8 path with the scales in the other order: bf16(rn32(rn32(d*sw)*sa)).
uint16_t cutlass_order(float d, float sa, float sw, std::optional<float> bias) {
  if (bias) throw Error(ErrorKind::input, "test kernel takes no bias", __FILE__, __LINE__, "bias");
  return f32_to_bf16((d * sw) * sa);
}
// The Triton order with the bias fused into the last multiply.
uint16_t fused_bias(float d, float sa, float sw, std::optional<float> bias) {
  return f32_to_bf16(bias ? std::fma(d * sa, sw, *bias) : (d * sa) * sw);
}

TEST(IdentifyFp8, AKernelIsIdentifiedAsItsModelAndItsEpilogue) {
  HandFp8Kernel<decltype(&cutlass_order)> a("test:fp8-cutlass-order", &cutlass_order);
  const IdentifyResult ra = identify(a);
  ASSERT_EQ(ra.verdict, "identified") << describe(ra);
  EXPECT_EQ(ra.named, std::vector<std::string>{"sequential"}) << describe(ra);
  EXPECT_EQ(formula_class_key(parse_formula(ra.epilogue_formula)), formula_class_key(parse_formula("bf16(rn32(sa * rn32(d * sw)))")))
      << describe(ra);
  EXPECT_TRUE(ra.epilogue_named.empty());
  EXPECT_EQ(ra.matching, ra.outputs);
  EXPECT_GT(ra.outputs, 10000);

  HandFp8Kernel<decltype(&fused_bias)> b("test:fp8-fused-bias", &fused_bias);
  const IdentifyResult rb = identify(b);
  ASSERT_EQ(rb.verdict, "identified") << describe(rb);
  EXPECT_EQ(formula_class_key(parse_formula(rb.epilogue_formula)),
            formula_class_key(parse_formula("bf16(fma(rn32(d * sa), sw, f32(bias)))")))
      << describe(rb);
  EXPECT_EQ(rb.matching, rb.outputs);
}

// PyTorch's sm90 rowwise tree, written here from RowwiseScaledMM.cu: Cast(Add(Bias = 0, Multiply(WScale,
// Multiply(XScale, Accum)))), with X and W swapping roles where PyTorch transposes the problem.
uint16_t torch_rowwise(float d, float sa, float sw, std::optional<float> bias, int64_t m_rows, int64_t n_cols) {
  if (bias) throw Error(ErrorKind::input, "test kernel takes no bias", __FILE__, __LINE__, "bias");
  const bool transposed = formula::torch_rowwise_transposes(m_rows, n_cols);
  const float y = transposed ? sa * (d * sw) : (d * sa) * sw;
  return f32_to_bf16(y + 0.0f);
}

// The shape dispatch is a candidate: identify probes both orientations (M = 40 as given, M = 72
// transposed) and names the table's row, not the one point the first orientation alone would leave.
TEST(IdentifyFp8, PyTorchsRowwiseDispatchIsIdentifiedAsTheTorchRowwiseRow) {
  ASSERT_FALSE(formula::torch_rowwise_transposes(40, 16));
  ASSERT_TRUE(formula::torch_rowwise_transposes(72, 16));
  HandFp8Kernel<decltype(&torch_rowwise)> arm("test:fp8-torch-rowwise", &torch_rowwise);
  const IdentifyResult r = identify(arm);
  ASSERT_EQ(r.verdict, "identified") << describe(r);
  EXPECT_EQ(r.epilogue_named, std::vector<std::string>{"torch-rowwise"}) << describe(r);
  EXPECT_EQ(r.matching, r.outputs);
  EXPECT_GT(r.outputs, 10000);
}

// K summed in descending order: no model of the FP8 family; the accumulation is where it is exceeded.
uint16_t triton_order(float d, float sa, float sw, std::optional<float> bias) {
  if (bias) throw Error(ErrorKind::input, "test kernel takes no bias", __FILE__, __LINE__, "bias");
  return f32_to_bf16((d * sa) * sw);
}

TEST(IdentifyFp8, AnAccumulationOutsideTheFamilyIsUnexplainedAtTheAccumulation) {
  HandFp8Kernel<decltype(&triton_order)> arm("test:fp8-descending", &triton_order, /*descending=*/true);
  const IdentifyResult r = identify(arm);
  ASSERT_EQ(r.verdict, "unexplained") << describe(r);
  ASSERT_FALSE(r.diagnosis.empty());
  EXPECT_EQ(r.diagnosis[0]["stage"], "the accumulation") << describe(r);
  EXPECT_NE(describe(r).find("the accumulation: no model of the FP8 family"), std::string::npos) << describe(r);
}

TEST(IdentifyFp8, AnUndeclaredFp8PluginIsIdentifiedAndItsDeclarationPredictsVerify) {
  test::TempDir dir("identify-fp8-plugin");
  for (bool with_gemm : {false, true}) {
    const std::string so = test::compile_c_plugin({.source = "tests/unit/plugins/fp8_kernel_arm.c",
                                                   .out = dir.file(with_gemm ? "libfp8_kernel_gemm.so" : "libfp8_kernel.so"),
                                                   .flags = with_gemm ? "-DFP8_WITH_GEMM" : "", .libm = true});
    if (so.empty()) GTEST_SKIP() << "SKIPPED: no C compiler (`cc`) to build tests/unit/plugins/fp8_kernel_arm.c";
    auto arm = make_arm((with_gemm ? "plugin:" : "plugin-inproc:") + so);
    const ArmInfo info = arm->info();
    ASSERT_TRUE(info.fp8() && info.accumulation_model.empty() && info.epilogue.empty());
    EXPECT_EQ(info.offers_unscaled(), with_gemm);
    const IdentifyResult r = identify(*arm);
    SCOPED_TRACE(describe(r));
    ASSERT_EQ(r.verdict, "identified");
    EXPECT_EQ(r.named, std::vector<std::string>{"sequential"});
    EXPECT_NE(r.fp8_accumulation["observed_through"].get<std::string>().find(with_gemm ? "fp8_accumulate" : "run"),
              std::string::npos);
    EXPECT_EQ(formula_class_key(parse_formula(r.epilogue_formula)), formula_class_key(parse_formula("bf16(rn32(sa * rn32(d * sw)))")));
    EXPECT_EQ(r.matching, r.outputs);
    // Declared back (`verify --declare B='<model>; <epilogue>'`), verify holds the plugin to it bit
    // for bit and predicts its differences from the Triton-order `fp8-scaled` of cpu:fp8-sequential.
    auto declared = declare_epilogue(std::move(arm), identified_declaration(r), "test");
    EXPECT_EQ(declared->info().accumulation_model, "sequential");
    const std::vector<LayerOperands> layers = synth_operands({.shapes = "tiny", .m = 16, .seed = 5, .element = "e4m3"});
    auto other = make_arm("cpu:fp8-sequential");
    VerifyOptions vo;
    vo.reference = VerifyReference::cpu;
    vo.modes = {ScaleMode::real};
    const VerifyResult v = verify_layers(*other, *declared, layers, predict(layers, "memory", ""), vo);
    ASSERT_FALSE(v.runs.empty());
    int64_t differ = 0;
    for (const LayerRun& run : v.runs) {
      EXPECT_EQ(run.arm[1].formula_mismatch, 0) << run.layer;
      EXPECT_TRUE(run.predicted_equals_observed) << run.layer;
      differ += run.cmp.bitwise_diff;
    }
    EXPECT_GT(differ, 0) << "the scale orders differ somewhere on these operands";
  }
}

}  // namespace
}  // namespace qc
