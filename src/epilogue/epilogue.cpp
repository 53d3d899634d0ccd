// The epilogues of include/qconform/epilogue.hpp: the formula table, the tile loops, and `exact`,
// the correctly rounded bf16 of acc·sa·sw (+ bias) in integer arithmetic. The fp32 formulas of the
// production engines are not here: they are `formula::apply` in include/qconform/epilogue_formula.hpp,
// the text the CUDA kernels compile too; this file only dispatches to it.
//
// Compiled with `-ffp-contract=off` (project flags): every `*` and `+` on floats rounds once to
// fp32 (in `formula::apply` as in the fp64 fast path of `exact` below).
#include "qconform/epilogue.hpp"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <deque>
#include <mutex>
#include <string>
#include <vector>

#include "qconform/error.hpp"
#include "qconform/numerics.hpp"
#include "core/parallel.hpp"
#include "epilogue/epilogue_kernels.hpp"
#include "epilogue/formula_space.hpp"

namespace qc {
namespace {

// ---------------------------------------------------------------------------------------------
// `exact`: values as sign · integer · 2^exp, summed exactly, rounded once.

struct Term {
  bool neg = false;
  u128 sig = 0;  // magnitude = sig · 2^exp; sig == 0 means zero
  int exp = 0;
};

// A finite fp32 as sign · (24-bit integer) · 2^exp (exact; subnormals have exp = -149): the core's
// `unpack` of the fp32 row.
Term decompose_f32(float x) {
  const Unpacked u = unpack<kFp32>(f32_bits(x));
  return Term{u.neg, u.sig, u.exp};
}

// Rounds sign · n · 2^e (n > 0) to bf16 with round-to-nearest-even, subnormals and overflow: the
// core's `encode_exact` into the bf16 row (its numbered steps: the leading bit's exponent, the
// subnormal floor, round_shift of the dropped bits, the carry into the exponent, inf above max).
uint16_t round_to_bf16(bool neg, u128 n, int e) {
  return static_cast<uint16_t>(encode_exact<kBf16>(neg, n, e, Rounding::nearest_even, /*saturate=*/false));
}

// Exact sum of two nonzero terms, rounded once. If the smaller term lies entirely below
// 2^q with q = min(e_big, lead_big - 10) - 1, it is replaced by sign · 2^(q-1): the big term is a
// multiple of 2^q and its neighbourhood ±2^q contains no other multiple of 2^q, the sum's
// magnitude stays above 2^(lead_big - 1), so every bf16 rounding boundary near it (representable
// values and midpoints, spacing >= 2^(lead_big - 9), subnormal spacing 2^-134) is a multiple of
// 2^q; both sums lie strictly inside the same gap and round alike. After this, both terms fit a
// common exponent within 122 bits (bounds in docs/epilogues.md).
uint16_t round_sum_to_bf16(Term a, Term b) {
  // Strip trailing zeros: the width bounds below count significant bits (a bf16 bias has at most
  // 8, the product at most 111).
  for (Term* t : {&a, &b}) {
    const uint64_t lo = static_cast<uint64_t>(t->sig);
    const int tz = lo != 0 ? std::countr_zero(lo) : 64 + std::countr_zero(static_cast<uint64_t>(t->sig >> 64));
    t->sig >>= tz;
    t->exp += tz;
  }
  const int lead_a = significant_bits(a.sig) - 1 + a.exp;
  const int lead_b = significant_bits(b.sig) - 1 + b.exp;
  Term& big = lead_a >= lead_b ? a : b;
  Term& small = lead_a >= lead_b ? b : a;
  const int lead_big = std::max(lead_a, lead_b);
  const int lead_small = std::min(lead_a, lead_b);
  const int q = std::min(big.exp, lead_big - 10) - 1;
  if (lead_small < q) {
    small.sig = 1;
    small.exp = q - 1;
  }
  const int e = std::min(big.exp, small.exp);
  [[maybe_unused]] const int width =
      std::max(significant_bits(big.sig) + big.exp, significant_bits(small.sig) + small.exp) - e;
  QC_DCHECK(width <= 124, "exact epilogue: aligned width {} exceeds 124 bits (exps {}, {})", width, big.exp,
            small.exp);
  const u128 x = big.sig << (big.exp - e);
  const u128 y = small.sig << (small.exp - e);
  if (big.neg == small.neg) return round_to_bf16(big.neg, x + y, e);
  if (x == y) return 0x0000;  // exact cancellation: +0 under round-to-nearest
  return x > y ? round_to_bf16(big.neg, x - y, e) : round_to_bf16(small.neg, y - x, e);
}

// Fast path of `exact`, valid for |acc| < 2^29 (all realistic accumulators): `acc·sa` is exact in
// fp64 (29 + 24 <= 53 bits), so `y` below is the exact value acc·sa·sw (+ bias) rounded ONCE to fp64
// (a product, or one correctly rounded fp64 FMA). Rounding `y` instead of the exact value to bf16
// gives the same result unless `y` sits exactly on a bf16 midpoint (rounding is monotone and every
// bf16 midpoint in the normal range is an fp64 number): then, and for zeros, bf16-subnormal or
// near-overflow results, return false and let the integer path decide.
bool exact_bf16_fast(int64_t acc, float sa, float sw, const float* bias, uint16_t* out) {
  constexpr int64_t kLimit = int64_t{1} << 29;
  if (acc >= kLimit || acc <= -kLimit) return false;
  const double p = static_cast<double>(acc) * static_cast<double>(sa);  // exact
  const double y = bias ? std::fma(p, static_cast<double>(sw), static_cast<double>(*bias))
                        : p * static_cast<double>(sw);
  const uint64_t u = f64_bits(y);
  const uint64_t mag = u & 0x7FFFFFFFFFFFFFFFull;
  const int e = static_cast<int>(mag >> 52) - 1023;
  if (y == 0.0 || e < kBf16.min_normal_exponent() || e >= kBf16.max_exponent()) return false;  // zero sign rules, bf16 subnormal, overflow
  constexpr int kDrop = 52 - kBf16.mantissa_bits;      // fp64 mantissa bits below bf16's
  constexpr uint64_t kHalf = uint64_t{1} << (kDrop - 1);  // half a bf16 ulp in fp64 mantissa units
  if ((mag & ((kHalf << 1) - 1)) == kHalf) return false;  // on a midpoint: maybe double rounding
  // Not a tie: the core's round_shift of the fp64 pattern is the bf16 rounding. r = biased fp64
  // exponent << 7 | 7 mantissa bits (a carry moved into the exponent); rebias.
  const uint64_t r = round_shift(mag, kDrop, Rounding::nearest_even);
  const uint64_t bits = r - (uint64_t{1023 - kBf16.bias} << kBf16.mantissa_bits);
  *out = static_cast<uint16_t>(((u >> 63) != 0 ? kBf16.sign_bit() : 0u) | bits);
  return true;
}

}  // namespace

uint16_t exact_bf16(int64_t acc, float sa, float sw, std::optional<uint16_t> bias_bf16) {
  const bool has_bias = bias_bf16.has_value();
  const float bias = has_bias ? bf16_to_f32(*bias_bf16) : 0.0f;
  // Non-finite scales or bias: the result is inf or NaN, with no rounding question; fp64
  // evaluation gives IEEE's answer (acc converted to double keeps its sign and zero-ness).
  if (!std::isfinite(sa) || !std::isfinite(sw) || (has_bias && !std::isfinite(bias))) {
    double v = static_cast<double>(acc) * static_cast<double>(sa) * static_cast<double>(sw);
    if (has_bias) v = v + static_cast<double>(bias);
    return f32_to_bf16(static_cast<float>(v));
  }
  uint16_t fast;
  if (exact_bf16_fast(acc, sa, sw, has_bias ? &bias : nullptr, &fast)) return fast;
  return detail::exact_bf16_integer(acc, sa, sw, bias_bf16);
}

uint16_t detail::exact_bf16_integer(int64_t acc, float sa, float sw, std::optional<uint16_t> bias_bf16) {
  const bool has_bias = bias_bf16.has_value();
  const float bias = has_bias ? bf16_to_f32(*bias_bf16) : 0.0f;
  if (!std::isfinite(sa) || !std::isfinite(sw) || (has_bias && !std::isfinite(bias))) {
    return exact_bf16(acc, sa, sw, bias_bf16);  // IEEE non-finite handling lives there
  }
  Term p;
  const Term ta = decompose_f32(sa);
  const Term tw = decompose_f32(sw);
  // |acc| <= 2^63 and two 24-bit significands: the product is below 2^111, exact in 128 bits.
  const uint64_t mag = acc < 0 ? uint64_t{0} - static_cast<uint64_t>(acc) : static_cast<uint64_t>(acc);
  p.sig = u128{mag} * ta.sig * tw.sig;
  p.exp = ta.exp + tw.exp;
  p.neg = (acc < 0) != (ta.neg != tw.neg);
  if (p.sig == 0) p.neg = ta.neg != tw.neg;  // +0 (integer zero) times the scales' signs

  if (!has_bias) {
    if (p.sig == 0) return p.neg ? 0x8000u : 0x0000u;
    return round_to_bf16(p.neg, p.sig, p.exp);
  }
  const Term tb = decompose_f32(bias);  // exact: a bf16 is an fp32 with 16 zero low bits
  if (p.sig == 0 && tb.sig == 0) return (p.neg && tb.neg) ? 0x8000u : 0x0000u;
  if (p.sig == 0) return *bias_bf16;  // 0 + b = b exactly (b nonzero bf16)
  if (tb.sig == 0) return round_to_bf16(p.neg, p.sig, p.exp);
  return round_sum_to_bf16(p, tb);
}

namespace {

[[noreturn]] void refuse_bias(const Epilogue& e) {
  QC_INPUT(e.kind != EpilogueKind::point, "epilogue `{}`: this formula takes no bias (write the bias term into the formula "
                                          "to declare where it is added)", e.name);
  QC_FAIL_INPUT(
      "epilogue `{}`: a bias is ambiguous for this formula (CUTLASS `multiply_add` may or may not be "
      "contracted into an FMA); use `{}-fma` or `{}-muladd`",
      e.name, e.name, e.name);
}

// The formula table: one row per named epilogue. The first `kIntegerRows` take an integer
// accumulator and are what `all_epilogues()` (and so every INT8 arm family) enumerates; the FP8
// scaled epilogue follows. Adding a formula: its row here, its body in epilogue_formula.hpp.
// Each row ends with its point of the formula space (docs/identify.md), in notation (the FP8 row's
// over the fp32 `d`), and the shape dispatches (`sglang-sm90`, `torch-rowwise`) with the point they
// compute on their other side (under swap-AB, transposed):
// tests/unit/test_formula_space.cpp checks that body and point give the same bits.
constexpr size_t kIntegerRows = 7;
constexpr size_t kFp8Rows = 2;
constexpr std::array<Epilogue, kIntegerRows + kFp8Rows> kEpilogues{{
    {"vllm-cutlass", EpilogueKind::vllm_cutlass, BiasMode::refuse,
     "bf16(rn32(sa * rn32(f32(acc) * sw))); with a bias: refused (ambiguous, use -fma or -muladd)",
     "vLLM CUTLASS c3x/c2x ScaledEpilogue (CutlassInt8ScaledMMLinearKernel)",
     "bf16(rn32(sa * rn32(f32(acc) * sw)))"},
    {"vllm-cutlass-fma", EpilogueKind::vllm_cutlass, BiasMode::fma,
     "bf16(rn32(sa * rn32(f32(acc) * sw))); with a bias: bf16(fma(sa, rn32(f32(acc) * sw), f32(bias)))",
     "vLLM CUTLASS ScaledEpilogueBias, multiply_add contracted into one FMA (nvcc default --fmad=true)",
     "bf16(fma(sa, rn32(f32(acc) * sw), f32(bias)))"},
    {"vllm-cutlass-muladd", EpilogueKind::vllm_cutlass, BiasMode::muladd,
     "bf16(rn32(sa * rn32(f32(acc) * sw))); with a bias: bf16(rn32(rn32(sa * rn32(f32(acc) * sw)) + f32(bias)))",
     "vLLM CUTLASS ScaledEpilogueBias, multiply_add not contracted (--fmad=false)",
     "bf16(rn32(rn32(sa * rn32(f32(acc) * sw)) + f32(bias)))"},
    {"vllm-triton", EpilogueKind::vllm_triton, BiasMode::after_bf16,
     "bf16(rn32(rn32(f32(acc) * sa) * sw)); with a bias: bf16(rn32(f32(bf16(...)) + f32(bias)))",
     "vLLM triton_scaled_mm (TritonInt8ScaledMMLinearKernel)",
     "bf16(rn32(f32(bf16(rn32(rn32(f32(acc) * sa) * sw))) + f32(bias)))"},
    {"sglang-sm89", EpilogueKind::sglang_sm89, BiasMode::muladd,
     "bf16(rn32(f32(acc) * rn32(sw * sa))); with a bias: bf16(rn32(rn32(f32(acc) * rn32(sw * sa)) + f32(bias)))",
     "SGLang sgl-kernel int8_scaled_mm, SM80/86/89 epilogue visitor",
     "bf16(rn32(rn32(f32(acc) * rn32(sw * sa)) + f32(bias)))"},
    {"sglang-sm90", EpilogueKind::sglang_sm90, BiasMode::refuse,
     "bf16(rn32(sa * rn32(f32(acc) * sw))); swap-AB (M <= 16, or M <= 64 with N > 1280): "
     "bf16(rn32(rn32(f32(acc) * sa) * sw)); with a bias: refused (not modelled)",
     "SGLang sgl-kernel int8_scaled_mm, SM90 CUTLASS path with small-M swap-AB dispatch",
     "bf16(rn32(sa * rn32(f32(acc) * sw)))", "bf16(rn32(rn32(f32(acc) * sa) * sw))"},
    {"exact", EpilogueKind::exact, BiasMode::exact,
     "bf16_RNE(acc * sa * sw (+ bias)) of the real number, rounded once",
     "qconform reference: exact integer arithmetic (128-bit significand product, aligned sum with sticky)",
     "bf16(acc * sa * sw + f32(bias))"},
    // FP8: the fp32 GEMM result `d` scaled in the Triton order (the same body as `vllm-triton`).
    {"fp8-scaled", EpilogueKind::vllm_triton, BiasMode::refuse, "bf16(rn32(rn32(d*sa)*sw))",
     "qconform FP8 path: the fp32 result of an FP8 e4m3 GEMM (CPU emulation or cuBLASLt) scaled per token, "
     "then per channel",
     "bf16(rn32(rn32(d * sa) * sw))"},
    // PyTorch's sm90 rowwise FP8 `_scaled_mm` (CUTLASS): the tree Cast(Add(Bias=0, Multiply(WScale,
    // Multiply(XScale, Accum)))) in the orientation of its shape dispatch (`torch_rowwise_transposes`).
    {"torch-rowwise", EpilogueKind::torch_rowwise, BiasMode::refuse,
     "bf16(rn32(rn32(rn32(d*sa)*sw) + 0)); when PyTorch runs the problem transposed: bf16(rn32(rn32(sa*rn32(d*sw)) + 0)); "
     "with a bias: refused (not modelled)",
     "PyTorch f8f8bf16_rowwise, sm90 CUTLASS (aten/src/ATen/native/cuda/RowwiseScaledMM.cu), the "
     "cuda:cutlass-fp8-rowwise arms",
     // Its points (identify's candidate of a shape dispatch, `formula::dispatch_swaps`): the + 0 of
     // the bias node changes only a -0 into +0, outside the jurisdiction of the space.
     "bf16(rn32(rn32(d * sa) * sw))", "bf16(rn32(sa * rn32(d * sw)))"},
}};

// Rows [m0, m1) of a tile through formula body `K` (resolved: `sglang_sm90` already mapped).
template <EpilogueKind K, typename Acc>
void formula_rows(const Acc* acc, const float* sa, const float* sw, const uint16_t* bias, BiasMode mode, int64_t m0,
                  int64_t m1, int64_t N, uint16_t* y) {
  for (int64_t m = m0; m < m1; ++m) {
    const Acc* a = acc + m * N;
    uint16_t* out = y + m * N;
    const float s = sa[m];
    if (bias == nullptr) {
      for (int64_t n = 0; n < N; ++n) out[n] = formula::apply<K>(a[n], s, sw[n], mode, false, 0.0f);
    } else {
      for (int64_t n = 0; n < N; ++n) {
        out[n] = formula::apply<K>(a[n], s, sw[n], mode, true, formula::bf16_value(bias[n]));
      }
    }
  }
}

// Rows [m0, m1) of a tile through the formula-space point `p` (not `exact`).
template <typename Acc>
void point_rows(const FormulaPoint& p, const Acc* acc, const float* sa, const float* sw, const uint16_t* bias, int64_t m0,
                int64_t m1, int64_t N, uint16_t* y) {
  for (int64_t m = m0; m < m1; ++m) {
    const Acc* a = acc + m * N;
    uint16_t* out = y + m * N;
    for (int64_t n = 0; n < N; ++n) {
      out[n] = formula::apply_point(p, a[n], sa[m], sw[n], bias != nullptr, bias ? formula::bf16_value(bias[n]) : 0.0f);
    }
  }
}

// Rows [m0, m1) of a tile through `exact` (integer arithmetic, host-only).
template <typename Acc>
void exact_rows(const Acc* acc, const float* sa, const float* sw, const uint16_t* bias, int64_t m0, int64_t m1,
                int64_t N, uint16_t* y) {
  for (int64_t m = m0; m < m1; ++m) {
    const Acc* a = acc + m * N;
    uint16_t* out = y + m * N;
    for (int64_t n = 0; n < N; ++n) {
      out[n] = exact_bf16(static_cast<int64_t>(a[n]), sa[m], sw[n],
                          bias ? std::optional<uint16_t>(bias[n]) : std::nullopt);
    }
  }
}

// The checks every tile entry point makes before computing anything (QC_INPUT: the scales, the
// bias, and, for an fp32 accumulator, a formula that takes one), and the kind whose body runs
// (`sglang_sm90` resolved on `layer_m`, the M a shape-dispatching formula sees: the whole layer's
// when the M rows are a block of it).
template <typename Acc>
EpilogueKind checked_kind(const Epilogue& e, const float* sa, const float* sw, const uint16_t* bias, int64_t M,
                          int64_t N, int64_t layer_m) {
  for (int64_t m = 0; m < M; ++m) {
    QC_INPUT(std::isfinite(sa[m]) && sa[m] > 0.0f, "epilogue `{}`: field sa[{}]: expected finite > 0, found {} (0x{:08x})",
             e.name, m, sa[m], f32_bits(sa[m]));
  }
  for (int64_t n = 0; n < N; ++n) {
    QC_INPUT(std::isfinite(sw[n]) && sw[n] > 0.0f, "epilogue `{}`: field sw[{}]: expected finite > 0, found {} (0x{:08x})",
             e.name, n, sw[n], f32_bits(sw[n]));
  }
  if (bias != nullptr) {
    if (!e.accepts_bias()) refuse_bias(e);
    for (int64_t n = 0; n < N; ++n) {
      QC_INPUT(std::isfinite(bf16_to_f32(bias[n])), "epilogue `{}`: field bias[{}]: expected finite bf16, found 0x{:04x}",
               e.name, n, bias[n]);
    }
  }
  const EpilogueKind kind = formula::instance_kind(e.kind, layer_m, N);
  if constexpr (std::is_floating_point_v<Acc>) {
    QC_INPUT(kind != EpilogueKind::exact && !(kind == EpilogueKind::point && e.space.conv == AccConversion::exact),
             "epilogue `{}`: the exact formula needs an integer accumulator, found an fp32 one", e.name);
    QC_INPUT(kind != EpilogueKind::point || e.space.input == FormulaInput::fp32,
             "epilogue `{}`: a formula over an integer accumulator (`acc`) given the fp32 result of an FP8 GEMM; "
             "write it over `d` (e.g. `bf16(rn32(rn32(d * sa) * sw))`)",
             e.name);
  } else {
    QC_INPUT(kind != EpilogueKind::point || e.space.input == FormulaInput::integer,
             "epilogue `{}`: a formula over an FP8 GEMM's fp32 result (`d`) given integer accumulators; write it over "
             "`acc` (e.g. `bf16(rn32(sa * rn32(f32(acc) * sw)))`)",
             e.name);
  }
  QC_CHECK(kind == EpilogueKind::exact || kind == EpilogueKind::point || formula::has_body(kind),
           "epilogue `{}`: kind {} has no formula body", e.name, static_cast<int>(kind));
  return kind;
}

// Rows [m0, m1) of a checked tile through the resolved `kind`. The one fast path: the Triton body
// over an fp32 accumulator without a bias (`fp8-scaled`, every FP8 arm's and verify's FP8
// reference), in SIMD lanes (epilogue_kernels.cpp); `formula_rows` is its reference.
template <typename Acc>
void kind_rows(const Epilogue& e, EpilogueKind kind, const Acc* acc, const float* sa, const float* sw,
               const uint16_t* bias, int64_t m0, int64_t m1, int64_t N, uint16_t* y) {
  if constexpr (std::is_integral_v<Acc>) {
    if (kind == EpilogueKind::exact) return exact_rows(acc, sa, sw, bias, m0, m1, N, y);
    if (kind == EpilogueKind::point) {
      if (e.space.conv == AccConversion::exact) return exact_rows(acc, sa, sw, bias, m0, m1, N, y);
      return point_rows(e.space, acc, sa, sw, bias, m0, m1, N, y);
    }
  } else {
    if (kind == EpilogueKind::point) return point_rows(e.space, acc, sa, sw, bias, m0, m1, N, y);
    if (kind == EpilogueKind::vllm_triton && bias == nullptr) {
      return epilogue_detail::triton_f32_rows(acc + m0 * N, sa + m0, sw, m1 - m0, N, y + m0 * N);
    }
  }
  formula::visit_instance(kind, [&](auto k) {
    formula_rows<decltype(k)::value>(acc, sa, sw, bias, e.bias_mode, m0, m1, N, y);
  });
}

template <typename Acc>
void apply_tile(const Epilogue& e, const Acc* acc, const float* sa, const float* sw, const uint16_t* bias,
                int64_t M, int64_t N, uint16_t* y, int threads, int64_t layer_m) {
  QC_INPUT(M >= 0 && N >= 0, "epilogue `{}`: expected M, N >= 0, found M={} N={}", e.name, M, N);
  if (M == 0 || N == 0) return;
  QC_INPUT(acc != nullptr && sa != nullptr && sw != nullptr && y != nullptr,
           "epilogue `{}`: null acc, sa, sw or y pointer", e.name);
  const EpilogueKind kind = checked_kind<Acc>(e, sa, sw, bias, M, N, layer_m);
  // Below ~64K elements a thread costs more than it saves.
  const int t = static_cast<int>(std::min<int64_t>({resolve_threads(threads), M, std::max<int64_t>(1, M * N / 65536)}));
  const int64_t chunk = (M + t - 1) / t;
  parallel_for(t, t, [&](int64_t i) { kind_rows(e, kind, acc, sa, sw, bias, i * chunk, std::min(M, (i + 1) * chunk), N, y); });
}

}  // namespace

uint16_t Epilogue::apply(int64_t acc, float sa, float sw, std::optional<uint16_t> bias_bf16, int64_t m_rows,
                         int64_t n_cols) const {
  if (bias_bf16 && bias_mode == BiasMode::refuse) refuse_bias(*this);
  if (kind == EpilogueKind::exact) return exact_bf16(acc, sa, sw, bias_bf16);
  if (kind == EpilogueKind::point) {
    if (space.conv == AccConversion::exact) return exact_bf16(acc, sa, sw, bias_bf16);
    QC_INPUT(space.input == FormulaInput::integer,
             "epilogue `{}`: a formula over an FP8 GEMM's fp32 result (`d`) given an integer accumulator", name);
    return formula::apply_point(space, acc, sa, sw, bias_bf16.has_value(),
                                bias_bf16 ? formula::bf16_value(*bias_bf16) : 0.0f);
  }
  const EpilogueKind k = formula::instance_kind(kind, m_rows, n_cols);
  const float bias = bias_bf16 ? formula::bf16_value(*bias_bf16) : 0.0f;
  return formula::visit_instance(k, [&](auto kc) {
    return formula::apply<decltype(kc)::value>(acc, sa, sw, bias_mode, bias_bf16.has_value(), bias);
  });
}

std::string_view Epilogue::pow2_class(bool has_bias) const {
  if (kind == EpilogueKind::exact) return "exact";
  if (kind == EpilogueKind::point) {
    // A point shares a named class only where the proof of docs/epilogues.md carries over: the
    // fp32 formulas (a weight scale cast to bf16 keeps a power of two), RNE to bf16. With a bias
    // fused into the last multiply, the FMA's product is exact under a power-of-two `sw` when `sw`
    // is its factor ((acc*sa)*sw: then it is an fp32 add, class product-then-add); otherwise it
    // rounds acc*sa*2^k + bias once (class fma). Anything else claims no class.
    const FormulaPoint& p = space;
    if (p.conv == AccConversion::exact) return "exact";
    if (p.conv != AccConversion::f32_rn || p.sa != Precision::f32 || p.sw == Precision::f16 || p.first != Precision::f32 ||
        p.second != Precision::f32 || p.rounding != OutRounding::rn || p.out != Precision::bf16) {
      return "";
    }
    if (!has_bias) return "scaled-product";
    if (p.bias != BiasPlacement::before_output) return "";
    if (!p.fma || p.grouping == ScaleGrouping::acc_sa_sw) return "product-then-add";
    return "fma";
  }
  if (!has_bias) return "scaled-product";
  switch (bias_mode) {
    case BiasMode::fma: return "fma";
    case BiasMode::muladd: return "product-then-add";
    case BiasMode::after_bf16:
    case BiasMode::exact:
    case BiasMode::refuse: return "";
  }
  return "";
}

std::span<const Epilogue> all_epilogues() { return std::span<const Epilogue>(kEpilogues).first(kIntegerRows); }

const Epilogue& fp8_epilogue() { return kEpilogues[kIntegerRows]; }

std::span<const Epilogue> fp8_epilogues() { return std::span<const Epilogue>(kEpilogues).subspan(kIntegerRows); }

namespace {

// The epilogues of formula strings: one per distinct point, alive as long as the program (verify,
// the arms and the Python binding hold plain references to epilogues).
struct PointEpilogue {
  std::string notation, source;
  Epilogue e;
};

const Epilogue& point_epilogue(const FormulaPoint& p) {
  static std::mutex mutex;
  static std::deque<PointEpilogue> made;
  const std::lock_guard<std::mutex> lock(mutex);
  for (const PointEpilogue& x : made) {
    if (x.e.space == p) return x.e;
  }
  PointEpilogue& x = made.emplace_back();
  x.notation = formula_notation(p);
  x.source = "a point of the formula space (docs/identify.md): " + point_summary(p);
  BiasMode mode = BiasMode::refuse;
  if (p.conv == AccConversion::exact) {
    mode = BiasMode::exact;
  } else if (p.bias == BiasPlacement::before_output) {
    // A second product stored in bf16 or fp16 before the add is a bias after a rounding.
    mode = p.fma ? BiasMode::fma : p.second != Precision::f32 ? BiasMode::after_bf16 : BiasMode::muladd;
  } else if (p.bias == BiasPlacement::after_output) {
    mode = BiasMode::after_bf16;
  }
  x.e = Epilogue{x.notation, EpilogueKind::point, mode, x.notation, x.source, x.notation, {}, p};
  return x.e;
}

}  // namespace

const Epilogue& epilogue(std::string_view name) {
  for (const Epilogue& e : kEpilogues) {
    if (e.name == name) return e;
  }
  if (looks_like_formula(name)) return point_epilogue(parse_formula(name));
  std::string valid;
  for (const Epilogue& e : kEpilogues) {
    if (!valid.empty()) valid += ", ";
    valid += e.name;
  }
  QC_FAIL_INPUT("unknown epilogue `{}`: expected one of {} (FP8: {}), or a formula of the formula space such as `{}` "
                "(docs/identify.md)", name, valid, fp8_epilogue().name, formula_notation(FormulaPoint{}));
}

void apply_epilogue(const Epilogue& e, const int32_t* acc, const float* sa, const float* sw, const uint16_t* bias,
                    int64_t M, int64_t N, uint16_t* y_bf16, int threads) {
  apply_tile(e, acc, sa, sw, bias, M, N, y_bf16, threads, M);
}

void apply_epilogue(const Epilogue& e, const int64_t* acc, const float* sa, const float* sw, const uint16_t* bias,
                    int64_t M, int64_t N, uint16_t* y_bf16, int threads) {
  apply_tile(e, acc, sa, sw, bias, M, N, y_bf16, threads, M);
}

void apply_epilogue(const Epilogue& e, const float* acc, const float* sa, const float* sw, const uint16_t* bias,
                    int64_t M, int64_t N, uint16_t* y_bf16, int threads) {
  apply_tile(e, acc, sa, sw, bias, M, N, y_bf16, threads, M);
}

void check_epilogue_inputs(const Epilogue& e, const float* sa, const float* sw, const uint16_t* bias, int64_t M,
                           int64_t N, int64_t layer_m) {
  (void)checked_kind<float>(e, sa, sw, bias, M, N, layer_m);
}

void apply_epilogue_rows_unchecked(const Epilogue& e, const float* acc, int64_t layer_m, int64_t row0, int64_t rows,
                                   const float* sa, const float* sw, const uint16_t* bias, int64_t N, uint16_t* y_bf16) {
  const EpilogueKind kind = formula::instance_kind(e.kind, layer_m, N);
  QC_CHECK(formula::has_body(kind) || (kind == EpilogueKind::point && e.space.input == FormulaInput::fp32),
           "apply_epilogue_rows_unchecked: epilogue `{}` has no fp32 body (unchecked?)", e.name);
  kind_rows(e, kind, acc + row0 * N, sa + row0, sw, bias, 0, rows, N, y_bf16);
}

void apply_epilogue_rows(const Epilogue& e, const ExactAccumulators& acc, int64_t layer_m, int64_t row0, int64_t rows,
                         const float* sa, const float* sw, const uint16_t* bias, int64_t N, uint16_t* y_bf16,
                         int threads) {
  const size_t have = acc.wide() ? acc.i64.size() : acc.i32.size();
  QC_CHECK(row0 >= 0 && rows >= 0 && N >= 0 && row0 + rows <= layer_m && have == static_cast<size_t>(layer_m * N),
           "apply_epilogue_rows: rows [{}, {}) of a {}x{} layer, {} accumulators", row0, row0 + rows, layer_m, N, have);
  const size_t at = static_cast<size_t>(row0 * N);
  if (acc.wide()) {
    apply_tile(e, acc.i64.data() + at, sa + row0, sw, bias, rows, N, y_bf16, threads, layer_m);
  } else {
    apply_tile(e, acc.i32.data() + at, sa + row0, sw, bias, rows, N, y_bf16, threads, layer_m);
  }
}

}  // namespace qc
