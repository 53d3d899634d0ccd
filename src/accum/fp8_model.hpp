// FP8 accumulation models (include/qconform/accumulation.hpp, `Fp8AccumModel`): the named table,
// the printed formulas, validation, the scalar reference and the fast evaluation that every
// `cpu:fp8-<model>` arm, `sweep` and the GPU evaluation's tests use. docs/accumulation.md.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "qconform/accumulation.hpp"
#include "qconform/operands.hpp"

namespace qc {

// The operands of one FP8 GEMM: `a` [M,K] and `w` [N,K] row-major codes; d [M,N] fp32.
struct Fp8Gemm {
  const uint8_t* a = nullptr;
  Fp8Format a_format = Fp8Format::e4m3;
  const uint8_t* w = nullptr;
  Fp8Format w_format = Fp8Format::e4m3;
  AccumShape s{0, 0, 0};
};

// The FP8 codes an FP8 arm (or an accumulation model) multiplies for one layer: an FP8 layer's own
// codes and formats (borrowed), or, for an INT8 layer, its codes re-encoded as the e4m3fn codes of
// the same values (stored here; taken only when every code is exact in e4m3, so that both sides of
// a pair see equal operands).
struct Fp8LayerCodes {
  std::span<const uint8_t> a, w;
  Fp8Format a_format = Fp8Format::e4m3, w_format = Fp8Format::e4m3;
  std::vector<uint8_t> a_store, w_store;  // the re-encoded INT8 codes (a, w view them)
  AccumShape s{0, 0, 0};
  Fp8Gemm gemm() const { return {a.data(), a_format, w.data(), w_format, s}; }
  // "e4m3 x e4m3 (FP8 layer)", "int8 codes re-encoded to e4m3fn, exact": for run records.
  std::string description;
  Fp8LayerCodes() = default;
  Fp8LayerCodes(const Fp8LayerCodes&) = delete;  // a, w may view a_store, w_store: a copy would too
  Fp8LayerCodes& operator=(const Fp8LayerCodes&) = delete;
  Fp8LayerCodes(Fp8LayerCodes&&) = default;  // a moved vector keeps its buffer
  Fp8LayerCodes& operator=(Fp8LayerCodes&&) = default;
};
// QC_INPUT naming `who` (the arm), the layer, the field, the coordinate and the code for an INT8
// code with no exact e4m3 encoding.
Fp8LayerCodes fp8_layer_codes(const std::string& who, const LayerOperands& ops);
Fp8Format fp8_format(ElementType t);  // e4m3 or e5m2; QC_CHECK for int8

struct NamedAccumModel {
  std::string name;         // "hopper-fp8-chain", "blocked-128", ...
  Fp8AccumModel model;
  std::string description;  // where the model comes from
};

// cuBLASLt's split-K cuts K into ranges of whole multiples of this many products.
inline constexpr int32_t kCublasLtSplitGranule = 128;

// The rows with a fixed name: hopper-fp8-chain, hopper-fp8-promote4, exact, sequential. The
// parameterised families blocked-<chunk> (promotion every <chunk> products, fp32 sums) and
// split-k-<splits>, and hopper-fp8-chain-splitk-<s> / hopper-fp8-promote4-splitk-<s> (the Hopper
// models over cuBLASLt's split-K partition of K into s ranges) are made by `fp8_accumulation_model`.
const std::vector<NamedAccumModel>& fp8_accumulation_models();
// A model by name (a fixed row, blocked-<c> or split-k-<s>); QC_INPUT listing the names otherwise.
NamedAccumModel fp8_accumulation_model(std::string_view name);
// The model a cuBLASLt FP8 GEMM declared to follow `model` (hopper-fp8-chain or -promote4) follows in
// a run whose algorithm has this split-K count and reduction scheme (CUBLASLT_ALGO_CONFIG_SPLITK_NUM,
// _REDUCTION_SCHEME): `model` for one pass (1, scheme 0), `<model>-splitk-<s>` for split-K s with the
// partials reduced in the compute type (scheme 2, CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE: measured);
// empty, with `refusal` saying why, for anything else (not measured, so not claimed).
std::string cublaslt_split_k_model(std::string_view model, long long split_k, long long reduction_scheme,
                                   std::string& refusal);

// Every model spelled out, `fp8-model(step_k=..,term_bits=..,...)` with every field of
// `Fp8AccumModel` (fp8_model_spelling.cpp): `fp8_accumulation_model` reads it back, so a measured
// model without a name can be declared (qconform identify). `parse_fp8_model_spelling`: QC_INPUT
// naming the field for a bad spelling.
std::string fp8_model_spelling(const Fp8AccumModel& m);
bool is_fp8_model_spelling(std::string_view text);
Fp8AccumModel parse_fp8_model_spelling(std::string_view text);

// The names `qconform arms` lists (fixed rows, then "blocked-<chunk>", "split-k-<splits>").
std::vector<std::string> fp8_accumulation_model_names();

// The model in the notation of the epilogue formulas: rz13(x) = x truncated toward zero to 13
// fraction bits relative to its own exponent, rn23 = round to nearest even (an fp32 rounding),
// rz[E-13] = truncated to a multiple of 2^(E-13), e(x) the exponent.
std::string accumulation_formula(const Fp8AccumModel& m);

// QC_INPUT unless the parameters are evaluable: result_bits and promote_bits in 1..23, term_bits
// -1 (exact) or 0..40 with step_k in 1..64, step_k >= 0, promote_steps >= 0, splits >= 1.
void validate_accumulation_model(const Fp8AccumModel& m, std::string_view name);

// QC_INPUT for a negative shape, splits > K (K > 0), or a NaN / infinity code (naming the
// operand, its coordinate and the code): the models take finite FP8 values only.
void validate_fp8_gemm(const Fp8AccumModel& m, const Fp8Gemm& g);
// Its two halves, for codes validated once and evaluated under several models: the shape and every
// code (`validate_fp8_codes`), and the model against the shape (`validate_fp8_model_for`).
void validate_fp8_codes(const Fp8Gemm& g);
void validate_fp8_model_for(const Fp8AccumModel& m, AccumShape s);

// An interleaved model (`interleave` > 0) as K order: the same model, interleave 0 and one range. Over a
// range of `len` products gathered in step order (per pair of steps the first step's step_k positions,
// then the second's, a position past the range a zero code: no product), padded to
// `gathered_steps_k(m, len)` columns, it gives the interleaved model's result for that range (the CPU
// fast path and the GPU block evaluation gather so; `accum_model::interleaved_offset` places them).
Fp8AccumModel in_k_order(const Fp8AccumModel& m);
int64_t gathered_steps_k(const Fp8AccumModel& m, int64_t len);

// The scalar reference: `accum_model::evaluate` (the header text) per output, one thread.
void fp8_model_reference(const Fp8AccumModel& m, const Fp8Gemm& g, float* d);

// Which evaluation `fp8_model_evaluate` uses for a model and operands.
enum class Fp8FastPath {
  steps_f64,  // finite term_bits: Highway fp64 lanes, per-step sums exact integers
  fp32_sum,   // exact terms, k = 1, fp32 results: Highway fp32 lanes (sequential / blocked / split-K)
  exact_f64,  // one exact step over K (e4m3 x e4m3, K <= 2^17): Highway fp64 lanes, exact sums
  reference,  // none of the above: the scalar reference on every thread
};
Fp8FastPath fp8_fast_path(const Fp8AccumModel& m, const Fp8Gemm& g);
const char* fast_path_name(Fp8FastPath p);

// The fast evaluation: bit-identical to `fp8_model_reference` (tests/unit/test_accumulation_model.cpp).
// `threads` = 0: every hardware thread.
void fp8_model_evaluate(const Fp8AccumModel& m, const Fp8Gemm& g, float* d, int threads = 0);

// The Highway target the fast evaluation's dispatcher selects here.
std::string fp8_model_target();

}  // namespace qc
