// Block-scaled FP8 accumulation models (src/epilogue/block_models.hpp, fp8_block_model.hpp): each
// promotion form's body pinned on hand-derived values, the fast path equal to the scalar reference on
// every form, several chains, partial blocks at the K and N edges and the layouts a block-scaled layer
// can have, the reference equal to a composition written here from the chain model's own reference, the
// unit-scale equivalence with the promoted chain models, and the UE8M0 alibi (every form the same D
// under power-of-two scales). The Python peer is tests/peer/test_block_peer.py.
//
// Run: ./build/tests/qconform_unit_tests --gtest_filter='BlockModels*'
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "epilogue/block_models.hpp"
#include "input_error.hpp"
#include "qconform/numerics.hpp"
#include "synth/synth.hpp"

namespace {

using qc::BlockPromotion;
using qc::Fp8Format;
using qc::ScaleLayout;

// splitmix64-driven operands: finite e4m3 codes (NaN codes replaced) and fp32 scales with random
// fraction bits in [2^-12, 2^-4] (or powers of two there when `pow2`).
struct Operands {
  int64_t m = 0, n = 0, k = 0;
  std::vector<uint8_t> a, w;
  std::vector<float> sa, sw;
  ScaleLayout a_scaling, w_scaling;
  qc::Fp8BlockGemm gemm() const {
    qc::Fp8BlockGemm g;
    g.codes = {a.data(), Fp8Format::e4m3, w.data(), Fp8Format::e4m3, {m, n, k}};
    g.a_scale = sa;
    g.w_scale = sw;
    g.a_scaling = a_scaling;
    g.w_scaling = w_scaling;
    g.block_k = a_scaling.k_blocked() ? a_scaling.block_k : w_scaling.block_k;
    return g;
  }
};

float random_scale(uint64_t& st, bool pow2) {
  const uint64_t r = qc::splitmix64(st);
  const int e = -12 + static_cast<int>(r % 9);
  if (pow2) return std::ldexp(1.0f, e);
  return qc::f32_from_bits((static_cast<uint32_t>(e + 127) << 23) | static_cast<uint32_t>((r >> 8) & 0x7FFFFF));
}

Operands make_operands(int64_t m, int64_t n, int64_t k, ScaleLayout al, ScaleLayout wl, uint64_t seed, bool pow2) {
  Operands o;
  o.m = m, o.n = n, o.k = k, o.a_scaling = al, o.w_scaling = wl;
  uint64_t st = seed;
  const auto code = [&] {
    uint8_t c = static_cast<uint8_t>(qc::splitmix64(st));
    if ((c & 0x7F) == 0x7F) c ^= 1;  // no NaN codes
    return c;
  };
  o.a.resize(static_cast<size_t>(m * k));
  o.w.resize(static_cast<size_t>(n * k));
  for (uint8_t& c : o.a) c = code();
  for (uint8_t& c : o.w) c = code();
  o.sa.resize(static_cast<size_t>(al.scale_count(m, k)));
  o.sw.resize(static_cast<size_t>(wl.scale_count(n, k)));
  for (float& s : o.sa) s = random_scale(st, pow2);
  for (float& s : o.sw) s = random_scale(st, pow2);
  return o;
}

std::vector<float> reference(const qc::BlockModel& m, const Operands& o) {
  std::vector<float> d(static_cast<size_t>(o.m * o.n));
  qc::fp8_block_reference(m, o.gemm(), d.data());
  return d;
}

std::vector<float> fast(const qc::BlockModel& m, const Operands& o, int threads = 0) {
  std::vector<float> d(static_cast<size_t>(o.m * o.n), -1.0f);
  qc::fp8_block_evaluate(m, o.gemm(), d.data(), threads);
  return d;
}

// Bitwise; the first mismatches printed with coordinates and bit patterns.
void expect_bitwise(const std::vector<float>& got, const std::vector<float>& want, int64_t n, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int64_t off = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (qc::f32_bits(got[i]) == qc::f32_bits(want[i])) continue;
    if (++off <= 5) {
      ADD_FAILURE() << what << " [" << static_cast<int64_t>(i) / n << "," << static_cast<int64_t>(i) % n << "]: got "
                    << got[i] << " (0x" << std::hex << qc::f32_bits(got[i]) << "), want " << want[i] << " (0x"
                    << qc::f32_bits(want[i]) << std::dec << ")";
    }
  }
  EXPECT_EQ(off, 0) << what << ": " << off << " of " << got.size() << " differ";
}

TEST(BlockModels, EachFormsBodyOnHandDerivedValues) {
  using qc::block_model::promote;
  const float u = 0x1p-23f;
  // triton vs triton-nofma: x = rn32(C*sa) = 1+2^-23, x*sb = 1 + 2^-22 + 2^-46 exactly. With D = -(1+2^-22)
  // the fused add keeps 2^-46; rounding the product first (to 1+2^-22) leaves 0.
  EXPECT_EQ(promote(BlockPromotion::triton, 1 + u, 1.0f, 1 + u, -(1 + 2 * u)), 0x1p-46f);
  EXPECT_EQ(promote(BlockPromotion::triton_nofma, 1 + u, 1.0f, 1 + u, -(1 + 2 * u)), 0.0f);
  // triton vs deepgemm: C = sa = 1+2^-23, sb = 1. triton rounds C*sa to 1+2^-22 first: 0 against
  // D = -(1+2^-22); deepgemm's rn32(sa*sb) = 1+2^-23 is exact, the fused C*(sa*sb) keeps 2^-46.
  EXPECT_EQ(promote(BlockPromotion::triton, 1 + u, 1 + u, 1.0f, -(1 + 2 * u)), 0.0f);
  EXPECT_EQ(promote(BlockPromotion::deepgemm, 1 + u, 1 + u, 1.0f, -(1 + 2 * u)), 0x1p-46f);
  // deepgemm vs deepgemm-nofma: rn32(sa*sb) = 1+2^-23, times C = 1+2^-23 is 1+2^-22+2^-46 (fused: 2^-46
  // left against D), rounded first: 1+2^-22 (then 0).
  EXPECT_EQ(promote(BlockPromotion::deepgemm_nofma, 1 + u, 1 + u, 1.0f, -(1 + 2 * u)), 0.0f);
  // Power-of-two scales: every product exact, every form the rounded sum.
  for (BlockPromotion f : qc::block_promotions()) {
    EXPECT_EQ(promote(f, 3.0f + 2 * u, 0.25f, 8.0f, 1.5f), 7.5f + 4 * u) << qc::block_promotion_name(f);
  }
}

TEST(BlockModels, TableNamesFormulasAndErrors) {
  const qc::BlockModel m = qc::fp8_block_model("block-triton");
  EXPECT_EQ(m.chain.name, "hopper-fp8-chain");
  EXPECT_EQ(m.form, BlockPromotion::triton);
  EXPECT_NE(qc::block_model_formula(m).find("D <- fma(rn32(C*sa), sb, D) from D = +0; y = bf16(D)"), std::string::npos)
      << qc::block_model_formula(m);
  const qc::BlockModel s = qc::fp8_block_model("block-deepgemm-nofma+sequential");
  EXPECT_EQ(s.chain.name, "sequential");
  EXPECT_EQ(s.form, BlockPromotion::deepgemm_nofma);
  EXPECT_EQ(qc::fp8_block_model_names().front(), "block-triton");
  std::string msg = qc::test::input_error([] { qc::fp8_block_model("block-tritone"); });
  EXPECT_NE(msg.find("unknown promotion form `tritone`"), std::string::npos) << msg;
  EXPECT_NE(msg.find("deepgemm-nofma"), std::string::npos) << msg;
  msg = qc::test::input_error([] { qc::fp8_block_model("block-triton+nonsense"); });
  EXPECT_NE(msg.find("unknown accumulation model `nonsense`"), std::string::npos) << msg;
}

TEST(BlockModels, FastPathEqualsReferenceOnEveryFormChainAndLayout) {
  struct Case {
    int64_t m, n, k;
    ScaleLayout a, w;
  };
  const Case cases[] = {
      {5, 7, 256, ScaleLayout::token_group(128), ScaleLayout::block(128, 128)},  // one weight block row
      {9, 130, 200, ScaleLayout::token_group(128), ScaleLayout::block(128, 128)},  // partial blocks at K and N
      {4, 33, 300, ScaleLayout::token_group(64), ScaleLayout::block(16, 64)},
      {3, 20, 96, ScaleLayout::per_token(), ScaleLayout::block(8, 32)},         // per-token x per-block
      {6, 11, 160, ScaleLayout::token_group(32), ScaleLayout::per_channel()},   // per-token-group x per-channel
      {2, 5, 1, ScaleLayout::token_group(128), ScaleLayout::block(128, 128)},   // K = 1
  };
  const char* models[] = {"block-triton", "block-triton-nofma", "block-deepgemm", "block-deepgemm-nofma",
                          "block-triton+sequential", "block-deepgemm+exact", "block-triton+hopper-fp8-promote4"};
  uint64_t seed = 1;
  for (const Case& c : cases) {
    for (const char* name : models) {
      const qc::BlockModel model = qc::fp8_block_model(name);
      if (model.chain.model.step_k > 0 && (c.a.k_blocked() ? c.a.block_k : c.w.block_k) % model.chain.model.step_k) {
        continue;  // the chain cannot take the block (its own test below)
      }
      const Operands o = make_operands(c.m, c.n, c.k, c.a, c.w, ++seed, false);
      const std::string what = std::string(name) + " " + std::to_string(c.m) + "x" + std::to_string(c.n) + "x" +
                               std::to_string(c.k) + " " + c.a.spec() + " x " + c.w.spec();
      const std::vector<float> want = reference(model, o);
      expect_bitwise(fast(model, o), want, c.n, what);
      expect_bitwise(fast(model, o, 1), want, c.n, what + " (1 thread)");
    }
  }
}

// The reference composed here from the chain's own scalar reference on each block's columns and the
// promotion written out with fp32 operations (this file is compiled with -ffp-contract=off).
TEST(BlockModels, ReferenceIsTheChainPerBlockThenThePromotion) {
  const Operands o = make_operands(4, 9, 328, ScaleLayout::token_group(128), ScaleLayout::block(4, 128), 77, false);
  for (BlockPromotion f : qc::block_promotions()) {
    const qc::BlockModel model = qc::fp8_block_model(std::string("block-") + std::string(qc::block_promotion_name(f)));
    std::vector<float> want(static_cast<size_t>(o.m * o.n), 0.0f);
    for (int64_t k0 = 0, b = 0; k0 < o.k; k0 += 128, ++b) {
      const int64_t len = std::min<int64_t>(128, o.k - k0);
      std::vector<uint8_t> a(static_cast<size_t>(o.m * len)), w(static_cast<size_t>(o.n * len));
      for (int64_t i = 0; i < o.m; ++i) std::copy_n(o.a.data() + i * o.k + k0, len, a.data() + i * len);
      for (int64_t j = 0; j < o.n; ++j) std::copy_n(o.w.data() + j * o.k + k0, len, w.data() + j * len);
      std::vector<float> chain(static_cast<size_t>(o.m * o.n));
      qc::fp8_model_reference(model.chain.model, {a.data(), Fp8Format::e4m3, w.data(), Fp8Format::e4m3, {o.m, o.n, len}},
                              chain.data());
      const int64_t blocks = (o.k + 127) / 128;
      for (int64_t i = 0; i < o.m; ++i) {
        for (int64_t j = 0; j < o.n; ++j) {
          const float c = chain[i * o.n + j], sa = o.sa[i * blocks + b], sb = o.sw[(j / 4) * blocks + b];
          float& d = want[i * o.n + j];
          switch (f) {
            case BlockPromotion::triton: {
              const float x = c * sa;
              d = std::fma(x, sb, d);
              break;
            }
            case BlockPromotion::triton_nofma: {
              const float x = c * sa;
              const float y = x * sb;
              d = d + y;
              break;
            }
            case BlockPromotion::deepgemm: {
              const float s = sa * sb;
              d = std::fma(s, c, d);
              break;
            }
            case BlockPromotion::deepgemm_nofma: {
              const float s = sa * sb;
              const float y = s * c;
              d = d + y;
              break;
            }
          }
        }
      }
    }
    expect_bitwise(reference(model, o), want, o.n, model.name);
  }
}

TEST(BlockModels, FormsDifferUnderRealScalesAndAgreeUnderPowerOfTwoScales) {
  for (bool pow2 : {false, true}) {
    const Operands o = make_operands(16, 64, 512, ScaleLayout::token_group(128), ScaleLayout::block(32, 128), 5, pow2);
    const std::vector<float> triton = reference(qc::fp8_block_model("block-triton"), o);
    for (const char* name : {"block-triton-nofma", "block-deepgemm", "block-deepgemm-nofma"}) {
      const std::vector<float> other = reference(qc::fp8_block_model(name), o);
      int64_t differ = 0;
      for (size_t i = 0; i < other.size(); ++i) differ += qc::f32_bits(other[i]) != qc::f32_bits(triton[i]);
      if (pow2) {
        EXPECT_EQ(differ, 0) << name << ": every product C*sa*sb is exact under power-of-two scales";
      } else {
        EXPECT_GT(differ, 0) << name << " equals block-triton on real scales: the forms would not be told apart";
      }
    }
  }
}

TEST(BlockModels, UnitScalesAreTheChainPromotedOncePerBlock) {
  Operands o = make_operands(8, 24, 1000, ScaleLayout::token_group(128), ScaleLayout::block(1, 128), 9, false);
  std::fill(o.sa.begin(), o.sa.end(), 1.0f);
  std::fill(o.sw.begin(), o.sw.end(), 1.0f);
  const struct {
    const char* block;
    const char* unscaled;
  } pairs[] = {{"block-triton", "hopper-fp8-promote4"},
               {"block-deepgemm-nofma", "hopper-fp8-promote4"},
               {"block-triton+sequential", "blocked-128"},
               {"block-deepgemm+sequential", "blocked-128"}};
  for (const auto& p : pairs) {
    const qc::BlockModel model = qc::fp8_block_model(p.block);
    ASSERT_EQ(qc::unit_scale_equivalent(model, 128), std::optional<std::string>(p.unscaled)) << p.block;
    std::vector<float> want(static_cast<size_t>(o.m * o.n));
    qc::fp8_model_reference(qc::fp8_accumulation_model(p.unscaled).model, o.gemm().codes, want.data());
    expect_bitwise(reference(model, o), want, o.n, p.block);
  }
  EXPECT_EQ(qc::unit_scale_equivalent(qc::fp8_block_model("block-triton+exact"), 128), std::nullopt);
  EXPECT_EQ(qc::unit_scale_equivalent(qc::fp8_block_model("block-triton"), 256), std::nullopt);  // promote8: no name
}

TEST(BlockModels, ABlockTheChainCannotTakeIsAnInputError) {
  const Operands o = make_operands(2, 3, 96, ScaleLayout::token_group(48), ScaleLayout::block(2, 48), 3, false);
  std::vector<float> d(6);
  std::string msg = qc::test::input_error([&] { qc::fp8_block_evaluate(qc::fp8_block_model("block-triton"), o.gemm(), d.data()); });
  EXPECT_NE(msg.find("K blocks of 48 products"), std::string::npos) << msg;
  EXPECT_NE(msg.find("multiple of the chain's instruction step (32 products, hopper-fp8-chain)"), std::string::npos) << msg;
  const Operands small = make_operands(2, 3, 8, ScaleLayout::token_group(4), ScaleLayout::block(2, 4), 3, false);
  msg = qc::test::input_error(
      [&] { qc::fp8_block_reference(qc::fp8_block_model("block-triton+split-k-8"), small.gemm(), d.data()); });
  EXPECT_NE(msg.find("split-k needs 1 <= splits <= K"), std::string::npos) << msg;
}

}  // namespace
