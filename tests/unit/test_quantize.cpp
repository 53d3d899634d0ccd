// Quantizers against independent computations: fp32 products and quotients as
// `(float)((double)a op (double)b)` (correctly rounded: 53 >= 2*24 + 2), round-half-even by
// floor-and-compare in double, bf16 rounding by choosing between neighbours.
//
// Run: ./build-<name>/tests/qconform_unit_tests --gtest_filter='Quantize*'
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "qconform/error.hpp"
#include "epilogue/quantize.hpp"

namespace {

uint32_t bits32(float x) { return std::bit_cast<uint32_t>(x); }
float from32(uint32_t u) { return std::bit_cast<float>(u); }
float mul(float a, float b) { return static_cast<float>(static_cast<double>(a) * static_cast<double>(b)); }
float dvd(float a, float b) { return static_cast<float>(static_cast<double>(a) / static_cast<double>(b)); }

int ref_sat_rne(float x) {
  if (std::isnan(x)) return 0;
  const double d = x;
  const double fl = std::floor(d);
  const double frac = d - fl;
  double r = frac > 0.5 ? fl + 1 : frac < 0.5 ? fl : (std::fmod(fl, 2.0) == 0 ? fl : fl + 1);
  return static_cast<int>(std::max(-128.0, std::min(127.0, r)));
}

// Round half away from zero in fp64 (exact for every fp32), saturate, NaN -> 0.
int ref_sat_half_away(float x) {
  if (std::isnan(x)) return 0;
  const double d = std::fabs(static_cast<double>(x));
  const double fl = std::floor(d);
  const double r = std::copysign(d - fl >= 0.5 ? fl + 1 : fl, static_cast<double>(x));
  return static_cast<int>(std::max(-128.0, std::min(127.0, r)));
}

// fp32 -> bf16 value (RNE), finite inputs, by comparing the two neighbours.
float ref_bf16_value(float x) {
  const uint32_t lo = bits32(x) & 0xFFFF0000u;
  const float vlo = from32(lo), vhi = from32(lo + 0x10000u);
  const double dlo = std::fabs(double(x) - double(vlo)), dhi = std::fabs(double(vhi) - double(x));
  if (dlo < dhi) return vlo;
  if (dhi < dlo) return vhi;
  return ((lo >> 16) & 1u) == 0 ? vlo : vhi;
}

std::string fdesc(float x) { return fmt::format("{:a} (0x{:08x})", x, bits32(x)); }

}  // namespace

TEST(QuantizeSat, RoundHalfEvenSaturateNaN) {
  struct Case {
    float x;
    int q;
  };
  for (Case c : {Case{0.5f, 0}, Case{1.5f, 2}, Case{2.5f, 2}, Case{-0.5f, 0}, Case{-1.5f, -2}, Case{-2.5f, -2},
                 Case{126.5f, 126}, Case{127.49f, 127}, Case{127.5f, 127}, Case{1e30f, 127}, Case{INFINITY, 127},
                 Case{-127.5f, -128}, Case{-128.5f, -128}, Case{-1e30f, -128}, Case{-INFINITY, -128}, Case{NAN, 0},
                 Case{0.49999997f, 0}, Case{-0.0f, 0}}) {
    EXPECT_EQ(qc::sat_s8_rne(c.x), c.q) << fdesc(c.x);
  }
  // every float in [-130, 130] on a fine grid plus its neighbours, against the reference
  for (float x = -130.0f; x <= 130.0f; x += 0.125f) {
    for (float y : {std::nextafter(x, -INFINITY), x, std::nextafter(x, INFINITY)}) {
      ASSERT_EQ(qc::sat_s8_rne(y), ref_sat_rne(y)) << fdesc(y);
    }
  }
}

TEST(QuantizeAct, Names) {
  EXPECT_EQ(qc::act_quantizer("vllm"), qc::ActQuantizer::vllm);
  EXPECT_EQ(qc::act_quantizer("sglang"), qc::ActQuantizer::sglang);
  EXPECT_EQ(qc::act_quantizer("reciprocal"), qc::ActQuantizer::reciprocal);
  EXPECT_EQ(qc::act_quantizer("static"), qc::ActQuantizer::static_);
  EXPECT_EQ(qc::act_quantizer_name(qc::ActQuantizer::static_), "static");
  try {
    qc::act_quantizer("trt");
    FAIL();
  } catch (const qc::Error& e) {
    EXPECT_EQ(e.kind(), qc::ErrorKind::input);
    EXPECT_NE(std::string(e.what()).find("sglang"), std::string::npos);
  }
  std::vector<float> x(4, 1.0f);
  std::vector<int8_t> q(4);
  float s;
  EXPECT_THROW(qc::quantize_activations(qc::ActQuantizer::static_, x.data(), 1, 4, q.data(), &s), qc::Error);
  const float zero = 0.0f;
  EXPECT_THROW(qc::quantize_activations(qc::ActQuantizer::static_, x.data(), 1, 4, q.data(), &s, &zero), qc::Error);
}

// `127/absmax` and `1/(absmax/127)` differ by one fp32 ulp for some absmax; search such an absmax
// and an x in the row whose int8 code then differs between vLLM and SGLang.
TEST(QuantizeAct, VllmAndReciprocalMultipliersChangeACode) {
  std::mt19937_64 rng(123);
  std::uniform_real_distribution<float> dabs(0.01f, 50.0f);
  int inv_differs = 0, code_differs = 0;
  for (int i = 0; i < 100000 && code_differs < 10; ++i) {
    const float absmax = dabs(rng);
    const float inv_v = dvd(127.0f, absmax), inv_s = dvd(1.0f, dvd(absmax, 127.0f));
    if (inv_v == inv_s) continue;
    ++inv_differs;
    ASSERT_EQ(std::abs(int64_t(bits32(inv_v)) - int64_t(bits32(inv_s))), 1) << fdesc(absmax);
    // x near a .5 boundary of x*inv_v
    for (int k = 0; k < 127 && code_differs < 10; ++k) {
      float x = static_cast<float>((k + 0.5) / inv_v);
      for (int step = 0; step < 8; ++step, x = std::nextafter(x, 0.0f)) {
        if (!(x <= absmax)) continue;
        const int qv = ref_sat_rne(mul(x, inv_v)), qs = ref_sat_rne(mul(x, inv_s));
        if (qv == qs) continue;
        // through the API: row {absmax, x, -x}
        const float row[3] = {absmax, x, -x};
        int8_t q1[3], q2[3];
        const float s1 = qc::quantize_activation_row(qc::ActQuantizer::vllm, row, 3, q1);
        const float s2 = qc::quantize_activation_row(qc::ActQuantizer::reciprocal, row, 3, q2);
        ASSERT_EQ(s1, dvd(absmax, 127.0f));
        ASSERT_EQ(s2, s1);
        ASSERT_EQ(q1[1], qv) << "absmax " << fdesc(absmax) << " x " << fdesc(x);
        ASSERT_EQ(q2[1], qs) << "absmax " << fdesc(absmax) << " x " << fdesc(x);
        ASSERT_NE(q1[1], q2[1]);
        ASSERT_EQ(q1[2], ref_sat_rne(mul(-x, inv_v)));
        if (code_differs == 0) {
          std::printf("[quantize] absmax=%a x=%a: 127/absmax=%a, 1/(absmax/127)=%a -> vllm code %d, reciprocal code %d\n",
                      absmax, x, inv_v, inv_s, q1[1], q2[1]);
        }
        ++code_differs;
        break;
      }
    }
  }
  EXPECT_GT(inv_differs, 0);
  EXPECT_GE(code_differs, 10);
}

TEST(QuantizeAct, RandomRowsMatchReference) {
  std::mt19937_64 rng(5);
  std::normal_distribution<float> dn(0.0f, 1.0f);
  const int64_t M = 64, K = 257;
  std::vector<float> x(M * K);
  for (auto& v : x) v = dn(rng) * 3.0f;
  x[7 * K + 3] = 0.0f;
  for (auto kind : {qc::ActQuantizer::vllm, qc::ActQuantizer::sglang, qc::ActQuantizer::reciprocal,
                    qc::ActQuantizer::static_}) {
    std::vector<int8_t> q(M * K);
    std::vector<float> scales(M);
    const float st = 0.05f;
    qc::quantize_activations(kind, x.data(), M, K, q.data(), scales.data(), &st);
    for (int64_t m = 0; m < M; ++m) {
      float absmax = 0;
      for (int64_t k = 0; k < K; ++k) absmax = std::max(absmax, std::fabs(x[m * K + k]));
      const float scale = kind == qc::ActQuantizer::static_ ? st : dvd(absmax, 127.0f);
      ASSERT_EQ(scales[m], scale);  // absmax > 1e-10 here: SGLang's floor does not apply
      for (int64_t k = 0; k < K; ++k) {
        const float v = x[m * K + k];
        const float t = kind == qc::ActQuantizer::static_      ? dvd(v, st)
                        : kind == qc::ActQuantizer::reciprocal ? mul(v, dvd(1.0f, scale))
                                                               : mul(v, dvd(127.0f, absmax));
        const int want = kind == qc::ActQuantizer::sglang ? ref_sat_half_away(t) : ref_sat_rne(t);
        ASSERT_EQ(q[m * K + k], want) << qc::act_quantizer_name(kind) << " m=" << m << " k=" << k;
      }
    }
    // bf16 input overload: same codes on the bf16-rounded values
    std::vector<uint16_t> xb(M * K);
    std::vector<float> xr(M * K);
    for (size_t i = 0; i < xb.size(); ++i) {
      xr[i] = ref_bf16_value(x[i]);
      xb[i] = static_cast<uint16_t>(bits32(xr[i]) >> 16);
    }
    std::vector<int8_t> qb(M * K), qr(M * K);
    std::vector<float> sb(M), sr(M);
    qc::quantize_activations_bf16(kind, xb.data(), M, K, qb.data(), sb.data(), &st);
    qc::quantize_activations(kind, xr.data(), M, K, qr.data(), sr.data(), &st);
    EXPECT_EQ(qb, qr);
    EXPECT_EQ(sb, sr);
  }
}

// The row maximum maps to +-127 in the dynamic quantizers (x*inv is within an ulp of 127).
TEST(QuantizeAct, AbsmaxMapsTo127AndTiesAreEven) {
  std::mt19937_64 rng(9);
  std::uniform_real_distribution<float> d(1e-3f, 1e3f);
  for (int i = 0; i < 10000; ++i) {
    const float row[2] = {d(rng), 0.0f};
    const float neg[2] = {-row[0], 0.0f};
    int8_t q[2];
    qc::quantize_activation_row(qc::ActQuantizer::vllm, row, 2, q);
    ASSERT_EQ(q[0], 127);
    qc::quantize_activation_row(qc::ActQuantizer::sglang, neg, 2, q);
    ASSERT_EQ(q[0], -127);
  }
  // static with scale 0.5: 1.25/0.5 = 2.5 -> 2, 1.75/0.5 = 3.5 -> 4, -1.25 -> -2, 100/0.5 -> 127
  const float row[5] = {1.25f, 1.75f, -1.25f, 100.0f, -100.0f};
  int8_t q[5];
  qc::quantize_activation_row(qc::ActQuantizer::static_, row, 5, q, 0.5f);
  EXPECT_EQ(q[0], 2);
  EXPECT_EQ(q[1], 4);
  EXPECT_EQ(q[2], -2);
  EXPECT_EQ(q[3], 127);
  EXPECT_EQ(q[4], -128);
}

// Static quantization divides: find x, s where rne(x/s) != rne(x*(1/s)) and check the division wins.
TEST(QuantizeAct, StaticIsTrueDivision) {
  std::mt19937_64 rng(31);
  std::uniform_real_distribution<float> ds(1e-3f, 1.0f);
  int found = 0;
  for (int i = 0; i < 200000 && found < 5; ++i) {
    const float s = ds(rng);
    const float inv = dvd(1.0f, s);
    const int k = static_cast<int>(rng() % 120);
    float x = mul(static_cast<float>(k) + 0.5f, s);
    for (int step = -4; step <= 4; ++step) {
      float y = x;
      for (int j = 0; j < std::abs(step); ++j) y = std::nextafter(y, step < 0 ? 0.0f : INFINITY);
      if (ref_sat_rne(dvd(y, s)) == ref_sat_rne(mul(y, inv))) continue;
      int8_t q;
      qc::quantize_activation_row(qc::ActQuantizer::static_, &y, 1, &q, s);
      ASSERT_EQ(q, ref_sat_rne(dvd(y, s))) << fdesc(y) << " / " << fdesc(s);
      ++found;
      break;
    }
  }
  EXPECT_GE(found, 5);
}

// SGLang's libdevice.round takes halves away from zero where vLLM's cvt.rni takes them to even.
// absmax 127 makes the multiplier exactly 1, so x*inv = x.
TEST(QuantizeAct, SglangRoundsHalvesAwayFromZero) {
  const float row[6] = {127.0f, 2.5f, -2.5f, 3.5f, 0.5f, -0.49999997f};
  int8_t qs[6], qv[6];
  EXPECT_EQ(qc::quantize_activation_row(qc::ActQuantizer::sglang, row, 6, qs), 1.0f);
  EXPECT_EQ(qc::quantize_activation_row(qc::ActQuantizer::vllm, row, 6, qv), 1.0f);
  const int8_t want_s[6] = {127, 3, -3, 4, 1, 0}, want_v[6] = {127, 2, -2, 4, 0, 0};
  for (int i = 0; i < 6; ++i) {
    EXPECT_EQ(qs[i], want_s[i]) << "sglang x=" << row[i];
    EXPECT_EQ(qv[i], want_v[i]) << "vllm x=" << row[i];
  }
}

TEST(QuantizeAct, ZeroRows) {
  const float row[4] = {0.0f, -0.0f, 0.0f, 0.0f};
  int8_t q[4] = {1, 1, 1, 1};
  EXPECT_EQ(qc::quantize_activation_row(qc::ActQuantizer::vllm, row, 4, q), 0.0f);
  for (int8_t v : q) EXPECT_EQ(v, 0);
  std::fill(q, q + 4, int8_t{1});
  // reciprocal: scale 0, inv = 1/0 = inf, 0*inf = NaN, cvt.rni.sat maps NaN to 0
  EXPECT_EQ(qc::quantize_activation_row(qc::ActQuantizer::reciprocal, row, 4, q), 0.0f);
  for (int8_t v : q) EXPECT_EQ(v, 0);
  // sglang: absmax floored at 1e-10, so the scale is 1e-10/127 and the codes 0
  std::fill(q, q + 4, int8_t{1});
  EXPECT_EQ(qc::quantize_activation_row(qc::ActQuantizer::sglang, row, 4, q), dvd(1e-10f, 127.0f));
  for (int8_t v : q) EXPECT_EQ(v, 0);
  EXPECT_TRUE(std::isinf(dvd(1.0f, 0.0f)));
  EXPECT_TRUE(std::isnan(mul(0.0f, dvd(1.0f, 0.0f))));
}

TEST(QuantizeWeights, F32PathMatchesReferenceAndHalfEven) {
  std::mt19937_64 rng(17);
  std::normal_distribution<float> dn(0.0f, 0.02f);
  const int64_t N = 48, K = 300;
  std::vector<float> w(N * K);
  for (auto& v : w) v = dn(rng);
  for (int64_t k = 0; k < K; ++k) w[5 * K + k] = 0.0f;  // zero row
  std::vector<int8_t> q(N * K);
  std::vector<float> s(N);
  qc::quantize_weights_per_channel(w.data(), N, K, q.data(), s.data());
  for (int64_t n = 0; n < N; ++n) {
    float absmax = 0;
    for (int64_t k = 0; k < K; ++k) absmax = std::max(absmax, std::fabs(w[n * K + k]));
    float scale = dvd(absmax, 127.5f);
    if (scale == 0) scale = 0x1p-23f;
    ASSERT_EQ(s[n], scale) << "n=" << n;
    for (int64_t k = 0; k < K; ++k) {
      ASSERT_EQ(q[n * K + k], ref_sat_rne(dvd(w[n * K + k], scale))) << "n=" << n << " k=" << k;
    }
  }
  for (int64_t k = 0; k < K; ++k) EXPECT_EQ(q[5 * K + k], 0);
  // absmax 127.5 -> scale 1: ties go to even, and the absmax element (127.5) saturates at 127
  const float row[6] = {127.5f, 2.5f, 3.5f, -2.5f, -127.5f, 0.5f};
  int8_t qr[6];
  float sr;
  qc::quantize_weights_per_channel(row, 1, 6, qr, &sr);
  EXPECT_EQ(sr, 1.0f);
  const int8_t want[6] = {127, 2, 4, -2, -128, 0};
  for (int i = 0; i < 6; ++i) EXPECT_EQ(qr[i], want[i]) << i;
  const float bad[2] = {1.0f, NAN};
  EXPECT_THROW(qc::quantize_weights_per_channel(bad, 1, 2, qr, &sr), qc::Error);
}

// The bf16 model-dtype path rounds the scale and each quotient to bf16 before torch.round, which
// changes codes compared with the fp32 path on the same (bf16-representable) weights.
TEST(QuantizeWeights, Bf16PathMatchesReferenceAndDiffersFromF32) {
  std::mt19937_64 rng(19);
  std::normal_distribution<float> dn(0.0f, 0.02f);
  const int64_t N = 64, K = 512;
  std::vector<float> w(N * K);
  for (auto& v : w) v = ref_bf16_value(dn(rng));
  std::vector<int8_t> qb(N * K), qf(N * K);
  std::vector<float> sb(N), sf(N);
  qc::quantize_weights_per_channel(w.data(), N, K, qb.data(), sb.data(), qc::WeightScaleDtype::bf16);
  qc::quantize_weights_per_channel(w.data(), N, K, qf.data(), sf.data(), qc::WeightScaleDtype::f32);
  int64_t differ = 0;
  for (int64_t n = 0; n < N; ++n) {
    float absmax = 0;
    for (int64_t k = 0; k < K; ++k) absmax = std::max(absmax, std::fabs(w[n * K + k]));
    const float scale = ref_bf16_value(dvd(absmax, 127.5f));
    ASSERT_EQ(sb[n], scale);
    ASSERT_EQ(bits32(sb[n]) & 0xFFFFu, 0u) << "bf16 scale must be bf16-representable";
    for (int64_t k = 0; k < K; ++k) {
      ASSERT_EQ(qb[n * K + k], ref_sat_rne(ref_bf16_value(dvd(w[n * K + k], scale)))) << "n=" << n << " k=" << k;
      differ += qb[n * K + k] != qf[n * K + k];
    }
  }
  EXPECT_GT(differ, 0);
  std::printf("[quantize] bf16 vs fp32 weight-quantization paths: %lld of %lld codes differ\n",
              static_cast<long long>(differ), static_cast<long long>(N * K));
  // zero row in bf16: scale = bf16 eps 2^-7, codes 0
  const float zero[3] = {0, 0, 0};
  int8_t qz[3];
  float sz;
  qc::quantize_weights_per_channel(zero, 1, 3, qz, &sz, qc::WeightScaleDtype::bf16);
  EXPECT_EQ(sz, 0x1p-7f);
  for (int8_t v : qz) EXPECT_EQ(v, 0);
}
