// The formula space of docs/identify.md as data: every point (`FormulaPoint`, the arithmetic is
// `formula::apply_point` in qconform/epilogue_formula.hpp), its notation (the notation of
// `qconform arms`, printed from that very text read symbolically) and the parser back from it, the
// equivalence class of a point (the same text read with the simplifications that hold for every
// operand in jurisdiction), and the point of each named row of the formula table.
#pragma once

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "qconform/epilogue.hpp"

namespace qc {

// Every point of the space over one accumulator type, in a fixed order: the product of conversion
// (integer: fp32 RNE, fp32 RZ, bf16, fp16, through fp32 to bf16, through fp32 to fp16; an FP8 GEMM's
// fp32 d: kept, bf16, fp16) x activation-scale cast x weight-scale cast (fp32, bf16, fp16) x
// grouping (3) x precision of the first product (fp32, bf16, fp16) x the tail (no bias, bias after
// the output rounding, or bias added before it, each with the second product in fp32, bf16 or
// fp16; or the bias add fused with the second product into one FMA: 10) x output rounding (RNE, RZ)
// x output type (bf16, fp16), then, for integers, the `exact` point. Sizes in docs/identify.md.
const std::vector<FormulaPoint>& formula_space(FormulaInput input = FormulaInput::integer);

// The point's notation, e.g. `bf16(rn32(sa * rn32(f32(acc) * sw)))`: the formula with a bias when
// the point takes one (drop the bias term for the formula without one).
std::string formula_notation(const FormulaPoint& p);

// The point a notation string denotes (either space: `acc` is an integer accumulator, `d` an FP8
// GEMM's fp32 result). Whitespace and the order of the operands of `*`, `+` and the two factors of
// `fma` do not matter; a name of the table (`vllm-cutlass`, `fp8-scaled`) is its point. QC_INPUT
// naming the column for a syntax error, and saying what is not in the space otherwise.
FormulaPoint parse_formula(std::string_view text);
// True when `text` looks like a formula rather than a name (it has a parenthesis).
bool looks_like_formula(std::string_view text);

// The equivalence class of a point: two points with the same key give the same output for every
// operand in jurisdiction (finite scales > 0, every intermediate zero or normal in its format, no
// overflow). Computed by reading `apply_point` symbolically with exact-arithmetic rules: a product
// whose operands' significands fit 24 bits is exact in fp32, a value already representable in a
// format is unchanged by rounding to it, products of exact products reassociate, `*`, `+` and the
// factors of `fma` commute, an FMA of an exact product is a rounded add. Keys are conservative:
// equal keys prove equality; different keys do not prove a difference (identify looks for an
// operand that shows one).
std::string formula_class_key(const FormulaPoint& p);

// The parameters of a point in words, for the printout and JSON.
nlohmann::json describe_point(const FormulaPoint& p);
std::string point_summary(const FormulaPoint& p);  // one line: "acc f32 RNE; sa fp32; sw fp32; ..."

// The point of a named row (its `point` string parsed); nullopt for a row without one.
std::optional<FormulaPoint> row_point(const Epilogue& e);
std::optional<FormulaPoint> row_swap_point(const Epilogue& e);
// When a row with a swap point computes it, in words ("under swap-AB (M <= 16, or M <= 64 with N >
// 1280)", "when PyTorch runs the problem transposed (...)"), and the name of its dispatch ("swap-AB",
// "transpose"): the one text of the printouts. `formula::dispatch_swaps` is the rule itself.
std::string_view dispatch_condition(const Epilogue& e);
std::string_view dispatch_name(const Epilogue& e);

}  // namespace qc
