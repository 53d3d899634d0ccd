// FP8 GEMM emulation: the e4m3 decoding against an independent formula for every byte, the exact
// reference against fp64 sums where fp64 is provably exact, and the accumulation orders on a
// hand-built case whose results are derived in the comments.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "qconform/error.hpp"
#include "accum/fp8_emulation.hpp"
#include "qconform/numerics.hpp"

namespace qc {
namespace {

// Independent decoding: sign, exponent and mantissa fields by the OCP FP8 definition.
double e4m3_by_definition(uint8_t b) {
  const int s = b >> 7, e = (b >> 3) & 0xF, m = b & 7;
  const double mag = e == 0 ? std::ldexp(m, -9) : std::ldexp(8 + m, e - 10);
  return s ? -mag : mag;
}

TEST(Fp8Emulation, EveryE4m3ByteDecodes) {
  for (int b = 0; b < 256; ++b) {
    if ((b & 0x7F) == 0x7F) {
      EXPECT_THROW(e4m3_times_512(static_cast<uint8_t>(b)), Error) << b;
      continue;
    }
    EXPECT_EQ(static_cast<double>(e4m3_times_512(static_cast<uint8_t>(b))), e4m3_by_definition(static_cast<uint8_t>(b)) * 512.0)
        << "byte " << b;
  }
}

std::vector<uint8_t> random_e4m3(size_t n, std::mt19937_64& rng) {
  std::uniform_int_distribution<int> d(0, 255);
  std::vector<uint8_t> v(n);
  for (auto& x : v) {
    do x = static_cast<uint8_t>(d(rng));
    while ((x & 0x7F) == 0x7F);
  }
  return v;
}

TEST(Fp8Emulation, ExactMatchesFp64WhereFp64IsExact) {
  // K = 64: scaled products are integers below 2^36, their sum below 2^42 < 2^53, so the fp64 sum
  // is exact and one conversion to fp32 is the correctly rounded result.
  std::mt19937_64 rng(3);
  const int64_t m = 9, n = 11, k = 64;
  const auto a = random_e4m3(static_cast<size_t>(m * k), rng), w = random_e4m3(static_cast<size_t>(n * k), rng);
  std::vector<float> d(static_cast<size_t>(m * n));
  fp8_gemm_exact(a.data(), w.data(), AccumShape{m, n, k}, d.data(), 2);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (int64_t x = 0; x < k; ++x) s += e4m3_by_definition(a[i * k + x]) * e4m3_by_definition(w[j * k + x]);
      EXPECT_EQ(f32_bits(d[i * n + j]), f32_bits(static_cast<float>(s))) << i << "," << j;
    }
}

TEST(Fp8Emulation, OrdersOnAHandBuiltCase) {
  // Products: p0 = 256·256 = 2^16, then 255 products 2^-4·2^-5 = 2^-9. The fp32 ulp at 2^16 is
  // 2^-7, so 2^16 + 2^-9 rounds back to 2^16 (a quarter ulp).
  //   sequential: every small product is lost: 2^16.
  //   blocked(128): chunk 0 = 2^16 (127 lost); chunk 1 = 128·2^-9 = 2^-2 exactly: 2^16 + 0.25.
  //   split-k(4): [0,64) = 2^16; three ranges of 64·2^-9 = 2^-3: 2^16 + 0.375.
  //   exact: 2^16 + 255·2^-9 = 2^16 + 0.498046875 = 63.75 ulps above 2^16: rounds to 2^16 + 0.5.
  const int64_t k = 256;
  std::vector<uint8_t> a(k), w(k);
  a[0] = f32_to_e4m3fn(256.0f, false), w[0] = f32_to_e4m3fn(256.0f, false);
  for (int64_t i = 1; i < k; ++i) a[i] = f32_to_e4m3fn(0.0625f, false), w[i] = f32_to_e4m3fn(0.03125f, false);
  const AccumShape s{1, 1, k};
  float d = 0;
  fp8_gemm_emulate(a.data(), w.data(), s, {Fp8AccumOrder::sequential}, &d, 1);
  EXPECT_EQ(d, 65536.0f);
  fp8_gemm_emulate(a.data(), w.data(), s, {Fp8AccumOrder::blocked, 128}, &d, 1);
  EXPECT_EQ(d, 65536.25f);
  fp8_gemm_emulate(a.data(), w.data(), s, {Fp8AccumOrder::split_k, 128, 4}, &d, 1);
  EXPECT_EQ(d, 65536.375f);
  fp8_gemm_exact(a.data(), w.data(), s, &d, 1);
  EXPECT_EQ(d, 65536.5f);
}

TEST(Fp8Emulation, DegenerateOrdersEqualSequentialAndRespectTheErrorBound) {
  std::mt19937_64 rng(5);
  const int64_t m = 4, n = 6, k = 4096;
  const auto a = random_e4m3(static_cast<size_t>(m * k), rng), w = random_e4m3(static_cast<size_t>(n * k), rng);
  const AccumShape s{m, n, k};
  std::vector<float> seq(m * n), blk(m * n), one(m * n), ex(m * n);
  fp8_gemm_emulate(a.data(), w.data(), s, {Fp8AccumOrder::sequential}, seq.data());
  fp8_gemm_emulate(a.data(), w.data(), s, {Fp8AccumOrder::blocked, k}, blk.data());
  fp8_gemm_emulate(a.data(), w.data(), s, {Fp8AccumOrder::split_k, 128, 1}, one.data());
  fp8_gemm_exact(a.data(), w.data(), s, ex.data());
  int differs_from_exact = 0;
  for (int64_t i = 0; i < m * n; ++i) {
    EXPECT_EQ(f32_bits(seq[i]), f32_bits(blk[i])) << i;
    EXPECT_EQ(f32_bits(seq[i]), f32_bits(one[i])) << i;
    // Recursive summation bound: |err| <= (K-1)·u·Σ|p| with u = 2^-24 (plus the final rounding).
    double abs_sum = 0;
    const int64_t r = i / n, c = i % n;
    for (int64_t x = 0; x < k; ++x) abs_sum += std::fabs(e4m3_by_definition(a[r * k + x]) * e4m3_by_definition(w[c * k + x]));
    ASSERT_TRUE(std::isfinite(seq[i]));
    EXPECT_LE(std::fabs(static_cast<double>(seq[i]) - ex[i]), k * 0x1p-24 * abs_sum) << i;
    differs_from_exact += seq[i] != ex[i];
  }
  EXPECT_GT(differs_from_exact, 0);  // K = 4096 of random e4m3: sequential fp32 does round
}

}  // namespace
}  // namespace qc
