// The CUTLASS arms (src/arms/cutlass/): real CUTLASS kernels equal their declarations bit for bit.
//   - cuda:cutlass-int8-vllm-cutlass[-fma] equal the CPU emulation of their formula on every vLLM
//     configuration (M buckets 1..32 with small and large N, 33..64, 65..128, > 128), with a bias
//     for -fma, on edge shapes (M = 1, N not a multiple of any tile, K not a multiple of the tile);
//   - cuda:cutlass-fp8-rowwise[-fastacc] equal their declared accumulation model followed by the
//     `torch-rowwise` epilogue, in both orientations of PyTorch's dispatch, and their fp32
//     accumulator equals the model;
//   - the shape refusals (INT32 overflow of K, alignment) are input errors;
//   - identify, run on each arm as a black box, names the formula (and FP8 model) it declares.
// Built into qconform_gpu_tests (label `gpu`); each test says SKIPPED with the reason in a build
// without CUTLASS. Run: ./build/tests/qconform_gpu_tests --gtest_filter='Cutlass*'.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "accum/fp8_model.hpp"
#include "arms/cutlass/cutlass_arms.hpp"
#include "checks/identify.hpp"
#include "gpu_test_util.hpp"
#include "qconform/arm.hpp"
#include "qconform/epilogue.hpp"
#include "qconform/error.hpp"
#include "qconform/numerics.hpp"

namespace qc {
namespace {

bool have_cutlass() { return !cutlass_arm_variants().empty(); }
#define QC_REQUIRE_CUTLASS() \
  if (!have_cutlass()) GTEST_SKIP() << "SKIPPED: " << cutlass_description()

struct Shape {
  int64_t m, n, k;
  const char* why;
};

TEST(CutlassInt8, EqualsTheCpuFormulaOnEveryVllmConfig) {
  QC_REQUIRE_CUTLASS();
  const Shape shapes[] = {
      {1, 136, 272, "M32_NSmall, M = 1, N and K not multiples of any tile"},
      {16, 4096, 2048, "M32_NSmall"},
      {32, 8192, 512, "M32_NBig"},
      {33, 1032, 4096, "M64"},
      {100, 2048, 4096, "M128"},
      {129, 6144, 2048, "default"},
      {512, 2048, 6160, "default, K = 6160 not a multiple of 128"},
  };
  auto cpu = make_arm("cpu:vllm-cutlass");
  auto cpu_fma = make_arm("cpu:vllm-cutlass-fma");
  auto gpu = make_arm("cuda:cutlass-int8-vllm-cutlass");
  auto gpu_fma = make_arm("cuda:cutlass-int8-vllm-cutlass-fma");
  int64_t outputs = 0;
  for (const Shape& s : shapes) {
    for (bool bias : {false, true}) {
      const LayerOperands ops = gpu_test::make_layer("int8", s.m, s.n, s.k, 100 + s.m + bias, bias);
      const ArmOutput want = (bias ? cpu_fma : cpu)->run(ops);
      const ArmOutput got = (bias ? gpu_fma : gpu)->run(ops);
      EXPECT_EQ(gpu_test::diff_report(got.y, want.y, s.n, fmt::format("{}x{}x{} ({}), bias {}", s.m, s.n, s.k, s.why, bias).c_str()), "")
          << got.record.kernel;
      outputs += s.m * s.n;
      if (!bias) {
        // Without a bias the -fma arm runs ScaledEpilogue too: the same bits.
        EXPECT_EQ(gpu_test::diff_report(gpu_fma->run(ops).y, got.y, s.n, "-fma arm without bias"), "");
      }
      std::printf("%lldx%lldx%lld bias=%d: %s\n", static_cast<long long>(s.m), static_cast<long long>(s.n),
                  static_cast<long long>(s.k), bias, got.record.kernel.c_str());
    }
  }
  std::printf("CUTLASS INT8: %lld outputs compared bit for bit\n", static_cast<long long>(outputs));
}

TEST(CutlassInt8, RecordsVllmsBucket) {
  QC_REQUIRE_CUTLASS();
  auto gpu = make_arm("cuda:cutlass-int8-vllm-cutlass");
  const struct {
    int64_t m, n;
    std::string bucket;
  } cases[] = {{1, 2048, "M32_NSmall"}, {32, 8192, "M32_NBig"}, {64, 2048, "M64"}, {65, 2048, "M128"}, {129, 2048, "default"}};
  for (const auto& c : cases) {
    const ArmOutput out = gpu->run(gpu_test::make_layer("b", c.m, c.n, 256, 7, false));
    EXPECT_EQ(out.record.extra.value("vllm_config", "").rfind(c.bucket, 0), 0u) << out.record.extra.dump();
    EXPECT_TRUE(out.record.extra.contains("stages")) << out.record.extra.dump();
    EXPECT_FALSE(out.record.library.empty());
  }
}

TEST(CutlassInt8, RefusesShapesItCannotTake) {
  QC_REQUIRE_CUTLASS();
  auto gpu = make_arm("cuda:cutlass-int8-vllm-cutlass");
  for (const Shape& s : {Shape{4, 64, 131072, "K * 2^14 >= 2^31"}, Shape{4, 60, 256, "N % 8"}, Shape{4, 64, 264, "K % 16"}}) {
    try {
      gpu->run(gpu_test::make_layer("bad", s.m, s.n, s.k, 1, false));
      ADD_FAILURE() << s.why << ": accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::input) << s.why << ": " << e.what();
    }
  }
  try {
    gpu->run(gpu_test::make_layer("bias", 4, 64, 256, 1, true));
    ADD_FAILURE() << "a bias accepted by the formula that refuses one";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("-fma"), std::string::npos) << e.what();
  }
}

// e4m3 codes of randn * 2 (the H200 measurement's operands), RNE, saturating.
std::vector<int8_t> randn_e4m3(std::mt19937_64& rng, int64_t count) {
  std::normal_distribution<float> nd(0.0f, 2.0f);
  std::vector<int8_t> v(static_cast<size_t>(count));
  for (auto& c : v) c = static_cast<int8_t>(f32_to_e4m3fn(nd(rng), /*saturate=*/true));
  return v;
}

LayerOperands fp8_layer(int64_t m, int64_t n, int64_t k, uint64_t seed) {
  std::mt19937_64 rng(seed);
  OperandStorage s;
  s.a_type = s.w_type = ElementType::e4m3;
  s.a_q = randn_e4m3(rng, m * k);
  s.w_q = randn_e4m3(rng, n * k);
  // Row 0 of A all -0 (code 0x80) against positive weights in row 0 of W: every product is -0, so
  // d[0,0] = -0, where `torch-rowwise`'s add of 0 gives +0 and `fp8-scaled` keeps -0.
  for (int64_t c = 0; c < k; ++c) s.a_q[static_cast<size_t>(c)] = static_cast<int8_t>(0x80), s.w_q[static_cast<size_t>(c)] = 0x38;
  std::uniform_real_distribution<float> decade(-3.0f, -1.0f);
  s.a_scale.resize(static_cast<size_t>(m));
  s.w_scale.resize(static_cast<size_t>(n));
  for (auto& v : s.a_scale) v = std::pow(10.0f, decade(rng));
  for (auto& v : s.w_scale) v = std::pow(10.0f, decade(rng));
  return make_operands("fp8", m, n, k, std::move(s), fmt::format("cutlass fp8 test seed={}", seed));
}

TEST(CutlassFp8Rowwise, EqualsItsModelAndTorchRowwiseInBothOrientations) {
  QC_REQUIRE_CUTLASS();
  const Shape shapes[] = {
      {128, 2048, 2048, "transposed (M % 256 > 0, N % 256 == 0)"},
      {64, 6144, 2048, "not transposed (M == 64, N >= 3072)"},
      {512, 320, 1024, "not transposed (N % 256 > 0, M % 256 == 0)"},
      {1, 1024, 4096, "transposed, M = 1"},
      {200, 520, 400, "N, K not multiples of the tile"},
      {2048, 2048, 2048, "general case, 128-row tiles"},
  };
  const Epilogue& torch = epilogue("torch-rowwise");
  for (const char* label : {"cuda:cutlass-fp8-rowwise", "cuda:cutlass-fp8-rowwise-fastacc"}) {
    auto arm = make_arm(label);
    const NamedAccumModel model = fp8_accumulation_model(arm->info().accumulation_model);
    int64_t outputs = 0, off_scaled = 0;
    for (const Shape& s : shapes) {
      const LayerOperands ops = fp8_layer(s.m, s.n, s.k, 500 + s.m);
      const Fp8LayerCodes codes = fp8_layer_codes(label, ops);
      std::vector<float> d(static_cast<size_t>(s.m * s.n));
      fp8_model_evaluate(model.model, codes.gemm(), d.data());
      std::vector<uint16_t> want(d.size()), scaled(d.size());
      apply_epilogue(torch, d.data(), ops.a_scale.data(), ops.w_scale.data(), nullptr, s.m, s.n, want.data());
      apply_epilogue(fp8_epilogue(), d.data(), ops.a_scale.data(), ops.w_scale.data(), nullptr, s.m, s.n, scaled.data());
      const ArmOutput got = arm->run(ops);
      const std::string what = fmt::format("{} {}x{}x{} ({})", label, s.m, s.n, s.k, s.why);
      EXPECT_EQ(gpu_test::diff_report(got.y, want, s.n, what.c_str()), "") << got.record.kernel;
      EXPECT_EQ(got.record.extra.value("transposed", false), formula::torch_rowwise_transposes(s.m, s.n)) << what;
      EXPECT_EQ(got.y[0], 0x0000u) << what << ": the -0 accumulator must come out +0";
      for (size_t i = 0; i < want.size(); ++i) off_scaled += want[i] != scaled[i];
      outputs += s.m * s.n;
      // The fp32 accumulator through the same mainloop equals the model.
      nlohmann::json record;
      const std::vector<float> acc = arm->fp8_accumulate(codes.a.data(), codes.w.data(), s.m, s.n, s.k, record);
      int64_t acc_off = 0;
      for (size_t i = 0; i < d.size(); ++i) acc_off += f32_bits(acc[i]) != f32_bits(d[i]);
      EXPECT_EQ(acc_off, 0) << what << ": fp32 accumulator off the model " << model.name;
      std::printf("%s: %s\n", what.c_str(), got.record.kernel.c_str());
    }
    std::printf("%s: %lld outputs equal to %s + torch-rowwise; %lld of them differ from fp8-scaled\n", label,
                static_cast<long long>(outputs), model.name.c_str(), static_cast<long long>(off_scaled));
  }
}

// identify agrees with every CUTLASS arm's declaration: the INT8 arms' formula class contains their
// declared row; the FP8 arms' measured model is their declared one and their epilogue is PyTorch's
// rowwise dispatch (`torch-rowwise`, both orientations probed), every held-out output explained.
TEST(CutlassArms, IdentifyNamesEachArmsDeclaration) {
  QC_REQUIRE_CUTLASS();
  for (const char* label : {"cuda:cutlass-int8-vllm-cutlass", "cuda:cutlass-int8-vllm-cutlass-fma",
                            "cuda:cutlass-fp8-rowwise", "cuda:cutlass-fp8-rowwise-fastacc"}) {
    auto arm = make_arm(label);
    const ArmInfo info = arm->info();
    const IdentifyResult r = identify(*arm);
    ASSERT_EQ(r.verdict, "identified") << label << ": " << r.reason;
    EXPECT_EQ(r.matching, r.outputs) << label;
    EXPECT_GT(r.outputs, 10000) << label;
    if (info.fp8()) {
      EXPECT_EQ(r.accumulation_model, info.accumulation_model) << label << ": " << r.formula;
      EXPECT_EQ(r.epilogue_named, std::vector<std::string>{info.epilogue}) << label << ": " << r.formula;
    } else {
      EXPECT_NE(std::find(r.named.begin(), r.named.end(), info.epilogue), r.named.end()) << label << ": " << r.formula;
    }
    std::printf("%s: identified %s (%lld of %lld held-out outputs, %.1f s)\n", label, r.formula.c_str(),
                static_cast<long long>(r.matching), static_cast<long long>(r.outputs), r.seconds);
  }
}

}  // namespace
}  // namespace qc
