// An arm is one implementation of the scaled-INT8 linear interface. Arms are named
// `backend:variant` (`cpu:vllm-cutlass`, `onednn:s8s8`, `cuda:mma-vllm-triton`,
// `plugin:./libmine.so`, `mutant:int16-saturate`) and created through the registry.
#pragma once

#include <nlohmann/json.hpp>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "qconform/operands.hpp"

namespace qc {

// The identity of the kernel that actually ran, captured by the arm itself at run time (not
// the label the user asked for): this is C0's treatment evidence.
struct RunRecord {
  std::string arm;        // the label the arm was created with
  std::string kernel;     // implementation-reported kernel name (e.g. oneDNN's primitive impl string)
  std::string epilogue;   // declared formula name, empty when the arm declares none
  std::string device;     // "cpu: <model> (<isa>)" or the GPU name, driver, CUDA version
  std::string library;    // library and version, or the plugin file's sha256
  std::string build;      // compiler and numeric flags
  nlohmann::json extra = nlohmann::json::object();
};
void to_json(nlohmann::json& j, const RunRecord& r);
void from_json(const nlohmann::json& j, RunRecord& r);

struct ArmOutput {
  std::vector<uint16_t> y;                  // [m,n] bf16 bit patterns
  std::optional<std::vector<int32_t>> acc;  // [m,n] INT32 accumulator, when the arm exposes it
  // Block-scaled FP8 arms: the fp32 accumulator D [m,n] that `y` was rounded from (the scales act
  // inside the accumulation, so D depends on them), when the arm exposes it; verify compares it with
  // the arm's declared block model (C4).
  std::optional<std::vector<float>> d;
  RunRecord record;
};

// A layer's operands resident on the current CUDA device, as verify's device pipeline hands them to an
// arm that runs there (`Arm::run_resident`, docs/gpu.md "verify on the device"): the device copies of
// `host`'s arrays (the first `host->m` rows of the layer, under the run's scales) and the CUDA stream
// the arm enqueues its work on (a `cudaStream_t`, opaque here so that callers need no CUDA headers).
// The arm reads of `host` only its shape, name, element types, scale layouts and bias flag.
struct ResidentOperands {
  const LayerOperands* host = nullptr;
  const int8_t* a = nullptr;          // [m,k] codes
  const int8_t* w = nullptr;          // [n,k] codes
  const float* a_scale = nullptr;
  const float* w_scale = nullptr;
  const uint16_t* bias = nullptr;     // [n] bf16 bit patterns, null without a bias
  void* stream = nullptr;
};
// Where a resident run writes: device arrays of m*n elements the caller owns (and poisons before the
// run), `acc` null when the caller does not take the arm's INT32 accumulator.
struct ResidentOutputs {
  uint16_t* y = nullptr;
  int32_t* acc = nullptr;
};

// The kind of layer an arm takes: INT8 codes, FP8 codes under per-tensor/row/column scales, or FP8
// codes under block scales (per-token-group, per-block). Two arms are compared only when of one kind.
enum class ArmKind { int8, fp8, fp8_block };
std::string_view arm_kind_name(ArmKind k);  // "INT8", "FP8", "block-scaled FP8"

struct ArmInfo {
  std::string label;
  std::string description;
  std::string epilogue;            // declared formula name ("" when none is declared)
  bool exposes_accumulator = false;
  bool is_mutant = false;
  std::string breaks_stage;        // mutants: the stage they break ("accumulation", "epilogue", ...)
  // FP8 arms: the name of the accumulation model the arm declares it follows (docs/accumulation.md,
  // e.g. "hopper-fp8-promote4"); "" for INT8 arms and for FP8 arms that declare none. Non-empty
  // marks the arm as FP8. A block model ("block-triton", `is_block_model_name`) marks a block-scaled
  // FP8 arm: it takes layers whose scales act per K block (per-token-group, per-block) and no others.
  std::string accumulation_model;
  // Block-scaled FP8 arms: the scale block the kernel takes, K columns per scale and weight rows per
  // scale row (a kernel compiled for 128x128 blocks); 0 = any the model can evaluate.
  int64_t block_k = 0, block_n = 0;
  // A block-scaled FP8 arm whose block model is not declared (a callable or plugin that says it takes
  // block-scaled layers and nothing of its arithmetic): `block()` holds, `fp8_model_unknown()` too, and
  // `qconform identify` measures its blocks, chain and promotion form (docs/identify.md).
  bool block_scaled = false;
  // The element type the arm's `run` takes: int8, or e4m3 for an FP8 arm. An FP8 arm that declares
  // no model (`fp8() && accumulation_model.empty()`: a callable made with `element="e4m3"`, a plugin
  // with QC_ARM_FLAG_FP8_KERNEL and no model) has a model and an epilogue that are unknown until
  // measured: `qconform identify` measures both (docs/identify.md, "FP8 arms"), and its outputs are
  // not predicted until they are declared.
  ElementType element = ElementType::int8;
  // FP8 arms: `fp8_accumulate` (the unscaled fp32 GEMM d) is offered. An arm that declares a model
  // offers it by definition; an FP8 kernel that is only a whole layer (codes and scales in, bf16 out)
  // does not, and is measured through `run`.
  bool unscaled_entry = false;
  bool fp8() const { return element != ElementType::int8 || !accumulation_model.empty() || block_scaled; }
  // An FP8 arm whose model is unknown until measured: verify and conform run it, report its
  // differences as not predicted and the pair as `unexplained` at best (docs/checks.md).
  bool fp8_model_unknown() const { return fp8() && accumulation_model.empty(); }
  // A block-scaled FP8 arm: it declares a block model (`block-<form>[+<chain>]`) or `block_scaled`. It
  // takes layers whose scales act per K block and no others.
  bool block() const;
  ArmKind kind() const { return !fp8() ? ArmKind::int8 : block() ? ArmKind::fp8_block : ArmKind::fp8; }
  bool offers_unscaled() const { return unscaled_entry || !accumulation_model.empty(); }
  // The arm's calls (`run`, `fp8_accumulate`) may be made from several host threads at once: it
  // guards its own state (the CUDA arms hold a lock around their device buffers). verify then asks
  // an FP8 arm for its fp32 accumulator beside the run loop instead of before the layer's runs.
  // False (the default) for anything that has not said so: Python callables, plugins, the CPU arms.
  bool concurrent_calls = false;
  // The arm runs on operands resident on the device (`Arm::run_resident`): verify's device pipeline
  // uploads each layer once for both arms, every scale regime and the reference, and checks the
  // outputs where they are (docs/gpu.md). False: verify runs the arm through `run` on host memory.
  bool resident = false;
};

class Arm {
 public:
  virtual ~Arm() = default;
  virtual ArmInfo info() const = 0;
  // Runs one layer. Throws qc::Error (input) for shapes the arm cannot take, naming the arm and
  // the constraint.
  virtual ArmOutput run(const LayerOperands& ops) = 0;
  // Runs one layer on operands already on the current device (`ArmInfo::resident`), enqueued on
  // `ops.stream` (the caller synchronizes), the outputs written into `out`; returns what ran. The
  // same refusals as `run`. The default (an arm that is not resident) is an internal error.
  virtual RunRecord run_resident(const ResidentOperands& ops, const ResidentOutputs& out);
  // FP8 arms that are resident and offer `fp8_accumulate`: the same unscaled fp32 GEMM of the resident
  // e4m3 codes `ops.a`, `ops.w` into `d` [m,n] (device), enqueued on `ops.stream`; the record of the call
  // (its `extra` claims the model, as `fp8_accumulate`'s). The default is an internal error.
  virtual RunRecord accumulate_resident(const ResidentOperands& ops, float* d);
  // FP8 arms: the unscaled fp32 GEMM result d [m,n] = Σ_k a[m,k]·w[n,k] of e4m3fn codes `a`
  // [m,k] and `w` [n,k] (row-major), as `sweep` compares them (the scales are applied after, by
  // the `fp8-scaled` epilogue), and the identity of what ran in `record`. The default (every
  // INT8 arm) is an input error naming the arm. `threads`: CPU worker threads (0: all).
  virtual std::vector<float> fp8_accumulate(const uint8_t* a, const uint8_t* w, int64_t m, int64_t n, int64_t k,
                                            nlohmann::json& record, int threads = 0);
};

// A backend owns one prefix of the namespace (`cpu`, `mutant`, ...).
// One family of FP8 arms a backend offers: its label as messages spell it ("cpu:fp8-<model>").
struct Fp8ArmFamily {
  std::string label;
  bool block_scaled = false;  // takes block-scaled layers (a block model), not unscaled ones
};

struct ArmBackend {
  std::string prefix;
  std::string help;
  std::function<std::vector<std::string>()> variants;  // listable variants ("" for open-ended ones)
  std::function<std::unique_ptr<Arm>(std::string_view variant)> make;
  // The variant is the path of a file the arm loads (`plugin:`, `plugin-inproc:`): an input of every
  // run, which no output may overwrite (the CLI's output-path check asks `arm_file_of`).
  bool variant_is_file = false;
  // The FP8 arm families it offers, as messages list them (`fp8_arm_families`).
  std::vector<Fp8ArmFamily> fp8_families;
};

// The FP8 arms of every registered backend, one comma-separated list for messages: `all` (a
// block-scaled family marked "(block-scaled)"), `unscaled` (the families with an unscaled FP8 GEMM,
// `Arm::fp8_accumulate`) or `block` (the block-scaled ones).
enum class Fp8Families { all, unscaled, block };
std::string fp8_arm_families(Fp8Families which);

// An arm label as every verb and the registry read it: `backend:variant`, split at the first colon.
struct ArmLabel {
  std::string_view backend, variant;
};
// The label's parts; nullopt when it has no `backend:` (no colon, or nothing before it).
std::optional<ArmLabel> parse_arm_label(std::string_view label);
// The file an arm label loads (the variant of a backend registered with `variant_is_file`), or ""
// for an arm that loads none (a built-in arm, or a label of no known backend).
std::string arm_file_of(std::string_view label);

void register_arm_backend(ArmBackend backend);
// Creates an arm from its label; unknown labels are input errors that list the known arms. An
// INT8 arm (no `accumulation_model`) comes back wrapped so that its `run` first calls
// `check_arm_takes_layer`.
std::unique_ptr<Arm> make_arm(std::string_view label);

// The one check between an arm and a layer's element types and scale granularity, each refusal an
// input error naming the arm, the layer, its shape, element types and scales: an INT8 arm (empty
// `info.accumulation_model`) given an FP8 layer; an FP8 arm of an unscaled model given a block-scaled
// layer (its scales would be ignored) and a block-scaled arm given any other; a block-scaled arm given
// a scale block other than its `block_k` x `block_n`. FP8 arms take INT8 layers too (their codes
// re-encoded exactly to e4m3).
void check_arm_takes_layer(const ArmInfo& info, const LayerOperands& ops);
// Every listable arm label, backends in registration order.
std::vector<std::string> list_arms();
const std::vector<ArmBackend>& arm_backends();

// A backend this build does not contain, and why (e.g. "oneDNN not usable: Could NOT find
// OpenCL ...; the onednn arms are not built"): `qconform arms` lists these, and make_arm names
// the reason when such an arm is asked for.
struct AbsentBackend {
  std::string prefix;
  std::string reason;
};
const std::vector<AbsentBackend>& absent_arm_backends();

// One-line description of this CPU ("AMD EPYC (avx512f,avx512bw,avx512vnni)"), for RunRecords.
std::string cpu_description();

}  // namespace qc
