// The depth sweep (src/orchestrate/sweep.cpp): the fast FP8 kernels are bit-identical to the models' one
// scalar reference, the epilogue to a second implementation in fp64, the magnitude statistics to
// hand-made pairs, and tiny sweeps of both formats run (INT8: max 1 ulp).
#include <gtest/gtest.h>

#include <fmt/format.h>

#include "qconform/error.hpp"
#include "qconform/numerics.hpp"
#include "accum/fp8_model.hpp"
#include "orchestrate/sweep.hpp"
#include "synth/synth.hpp"

namespace {

std::vector<uint8_t> random_e4m3(size_t count, uint64_t seed) {
  std::vector<uint8_t> v(count);
  for (auto& b : v) {
    do {
      b = static_cast<uint8_t>(qc::splitmix64(seed));
    } while ((b & 0x7F) == 0x7F);  // no NaN codes
  }
  return v;
}

void expect_same_f32(const std::vector<float>& want, const std::vector<float>& got, int64_t n, const std::string& id) {
  ASSERT_EQ(want.size(), got.size());
  int64_t bad = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    if (qc::f32_bits(want[i]) != qc::f32_bits(got[i])) {
      if (bad++ < 5) {
        ADD_FAILURE() << id << " [" << i / static_cast<size_t>(n) << "," << i % static_cast<size_t>(n)
                      << "]: reference " << fmt::format("{:.9g} ({:#010x})", want[i], qc::f32_bits(want[i])) << " fast "
                      << fmt::format("{:.9g} ({:#010x})", got[i], qc::f32_bits(got[i]));
      }
    }
  }
  EXPECT_EQ(bad, 0) << id << ": mismatching elements";
}

}  // namespace

// A named model's fast evaluation (what the `fp8:` arms run) and its one scalar reference.
void model_run(const std::string& model, const uint8_t* a, const uint8_t* w, qc::AccumShape s, float* d, bool fast) {
  const qc::Fp8Gemm g{a, qc::Fp8Format::e4m3, w, qc::Fp8Format::e4m3, s};
  const qc::Fp8AccumModel m = qc::fp8_accumulation_model(model).model;
  if (fast) {
    qc::fp8_model_evaluate(m, g, d, 2);
  } else {
    qc::fp8_model_reference(m, g, d);
  }
}
void model_fast(const std::string& model, const uint8_t* a, const uint8_t* w, qc::AccumShape s, float* d) {
  model_run(model, a, w, s, d, true);
}

TEST(SweepFp8, FastKernelsAreBitIdenticalToReferences) {
  struct Case {
    int64_t m, n, k;
  };
  for (Case c : {Case{7, 45, 300}, Case{5, 32, 1}, Case{9, 70, 2100}, Case{1, 1, 17}}) {
    // Realistic operands (large sums: rounding happens) and random codes (the whole range).
    const qc::Fp8Operands real = qc::synth_fp8_operands(c.m, c.n, c.k, 5);
    for (int kind = 0; kind < 2; ++kind) {
      const std::vector<uint8_t> a = kind ? random_e4m3(static_cast<size_t>(c.m * c.k), 11) : real.a;
      const std::vector<uint8_t> w = kind ? random_e4m3(static_cast<size_t>(c.n * c.k), 12) : real.w;
      const qc::AccumShape s{c.m, c.n, c.k};
      for (const std::string& model : {std::string("sequential"), std::string("blocked-128"), std::string("blocked-7"),
                                       fmt::format("split-k-{}", std::min<int64_t>(4, c.k)), std::string("split-k-1"),
                                       std::string("exact")}) {
        std::vector<float> want(static_cast<size_t>(c.m * c.n)), got(want.size());
        model_run(model, a.data(), w.data(), s, want.data(), false);
        model_run(model, a.data(), w.data(), s, got.data(), true);
        expect_same_f32(want, got, c.n, fmt::format("{}x{}x{} {} {}", c.m, c.n, c.k, kind ? "random" : "real", model));
      }
    }
  }
  // Some order must actually differ from the exact sum on realistic operands at depth, or the
  // comparison above proves little.
  const qc::Fp8Operands o = qc::synth_fp8_operands(16, 64, 8192, 1);
  std::vector<float> seq(16 * 64), ex(16 * 64);
  model_fast("sequential", o.a.data(), o.w.data(), {16, 64, 8192}, seq.data());
  model_fast("exact", o.a.data(), o.w.data(), {16, 64, 8192}, ex.data());
  int64_t differ = 0;
  for (size_t i = 0; i < seq.size(); ++i) differ += qc::f32_bits(seq[i]) != qc::f32_bits(ex[i]);
  EXPECT_GT(differ, 0);
}

TEST(SweepFp8, NaNCodesAreInputErrors) {
  std::vector<uint8_t> a{0x38, 0x7F}, w{0x38, 0x38};
  float d = 0;
  EXPECT_THROW(model_fast("sequential", a.data(), w.data(), {1, 1, 2}, &d), qc::Error);
}

TEST(SweepFp8, EpilogueMatchesFp64SecondImplementation) {
  uint64_t st = 99;
  std::vector<float> d(64 * 8), sa(64), sw(8);
  for (auto& v : d) v = static_cast<float>(static_cast<int64_t>(qc::splitmix64(st) >> 40) - (1 << 23)) * 0x1p-5f;
  for (auto& v : sa) v = static_cast<float>(1 + (qc::splitmix64(st) >> 44)) * 0x1p-27f;
  for (auto& v : sw) v = static_cast<float>(1 + (qc::splitmix64(st) >> 44)) * 0x1p-29f;
  const auto y = qc::fp8_epilogue_bf16(d.data(), sa, sw);
  for (size_t i = 0; i < 64; ++i) {
    for (size_t j = 0; j < 8; ++j) {
      // A product of two floats is exact in fp64; one cast to float is then rn32 of the product.
      const float t = static_cast<float>(static_cast<double>(d[i * 8 + j]) * sa[i]);
      const float u = static_cast<float>(static_cast<double>(t) * sw[j]);
      ASSERT_EQ(y[i * 8 + j], qc::f32_to_bf16(u)) << i << "," << j;
    }
  }
}

TEST(SweepCells, MagnitudeStatisticsOfAHandMadePair) {
  // a: 1.0 repeated (RMS 1, near-zero limit 0.01). b differs at 3 places: +1 ulp, +3 ulps, and a
  // near-zero element.
  std::vector<uint16_t> a(8, 0x3F80), b = a;
  a[7] = qc::f32_to_bf16(0.001f);
  b[7] = qc::f32_to_bf16(0.002f);
  b[1] = 0x3F81;
  b[2] = 0x3F83;
  const qc::SweepCell c = qc::measure_cell(a, b, 2, 4);
  EXPECT_EQ(c.total, 8);
  EXPECT_EQ(c.differing, 3);
  EXPECT_EQ(c.measured, 2);
  EXPECT_EQ(c.ge2ulp, 1);
  EXPECT_DOUBLE_EQ(c.share_ge2ulp(), 0.5);
  EXPECT_DOUBLE_EQ(c.max_rel, 3 * 0x1p-7);
  EXPECT_DOUBLE_EQ(c.median_rel, 2 * 0x1p-7);  // mean of the two middle values 1 and 3 spacings
  EXPECT_EQ(c.near_zero_diff, 1);
}

TEST(SweepRun, TinyInt8SweepStaysWithinOneUlp) {
  const qc::SweepResult r = qc::run_sweep(
      {.arm_a = "cpu:vllm-cutlass", .arm_b = "cpu:vllm-triton", .ks = {64, 256, 1024}, .m = 32, .n = 64, .seeds = 2});
  ASSERT_EQ(r.rows.size(), 3u);
  EXPECT_EQ(r.format, qc::SweepFormat::int8);
  for (const auto& row : r.rows) {
    EXPECT_EQ(row.total, 32 * 64 * 2);
    EXPECT_LE(row.max_ulp, 1) << "K=" << row.k;
  }
  EXPECT_EQ(r.fits.models.size(), 4u);
  const auto j = qc::to_json(r);
  EXPECT_EQ(j["schema_version"], 1);
  EXPECT_EQ(j["kind"], "qconform-sweep");
  EXPECT_EQ(j["rows"].size(), 3u);
  EXPECT_FALSE(qc::format_sweep(r).empty());
}

TEST(SweepRun, TinyFp8SweepAndPairErrors) {
  qc::SweepOptions o{
      .arm_a = "fp8:sequential", .arm_b = "fp8:split-k-4", .ks = {256, 1024, 4096}, .m = 16, .n = 64, .seeds = 2};
  const qc::SweepResult r = qc::run_sweep(o);
  EXPECT_EQ(r.format, qc::SweepFormat::fp8);
  EXPECT_EQ(r.cells.size(), 6u);
  // The old labels keep their old records (docs/sweep.md).
  const nlohmann::json j = qc::to_json(r);
  EXPECT_EQ(j["arms"]["a"]["kernel"], "cpu fp8 emulation, fp32 order sequential");
  EXPECT_EQ(j["arms"]["b"]["kernel"], "cpu fp8 emulation, fp32 order split-k(4)");
  EXPECT_FALSE(j["arms"]["a"].contains("accumulation_model"));
  {
    // The Hopper models through the registry: fast vs default accumulation differ at depth.
    qc::SweepOptions h = o;
    h.arm_a = "cpu:fp8-hopper-fp8-chain";
    h.arm_b = "cpu:fp8-hopper-fp8-promote4";
    h.ks = {4096};
    h.seeds = 1;
    const qc::SweepResult hr = qc::run_sweep(h);
    EXPECT_EQ(hr.format, qc::SweepFormat::fp8);
    EXPECT_GT(hr.rows[0].differing, 0);
    EXPECT_EQ(qc::to_json(hr)["arms"]["a"]["accumulation_model"], "hopper-fp8-chain");
  }
  o.arm_b = "cpu:vllm-cutlass";
  EXPECT_THROW(qc::run_sweep(o), qc::Error);  // mixed formats
  o.arm_b = "fp8:blocked-x";
  EXPECT_THROW(qc::run_sweep(o), qc::Error);
#ifndef QC_WITH_CUDA
  o.arm_b = "cuda:cublaslt-fp8-fastacc";
  try {
    qc::run_sweep(o);
    ADD_FAILURE() << "a cuBLASLt arm must be refused without CUDA";
  } catch (const qc::Error& e) {
    EXPECT_EQ(e.kind(), qc::ErrorKind::input);
    EXPECT_NE(std::string(e.what()).find("CUDA"), std::string::npos) << e.what();
  }
#endif
}
