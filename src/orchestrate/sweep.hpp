// Divergence versus reduction depth (paper Section VII): for a pair of arms of one format, run
// both on the same operands at each depth K and seed, count what differs and by how much, then
// fit prevalence versus K (fits.hpp). docs/sweep.md describes the operands, the FP8 epilogue and
// the JSON; docs/performance.md ("Depth sweep") the measured times.
//
// Pairs:
//   INT8  any two INT8 arms by label (`cpu:vllm-cutlass,cpu:vllm-triton`, `onednn:s8s8`, ...),
//         operands from `synth_operands` with shapes "MxNxK" and the seed.
//   FP8   the arms that declare an accumulation model (docs/accumulation.md), all from the one
//         arm registry: `cpu:fp8-<model>` (hopper-fp8-chain, hopper-fp8-promote4, exact,
//         sequential, blocked-<chunk>, split-k-<splits>), the old labels `fp8:sequential`,
//         `fp8:blocked-<chunk>`, `fp8:split-k-<splits>`, `fp8:exact` as aliases with their old
//         records; on CUDA builds `cuda:cublaslt-fp8` and `cuda:cublaslt-fp8-fastacc`
//         (cuBLASLt's fp32 output). Every FP8 arm's fp32 result d (`Arm::fp8_accumulate`) goes
//         through one epilogue: y = bf16(rn32(rn32(d·s_a)·s_w)).
//   block-scaled FP8  two arms that declare block models (`cpu:fp8-block-<form>[+<chain>]`, block-scaled
//         Python callables and plugins), operands from `synth_operands` as `synth --element e4m3
//         --act-scale per-token-group:<b> --weight-scale per-block:<b>x<b>` (vLLM's group quantizer,
//         DeepGEMM's block quantizer; `block`, default 128), each arm's `run` (bf16 = RNE(D)); the
//         explained column from each arm's block model under the cell's scales.
//   A pair that mixes the formats is an input error.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "stats/fits.hpp"
#include "qconform/accumulation.hpp"

namespace qc {

enum class SweepFormat { int8, fp8, fp8_block };

// A realistic FP8 (e4m3fn) layer: activations [M,K] and weights [N,K] drawn Gaussian (Irwin–Hall
// from splitmix64, integer arithmetic only) with a few heavy outlier activation channels,
// per-token / per-channel fp32 scales s = absmax / 448, codes = f32_to_e4m3fn(x / s, saturate).
struct Fp8Operands {
  int64_t m = 0, n = 0, k = 0;
  std::vector<uint8_t> a, w;       // e4m3fn bit patterns, row-major
  std::vector<float> a_scale;      // [m]
  std::vector<float> w_scale;      // [n]
};
Fp8Operands synth_fp8_operands(int64_t m, int64_t n, int64_t k, uint64_t seed);
// The same operands as an FP8 (e4m3 x e4m3) layer named `name`, owning its bytes.
LayerOperands synth_fp8_layer(const std::string& name, int64_t m, int64_t n, int64_t k, uint64_t seed,
                              std::string source);

// True when `label` names an FP8 arm (one that declares an accumulation model); QC_INPUT for an
// unknown label (the registry's message).
bool is_fp8_arm(std::string_view label);

// y[m,n] = bf16(rn32(rn32(d[m,n]·a_scale[m])·w_scale[n])), every step round-to-nearest-even.
std::vector<uint16_t> fp8_epilogue_bf16(const float* d, const std::vector<float>& a_scale,
                                        const std::vector<float>& w_scale);

// Magnitude statistics of two bf16 outputs (a is the reference side for near-zero, as in
// `compare_bf16`): all relative statistics exclude near-zero elements (|a| < 1% of RMS(a)).
struct SweepCell {
  int64_t k = 0;
  uint64_t seed = 0;
  int64_t total = 0;           // M·N
  int64_t differing = 0;       // bit patterns differ
  int64_t nonfinite = 0;       // differing pairs with a NaN or inf on either side
  int64_t near_zero_diff = 0;  // differing, finite, near zero
  int64_t measured = 0;        // differing, finite, not near zero: the magnitude population
  int64_t ge2ulp = 0;          // of those, at ordered bf16 distance >= 2
  int64_t max_ulp = 0;         // over all finite pairs
  double max_rel = 0;          // over `measured`
  double median_rel = 0;       // over `measured` (NaN when empty)
  double seconds = 0;          // wall time of both arms on this cell
  // Of the `differing` elements, those whose two values the arms' declared models predicted exactly
  // (arm A's output == A's model + epilogue and arm B's == B's); -1 when not both arms declare a model
  // for this cell (an INT8 arm without a declared formula, an FP8 run whose record refused its model),
  // `explained_note` then says why.
  int64_t explained = -1;
  std::string explained_note;
  double prevalence() const { return total ? static_cast<double>(differing) / static_cast<double>(total) : 0; }
  double share_ge2ulp() const;  // ge2ulp / measured (NaN when measured == 0)
};
SweepCell measure_cell(const std::vector<uint16_t>& a, const std::vector<uint16_t>& b, int64_t rows, int64_t cols);

struct SweepOptions {
  std::string arm_a, arm_b;
  std::vector<int64_t> ks{512, 1024, 2048, 4096, 8192, 16384, 32768};
  int64_t m = 512, n = 1024;
  int seeds = 5;
  uint64_t first_seed = 0;  // seeds first_seed .. first_seed + seeds − 1
  int64_t block = 128;      // block-scaled pairs: 1 x block activation groups, block x block weight blocks
  double confidence = 0.95;
  int threads = 0;
  // The "explained" column: evaluate each arm's declared model (FP8: its accumulation model + the
  // `fp8-scaled` epilogue, on the GPU when one is usable; INT8: its declared formula on the exact
  // accumulators) and count the differing elements both models predicted. Costs one model evaluation
  // per arm and cell; `sweep --no-explained` turns it off.
  bool explained = true;
  // Called after every (K, seed) cell with (done, total, "K=... seed=...").
  std::function<void(size_t, size_t, const std::string&)> progress;
};

struct SweepRow {
  int64_t k = 0;
  int64_t differing = 0, total = 0;   // pooled over seeds
  double prevalence = 0;              // pooled (= seed mean: every seed has M·N elements)
  stats::BinomialInterval ci;         // Clopper–Pearson on the pooled counts
  double share_ge2ulp_mean = 0;       // seed means (NaN seeds skipped)
  double ge2ulp_of_all = 0;           // pooled ge2ulp / total
  double max_rel_mean = 0, max_rel_max = 0, median_rel_mean = 0;
  int64_t max_ulp = 0;
  // Pooled over the seeds whose cells have an `explained` count: differing elements there, and of
  // them the explained ones.
  int64_t explained = 0, explained_of = 0;
  int explained_cells = 0;  // seeds of this K with an `explained` count
};

struct SweepResult {
  SweepOptions options;
  SweepFormat format = SweepFormat::int8;
  std::vector<SweepCell> cells;  // K-major, then seed
  std::vector<SweepRow> rows;
  stats::FitReport fits;
  stats::ChiSquareTest chi_square;
  stats::BinomialInterval overall;
  nlohmann::json arms = nlohmann::json::object();  // identity of what ran (RunRecords / specs)
  double seconds = 0;
};

// Parses "A,B" and the format of the pair (QC_INPUT for unknown labels or mixed formats).
SweepFormat sweep_pair_format(const std::string& arm_a, const std::string& arm_b);
SweepResult run_sweep(const SweepOptions& options);

// The JSON for the report's figure (`schema_version: 1`, `kind: "qconform-sweep"`).
nlohmann::json to_json(const SweepResult& r);
// The human summary: the table per K, the fits table, the chi-square line.
std::string format_sweep(const SweepResult& r);

}  // namespace qc
