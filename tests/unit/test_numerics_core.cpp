// The numeric core's own machinery (include/qconform/numerics.hpp): `round_shift` against exact
// wide arithmetic, the general encoder (`encode_exact`) against the bf16 shortcut it must equal, the
// rows that only decode so far (e8m0, e2m1) and the integer rows by their definitions, and the
// integer encoders against the fp64 references (`qc::ref`, src/core/numerics_ref.hpp) and the CPU's
// own conversion. The conversions of the familiar formats are tests/unit/test_numerics.cpp.
//
//   cmake --build build -j2 --target qconform_unit_tests &&
//   ./build/tests/qconform_unit_tests --gtest_filter='NumericsCore*'
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "core/numerics_ref.hpp"
#include "qconform/numerics.hpp"

namespace {

using qc::Rounding;
using qc::u128;

// The rounding property a result r of u / 2^s must have, checked in u128 (u < 2^64, s <= 66):
// toward zero r·2^s <= u < (r+1)·2^s; to nearest |u - r·2^s| <= 2^(s-1), and r even on a tie.
bool rounds_correctly(uint64_t u, int s, Rounding r, uint64_t q) {
  const u128 scaled = u128{q} << s, x = u;
  if (r == Rounding::toward_zero) return scaled <= x && x < scaled + (u128{1} << s);
  if (s == 0) return q == u;
  const u128 diff = scaled > x ? scaled - x : x - scaled, half = u128{1} << (s - 1);
  return diff < half || (diff == half && (q & 1) == 0);
}

TEST(NumericsCore, RoundShiftMatchesExactArithmetic) {
  std::mt19937_64 rng(2718);
  std::vector<uint64_t> values{0, 1, 2, 3, 0x8000, 0x7FFF, 0x8001, UINT64_MAX, UINT64_MAX - 1, uint64_t{1} << 63};
  for (int i = 0; i < 20000; ++i) values.push_back(rng() >> (rng() % 64));
  int64_t checked = 0;
  for (uint64_t u : values) {
    for (int s = 0; s <= 66; ++s) {
      for (Rounding r : {Rounding::toward_zero, Rounding::nearest_even}) {
        const uint64_t q = qc::round_shift(u, s, r);
        ASSERT_TRUE(rounds_correctly(u, s, r, q)) << fmt::format("u={:#x} s={} {}: {:#x}", u, s, qc::rounding_tag(r), q);
        // The same division at 128 bits (u placed 64 bits up, the shift 64 longer) gives the same quotient.
        ASSERT_EQ(qc::round_shift(u128{u} << 64, s + 64, r), u128{q}) << fmt::format("u128: u={:#x} s={}", u, s);
        if (u <= UINT32_MAX) {
          ASSERT_EQ(qc::round_shift(static_cast<uint32_t>(u), s, r), q) << fmt::format("u32: u={:#x} s={}", u, s);
        }
        ++checked;
      }
    }
  }
  // The width-sized shifts: the quotient is 0, or 1 to nearest above the half.
  EXPECT_EQ(qc::round_shift(u128{1} << 127, 128, Rounding::nearest_even), u128{0});  // a tie: even 0
  EXPECT_EQ(qc::round_shift((u128{1} << 127) + 1, 128, Rounding::nearest_even), u128{1});
  EXPECT_EQ(qc::round_shift(~u128{0}, 129, Rounding::nearest_even), u128{0});
  EXPECT_EQ(qc::round_shift(~u128{0}, 128, Rounding::toward_zero), u128{0});
  EXPECT_GT(checked, 2'000'000);
}

TEST(NumericsCore, RoundToBitsKeepsTheLeadingBits) {
  std::mt19937_64 rng(31);
  for (int i = 0; i < 200000; ++i) {
    const uint64_t u = (rng() >> 2) | 1;  // below 2^62: a carry still fits
    const int bits = 1 + static_cast<int>(rng() % 62);
    for (Rounding r : {Rounding::toward_zero, Rounding::nearest_even}) {
      const uint64_t v = qc::round_to_bits(u, bits, r);
      const int shift = std::max(0, qc::significant_bits(u) - bits);
      ASSERT_EQ(v & ((uint64_t{1} << shift) - 1), 0u) << u << " " << bits;  // on the grid of `bits` bits
      ASSERT_TRUE(rounds_correctly(u, shift, r, v >> shift)) << u << " " << bits;
    }
  }
}

// The bf16 row takes a shortcut (its exponent field is fp32's: round the pattern by 16 bits); the
// general rule, unpacking the fp32 and encoding the exact value, must give the same pattern. Every
// upper half with every tie class below it, and 2^24 random patterns, both roundings, both modes.
TEST(NumericsCore, GeneralEncodeEqualsTheBf16Shortcut) {
  std::vector<uint32_t> patterns;
  for (uint32_t hi = 0; hi < 65536; ++hi) {
    for (uint32_t lo : {0x0000u, 0x0001u, 0x7FFFu, 0x8000u, 0x8001u, 0xFFFFu}) patterns.push_back(hi << 16 | lo);
  }
  std::mt19937 rng(5);
  for (int i = 0; i < (1 << 24); ++i) patterns.push_back(rng());
  int64_t checked = 0;
  for (uint32_t u : patterns) {
    const float x = qc::f32_from_bits(u);
    if (!qc::f32_is_finite(x) || (u & 0x7FFFFFFFu) == 0) continue;  // steps 1-3: the same code for both
    const qc::Unpacked p = qc::unpack<qc::kFp32>(u);
    for (Rounding r : {Rounding::toward_zero, Rounding::nearest_even}) {
      for (bool sat : {false, true}) {
        const uint32_t shortcut = qc::encode<qc::kBf16>(x, r, sat);
        const uint32_t general = qc::encode_exact<qc::kBf16>(p.neg, p.sig, p.exp, r, sat);
        ASSERT_EQ(shortcut, general) << fmt::format("{:#010x} {} sat={}", u, qc::rounding_tag(r), sat);
        ++checked;
      }
    }
  }
  EXPECT_GT(checked, 60'000'000);
}

TEST(NumericsCore, MxRowsAndIntegerRowsDecodeByTheirDefinitions) {
  // e8m0fnu: 2^(E - 127), E = 0xFF is NaN; no sign, no zero.
  for (uint32_t b = 0; b < 256; ++b) {
    const float got = qc::decode_f32<qc::kE8M0>(b);
    if (b == 0xFF) {
      EXPECT_TRUE(std::isnan(got));
      EXPECT_FALSE(qc::is_finite<qc::kE8M0>(b));
      continue;
    }
    EXPECT_EQ(got, std::ldexp(1.0f, static_cast<int>(b) - 127)) << b;
    EXPECT_EQ(qc::decode_f64<qc::kE8M0>(b), std::ldexp(1.0, static_cast<int>(b) - 127)) << b;
  }
  // e2m1fn (OCP MX): S.EE.M, bias 1; the eight magnitudes of the spec.
  const float magnitudes[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  for (uint32_t b = 0; b < 16; ++b) {
    const float want = (b & 8) ? -magnitudes[b & 7] : magnitudes[b & 7];
    EXPECT_EQ(qc::f32_bits(qc::decode_f32<qc::kE2M1>(b)), qc::f32_bits(want)) << b;  // -0 included
    EXPECT_TRUE(qc::is_finite<qc::kE2M1>(b));
  }
  // Two's complement.
  for (uint32_t b = 0; b < 16; ++b) EXPECT_EQ(qc::decode_int<qc::kInt4>(b), b < 8 ? int(b) : int(b) - 16) << b;
  for (uint32_t b = 0; b < 256; ++b) EXPECT_EQ(qc::decode_int<qc::kInt8>(b), static_cast<int8_t>(b)) << b;
  // int4 rounding: ties to even, saturation at the row's ends.
  EXPECT_EQ(qc::round_to_int_sat<qc::kInt4>(6.5f), 6);
  EXPECT_EQ(qc::round_to_int_sat<qc::kInt4>(7.49f), 7);
  EXPECT_EQ(qc::round_to_int_sat<qc::kInt4>(7.5f), 7);
  EXPECT_EQ(qc::round_to_int_sat<qc::kInt4>(-8.5f), -8);
  EXPECT_EQ(qc::round_to_int_sat<qc::kInt4>(-7.5f), -8);
  EXPECT_EQ(qc::round_to_int_sat<qc::kInt4>(std::nanf("")), 0);
}

// Integers into the narrow rows (what the formula space's `to_narrow_rn` uses) against the fp64
// references on every integer with |v| <= 2^21 (each exact in fp32), and into fp32 toward zero
// against the CPU's conversion stepped back where it rounded away from zero.
TEST(NumericsCore, IntegerEncodingMatchesTheReferences) {
  for (int64_t v = -(int64_t{1} << 21); v <= (int64_t{1} << 21); ++v) {
    const float x = static_cast<float>(v);  // exact
    ASSERT_EQ(qc::encode_int<qc::kFp16>(v, Rounding::nearest_even, false), qc::ref::f32_to_f16(x)) << v;
    ASSERT_EQ(qc::encode_int<qc::kBf16>(v, Rounding::nearest_even, false), qc::ref::f32_to_bf16(x)) << v;
    ASSERT_EQ(qc::encode_int<qc::kE4M3>(v, Rounding::nearest_even, true), qc::ref::f32_to_e4m3fn(x, true)) << v;
  }
  std::mt19937_64 rng(99);
  for (int i = 0; i < 2'000'000; ++i) {
    const int64_t v = static_cast<int64_t>(rng()) >> (rng() % 64);
    const float rne = static_cast<float>(v);
    // |rne| = 2^63 only by rounding up (INT64_MIN excepted); below it the float is an exact int64.
    const bool grew = (rne >= 0x1p63f || rne <= -0x1p63f) ? v != INT64_MIN
                                                         : (v >= 0 ? static_cast<int64_t>(rne) > v : static_cast<int64_t>(rne) < v);
    const float want = grew ? std::nextafter(rne, 0.0f) : rne;
    ASSERT_EQ(qc::f32_bits(qc::i64_to_f32_rz(v)), qc::f32_bits(want)) << v;
  }
}

}  // namespace
