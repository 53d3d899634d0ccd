// Epilogues: the named, bit-exact formulas that turn an exact integer accumulator into a bf16
// output, `y = f(acc, sa, sw, bias)`, one per production engine path, plus `exact`, the
// correctly rounded result.
//
// One `Epilogue` object drives the CPU emulation and selects the CUDA template instance, so the
// set is a fixed table: `all_epilogues()` enumerates it, `(kind, bias_mode)` identifies an
// instance. Formulas are in `../shared/reference/production-epilogues.md`; the rounding points,
// bias behaviour and the power-of-two argument are written up in `docs/epilogues.md`.
//
// The fp32 arithmetic itself is `formula::apply` in `epilogue_formula.hpp`, the one text the CPU
// and the CUDA kernels compile: every `apply` below dispatches to it (`exact` excepted, which is
// integer arithmetic and host-only). `f32(acc)` converts an int32 or int64 accumulator to fp32
// with one round-to-nearest-even; an FMA appears only where the formula says so.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

#include "qconform/accumulation.hpp"
#include "qconform/epilogue_formula.hpp"  // EpilogueKind, BiasMode and the arithmetic (host and device)

namespace qc {

struct Epilogue {
  std::string_view name;     // "vllm-cutlass", "vllm-cutlass-fma", ..., "exact"
  EpilogueKind kind;
  BiasMode bias_mode;
  std::string_view formula;  // human-readable, rounding points explicit
  std::string_view source;   // engine and code path it models
  // This row as a point of the formula space, in its notation (`qconform arms` prints it;
  // src/epilogue/formula_space.hpp parses it), and, for a row that dispatches on the GEMM's shape
  // (`sglang-sm90`), the point it computes under swap-AB. Tested: the named body and the point give
  // the same bits (tests/unit/test_formula_space.cpp).
  std::string_view point = {};
  std::string_view swap_point = {};
  // `kind == EpilogueKind::point`: the point this epilogue evaluates (a formula string's epilogue).
  FormulaPoint space = {};

  // One output element (bf16 bit pattern). `bias_bf16` only when the layer has a bias; `m_rows`
  // and `n_cols` are the whole GEMM's M and N (only `sglang-sm90` reads them, for its swap-AB
  // dispatch). Total for every finite input (any sign, zero, subnormal scales, any int64 acc);
  // non-finite scales or bias follow IEEE (the result is inf or NaN). Throws QC_INPUT only for a
  // bias given to a formula whose `bias_mode` is `refuse`.
  uint16_t apply(int64_t acc, float sa, float sw, std::optional<uint16_t> bias_bf16, int64_t m_rows,
                 int64_t n_cols) const;

  // True when the bias is added after a rounding to bf16 (`vllm-triton`): with a bias, the
  // power-of-two commutation argument cannot hold for this formula.
  bool bias_after_rounding() const { return bias_mode == BiasMode::after_bf16; }
  bool accepts_bias() const { return bias_mode != BiasMode::refuse; }

  // Power-of-two commutation class. Guarantee (proved in docs/epilogues.md, tested in
  // tests/unit/test_epilogue.cpp): if every weight scale `sw` is a power of two, and every fp32
  // intermediate of the formulas involved is zero or normal (no fp32 subnormal, no overflow),
  // two formulas with the SAME non-empty class return the same bits for every element. The
  // classes: without bias every fp32 formula is "scaled-product" (they all reduce to
  // `bf16(rn32(f32(acc)*sa) * sw)`); with a bias, "product-then-add" (`-muladd`, `sglang-sm89`),
  // "fma" (`-fma`), and "" for `vllm-triton` (bias after a bf16 rounding: no class, never
  // commutable) and for formulas refusing a bias. `exact` is class "exact": it rounds once where
  // the fp32 formulas round twice (fp32, then bf16), so it differs from "scaled-product" at
  // double-rounding points even under power-of-two scales; it agrees with them whenever
  // `f32(acc)*sa` is exact in fp32 (e.g. `sa` also a power of two and |acc| <= 2^24).
  std::string_view pow2_class(bool has_bias) const;
};

// The epilogue named `name` (the integer rows and `fp8-scaled`), or the epilogue of a formula string in the notation of the formula
// space (`bf16(rn32(sa * rn32(f32(acc) * sw)))`, docs/identify.md): such an epilogue is created
// once per distinct formula and lives as long as the program. QC_INPUT error listing the valid
// names, or saying why the formula is not a point of the space, otherwise.
const Epilogue& epilogue(std::string_view name);
// Every epilogue over an integer accumulator, in a fixed order (the registry the INT8 arms and
// CUDA instances enumerate).
std::span<const Epilogue> all_epilogues();
// The FP8 scaled epilogue, `fp8-scaled`: the row of the same table that scales the fp32 result `d`
// of an FP8 GEMM, `bf16(rn32(rn32(d * sa) * sw))` (the Triton order). The FP8 sweep applies it on
// the host (`apply_epilogue` over `const float*`), the cuBLASLt FP8 arms on the device when
// cuBLASLt cannot scale itself. Not in `all_epilogues()`: no INT8 arm is named after it.
const Epilogue& fp8_epilogue();
// The FP8 rows of the table: `fp8-scaled` first, then the epilogues real FP8 kernels declare
// (`torch-rowwise`: PyTorch's CUTLASS rowwise tree, the `cuda:cutlass-fp8-rowwise` arms'). `epilogue`
// finds them by name too.
std::span<const Epilogue> fp8_epilogues();

// Whole tile, row-major: y[m,n] = apply(acc[m,n], sa[m], sw[n], bias[n], M, N).
// `bias` may be null. Validates first (QC_INPUT): every `sa`, `sw` finite and > 0, every bias
// finite, and a bias only for formulas that accept one. `threads` = 0: hardware concurrency.
void apply_epilogue(const Epilogue& e, const int32_t* acc, const float* sa, const float* sw,
                    const uint16_t* bias, int64_t M, int64_t N, uint16_t* y_bf16, int threads = 0);
void apply_epilogue(const Epilogue& e, const int64_t* acc, const float* sa, const float* sw,
                    const uint16_t* bias, int64_t M, int64_t N, uint16_t* y_bf16, int threads = 0);
// The same over an fp32 accumulator (an FP8 GEMM's result; `fp8_epilogue()`): `f32(acc)` is the
// value itself. QC_INPUT for `exact`, whose integer arithmetic needs an integer accumulator.
void apply_epilogue(const Epilogue& e, const float* acc, const float* sa, const float* sw,
                    const uint16_t* bias, int64_t M, int64_t N, uint16_t* y_bf16, int threads = 0);
// Rows [row0, row0 + rows) of a layer of `layer_m` x N exact accumulators (either width) into
// y_bf16[rows, N]; `acc` and `sa` are the whole layer's. A formula that dispatches on the layer's
// shape (sglang-sm90) sees `layer_m`, not the block: blocks computed this way equal the whole tile.
void apply_epilogue_rows(const Epilogue& e, const ExactAccumulators& acc, int64_t layer_m, int64_t row0, int64_t rows,
                         const float* sa, const float* sw, const uint16_t* bias, int64_t N, uint16_t* y_bf16,
                         int threads = 0);

// The checks `apply_epilogue` over an fp32 accumulator makes before it computes anything (QC_INPUT,
// the same messages: every `sa`, `sw` finite and > 0, every bias finite and accepted, a formula that
// takes an fp32 accumulator), for M rows of a layer of `layer_m` rows; for a caller that then applies
// the epilogue a few rows at a time with `apply_epilogue_rows_unchecked` (verify's element pass, so
// that the rows it compares stay in cache).
void check_epilogue_inputs(const Epilogue& e, const float* sa, const float* sw, const uint16_t* bias, int64_t M,
                           int64_t N, int64_t layer_m);
// Rows [row0, row0 + rows) of a `layer_m` x N fp32 accumulator tile into y_bf16[rows, N], on the
// calling thread, without those checks (`check_epilogue_inputs` over the tile first); `acc` and `sa`
// are the whole layer's. The same bits as `apply_epilogue` on the whole tile.
void apply_epilogue_rows_unchecked(const Epilogue& e, const float* acc, int64_t layer_m, int64_t row0, int64_t rows,
                                   const float* sa, const float* sw, const uint16_t* bias, int64_t N, uint16_t* y_bf16);

// The correctly rounded bf16 of the real number acc·sa·sw (+ bias), one RNE rounding (the
// `exact` formula, exposed for tests and for other parts that need a reference). Signed zeros:
// the product's zero carries sign(sa) XOR sign(sw) (an integer acc has no sign on zero), and a
// zero sum follows IEEE round-to-nearest: (+0)+(−0) = +0, (−0)+(−0) = −0, x + (−x) = +0.
uint16_t exact_bf16(int64_t acc, float sa, float sw, std::optional<uint16_t> bias_bf16);

namespace detail {
// `exact_bf16` without its fp64 fast path (|acc| < 2^29, not on a midpoint): the integer path
// alone, exposed so that tests can check it on every input, not only where the fast path declines.
uint16_t exact_bf16_integer(int64_t acc, float sa, float sw, std::optional<uint16_t> bias_bf16);
}  // namespace detail

}  // namespace qc
