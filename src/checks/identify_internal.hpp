// The parts of `qconform identify` (docs/identify.md) that its files share: the candidates and
// observations, the probe design (identify_probes.cpp), the elimination (identify_elimination.cpp),
// the confirmation and separation (identify_confirmation.cpp), the diagnosis of an unexplained arm
// (identify_diagnosis.cpp), FP8 arms (identify_fp8.cpp) and the printout (identify_printout.cpp).
// Internal to src/checks: the public interface is identify.hpp.
#pragma once

#include <nlohmann/json.hpp>

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "checks/c1_fp8_model.hpp"
#include "checks/identify.hpp"
#include "epilogue/block_models.hpp"
#include "qconform/accumulation.hpp"
#include "qconform/epilogue.hpp"
#include "qconform/epilogue_formula.hpp"
#include "qconform/numerics.hpp"
#include "qconform/operands.hpp"
#include "synth/synth.hpp"

namespace qc::identify_detail {

constexpr int64_t kCols = 16;       // N of every probe (CUDA arms need N and K multiples of 16)
constexpr int64_t kRowsPlain = 40;  // M of the probes on the first side of every dispatch (no swap-AB, not transposed)
constexpr int64_t kRowsSwap = 8;    // M of the integer probes with swap-AB (`sglang_sm90_swaps`)
constexpr int64_t kRowsSwapFp8 = 72;  // M of the FP8 probes PyTorch's rowwise dispatch runs transposed (N = kCols)
constexpr int kTries = 24;          // accumulators tried per element when designing
constexpr int kPairTries = 4;       // accumulators built to separate a random pair of classes, per element
constexpr size_t kMaxReps = 400;    // class representatives the design scores against
constexpr int kSeparationTries = 4000;   // operands tried per pair of classes left after the probes
constexpr int kSeparationRounds = 4;     // separation probes at most (each can leave new pairs)
constexpr size_t kSeparationPairs = 64;  // pairs of classes searched per round
constexpr int kSeparationAccBits = 28;   // |acc| a separation probe builds (K about 2^18)

// FP8 epilogue probes (identify_probes.cpp): each element's `d` is the measured model's sum of
// kFp8Terms terms, term j of column n at position j * kFp8Block + n: a[m, pos] an e4m3 code times
// w[n, pos] = 2^(8 - 4j), so that the terms of one element cover 20 bits.
constexpr int kFp8Terms = 5;
constexpr int64_t kFp8Block = 128;
constexpr int64_t kFp8K = kFp8Terms * kFp8Block;
using Fp8Recipe = std::array<uint8_t, kFp8Terms>;  // one element's a codes, term by term

struct Candidate {
  FormulaPoint main, swapped;
  bool dispatch = false;  // a named shape dispatch (`sglang-sm90`, `torch-rowwise`): `swapped` on its other side
  EpilogueKind via = EpilogueKind::point;  // the dispatching row's kind (`formula::dispatch_swaps`)
  std::string notation, key, plain_key;
  bool alive = true;
  bool plain_alive = true;  // explains every output of the observations without a bias
  int64_t mismatches = 0, compared = 0;
  const FormulaPoint& at(int64_t m, int64_t n) const {
    return dispatch && formula::dispatch_swaps(via, m, n) ? swapped : main;
  }
  bool refuses_bias() const { return main.bias == BiasPlacement::none && main.conv != AccConversion::exact; }
};

// One output of point `p` (the `exact` point included).
uint16_t eval(const FormulaPoint& p, int64_t acc, float sa, float sw, std::optional<uint16_t> bias);

// One layer through the arm: the exact accumulators (an FP8 arm: the measured model's fp32 `d`), the
// scales and bias, what the arm returned.
struct Observation {
  std::string id;
  bool heldout = false;
  int64_t m = 0, n = 0, k = 0;
  std::vector<int64_t> acc;  // exact (INT8)
  std::vector<float> d;      // FP8: the arm's own d where it offers fp8_accumulate, else the measured model's
  std::vector<float> sa, sw;
  std::vector<uint16_t> bias;  // empty: no bias
  bool refused = false;
  std::string refusal;
  std::vector<uint16_t> y;
  // The exposed accumulators against their prediction: INT8, the exact dot products; FP8 (an arm with
  // an unscaled entry), the measured model's d.
  int64_t acc_exposed = 0, acc_wrong = 0;
  std::vector<std::string> acc_first;
  std::optional<uint16_t> bias_at(int64_t n) const { return bias.empty() ? std::nullopt : std::optional<uint16_t>(bias[n]); }
  int64_t size() const { return m * n; }
};

// "0x3f80 (1)": an output bit pattern and its value in its format.
std::string bits16(uint16_t b, Precision out);

// Point `p` on element (i, j) of `o` (its accumulator or `d`, as `p.input` says) with bias `bias`.
uint16_t eval_element(const FormulaPoint& p, const Observation& o, int64_t i, int64_t j, std::optional<uint16_t> bias);
// The accumulator of element e as printed: the integer, or `d` in hex.
std::string accumulator_text(const Observation& o, size_t e);

// Elements of `o` where candidate `c` disagrees (the refusal counts as every element).
int64_t disagreements(const Candidate& c, const Observation& o, int64_t stop_after = INT64_MAX);

// ---- probe design (identify_probes.cpp) ----------------------------------------------------------

struct ProbeSpec {
  int64_t m = 0;
  std::vector<float> sa, sw;
  std::vector<uint16_t> bias;
  std::vector<int64_t> target;     // [m, kCols] (INT8)
  std::vector<Fp8Recipe> recipes;  // [m, kCols] (FP8)
};

// int8 operands whose exact accumulators are `target` (the layout in identify_probes.cpp).
LayerOperands build_probe(const ProbeSpec& s, const std::string& name);
// e4m3 operands with the FP8 layout above: element (m, n)'s terms are `recipes[m * kCols + n]`.
LayerOperands build_fp8_probe(const ProbeSpec& s, const std::string& name);
// The `d` model `m` computes for one element with `recipe` in column `n` of that layout.
float fp8_recipe_d(const Fp8AccumModel& m, const Fp8Recipe& recipe, int64_t n);

class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t next() { return splitmix64(state_); }
  double uniform() { return static_cast<double>(next() >> 11) * 0x1p-53; }
  int64_t below(int64_t n) { return static_cast<int64_t>(next() % static_cast<uint64_t>(n)); }
  // A random fp32 with a full 24-bit significand, log-uniform in [2^lo, 2^hi).
  float scale(int lo, int hi);

 private:
  uint64_t state_;
};

// An accumulator worth trying (near a power of two, or a random magnitude), |acc| <= `limit`.
int64_t try_acc(Rng& rng, int64_t limit);
// An accumulator on which points `a` and `b` give different outputs at (sa, sw, bias), if the
// bisection search finds one (identify_probes.cpp says how).
std::optional<int64_t> separating_acc(const FormulaPoint& a, const FormulaPoint& b, float sa, float sw,
                                      std::optional<uint16_t> bias, Rng& rng, int64_t limit = INT64_MAX,
                                      int binades = 23);

// An operand of one output element: the accumulator (INT8), or `d` and the codes that make it (FP8).
struct Operand {
  int64_t acc = 0;
  float d = 0;
  Fp8Recipe recipe{};
  float sa = 1, sw = 1;
  std::optional<uint16_t> bias;
};
uint16_t eval(const FormulaPoint& p, const Operand& o);
// Why `o` is outside jurisdiction for point `p` (empty: inside), `acc_bits` the accumulator bound.
std::vector<std::string> outside_jurisdiction(const FormulaPoint& p, const Operand& o, int acc_bits);

// ---- the identification -----------------------------------------------------------------------------

class Identifier {
 public:
  Identifier(Arm& arm, const IdentifyOptions& o) : arm_(arm), options_(o), rng_(o.seed) {}

  IdentifyResult run();

 private:
  // identify_elimination.cpp
  void make_candidates();
  Observation observe(const LayerOperands& ops, std::string id, bool heldout);
  void own_fp8_d(Observation& o, const Fp8LayerCodes& codes);
  // Eliminates by `o`; returns how many candidates it eliminated.
  int64_t eliminate(const Observation& o);
  std::vector<const Candidate*> representatives(bool plain);
  size_t alive_classes(bool plain) const;
  // M of the probes on the other side of the dispatches of this accumulator type.
  int64_t rows_swapped() const { return input_ == FormulaInput::fp32 ? kRowsSwapFp8 : kRowsSwap; }
  bool probe_round(int round, bool with_bias, bool plain);
  // Runs one probe through the arm, eliminates by it and records it in `r_.probes`.
  const Observation& run_probe(const ProbeSpec& spec, const std::string& id, int64_t score);
  // identify_probes.cpp
  ProbeSpec design(int64_t m, bool with_bias, bool plain, int64_t* score);
  // The accumulators (or FP8 `d`s) one element's design scores: random ones, and ones built to
  // separate random pairs of the classes `reps` at (sa, sw, bias) in column `n`.
  std::vector<Operand> element_tries(const std::vector<const Candidate*>& reps, int64_t m, int64_t n, float sa, float sw,
                                     std::optional<uint16_t> bias);
  Operand fp8_operand(int64_t sig, int t, bool neg, int64_t n) const;
  Operand random_fp8_operand(int64_t n);
  std::optional<Operand> separating_fp8(const FormulaPoint& a, const FormulaPoint& b, const Operand& base, int64_t n);
  LayerOperands build(const ProbeSpec& spec, const std::string& name) const;
  int64_t probe_limit() const;
  std::optional<Operand> separator_try(const FormulaPoint& pa, const FormulaPoint& pb, bool bias_ok, bool inside, int t);
  std::optional<Operand> find_separator(const Candidate& a, const Candidate& b, int64_t m, bool bias_ok, bool inside,
                                        std::vector<std::string>* why_outside);
  // identify_confirmation.cpp
  void heldout();
  // Several classes left after the probes: separating operands, probed where in jurisdiction.
  void separate();
  void conclude();
  nlohmann::json class_list() const;
  // identify_diagnosis.cpp
  void describe_unexplained();
  struct Residuals {
    int64_t bad = 0, total = 0, bias_ignored = 0, other_column = 0, biased_bad = 0;
    std::map<int64_t, int64_t> hist;  // ordered differences, clamped to [-4, 4]
    nlohmann::json first = nlohmann::json::array();
  };
  Residuals residuals(const Candidate& c) const;
  nlohmann::json localize_stage(const std::vector<const Candidate*>& order) const;
  nlohmann::json epilogue_diagnosis(const Candidate& c, bool declared) const;
  const Candidate* declared_candidate() const;
  nlohmann::json diagnose_bias_and_accumulator() const;
  // The named rows whose behaviour without a bias is `c`'s (identify_confirmation.cpp).
  std::vector<std::string> named_without_bias(const Candidate& c) const;
  // identify_fp8.cpp
  void identify_fp8();
  // The epilogue of an FP8 arm whose model was measured: the INT8 identification over the FP8 space.
  void identify_fp8_epilogue(const Fp8Measurement& m);
  bool own_d_contradicts_model(const Fp8Measurement& m);
  // The rounds of designed probes, then the held-out confirmation and the verdict (both kinds of arm).
  void identify_epilogue();
  // identify_block.cpp: block-scaled FP8 arms, stage by stage (each returns false / nullopt / empty
  // when it ended the identification as `unexplained`).
  void identify_block();
  bool block_edges(int64_t bk, int64_t bn);
  void block_heldout(int64_t bk, int64_t bn);
  std::optional<NamedAccumModel> block_chain(int64_t bk, int64_t bn);
  std::vector<BlockPromotion> block_forms(const NamedAccumModel& chain, int64_t bk, int64_t bn);
  std::string block_name(BlockPromotion f, const NamedAccumModel& chain) const;
  // The first named chain of the accumulation table that, per K block of `bk` from zero and promoted
  // into fp32, predicts every probe of `m` (unit scales); nullopt when none does.
  std::optional<NamedAccumModel> named_chain_explaining(const Fp8Measurement& m, int64_t bk, bool through_run) const;
  // The model of `models` nearest to the held-out outputs (its residual entry) and its first misses.
  std::pair<nlohmann::json, nlohmann::json> block_nearest(const std::vector<BlockModel>& models) const;
  void block_unexplained(const std::string& stage, const std::string& summary, nlohmann::json nearest,
                         nlohmann::json first);

  // The pieces of `separate` (identify_confirmation.cpp).
  struct Planned {
    const Candidate *a, *b;
    Operand o;
  };
  using SeparationPlan = std::map<std::pair<int64_t, bool>, std::vector<Planned>>;
  nlohmann::json unresolved_pair(const Candidate& a, const Candidate& b, bool bias_ok);
  void run_separation_probes(int round, const SeparationPlan& plan, std::vector<nlohmann::json>& probed);

  Arm& arm_;
  IdentifyOptions options_;
  Rng rng_;
  IdentifyResult r_;
  std::vector<Candidate> cands_;
  std::map<std::string, std::vector<std::string>> named_by_key_;
  std::vector<Observation> obs_;
  bool bias_refused_ = false, bias_tested_ = false;
  // What the epilogue starts from: exact integers (INT8 arms), or the fp32 `d` of the FP8 arm's
  // measured accumulation model `model_` (identify_fp8.cpp).
  FormulaInput input_ = FormulaInput::integer;
  Fp8AccumModel model_{};
  // Block-scaled arms: the held-out layers and the arm's outputs on them.
  std::vector<std::pair<LayerOperands, std::vector<uint16_t>>> block_heldout_;
};

}  // namespace qc::identify_detail
