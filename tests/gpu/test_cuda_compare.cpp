// The GPU comparison kernel against a CPU loop written independently, and the CUDA-core exact
// int64 accumulation against the CPU exact reference (random, all-extreme, K past the int32 proof,
// split K).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <algorithm>
#include <random>
#include <vector>

#include "gpu_test_util.hpp"
#include "qconform/accumulation.hpp"
#include "arms/cuda/cuda.hpp"
#include "qconform/numerics.hpp"

namespace qc {
namespace {

// Ordered position of a bf16 on the number line, written as an offset from 0x8000 (a different
// spelling from the kernel's sign-magnitude mirror): -0 and +0 both land on 0x8000.
int64_t line_position(uint16_t h) { return (h & 0x8000u) ? 0x8000 - (h & 0x7FFF) : 0x8000 + h; }
bool finite_bf16(uint16_t h) { return std::isfinite(bf16_to_f32(h)); }

TEST(CudaCompare, MatchesCpuLoop) {
  const size_t n = (size_t{1} << 22) + 5;  // a tail that is not a multiple of 8
  std::mt19937_64 rng(7);
  std::uniform_int_distribution<int> bits(0, 0xFFFF);
  std::vector<uint16_t> a(n), b(n);
  for (size_t i = 0; i < n; ++i) a[i] = static_cast<uint16_t>(bits(rng)), b[i] = a[i];
  std::uniform_int_distribution<size_t> pos(0, n - 1);
  for (int i = 0; i < 1000; ++i) {  // neighbours, larger distances, signed zeros, NaN and inf
    const size_t p = pos(rng);
    switch (i % 6) {
      case 0: b[p] = static_cast<uint16_t>(a[p] ^ 1u); break;
      case 1: b[p] = static_cast<uint16_t>(a[p] + 37u); break;
      case 2: a[p] = 0x0000, b[p] = 0x8000; break;
      case 3: a[p] = 0x7FC0, b[p] = 0x7FC1; break;
      case 4: a[p] = 0x7F80, b[p] = 0x3F80; break;
      default: b[p] = static_cast<uint16_t>(bits(rng)); break;
    }
  }
  b[n - 1] = static_cast<uint16_t>(a[n - 1] ^ 0x10u);  // one in the tail
  GpuBf16Comparison want;
  want.elements = static_cast<int64_t>(n);
  for (size_t i = 0; i < n; ++i) {
    if (a[i] == b[i]) continue;
    ++want.bitwise_diff;
    if (want.first_diff < 0) want.first_diff = static_cast<int64_t>(i);
    if (!finite_bf16(a[i]) || !finite_bf16(b[i])) {
      ++want.nonfinite_mismatch;
      continue;
    }
    ++want.finite_diff;
    const int64_t d = std::llabs(line_position(a[i]) - line_position(b[i]));
    want.max_ulp = std::max(want.max_ulp, d);
    int bucket = 0;
    while ((int64_t{1} << bucket) <= d) ++bucket;  // bit width of d (0 for d == 0)
    ++want.ulp_hist[std::min(bucket, GpuBf16Comparison::kUlpBuckets - 1)];
  }
  const GpuBf16Comparison got = compare_bf16_gpu(a, b);
  EXPECT_EQ(got.elements, want.elements);
  EXPECT_EQ(got.bitwise_diff, want.bitwise_diff);
  EXPECT_EQ(got.finite_diff, want.finite_diff);
  EXPECT_EQ(got.nonfinite_mismatch, want.nonfinite_mismatch);
  EXPECT_EQ(got.max_ulp, want.max_ulp);
  EXPECT_EQ(got.first_diff, want.first_diff);
  for (int i = 0; i < GpuBf16Comparison::kUlpBuckets; ++i) EXPECT_EQ(got.ulp_hist[i], want.ulp_hist[i]) << "bucket " << i;
  EXPECT_GT(want.nonfinite_mismatch, 0);  // the case mix really exercised every branch
  EXPECT_GT(want.ulp_hist[0], 0);
}

void expect_exact_i64(int64_t m, int64_t n, int64_t k, int fill, uint64_t seed) {
  std::vector<int8_t> a(static_cast<size_t>(m * k)), w(static_cast<size_t>(n * k));
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> code(-128, 127);
  for (auto& v : a) v = static_cast<int8_t>(fill == 0 ? code(rng) : fill);
  for (auto& v : w) v = static_cast<int8_t>(fill == 0 ? code(rng) : fill);
  std::vector<int64_t> want(static_cast<size_t>(m * n));
  exact_accumulate_i64(a.data(), w.data(), AccumShape{m, n, k}, want.data());
  const std::vector<int64_t> got = exact_accumulate_i64_gpu(a.data(), w.data(), AccumShape{m, n, k});
  const std::string d = gpu_test::diff_report(got, want, n, "int64 exact accumulator");
  EXPECT_TRUE(d.empty()) << fmt::format("M={} N={} K={} fill={} ", m, n, k, fill) << d;
  if (k <= kAccumMaxKInt32) {  // the int32-output instance, where every sum fits
    const std::vector<int32_t> got32 = exact_accumulate_i32_gpu(a.data(), w.data(), AccumShape{m, n, k});
    const std::string d32 = gpu_test::diff_report(got32, want, n, "int32-output exact accumulator");
    EXPECT_TRUE(d32.empty()) << fmt::format("M={} N={} K={} fill={} ", m, n, k, fill) << d32;
  } else {
    EXPECT_THROW(exact_accumulate_i32_gpu(a.data(), w.data(), AccumShape{m, n, k}), Error);
  }
}

TEST(CudaExactAccum, RandomRagged) { expect_exact_i64(333, 1040, 2068, 0, 1); }
TEST(CudaExactAccum, KNotAMultipleOfFour) {
  // Byte loads: rows start at unaligned offsets and end mid-word.
  for (int64_t k : {1, 3, 5, 31, 33, 1001}) expect_exact_i64(67, 65, k, 0, 10 + static_cast<uint64_t>(k));
  expect_exact_i64(5, 7, 1023, -128, 11);
}
TEST(CudaExactAccum, AllExtremeK32768) {
  expect_exact_i64(65, 70, 32768, -128, 2);  // 2^14 · 2^15 = 2^29
  expect_exact_i64(17, 33, 32768, 127, 3);
}
// A layer-sized exact accumulation with long K of extreme bytes (2048 x 1792 x 32768): each int32 output
// sums 32768 products, up to 2^29 in magnitude. The operands are built so that the exact sums are known
// without an O(MNK) loop: a's row m is one value v(m) repeated (alternately -128 and 127), so
// acc[m, n] = v(m) * S(n) with S(n) the sum of w's row n (-128 everywhere but a random few).
TEST(CudaExactAccum, LongKAtALayersSizeIsKnownWithoutALoop) {
  const int64_t m = 2048, n = 1792, k = 32768;
  std::vector<int8_t> a(static_cast<size_t>(m * k)), w(static_cast<size_t>(n * k), -128);
  const auto v = [](int64_t row) { return row % 2 == 0 ? -128 : 127; };
  for (int64_t r = 0; r < m; ++r) std::fill_n(a.begin() + r * k, k, static_cast<int8_t>(v(r)));
  std::mt19937_64 rng(5);
  std::vector<int64_t> row_sum(static_cast<size_t>(n));
  for (int64_t c = 0; c < n; ++c) {
    for (int i = 0; i < 64; ++i) w[static_cast<size_t>(c * k + static_cast<int64_t>(rng() % k))] = static_cast<int8_t>(rng() % 256 - 128);
    int64_t sum = 0;
    for (int64_t j = 0; j < k; ++j) sum += w[static_cast<size_t>(c * k + j)];
    row_sum[static_cast<size_t>(c)] = sum;
  }
  const std::vector<int32_t> got = exact_accumulate_i32_gpu(a.data(), w.data(), AccumShape{m, n, k});
  ASSERT_EQ(got.size(), static_cast<size_t>(m * n));
  int64_t wrong = 0;
  for (int64_t r = 0; r < m; ++r) {
    for (int64_t c = 0; c < n; ++c) {
      const int64_t want = v(r) * row_sum[static_cast<size_t>(c)];
      const int32_t g = got[static_cast<size_t>(r * n + c)];
      if (g != want && wrong++ < 5) ADD_FAILURE() << fmt::format("acc[{}, {}] = {}, expected {}", r, c, g, want);
    }
  }
  EXPECT_EQ(wrong, 0);
  EXPECT_GT(-128 * row_sum[0], int64_t{1} << 28);  // the sums reach past 2^28
}

TEST(CudaExactAccum, BeyondInt32Proof) {
  // 140000 · 2^14 > 2^31: only an int64 accumulation is exact here.
  expect_exact_i64(3, 5, 140000, -128, 4);
  // The same past the proof with byte loads (K % 4 == 3); K above 65536 is always split.
  expect_exact_i64(3, 5, 140001, -128, 5);
}
// The int32 output at its largest K, all extreme: 131071 · 2^14 = 2^31 - 2^14, the split K ranges'
// int32 partials added atomically in int32 (byte loads at K = 131071, 4-byte loads at 131068).
TEST(CudaExactAccum, Int32OutputAtItsLargestK) {
  expect_exact_i64(3, 5, 131071, -128, 6);
  expect_exact_i64(3, 5, 131068, -128, 7);
}
// A layer shape with few output tiles: M = 512, N = 1024 is 32 tiles of 128x128 for 132 SMs, so the
// kernel splits K = 8192 into ranges (8 on an H100) whose partial sums are added exactly.
TEST(CudaExactAccum, SplitKAtALayerShape) { expect_exact_i64(512, 1024, 8192, 0, 20); }
// Split K whose last range is ragged (K not a multiple of the 64-byte stage), in each of the three
// load widths (16-byte chunks, 4-byte words, bytes), with ragged M and N.
TEST(CudaExactAccum, SplitKRaggedLastRange) {
  for (int64_t k : {4096 + 48, 4096 + 20, 4096 + 7}) expect_exact_i64(200, 300, k, 0, 30 + static_cast<uint64_t>(k));
}
// Many tiles and short K: one K range per tile (no split on an H100), plain stores, ragged M and N.
TEST(CudaExactAccum, ManyTilesNoSplit) { expect_exact_i64(1100, 4100, 256, 0, 21); }

}  // namespace
}  // namespace qc
