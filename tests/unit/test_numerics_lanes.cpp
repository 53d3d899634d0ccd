// The SIMD lanes that keep a vector form of the numeric core (include/qconform/numerics.hpp), run
// exhaustively against the scalar core:
// - the bf16 rounding lanes of the `fp8-scaled` epilogue (src/epilogue/epilogue_kernels.cpp) on
//   every one of the 2^32 fp32 patterns (scales 1, so the lanes' input is the pattern itself: a
//   multiplication by 1 is exact, and a NaN's payload survives it quieted, on both sides alike);
// - the ordered-distance lanes of the comparison (src/compare/compare_kernels.cpp) on every one of
//   the 2^32 ordered pairs of bf16 patterns that differ, and its classification lanes on every
//   pattern against the core's `classify<kBf16>`.
// The lanes cover whole vectors only (the callers take the tail with the scalar code), so each
// check runs on what they covered, and says how much that was. Both take seconds on two cores.
//
//   cmake --build build -j2 --target qconform_unit_tests &&
//   ./build/tests/qconform_unit_tests --gtest_filter='NumericsLanes*'
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <string>
#include <vector>

#include "compare/compare_kernels.hpp"
#include "core/parallel.hpp"
#include "epilogue/epilogue_kernels.hpp"
#include "qconform/epilogue_formula.hpp"
#include "qconform/numerics.hpp"

namespace {

// Mismatches from several threads: the count and the first description.
struct Mismatches {
  std::atomic<int64_t> count{0};
  std::mutex mu;
  std::string first;
  void add(const std::string& what) {
    if (count++ == 0) {
      std::lock_guard<std::mutex> lock(mu);
      first = what;
    }
  }
};

TEST(NumericsLanes, Bf16RoundingLanesEqualTheCoreOnEveryFp32) {
  constexpr int64_t kBlock = int64_t{1} << 20;
  constexpr int64_t kBlocks = (int64_t{1} << 32) / kBlock;
  Mismatches bad;
  std::atomic<int64_t> covered{0};
  qc::parallel_for(kBlocks, 2, [&](int64_t blk) {
    std::vector<float> d(static_cast<size_t>(kBlock)), sw(static_cast<size_t>(kBlock), 1.0f);
    std::vector<uint16_t> y(static_cast<size_t>(kBlock));
    for (int64_t i = 0; i < kBlock; ++i) d[static_cast<size_t>(i)] = qc::f32_from_bits(static_cast<uint32_t>(blk * kBlock + i));
    const float sa = 1.0f;
    qc::epilogue_detail::triton_f32_rows(d.data(), &sa, sw.data(), 1, kBlock, y.data());
    for (int64_t i = 0; i < kBlock; ++i) {
      const float x = d[static_cast<size_t>(i)];
      // The scalar text: bf16_rn(rn32(rn32(x * 1) * 1)), i.e. the core's f32_to_bf16 of the product.
      const uint16_t want = qc::f32_to_bf16(qc::formula::mul_rn(qc::formula::mul_rn(x, 1.0f), 1.0f));
      if (y[static_cast<size_t>(i)] != want) {
        bad.add(fmt::format("fp32 {:#010x}: lanes {:#06x}, core {:#06x}", qc::f32_bits(x), y[static_cast<size_t>(i)], want));
      }
    }
    covered += kBlock;
  });
  EXPECT_EQ(covered.load(), int64_t{1} << 32);
  EXPECT_EQ(bad.count.load(), 0) << "first: " << bad.first;
}

TEST(NumericsLanes, OrderedDistanceLanesEqualTheCoreOnEveryPair) {
  // Pair i of round `delta` is (i, i + delta mod 2^16): rounds 1 .. 65535 cover every ordered pair
  // of distinct patterns once.
  constexpr int64_t kPatterns = 65536;
  std::vector<uint16_t> x(kPatterns);
  for (int64_t i = 0; i < kPatterns; ++i) x[static_cast<size_t>(i)] = static_cast<uint16_t>(i);
  Mismatches bad;
  std::atomic<int64_t> covered{0};
  qc::parallel_for(kPatterns - 1, 2, [&](int64_t r) {
    const int64_t delta = r + 1;
    std::vector<uint16_t> y(kPatterns), ulp(kPatterns);
    for (int64_t i = 0; i < kPatterns; ++i) y[static_cast<size_t>(i)] = static_cast<uint16_t>((i + delta) & 0xFFFF);
    qc::compare_detail::DifferCounts c;
    const int64_t n = qc::compare_detail::scan_differing_pairs(x.data(), y.data(), kPatterns, 0, c, ulp.data());
    for (int64_t i = 0; i < n; ++i) {
      const uint16_t a = x[static_cast<size_t>(i)], b = y[static_cast<size_t>(i)];
      const bool finite = qc::bf16_is_finite(a) && qc::bf16_is_finite(b);
      const uint32_t want = finite ? qc::bf16_ordered_distance(a, b) : qc::compare_detail::kNoUlp;
      if (ulp[static_cast<size_t>(i)] != want) {
        bad.add(fmt::format("pair {:#06x}, {:#06x}: lanes {}, core {}", a, b, ulp[static_cast<size_t>(i)], want));
      }
    }
    covered += n;
  });
  // Whole vectors of a 65536-pair round: every pair, on any vector width.
  EXPECT_EQ(covered.load(), kPatterns * (kPatterns - 1));
  EXPECT_EQ(bad.count.load(), 0) << "first: " << bad.first;
}

TEST(NumericsLanes, ClassificationLanesEqualTheCoreOnEveryPattern) {
  constexpr int64_t kPatterns = 65536;
  std::vector<uint16_t> a(kPatterns);
  for (int64_t i = 0; i < kPatterns; ++i) a[static_cast<size_t>(i)] = static_cast<uint16_t>(i);
  // b: the same patterns (all pairs equal), then rotated by 1 (all pairs differ).
  for (int64_t delta : {0, 1, 0x8000}) {
    std::vector<uint16_t> b(kPatterns);
    for (int64_t i = 0; i < kPatterns; ++i) b[static_cast<size_t>(i)] = static_cast<uint16_t>((i + delta) & 0xFFFF);
    const uint16_t near = 0x0100;
    qc::compare_detail::PairCounts c;
    std::vector<int32_t> differ(kPatterns);
    int64_t differ_count = 0;
    const int64_t n = qc::compare_detail::scan_bf16_pairs(a.data(), b.data(), kPatterns, near, c, differ.data(), differ_count);
    ASSERT_EQ(n, kPatterns);
    qc::compare_detail::PairCounts want;
    int64_t want_differ = 0;
    for (int64_t i = 0; i < n; ++i) {
      const uint16_t s[2] = {a[static_cast<size_t>(i)], b[static_cast<size_t>(i)]};
      for (int side = 0; side < 2; ++side) {
        const qc::FpClass k = qc::classify<qc::kBf16>(s[side]);
        want.nan[side] += k == qc::FpClass::nan;
        want.inf[side] += k == qc::FpClass::inf;
        want.subnormal[side] += k == qc::FpClass::subnormal;
      }
      const bool finite = qc::bf16_is_finite(s[0]) && qc::bf16_is_finite(s[1]);
      want.nonfinite_pairs += !finite;
      if (s[0] == s[1] && finite) {
        ++want.equal_finite;
        want.equal_near_zero += (s[0] & qc::kBf16.magnitude_mask()) < near;
      }
      if (s[0] != s[1]) {
        ASSERT_LT(want_differ, differ_count);
        ASSERT_EQ(differ[static_cast<size_t>(want_differ)], i) << "delta " << delta;
        ++want_differ;
      }
    }
    EXPECT_EQ(differ_count, want_differ) << "delta " << delta;
    for (int side = 0; side < 2; ++side) {
      EXPECT_EQ(c.nan[side], want.nan[side]) << "delta " << delta << " side " << side;
      EXPECT_EQ(c.inf[side], want.inf[side]) << "delta " << delta << " side " << side;
      EXPECT_EQ(c.subnormal[side], want.subnormal[side]) << "delta " << delta << " side " << side;
    }
    EXPECT_EQ(c.nonfinite_pairs, want.nonfinite_pairs) << "delta " << delta;
    EXPECT_EQ(c.equal_finite, want.equal_finite) << "delta " << delta;
    EXPECT_EQ(c.equal_near_zero, want.equal_near_zero) << "delta " << delta;
  }
  // The classes are those of the format (two NaN blocks, 2 infinities, 2 x 127 subnormals).
  qc::compare_detail::PairCounts once;
  std::vector<int32_t> differ(kPatterns);
  int64_t dc = 0;
  qc::compare_detail::scan_bf16_pairs(a.data(), a.data(), kPatterns, 0, once, differ.data(), dc);
  EXPECT_EQ(once.nan[0], 2 * 127);
  EXPECT_EQ(once.inf[0], 2);
  EXPECT_EQ(once.subnormal[0], 2 * 127);
}

}  // namespace
