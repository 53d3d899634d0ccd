// CPU emulation of FP8 GEMM accumulation orders and the exact reference (see fp8_emulation.hpp).
// Built with `-ffp-contract=off` and without fast-math (project flags): every `+` below is one
// fp32 rounding, and no product is fused into an addition.
#include <fmt/format.h>

#include <array>
#include <vector>

#include "qconform/error.hpp"
#include "accum/fp8_emulation.hpp"
#include "qconform/numerics.hpp"
#include "core/parallel.hpp"

namespace qc {

namespace {

constexpr int32_t kNaN = INT32_MIN;

// e4m3fn: S.EEEE.MMM, bias 7; subnormals (E = 0) are M·2^-9; only S.1111.111 is NaN.
constexpr int32_t scaled_value(uint8_t b) {
  if ((b & 0x7F) == 0x7F) return kNaN;
  const int e = (b >> 3) & 0xF;
  const int m = b & 0x7;
  const int32_t mag = e == 0 ? m : (8 + m) << (e - 1);  // value·2^9
  return (b & 0x80) ? -mag : mag;
}
static_assert(scaled_value(0x01) == 1, "smallest subnormal is 2^-9");
static_assert(scaled_value(0x7E) == 448 * 512, "largest finite e4m3fn is 448");
static_assert(scaled_value(0x38) == 512, "0x38 is 1.0");
static_assert(scaled_value(0xFF) == kNaN && scaled_value(0x7F) == kNaN);
static_assert(int64_t{448 * 512} * (448 * 512) < (int64_t{1} << 36), "a scaled product stays below 2^36");

const std::array<int32_t, 256>& scaled_table() {
  static const std::array<int32_t, 256> t = [] {
    std::array<int32_t, 256> v{};
    for (int b = 0; b < 256; ++b) v[static_cast<size_t>(b)] = scaled_value(static_cast<uint8_t>(b));
    return v;
  }();
  return t;
}

// Decodes a row to fp32 (exact: e4m3 values are fp32 values), rejecting NaN codes.
void decode_row(const uint8_t* src, int64_t k, float* dst, const char* field, int64_t row) {
  const auto& t = scaled_table();
  for (int64_t i = 0; i < k; ++i) {
    const int32_t v = t[src[i]];
    QC_INPUT(v != kNaN, "fp8 GEMM: {}[{},{}] is a NaN encoding ({:#04x}); expected finite e4m3fn", field, row, i,
             static_cast<unsigned>(src[i]));
    dst[i] = static_cast<float>(v) * 0x1p-9f;  // exact: |v| < 2^18 and the scale is a power of two
  }
}

float sum_sequential(const float* a, const float* w, int64_t begin, int64_t end) {
  float acc = 0.0f;
  for (int64_t i = begin; i < end; ++i) acc = acc + a[i] * w[i];  // product exact, one rounding per add
  return acc;
}

}  // namespace

int32_t e4m3_times_512(uint8_t bits) {
  const int32_t v = scaled_table()[bits];
  QC_INPUT(v != kNaN, "e4m3 code {:#04x} is NaN; expected a finite e4m3fn value", static_cast<unsigned>(bits));
  return v;
}

std::string Fp8AccumSpec::name() const {
  switch (order) {
    case Fp8AccumOrder::sequential: return "sequential";
    case Fp8AccumOrder::blocked: return fmt::format("blocked({})", chunk);
    case Fp8AccumOrder::split_k: return fmt::format("split-k({})", splits);
  }
  return "?";
}

void validate_fp8_gemm(AccumShape s, const Fp8AccumSpec& spec) {
  QC_INPUT(s.m >= 0 && s.n >= 0 && s.k >= 0, "fp8 GEMM: expected non-negative shape, found M={} N={} K={}", s.m, s.n,
           s.k);
  QC_INPUT(spec.order != Fp8AccumOrder::blocked || spec.chunk >= 1, "fp8 GEMM: blocked order needs chunk >= 1, found {}",
           spec.chunk);
  QC_INPUT(spec.order != Fp8AccumOrder::split_k || (spec.splits >= 1 && spec.splits <= std::max<int64_t>(s.k, 1)),
           "fp8 GEMM: split-k needs 1 <= splits <= K, found splits={} K={}", spec.splits, s.k);
}

void fp8_gemm_emulate(const uint8_t* a, const uint8_t* w, AccumShape s, const Fp8AccumSpec& spec, float* d,
                      int threads) {
  validate_fp8_gemm(s, spec);
  std::vector<float> wf(static_cast<size_t>(s.n * s.k));
  for (int64_t n = 0; n < s.n; ++n) decode_row(w + n * s.k, s.k, wf.data() + n * s.k, "w", n);
  parallel_for(s.m, threads, [&](int64_t m) {
    std::vector<float> af(static_cast<size_t>(s.k));
    decode_row(a + m * s.k, s.k, af.data(), "a", m);
    for (int64_t n = 0; n < s.n; ++n) {
      const float* wr = wf.data() + n * s.k;
      float total = 0.0f;
      switch (spec.order) {
        case Fp8AccumOrder::sequential: total = sum_sequential(af.data(), wr, 0, s.k); break;
        case Fp8AccumOrder::blocked:
          for (int64_t k0 = 0; k0 < s.k; k0 += spec.chunk) {
            total = total + sum_sequential(af.data(), wr, k0, std::min(s.k, k0 + spec.chunk));
          }
          break;
        case Fp8AccumOrder::split_k: {
          const int64_t len = s.k / spec.splits;
          for (int64_t p = 0; p < spec.splits; ++p) {
            const int64_t end = p + 1 == spec.splits ? s.k : (p + 1) * len;
            total = total + sum_sequential(af.data(), wr, p * len, end);
          }
          break;
        }
      }
      d[m * s.n + n] = total;
    }
  });
}

void fp8_gemm_exact(const uint8_t* a, const uint8_t* w, AccumShape s, float* d, int threads) {
  QC_INPUT(s.m >= 0 && s.n >= 0 && s.k >= 0 && s.k < (int64_t{1} << 27),
           "fp8 exact GEMM: expected non-negative shape with K < 2^27, found M={} N={} K={}", s.m, s.n, s.k);
  const auto& t = scaled_table();
  std::vector<int32_t> wi(static_cast<size_t>(s.n * s.k));
  for (int64_t i = 0; i < s.n * s.k; ++i) {
    wi[static_cast<size_t>(i)] = t[w[i]];
    QC_INPUT(wi[static_cast<size_t>(i)] != kNaN, "fp8 exact GEMM: w[{},{}] is a NaN encoding", i / s.k, i % s.k);
  }
  parallel_for(s.m, threads, [&](int64_t m) {
    std::vector<int32_t> ai(static_cast<size_t>(s.k));
    for (int64_t i = 0; i < s.k; ++i) {
      ai[static_cast<size_t>(i)] = t[a[m * s.k + i]];
      QC_INPUT(ai[static_cast<size_t>(i)] != kNaN, "fp8 exact GEMM: a[{},{}] is a NaN encoding", m, i);
    }
    for (int64_t n = 0; n < s.n; ++n) {
      const int32_t* wr = wi.data() + n * s.k;
      int64_t sum = 0;  // units of 2^-18; |sum| < 2^27 · 2^36 = 2^63
      for (int64_t i = 0; i < s.k; ++i) sum += int64_t{ai[static_cast<size_t>(i)]} * wr[i];
      // int64 -> fp32 is one round-to-nearest-even; the power-of-two scale is then exact (a
      // nonzero result is at least 2^-18, far above the fp32 subnormal range).
      d[m * s.n + n] = static_cast<float>(sum) * 0x1p-18f;
    }
  });
}

}  // namespace qc
