// The exact INT8 accumulator against the named scalar reference `accumulate_ref_i64`, itself
// checked against a second reference written differently here (k-outer rank-1 updates) and
// against closed forms for extreme operands. Every Highway target compiled into the library
// and supported by this CPU is exercised (hwy::SetSupportedTargetsForTest), each with 1 and 2
// threads. Range statistics are pinned on hand-built accumulators and operands.
//
// Run: ./build-<name>/tests/qconform_unit_tests --gtest_filter='Accum*'
#include <gtest/gtest.h>

// The library compiles the AVX3_DL (VNNI) target in (src/accum/accum_kernels.cpp); this file must
// see the same HWY_TARGETS so that `SupportedAndGeneratedTargets` lists it.
#ifndef HWY_WANT_AVX3_DL
#define HWY_WANT_AVX3_DL
#endif
#include <hwy/targets.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "qconform/accumulation.hpp"
#include "qconform/error.hpp"

namespace {

using qc::AccumShape;

// A test case is data: operands plus an id that names its parameters.
struct Case {
  std::string id;
  AccumShape s;
  std::vector<int8_t> a, w;
};

// Second reference, structured differently from `accumulate_ref_i64`: rank-1 updates, k outer.
std::vector<int64_t> rank1_reference(const Case& c) {
  std::vector<int64_t> acc(static_cast<size_t>(c.s.m * c.s.n), 0);
  for (int64_t kk = 0; kk < c.s.k; ++kk) {
    for (int64_t i = 0; i < c.s.m; ++i) {
      const int64_t ai = c.a[static_cast<size_t>(i * c.s.k + kk)];
      for (int64_t j = 0; j < c.s.n; ++j) acc[static_cast<size_t>(i * c.s.n + j)] += ai * c.w[static_cast<size_t>(j * c.s.k + kk)];
    }
  }
  return acc;
}

// Exact comparison; on failure prints the mismatch count and the first coordinates with both
// values and their bit patterns.
template <class T>
testing::AssertionResult all_equal(const std::string& id, AccumShape s, const std::vector<int64_t>& want,
                                   const std::vector<T>& got) {
  int64_t mismatches = 0;
  std::string detail;
  for (int64_t i = 0; i < s.m; ++i) {
    for (int64_t j = 0; j < s.n; ++j) {
      const size_t idx = static_cast<size_t>(i * s.n + j);
      const int64_t g = static_cast<int64_t>(got[idx]);
      if (g == want[idx]) continue;
      if (++mismatches <= 8) {
        detail += "\n  [m=" + std::to_string(i) + ", n=" + std::to_string(j) + "] expected " + std::to_string(want[idx]) +
                  " (0x" + fmt::format("{:016x}", static_cast<uint64_t>(want[idx])) + ") got " + std::to_string(g) +
                  " (0x" + fmt::format("{:016x}", static_cast<uint64_t>(g)) + ")";
      }
    }
  }
  if (mismatches == 0) return testing::AssertionSuccess();
  return testing::AssertionFailure() << id << ": " << mismatches << " of " << s.m * s.n << " elements differ" << detail;
}

Case make_case(const std::string& kind, AccumShape s, uint64_t seed) {
  Case c{kind + " m=" + std::to_string(s.m) + " n=" + std::to_string(s.n) + " k=" + std::to_string(s.k) + " seed=" +
             std::to_string(seed),
         s, std::vector<int8_t>(static_cast<size_t>(s.m * s.k)), std::vector<int8_t>(static_cast<size_t>(s.n * s.k))};
  std::mt19937_64 rng(seed);
  auto fill = [&](std::vector<int8_t>& v, auto gen) {
    for (auto& x : v) x = static_cast<int8_t>(gen());
  };
  if (kind == "uniform") {  // the full int8 range, -128 included
    std::uniform_int_distribution<int> d(-128, 127);
    fill(c.a, [&] { return d(rng); });
    fill(c.w, [&] { return d(rng); });
  } else if (kind == "extreme") {  // only -128 and 127: every sign combination of the extremes
    std::bernoulli_distribution d(0.5);
    fill(c.a, [&] { return d(rng) ? -128 : 127; });
    fill(c.w, [&] { return d(rng) ? -128 : 127; });
  } else if (kind == "pm127") {  // symmetric extremes
    std::bernoulli_distribution d(0.5);
    fill(c.a, [&] { return d(rng) ? -127 : 127; });
    fill(c.w, [&] { return d(rng) ? -127 : 127; });
  } else if (kind == "outlier") {  // small values with a few heavy channels and one huge column
    std::uniform_int_distribution<int> small(-3, 3);
    fill(c.a, [&] { return small(rng); });
    fill(c.w, [&] { return small(rng); });
    for (int64_t i = 0; i < s.m; ++i) {
      for (int64_t kk = 0; kk < s.k; kk += 7) c.a[static_cast<size_t>(i * s.k + kk)] = -128;
    }
    const int64_t huge = s.n / 2;
    for (int64_t kk = 0; kk < s.k; ++kk) c.w[static_cast<size_t>(huge * s.k + kk)] = -128;
  } else {
    ADD_FAILURE() << "unknown case kind " << kind;
  }
  return c;
}

// Runs `fn(target_name)` once for every Highway target compiled in and supported here, with the
// dispatcher forced to that target; restores normal dispatch afterwards.
template <class Fn>
void for_each_target(Fn&& fn) {
  const std::vector<int64_t> targets = hwy::SupportedAndGeneratedTargets();
  ASSERT_FALSE(targets.empty());
  for (int64_t target : targets) {
    hwy::SetSupportedTargetsForTest(target);
    // The dispatcher really switched: otherwise this loop would test one kernel many times.
    ASSERT_EQ(qc::accum_target_name(), std::string(hwy::TargetName(target)));
    fn(std::string(hwy::TargetName(target)));
  }
  hwy::SetSupportedTargetsForTest(0);
}

// Checks both entry points on every target and thread count against the reference.
void check_case(const Case& c, bool check_second_reference = true) {
  std::vector<int64_t> ref(static_cast<size_t>(c.s.m * c.s.n), -1);
  qc::accumulate_ref_i64(c.a.data(), c.w.data(), c.s, ref.data());
  if (check_second_reference) {
    ASSERT_TRUE(all_equal(c.id + " [ref vs rank1]", c.s, rank1_reference(c), ref));
  }
  for_each_target([&](const std::string& target) {
    for (int threads : {1, 2}) {
      const std::string id = c.id + " target=" + target + " threads=" + std::to_string(threads);
      if (c.s.k <= qc::kAccumMaxKInt32) {
        std::vector<int32_t> acc32(ref.size(), 0x5a5a5a5a);
        qc::exact_accumulate_i32(c.a.data(), c.w.data(), c.s, acc32.data(), threads);
        EXPECT_TRUE(all_equal(id + " i32", c.s, ref, acc32));
      }
      std::vector<int64_t> acc64(ref.size(), 0x5a5a5a5a5a5a5a5a);
      qc::exact_accumulate_i64(c.a.data(), c.w.data(), c.s, acc64.data(), threads);
      EXPECT_TRUE(all_equal(id + " i64", c.s, ref, acc64));
    }
  });
}

TEST(Accum, DispatchCoversSeveralTargets) {
  const std::vector<int64_t> targets = hwy::SupportedAndGeneratedTargets();
  std::string names;
  for (int64_t t : targets) names += std::string(" ") + hwy::TargetName(t);
  std::printf("accumulator targets tested here:%s; default dispatch: %s\n", names.c_str(),
              qc::accum_target_name().c_str());
  EXPECT_GE(targets.size(), 2u) << names;
  // The kernel production runs use is among those the tests force.
  EXPECT_NE((names + " ").find(" " + qc::accum_target_name() + " "), std::string::npos)
      << "default target " << qc::accum_target_name() << " not in" << names;
}

TEST(Accum, RaggedShapesUniform) {
  const AccumShape shapes[] = {{1, 1, 1},   {1, 1, 3},   {3, 17, 31},  {17, 31, 33}, {31, 33, 17},
                               {33, 1000, 5}, {1000, 3, 67}, {6, 64, 4}, {7, 65, 5},   {12, 128, 130},
                               {5, 200, 1000}, {13, 97, 257}, {2, 3, 0}};
  uint64_t seed = 1;
  for (const auto& s : shapes) check_case(make_case("uniform", s, seed++));
}

TEST(Accum, AllExtremeOperands) {
  check_case(make_case("extreme", {7, 70, 1000}, 11));
  check_case(make_case("pm127", {9, 33, 999}, 12));
  check_case(make_case("extreme", {3, 19, 32768}, 13), /*check_second_reference=*/false);
}

TEST(Accum, LargeKUniformAndOutliers) {
  check_case(make_case("uniform", {5, 33, 32768}, 21), /*check_second_reference=*/false);
  check_case(make_case("outlier", {11, 67, 4099}, 22));
}

// Constant operands have closed forms: acc = K·a·w everywhere. This is the independent expected
// value for the all-extreme sign combinations, including K where the VNNI kernel's intermediate
// sums wrap around modulo 2^32 (255·128·K > 2^31 for K > 65793) and K = 131071, the largest K
// the int32 proof admits, where (-128)·(-128)·K = 2^31 - 2^14 is the largest possible value.
TEST(Accum, ConstantExtremesClosedForm) {
  for (int64_t k : {int64_t{32768}, int64_t{70001}, qc::kAccumMaxKInt32}) {
    for (int av : {-128, 127, -127}) {
      for (int wv : {-128, 127, -127}) {
        const AccumShape s{2, 18, k};
        const std::vector<int8_t> a(static_cast<size_t>(s.m * k), static_cast<int8_t>(av));
        const std::vector<int8_t> w(static_cast<size_t>(s.n * k), static_cast<int8_t>(wv));
        const std::vector<int64_t> want(static_cast<size_t>(s.m * s.n), k * av * wv);
        const std::string id = "constant a=" + std::to_string(av) + " w=" + std::to_string(wv) + " k=" + std::to_string(k);
        for_each_target([&](const std::string& target) {
          std::vector<int32_t> acc32(want.size());
          qc::exact_accumulate_i32(a.data(), w.data(), s, acc32.data(), 2);
          EXPECT_TRUE(all_equal(id + " target=" + target, s, want, acc32));
        });
      }
    }
  }
}

// Alternating signs that cancel: a[k] = ±127 alternating, w = 127: every even-length prefix sums
// to zero. And a = -128 with w alternating -128/127: acc = (K/2)·(16384 - 16256) = 64·K.
TEST(Accum, AdversarialCancellation) {
  for (int64_t k : {int64_t{4096}, int64_t{4097}}) {
    const AccumShape s{7, 35, k};
    std::vector<int8_t> a(static_cast<size_t>(s.m * k)), w(static_cast<size_t>(s.n * k));
    for (int64_t i = 0; i < s.m; ++i)
      for (int64_t kk = 0; kk < k; ++kk) a[static_cast<size_t>(i * k + kk)] = static_cast<int8_t>(kk % 2 ? -127 : 127);
    std::fill(w.begin(), w.end(), int8_t{127});
    const int64_t cancel = (k % 2) ? 127 * 127 : 0;
    std::vector<int8_t> a2(a.size(), int8_t{-128}), w2(w.size());
    for (int64_t j = 0; j < s.n; ++j)
      for (int64_t kk = 0; kk < k; ++kk) w2[static_cast<size_t>(j * k + kk)] = static_cast<int8_t>(kk % 2 ? 127 : -128);
    const int64_t alt = (k / 2) * (16384 - 16256) + ((k % 2) ? 16384 : 0);
    for_each_target([&](const std::string& target) {
      for (int threads : {1, 2}) {
        std::vector<int32_t> acc(static_cast<size_t>(s.m * s.n));
        qc::exact_accumulate_i32(a.data(), w.data(), s, acc.data(), threads);
        EXPECT_TRUE(all_equal("cancel k=" + std::to_string(k) + " " + target, s,
                              std::vector<int64_t>(acc.size(), cancel), acc));
        qc::exact_accumulate_i32(a2.data(), w2.data(), s, acc.data(), threads);
        EXPECT_TRUE(all_equal("alternating k=" + std::to_string(k) + " " + target, s,
                              std::vector<int64_t>(acc.size(), alt), acc));
      }
    });
  }
}

TEST(Accum, DefaultThreadsMatchReference) {
  const Case c = make_case("uniform", {70, 300, 777}, 31);  // 16 M multiply-adds: threaded by default
  std::vector<int64_t> ref(static_cast<size_t>(c.s.m * c.s.n));
  qc::accumulate_ref_i64(c.a.data(), c.w.data(), c.s, ref.data());
  std::vector<int32_t> acc(ref.size());
  qc::exact_accumulate_i32(c.a.data(), c.w.data(), c.s, acc.data());
  EXPECT_TRUE(all_equal(c.id + " threads=0", c.s, ref, acc));
}

// K = 131072 with all -128: every exact value is 2^31, one past INT32_MAX. The int32 entry point
// refuses; the int64 path is exact; range_stats reports the overflow.
TEST(Accum, Int32ProofFailsBeyondK131071) {
  const int64_t k = qc::kAccumMaxKInt32 + 1;
  const AccumShape s{2, 3, k};
  const std::vector<int8_t> a(static_cast<size_t>(s.m * k), int8_t{-128}), w(static_cast<size_t>(s.n * k), int8_t{-128});
  std::vector<int32_t> acc32(6);
  EXPECT_THROW(qc::exact_accumulate_i32(a.data(), w.data(), s, acc32.data(), 1), qc::Error);
  for_each_target([&](const std::string& target) {
    std::vector<int64_t> acc64(6);
    qc::exact_accumulate_i64(a.data(), w.data(), s, acc64.data(), 2);
    EXPECT_TRUE(all_equal("k=131072 all -128 " + target, s, std::vector<int64_t>(6, int64_t{1} << 31), acc64));
  });
  std::vector<int64_t> acc64(6);
  qc::exact_accumulate_i64(a.data(), w.data(), s, acc64.data());
  const qc::RangeStats r = qc::range_stats(a.data(), w.data(), s, acc64.data());
  EXPECT_FALSE(r.int32_overflow_impossible);
  EXPECT_EQ(r.int32_overflow_count, 6);
  EXPECT_EQ(r.max_abs_acc, int64_t{1} << 31);
  EXPECT_EQ(r.count_above_2p24, 6);
  EXPECT_EQ(r.count_inexact_fp32, 0);  // 2^31 is a power of two: exact in fp32
  EXPECT_DOUBLE_EQ(r.headroom_bits, -7.0);
  EXPECT_THROW(qc::range_stats(a.data(), w.data(), s, acc32.data()), qc::Error);
  const qc::RangeStats r2 = qc::exact_range_stats(a.data(), w.data(), s);
  EXPECT_EQ(r2.int32_overflow_count, 6);
}

TEST(Accum, Int64PathRandomAcrossBlocks) {
  // K = 200003 spans four int32 blocks (65536 each) with a ragged last block.
  check_case(make_case("uniform", {3, 5, 200003}, 41), /*check_second_reference=*/false);
  // Near the maximum: (-128)(-128)·200003 and (127)(-128)·200003, both beyond int32.
  const AccumShape s{1, 2, 200003};
  std::vector<int8_t> a(static_cast<size_t>(s.k), int8_t{-128}), w(static_cast<size_t>(2 * s.k), int8_t{-128});
  std::fill(w.begin() + s.k, w.end(), int8_t{127});
  std::vector<int64_t> acc(2);
  qc::exact_accumulate_i64(a.data(), w.data(), s, acc.data(), 2);
  EXPECT_EQ(acc[0], 16384 * s.k);
  EXPECT_EQ(acc[1], -16256 * s.k);
  const qc::RangeStats r = qc::range_stats(a.data(), w.data(), s, acc.data());
  EXPECT_EQ(r.int32_overflow_count, 2);
}

// Range statistics on hand-built accumulator arrays: the semantics of "above 2^24".
TEST(AccumRangeStats, ThresholdSemantics) {
  const int64_t t = int64_t{1} << 24;
  // fp32 spacing is 2 in [2^24, 2^25) and 4 in [2^25, 2^26): t+2 and 2t+4 are exact, t+1 and
  // 2t+3 round, 2t+2 is a tie (rounds to 2t, even).
  const std::vector<int64_t> acc = {t, -t, t - 1, t + 1, -(t + 1), t + 2, 0, (t << 1) + 3, -((t << 1) + 4), -((t << 1) + 2)};
  const AccumShape s{2, 5, 1};
  const std::vector<int8_t> a = {1, 2}, w = {-4, 5, 6, 0, 1};
  const qc::RangeStats r = qc::range_stats(a.data(), w.data(), s, acc.data());
  EXPECT_EQ(r.count_above_2p24, 6);    // everything beyond ±2^24, never ±2^24 itself
  EXPECT_EQ(r.count_inexact_fp32, 4);  // t+1, -(t+1), 2t+3, -(2t+2)
  EXPECT_EQ(r.max_abs_acc, (t << 1) + 4);
  EXPECT_EQ(r.argmax_m, 1);
  EXPECT_EQ(r.argmax_n, 3);
  EXPECT_DOUBLE_EQ(r.headroom_bits, 24.0 - std::log2(static_cast<double>((t << 1) + 4)));
  EXPECT_EQ(r.int32_overflow_count, 0);
  EXPECT_TRUE(r.int32_overflow_impossible);
  EXPECT_FALSE(r.a_contains_min);
  EXPECT_EQ(r.bound_max_a, 127);
  EXPECT_EQ(r.data_independent_bound, 127 * 6);
  EXPECT_EQ(r.bound_argmax_n, 2);
  EXPECT_TRUE(r.bound_proves_safe);

  const std::vector<int32_t> zero(4, 0);
  const qc::RangeStats z = qc::range_stats(a.data(), w.data(), {2, 2, 1}, zero.data());
  EXPECT_TRUE(std::isinf(z.headroom_bits) && z.headroom_bits > 0);
  EXPECT_EQ(z.max_abs_acc, 0);
  EXPECT_EQ(z.argmax_m, 0);
  EXPECT_EQ(z.count_above_2p24, 0);
}

TEST(AccumRangeStats, BlocksAndThreadsDoNotChangeTheResult) {
  // 3 x 70000 accumulators (several 65536-element blocks). First the largest magnitude is 2^31 at
  // [2, 7]; without it, ±(2^24+3) occurs at [0, 69999], [1, 1000] and [2, 5], and the first in
  // row-major order must be reported. Bound: weight columns 45000 and 60000 tie for the largest
  // L1 norm (129 + 1); the first wins.
  const int64_t m = 3, n = 70000, k = 2;
  std::vector<int64_t> acc(static_cast<size_t>(m * n));
  for (size_t i = 0; i < acc.size(); ++i) acc[i] = static_cast<int64_t>(i % 1000) - 500;
  const int64_t big = (int64_t{1} << 24) + 3;
  acc[static_cast<size_t>(1 * n + 1000)] = -big;
  acc[static_cast<size_t>(2 * n + 5)] = big;
  acc[static_cast<size_t>(0 * n + 69999)] = big;
  acc[static_cast<size_t>(2 * n + 7)] = int64_t{1} << 31;  // leaves INT32
  std::vector<int8_t> a(static_cast<size_t>(m * k), 3), w(static_cast<size_t>(n * k), 1);
  w[static_cast<size_t>(45000 * k)] = -128, w[static_cast<size_t>(60000 * k + 1)] = -128;
  for (int threads : {1, 2, 7}) {
    const qc::RangeStats r = qc::range_stats(a.data(), w.data(), {m, n, k}, acc.data(), threads);
    EXPECT_EQ(r.max_abs_acc, int64_t{1} << 31) << threads;
    EXPECT_EQ(r.argmax_m, 2);
    EXPECT_EQ(r.argmax_n, 7);
    EXPECT_EQ(r.count_above_2p24, 4);
    EXPECT_EQ(r.count_inexact_fp32, 3);  // 2^24+3 is not an fp32; 2^31 is
    EXPECT_EQ(r.int32_overflow_count, 1);
    EXPECT_EQ(r.bound_argmax_n, 45000);
    EXPECT_EQ(r.data_independent_bound, 127 * 129);
  }
  acc[static_cast<size_t>(2 * n + 7)] = 0;
  for (int threads : {1, 3}) {
    const qc::RangeStats r = qc::range_stats(a.data(), w.data(), {m, n, k}, acc.data(), threads);
    EXPECT_EQ(r.max_abs_acc, big);
    EXPECT_EQ(r.argmax_m, 0);  // the first occurrence in row-major order
    EXPECT_EQ(r.argmax_n, 69999);
  }
}

// Operands that put one accumulator exactly at ±2^24, 2^24+1 and 2^24+2, computed by the kernel.
TEST(AccumRangeStats, ExactThresholdFromOperands) {
  // One dot product made of pieces (count, a, w): `count` positions holding a and w.
  auto build = [](int64_t k, std::vector<std::tuple<int64_t, int, int>> pieces, std::vector<int8_t>& a,
                  std::vector<int8_t>& w) {
    a.assign(static_cast<size_t>(k), 0);
    w.assign(static_cast<size_t>(k), 0);
    int64_t pos = 0;
    for (auto [count, av, wv] : pieces) {
      for (int64_t i = 0; i < count; ++i, ++pos) {
        a[static_cast<size_t>(pos)] = static_cast<int8_t>(av);
        w[static_cast<size_t>(pos)] = static_cast<int8_t>(wv);
      }
    }
  };
  const int64_t t = int64_t{1} << 24;
  struct Want {
    std::vector<std::tuple<int64_t, int, int>> pieces;
    int64_t k, value, above, inexact;
    double headroom;
    bool contains_min;
  };
  const std::vector<Want> wants = {
      {{{1024, -128, -128}}, 1024, t, 0, 0, 0.0, true},
      {{{1024, -128, -128}, {1, 1, 1}}, 1025, t + 1, 1, 1, 24.0 - std::log2(double(t + 1)), true},
      {{{1024, -128, -128}, {1, 1, 2}}, 1025, t + 2, 1, 0, 24.0 - std::log2(double(t + 2)), true},
      {{{1032, -128, 127}, {1, -128, 8}}, 1033, -t, 0, 0, 0.0, true},
      {{{1032, 127, -128}, {1, 8, -128}, {1, -1, 1}}, 1034, -t - 1, 1, 1, 24.0 - std::log2(double(t + 1)), false},
  };
  for (const auto& c : wants) {
    std::vector<int8_t> a, w;
    build(c.k, c.pieces, a, w);
    const AccumShape s{1, 1, c.k};
    std::vector<int32_t> acc(1);
    qc::exact_accumulate_i32(a.data(), w.data(), s, acc.data(), 1);
    ASSERT_EQ(acc[0], c.value) << "k=" << c.k;
    const qc::RangeStats r = qc::range_stats(a.data(), w.data(), s, acc.data());
    EXPECT_EQ(r.max_abs_acc, c.value < 0 ? -c.value : c.value);
    EXPECT_EQ(r.count_above_2p24, c.above) << c.value;
    EXPECT_EQ(r.count_inexact_fp32, c.inexact) << c.value;
    EXPECT_DOUBLE_EQ(r.headroom_bits, c.headroom) << c.value;
    EXPECT_EQ(r.a_contains_min, c.contains_min) << c.value;
    EXPECT_EQ(r.bound_max_a, c.contains_min ? 128 : 127);
    EXPECT_GE(r.data_independent_bound, r.max_abs_acc) << c.value;
  }
}

// The data-independent bound at its safety boundary: 127·132104 = 16777208 <= 2^24 < 127·132105.
TEST(AccumRangeStats, DataIndependentBoundBoundary) {
  const int64_t k = 1041;
  for (int extra : {0, 1}) {
    const AccumShape s{1, 3, k};
    std::vector<int8_t> w(static_cast<size_t>(3 * k), 0);
    // Column 1: 1040 entries of ±127 and one of 24 (+extra): Σ|w| = 132104 (+extra).
    for (int64_t kk = 0; kk < 1040; ++kk) w[static_cast<size_t>(k + kk)] = static_cast<int8_t>(kk % 3 ? 127 : -127);
    w[static_cast<size_t>(k + 1040)] = static_cast<int8_t>(-(24 + extra));
    for (int64_t kk = 0; kk < k; kk += 2) w[static_cast<size_t>(2 * k + kk)] = 100;  // Σ|w| = 52100
    std::vector<int8_t> a(static_cast<size_t>(k), 1);
    std::vector<int32_t> acc(3);
    qc::exact_accumulate_i32(a.data(), w.data(), s, acc.data(), 1);
    qc::RangeStats r = qc::range_stats(a.data(), w.data(), s, acc.data());
    EXPECT_EQ(r.bound_max_a, 127);
    EXPECT_EQ(r.bound_argmax_n, 1);
    EXPECT_EQ(r.data_independent_bound, 127 * (132104 + extra));
    EXPECT_EQ(r.bound_proves_safe, extra == 0);
    a[5] = -128;  // one -128 in the activations: the bound must use 128
    qc::exact_accumulate_i32(a.data(), w.data(), s, acc.data(), 1);
    r = qc::range_stats(a.data(), w.data(), s, acc.data());
    EXPECT_TRUE(r.a_contains_min);
    EXPECT_EQ(r.bound_max_a, 128);
    EXPECT_EQ(r.data_independent_bound, 128 * (132104 + extra));
    EXPECT_FALSE(r.bound_proves_safe);
  }
}

// The bound holds for the observed accumulators of random layers (it holds for every input).
TEST(AccumRangeStats, BoundDominatesObserved) {
  for (uint64_t seed = 51; seed < 55; ++seed) {
    const Case c = make_case(seed % 2 ? "uniform" : "outlier", {9, 40, 513}, seed);
    const qc::RangeStats r = qc::exact_range_stats(c.a.data(), c.w.data(), c.s, 2);
    EXPECT_GE(r.data_independent_bound, r.max_abs_acc) << c.id;
    EXPECT_GT(r.max_abs_acc, 0) << c.id;
  }
}

TEST(Accum, RejectsBadShapes) {
  const std::vector<int8_t> a(4), w(4);
  std::vector<int32_t> acc(4);
  EXPECT_THROW(qc::exact_accumulate_i32(a.data(), w.data(), {-1, 2, 2}, acc.data(), 1), qc::Error);
  EXPECT_THROW(qc::exact_accumulate_i32(nullptr, w.data(), {2, 2, 2}, acc.data(), 1), qc::Error);
  EXPECT_THROW(qc::exact_accumulate_i32(a.data(), w.data(), {2, 2, 2}, acc.data(), -1), qc::Error);
}

}  // namespace
