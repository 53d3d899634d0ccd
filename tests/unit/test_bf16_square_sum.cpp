// The exact sum of squares behind the comparison's near-zero limit (src/compare/bf16_square_sum.hpp):
// against Boost.Multiprecision integers with a rounding written here, on designed ties and random
// values over the whole bf16 range; and its independence of the order the values come in.
#include <gtest/gtest.h>

#include <boost/multiprecision/cpp_int.hpp>

#include <cmath>
#include <random>
#include <vector>

#include "compare/bf16_square_sum.hpp"
#include "qconform/compare.hpp"

namespace qc {
namespace {

using boost::multiprecision::cpp_int;

// Σ x² of the finite values, in units of 2^-266 (the square of bf16's smallest subnormal), rounded to
// fp64 by hand: the top 53 bits, then half to even on what is dropped.
double reference_sum(const std::vector<uint16_t>& values) {
  cpp_int sum = 0;
  for (const uint16_t b : values) {
    const int e = (b >> 7) & 0xFF;
    if (e == 0xFF) continue;
    const int m = (b & 0x7F) | (e != 0 ? 0x80 : 0);
    sum += cpp_int(m * m) << (2 * std::max(e, 1) - 2);
  }
  if (sum == 0) return 0.0;
  const int bits = static_cast<int>(boost::multiprecision::msb(sum)) + 1;
  if (bits <= 53) return std::ldexp(sum.convert_to<double>(), -266);
  const int drop = bits - 53;
  cpp_int q = sum >> drop;
  const cpp_int rem = sum - (q << drop), half = cpp_int(1) << (drop - 1);
  if (rem > half || (rem == half && (q & 1) != 0)) q += 1;
  return std::ldexp(q.convert_to<double>(), drop - 266);
}

double rounded(const std::vector<uint16_t>& values) {
  Bf16SquareSum s;
  for (const uint16_t b : values) s.add(b);
  return s.rounded();
}

TEST(Bf16SquareSum, DesignedTiesRoundHalfToEven) {
  // 2^54 + 2 units: a tie between 2^54 and 2^54 + 4, to the even 2^54.
  EXPECT_EQ(rounded({0x0A80, 0x0001, 0x0001}), std::ldexp(1.0, 54 - 266));
  // 2^54 + 6 units: a tie between 2^54 + 4 and 2^54 + 8, to the even 2^54 + 8.
  EXPECT_EQ(rounded({0x0A80, 0x0002, 0x0001, 0x0001}), std::ldexp(std::ldexp(1.0, 52) + 2, 2 - 266));
  // 2^54 + 5 units: above the tie, up.
  EXPECT_EQ(rounded({0x0A80, 0x0002, 0x0001}), std::ldexp(std::ldexp(1.0, 52) + 1, 2 - 266));
  EXPECT_EQ(rounded({}), 0.0);
  EXPECT_EQ(rounded({0x7F80, 0xFFC0, 0x0000, 0x8000}), 0.0);  // inf, NaN and zeros add nothing
  EXPECT_EQ(rounded({0x3F80, 0xBF80, 0x4000}), 6.0);          // 1 + 1 + 4
  EXPECT_EQ(rounded({0x7F7F}), std::ldexp(255.0 * 255.0, 2 * (254 - 134)));  // the largest finite bf16
}

TEST(Bf16SquareSum, RandomValuesEqualTheExactSumRoundedOnce) {
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<uint16_t> v(static_cast<size_t>(1 + rng() % 5000));
    const int spread = 1 + trial % 8;  // from a few binades to the whole range
    const int centre = static_cast<int>(rng() % 254);
    for (uint16_t& b : v) {
      const int e = std::clamp(centre + static_cast<int>(rng() % (2 * spread + 1)) - spread, 0, 254);
      b = static_cast<uint16_t>((rng() & 1) << 15 | e << 7 | (rng() & 0x7F));
    }
    if (trial % 5 == 0) v.push_back(static_cast<uint16_t>(rng() % 0x10000));  // anything, NaN and inf included
    EXPECT_EQ(rounded(v), reference_sum(v)) << "trial " << trial;
  }
}

TEST(Bf16SquareSum, TheOrderAndTheSplitDoNotMatter) {
  std::mt19937_64 rng(11);
  std::vector<uint16_t> v(100000);
  for (uint16_t& b : v) b = static_cast<uint16_t>(rng() % 0x7F80);
  Bf16SquareSum whole, left, right;
  for (const uint16_t b : v) whole.add(b);
  for (size_t i = 0; i < v.size(); ++i) (i % 3 ? left : right).add(v[i]);
  left.merge(right);
  EXPECT_EQ(whole.rounded(), left.rounded());
  EXPECT_EQ(whole.count, left.count);
  // The comparison's near-zero limit is this sum's root mean square.
  CompareOptions o;
  EXPECT_EQ(near_zero_limit(v, o), o.near_zero_fraction * std::sqrt(whole.rounded() / static_cast<double>(whole.count)));
}

// The comparison's near-zero limit over every core's blocks (sizes past the parallel threshold, NaN and
// inf among them): the fraction of the root mean square of the exact sum, rounded once.
TEST(Bf16SquareSum, TheNearZeroLimitIsTheExactSumsRootMeanSquare) {
  std::mt19937_64 rng(3);
  for (size_t size : {size_t{1000}, size_t{17} << 16, (size_t{24} << 16) + 4321}) {
    std::vector<uint16_t> a(size);
    for (uint16_t& x : a) x = rng() % 5000 == 0 ? uint16_t{0x7fc0} : static_cast<uint16_t>(rng());
    a[7] = 0x7f80;
    int64_t finite = 0;
    for (const uint16_t x : a) finite += bf16_is_finite(x);
    const double want = 1e-2 * std::sqrt(reference_sum(a) / static_cast<double>(finite));
    EXPECT_EQ(near_zero_limit(a, {}), want) << size;
  }
}

}  // namespace
}  // namespace qc
