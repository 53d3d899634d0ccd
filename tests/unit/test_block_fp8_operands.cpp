// The operands the GPU block arms upload (src/arms/block_fp8_operands.hpp), checked on the CPU since the
// arms themselves run only on the GPU label: zero padding that keeps every output's K blocks and scales,
// the activation scales row-fastest with per-token scales repeated per block, the weight scales in both
// orders (cuBLASLt's k-major with a leading dimension, CUTLASS's), the crop back to [M, N], and the
// refusals (bias, scale blocks other than 128 x 128, e5m2).
//
// Run: ./build/tests/qconform_unit_tests --gtest_filter='BlockFp8Operands*'
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "arms/block_fp8_operands.hpp"
#include "input_error.hpp"
#include "synth/synth.hpp"

namespace {

qc::LayerOperands layer(int64_t m, int64_t n, int64_t k, const std::string& act, const std::string& weight) {
  qc::SynthOptions o;
  o.shapes = std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k);
  o.element = "e4m3";
  o.act_scale = act;
  o.weight_scale = weight;
  if (act.starts_with("per-token-group")) o.act_quantizer = "deepgemm";
  return qc::synth_operands(o).at(0);
}

// An aligned layer's codes go up as they are (no copy per run): the views are the layer's own tensors.
TEST(BlockFp8Operands, AnAlignedLayerIsNotCopied) {
  const qc::LayerOperands ops = layer(16, 256, 384, "per-token-group:128", "per-block:128x128");
  const qc::BlockFp8Operands o = qc::block_fp8_operands("test", ops, 16, 16, 128, /*weights_k_major=*/true, 4);
  EXPECT_EQ(o.a().data(), ops.a_codes().data());
  EXPECT_EQ(o.w().data(), ops.w_codes().data());
  EXPECT_EQ(o.a().size(), ops.a_codes().size());
  EXPECT_TRUE(o.a_padded.empty() && o.w_padded.empty());
  const std::vector<float> d(static_cast<size_t>(16 * 256), 1.5f);
  EXPECT_EQ(o.crop(d), d);
}

TEST(BlockFp8Operands, PadsCodesAndLaysOutScalesForEachKernel) {
  const qc::LayerOperands ops = layer(3, 201, 200, "per-token-group:128", "per-block:128x128");
  const qc::BlockFp8Operands o = qc::block_fp8_operands("test", ops, 16, 16, 128, /*weights_k_major=*/true, 4);
  EXPECT_EQ(o.mp, 16);
  EXPECT_EQ(o.np, 208);
  EXPECT_EQ(o.kp, 256);
  EXPECT_EQ(o.k_blocks, 2);
  EXPECT_EQ(o.n_blocks, 2);
  EXPECT_EQ(o.sw_ld, 4);
  const auto a = ops.a_codes(), w = ops.w_codes();
  for (int64_t i = 0; i < o.mp; ++i) {
    for (int64_t c = 0; c < o.kp; ++c) {
      const uint8_t want = i < 3 && c < 200 ? a[static_cast<size_t>(i * 200 + c)] : 0;
      ASSERT_EQ(o.a()[static_cast<size_t>(i * o.kp + c)], want) << i << "," << c;
    }
  }
  for (int64_t j = 0; j < o.np; ++j) {
    for (int64_t c = 0; c < o.kp; ++c) {
      const uint8_t want = j < 201 && c < 200 ? w[static_cast<size_t>(j * 200 + c)] : 0;
      ASSERT_EQ(o.w()[static_cast<size_t>(j * o.kp + c)], want) << j << "," << c;
    }
  }
  for (int64_t b = 0; b < 2; ++b) {
    for (int64_t i = 0; i < o.mp; ++i) {
      EXPECT_EQ(o.sa[static_cast<size_t>(b * o.mp + i)], i < 3 ? ops.a_scale[static_cast<size_t>(i * 2 + b)] : 1.0f);
    }
    for (int64_t nb = 0; nb < 2; ++nb) {
      EXPECT_EQ(o.sw[static_cast<size_t>(nb * 4 + b)], ops.w_scale[static_cast<size_t>(nb * 2 + b)]);
    }
  }
  EXPECT_EQ(o.sw.size(), 8u);
  // CUTLASS's MN-major weight scales, no padding of M.
  const qc::BlockFp8Operands c = qc::block_fp8_operands("test", ops, 1, 16, 128, /*weights_k_major=*/false, 0);
  EXPECT_EQ(c.mp, 3);
  for (int64_t b = 0; b < 2; ++b) {
    for (int64_t nb = 0; nb < 2; ++nb) {
      EXPECT_EQ(c.sw[static_cast<size_t>(b * 2 + nb)], ops.w_scale[static_cast<size_t>(nb * 2 + b)]);
    }
  }
  // The crop takes the layer's [M, N] out of the padded output.
  std::vector<int> padded(static_cast<size_t>(o.mp * o.np));
  for (size_t x = 0; x < padded.size(); ++x) padded[x] = static_cast<int>(x);
  const std::vector<int> y = o.crop(padded);
  ASSERT_EQ(y.size(), 3u * 201u);
  EXPECT_EQ(y[0], 0);
  EXPECT_EQ(y[201], 208);
  EXPECT_EQ(y[2 * 201 + 200], 2 * 208 + 200);
}

TEST(BlockFp8Operands, RepeatsAPerTokenScaleForEveryBlock) {
  const qc::LayerOperands ops = layer(2, 128, 384, "per-token", "per-block:128x128");
  const qc::BlockFp8Operands o = qc::block_fp8_operands("test", ops, 1, 16, 128, true, 0);
  ASSERT_EQ(o.k_blocks, 3);
  for (int64_t b = 0; b < 3; ++b) {
    for (int64_t i = 0; i < 2; ++i) EXPECT_EQ(o.sa[static_cast<size_t>(b * 2 + i)], ops.a_scale[static_cast<size_t>(i)]);
  }
}

TEST(BlockFp8Operands, RefusesWhatTheKernelsAreNotBuiltFor) {
  std::string msg = qc::test::input_error([] {
    (void)qc::block_fp8_operands("cuda:x", layer(2, 128, 256, "per-token-group:128", "per-block:64x128"), 1, 16,
                                 128, true, 0);
  });
  EXPECT_NE(msg.find("per-block:128x128"), std::string::npos) << msg;
  msg = qc::test::input_error([] {
    (void)qc::block_fp8_operands("cuda:x", layer(2, 128, 256, "per-token", "per-channel"), 1, 16, 128, true, 0);
  });
  EXPECT_NE(msg.find("cuda:x"), std::string::npos) << msg;
}

}  // namespace
