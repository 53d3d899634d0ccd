// C1 for block-scaled FP8 arms (a block model declared, src/epilogue/block_models.hpp): the arm's block
// accumulation measured through its own `run` and exposed fp32 D (`ArmOutput::d`), in two parts
// (docs/accumulation.md, "Measuring a block-scaled arm"):
//   1. structure, at unit scales: every promotion form is then D <- rn32(D + C), so the arm is an
//      unscaled FP8 GEMM whose model `measure_fp8_accumulation` measures with its designed probes (the
//      FP8 prober, run through an adapter that gives the arm each probe as a block-scaled layer of unit
//      scales): its chain per block, and the K products per promotion, the block it accumulates over;
//   2. the promotion form, on operands with random scales (random fraction bits, so that the forms'
//      roundings differ): each form over the measured chain is evaluated by the block model's own text
//      and compared with the arm's D bit for bit; the forms that explain every output are the class.
// `boundary` reports it; identify's block part (#30) is to build on `measure_block_model`.
#pragma once

#include <nlohmann/json.hpp>

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "checks/c1_fp8_model.hpp"
#include "epilogue/block_models.hpp"
#include "qconform/arm.hpp"

namespace qc {

struct BlockMeasureOptions {
  Fp8MeasureOptions structure;  // part 1 (the unit-scale probes and their confirmation)
  // The K block of the probe layers: the arm's own `ArmInfo::block_k`, else this.
  int64_t block_k = 128;
  // Part 2: {M, N, K} of the random-scale operands (K spanning several blocks, N several weight blocks).
  std::vector<std::array<int64_t, 3>> form_shapes = {{64, 48, 512}, {33, 130, 200}};
  uint64_t seed = 20261204;
};

struct BlockFormEvidence {
  std::string form;       // block_promotion_name
  int64_t matching = 0;   // outputs of the arm's D this form (over the measured chain) predicts bit for bit
  std::string first_miss; // "" when it explains every output
};

struct BlockMeasurement {
  ArmInfo arm;
  std::string declared_name;            // the arm's block model
  std::optional<BlockModel> declared;   // when qconform knows it
  Fp8Measurement structure;             // part 1: the unit-scale model
  bool structure_measured = false;
  int64_t block_k_probed = 0;           // the K block of the probe layers
  int64_t promotion_interval = 0;       // measured products per promotion at unit scales (0: never promoted)
  std::string chain;                    // the measured chain: a named model or its formula
  std::optional<Fp8AccumModel> chain_model;
  std::string chain_note;               // how the chain was found when not by the prober's structures
  std::vector<BlockFormEvidence> forms;  // part 2, one per form
  std::vector<std::string> form_class;   // the forms that explain every output
  int64_t form_outputs = 0;
  std::string verdict;  // "matches declaration", "differs from declaration", "not a block model of this family",
                        // "not measured" (the arm exposes no fp32 D)
  std::string reason;   // one paragraph
  double seconds = 0;
};

// A block-scaled layer of random finite e4m3 codes and scales with random fraction bits in [2^-12, 2^-4]
// (the forms' roundings differ at almost every output then), per-token-group:`block_k` activations and
// per-block:`block_n`x`block_k` weights; `boundary`'s form operands and identify's held-out block layers.
LayerOperands random_block_layer(int64_t m, int64_t n, int64_t k, int64_t block_k, int64_t block_n, uint64_t seed);

// The probes of `m` that `chain`, from zero over every `interval` products and promoted into fp32 (every
// form at unit scales: the block model's own text with unit scales), does not predict (through the bf16
// output when `through_run`); the first `keep` printed into `first`, counting stops after `stop_after`.
int64_t probe_misses(const Fp8Measurement& m, const Fp8AccumModel& chain, int64_t interval, bool through_run,
                     nlohmann::json* first, size_t keep, int64_t stop_after = INT64_MAX);
// The first named chain of the accumulation table that predicts every probe of `m` over `interval`.
std::optional<NamedAccumModel> named_chain_at(const Fp8Measurement& m, int64_t interval, bool through_run);

// Measures a block-scaled FP8 arm (a block model declared or not: QC_INPUT when it is no block-scaled arm).
BlockMeasurement measure_block_model(Arm& arm, const BlockMeasureOptions& options = {});
nlohmann::json to_json(const BlockMeasurement& r);
// The printout a person reads: block, chain, form with its evidence, verdict.
std::string describe(const BlockMeasurement& r);

}  // namespace qc
