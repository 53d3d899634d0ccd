// The engines' dispatch rules the CUTLASS arms follow (src/arms/cutlass/cutlass_dispatch.hpp and
// `formula::torch_rowwise_choice`), and the `torch-rowwise` epilogue they declare. These run on the
// CPU in every build: the rules are plain C++, and the formula is the host's. The expected values
// are traced by hand from the engines' source at bucket and branch edges (the source files and the
// branch each case takes are named beside it), not computed by the functions under test.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "arms/cutlass/cutlass_dispatch.hpp"
#include "qconform/epilogue.hpp"
#include "qconform/epilogue_formula.hpp"
#include "qconform/numerics.hpp"

namespace {

using qc::cutlass_arms::Int8Config;
using qc::cutlass_arms::vllm_int8_config;

// vLLM scaled_mm_sm90_int8_dispatch.cuh: mp2 = max(32, next_pow_2(m)); mp2 <= 32 splits on n < 8192.
TEST(CutlassDispatch, VllmInt8BucketsAtTheirEdges) {
  EXPECT_EQ(vllm_int8_config(1, 4096), Int8Config::m32_nsmall);
  EXPECT_EQ(vllm_int8_config(32, 8191), Int8Config::m32_nsmall);
  EXPECT_EQ(vllm_int8_config(32, 8192), Int8Config::m32_nbig);
  EXPECT_EQ(vllm_int8_config(1, 12288), Int8Config::m32_nbig);
  EXPECT_EQ(vllm_int8_config(33, 8192), Int8Config::m64);  // next_pow_2(33) = 64
  EXPECT_EQ(vllm_int8_config(64, 2048), Int8Config::m64);
  EXPECT_EQ(vllm_int8_config(65, 2048), Int8Config::m128);
  EXPECT_EQ(vllm_int8_config(128, 2048), Int8Config::m128);
  EXPECT_EQ(vllm_int8_config(129, 2048), Int8Config::fallback);
  EXPECT_EQ(vllm_int8_config(4096, 2048), Int8Config::fallback);
  const auto& c = qc::cutlass_arms::kInt8ConfigTable[static_cast<int>(Int8Config::m128)];
  EXPECT_EQ(c.tile_m, 64);
  EXPECT_EQ(c.tile_n, 128);
  EXPECT_EQ(c.tile_k, 128);
  EXPECT_EQ(c.cluster_m, 2);
  EXPECT_STREQ(c.kernel_schedule, "KernelTmaWarpSpecializedPingpong");
}

// RowwiseScaledMM.cu, dispatch_fp8_rowwise_kernel_on_cluster_size_and_transpose, M and N rounded up
// to 64 first. Each case names the branch it takes.
TEST(CutlassDispatch, TorchRowwiseOrientationAndCluster) {
  struct Case {
    int64_t m, n;
    bool transposed;
    int cluster_m, cluster_n, swizzle;
    const char* branch;
  };
  const Case cases[] = {
      {1, 6144, false, 1, 2, 1, "M == 64 && N >= 3072"},
      {64, 3072, false, 1, 2, 1, "M == 64 && N >= 3072"},
      {4096, 64, true, 1, 2, 1, "N == 64 && M >= 3072"},
      {192, 4096, true, 1, 2, 1, "M == 192 && N >= 4096"},
      {4096, 130, false, 1, 2, 1, "N == 192 (130 rounds up) && M >= 4096"},
      {128, 2048, true, 2, 1, 1, "M*N <= 4096^2, M % 256 > 0, N % 256 == 0"},
      {16, 1024, true, 2, 1, 1, "M*N <= 4096^2, M % 256 > 0 (M = 64), N % 256 == 0"},
      {512, 320, false, 2, 1, 1, "M*N <= 4096^2, N % 256 > 0, M % 256 == 0"},
      {320, 320, false, 2, 1, 1, "M, N % 256 > 0: (M <= N) != (M*N <= 2^20) = true != true"},
      {8192, 8192, false, 2, 1, 8, "M, N >= 4096, M >= N"},
      {4096, 8192, true, 2, 1, 8, "M, N >= 4096, M < N"},
      {512, 2048, true, 1, 2, 1, "general: (M <= N) != (M >= 2048 && N >= 2048) = true"},
      {2048, 512, true, 2, 1, 1, "general: (M <= N) != (...) = false"},
  };
  for (const Case& c : cases) {
    const qc::formula::TorchRowwiseChoice got = qc::formula::torch_rowwise_choice(c.m, c.n);
    EXPECT_EQ(got.transposed, c.transposed) << c.m << "x" << c.n << ": " << c.branch;
    EXPECT_EQ(got.cluster_m, c.cluster_m) << c.m << "x" << c.n << ": " << c.branch;
    EXPECT_EQ(got.cluster_n, c.cluster_n) << c.m << "x" << c.n << ": " << c.branch;
    EXPECT_EQ(got.swizzle, c.swizzle) << c.m << "x" << c.n << ": " << c.branch;
  }
}

// dispatch_fp8_rowwise_kernel_on_tile_size: 64-row tiles while ceil(rows/(64 cm)) * ceil(cols/(128 cn))
// <= sms / (cm cn). 132 SMs (H200), cluster 2x1: 66 clusters.
TEST(CutlassDispatch, TorchRowwiseTileChoice) {
  EXPECT_TRUE(qc::cutlass_arms::torch_rowwise_small_tile(128, 2048, 2, 1, 132));    // 1 * 16 = 16 <= 66
  EXPECT_TRUE(qc::cutlass_arms::torch_rowwise_small_tile(512, 2048, 2, 1, 132));    // 4 * 16 = 64 <= 66
  EXPECT_FALSE(qc::cutlass_arms::torch_rowwise_small_tile(640, 2048, 2, 1, 132));   // 5 * 16 = 80 > 66
  EXPECT_EQ(qc::cutlass_arms::rowwise_index(true, true, true), 7);
  EXPECT_EQ(qc::cutlass_arms::rowwise_index(false, false, true), 1);
}

float bits_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// The `torch-rowwise` epilogue over an fp32 accumulator: the bias node's add of 0 turns a -0 into +0
// (fp8-scaled keeps it), and the orientation follows the shape.
TEST(CutlassDispatch, TorchRowwiseEpilogueAddsZeroAndFollowsTheOrientation) {
  const qc::Epilogue& torch = qc::epilogue("torch-rowwise");
  const qc::Epilogue& scaled = qc::fp8_epilogue();
  // d, sa, sw where the two product orders round to different bf16 values (found by a numpy search:
  // 16 of 4,000,000 random triples): bf16(sa * rn32(d * sw)) = 0x45da, bf16(rn32(d * sa) * sw) = 0x45d9.
  const float sa = bits_float(1055879189u), sw = bits_float(1059919723u), d = bits_float(1185675036u);
  const float neg_zero = -0.0f;
  uint16_t y_torch = 0, y_scaled = 0;
  qc::apply_epilogue(torch, &neg_zero, &sa, &sw, nullptr, 1, 1, &y_torch, 1);
  qc::apply_epilogue(scaled, &neg_zero, &sa, &sw, nullptr, 1, 1, &y_scaled, 1);
  EXPECT_EQ(y_torch, 0x0000u);
  EXPECT_EQ(y_scaled, 0x8000u);
  // A nonzero d: each orientation is its product order, spelled out here in fp32 (this TU, like the
  // library, builds with -ffp-contract=off).
  const int64_t N = 2048;  // M = 128, N = 2048: transposed; M = 1, N = 6144: not
  volatile float t1 = d * sw;
  volatile float wx = sa * t1;
  volatile float t2 = d * sa;
  volatile float xw = t2 * sw;
  const uint16_t want_wx = qc::f32_to_bf16(wx + 0.0f), want_xw = qc::f32_to_bf16(xw + 0.0f);
  ASSERT_EQ(want_wx, 0x45dau);
  ASSERT_EQ(want_xw, 0x45d9u);
  std::vector<float> acc(128 * N, d), sa_col(128, sa), sw_cols(N, sw);
  std::vector<uint16_t> y(128 * N);
  qc::apply_epilogue(torch, acc.data(), sa_col.data(), sw_cols.data(), nullptr, 128, N, y.data(), 1);
  EXPECT_EQ(y[0], want_wx) << "wx " << qc::f32_bits(wx) << " xw " << qc::f32_bits(xw);
  std::vector<float> acc1(6144, d), sw1(6144, sw);
  std::vector<uint16_t> y1(6144);
  qc::apply_epilogue(torch, acc1.data(), &sa, sw1.data(), nullptr, 1, 6144, y1.data(), 1);
  EXPECT_EQ(y1[0], want_xw);
}

}  // namespace
