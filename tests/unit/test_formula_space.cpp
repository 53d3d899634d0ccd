// The formula space (src/epilogue/formula_space.hpp, `formula::apply_point`): notation round trip,
// every named row of the formula table as a point (bit for bit against its named body), the
// equivalence classes (equal keys give equal outputs in jurisdiction), the new rounding
// primitives against independent references, and formula strings as epilogues.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <optional>
#include <set>

#include "synth/synth.hpp"
#include "epilogue/formula_space.hpp"
#include "qconform/epilogue.hpp"
#include "qconform/error.hpp"
#include "qconform/numerics.hpp"

namespace qc {
namespace {

std::string hex(uint16_t b) { return fmt::format("0x{:04x} ({:.9g})", b, bf16_to_f32(b)); }

struct Gen {
  uint64_t s;
  uint64_t next() { return splitmix64(s); }
  int64_t below(int64_t n) { return static_cast<int64_t>(next() % static_cast<uint64_t>(n)); }
  double uniform() { return static_cast<double>(next() >> 11) * 0x1p-53; }
  float scale(int lo, int hi) {
    const float sig = f32_from_bits(0x3F800000u | static_cast<uint32_t>(next() & 0x7FFFFFu));
    return std::ldexp(sig, lo + static_cast<int>(below(hi - lo)));
  }
};

TEST(FormulaSpace, SizeAndEveryPointPrintsAndParsesBack) {
  // Integer accumulators: 6 conversions x 3 x 3 scale casts x 3 groupings x 3 first-product
  // precisions x 10 tails (no bias, bias after the output, bias before it, each with 3 second-product
  // precisions, and the fused bias add) x 2 roundings x 2 output types, and `exact`; FP8's fp32 `d`:
  // 3 conversions, the rest the same.
  EXPECT_EQ(formula_space().size(), 6u * 3 * 3 * 3 * 3 * 10 * 2 * 2 + 1);
  EXPECT_EQ(formula_space(FormulaInput::fp32).size(), 3u * 3 * 3 * 3 * 3 * 10 * 2 * 2);
  std::set<std::string> notations;
  for (FormulaInput in : {FormulaInput::integer, FormulaInput::fp32}) {
    for (const FormulaPoint& p : formula_space(in)) {
      EXPECT_EQ(p.input, in);
      const std::string s = formula_notation(p);
      const FormulaPoint q = parse_formula(s);
      EXPECT_EQ(formula_notation(q), s);
      EXPECT_TRUE(q == p) << s;  // every point has its own notation
      EXPECT_EQ(s.find("acc") == std::string::npos, in == FormulaInput::fp32) << s;
      notations.insert(s);
    }
  }
  EXPECT_EQ(notations.size(), formula_space().size() + formula_space(FormulaInput::fp32).size());
}

// The conversions PyTorch's type promotion makes (c10::BFloat16 has only a float constructor, so an
// int32 becomes a float first, RNE, then a bf16, RNE: docs/identify.md): two roundings where the
// direct conversion makes one, and they part where the fp32 rounding lands on a bf16 midpoint.
TEST(FormulaSpace, TwoStepConversionRoundsTwice) {
  const FormulaPoint two = parse_formula("bf16(rn32(rn32(bf16(f32(acc)) * sa) * sw))");
  const FormulaPoint one = parse_formula("bf16(rn32(rn32(bf16(acc) * sa) * sw))");
  EXPECT_EQ(two.conv, AccConversion::bf16_via_f32);
  EXPECT_EQ(one.conv, AccConversion::bf16_rn);
  // 2^24 + 2^16 + 1: fp32 rounds it to 2^24 + 2^16 (even), exactly a bf16 midpoint, which rounds to even
  // (2^24); the integer itself lies above the midpoint, so the direct conversion rounds up.
  const int64_t acc = (int64_t{1} << 24) + (int64_t{1} << 16) + 1;
  EXPECT_EQ(formula::convert_acc(AccConversion::bf16_via_f32, acc), 0x1p24f);
  EXPECT_EQ(formula::convert_acc(AccConversion::bf16_rn, acc), 0x1p24f + 0x1p17f);
  EXPECT_NE(formula::apply_point(two, acc, 1.0f, 1.0f, false, 0.0f), formula::apply_point(one, acc, 1.0f, 1.0f, false, 0.0f));
  EXPECT_NE(formula_class_key(two), formula_class_key(one));
  // Through fp32 to fp16 equals the direct conversion wherever fp16 is finite (|acc| < 2^24: fp32 exact).
  EXPECT_EQ(formula_class_key(parse_formula("f16(rn32(f16(f32(acc)) * rn32(sw * sa)))")),
            formula_class_key(parse_formula("f16(rn32(f16(acc) * rn32(sw * sa)))")));
  // An FP8 GEMM's d converted: kept, or rounded once.
  EXPECT_EQ(parse_formula("bf16(rn32(rn32(bf16(d) * sa) * sw))").conv, AccConversion::bf16_rn);
  EXPECT_EQ(parse_formula("fp8-scaled"), parse_formula("bf16(rn32(rn32(d * sa) * sw))"));
}

TEST(FormulaSpace, ParserIgnoresSpacingAndOperandOrder) {
  const FormulaPoint cutlass = parse_formula("bf16(rn32(sa * rn32(f32(acc) * sw)))");
  EXPECT_EQ(parse_formula("bf16( rn32( rn32(sw*f32(acc)) * sa ) )"), cutlass);
  EXPECT_EQ(parse_formula("vllm-cutlass"), cutlass);
  EXPECT_EQ(parse_formula("bf16(fma(rn32(f32(acc) * sw), sa, f32(bias)))"), parse_formula("vllm-cutlass-fma"));
  EXPECT_EQ(parse_formula("bf16(f32(bias) + sw * sa * acc)").conv, AccConversion::exact);
}

TEST(FormulaSpace, BadFormulasAreInputErrorsThatSayWhere) {
  const auto message = [](const std::string& text) {
    try {
      (void)parse_formula(text);
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::input);
      return std::string(e.what());
    }
    ADD_FAILURE() << "no error for " << text;
    return std::string();
  };
  EXPECT_NE(message("bf16(rn32(sa * f32(acc)").find("column 24"), std::string::npos) << message("bf16(rn32(sa * f32(acc)");
  EXPECT_NE(message("bf16(rn32(sa * sa))").find("not a point of the formula space"), std::string::npos);
  EXPECT_NE(message("sglang-sm90").find("dispatches on the GEMM's shape"), std::string::npos);
  EXPECT_NE(message("no-such-formula").find("expected a formula"), std::string::npos);
  try {
    (void)epilogue("bf16(rn32(sa * sa))");
    ADD_FAILURE() << "epilogue() accepted a non-point";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::input);
  }
}

// Operands for the row <-> point proof: realistic, every magnitude of accumulator (beyond 2^24
// and beyond INT32), scales from subnormal to large, power-of-two scales, and products placed on
// and next to bf16 rounding midpoints (where two formulas that round differently must part).
struct Case {
  int64_t acc;
  float sa, sw;
  uint16_t bias;
};
std::vector<Case> row_cases() {
  Gen g{20261201};
  std::vector<Case> v;
  for (int i = 0; i < 200000; ++i) {
    Case c;
    switch (i % 5) {
      case 0: c.acc = g.below(1 << 20) - (1 << 19); break;
      case 1: c.acc = static_cast<int64_t>(std::ldexp(1.0 + g.uniform(), 24 + static_cast<int>(g.below(7)))) * (g.below(2) ? 1 : -1); break;
      case 2: c.acc = (int64_t{1} << g.below(40)) + g.below(5) - 2; break;
      case 3: c.acc = static_cast<int64_t>(g.next() >> (1 + g.below(62))) * (g.below(2) ? 1 : -1); break;
      default: c.acc = g.below(200001) - 100000; break;
    }
    c.sa = i % 7 == 0 ? std::ldexp(1.0f, -static_cast<int>(g.below(20))) : g.scale(-12, 0);
    c.sw = i % 11 == 0 ? std::ldexp(1.0f, -static_cast<int>(g.below(20))) : g.scale(-14, -2);
    if (i % 97 == 0) c.sa = g.scale(-140, -120);  // fp32 subnormal region
    if (i % 13 == 0) {
      // Put rn32(f32(acc) * sa) * sw next to a bf16 midpoint: choose sw from the target.
      const float x = static_cast<float>(c.acc) * c.sa;
      if (x != 0.0f) {
        const float mid = bf16_to_f32(0x3F80) * (1.0f + (2 * g.below(128) + 1) * 0x1p-8f);
        c.sw = std::nextafter(mid / std::fabs(x), g.below(2) ? INFINITY : 0.0f);
        if (!(c.sw > 0.0f) || !std::isfinite(c.sw)) c.sw = 1.0f;
      }
    }
    const float y = static_cast<float>(static_cast<double>(c.acc) * c.sa * c.sw);
    const float b = static_cast<float>(std::ldexp(std::fabs(y) * (0.5 + g.uniform()), -static_cast<int>(g.below(12))));
    c.bias = f32_to_bf16(g.below(2) ? b : -b);
    v.push_back(c);
  }
  return v;
}

TEST(FormulaSpace, EveryNamedRowIsAPointBitForBit) {
  const std::vector<Case> cases = row_cases();
  for (const Epilogue& row : all_epilogues()) {
    ASSERT_FALSE(row.point.empty()) << row.name << ": every integer row names its point";
    const FormulaPoint p = parse_formula(row.point);
    EXPECT_EQ(formula_notation(p), row.point) << row.name << ": the table writes the notation the space prints";
    const Epilogue& as_point = epilogue(std::string(row.point));
    ASSERT_EQ(as_point.kind, EpilogueKind::point);
    std::optional<FormulaPoint> swapped = row_swap_point(row);
    const Epilogue* as_swapped = swapped ? &epilogue(std::string(row.swap_point)) : nullptr;
    EXPECT_EQ(as_point.accepts_bias(), row.accepts_bias()) << row.name;
    EXPECT_EQ(as_point.bias_after_rounding(), row.bias_after_rounding()) << row.name;
    for (bool with_bias : {false, true}) {
      if (with_bias && !row.accepts_bias()) continue;
      EXPECT_EQ(as_point.pow2_class(with_bias), row.pow2_class(with_bias)) << row.name << " bias=" << with_bias;
      // Shapes on both sides of the swap-AB rule (only `sglang-sm90` reads them).
      for (const auto& [m, n] : {std::pair<int64_t, int64_t>{512, 4096}, {8, 4096}, {48, 2048}}) {
        const Epilogue& model = (as_swapped && formula::sglang_sm90_swaps(m, n)) ? *as_swapped : as_point;
        int64_t bad = 0;
        for (const Case& c : cases) {
          const std::optional<uint16_t> b = with_bias ? std::optional<uint16_t>(c.bias) : std::nullopt;
          const uint16_t named = row.apply(c.acc, c.sa, c.sw, b, m, n);
          const uint16_t point = model.apply(c.acc, c.sa, c.sw, b, m, n);
          if (named != point && ++bad <= 3) {
            ADD_FAILURE() << row.name << " M=" << m << " N=" << n << " acc=" << c.acc << fmt::format(" sa={:a} sw={:a}", c.sa, c.sw)
                          << " bias=" << (with_bias ? hex(c.bias) : "none") << ": named " << hex(named) << ", point "
                          << hex(point);
          }
        }
        EXPECT_EQ(bad, 0) << row.name;
      }
    }
  }
}

// The FP8 row `fp8-scaled` and its point over the fp32 `d` give the same bits: through the tile API
// (the row's SIMD fast path and the point's scalar text), on d of every magnitude, midpoints included.
TEST(FormulaSpace, TheFp8RowIsAPointBitForBit) {
  const Epilogue& row = fp8_epilogue();
  ASSERT_FALSE(row.point.empty());
  const Epilogue& as_point = epilogue(std::string(row.point));
  ASSERT_EQ(as_point.kind, EpilogueKind::point);
  EXPECT_EQ(as_point.space.input, FormulaInput::fp32);
  Gen g{31};
  const int64_t M = 64, N = 257;
  std::vector<float> d(M * N), sa(M), sw(N);
  for (auto& x : d) x = g.scale(-20, 30) * (g.below(3) == 0 ? -1.0f : 1.0f);
  for (int i = 0; i < 50; ++i) d[static_cast<size_t>(g.below(M * N))] = 0.0f;
  for (auto& x : sa) x = g.scale(-12, 2);
  for (auto& x : sw) x = g.scale(-12, 2);
  std::vector<uint16_t> a(M * N), b(M * N);
  apply_epilogue(row, d.data(), sa.data(), sw.data(), nullptr, M, N, a.data(), 2);
  apply_epilogue(as_point, d.data(), sa.data(), sw.data(), nullptr, M, N, b.data(), 1);
  int64_t bad = 0;
  for (size_t e = 0; e < a.size(); ++e) bad += a[e] != b[e];
  EXPECT_EQ(bad, 0);
  // An FP8 formula is refused on integer accumulators, an integer one on fp32 results.
  const int32_t acc = 5;
  uint16_t y = 0;
  EXPECT_THROW(apply_epilogue(as_point, &acc, sa.data(), sw.data(), nullptr, 1, 1, &y), Error);
  EXPECT_THROW(apply_epilogue(epilogue("bf16(rn32(sa * rn32(f32(acc) * sw)))"), d.data(), sa.data(), sw.data(), nullptr, 1, 1, &y), Error);
}

// PyTorch's rowwise FP8 tree (`torch-rowwise`) is a shape dispatch between its two points: the
// X-first point where PyTorch runs the problem as given, the W-first one where it transposes it
// (`formula::dispatch_swaps`), bit for bit on d of every magnitude; the + 0 of its bias node turns
// only a -0 (outside the space's jurisdiction) into +0.
TEST(FormulaSpace, TheTorchRowwiseRowIsADispatchBetweenItsPoints) {
  const Epilogue& row = epilogue("torch-rowwise");
  const auto p = row_point(row), s = row_swap_point(row);
  ASSERT_TRUE(p && s);
  EXPECT_EQ(formula_notation(*p), row.point);
  EXPECT_EQ(formula_notation(*s), row.swap_point);
  EXPECT_NE(formula_class_key(*p), formula_class_key(*s)) << "the two orientations are different classes";
  const Epilogue& xw = epilogue(std::string(row.point));
  const Epilogue& wx = epilogue(std::string(row.swap_point));
  Gen g{41};
  int64_t seen_transposed = 0, seen_plain = 0;
  // (40, 16) runs as given and (72, 16) transposed (the two FP8 probe shapes of identify); the
  // others are the held-out and qwen3-like shapes.
  for (const auto& [M, N] : {std::pair<int64_t, int64_t>{40, 16}, {72, 16}, {80, 2048}, {8, 2048}, {512, 4096}, {33, 6144}}) {
    const bool t = formula::dispatch_swaps(row.kind, M, N);
    (t ? seen_transposed : seen_plain) += 1;
    std::vector<float> d(static_cast<size_t>(M * N)), sa(static_cast<size_t>(M)), sw(static_cast<size_t>(N));
    for (auto& x : d) x = g.scale(-20, 30) * (g.below(3) == 0 ? -1.0f : 1.0f);
    for (int i = 0; i < 20; ++i) d[static_cast<size_t>(g.below(M * N))] = 0.0f;
    for (auto& x : sa) x = g.scale(-12, 2);
    for (auto& x : sw) x = g.scale(-12, 2);
    std::vector<uint16_t> named(d.size()), point(d.size());
    apply_epilogue(row, d.data(), sa.data(), sw.data(), nullptr, M, N, named.data(), 2);
    apply_epilogue(t ? wx : xw, d.data(), sa.data(), sw.data(), nullptr, M, N, point.data(), 1);
    int64_t bad = 0;
    for (size_t e = 0; e < d.size(); ++e) {
      if (named[e] != point[e] && ++bad <= 3) {
        ADD_FAILURE() << "M=" << M << " N=" << N << " [" << e / N << "," << e % N << "] d=" << fmt::format("{:a}", d[e])
                      << ": named " << hex(named[e]) << ", point " << hex(point[e]);
      }
    }
    EXPECT_EQ(bad, 0) << "M=" << M << " N=" << N << (t ? " (transposed)" : "");
  }
  EXPECT_GT(seen_transposed, 0);
  EXPECT_GT(seen_plain, 0);
  // The + 0: d = -0 gives -0 through the point and +0 through the tree.
  const float nz = -0.0f, one = 1.0f;
  uint16_t y_row = 0, y_point = 0;
  apply_epilogue(row, &nz, &one, &one, nullptr, 1, 1, &y_row, 1);
  apply_epilogue(xw, &nz, &one, &one, nullptr, 1, 1, &y_point, 1);
  EXPECT_EQ(y_row, 0x0000);
  EXPECT_EQ(y_point, 0x8000);
}

TEST(FormulaSpace, PointEpilogueTileEqualsElements) {
  const Epilogue& e = epilogue("bf16_rz(rn32(f32(bf16_rz(rn32(rn32(f32_rz(acc) * bf16(sa)) * sw))) + f32(bias)))");
  Gen g{7};
  const int64_t M = 5, N = 9;
  std::vector<int32_t> acc32(M * N);
  std::vector<int64_t> acc64(M * N);
  std::vector<float> sa(M), sw(N);
  std::vector<uint16_t> bias(N);
  for (auto& a : acc32) a = static_cast<int32_t>(g.below(1 << 28)) - (1 << 27);
  for (size_t i = 0; i < acc64.size(); ++i) acc64[i] = acc32[i] * int64_t{64};
  for (auto& s : sa) s = g.scale(-10, -3);
  for (auto& s : sw) s = g.scale(-10, -3);
  for (auto& b : bias) b = f32_to_bf16(g.scale(-3, 3));
  std::vector<uint16_t> y32(M * N), y64(M * N);
  apply_epilogue(e, acc32.data(), sa.data(), sw.data(), bias.data(), M, N, y32.data(), 2);
  apply_epilogue(e, acc64.data(), sa.data(), sw.data(), bias.data(), M, N, y64.data(), 1);
  for (int64_t i = 0; i < M; ++i) {
    for (int64_t j = 0; j < N; ++j) {
      EXPECT_EQ(y32[i * N + j], e.apply(acc32[i * N + j], sa[i], sw[j], bias[j], M, N)) << i << "," << j;
      EXPECT_EQ(y64[i * N + j], e.apply(acc64[i * N + j], sa[i], sw[j], bias[j], M, N)) << i << "," << j;
    }
  }
  // A point without a bias term refuses one, naming itself.
  const Epilogue& nobias = epilogue("bf16(rn32(sa * rn32(f32(acc) * sw)))");
  EXPECT_THROW((void)nobias.apply(1, 1.0f, 1.0f, uint16_t{0x3F80}, 1, 1), Error);
  // One epilogue per distinct formula.
  EXPECT_EQ(&epilogue("bf16(rn32(sa*rn32(sw*f32(acc))))"), &nobias);
}

// Equal class keys must mean equal outputs for every operand in jurisdiction: every intermediate
// normal in its format (fp16's range included), no overflow. Operands drawn from that region.
TEST(FormulaSpace, PointsOfOneClassAgreeInJurisdiction) {
  const auto& space = formula_space();
  std::map<std::string, std::vector<const FormulaPoint*>> classes;
  for (const FormulaPoint& p : space) classes[formula_class_key(p)].push_back(&p);
  EXPECT_LT(classes.size(), space.size());
  // A second product stored in bf16 before a bf16 RNE output changes nothing without a bias.
  FormulaPoint a{}, b{};
  b.second = Precision::bf16;
  EXPECT_EQ(formula_class_key(a), formula_class_key(b));
  // bf16 accumulator and scales: every product of them is exact in fp32, so all three groupings agree.
  FormulaPoint g1{AccConversion::bf16_rn, Precision::bf16, Precision::bf16, ScaleGrouping::acc_sa_sw};
  FormulaPoint g2 = g1, g3 = g1;
  g2.grouping = ScaleGrouping::acc_sw_sa;
  g3.grouping = ScaleGrouping::scales_first;
  EXPECT_EQ(formula_class_key(g1), formula_class_key(g2));
  EXPECT_EQ(formula_class_key(g1), formula_class_key(g3));
  // ...but with fp32 scales they differ (vllm-cutlass vs vllm-triton).
  EXPECT_NE(formula_class_key(parse_formula("vllm-cutlass")), formula_class_key(parse_formula("bf16(rn32(rn32(f32(acc) * sa) * sw))")));

  Gen g{99};
  std::vector<Case> cases;
  for (int i = 0; i < 3000; ++i) {
    Case c;
    c.acc = (64 + g.below(32000)) * (g.below(2) ? 1 : -1);
    c.sa = g.scale(-6, -1);
    c.sw = g.scale(-6, -1);
    c.bias = f32_to_bf16(g.scale(-4, 4) * (c.acc < 0 ? -1.0f : 1.0f));  // same sign: no cancellation
    cases.push_back(c);
  }
  // FP8: the same over the fp32 d (d of 14 significant bits or fewer, as the accumulation models give).
  for (const FormulaPoint& p : formula_space(FormulaInput::fp32)) classes["fp32 " + formula_class_key(p)].push_back(&p);
  std::vector<float> ds;
  for (const Case& c : cases) ds.push_back(std::ldexp(static_cast<float>(c.acc / 4), -3));
  int64_t compared = 0;
  for (const auto& [key, members] : classes) {
    if (members.size() < 2) continue;
    const FormulaPoint& first = *members.front();
    for (size_t i = 1; i < members.size(); ++i) {
      const FormulaPoint& other = *members[i];
      for (bool with_bias : {false, true}) {
        if (with_bias && first.bias == BiasPlacement::none) continue;
        for (size_t ci = 0; ci < cases.size(); ++ci) {
          const Case& c = cases[ci];
          const float bias = bf16_to_f32(c.bias);
          const bool fp32 = first.input == FormulaInput::fp32;
          const uint16_t x = fp32 ? formula::apply_point(first, ds[ci], c.sa, c.sw, with_bias, bias)
                                  : formula::apply_point(first, c.acc, c.sa, c.sw, with_bias, bias);
          const uint16_t y = fp32 ? formula::apply_point(other, ds[ci], c.sa, c.sw, with_bias, bias)
                                  : formula::apply_point(other, c.acc, c.sa, c.sw, with_bias, bias);
          ++compared;
          if (x != y) {
            FAIL() << "class " << key << ": " << formula_notation(first) << " gives " << hex(x) << ", "
                   << formula_notation(other) << " gives " << hex(y) << " at acc=" << c.acc
                   << fmt::format(" sa={:a} sw={:a}", c.sa, c.sw) << " bias=" << (with_bias ? hex(c.bias) : "none");
          }
        }
      }
    }
  }
  EXPECT_GT(compared, 0);
}

// The primitives the space added, against independent references.
TEST(FormulaSpace, NewPrimitivesAgainstReferences) {
  Gen g{5};
  for (int i = 0; i < 200000; ++i) {
    const int64_t acc = static_cast<int64_t>(g.next() >> (1 + g.below(63))) * (g.below(2) ? 1 : -1);
    // RZ: the fp32 of largest magnitude not above |acc| (long double holds every int64 exactly).
    const float rz = formula::to_f32_rz(acc);
    const long double exact = static_cast<long double>(acc);
    EXPECT_LE(std::fabs(static_cast<long double>(rz)), std::fabs(exact)) << acc;
    EXPECT_GT(std::fabs(static_cast<long double>(std::nextafter(rz, acc < 0 ? -INFINITY : INFINITY))), std::fabs(exact)) << acc;
    if (acc >= INT32_MIN && acc <= INT32_MAX) {
      EXPECT_EQ(formula::to_f32_rz(static_cast<int32_t>(acc)), rz) << acc;
    }
    // Straight to bf16: the correctly rounded bf16 of the integer (the exact formula with unit scales).
    EXPECT_EQ(f32_to_bf16(formula::to_narrow_rn(Precision::bf16, acc)), exact_bf16(acc, 1.0f, 1.0f, std::nullopt)) << acc;
    // Straight to fp16: below 2^24 the fp32 is exact, so one fp32 -> fp16 rounding is the reference.
    const int64_t small = acc % (int64_t{1} << 20);
    EXPECT_EQ(f32_to_f16(formula::to_narrow_rn(Precision::f16, small)), f32_to_f16(static_cast<float>(small))) << small;
  }
  // fp16 RZ output: truncation of the exact value (fp64 reference over the fp16 grid).
  for (int i = 0; i < 200000; ++i) {
    const float x = g.scale(-26, 17) * (g.below(2) ? 1.0f : -1.0f);
    const double ax = std::fabs(static_cast<double>(x));
    double want;
    if (ax >= 65520.0 || ax > 65504.0) {
      want = 65504.0;
    } else {
      int e;
      std::frexp(ax, &e);  // ax in [2^(e-1), 2^e)
      const double quantum = std::ldexp(1.0, std::max(e - 1, -14) - 10);
      want = std::floor(ax / quantum) * quantum;
    }
    const uint16_t got = formula::out_round(Precision::f16, OutRounding::rz, x);
    EXPECT_EQ(static_cast<double>(std::fabs(f16_to_f32(got))), want) << fmt::format("{:a}", x);
    EXPECT_EQ(got >> 15, x < 0 ? 1 : 0);
  }
}

}  // namespace
}  // namespace qc
