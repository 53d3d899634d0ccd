// Epilogue formulas pinned against independent computations written differently from
// src/epilogue/epilogue.cpp: fp32 products as `(float)((double)a * (double)b)` (the double product
// of two floats is exact, so the cast is the one correct rounding), fp32 sums in double (innocuous
// double rounding: 53 >= 2*24 + 2), bf16 rounding by comparing the two neighbours in double, and
// `exact` against Boost.Multiprecision's `cpp_rational` with a rounding routine written here.
//
// Run: ./build-<name>/tests/qconform_unit_tests --gtest_filter='Epilogue*'
#include <gtest/gtest.h>

#include <boost/multiprecision/cpp_int.hpp>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "input_error.hpp"
#include "qconform/epilogue.hpp"
#include "qconform/error.hpp"

namespace {

using boost::multiprecision::cpp_int;
using boost::multiprecision::cpp_rational;

uint32_t bits32(float x) { return std::bit_cast<uint32_t>(x); }
float from32(uint32_t u) { return std::bit_cast<float>(u); }
float bf(uint16_t b) { return from32(uint32_t{b} << 16); }

// fp32 -> bf16 RNE by choosing between the two neighbours (truncated and next) in double.
uint16_t ref_bf16(float x) {
  const uint32_t u = bits32(x);
  if (std::isnan(x)) return static_cast<uint16_t>((u >> 16) | 0x40u);
  if (std::isinf(x)) return static_cast<uint16_t>(u >> 16);
  const uint16_t lo = static_cast<uint16_t>(u >> 16);  // toward zero
  const uint16_t hi = static_cast<uint16_t>(lo + 1);   // away from zero (may be the inf pattern)
  const double ax = std::fabs(static_cast<double>(x));
  const double vlo = std::fabs(static_cast<double>(bf(lo)));
  const double vhi = (hi & 0x7FFF) == 0x7F80 ? std::ldexp(1.0, 128) : std::fabs(static_cast<double>(bf(hi)));
  const double dlo = ax - vlo, dhi = vhi - ax;
  if (dlo < dhi) return lo;
  if (dhi < dlo) return hi;
  return (lo & 1) == 0 ? lo : hi;
}

float mul(float a, float b) { return static_cast<float>(static_cast<double>(a) * static_cast<double>(b)); }
float add(float a, float b) { return static_cast<float>(static_cast<double>(a) + static_cast<double>(b)); }
float i2f(int64_t v) {  // exact for |v| < 2^53, then one rounding
  return static_cast<float>(static_cast<double>(v));
}

// Independent formulas (the spec of production-epilogues.md, spelled with the helpers above).
uint16_t ref_cutlass(int64_t acc, float sa, float sw) { return ref_bf16(mul(sa, mul(i2f(acc), sw))); }
uint16_t ref_triton(int64_t acc, float sa, float sw) { return ref_bf16(mul(mul(i2f(acc), sa), sw)); }
uint16_t ref_sm89(int64_t acc, float sa, float sw) { return ref_bf16(mul(i2f(acc), mul(sw, sa))); }

// ---- exact rational reference ------------------------------------------------------------------
cpp_rational rat(float x) {  // exact value of a finite float
  int e;
  const double m = std::frexp(static_cast<double>(x), &e);  // x = m * 2^e, |m| in [0.5, 1)
  const int64_t im = static_cast<int64_t>(std::ldexp(m, 53));
  cpp_rational r(im);
  const int sh = e - 53;
  if (sh >= 0) return r * cpp_rational(cpp_int(1) << sh);
  return r / cpp_rational(cpp_int(1) << (-sh));
}
cpp_rational pow2(int e) { return e >= 0 ? cpp_rational(cpp_int(1) << e) : cpp_rational(1) / cpp_rational(cpp_int(1) << (-e)); }

// Rounds a rational to bf16 (8-bit significand, emin -126, emax 127), RNE, returns the bits.
uint16_t ref_round_rational_bf16(const cpp_rational& v, bool zero_negative) {
  if (v == 0) return zero_negative ? 0x8000 : 0x0000;
  const bool neg = v < 0;
  const cpp_rational a = neg ? cpp_rational(-v) : v;
  // exponent: 2^e <= a < 2^(e+1), starting from the double estimate and correcting exactly.
  const double est = a.convert_to<double>();
  int e = est > 0 ? static_cast<int>(std::floor(std::log2(est))) : -1100;
  while (pow2(e) > a) --e;
  while (pow2(e + 1) <= a) ++e;
  const int qe = std::max(e, -126) - 7;
  const cpp_rational scaled = a / pow2(qe);
  cpp_int n = numerator(scaled) / denominator(scaled);
  const cpp_rational rem = scaled - cpp_rational(n);
  if (rem > cpp_rational(1, 2) || (rem == cpp_rational(1, 2) && (n & 1) != 0)) ++n;
  const uint16_t sign = neg ? 0x8000 : 0;
  // value = n * 2^qe, n <= 256
  const double val = std::ldexp(n.convert_to<double>(), qe);
  if (val >= std::ldexp(1.0, 128)) return sign | 0x7F80;
  const float f = static_cast<float>(val);  // exact: val is a bf16 value
  return static_cast<uint16_t>(sign | (bits32(f) >> 16));
}

uint16_t ref_exact(int64_t acc, float sa, float sw, std::optional<uint16_t> bias) {
  cpp_rational v = cpp_rational(acc) * rat(sa) * rat(sw);
  bool zero_neg = acc == 0 && (std::signbit(sa) != std::signbit(sw));
  if (bias) {
    const float b = bf(*bias);
    const bool prod_zero = v == 0;
    v += rat(b);
    if (v == 0) zero_neg = prod_zero && zero_neg && std::signbit(b);
  }
  return ref_round_rational_bf16(v, zero_neg);
}

// Bit-level random floats: significand uniform, exponent in [lo, hi].
float rand_float(std::mt19937_64& rng, int lo, int hi) {
  std::uniform_int_distribution<int> de(lo, hi);
  std::uniform_int_distribution<uint32_t> dm(0, 0x7FFFFF);
  return std::ldexp(1.0f + static_cast<float>(dm(rng)) * 0x1p-23f, de(rng));
}

// An accumulator that puts acc*sa*sw (+ offset) within a few fp32 ulps of a random bf16 rounding
// midpoint, where the formulas' different roundings become visible in bf16. Random operands hit
// such points only a few times per million.
int64_t acc_near_midpoint(std::mt19937_64& rng, float sa, float sw, float offset, int64_t max_acc) {
  std::uniform_int_distribution<int64_t> dacc(max_acc / 64, max_acc);
  std::uniform_int_distribution<int> djit(-2, 2);
  const double scale = static_cast<double>(sa) * static_cast<double>(sw);
  const double guess = static_cast<double>(dacc(rng)) * scale + offset;  // a typical output value
  int e;
  std::frexp(guess, &e);  // guess = f * 2^e, |f| in [0.5, 1)
  const double ulp = std::ldexp(1.0, e - 8);
  const double mid = (std::floor(guess / ulp) + 0.5) * ulp;  // a bf16 midpoint in that binade
  return std::llround((mid - offset) / scale) + djit(rng);
}

std::string hex16(uint16_t b) { return fmt::format("0x{:04x} ({})", b, bf(b)); }
std::string desc(int64_t acc, float sa, float sw) {
  return fmt::format("acc={} sa={:a} (0x{:08x}) sw={:a} (0x{:08x})", acc, sa, bits32(sa), sw, bits32(sw));
}

const qc::Epilogue& E(std::string_view n) { return qc::epilogue(n); }

}  // namespace

TEST(EpilogueRegistry, NamesLookupAndUniqueInstances) {
  auto all = qc::all_epilogues();
  ASSERT_EQ(all.size(), 7u);
  std::set<std::string_view> names;
  std::set<std::pair<int, int>> instances;
  for (const auto& e : all) {
    EXPECT_TRUE(names.insert(e.name).second) << e.name;
    EXPECT_TRUE(instances.insert({static_cast<int>(e.kind), static_cast<int>(e.bias_mode)}).second) << e.name;
    EXPECT_EQ(&qc::epilogue(e.name), &e);
    EXPECT_FALSE(e.formula.empty());
    EXPECT_FALSE(e.source.empty());
  }
  for (auto n : {"vllm-cutlass", "vllm-cutlass-fma", "vllm-cutlass-muladd", "vllm-triton", "sglang-sm89",
                 "sglang-sm90", "exact"}) {
    EXPECT_TRUE(names.count(n)) << n;
  }
  const std::string msg = qc::test::input_error([] { qc::epilogue("vllm-cutlas"); });  // an unknown name
  EXPECT_NE(msg.find("vllm-triton"), std::string::npos) << msg;
  EXPECT_NE(msg.find("vllm-cutlas`"), std::string::npos) << msg;
  EXPECT_TRUE(E("vllm-triton").bias_after_rounding());
  EXPECT_FALSE(E("vllm-cutlass-fma").bias_after_rounding());
  EXPECT_FALSE(E("vllm-cutlass").accepts_bias());
  EXPECT_FALSE(E("sglang-sm90").accepts_bias());
}

// Every fp32 formula against its independent spelling, on realistic and extreme random operands.
TEST(EpilogueFormulas, MatchIndependentReferenceNoBias) {
  std::mt19937_64 rng(20260813);
  std::uniform_int_distribution<int64_t> dacc(-(int64_t{1} << 31), (int64_t{1} << 31) - 1);
  int64_t mismatches = 0;
  for (int i = 0; i < 200000; ++i) {
    const int64_t acc = i % 3 == 0 ? dacc(rng) >> (i % 17) : dacc(rng) >> 7;
    const float sa = rand_float(rng, -14, 0), sw = rand_float(rng, -14, -4);
    const uint16_t want[] = {ref_cutlass(acc, sa, sw), ref_triton(acc, sa, sw), ref_sm89(acc, sa, sw)};
    const uint16_t got[] = {E("vllm-cutlass").apply(acc, sa, sw, std::nullopt, 512, 4096),
                            E("vllm-triton").apply(acc, sa, sw, std::nullopt, 512, 4096),
                            E("sglang-sm89").apply(acc, sa, sw, std::nullopt, 512, 4096)};
    for (int k = 0; k < 3; ++k) {
      if (want[k] != got[k] && ++mismatches <= 5) {
        ADD_FAILURE() << "formula " << k << " " << desc(acc, sa, sw) << " got " << hex16(got[k]) << " want "
                      << hex16(want[k]);
      }
    }
    // the suffixed cutlass names equal the plain one without a bias
    ASSERT_EQ(E("vllm-cutlass-fma").apply(acc, sa, sw, std::nullopt, 512, 4096), got[0]);
    ASSERT_EQ(E("vllm-cutlass-muladd").apply(acc, sa, sw, std::nullopt, 512, 4096), got[0]);
  }
  EXPECT_EQ(mismatches, 0);
}

TEST(EpilogueFormulas, MatchIndependentReferenceWithBias) {
  std::mt19937_64 rng(7);
  std::uniform_int_distribution<int64_t> dacc(-(int64_t{1} << 24), int64_t{1} << 24);
  std::uniform_int_distribution<int> dbias(0, 0xFFFF);
  int fma_vs_muladd = 0;
  for (int i = 0; i < 100000; ++i) {
    const float sa = rand_float(rng, -12, -4), sw = rand_float(rng, -12, -6);
    uint16_t b = static_cast<uint16_t>(dbias(rng));
    if (!std::isfinite(bf(b))) b = 0x3F80;
    if (i % 2) b = ref_bf16(rand_float(rng, -8, 0) * (i % 4 == 1 ? -1.0f : 1.0f));
    const float fb = bf(b);
    // half the cases random, half constructed next to a bf16 midpoint (where fma != muladd shows)
    const int64_t acc = i % 2 ? acc_near_midpoint(rng, sa, sw, fb, int64_t{1} << 24) : dacc(rng);
    const float t = mul(i2f(acc), sw);
    const uint16_t want_muladd = ref_bf16(add(mul(sa, t), fb));
    const uint16_t want_triton = ref_bf16(add(bf(ref_bf16(mul(mul(i2f(acc), sa), sw))), fb));
    const uint16_t want_sm89 = ref_bf16(add(mul(i2f(acc), mul(sw, sa)), fb));
    // fma: the exact sa*t + b rounded once to fp32, via the rational reference rounded to fp32
    // through double (sa*t is exact in double; the sum is rounded by cpp_rational below).
    const cpp_rational exact_sum = rat(sa) * rat(t) + rat(fb);
    const float want_fma_f32 = [&] {
      // round the rational to fp32: candidates are the double nearest and its fp32 neighbours.
      const double d = exact_sum.convert_to<double>();
      float f = static_cast<float>(d);
      float best = f;
      cpp_rational bestd = abs(rat(f) - exact_sum);
      for (float c : {std::nextafter(f, -INFINITY), std::nextafter(f, INFINITY)}) {
        const cpp_rational dc = abs(rat(c) - exact_sum);
        if (dc < bestd || (dc == bestd && (bits32(c) & 1) == 0)) {
          best = c;
          bestd = dc;
        }
      }
      return best;
    }();
    const uint16_t want_fma = ref_bf16(want_fma_f32);
    const auto B = std::optional<uint16_t>(b);
    ASSERT_EQ(E("vllm-cutlass-muladd").apply(acc, sa, sw, B, 512, 4096), want_muladd) << desc(acc, sa, sw) << " b=" << hex16(b);
    ASSERT_EQ(E("vllm-cutlass-fma").apply(acc, sa, sw, B, 512, 4096), want_fma) << desc(acc, sa, sw) << " b=" << hex16(b);
    ASSERT_EQ(E("vllm-triton").apply(acc, sa, sw, B, 512, 4096), want_triton) << desc(acc, sa, sw) << " b=" << hex16(b);
    ASSERT_EQ(E("sglang-sm89").apply(acc, sa, sw, B, 512, 4096), want_sm89) << desc(acc, sa, sw) << " b=" << hex16(b);
    fma_vs_muladd += want_fma != want_muladd;
  }
  EXPECT_GT(fma_vs_muladd, 0) << "the fma and muladd variants never differed: the test has no power";
  std::printf("[epilogue] fma vs muladd bias variants differ in %d of 100000 random cases\n", fma_vs_muladd);
}

TEST(EpilogueFormulas, RefuseAmbiguousBias) {
  for (auto n : {"vllm-cutlass", "sglang-sm90"}) {
    try {
      E(n).apply(100, 0.5f, 0.25f, uint16_t{0x3F80}, 512, 4096);
      FAIL() << n << " accepted a bias";
    } catch (const qc::Error& err) {
      EXPECT_EQ(err.kind(), qc::ErrorKind::input);
      EXPECT_NE(std::string(err.what()).find("-fma"), std::string::npos) << err.what();
    }
  }
}

// The multiplication orders provably differ: a seeded search finds (acc, sa, sw) where
// (acc*sa)*sw, sa*(acc*sw) and acc*(sw*sa) give different bf16 bits, then each formula is checked
// against its own independent spelling there, and against the others where they agree.
TEST(EpilogueFormulas, OrdersDifferOnSearchedCases) {
  std::mt19937_64 rng(42);
  std::uniform_int_distribution<int64_t> dacc(-(int64_t{1} << 20), int64_t{1} << 20);
  int cut_tri = 0, cut_sm89 = 0, tri_sm89 = 0, agree = 0;
  for (int i = 0; i < 2000000 && (cut_tri < 20 || cut_sm89 < 20 || tri_sm89 < 20); ++i) {
    const float sa = rand_float(rng, -10, -3), sw = rand_float(rng, -10, -5);
    const int64_t acc = i % 2 ? acc_near_midpoint(rng, sa, sw, 0.0f, int64_t{1} << 20) : dacc(rng);
    const uint16_t c = ref_cutlass(acc, sa, sw), t = ref_triton(acc, sa, sw), s = ref_sm89(acc, sa, sw);
    const uint16_t gc = E("vllm-cutlass").apply(acc, sa, sw, std::nullopt, 512, 4096);
    const uint16_t gt = E("vllm-triton").apply(acc, sa, sw, std::nullopt, 512, 4096);
    const uint16_t gs = E("sglang-sm89").apply(acc, sa, sw, std::nullopt, 512, 4096);
    if (c != t || c != s) {
      ASSERT_EQ(gc, c) << desc(acc, sa, sw);
      ASSERT_EQ(gt, t) << desc(acc, sa, sw);
      ASSERT_EQ(gs, s) << desc(acc, sa, sw);
      // the difference is one bf16 ulp (same sign, adjacent patterns)
      if (c != t) {
        EXPECT_EQ(std::abs(int(gc) - int(gt)), 1) << desc(acc, sa, sw);
      }
      if (cut_tri == 0 && c != t) {
        std::printf("[epilogue] cutlass != triton: %s -> cutlass %s triton %s\n", desc(acc, sa, sw).c_str(),
                    hex16(c).c_str(), hex16(t).c_str());
      }
      cut_tri += c != t;
      cut_sm89 += c != s;
      tri_sm89 += t != s;
    } else if (agree < 1000) {
      ++agree;
      ASSERT_EQ(gc, c);
      ASSERT_EQ(gt, c);
      ASSERT_EQ(gs, c);
    }
  }
  EXPECT_GE(cut_tri, 20);
  EXPECT_GE(cut_sm89, 20);
  EXPECT_GE(tri_sm89, 20);
}

// SGLang Hopper: CUTLASS order, except the swap-AB shapes (M <= 16, or M <= 64 with N > 1280),
// which give the Triton order. Uses a case where the two orders differ.
TEST(EpilogueFormulas, SglangSm90SwapDispatch) {
  std::mt19937_64 rng(3);
  std::uniform_int_distribution<int64_t> dacc(-(int64_t{1} << 20), int64_t{1} << 20);
  int64_t acc = 0;
  float sa = 0, sw = 0;
  for (int i = 0; i < 10000000; ++i) {
    sa = rand_float(rng, -10, -3);
    sw = rand_float(rng, -10, -5);
    acc = i % 2 ? acc_near_midpoint(rng, sa, sw, 0.0f, int64_t{1} << 20) : dacc(rng);
    if (ref_cutlass(acc, sa, sw) != ref_triton(acc, sa, sw)) break;
  }
  ASSERT_NE(ref_cutlass(acc, sa, sw), ref_triton(acc, sa, sw)) << "no differing case found";
  struct Shape {
    int64_t m, n;
    bool swap;
  };
  for (Shape s : {Shape{1, 1, true}, Shape{16, 100000, true}, Shape{16, 1, true}, Shape{17, 1280, false},
                  Shape{17, 1281, true}, Shape{64, 1281, true}, Shape{64, 1280, false}, Shape{65, 100000, false},
                  Shape{512, 4096, false}}) {
    const uint16_t want = s.swap ? ref_triton(acc, sa, sw) : ref_cutlass(acc, sa, sw);
    EXPECT_EQ(E("sglang-sm90").apply(acc, sa, sw, std::nullopt, s.m, s.n), want)
        << "M=" << s.m << " N=" << s.n << " " << desc(acc, sa, sw);
    // whole-tile API reads M and N from the tile
    std::vector<int32_t> tile(static_cast<size_t>(s.m * std::min<int64_t>(s.n, 2048)), static_cast<int32_t>(acc));
    const int64_t n = std::min<int64_t>(s.n, 2048);
    if (n != s.n) continue;  // keep the tile small; the large-N rows are covered by apply above
    std::vector<float> vsa(static_cast<size_t>(s.m), sa), vsw(static_cast<size_t>(n), sw);
    std::vector<uint16_t> y(tile.size());
    qc::apply_epilogue(E("sglang-sm90"), tile.data(), vsa.data(), vsw.data(), nullptr, s.m, n, y.data(), 2);
    for (auto v : y) ASSERT_EQ(v, want) << "tile M=" << s.m << " N=" << n;
  }
  // A block of rows of a larger layer dispatches on the layer's M, not the block's: rows [16, 32)
  // of a 512 x 64 layer take the CUTLASS order, though 16 rows alone would swap.
  qc::ExactAccumulators layer;
  layer.i32.assign(512 * 64, static_cast<int32_t>(acc));
  std::vector<float> vsa(512, sa), vsw(64, sw);
  std::vector<uint16_t> block(16 * 64);
  qc::apply_epilogue_rows(E("sglang-sm90"), layer, 512, 16, 16, vsa.data(), vsw.data(), nullptr, 64, block.data());
  for (auto v : block) ASSERT_EQ(v, ref_cutlass(acc, sa, sw)) << "rows [16, 32) of a 512-row layer";
  EXPECT_THROW(qc::apply_epilogue_rows(E("sglang-sm90"), layer, 512, 500, 16, vsa.data(), vsw.data(), nullptr, 64,
                                       block.data()),
               qc::Error);  // rows past the layer
}

// Power-of-two weight scales, no bias, all intermediates normal: the four fp32 formulas return
// the same bits (class "scaled-product"), and `exact` agrees except at double-rounding points.
TEST(EpiloguePow2, FpFormulasCommuteAndExactDiffersOnlyByDoubleRounding) {
  std::mt19937_64 rng(99);
  std::uniform_int_distribution<int64_t> dacc(-(int64_t{1} << 31), (int64_t{1} << 31) - 1);
  std::uniform_int_distribution<int> dk(-24, 0);
  const char* fp[] = {"vllm-cutlass", "vllm-triton", "sglang-sm89", "sglang-sm90"};
  int64_t exact_diffs = 0, checked = 0;
  for (int i = 0; i < 400000; ++i) {
    const int64_t acc = dacc(rng) >> (i % 20);
    const float sa = rand_float(rng, -14, 0);
    const float sw = std::ldexp(1.0f, dk(rng));
    const float prod = mul(i2f(acc), sa);  // every intermediate is a pow2 rescaling of this one
    if (acc != 0 && !(std::fabs(mul(prod, sw)) >= 0x1p-126f)) continue;  // fp32 normal range only
    ++checked;
    const int64_t M = i % 2 ? 8 : 512;  // exercise both sm90 dispatch branches
    const uint16_t ref = E("vllm-cutlass").apply(acc, sa, sw, std::nullopt, M, 4096);
    for (auto n : fp) {
      ASSERT_EQ(E(n).apply(acc, sa, sw, std::nullopt, M, 4096), ref) << n << " " << desc(acc, sa, sw);
      ASSERT_EQ(E(n).pow2_class(false), "scaled-product");
    }
    const uint16_t ex = E("exact").apply(acc, sa, sw, std::nullopt, M, 4096);
    if (ex != ref) {
      // allowed only where the fp32 formulas round twice: f32(acc) inexact, or the fp32 product
      // lands exactly on a bf16 midpoint (low 16 bits 0x8000) while the real product does not.
      const bool acc_inexact = i2f(acc) != static_cast<double>(acc);
      const bool on_midpoint = (bits32(mul(prod, sw)) & 0xFFFF) == 0x8000;
      ASSERT_TRUE(acc_inexact || on_midpoint) << desc(acc, sa, sw) << " exact " << hex16(ex) << " fp " << hex16(ref);
      ASSERT_EQ(std::abs(int(ex) - int(ref)), 1);
      ++exact_diffs;
    }
  }
  EXPECT_GT(checked, 350000);
  std::printf("[epilogue] pow2 sw: %lld cases, fp32 formulas identical; exact differs in %lld (double rounding)\n",
              static_cast<long long>(checked), static_cast<long long>(exact_diffs));
}

// A constructed double-rounding case: f32(acc)*sa rounds (in fp32) onto a bf16 midpoint, so the
// fp32 formulas tie-break it while `exact` sees the true value on one side. pow2 sw = 1.
TEST(EpiloguePow2, ExactIsNotInTheScaledProductClass) {
  // acc * sa = 0x1.0180000001p0-ish: choose sa = 1 + 2^-23 and acc = 2^23 + 2^14 + ... searched.
  std::mt19937_64 rng(5);
  std::uniform_int_distribution<int64_t> dacc(1 << 23, (1 << 24) - 1);
  bool found = false;
  for (int i = 0; i < 20000000 && !found; ++i) {
    const int64_t acc = dacc(rng);
    const float sa = rand_float(rng, -8, -8);
    const float p = mul(i2f(acc), sa);
    if ((bits32(p) & 0xFFFF) != 0x8000) continue;
    if (rat(p) == cpp_rational(acc) * rat(sa)) continue;  // the product must be inexact
    const uint16_t fpv = E("vllm-triton").apply(acc, sa, 1.0f, std::nullopt, 512, 4096);
    const uint16_t ex = E("exact").apply(acc, sa, 1.0f, std::nullopt, 512, 4096);
    ASSERT_EQ(ex, ref_exact(acc, sa, 1.0f, std::nullopt));
    if (fpv != ex) {
      found = true;
      std::printf("[epilogue] exact vs fp32 double rounding under sw=1: %s -> exact %s fp32-formulas %s\n",
                  desc(acc, sa, 1.0f).c_str(), hex16(ex).c_str(), hex16(fpv).c_str());
    }
  }
  EXPECT_TRUE(found);
  EXPECT_EQ(E("exact").pow2_class(false), "exact");
}

// Subnormal counterexample to commutation: with a pow2 sw, `sglang-sm89` rounds `sw*sa` first,
// which is exact unless that product falls into the fp32 subnormal range; there it loses bits
// while the CUTLASS order never leaves the normal range, and the (normal) outputs differ.
// (An integer times a pow2 or a subnormal scale is always on the fp32 grid, so the other orders
// can only lose bits when the output itself is an fp32 subnormal.)
TEST(EpiloguePow2, SubnormalIntermediateBreaksCommutation) {
  std::mt19937_64 rng(11);
  std::uniform_int_distribution<int64_t> dacc(1 << 20, 1 << 30);
  int found = 0, tried = 0;
  for (int i = 0; i < 100000 && found < 20; ++i) {
    const int64_t acc = dacc(rng);
    const float sa = rand_float(rng, -110, -95);
    const float sw = 0x1p-40f;
    const float inter = mul(sw, sa);
    ASSERT_LT(std::fabs(inter), 0x1p-126f);
    ++tried;
    const uint16_t c = E("vllm-cutlass").apply(acc, sa, sw, std::nullopt, 512, 4096);
    const uint16_t s = E("sglang-sm89").apply(acc, sa, sw, std::nullopt, 512, 4096);
    ASSERT_EQ(c, ref_cutlass(acc, sa, sw));
    ASSERT_EQ(s, ref_sm89(acc, sa, sw));
    if (c != s && std::fabs(bf(c)) >= 0x1p-126f && std::isfinite(bf(c))) {
      if (found == 0) {
        std::printf("[epilogue] pow2 subnormal counterexample: %s sw*sa=%a (fp32 subnormal) -> cutlass %s sglang-sm89 %s\n",
                    desc(acc, sa, sw).c_str(), inter, hex16(c).c_str(), hex16(s).c_str());
      }
      ++found;
    }
  }
  EXPECT_GE(found, 20) << "in " << tried << " tries";
}

// Bias under pow2 sw: -muladd and sglang-sm89 share the class "product-then-add" and agree;
// vllm-triton (bias after a bf16 rounding) has no class and differs from them on some inputs.
TEST(EpiloguePow2, BiasClasses) {
  std::mt19937_64 rng(12);
  std::uniform_int_distribution<int64_t> dacc(-(int64_t{1} << 24), int64_t{1} << 24);
  std::uniform_int_distribution<int> dk(-20, -4);
  int triton_differs = 0, fma_differs = 0;
  for (int i = 0; i < 200000; ++i) {
    const int64_t acc = dacc(rng);
    const float sa = rand_float(rng, -12, -4), sw = std::ldexp(1.0f, dk(rng));
    const uint16_t b = ref_bf16(rand_float(rng, -6, 2) * (i % 2 ? 1.0f : -1.0f));
    const uint16_t m = E("vllm-cutlass-muladd").apply(acc, sa, sw, b, 512, 4096);
    if (std::fabs(mul(mul(i2f(acc), sa), sw)) < 0x1p-126f && acc != 0) continue;
    ASSERT_EQ(E("sglang-sm89").apply(acc, sa, sw, b, 512, 4096), m) << desc(acc, sa, sw) << " b=" << hex16(b);
    triton_differs += E("vllm-triton").apply(acc, sa, sw, b, 512, 4096) != m;
    fma_differs += E("vllm-cutlass-fma").apply(acc, sa, sw, b, 512, 4096) != m;
  }
  EXPECT_GT(triton_differs, 0);
  EXPECT_GT(fma_differs, 0);
  EXPECT_EQ(E("vllm-cutlass-muladd").pow2_class(true), E("sglang-sm89").pow2_class(true));
  EXPECT_EQ(E("vllm-triton").pow2_class(true), "");
  EXPECT_NE(E("vllm-cutlass-fma").pow2_class(true), E("vllm-cutlass-muladd").pow2_class(true));
  std::printf("[epilogue] pow2 sw with bias: triton differs from muladd in %d, fma in %d of 200000\n", triton_differs,
              fma_differs);
}

// `exact` against the cpp_rational reference: random operands over the whole range (int64 acc,
// subnormal and huge scales, biases of every magnitude), constructed ties and near-ties,
// subnormal and overflowing outputs.
TEST(EpilogueExact, MatchesRationalReferenceRandom) {
  std::mt19937_64 rng(2024);
  std::uniform_int_distribution<int64_t> d64(std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max());
  std::uniform_int_distribution<int> dsh(0, 63), dexp(-149, 127), dbias(0, 0xFFFF), dmode(0, 5);
  std::uniform_int_distribution<uint32_t> dbits(0, 0xFFFFFFFFu);
  int64_t n = 0, subnormal = 0, overflow = 0, with_bias = 0;
  auto rand_scale = [&](int mode) -> float {
    switch (mode) {
      case 0: return rand_float(rng, -20, 0);
      case 1: return from32(dbits(rng) & 0x007FFFFFu);  // subnormal (or zero)
      case 2: return rand_float(rng, 60, 127);
      default: {
        float f;
        do f = from32(dbits(rng)); while (!std::isfinite(f));
        return f;
      }
    }
  };
  for (int i = 0; i < 30000; ++i) {
    const int64_t acc = d64(rng) >> dsh(rng);
    const float sa = rand_scale(dmode(rng) % 4), sw = rand_scale(dmode(rng) % 4);
    std::optional<uint16_t> b;
    if (i % 2) {
      uint16_t bb = static_cast<uint16_t>(dbias(rng));
      if ((bb & 0x7F80) == 0x7F80) bb &= 0x807F;  // keep finite
      b = bb;
      ++with_bias;
    }
    const uint16_t got = qc::exact_bf16(acc, sa, sw, b);
    const uint16_t want = ref_exact(acc, sa, sw, b);
    ASSERT_EQ(got, want) << desc(acc, sa, sw) << " bias=" << (b ? hex16(*b) : "none") << " got " << hex16(got)
                         << " want " << hex16(want);
    ASSERT_EQ(E("exact").apply(acc, sa, sw, b, 1, 1), got);
    ASSERT_EQ(qc::detail::exact_bf16_integer(acc, sa, sw, b), want) << desc(acc, sa, sw) << " integer path";
    subnormal += (got & 0x7F80) == 0 && (got & 0x7F) != 0;
    overflow += (got & 0x7FFF) == 0x7F80;
    ++n;
  }
  EXPECT_GT(subnormal, 100);
  EXPECT_GT(overflow, 100);
  std::printf("[epilogue] exact vs cpp_rational: %lld random cases (%lld with bias, %lld subnormal, %lld inf outputs)\n",
              static_cast<long long>(n), static_cast<long long>(with_bias), static_cast<long long>(subnormal),
              static_cast<long long>(overflow));
}

// Realistic operands (the fp64 fast path's domain), half constructed next to bf16 midpoints.
TEST(EpilogueExact, MatchesRationalReferenceRealistic) {
  std::mt19937_64 rng(2025);
  std::uniform_int_distribution<int64_t> dacc(-(int64_t{1} << 28), int64_t{1} << 28);
  int differs_from_cutlass = 0;
  for (int i = 0; i < 20000; ++i) {
    const float sa = rand_float(rng, -12, -4), sw = rand_float(rng, -12, -6);
    std::optional<uint16_t> b;
    if (i % 3 == 0) b = ref_bf16(rand_float(rng, -10, 0) * (i % 2 ? -1.0f : 1.0f));
    const int64_t acc = i % 2 ? acc_near_midpoint(rng, sa, sw, b ? bf(*b) : 0.0f, int64_t{1} << 24) : dacc(rng);
    const uint16_t want = ref_exact(acc, sa, sw, b);
    ASSERT_EQ(qc::exact_bf16(acc, sa, sw, b), want) << desc(acc, sa, sw);
    ASSERT_EQ(qc::detail::exact_bf16_integer(acc, sa, sw, b), want) << desc(acc, sa, sw);
    if (!b) differs_from_cutlass += E("vllm-cutlass").apply(acc, sa, sw, b, 512, 4096) != want;
  }
  EXPECT_GT(differs_from_cutlass, 0);
}

TEST(EpilogueExact, TiesNearTiesAndSticky) {
  std::mt19937_64 rng(77);
  std::uniform_int_distribution<int> dodd(128, 255), dk(-140, 100), dsh(0, 30);
  int ties = 0;
  for (int i = 0; i < 20000; ++i) {
    // acc * sa * sw = (odd 9-bit integer) * 2^k exactly: a bf16 midpoint, both signs.
    const int64_t odd9 = 2 * dodd(rng) + 1;  // 257..511
    const int sh = dsh(rng);
    const int64_t acc = (i % 2 ? -odd9 : odd9) << sh;
    const float sa = std::ldexp(1.0f, std::max(-149, std::min(127, dk(rng) / 2)));
    const float sw = std::ldexp(1.0f, std::max(-149, std::min(127, dk(rng) / 2)));
    const uint16_t got = qc::exact_bf16(acc, sa, sw, std::nullopt);
    ASSERT_EQ(got, ref_exact(acc, sa, sw, std::nullopt)) << desc(acc, sa, sw);
    ++ties;
    // near-ties through a tiny bias of either sign (sticky bit far below the rounding point)
    for (uint16_t tiny : {uint16_t{0x0001}, uint16_t{0x8001}, uint16_t{0x0080}, uint16_t{0x8080}, uint16_t{0x3380},
                          uint16_t{0xB380}}) {
      const uint16_t want = ref_exact(acc, sa, sw, tiny);
      ASSERT_EQ(qc::exact_bf16(acc, sa, sw, tiny), want) << desc(acc, sa, sw) << " bias " << hex16(tiny);
      ASSERT_EQ(qc::detail::exact_bf16_integer(acc, sa, sw, tiny), want) << desc(acc, sa, sw) << " bias " << hex16(tiny);
    }
  }
  // explicit values: 257 -> 256 (tie to even), 259 -> 260, -257 -> -256
  EXPECT_EQ(qc::exact_bf16(257, 1.0f, 1.0f, std::nullopt), 0x4380);
  EXPECT_EQ(qc::exact_bf16(259, 1.0f, 1.0f, std::nullopt), 0x4382);
  EXPECT_EQ(qc::exact_bf16(-257, 1.0f, 1.0f, std::nullopt), 0xC380);
  // 257 plus the smallest subnormal bias: just above the tie -> 258
  EXPECT_EQ(qc::exact_bf16(257, 1.0f, 1.0f, uint16_t{0x0001}), 0x4381);
  EXPECT_EQ(qc::exact_bf16(257, 1.0f, 1.0f, uint16_t{0x8001}), 0x4380);
  EXPECT_EQ(qc::exact_bf16(259, 1.0f, 1.0f, uint16_t{0x8001}), 0x4381);
  EXPECT_GT(ties, 0);
}

TEST(EpilogueExact, SignedZerosOverflowAndSubnormals) {
  EXPECT_EQ(qc::exact_bf16(0, 0.5f, 0.25f, std::nullopt), 0x0000);
  EXPECT_EQ(qc::exact_bf16(0, -0.5f, 0.25f, std::nullopt), 0x8000);
  EXPECT_EQ(qc::exact_bf16(0, -0.5f, -0.25f, std::nullopt), 0x0000);
  EXPECT_EQ(qc::exact_bf16(0, 0.5f, 0.25f, uint16_t{0x8000}), 0x0000);   // +0 + -0 = +0
  EXPECT_EQ(qc::exact_bf16(0, -0.5f, 0.25f, uint16_t{0x8000}), 0x8000);  // -0 + -0 = -0
  EXPECT_EQ(qc::exact_bf16(0, 0.5f, 0.25f, uint16_t{0xBF80}), 0xBF80);   // 0 + b = b
  EXPECT_EQ(qc::exact_bf16(8, 0.5f, 0.25f, uint16_t{0xBF80}), 0x0000);   // 1 + (-1) = +0
  EXPECT_EQ(qc::exact_bf16(-8, 0.5f, 0.25f, uint16_t{0x3F80}), 0x0000);
  // the fp32 formulas agree on these signs (f32(0) = +0)
  EXPECT_EQ(E("vllm-cutlass").apply(0, -0.5f, 0.25f, std::nullopt, 1, 1), 0x8000);
  EXPECT_EQ(E("vllm-triton").apply(0, -0.5f, 0.25f, std::nullopt, 1, 1), 0x8000);
  // overflow: bf16 max is 0x7F7F = (2^8-1)*2^120; its midpoint with 2^128 is (2^9-1)*2^119
  EXPECT_EQ(qc::exact_bf16(511, 0x1p60f, 0x1p59f, std::nullopt), 0x7F80);       // tie -> even -> inf
  EXPECT_EQ(qc::exact_bf16(-511, 0x1p60f, 0x1p59f, std::nullopt), 0xFF80);
  EXPECT_EQ(qc::exact_bf16(1021, 0x1p60f, 0x1p58f, std::nullopt), 0x7F7F);      // just below -> max
  EXPECT_EQ(qc::exact_bf16(std::numeric_limits<int64_t>::min(), 0x1p127f, 0x1p127f, std::nullopt), 0xFF80);
  // subnormals: smallest bf16 subnormal 2^-133, half of it ties to 0, three halves to 2*2^-133
  EXPECT_EQ(qc::exact_bf16(1, 0x1p-67f, 0x1p-66f, std::nullopt), 0x0001);
  EXPECT_EQ(qc::exact_bf16(1, 0x1p-67f, 0x1p-67f, std::nullopt), 0x0000);
  EXPECT_EQ(qc::exact_bf16(3, 0x1p-67f, 0x1p-67f, std::nullopt), 0x0002);
  EXPECT_EQ(qc::exact_bf16(-3, 0x1p-67f, 0x1p-67f, std::nullopt), 0x8002);
  EXPECT_EQ(qc::exact_bf16(1, 0x1p-149f, 0x1p-149f, std::nullopt), 0x0000);
  EXPECT_EQ(qc::exact_bf16(-1, 0x1p-149f, 0x1p-149f, std::nullopt), 0x8000);
  // rounding up from the largest subnormal into the smallest normal
  EXPECT_EQ(qc::exact_bf16(255, 0x1p-67f, 0x1p-67f, std::nullopt), 0x0080);
  // non-finite scales follow IEEE (apply is total; the tile API rejects them)
  EXPECT_EQ(qc::exact_bf16(3, INFINITY, 1.0f, std::nullopt), 0x7F80);
  EXPECT_TRUE(std::isnan(bf(qc::exact_bf16(0, INFINITY, 1.0f, std::nullopt))));
}

TEST(EpilogueTile, MatchesPerElementApplyAndValidates) {
  const int64_t M = 257, N = 520;  // > 2 * 65536 elements: the tile runs threaded
  std::mt19937_64 rng(8);
  std::uniform_int_distribution<int32_t> dacc(-(1 << 26), 1 << 26);
  std::vector<int32_t> acc(static_cast<size_t>(M * N));
  std::vector<int64_t> acc64(acc.size());
  for (size_t i = 0; i < acc.size(); ++i) {
    acc[i] = dacc(rng);
    acc64[i] = static_cast<int64_t>(acc[i]) * 1024 + 1;  // beyond int32
  }
  std::vector<float> sa(M), sw(N);
  std::vector<uint16_t> bias(N);
  for (auto& s : sa) s = rand_float(rng, -10, -3);
  for (auto& s : sw) s = rand_float(rng, -12, -6);
  for (auto& b : bias) b = ref_bf16(rand_float(rng, -4, 1));
  for (const auto& e : qc::all_epilogues()) {
    for (bool with_bias : {false, true}) {
      if (with_bias && !e.accepts_bias()) {
        std::vector<uint16_t> y(acc.size());
        EXPECT_THROW(qc::apply_epilogue(e, acc.data(), sa.data(), sw.data(), bias.data(), M, N, y.data()), qc::Error);
        continue;
      }
      for (int threads : {1, 2, 0}) {
        std::vector<uint16_t> y(acc.size()), y64(acc.size());
        const uint16_t* bp = with_bias ? bias.data() : nullptr;
        qc::apply_epilogue(e, acc.data(), sa.data(), sw.data(), bp, M, N, y.data(), threads);
        qc::apply_epilogue(e, acc64.data(), sa.data(), sw.data(), bp, M, N, y64.data(), threads);
        for (int64_t m = 0; m < M; ++m) {
          for (int64_t n = 0; n < N; ++n) {
            const auto b = with_bias ? std::optional<uint16_t>(bias[n]) : std::nullopt;
            const size_t i = static_cast<size_t>(m * N + n);
            ASSERT_EQ(y[i], e.apply(acc[i], sa[m], sw[n], b, M, N)) << e.name << " m=" << m << " n=" << n;
            ASSERT_EQ(y64[i], e.apply(acc64[i], sa[m], sw[n], b, M, N)) << e.name << " m=" << m << " n=" << n;
          }
        }
      }
    }
  }
  std::vector<uint16_t> y(acc.size());
  for (float bad : {0.0f, -1.0f, NAN, INFINITY}) {
    auto sa2 = sa;
    sa2[5] = bad;
    try {
      qc::apply_epilogue(E("vllm-triton"), acc.data(), sa2.data(), sw.data(), nullptr, M, N, y.data());
      FAIL() << "sa=" << bad << " accepted";
    } catch (const qc::Error& err) {
      EXPECT_EQ(err.kind(), qc::ErrorKind::input);
      EXPECT_NE(std::string(err.what()).find("sa[5]"), std::string::npos) << err.what();
    }
    auto sw2 = sw;
    sw2[7] = bad;
    EXPECT_THROW(qc::apply_epilogue(E("exact"), acc.data(), sa.data(), sw2.data(), nullptr, M, N, y.data()), qc::Error);
  }
}

// ---- One formula text for host and device (include/qconform/epilogue_formula.hpp) ---------------
//
// The CUDA kernels instantiate `qc::formula::apply`; these tests pin that same text on the CPU:
// its host primitives round once each, read symbolically it is the formula of
// production-epilogues.md for every row of the table, and every row's public entry points
// (`Epilogue::apply`, the int32 / int64 / fp32 tiles) return exactly what it returns.

namespace symbolic {

// A formula read back as text: each primitive prints the notation of production-epilogues.md.
struct Sym {
  std::string s;
};
struct SymAcc {  // an integer accumulator
  std::string name;
};
Sym mul_rn(const Sym& a, const Sym& b) { return {"rn32(" + a.s + " * " + b.s + ")"}; }
Sym add_rn(const Sym& a, const Sym& b) { return {"rn32(" + a.s + " + " + b.s + ")"}; }
Sym fma_rn(const Sym& a, const Sym& b, const Sym& c) { return {"fma(" + a.s + ", " + b.s + ", " + c.s + ")"}; }
Sym to_f32_rn(const SymAcc& acc) { return {"f32(" + acc.name + ")"}; }
Sym to_f32_rn(const Sym& d) { return d; }  // an fp32 accumulator enters unchanged (the header's float overload)
Sym bf16_rn(const Sym& x) { return {"bf16(" + x.s + ")"}; }
Sym bf16_value(const Sym& x) { return {"f32(" + x.s + ")"}; }
Sym zero_of(const Sym&) { return {"0"}; }

// The row's formula read through `formula::apply` of its instance kind for an m x n GEMM.
template <typename Acc>
std::string read(const qc::Epilogue& e, Acc acc, bool has_bias, int64_t m, int64_t n) {
  return qc::formula::visit_instance(qc::formula::instance_kind(e.kind, m, n), [&](auto k) {
    return qc::formula::apply<decltype(k)::value>(acc, Sym{"sa"}, Sym{"sw"}, e.bias_mode, has_bias, Sym{"f32(bias)"}).s;
  });
}

}  // namespace symbolic

// The host primitives are the operations the header's table promises: products and sums round
// once (no contraction into an FMA: this TU, like the library, builds with -ffp-contract=off), the
// FMA rounds once, int -> fp32 and fp32 -> bf16 round to nearest even.
TEST(EpilogueFormulaText, HostPrimitivesRoundOnce) {
  namespace f = qc::formula;
  volatile float va = 1.0f + 0x1p-12f, vc = -(1.0f + 0x1p-11f);
  const float a = va, c = vc;
  // a*a = 1 + 2^-11 + 2^-24: a tie at fp32 precision, rounded to even (down); fused, 2^-24 survives.
  EXPECT_EQ(bits32(f::add_rn(f::mul_rn(a, a), c)), bits32(0.0f)) << "mul_rn + add_rn contracted into an FMA";
  EXPECT_EQ(bits32(f::fma_rn(a, a, c)), bits32(0x1p-24f));
  volatile int64_t v64 = (int64_t{1} << 24) + 1, w64 = (int64_t{1} << 24) + 3;
  volatile int32_t v32 = (1 << 24) + 1, w32 = (1 << 24) + 3;
  EXPECT_EQ(f::to_f32_rn(static_cast<int64_t>(v64)), 0x1p24f);               // tie -> even
  EXPECT_EQ(f::to_f32_rn(static_cast<int64_t>(w64)), 0x1p24f + 4.0f);        // tie -> even (up)
  EXPECT_EQ(f::to_f32_rn(static_cast<int32_t>(v32)), 0x1p24f);
  EXPECT_EQ(f::to_f32_rn(static_cast<int32_t>(w32)), 0x1p24f + 4.0f);
  EXPECT_EQ(f::to_f32_rn(-3.25f), -3.25f);
  for (float x : {1.0f, 0x1.01p0f, 0x1.03p0f, -0x1.FFp127f, 0x1p-140f, -0.0f}) {
    EXPECT_EQ(f::bf16_rn(x), ref_bf16(x)) << std::hexfloat << x;
    EXPECT_EQ(bits32(f::bf16_value(f::bf16_rn(x))), bits32(bf(ref_bf16(x)))) << std::hexfloat << x;
  }
}

// Read symbolically, the shared `apply` is the formula production-epilogues.md gives for each row
// (the expected strings below are transcribed from that document, not from the code), and the
// human-readable `formula` of each row states the same body.
TEST(EpilogueFormulaText, ReadsAsTheReferenceFormulas) {
  using symbolic::read;
  using symbolic::SymAcc;
  using symbolic::Sym;
  const std::string cutlass = "bf16(rn32(sa * rn32(f32(acc) * sw)))";
  const std::string triton = "bf16(rn32(rn32(f32(acc) * sa) * sw))";
  const std::string sm89 = "bf16(rn32(f32(acc) * rn32(sw * sa)))";
  struct Case {
    const char* row;
    bool bias;
    int64_t m, n;
    std::string want;
  };
  const Case cases[] = {
      {"vllm-cutlass", false, 512, 4096, cutlass},
      {"vllm-cutlass-fma", false, 512, 4096, cutlass},
      {"vllm-cutlass-fma", true, 512, 4096, "bf16(fma(sa, rn32(f32(acc) * sw), f32(bias)))"},
      {"vllm-cutlass-muladd", false, 512, 4096, cutlass},
      {"vllm-cutlass-muladd", true, 512, 4096, "bf16(rn32(rn32(sa * rn32(f32(acc) * sw)) + f32(bias)))"},
      {"vllm-triton", false, 512, 4096, triton},
      {"vllm-triton", true, 512, 4096, "bf16(rn32(f32(bf16(rn32(rn32(f32(acc) * sa) * sw))) + f32(bias)))"},
      {"sglang-sm89", false, 512, 4096, sm89},
      {"sglang-sm89", true, 512, 4096, "bf16(rn32(rn32(f32(acc) * rn32(sw * sa)) + f32(bias)))"},
      {"sglang-sm90", false, 512, 4096, cutlass},
      {"sglang-sm90", false, 65, 100000, cutlass},
      {"sglang-sm90", false, 64, 1281, triton},  // swap-AB
      {"sglang-sm90", false, 16, 64, triton},    // swap-AB
  };
  for (const Case& c : cases) {
    const qc::Epilogue& e = E(c.row);
    EXPECT_EQ(read(e, SymAcc{"acc"}, c.bias, c.m, c.n), c.want) << c.row << " bias=" << c.bias << " M=" << c.m << " N=" << c.n;
    if (!c.bias) {
      EXPECT_NE(std::string(e.formula).find(c.want), std::string::npos) << c.row << ": " << e.formula;
    }
  }
  // FP8: the fp32 GEMM result `d` in the Triton order; the row's text spells it without spaces.
  const qc::Epilogue& fp8 = qc::fp8_epilogue();
  EXPECT_EQ(fp8.name, "fp8-scaled");
  EXPECT_EQ(read(fp8, Sym{"d"}, false, 512, 4096), "bf16(rn32(rn32(d * sa) * sw))");
  std::string compact = read(fp8, Sym{"d"}, false, 512, 4096);
  std::erase(compact, ' ');
  EXPECT_EQ(compact, fp8.formula);
  EXPECT_FALSE(fp8.accepts_bias());
  // PyTorch's rowwise tree (RowwiseScaledMM.cu): the scale products in the orientation of its shape
  // dispatch, then the bias node's add of 0. M = 128, N = 2048 runs transposed (M % 256 > 0 and
  // N % 256 == 0 with M*N <= 4096^2); M = 64, N = 6144 does not (the "M == 64 && N >= 3072" case).
  const qc::Epilogue& torch = E("torch-rowwise");
  EXPECT_EQ(read(torch, Sym{"d"}, false, 128, 2048), "bf16(rn32(rn32(sa * rn32(d * sw)) + 0))");
  EXPECT_EQ(read(torch, Sym{"d"}, false, 64, 6144), "bf16(rn32(rn32(rn32(d * sa) * sw) + 0))");
  EXPECT_FALSE(torch.accepts_bias());
  EXPECT_EQ(qc::fp8_epilogues().size(), 2u);
  EXPECT_EQ(&qc::fp8_epilogues()[0], &fp8);
  // Every row but `exact` has a body in the shared text; `exact` (integer arithmetic) is host-only.
  for (const qc::Epilogue& e : qc::all_epilogues()) {
    EXPECT_EQ(qc::formula::has_body(qc::formula::instance_kind(e.kind, 512, 4096)), e.kind != qc::EpilogueKind::exact)
        << e.name;
  }
}

// Every row of the formula table (the seven INT8 epilogues and `fp8-scaled`), through each public
// entry point, returns what the shared `formula::apply` of its resolved kind returns, called
// directly: the CPU evaluates the very text the CUDA kernels instantiate. The cases sit near bf16
// midpoints, where the bodies disagree (counted below), so equality picks out the body.
TEST(EpilogueFormulaText, EveryRowDispatchesToTheSharedApply) {
  namespace f = qc::formula;
  std::vector<const qc::Epilogue*> rows;
  for (const qc::Epilogue& e : qc::all_epilogues()) rows.push_back(&e);
  rows.push_back(&qc::fp8_epilogue());
  auto direct = [](const qc::Epilogue& e, auto acc, float sa, float sw, std::optional<uint16_t> b, int64_t m,
                   int64_t n) -> uint16_t {
    return f::visit_instance(f::instance_kind(e.kind, m, n), [&](auto k) {
      return f::apply<decltype(k)::value>(acc, sa, sw, e.bias_mode, b.has_value(), b ? bf(*b) : 0.0f);
    });
  };

  // One tile, M x N, shaped so that `sglang-sm90` swaps (M <= 16) in one call and not in another.
  for (int64_t M : {int64_t{16}, int64_t{96}}) {
    const int64_t N = 96;
    std::mt19937_64 rng(20261201 + M);
    std::vector<float> sa(M), sw(N);
    for (auto& s : sa) s = rand_float(rng, -10, -3);
    for (auto& s : sw) s = rand_float(rng, -10, -5);
    std::vector<uint16_t> bias(N);
    for (auto& b : bias) b = ref_bf16(rand_float(rng, -6, 2) * (rng() % 2 ? 1.0f : -1.0f));
    std::vector<int32_t> acc(static_cast<size_t>(M * N));
    std::vector<int64_t> acc64(acc.size());
    std::vector<float> d(acc.size());
    std::uniform_int_distribution<int64_t> dacc(-(int64_t{1} << 22), int64_t{1} << 22);
    for (int64_t m = 0; m < M; ++m) {
      for (int64_t n = 0; n < N; ++n) {
        const size_t i = static_cast<size_t>(m * N + n);
        const bool near = (m + n) % 3 != 0;
        acc[i] = static_cast<int32_t>(near ? acc_near_midpoint(rng, sa[m], sw[n], (m + n) % 2 ? bf(bias[n]) : 0.0f,
                                                               int64_t{1} << 22)
                                           : dacc(rng));
        acc64[i] = static_cast<int64_t>(acc[i]) * 512 + (n % 2 ? 1 : -1);  // beyond int32, off the power of two
        d[i] = static_cast<float>(acc[i]) + static_cast<float>(n % 8) * 0.125f;  // an fp32 accumulator
      }
    }
    int differ_cut_tri = 0, differ_cut_sm89 = 0, differ_fma_muladd = 0, differ_tri_bias = 0;
    for (const qc::Epilogue* e : rows) {
      if (e->kind == qc::EpilogueKind::exact) continue;  // integer arithmetic, pinned against Boost rationals above
      for (bool with_bias : {false, true}) {
        if (with_bias && !e->accepts_bias()) continue;
        const uint16_t* bp = with_bias ? bias.data() : nullptr;
        std::vector<uint16_t> y32(acc.size()), y64(acc.size()), yf(acc.size());
        qc::apply_epilogue(*e, acc.data(), sa.data(), sw.data(), bp, M, N, y32.data(), 2);
        qc::apply_epilogue(*e, acc64.data(), sa.data(), sw.data(), bp, M, N, y64.data(), 1);
        qc::apply_epilogue(*e, d.data(), sa.data(), sw.data(), bp, M, N, yf.data(), 2);
        for (int64_t m = 0; m < M; ++m) {
          for (int64_t n = 0; n < N; ++n) {
            const size_t i = static_cast<size_t>(m * N + n);
            const auto b = with_bias ? std::optional<uint16_t>(bias[n]) : std::nullopt;
            const std::string at = fmt::format("{} bias={} M={} [{},{}] {}", e->name, with_bias, M, m, n,
                                               desc(acc[i], sa[m], sw[n]));
            const uint16_t want = direct(*e, acc[i], sa[m], sw[n], b, M, N);
            ASSERT_EQ(y32[i], want) << "int32 tile " << at << ": " << hex16(y32[i]) << " vs " << hex16(want);
            ASSERT_EQ(e->apply(acc[i], sa[m], sw[n], b, M, N), want) << "Epilogue::apply " << at;
            const uint16_t want64 = direct(*e, acc64[i], sa[m], sw[n], b, M, N);
            ASSERT_EQ(y64[i], want64) << "int64 tile " << at << ": " << hex16(y64[i]) << " vs " << hex16(want64);
            ASSERT_EQ(e->apply(acc64[i], sa[m], sw[n], b, M, N), want64) << "Epilogue::apply int64 " << at;
            const uint16_t wantf = direct(*e, d[i], sa[m], sw[n], b, M, N);
            ASSERT_EQ(yf[i], wantf) << "fp32 tile d=" << std::hexfloat << d[i] << " " << at << ": " << hex16(yf[i])
                                    << " vs " << hex16(wantf);
          }
        }
      }
    }
    // The cases separate the bodies (else the equalities above could not tell them apart).
    for (int64_t m = 0; m < M; ++m) {
      for (int64_t n = 0; n < N; ++n) {
        const size_t i = static_cast<size_t>(m * N + n);
        const uint16_t c = E("vllm-cutlass").apply(acc[i], sa[m], sw[n], std::nullopt, M, N);
        differ_cut_tri += c != E("vllm-triton").apply(acc[i], sa[m], sw[n], std::nullopt, M, N);
        differ_cut_sm89 += c != E("sglang-sm89").apply(acc[i], sa[m], sw[n], std::nullopt, M, N);
        const uint16_t fma = E("vllm-cutlass-fma").apply(acc[i], sa[m], sw[n], bias[n], M, N);
        const uint16_t mad = E("vllm-cutlass-muladd").apply(acc[i], sa[m], sw[n], bias[n], M, N);
        differ_fma_muladd += fma != mad;
        differ_tri_bias += E("vllm-triton").apply(acc[i], sa[m], sw[n], bias[n], M, N) != mad;
      }
    }
    std::printf("[epilogue] M=%lld: cases where bodies differ: cutlass/triton %d, cutlass/sm89 %d, fma/muladd %d, "
                "triton-bias/muladd %d of %lld\n",
                static_cast<long long>(M), differ_cut_tri, differ_cut_sm89, differ_fma_muladd, differ_tri_bias,
                static_cast<long long>(M * N));
    EXPECT_GT(differ_cut_tri, 0);
    EXPECT_GT(differ_cut_sm89, 0);
    EXPECT_GT(differ_fma_muladd, 0);
    EXPECT_GT(differ_tri_bias, 0);
  }
  // `exact` has no fp32 body: an fp32 accumulator is refused, not truncated.
  std::vector<float> d1{1.5f};
  std::vector<float> one{1.0f};
  std::vector<uint16_t> y1(1);
  EXPECT_THROW(qc::apply_epilogue(E("exact"), d1.data(), one.data(), one.data(), nullptr, 1, 1, y1.data()), qc::Error);
}

// The `fp8-scaled` body over an fp32 accumulator runs in SIMD lanes (src/epilogue/epilogue_kernels.cpp);
// its reference is the shared text itself, `formula::apply<vllm_triton>` without a bias. Every top half
// of an fp32 pattern (every sign, exponent and leading mantissa bits, inf and NaN) with the low halves
// that decide a bf16 rounding (zero, just below and at the midpoint, just above, all ones), under scale
// pairs that keep the value (1 x 1: the ties of d itself), shift it by powers of two into the
// subnormals and to overflow, and round twice (non-powers of two); N = 1031 leaves a tail in every row
// for the scalar text. Then blocks of rows through `apply_epilogue_rows_unchecked` equal the whole tile.
TEST(EpilogueFast, Fp8ScaledEqualsTheFormulaText) {
  namespace f = qc::formula;
  const int64_t N = 1031;
  std::vector<float> d;
  for (uint32_t hi = 0; hi < 0x10000u; ++hi) {
    for (uint32_t lo : {0x0000u, 0x7fffu, 0x8000u, 0x8001u, 0xffffu}) d.push_back(from32(hi << 16 | lo));
  }
  d.resize((d.size() + N - 1) / N * N, 1.0f);
  const int64_t M = static_cast<int64_t>(d.size()) / N;
  const std::pair<float, float> scales[] = {{1.0f, 1.0f},       {0x1p-60f, 0x1p-70f}, {0x1p+60f, 0x1p+70f},
                                            {0x1.8p-3f, 0x1.3p-7f}, {0x1.fffffep+0f, 0x1.000002p-1f},
                                            {0x1p-149f, 1.0f},  {3.0e38f, 0x1.2p-9f}};
  int64_t subnormal = 0, overflow = 0, nan = 0;
  for (const auto& [sa0, sw0] : scales) {
    std::vector<float> sa(static_cast<size_t>(M)), sw(static_cast<size_t>(N));
    for (int64_t m = 0; m < M; ++m) sa[m] = m % 3 ? sa0 : sa0 * 0.75f;  // two scales per layer, rows interleaved
    for (int64_t n = 0; n < N; ++n) sw[n] = n % 5 ? sw0 : sw0 * 1.25f;
    std::vector<uint16_t> y(d.size());
    qc::apply_epilogue(qc::fp8_epilogue(), d.data(), sa.data(), sw.data(), nullptr, M, N, y.data(), 2);
    for (int64_t m = 0; m < M; ++m) {
      for (int64_t n = 0; n < N; ++n) {
        const size_t i = static_cast<size_t>(m * N + n);
        const uint16_t want = f::apply<qc::EpilogueKind::vllm_triton>(d[i], sa[m], sw[n], qc::BiasMode::refuse, false, 0.0f);
        ASSERT_EQ(y[i], want) << "d=" << d[i] << " (0x" << std::hex << bits32(d[i]) << ") sa=" << sa[m]
                              << " sw=" << sw[n] << ": fast 0x" << y[i] << ", formula text 0x" << want;
        subnormal += (want & 0x7f80u) == 0 && (want & 0x7fu) != 0;
        overflow += (want & 0x7fffu) == 0x7f80u && std::isfinite(d[i]);
        nan += (want & 0x7fffu) > 0x7f80u;
      }
    }
    for (int64_t rows : {int64_t{1}, int64_t{7}}) {
      std::vector<uint16_t> block(static_cast<size_t>(rows * N));
      for (int64_t r0 = 0; r0 < M; r0 += rows) {
        const int64_t r = std::min(rows, M - r0);
        qc::apply_epilogue_rows_unchecked(qc::fp8_epilogue(), d.data(), M, r0, r, sa.data(), sw.data(), nullptr, N,
                                          block.data());
        ASSERT_EQ(0, std::memcmp(block.data(), y.data() + r0 * N, static_cast<size_t>(r * N) * sizeof(uint16_t)))
            << "rows [" << r0 << ", " << r0 + r << ")";
      }
    }
  }
  // The cases reach what they are meant to: subnormal outputs, overflow to infinity, NaN kept.
  EXPECT_GT(subnormal, 0);
  EXPECT_GT(overflow, 0);
  EXPECT_GT(nan, 0);
  // The checks are the tile's: a bad scale is refused before anything is computed.
  std::vector<float> one(static_cast<size_t>(N), 1.0f), bad = one;
  bad[3] = 0.0f;
  EXPECT_THROW(qc::check_epilogue_inputs(qc::fp8_epilogue(), one.data(), bad.data(), nullptr, 1, N, 1), qc::Error);
  EXPECT_THROW(qc::check_epilogue_inputs(E("exact"), one.data(), one.data(), nullptr, 1, N, 1), qc::Error);
  EXPECT_NO_THROW(qc::check_epilogue_inputs(qc::fp8_epilogue(), one.data(), one.data(), nullptr, 1, N, 1));
}
