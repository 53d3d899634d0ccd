// Exhaustive and edge-case tests of include/qconform/numerics.hpp.
//
// Every expected value comes from an implementation written differently: the fp64 references in
// `qc::ref`, the CPU's own F16C `vcvtps2ph` and `cvtsi2ss`, `std::fpclassify`, `std::ldexp`
// decoding, or a table of facts stated from the format specifications. Failures print the input
// and both outputs as bit patterns.
//   build: cmake --build build --target qconform_unit_tests
//   run:   ./build/tests/qconform_unit_tests --gtest_filter='Numerics*'
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "core/numerics_checked.hpp"
#include "core/numerics_ref.hpp"
#include "qconform/numerics.hpp"

namespace {

using qc::f32_bits;
using qc::f32_from_bits;

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// Collects mismatches from several threads: the count and the first few descriptions.
class Mismatches {
 public:
  void add(const std::string& what) {
    const uint64_t n = count_.fetch_add(1) + 1;
    if (n <= kKeep) {
      std::lock_guard<std::mutex> lock(mutex_);
      first_.push_back(what);
    }
  }
  uint64_t count() const { return count_.load(); }
  std::string report() const {
    std::string s = std::to_string(count()) + " mismatches; first:";
    for (const auto& w : first_) s += "\n  " + w;
    return s;
  }

 private:
  static constexpr uint64_t kKeep = 10;
  std::atomic<uint64_t> count_{0};
  std::mutex mutex_;
  std::vector<std::string> first_;
};

// Runs body(first, last) over [0, 2^32) split in chunks across the hardware threads.
void for_all_u32(const std::function<void(uint64_t, uint64_t)>& body) {
  const unsigned threads = std::max(1u, std::min(16u, std::thread::hardware_concurrency()));
  constexpr uint64_t kTotal = uint64_t{1} << 32;
  constexpr uint64_t kChunk = uint64_t{1} << 24;
  std::atomic<uint64_t> next{0};
  std::vector<std::thread> pool;
  for (unsigned t = 0; t < threads; ++t) {
    pool.emplace_back([&] {
      for (uint64_t first; (first = next.fetch_add(kChunk)) < kTotal;) body(first, first + kChunk);
    });
  }
  for (auto& th : pool) th.join();
}

std::string hex(uint64_t v, int digits) { return fmt::format("0x{:0{}x}", v, digits); }

// ---------------------------------------------------------------------------------------------
// bf16
// ---------------------------------------------------------------------------------------------

TEST(NumericsBf16, AllPatternsRoundTrip) {
  int nan_count = 0, mismatches = 0;
  for (uint32_t b = 0; b < 65536; ++b) {
    const uint16_t in = static_cast<uint16_t>(b);
    const float f = qc::bf16_to_f32(in);
    const uint16_t out = qc::f32_to_bf16(f);
    if (qc::bf16_is_nan(in)) {
      ++nan_count;
      // NaN stays NaN, keeps its sign and payload, and comes back quiet.
      EXPECT_TRUE(std::isnan(f)) << hex(in, 4);
      if (out != (in | 0x0040)) {
        ++mismatches;
        ADD_FAILURE() << "NaN " << hex(in, 4) << " -> " << hex(out, 4);
      }
    } else if (out != in) {
      ++mismatches;
      ADD_FAILURE() << hex(in, 4) << " -> " << f << " -> " << hex(out, 4);
    }
    // The widening is exact: fp64 decoding of the same bits by the textbook formula agrees.
    if (qc::bf16_is_finite(in)) {
      const double expect = qc::ref::narrow_value(in & 0x7FFF, 8, 7, 127) * ((in & 0x8000) ? -1.0 : 1.0);
      if (static_cast<double>(f) != expect || std::signbit(f) != ((in & 0x8000) != 0)) {
        ++mismatches;
        ADD_FAILURE() << "decode " << hex(in, 4) << ": " << f << " expected " << expect;
      }
    }
    if (mismatches > 20) break;
  }
  EXPECT_EQ(nan_count, 2 * 127);  // 2 signs x (2^7 - 1) mantissas
  EXPECT_EQ(mismatches, 0);
}

// All 2^32 fp32 patterns, RNE and RZ, against the fp64 neighbour-comparison references. Blocks
// of 4096 so the three passes (ours, reference, compare) stay simple loops the compiler can
// vectorize; a mismatch is described only after the fast compare has found it.
TEST(NumericsBf16, AllFp32MatchReference) {
  Mismatches rne, rz;
  for_all_u32([&](uint64_t first, uint64_t last) {
    constexpr int kBlock = 4096;
    uint16_t got[kBlock], want[kBlock], got_rz[kBlock], want_rz[kBlock];
    for (uint64_t base = first; base < last; base += kBlock) {
      const uint32_t b0 = static_cast<uint32_t>(base);
      for (int j = 0; j < kBlock; ++j) got[j] = qc::f32_to_bf16(f32_from_bits(b0 + j));
      for (int j = 0; j < kBlock; ++j) want[j] = qc::ref::f32_to_bf16(f32_from_bits(b0 + j));
      for (int j = 0; j < kBlock; ++j) got_rz[j] = qc::f32_to_bf16_rz(f32_from_bits(b0 + j));
      for (int j = 0; j < kBlock; ++j) want_rz[j] = qc::ref::f32_to_bf16_rz(f32_from_bits(b0 + j));
      int differ = 0;
      for (int j = 0; j < kBlock; ++j) differ += (got[j] != want[j]) + (got_rz[j] != want_rz[j]);
      if (differ == 0) continue;
      for (int j = 0; j < kBlock; ++j) {
        const float x = f32_from_bits(b0 + j);
        if (got[j] != want[j]) {
          rne.add(fmt::format("x={} ({}): got {} want {}", x, hex(b0 + j, 8), hex(got[j], 4), hex(want[j], 4)));
        }
        if (got_rz[j] != want_rz[j]) {
          rz.add(fmt::format("x={} ({}): rz got {} want {}", x, hex(b0 + j, 8), hex(got_rz[j], 4), hex(want_rz[j], 4)));
        }
      }
    }
  });
  EXPECT_EQ(rne.count(), 0u) << rne.report();
  EXPECT_EQ(rz.count(), 0u) << rz.report();
}

TEST(NumericsBf16, EdgeFacts) {
  struct Case {
    float x;
    uint16_t rne;
    uint16_t rz;
  };
  const Case cases[] = {
      {0.0f, 0x0000, 0x0000},
      {-0.0f, 0x8000, 0x8000},
      {kInf, 0x7F80, 0x7F80},
      {-kInf, 0xFF80, 0xFF80},
      {f32_from_bits(0x3F808000), 0x3F80, 0x3F80},  // tie, even kept: down
      {f32_from_bits(0x3F818000), 0x3F82, 0x3F81},  // tie, odd kept: up
      {f32_from_bits(0x3F808001), 0x3F81, 0x3F80},  // just above the tie
      {f32_from_bits(0x7F7F8000), 0x7F80, 0x7F7F},  // tie above max: overflow to inf
      {f32_from_bits(0x7F7F7FFF), 0x7F7F, 0x7F7F},
      {f32_from_bits(0x00008000), 0x0000, 0x0000},  // subnormal tie to zero
      {f32_from_bits(0x00018000), 0x0002, 0x0001},  // subnormal tie to even
      {f32_from_bits(0x807FFFFF), 0x8080, 0x807F},  // largest subnormal rounds up to min normal
  };
  for (const Case& c : cases) {
    EXPECT_EQ(qc::f32_to_bf16(c.x), c.rne) << hex(f32_bits(c.x), 8);
    EXPECT_EQ(qc::f32_to_bf16_rz(c.x), c.rz) << hex(f32_bits(c.x), 8);
  }
  // A NaN whose payload lives only in the low 16 bits stays a (quiet) NaN, in both roundings.
  EXPECT_EQ(qc::f32_to_bf16(f32_from_bits(0x7F800001)), 0x7FC0);
  EXPECT_EQ(qc::f32_to_bf16_rz(f32_from_bits(0xFF800001)), 0xFFC0);
}

// ---------------------------------------------------------------------------------------------
// fp16
// ---------------------------------------------------------------------------------------------

TEST(NumericsF16, AllPatternsRoundTrip) {
  int nan_count = 0, mismatches = 0;
  for (uint32_t b = 0; b < 65536; ++b) {
    const uint16_t in = static_cast<uint16_t>(b);
    const float f = qc::f16_to_f32(in);
    const uint16_t out = qc::f32_to_f16(f);
    const bool is_nan = (in & 0x7C00) == 0x7C00 && (in & 0x3FF) != 0;
    if (is_nan) {
      ++nan_count;
      EXPECT_TRUE(std::isnan(f)) << hex(in, 4);
      if (out != (in | 0x0200)) {  // payload and sign kept, quiet bit set
        ++mismatches;
        ADD_FAILURE() << "NaN " << hex(in, 4) << " -> " << hex(f32_bits(f), 8) << " -> " << hex(out, 4);
      }
      continue;
    }
    if (out != in) {
      ++mismatches;
      ADD_FAILURE() << hex(in, 4) << " -> " << f << " -> " << hex(out, 4);
    }
    // Decoding against the textbook formula (inf handled by its own rule).
    const double mag = (in & 0x7FFF) == 0x7C00 ? std::numeric_limits<double>::infinity()
                                               : qc::ref::narrow_value(in & 0x7FFF, 5, 10, 15);
    const double expect = (in & 0x8000) ? -mag : mag;
    if (static_cast<double>(f) != expect || std::signbit(f) != ((in & 0x8000) != 0)) {
      ++mismatches;
      ADD_FAILURE() << "decode " << hex(in, 4) << ": " << f << " expected " << expect;
    }
    if (mismatches > 20) break;
  }
  EXPECT_EQ(nan_count, 2 * 1023);
  EXPECT_EQ(mismatches, 0);
}

#if defined(__x86_64__)
__attribute__((target("avx,f16c"))) void f16c_convert8(const uint32_t* in, uint16_t* out) {
  const __m256 v = _mm256_castsi256_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(in)));
  const __m128i h = _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(out), h);
}
#endif

// 2^28 fp32 patterns (every 16th, the low 4 bits rotating, so every exponent, sign and top
// mantissa pattern occurs) against the CPU's own conversion instruction (F16C `vcvtps2ph`, RNE).
// The hardware quiets NaNs and keeps the top payload bits, which is our documented policy too.
// (All 2^32 also pass; the sample keeps `make test` fast on a shared 2-core machine.)
TEST(NumericsF16, DenseSampleMatchesF16cHardware) {
#if defined(__x86_64__)
  if (!__builtin_cpu_supports("f16c") || !__builtin_cpu_supports("avx")) {
    GTEST_SKIP() << "SKIPPED: this CPU has no F16C; the fp64 reference test below still runs";
  }
  const uint32_t csr = _mm_getcsr();
  if ((csr & 0x8040u) != 0) GTEST_SKIP() << "SKIPPED: MXCSR has FTZ/DAZ set (" << hex(csr, 4) << ")";
  Mismatches bad;
  for_all_u32([&](uint64_t first, uint64_t last) {
    alignas(32) uint32_t in[8];
    alignas(16) uint16_t hw[8];
    for (uint64_t i = first; i < last; i += 8 * 16) {
      for (int j = 0; j < 8; ++j) {
        const uint64_t k = i + 16 * j;
        in[j] = static_cast<uint32_t>(k | ((k >> 4) & 15u));
      }
      f16c_convert8(in, hw);
      for (int j = 0; j < 8; ++j) {
        const uint16_t got = qc::f32_to_f16(f32_from_bits(in[j]));
        if (got != hw[j]) {
          bad.add(fmt::format("x={} ({}): got {} F16C {}", f32_from_bits(in[j]), hex(in[j], 8), hex(got, 4),
                              hex(hw[j], 4)));
        }
      }
    }
  });
  EXPECT_EQ(bad.count(), 0u) << bad.report();
#else
  GTEST_SKIP() << "SKIPPED: not an x86-64 CPU (no F16C); the fp64 reference test below still runs";
#endif
}

// Dense sample (every fp32 whose low 6 bits equal a rotating value: 2^26 inputs covering every
// exponent, both signs, all ties of the fp16 grid) against the fp64 frexp/floor reference.
TEST(NumericsF16, DenseSampleMatchesFp64Reference) {
  Mismatches bad;
  for_all_u32([&](uint64_t first, uint64_t last) {
    for (uint64_t i = first; i < last; i += 64) {
      const uint32_t u = static_cast<uint32_t>(i | ((i >> 6) & 63u));
      const float x = f32_from_bits(u);
      const uint16_t got = qc::f32_to_f16(x), want = qc::ref::f32_to_f16(x);
      if (got != want) bad.add(fmt::format("x={} ({}): got {} want {}", x, hex(u, 8), hex(got, 4), hex(want, 4)));
    }
  });
  // Every tie of the fp16 grid has low 13 bits 0x1000 (normals) and is not in the sample above
  // unless (i >> 6) & 63 == 0; add all of them explicitly with their neighbours.
  for (uint32_t hi = 0; hi < (1u << 19); ++hi) {
    for (int32_t delta : {-1, 0, 1}) {
      const uint32_t u = (hi << 13) + 0x1000u + static_cast<uint32_t>(delta);
      const float x = f32_from_bits(u);
      const uint16_t got = qc::f32_to_f16(x), want = qc::ref::f32_to_f16(x);
      if (got != want) bad.add(fmt::format("tie x={} ({}): got {} want {}", x, hex(u, 8), hex(got, 4), hex(want, 4)));
    }
  }
  EXPECT_EQ(bad.count(), 0u) << bad.report();
}

// ---------------------------------------------------------------------------------------------
// FP8
// ---------------------------------------------------------------------------------------------

struct Fp8Spec {
  const char* name;
  int exp_bits, man_bits, bias;
  float (*decode)(uint8_t);
  uint8_t (*encode)(float, bool);
  uint8_t (*encode_ref)(float, bool);
  bool is_nan(uint8_t b) const {
    return exp_bits == 4 ? (b & 0x7F) == 0x7F : (b & 0x7C) == 0x7C && (b & 0x03) != 0;
  }
  bool is_inf(uint8_t b) const { return exp_bits == 5 && (b & 0x7F) == 0x7C; }
};

const Fp8Spec kFp8Specs[] = {
    {"e4m3fn", 4, 3, 7, qc::e4m3fn_to_f32, qc::f32_to_e4m3fn, qc::ref::f32_to_e4m3fn},
    {"e5m2", 5, 2, 15, qc::e5m2_to_f32, qc::f32_to_e5m2, qc::ref::f32_to_e5m2},
};

TEST(NumericsFp8, AllPatternsDecodeAndReencode) {
  for (const Fp8Spec& s : kFp8Specs) {
    int nans = 0, infs = 0;
    for (uint32_t b = 0; b < 256; ++b) {
      const uint8_t in = static_cast<uint8_t>(b);
      const float f = s.decode(in);
      const bool negative = (in & 0x80) != 0;
      if (s.is_nan(in)) {
        ++nans;
        EXPECT_TRUE(std::isnan(f)) << s.name << " " << hex(in, 2);
        EXPECT_EQ(std::signbit(f), negative) << s.name << " " << hex(in, 2);
        // NaN re-encodes to the canonical NaN of its sign in both modes.
        const uint8_t canonical = static_cast<uint8_t>((negative ? 0x80 : 0) | (s.exp_bits == 4 ? 0x7F : 0x7E));
        EXPECT_EQ(s.encode(f, false), canonical) << s.name << " " << hex(in, 2);
        EXPECT_EQ(s.encode(f, true), canonical) << s.name << " " << hex(in, 2);
        continue;
      }
      if (s.is_inf(in)) {
        ++infs;
        EXPECT_EQ(f, negative ? -kInf : kInf) << s.name << " " << hex(in, 2);
        EXPECT_EQ(s.encode(f, false), in) << s.name;
        EXPECT_EQ(s.encode(f, true), negative ? 0xFB : 0x7B) << s.name << " saturating inf";
        continue;
      }
      const double mag = qc::ref::narrow_value(in & 0x7F, s.exp_bits, s.man_bits, s.bias);
      EXPECT_EQ(static_cast<double>(f), negative ? -mag : mag) << s.name << " " << hex(in, 2);
      EXPECT_EQ(std::signbit(f), negative) << s.name << " " << hex(in, 2);
      EXPECT_EQ(s.encode(f, false), in) << s.name << " " << hex(in, 2) << " = " << f;
      EXPECT_EQ(s.encode(f, true), in) << s.name << " saturating " << hex(in, 2) << " = " << f;
    }
    EXPECT_EQ(nans, s.exp_bits == 4 ? 2 : 6) << s.name;
    EXPECT_EQ(infs, s.exp_bits == 4 ? 0 : 2) << s.name;
  }
}

// Dense sample of fp32 (every fp32 whose low 8 bits equal a rotating value: 2^24 inputs) plus
// every midpoint of each fp8 grid and its fp32 neighbours, both modes, against the fp64 reference.
TEST(NumericsFp8, DenseSampleAndAllMidpointsMatchFp64Reference) {
  for (const Fp8Spec& s : kFp8Specs) {
    Mismatches bad;
    auto check = [&](float x) {
      for (bool sat : {false, true}) {
        const uint8_t got = s.encode(x, sat), want = s.encode_ref(x, sat);
        if (got != want) {
          bad.add(fmt::format("{}{} x={} ({}): got {} want {}", s.name, sat ? "-sat" : "", x, hex(f32_bits(x), 8),
                              hex(got, 2), hex(want, 2)));
        }
      }
    };
    for_all_u32([&](uint64_t first, uint64_t last) {
      for (uint64_t i = first; i < last; i += 256) check(f32_from_bits(static_cast<uint32_t>(i | ((i >> 8) & 255u))));
    });
    // Midpoints between consecutive finite magnitudes, and between max and the next grid point.
    std::vector<double> grid;
    for (uint32_t b = 0; b < 0x80; ++b) {
      if (!s.is_nan(static_cast<uint8_t>(b)) && !s.is_inf(static_cast<uint8_t>(b))) {
        grid.push_back(static_cast<double>(s.decode(static_cast<uint8_t>(b))));
      }
    }
    const double top_spacing = grid.back() - grid[grid.size() - 2];
    grid.push_back(grid.back() + top_spacing);  // the unbounded-exponent grid point past max
    int midpoints = 0;
    for (size_t i = 0; i + 1 < grid.size(); ++i) {
      const float mid = static_cast<float>((grid[i] + grid[i + 1]) / 2);  // exact in fp32
      ASSERT_EQ(static_cast<double>(mid), (grid[i] + grid[i + 1]) / 2);
      for (float x : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, kInf)}) {
        check(x);
        check(-x);
      }
      ++midpoints;
    }
    EXPECT_EQ(bad.count(), 0u) << bad.report();
    EXPECT_GT(midpoints, 100) << s.name;
  }
}

TEST(NumericsFp8, EdgeFactsFromTheOcpSpec) {
  struct Case {
    float x;
    uint8_t e4m3, e4m3_sat, e5m2, e5m2_sat;
  };
  const Case cases[] = {
      {448.0f, 0x7E, 0x7E, 0x5F, 0x5F},
      {464.0f, 0x7E, 0x7E, 0x5F, 0x5F},                  // e4m3 tie 448|480 -> even 448
      {std::nextafter(464.0f, kInf), 0x7F, 0x7E, 0x5F, 0x5F},
      {480.0f, 0x7F, 0x7E, 0x60, 0x60},
      {57344.0f, 0x7F, 0x7E, 0x7B, 0x7B},
      {61440.0f, 0x7F, 0x7E, 0x7C, 0x7B},                // e5m2 tie 57344|65536 -> inf
      {std::nextafter(61440.0f, 0.0f), 0x7F, 0x7E, 0x7B, 0x7B},
      {-1e30f, 0xFF, 0xFE, 0xFC, 0xFB},
      {kInf, 0x7F, 0x7E, 0x7C, 0x7B},
      {-kInf, 0xFF, 0xFE, 0xFC, 0xFB},
      {kNaN, 0x7F, 0x7F, 0x7E, 0x7E},
      {-kNaN, 0xFF, 0xFF, 0xFE, 0xFE},
      {0.0f, 0x00, 0x00, 0x00, 0x00},
      {-0.0f, 0x80, 0x80, 0x80, 0x80},
      {0x1p-10f, 0x00, 0x00, 0x14, 0x14},                // e4m3: half min subnormal -> 0
      {0x1.000002p-10f, 0x01, 0x01, 0x14, 0x14},
      {0x1.8p-9f, 0x02, 0x02, 0x1A, 0x1A},               // e4m3: 1.5 min subnormal -> even 2
      {0x1p-17f, 0x00, 0x00, 0x00, 0x00},                // e5m2: half min subnormal -> 0
      {-0x1.8p-16f, 0x80, 0x80, 0x82, 0x82},             // e5m2: 1.5 min subnormal -> even 2
      {f32_from_bits(0x00000001), 0x00, 0x00, 0x00, 0x00},
      {0x1.Ep-7f, 0x08, 0x08, 0x24, 0x24},               // e4m3: largest subnormal rounds into min normal;
                                                         // e5m2: 1.111b tie rounds into the next binade
  };
  for (const Case& c : cases) {
    const std::string id = fmt::format("x={} ({})", c.x, hex(f32_bits(c.x), 8));
    EXPECT_EQ(qc::f32_to_e4m3fn(c.x, /*saturate=*/false), c.e4m3) << id;
    EXPECT_EQ(qc::f32_to_e4m3fn(c.x, /*saturate=*/true), c.e4m3_sat) << id;
    EXPECT_EQ(qc::f32_to_e5m2(c.x, /*saturate=*/false), c.e5m2) << id;
    EXPECT_EQ(qc::f32_to_e5m2(c.x, /*saturate=*/true), c.e5m2_sat) << id;
  }
}

// ---------------------------------------------------------------------------------------------
// Integers
// ---------------------------------------------------------------------------------------------

TEST(NumericsS8, TiesAndSaturationEdges) {
  struct Case {
    float x;
    int want;
  };
  const Case cases[] = {
      {0.5f, 0},     {1.5f, 2},       {2.5f, 2},      {-0.5f, 0},      {-1.5f, -2},   {-2.5f, -2},
      {126.5f, 126}, {127.49998f, 127}, {127.5f, 127}, {128.0f, 127},   {1e10f, 127},  {kInf, 127},
      {-127.5f, -128}, {-128.0f, -128}, {-128.5f, -128}, {-129.0f, -128}, {-kInf, -128}, {kNaN, 0},
      {-kNaN, 0},    {0.49999997f, 0}, {0.50000006f, 1}, {-0.50000006f, -1}, {f32_from_bits(1), 0},
      {-0.0f, 0},    {3.4e38f, 127},  {-3.4e38f, -128}, {-128.49998f, -128}, {-127.50002f, -128},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(qc::f32_to_s8_rni_sat(c.x), c.want) << "x=" << c.x << " (" << hex(f32_bits(c.x), 8) << ")";
    EXPECT_EQ(qc::ref::f32_to_s8_rni_sat(c.x), c.want) << "ref x=" << c.x;
  }
  // Every fp32 in [-130, 130] on a quarter-ulp-of-1 grid and every exact half-integer, against
  // the fp64 reference.
  Mismatches bad;
  for (int i = -130 * 1024; i <= 130 * 1024; ++i) {
    for (float x : {static_cast<float>(i) / 1024.0f, std::nextafter(static_cast<float>(i) / 1024.0f, kInf)}) {
      const int got = qc::f32_to_s8_rni_sat(x), want = qc::ref::f32_to_s8_rni_sat(x);
      if (got != want) bad.add(fmt::format("x={} ({}): got {} want {}", x, hex(f32_bits(x), 8), got, want));
    }
  }
  EXPECT_EQ(bad.count(), 0u) << bad.report();
}

TEST(NumericsInt, I32BoundaryFactsAt2To24) {
  // Run-time conversions through volatile so the CPU, not the compiler, converts.
  volatile int32_t v;
  const int32_t p = 1 << 24;
  for (int32_t s : {1, -1}) {
    v = s * (p - 1);
    EXPECT_EQ(static_cast<int64_t>(qc::i32_to_f32(v)), s * (p - 1));
    v = s * p;
    EXPECT_EQ(static_cast<int64_t>(qc::i32_to_f32(v)), s * p);
    v = s * (p + 1);
    EXPECT_EQ(static_cast<int64_t>(qc::i32_to_f32(v)), s * p);  // tie 2^24|2^24+2 -> even 2^24
    v = s * (p + 2);
    EXPECT_EQ(static_cast<int64_t>(qc::i32_to_f32(v)), s * (p + 2));
    v = s * (p + 3);
    EXPECT_EQ(static_cast<int64_t>(qc::i32_to_f32(v)), s * (p + 4));  // tie -> even 2^24+4
  }
}

// i64_to_f32 (explicit bits) against the CPU's `cvtsi2ss` (static_cast, default rounding):
// every int32 in [-2^27, 2^27) (all fp32 spacings 1..8 and their ties), a dense int32 sample
// beyond, and int64 edges and random values at every magnitude.
TEST(NumericsInt, I64ToF32MatchesCpu) {
  Mismatches bad;
  for_all_u32([&](uint64_t first, uint64_t last) {
    const uint64_t step = (first >> 32) == 0 && (first < (1u << 27) || first >= 0xF8000000u) ? 1 : 61;
    for (uint64_t i = first; i < last; i += step) {
      const int32_t v = static_cast<int32_t>(static_cast<uint32_t>(i));
      const float got = qc::i64_to_f32(v);
      const float cpu32 = qc::i32_to_f32(v);
      if (f32_bits(got) != f32_bits(cpu32)) {
        bad.add(fmt::format("v={}: got {} cpu {}", v, hex(f32_bits(got), 8), hex(f32_bits(cpu32), 8)));
      }
    }
  });
  std::mt19937_64 rng(12345);
  std::vector<int64_t> values = {0, 1, -1, INT64_MAX, INT64_MIN, INT64_MIN + 1, (int64_t{1} << 53) + 1};
  for (int shift = 0; shift < 63; ++shift) {
    const int64_t p = int64_t{1} << shift;
    for (int64_t d : {-3, -2, -1, 0, 1, 2, 3}) values.push_back(p + d), values.push_back(-(p + d));
    if (shift >= 24) {
      const int64_t half = int64_t{1} << (shift - 24);  // ties of the fp32 grid just above 2^shift
      for (int64_t k : {1, 3}) values.push_back(p + k * half), values.push_back(-(p + k * half));
    }
  }
  for (int i = 0; i < 1000000; ++i) values.push_back(static_cast<int64_t>(rng()) >> (rng() % 63));
  for (int64_t v : values) {
    volatile int64_t vv = v;
    const float cpu = static_cast<float>(vv);
    const float got = qc::i64_to_f32(v);
    if (f32_bits(got) != f32_bits(cpu)) {
      bad.add(fmt::format("v={}: got {} cpu {}", v, hex(f32_bits(got), 8), hex(f32_bits(cpu), 8)));
    }
  }
  EXPECT_EQ(bad.count(), 0u) << bad.report();
}

// ---------------------------------------------------------------------------------------------
// Distances, equality, classification
// ---------------------------------------------------------------------------------------------

// The ordered line agrees with the numeric order of every non-NaN pattern, and the distance
// between finite a <= b equals the number of distinct bf16 values v with a < v <= b (counted
// from a sorted table of values, not from bit patterns).
TEST(NumericsDistance, Bf16OrderedMatchesNumericOrder) {
  std::vector<uint16_t> finite;
  for (uint32_t b = 0; b < 65536; ++b) {
    if (qc::bf16_is_finite(static_cast<uint16_t>(b))) finite.push_back(static_cast<uint16_t>(b));
  }
  std::sort(finite.begin(), finite.end(),
            [](uint16_t a, uint16_t b) { return qc::bf16_to_f32(a) < qc::bf16_to_f32(b); });
  for (size_t i = 1; i < finite.size(); ++i) {
    const float a = qc::bf16_to_f32(finite[i - 1]), b = qc::bf16_to_f32(finite[i]);
    if (a < b) {
      ASSERT_LT(qc::bf16_ordered(finite[i - 1]), qc::bf16_ordered(finite[i])) << hex(finite[i - 1], 4) << " "
                                                                               << hex(finite[i], 4);
    } else {
      ASSERT_EQ(qc::bf16_ordered(finite[i - 1]), qc::bf16_ordered(finite[i]));  // the two zeros
    }
  }
  std::vector<float> values;  // distinct finite values, sorted
  for (uint16_t b : finite) {
    const float f = qc::bf16_to_f32(b);
    if (values.empty() || values.back() != f) values.push_back(f);
  }
  ASSERT_EQ(values.size(), finite.size() - 1);  // only +0/-0 collapse
  std::mt19937 rng(7);
  std::uniform_int_distribution<size_t> pick(0, finite.size() - 1);
  for (int i = 0; i < 200000; ++i) {
    const uint16_t a = finite[pick(rng)], b = finite[pick(rng)];
    const float fa = qc::bf16_to_f32(a), fb = qc::bf16_to_f32(b);
    const auto ia = std::lower_bound(values.begin(), values.end(), fa);
    const auto ib = std::lower_bound(values.begin(), values.end(), fb);
    const uint32_t want = static_cast<uint32_t>(ia > ib ? ia - ib : ib - ia);
    ASSERT_EQ(qc::bf16_ulp_distance(a, b), want) << hex(a, 4) << " " << hex(b, 4);
    ASSERT_EQ(qc::bf16_ulp_distance(b, a), want);
  }
  EXPECT_EQ(qc::bf16_ulp_distance(0x0000, 0x8000), 0u);
  EXPECT_EQ(qc::bf16_ulp_distance(0x0001, 0x8001), 2u);
  EXPECT_EQ(qc::bf16_ulp_distance(0x7F7F, 0xFF7F), 2u * 0x7F7F);
}

TEST(NumericsDistance, NonFiniteOperandsAreRejected) {
  for (uint16_t bad : {uint16_t{0x7F80}, uint16_t{0xFF80}, uint16_t{0x7FC0}, uint16_t{0xFF81}}) {
    try {
      (void)qc::bf16_ulp_distance(bad, 0x3F80);
      ADD_FAILURE() << "no error for " << hex(bad, 4);
    } catch (const qc::Error& e) {
      EXPECT_EQ(e.kind(), qc::ErrorKind::internal);
    }
    EXPECT_THROW((void)qc::bf16_ulp_distance(0x3F80, bad), qc::Error);
  }
}

TEST(NumericsDistance, BitwiseEqualityCountsSignedZerosAndPayloads) {
  EXPECT_FALSE(qc::bitwise_equal_f32(0.0f, -0.0f));
  EXPECT_TRUE(0.0f == -0.0f);  // the numeric comparison would hide it
  EXPECT_TRUE(qc::bitwise_equal_f32(kNaN, kNaN));
  EXPECT_FALSE(qc::bitwise_equal_f32(f32_from_bits(0x7FC00000), f32_from_bits(0x7FC00001)));
  EXPECT_FALSE(qc::bitwise_equal_bf16(0x0000, 0x8000));
  EXPECT_FALSE(qc::bitwise_equal_bf16(0x7FC0, 0x7FC1));
  EXPECT_TRUE(qc::bitwise_equal_bf16(0x7FC1, 0x7FC1));
}

qc::FpClass from_std(float f) {
  switch (std::fpclassify(f)) {
    case FP_ZERO: return qc::FpClass::zero;
    case FP_SUBNORMAL: return qc::FpClass::subnormal;
    case FP_NORMAL: return qc::FpClass::normal;
    case FP_INFINITE: return qc::FpClass::inf;
    default: return qc::FpClass::nan;
  }
}

TEST(NumericsClassify, AgreesWithStdFpclassify) {
  int counts[5] = {};
  for (uint32_t b = 0; b < 65536; ++b) {
    const auto c = qc::classify_bf16(static_cast<uint16_t>(b));
    ++counts[static_cast<int>(c)];
    ASSERT_EQ(c, from_std(qc::bf16_to_f32(static_cast<uint16_t>(b)))) << hex(b, 4);
    // fp16 subnormals are fp32 normals, so compare through the decoded value's magnitude.
    const uint16_t h = static_cast<uint16_t>(b);
    const float hf = qc::f16_to_f32(h);
    qc::FpClass want = from_std(hf);
    if (want == qc::FpClass::normal && std::fabs(hf) < 0x1p-14f) want = qc::FpClass::subnormal;
    ASSERT_EQ(qc::classify_f16(h), want) << hex(b, 4);
  }
  EXPECT_EQ(counts[0], 2);
  EXPECT_EQ(counts[1], 2 * 127);
  EXPECT_EQ(counts[3], 2);
  EXPECT_EQ(counts[4], 2 * 127);
  std::mt19937 rng(3);
  for (int i = 0; i < 1000000; ++i) {
    const uint32_t u = rng();
    ASSERT_EQ(qc::classify_f32(f32_from_bits(u)), from_std(f32_from_bits(u))) << hex(u, 8);
  }
  for (uint32_t u : {0x00000000u, 0x80000000u, 0x00000001u, 0x007FFFFFu, 0x00800000u, 0x7F800000u, 0xFF800000u,
                     0x7F800001u, 0xFFC00000u}) {
    ASSERT_EQ(qc::classify_f32(f32_from_bits(u)), from_std(f32_from_bits(u))) << hex(u, 8);
  }
}

// ---------------------------------------------------------------------------------------------
// Power-of-two rounding
// ---------------------------------------------------------------------------------------------

// fp64 references: log2-nearest compares s^2 against 2 * 4^e (exact in fp64 for 24-bit s:
// s^2 has 48 significant bits); value-nearest compares s against 1.5 * 2^e.
double pow2_log2_ref(double s) {
  int fe = 0;
  (void)std::frexp(s, &fe);
  const int e = fe - 1;
  const double lo = std::ldexp(1.0, e);
  return s * s > 2.0 * lo * lo ? 2.0 * lo : lo;
}
double pow2_value_ref(double s) {
  int fe = 0;
  (void)std::frexp(s, &fe);
  const double lo = std::ldexp(1.0, fe - 1);
  return s >= 1.5 * lo ? 2.0 * lo : lo;
}

TEST(NumericsPow2, BothFlavoursMatchFp64Reference) {
  Mismatches bad;
  // Every positive finite fp32 whose low 7 bits equal a rotating value (2^24 inputs, subnormals
  // included), except those that round to 2^128.
  for (uint32_t u = 1; u < 0x7F800000u; u += 128) {
    const uint32_t w = u | ((u >> 7) & 127u);
    const float s = f32_from_bits(w);
    const double d = static_cast<double>(s);
    const double want_log2 = pow2_log2_ref(d), want_value = pow2_value_ref(d);
    if (want_log2 < 0x1p128) {
      const float got = qc::pow2_nearest_log2(s);
      if (static_cast<double>(got) != want_log2) bad.add(fmt::format("log2 s={} ({}): got {}", s, hex(w, 8), got));
      if (!qc::is_pow2_f32(got)) bad.add(fmt::format("log2 s={}: {} not a power of two", s, got));
    }
    if (want_value < 0x1p128) {
      const float got = qc::pow2_nearest_value(s);
      if (static_cast<double>(got) != want_value) bad.add(fmt::format("value s={} ({}): got {}", s, hex(w, 8), got));
    }
  }
  EXPECT_EQ(bad.count(), 0u) << bad.report();
}

TEST(NumericsPow2, ThresholdsAndErrors) {
  // The largest fp32 below sqrt(2) (1.41421354) rounds down, the next one up.
  const float below_sqrt2 = 1.41421353816986083984375f;  // 0x3FB504F3
  EXPECT_LT(static_cast<double>(below_sqrt2), std::sqrt(2.0));
  EXPECT_GT(static_cast<double>(std::nextafter(below_sqrt2, 2.0f)), std::sqrt(2.0));
  EXPECT_EQ(qc::pow2_nearest_log2(below_sqrt2), 1.0f);
  EXPECT_EQ(qc::pow2_nearest_log2(std::nextafter(below_sqrt2, 2.0f)), 2.0f);
  EXPECT_EQ(qc::pow2_nearest_log2(below_sqrt2 * 0x1p-100f), 0x1p-100f);
  EXPECT_EQ(qc::pow2_nearest_value(1.5f), 2.0f);  // tie rounds up
  EXPECT_EQ(qc::pow2_nearest_value(std::nextafter(1.5f, 0.0f)), 1.0f);
  EXPECT_EQ(qc::pow2_nearest_value(0x1.8p-148f), 0x1p-147f);  // subnormal tie 3*2^-149 rounds up
  EXPECT_EQ(qc::pow2_nearest_value(0x1.4p-147f), 0x1p-147f);  // subnormal 5*2^-149
  EXPECT_EQ(qc::pow2_nearest_log2(1.45f), 2.0f);   // the flavours differ on (sqrt2, 1.5)
  EXPECT_EQ(qc::pow2_nearest_value(1.45f), 1.0f);
  EXPECT_EQ(qc::pow2_nearest_log2(0x1p127f), 0x1p127f);
  for (float s : {0.0f, -0.0f, -1.0f, kInf, -kInf, kNaN, std::numeric_limits<float>::max()}) {
    for (auto fn : {qc::pow2_nearest_log2, qc::pow2_nearest_value}) {
      try {
        (void)fn(s);
        ADD_FAILURE() << "no error for " << s;
      } catch (const qc::Error& e) {
        EXPECT_EQ(e.kind(), qc::ErrorKind::input) << s;
      }
    }
  }
}

}  // namespace
