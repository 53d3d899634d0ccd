// C1 for FP8 arms: the arm's accumulation model *measured* with designed probes through its own
// `fp8_accumulate` (raw e4m3 codes in, fp32 d out), as an `Fp8AccumModel`, with the evidence for
// every parameter, a verdict against the arm's declaration, and a confirmation on random realistic
// operands (docs/accumulation.md, "Measuring an arm's model"). `boundary` and `identify` both use it.
#pragma once

#include <nlohmann/json.hpp>

#include <random>

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "qconform/accumulation.hpp"
#include "qconform/arm.hpp"
#include "qconform/numerics.hpp"

namespace qc {

struct Fp8MeasureOptions {
  uint64_t seed = 20261201;  // the confirmation operands (the probes are fixed designs)
  // Rows of every probe batch at least (cuBLASLt made one pass over K for M >= 128, K <= 4096 in
  // our H200 measurements; fewer rows can make its heuristic choose split-K).
  int64_t min_rows = 128;
  // Confirmation shapes {M, N, K}: random e4m3 codes of randn·2 (the operands of the H200 measurement).
  std::vector<std::array<int64_t, 3>> confirm_shapes = {{128, 32, 256}, {128, 32, 1024}, {128, 16, 4096}};
  int threads = 0;  // CPU threads of the arm and of the model evaluation (0: all)
  // Measure through `run` rather than `fp8_accumulate`: for an FP8 arm whose only entry is the whole
  // layer (e4m3 codes and scales in, bf16 out). Every probe batch is a layer with unit scales and no
  // bias, the arm's output widened to fp32; since only 8 (bf16) or 11 (fp16) bits of `d` come back,
  // the probes gain their readable variants (c1_fp8_probes.hpp), and a parameter set explains a probe
  // when the output is what any conversion of its `d` to the output format gives: `d` itself where `d`
  // is exact in bf16 and fp16, one of the two neighbours of `d` in the output format where it is not
  // (and is within fp16's normal range), no constraint otherwise (docs/identify.md, "FP8 arms").
  bool through_run = false;
};

// One probe: a dot product of `k` terms, zero except at `terms` (position, a code, w code).
struct Fp8Probe {
  struct Term {
    int64_t pos;
    uint8_t a, w;
  };
  std::string id;      // "kept-bits/b=14/m=1.5/+", ...
  std::string family;  // "structure", "steps", "kept-bits", "cancel", "alignment", "promotion", "random"
  int64_t k = 0;
  std::vector<Term> terms;  // random probes: every position
  float observed = 0.0f;    // the arm's d for this probe
};

// The evidence for one parameter: the measured value and, for each alternative value (the
// measured model with only this parameter changed), the first probe whose output the alternative
// does not predict, or none ("indistinguishable": an equivalent parameter set).
struct Fp8ParameterEvidence {
  std::string parameter;  // "step_k", "term_bits", "result_bits", ...
  std::string value;      // the measured value, printed
  std::string declared;   // the declared model's value, printed
  struct Alternative {
    std::string value;
    std::string probe;  // "" = no probe separates it
    float observed = 0.0f, predicted = 0.0f;
  };
  std::vector<Alternative> alternatives;
};

struct Fp8Measurement {
  ArmInfo arm;
  // "fp8_accumulate (the unscaled fp32 d)" or "run (unit scales, the bf16 output)"; through `run`, the
  // output format the calibration found ("bf16" or "fp16").
  std::string observed_through;
  std::string output_format;
  nlohmann::json record;   // the arm's record of its first probe batch
  std::vector<std::string> split_k_runs;  // probe/confirmation runs whose record says split-K (not one pass)
  std::string declared_name;  // the arm's declared model ("" when it declares none)
  Fp8AccumModel declared{};
  bool declared_known = false;  // the declared name is a model qconform knows
  // "matches declaration", "differs from declaration", "not a model of this family"
  std::string verdict;
  std::string reason;  // one paragraph
  bool measured = false;  // a consistent parameter set was found
  Fp8AccumModel model{};  // the measured model (the class representative)
  std::string model_name;  // the named model it equals, "" if none
  std::vector<Fp8AccumModel> equivalent;  // every parameter set of the class (model first)
  std::vector<std::string> differing_fields;  // measured vs declared, "result_bits: 12 (declared 13)"
  std::vector<Fp8ParameterEvidence> evidence;
  std::string order;  // "ascending, single pass" or "K in <s> ranges (split-K)"
  std::vector<Fp8Probe> probes;
  // not a model: the probe that contradicted the last candidates, and the declared model's first miss
  nlohmann::json contradiction = nlohmann::json::object();
  int64_t candidates_tried = 0;
  // Confirmation on random operands (held out: no probe used them).
  int64_t confirm_outputs = 0, confirm_matching = 0;
  int64_t confirm_declared_matching = -1;  // the declared model's matches (-1: no declaration)
  nlohmann::json confirmation = nlohmann::json::array();  // per shape
  double seconds = 0;  // in all; and its parts: the probes through the arm, the search, the confirmation
  double seconds_probes = 0, seconds_search = 0, seconds_confirm = 0;
};

// The confirmation's random operands: e4m3 codes of N(0, 2) values (to nearest, saturating), drawn in
// order from one stream seeded with `seed` (measure_fp8_accumulation's, and boundary's named block chains).
class Fp8ConfirmCodes {
 public:
  explicit Fp8ConfirmCodes(uint64_t seed) : rng_(seed) {}
  std::vector<uint8_t> next(int64_t count) {
    std::vector<uint8_t> codes(static_cast<size_t>(count));
    for (auto& c : codes) c = f32_to_e4m3fn(nd_(rng_), true);
    return codes;
  }

 private:
  std::mt19937_64 rng_;
  std::normal_distribution<float> nd_{0.0f, 2.0f};
};

Fp8Measurement measure_fp8_accumulation(Arm& arm, const Fp8MeasureOptions& options = {});
nlohmann::json to_json(const Fp8Measurement& r);
// The printout a person reads (parameters with evidence, verdict, confirmation).
std::string describe(const Fp8Measurement& r);
// The fields in which two models differ, printed "name: a (declared b)"; empty when equal.
std::vector<std::string> model_differences(const Fp8AccumModel& measured, const Fp8AccumModel& declared);
// The named model (a fixed row, blocked-<c>, split-k-<s>) equal to `m`, or "".
std::string named_model_of(const Fp8AccumModel& m);

}  // namespace qc
