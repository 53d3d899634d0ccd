// The fp32-sum and exact FP8 accumulation models (src/accum/fp8_model.hpp: `sequential`,
// `blocked-<c>`, `split-k-<s>`, `exact`) against sums this test writes itself: FP8 decoding by the
// OCP definition (`std::ldexp`, not the numeric core), plain fp32 loops for the range sums, an int64
// sum of exactly scaled products for the exact model, and a hand-built case whose results are
// derived in its comment. Both the scalar reference and the fast evaluation are held to them. (These
// are the facts the older FP8 GEMM emulation, src/accum/fp8_emulation, was tested for; it is gone,
// the models are the one vocabulary.)
//
//   cmake --build build -j2 --target qconform_unit_tests &&
//   ./build/tests/qconform_unit_tests --gtest_filter='Fp8ModelSums*'
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "accum/fp8_model.hpp"
#include "qconform/accumulation.hpp"
#include "qconform/numerics.hpp"

namespace {

using qc::Fp8Format;
using qc::Fp8Gemm;

// Independent decoding: sign, exponent and mantissa fields by the OCP FP8 definition.
double by_definition(uint8_t b, Fp8Format f) {
  const int man_bits = f == Fp8Format::e4m3 ? 3 : 2, bias = f == Fp8Format::e4m3 ? 7 : 15;
  const int e = (b & 0x7F) >> man_bits, m = b & ((1 << man_bits) - 1);
  const double mag = e == 0 ? std::ldexp(m, 1 - bias - man_bits) : std::ldexp((1 << man_bits) + m, e - bias - man_bits);
  return (b & 0x80) ? -mag : mag;
}
bool definition_finite(uint8_t b, Fp8Format f) {
  return f == Fp8Format::e4m3 ? (b & 0x7F) != 0x7F : ((b >> 2) & 0x1F) != 0x1F;
}

std::vector<uint8_t> random_codes(size_t n, Fp8Format f, std::mt19937_64& rng) {
  std::vector<uint8_t> v(n);
  for (auto& x : v) {
    do x = static_cast<uint8_t>(rng());
    while (!definition_finite(x, f));
  }
  return v;
}

// Random e4m3 x e4m3 operands of one GEMM (the codes own the memory `g` points into).
struct RandomGemm {
  std::vector<uint8_t> a, w;
  Fp8Gemm g;
  RandomGemm(uint64_t seed, int64_t m, int64_t n, int64_t k) {
    std::mt19937_64 rng(seed);
    a = random_codes(static_cast<size_t>(m * k), Fp8Format::e4m3, rng);
    w = random_codes(static_cast<size_t>(n * k), Fp8Format::e4m3, rng);
    g = Fp8Gemm{a.data(), Fp8Format::e4m3, w.data(), Fp8Format::e4m3, {m, n, k}};
  }
  RandomGemm(const RandomGemm&) = delete;  // `g` points into this object's vectors
};

// Reference and fast evaluation of a named model.
struct Both {
  std::vector<float> ref, fast;
};
Both evaluate(const std::string& model, const Fp8Gemm& g) {
  const qc::Fp8AccumModel m = qc::fp8_accumulation_model(model).model;
  Both r{std::vector<float>(static_cast<size_t>(g.s.m * g.s.n)), std::vector<float>(static_cast<size_t>(g.s.m * g.s.n))};
  qc::fp8_model_reference(m, g, r.ref.data());
  qc::fp8_model_evaluate(m, g, r.fast.data(), 2);
  return r;
}

void expect_bits(const std::string& what, int64_t i, int64_t j, float want, float got) {
  ASSERT_EQ(qc::f32_bits(want), qc::f32_bits(got))
      << fmt::format("{} d[{},{}]: expected {} ({:#010x}), found {} ({:#010x})", what, i, j, want, qc::f32_bits(want), got,
                     qc::f32_bits(got));
}

// Every finite code of both formats scales to its definition exactly (the integer the reference
// multiplies), and the alignment exponent is floor(log2|x|), or the minimum normal exponent.
TEST(Fp8ModelSums, EveryFiniteCodeScalesToItsDefinition) {
  for (Fp8Format f : {Fp8Format::e4m3, Fp8Format::e5m2}) {
    int finite = 0;
    for (int b = 0; b < 256; ++b) {
      const auto c = static_cast<uint8_t>(b);
      ASSERT_EQ(qc::accum_model::fp8_code_finite(c, f), definition_finite(c, f)) << b;
      if (!definition_finite(c, f)) continue;
      ++finite;
      ASSERT_EQ(static_cast<double>(qc::accum_model::fp8_times_2p16(c, f)), by_definition(c, f) * 65536.0) << b;
      if ((c & 0x7F) == 0) continue;
      const int e = (c & 0x7F) >> (f == Fp8Format::e4m3 ? 3 : 2);
      const int want = e == 0 ? (f == Fp8Format::e4m3 ? -6 : -14) : static_cast<int>(std::floor(std::log2(std::fabs(by_definition(c, f)))));
      ASSERT_EQ(qc::accum_model::fp8_exponent(c, f), want) << b;
    }
    EXPECT_EQ(finite, f == Fp8Format::e4m3 ? 254 : 248);
  }
}

// K = 64 e4m3: scaled products are integers below 2^36, their sum below 2^42 < 2^53, so the fp64
// sum is exact and one conversion to fp32 is the correctly rounded result.
TEST(Fp8ModelSums, ExactModelIsTheExactSumRoundedOnce) {
  std::mt19937_64 rng(3);
  for (Fp8Format fa : {Fp8Format::e4m3, Fp8Format::e5m2}) {
    const int64_t m = 9, n = 11, k = 64;
    const auto a = random_codes(static_cast<size_t>(m * k), fa, rng), w = random_codes(static_cast<size_t>(n * k), Fp8Format::e4m3, rng);
    const Both d = evaluate("exact", {a.data(), fa, w.data(), Fp8Format::e4m3, {m, n, k}});
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        double s = 0;
        for (int64_t x = 0; x < k; ++x) s += by_definition(a[i * k + x], fa) * by_definition(w[j * k + x], Fp8Format::e4m3);
        expect_bits("exact reference", i, j, static_cast<float>(s), d.ref[i * n + j]);
        expect_bits("exact fast", i, j, static_cast<float>(s), d.fast[i * n + j]);
      }
    }
  }
}

// Products: p0 = 256·256 = 2^16, then 255 products 2^-4·2^-5 = 2^-9. The fp32 ulp at 2^16 is 2^-7,
// so 2^16 + 2^-9 rounds back to 2^16 (a quarter ulp).
//   sequential: every small product is lost: 2^16.
//   blocked-128: chunk 0 = 2^16 (127 lost); chunk 1 = 128·2^-9 = 2^-2 exactly: 2^16 + 0.25.
//   split-k-4: [0,64) = 2^16; three ranges of 64·2^-9 = 2^-3: 2^16 + 0.375.
//   exact: 2^16 + 255·2^-9 = 2^16 + 0.498046875 = 63.75 ulps above 2^16: rounds to 2^16 + 0.5.
TEST(Fp8ModelSums, OrdersOnAHandBuiltCase) {
  const int64_t k = 256;
  std::vector<uint8_t> a(k), w(k);
  a[0] = w[0] = qc::f32_to_e4m3fn(256.0f, /*saturate=*/false);
  for (int64_t i = 1; i < k; ++i) {
    a[i] = qc::f32_to_e4m3fn(0.0625f, /*saturate=*/false);
    w[i] = qc::f32_to_e4m3fn(0.03125f, /*saturate=*/false);
  }
  const Fp8Gemm g{a.data(), Fp8Format::e4m3, w.data(), Fp8Format::e4m3, {1, 1, k}};
  for (const auto& [model, want] : {std::pair<const char*, float>{"sequential", 65536.0f}, {"blocked-128", 65536.25f},
                                    {"split-k-4", 65536.375f}, {"exact", 65536.5f}}) {
    const Both d = evaluate(model, g);
    expect_bits(std::string(model) + " reference", 0, 0, want, d.ref[0]);
    expect_bits(std::string(model) + " fast", 0, 0, want, d.fast[0]);
  }
}

// The range models against fp32 loops written here: ranges [b_r, b_{r+1}) each summed from +0 in fp32
// (one rounding per add: -ffp-contract=off), the partials added in order into an fp32 total.
TEST(Fp8ModelSums, RangeModelsAreFp32RangeSums) {
  const int64_t M = 4, N = 50, K = 1000;
  const RandomGemm op(11, M, N, K);
  const std::vector<uint8_t>&a = op.a, &w = op.w;
  const Fp8Gemm& g = op.g;
  const auto bounds_every = [&](int64_t c) {
    std::vector<int64_t> b;
    for (int64_t k = 0; k < K; k += c) b.push_back(k);
    b.push_back(K);
    return b;
  };
  const auto split = [&](int64_t s) {  // K / s per range, the last takes the rest
    std::vector<int64_t> b;
    for (int64_t r = 0; r < s; ++r) b.push_back(r * (K / s));
    b.push_back(K);
    return b;
  };
  const std::pair<const char*, std::vector<int64_t>> rows[] = {
      {"sequential", {0, K}}, {"blocked-128", bounds_every(128)}, {"blocked-7", bounds_every(7)},
      {"blocked-1000", {0, K}}, {"split-k-3", split(3)}, {"split-k-1", {0, K}}};
  int64_t differs_from_exact = 0;
  const Both exact = evaluate("exact", g);
  for (const auto& [model, b] : rows) {
    const Both d = evaluate(model, g);
    for (int64_t i = 0; i < M; ++i) {
      for (int64_t j = 0; j < N; ++j) {
        float total = 0.0f;
        for (size_t r = 0; r + 1 < b.size(); ++r) {
          float part = 0.0f;
          for (int64_t x = b[r]; x < b[r + 1]; ++x) {
            part = part + static_cast<float>(by_definition(a[i * K + x], Fp8Format::e4m3)) *
                              static_cast<float>(by_definition(w[j * K + x], Fp8Format::e4m3));  // product exact
          }
          total = total + part;
        }
        expect_bits(std::string(model) + " reference", i, j, total, d.ref[i * N + j]);
        expect_bits(std::string(model) + " fast", i, j, total, d.fast[i * N + j]);
        differs_from_exact += qc::f32_bits(total) != qc::f32_bits(exact.ref[i * N + j]);
      }
    }
  }
  EXPECT_GT(differs_from_exact, 0) << "K = 1000 of random e4m3: some fp32 sum must round, or this proves little";
}

// Recursive summation bound: |sequential - exact| <= (K-1)·u·Σ|p| with u = 2^-24 (plus the final
// rounding), and K = 4096 random e4m3 products do round somewhere.
TEST(Fp8ModelSums, SequentialRespectsTheErrorBound) {
  const int64_t m = 4, n = 6, k = 4096;
  const RandomGemm op(5, m, n, k);
  const std::vector<uint8_t>&a = op.a, &w = op.w;
  const Fp8Gemm& g = op.g;
  const Both seq = evaluate("sequential", g), ex = evaluate("exact", g);
  int differs = 0;
  for (int64_t i = 0; i < m * n; ++i) {
    double abs_sum = 0;
    const int64_t r = i / n, c = i % n;
    for (int64_t x = 0; x < k; ++x) abs_sum += std::fabs(by_definition(a[r * k + x], Fp8Format::e4m3) * by_definition(w[c * k + x], Fp8Format::e4m3));
    ASSERT_TRUE(std::isfinite(seq.ref[i]));
    EXPECT_LE(std::fabs(static_cast<double>(seq.ref[i]) - ex.ref[i]), k * 0x1p-24 * abs_sum) << i;
    differs += seq.ref[i] != ex.ref[i];
  }
  EXPECT_GT(differs, 0);
}

}  // namespace
