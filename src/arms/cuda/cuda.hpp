// The GPU side of qconform that other parts call: availability, the GPU comparison and exact
// accumulation used by `verify` on large models, and the raw cuBLASLt FP8 GEMM used by the
// depth sweep. The arms themselves (`cuda:mma-*`, `cuda:cublaslt-*`) are reached through the arm
// registry (`make_arm`). See docs/gpu.md.
//
// Every function takes and returns host memory, so callers need no CUDA headers. In a build
// without CUDA (`QC_WITH_CUDA` undefined) `cuda_available` returns false with the reason and the
// other functions throw a QC_INPUT error saying so.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "accum/fp8_model.hpp"
#include "arms/cuda/verify_pass_types.hpp"
#include "qconform/accumulation.hpp"
#include "qconform/arm.hpp"
#include "qconform/epilogue.hpp"
#include "qconform/error.hpp"

namespace qc {

struct BlockModel;    // epilogue/block_models.hpp
struct Fp8BlockGemm;  // epilogue/block_models.hpp

// True when this build has CUDA and a device is present; otherwise false with the reason
// ("this build has no CUDA", "cudaGetDeviceCount: no CUDA-capable device is detected", ...).
bool cuda_available(std::string* reason = nullptr);

// Starts the CUDA driver and the current device's context on a thread of its own and returns (once per
// process; the process waits for it at exit): a command that will use the device calls it first, so
// that the ~0.1 s of context creation runs beside what it does before (checking paths, mapping the
// operands). Errors are left for the first real use to report (`require_device`). No-op without CUDA.
void start_cuda_early();

// "NVIDIA H200 (sm_90, 132 SMs), driver 13.0, CUDA runtime 13.0" for RunRecords.
std::string cuda_device_description();

// Result of a bitwise / ordered-ulp comparison of two bf16 arrays (see sm90_compare_bf16.cu).
struct GpuBf16Comparison {
  static constexpr int kUlpBuckets = 18;
  int64_t elements = 0;
  int64_t bitwise_diff = 0;        // bit patterns differ (signed zeros count)
  int64_t finite_diff = 0;         // both finite, bits differ
  int64_t nonfinite_mismatch = 0;  // bits differ, at least one NaN or ±inf (never "close")
  // ulp_hist[0]: +0 vs -0; ulp_hist[b], b >= 1: ordered distance d with 2^(b-1) <= d < 2^b.
  std::array<int64_t, kUlpBuckets> ulp_hist{};
  int64_t max_ulp = 0;             // over finite differing pairs
  int64_t first_diff = -1;         // smallest differing flat index, -1 when identical
};

// Compares `a` and `b` (same length) on the GPU.
GpuBf16Comparison compare_bf16_gpu(std::span<const uint16_t> a, std::span<const uint16_t> b);

// Exact accumulators on CUDA cores (plain integer multiply-adds, not the tensor cores under
// test): acc[m,n] = Σ_k a[m,k]·w[n,k] in int64, for any K.
std::vector<int64_t> exact_accumulate_i64_gpu(const int8_t* a, const int8_t* w, AccumShape s);
// The same sums as int32 (half the transfer), for K <= kAccumMaxKInt32 where every sum fits.
std::vector<int32_t> exact_accumulate_i32_gpu(const int8_t* a, const int8_t* w, AccumShape s);
// The GPU counterpart of `exact_accumulate`: int32 when K <= kAccumMaxKInt32, int64 otherwise.
ExactAccumulators exact_accumulate_gpu(const int8_t* a, const int8_t* w, AccumShape s);

// cuBLASLt FP8 GEMM on e4m3 bit patterns: d[m,n] = Σ_k e4m3(a[m,k])·e4m3(w[n,k]) in the library's
// fp32 accumulation, returned as fp32 without scales (`fast_accum` sets
// CUBLASLT_MATMUL_DESC_FAST_ACCUM). K a multiple of 16. `record` (optional) receives the
// kernel identity (algorithm id, tile, stages).
std::vector<float> fp8_gemm_cublaslt_f32(const uint8_t* a_e4m3, const uint8_t* w_e4m3, AccumShape s, bool fast_accum,
                                         RunRecord* record = nullptr);

// Which GPU kernel evaluates an FP8 accumulation model. `best`: the fp32 kernel for the stepped
// models it takes (the Hopper ones: src/accum/fp8_model_fp32.hpp, `accum_fp32::gpu_kernel_takes`), else
// the fp64 kernel where the model has a fast path (src/accum/fp8_model_fp64.hpp), else the int128 text
// of accumulation.hpp; `fp64` skips the fp32 kernel; `reference` forces the int128 text. Every kernel
// equals the CPU evaluation bit for bit (tests/gpu/test_cuda_fp8_model.cpp runs all three).
enum class Fp8GpuKernel : uint8_t { best, fp64, reference };

// FP8 codes uploaded to the GPU once, to evaluate several accumulation models on them (verify's
// reference side evaluates each arm's model, and each model a run claims, on every layer). `a` [m,k]
// and `w` [n,k] codes of formats `fa`, `fw`, validated here (non-finite codes are input errors naming
// the coordinate). Host memory in, host memory out; not thread-safe (one evaluation at a time).
class GpuFp8Codes {
 public:
  GpuFp8Codes(const uint8_t* a, Fp8Format fa, const uint8_t* w, Fp8Format fw, AccumShape s);
  ~GpuFp8Codes();
  GpuFp8Codes(GpuFp8Codes&&) noexcept;
  GpuFp8Codes& operator=(GpuFp8Codes&&) noexcept;
  GpuFp8Codes(const GpuFp8Codes&) = delete;
  GpuFp8Codes& operator=(const GpuFp8Codes&) = delete;
  // d[m,n] as `accum_model::evaluate` gives it (invalid models are input errors). `kernel` (optional)
  // receives the identity of the kernel that ran. `k_per_launch` > 0: the fp32 kernel's evaluation cut
  // into launches of that many terms of K (cuda_kernels::ModelLaunches, as verify's pipeline runs it).
  std::vector<float> evaluate(const Fp8AccumModel& model, std::string* kernel = nullptr,
                              Fp8GpuKernel which = Fp8GpuKernel::best, int64_t k_per_launch = 0) const;
  // Two models that run the same steps (`accum_fp32::same_steps`, in the fp32 kernel at this K; else an
  // input error) in one pass, as verify's device pipeline evaluates the Hopper pair: each d as `evaluate`
  // gives it.
  std::array<std::vector<float>, 2> evaluate_pair(const Fp8AccumModel& first, const Fp8AccumModel& second,
                                                  std::string* kernel = nullptr, int64_t k_per_launch = 0) const;
  // A block model's fp32 D as `fp8_block_reference` gives it (src/epilogue/block_models.hpp), for the
  // block-scaled GEMM `g` whose codes are the ones uploaded here (its shape and formats are checked;
  // its scales are uploaded by each call). `best` / `fp64`: per K block the block's columns gathered,
  // its chain evaluated from zero by the kernels `evaluate` runs, then every output promoted by the
  // header's `block_model::promote`; `reference`: the header's `block_model::evaluate` per output.
  std::vector<float> evaluate_block(const BlockModel& model, const Fp8BlockGemm& g, std::string* kernel = nullptr,
                                    Fp8GpuKernel which = Fp8GpuKernel::best) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// One block model on host operands: `GpuFp8Codes(g's codes).evaluate_block(model, g, kernel, which)`.
std::vector<float> fp8_block_evaluate_gpu(const BlockModel& model, const Fp8BlockGemm& g, std::string* kernel = nullptr,
                                          Fp8GpuKernel which = Fp8GpuKernel::best);

// One model on host operands: `GpuFp8Codes(a, fa, w, fw, s).evaluate(model, kernel, which)`.
std::vector<float> fp8_model_evaluate_gpu(const Fp8AccumModel& model, const uint8_t* a, Fp8Format fa, const uint8_t* w,
                                          Fp8Format fw, AccumShape s, std::string* kernel = nullptr,
                                          Fp8GpuKernel which = Fp8GpuKernel::best);

// ---- verify's device pipeline (docs/gpu.md, "verify on the device") -----------------------------

// A byte of the operands an arm changed (C3): which piece (in the order a_q, a_scale, w_scale, bias,
// w_q), which element of it, and that element's bytes before and after.
struct OperandChange {
  int piece = 0;
  int64_t element = 0;
  std::array<uint8_t, 8> was{}, now{};
};

// What one run's element pass counted on the device: the counters by `cuda_kernels::PassCounter`, the
// maxima, the ordered-ulp histogram over finite differing and equal pairs (distance -> pairs), and per
// row `cuda_kernels::kRowCounters` counts ([m][kRowCounters]).
struct GpuPassCounts {
  std::array<int64_t, cuda_kernels::kPassCounters> count{};
  int64_t max_ulp = 0;
  double max_rel = 0, near_zero_max_abs = 0;
  double near_zero_limit = 0;  // the comparison's near-zero limit over arm A's outputs (compare.hpp)
  std::map<int64_t, int64_t> ulp_histogram;
  std::vector<uint32_t> rows;
  std::optional<OperandChange> changed[2];  // C3: what arm A, arm B changed of the operands (`check_operands`)
};

// What an element pass runs on: each arm's declared formula over the exact accumulators (null: none;
// `gpu_pass_takes` says which the device evaluates), whether each arm's accumulator was taken, C2's
// pinned verdict, a power-of-two regime, and the comparison's near-zero fraction.
struct GpuPassSpec {
  const Epilogue* formula[2] = {nullptr, nullptr};
  bool acc[2] = {false, false};
  bool safe = false;
  bool pow2 = false;
  double near_zero_fraction = 1e-2;
};
// True when the device evaluates formula `e` (a kind with a kernel instance; not `exact`, not a point of
// the formula space).
bool gpu_pass_takes(const Epilogue& e);

// Rows of a run brought back to the host, which lists from them, [rows.size(), n] each: both outputs;
// INT8, the exposed accumulators (empty when not taken) and the exact accumulators; FP8, the fp32
// arrays asked for (`GpuVerifyLayer::rows_fp8`; empty where none was).
struct GpuRows {
  std::vector<uint16_t> y[2];
  std::vector<int32_t> acc[2];
  std::vector<int32_t> exact;
  std::vector<float> f32[6];
};

// An FP8 run's element pass: each arm's declared epilogue over the fp32 accumulators of the model its
// run claims (`d[s]`, device, the layer's rows from `GpuVerifyLayer::model`; null: the run is unmodelled),
// a power-of-two regime, the comparison's near-zero fraction.
struct GpuFp8PassSpec {
  const Epilogue* formula[2] = {nullptr, nullptr};
  const float* d[2] = {nullptr, nullptr};
  bool pow2 = false;
  double near_zero_fraction = 1e-2;
};

// One layer resident on the current device for verify (INT8, or FP8 under per-tensor, per-row and
// per-column scales): uploaded once (`load`) for every row count,
// scale regime, both arms and the reference, with a pristine copy of every operand beside it (C3), the
// exact accumulators computed there (int32; K <= kAccumMaxKInt32), and one element pass per run. The
// work runs on a stream of its own, which `operands` hands to the arms; each call that returns host data
// waits for it (`rows` and `rows_fp8` return a function that does). One layer at a time; not thread-safe.
class GpuVerifyLayer {
 public:
  GpuVerifyLayer();
  ~GpuVerifyLayer();
  GpuVerifyLayer(const GpuVerifyLayer&) = delete;
  GpuVerifyLayer& operator=(const GpuVerifyLayer&) = delete;
  // Why the pipeline cannot take `full` ("" when it can): for an INT8 pair (`fp8` false) an FP8 layer or
  // K beyond the int32 proof, for an FP8 pair an INT8 or block-scaled layer; N not a multiple of 8, more
  // than 2^32 outputs.
  static std::string refusal(const LayerOperands& full, bool fp8);
  // Uploads the layer (a, w, bias and their copies; nothing when `prefetch` uploaded it already); INT8:
  // computes its exact accumulators and C2's counts (or takes those `prefetch` computed); FP8: evaluates
  // `models` (those `prefetch` did not), the pairs that share their steps in one pass each.
  void load(const LayerOperands& full, const std::vector<NamedAccumModel>& models = {});
  // Uploads `next` ahead, on a host thread and a stream of their own, while the current layer's runs go on
  // (its buffers are not the current layer's; `load(next)` takes them), and there evaluates `models` on
  // an FP8 layer, or computes an INT8 layer's exact accumulators and C2's counts. Nothing where the
  // pipeline, in the loaded layer's mode, would refuse `next`. `next` must stay mapped until then.
  // `only_untaken`: the upload waits for the exact sums ahead only when their layer was not taken (they then
  // read the buffers it writes); otherwise for the last ones whatever became of their layer.
  void prefetch(const LayerOperands& next, const std::vector<NamedAccumModel>& models = {}, bool only_untaken = false);
  // The current layer has launched `runs` of its runs (FP8). The next layer's models (`prefetch`) wait for
  // QC_FP8_MODELS_AFTER runs of the current layer (default 1; 0: they start right after their upload): their
  // blocks hold whole multiprocessors for up to ~2 ms, which the first run's kernels, waited for by the run
  // loop, would otherwise wait behind (docs/gpu.md). `load`, a later `prefetch` and the destructor release them.
  void runs_launched(int runs);
  // C2's statistics of the whole layer, from the device's pass (the host's `range_stats` assembly).
  RangeStats range_stats();
  // The operands of one run, `ops` being the layer's first m rows under the run's scales: the scales
  // uploaded (and copied), the views an arm takes, on this layer's stream.
  ResidentOperands operands(const LayerOperands& ops);
  // Arm `side`'s outputs for the current run, poisoned (0xFF bytes); `acc`: also an accumulator.
  ResidentOutputs outputs(int side, bool acc);
  // C3 after arm `side` ran: every operand byte compared with its copy (the result comes with `pass`).
  void check_operands(int side);
  // The element pass of the current run (both arms have run, each followed by `check_operands`): the one
  // wait of a run.
  GpuPassCounts pass(const GpuPassSpec& spec);
  // The current run's `rows`, for the host's lists: on their way back behind the run (the next run's work
  // does not wait for them); the function, called once on any thread, waits for them and gives them.
  std::function<GpuRows()> rows(const std::vector<int64_t>& rows, bool acc_a, bool acc_b);

  // FP8: the fp32 accumulators of a model on the layer's codes (all of its rows), evaluated on the device
  // once per layer and name (`name` keys the cache; `kernel` receives what ran).
  const float* model(const std::string& name, const Fp8AccumModel& model, std::string* kernel = nullptr);
  // FP8: arm `side`'s fp32 accumulator for the current rows (its `accumulate_resident` writes it), poisoned;
  // `accumulator_of` the same buffer as it is.
  float* accumulator(int side);
  const float* accumulator_of(int side) const;
  // FP8: the current rows (`operands` of a run of them comes first) of each exposed accumulator against the
  // model its call claimed (`want[s]`, null: not compared), bitwise: kAccMismatchA/B and the rows' kRowAcc.
  GpuPassCounts check_accumulators(const float* const (&want)[2]);
  // FP8: the element pass of the current run.
  GpuPassCounts pass_fp8(const GpuFp8PassSpec& spec);
  // FP8: the current rows' `rows` of up to six fp32 arrays [m, n] (device; null: none), and with `outputs`
  // of both arms' outputs of the current run.
  // They come back behind the stream's work as `rows`' do: the function returned waits for them.
  std::function<GpuRows()> rows_fp8(const std::vector<int64_t>& rows, const float* const (&f32)[6], bool outputs);
  // Since the last call: seconds the uploads ahead took (beside the runs), and the upload workers' seconds
  // reading the files into pinned slots and waiting for a slot's DMA, summed over the workers (of every
  // large upload, ahead or not).
  struct UploadSeconds {
    double ahead = 0, reading = 0, waiting = 0;
  };
  UploadSeconds take_upload_seconds();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

#ifndef QC_WITH_CUDA
struct GpuVerifyLayer::Impl {};
inline bool gpu_pass_takes(const Epilogue&) { return false; }
inline GpuVerifyLayer::GpuVerifyLayer() { QC_FAIL_INPUT("GpuVerifyLayer: this build has no CUDA (rebuild with -DQCONFORM_WITH_CUDA=ON)"); }
inline GpuVerifyLayer::~GpuVerifyLayer() = default;
inline std::string GpuVerifyLayer::refusal(const LayerOperands&, bool) { return "this build has no CUDA"; }
inline void GpuVerifyLayer::load(const LayerOperands&, const std::vector<NamedAccumModel>&) {}
inline void GpuVerifyLayer::prefetch(const LayerOperands&, const std::vector<NamedAccumModel>&, bool) {}
inline void GpuVerifyLayer::runs_launched(int) {}
inline RangeStats GpuVerifyLayer::range_stats() { return {}; }
inline ResidentOperands GpuVerifyLayer::operands(const LayerOperands&) { return {}; }
inline ResidentOutputs GpuVerifyLayer::outputs(int, bool) { return {}; }
inline void GpuVerifyLayer::check_operands(int) {}
inline GpuPassCounts GpuVerifyLayer::pass(const GpuPassSpec&) { return {}; }
inline std::function<GpuRows()> GpuVerifyLayer::rows(const std::vector<int64_t>&, bool, bool) {
  return [] { return GpuRows{}; };
}
inline const float* GpuVerifyLayer::model(const std::string&, const Fp8AccumModel&, std::string*) { return nullptr; }
inline float* GpuVerifyLayer::accumulator(int) { return nullptr; }
inline const float* GpuVerifyLayer::accumulator_of(int) const { return nullptr; }
inline GpuPassCounts GpuVerifyLayer::check_accumulators(const float* const (&)[2]) { return {}; }
inline GpuPassCounts GpuVerifyLayer::pass_fp8(const GpuFp8PassSpec&) { return {}; }
inline std::function<GpuRows()> GpuVerifyLayer::rows_fp8(const std::vector<int64_t>&, const float* const (&)[6], bool) {
  return [] { return GpuRows{}; };
}
inline GpuVerifyLayer::UploadSeconds GpuVerifyLayer::take_upload_seconds() { return {}; }

struct GpuFp8Codes::Impl {};
inline GpuFp8Codes::GpuFp8Codes(const uint8_t*, Fp8Format, const uint8_t*, Fp8Format, AccumShape) {
  QC_FAIL_INPUT("GpuFp8Codes: this build has no CUDA (rebuild with -DQCONFORM_WITH_CUDA=ON)");
}
inline GpuFp8Codes::~GpuFp8Codes() = default;
inline GpuFp8Codes::GpuFp8Codes(GpuFp8Codes&&) noexcept = default;
inline GpuFp8Codes& GpuFp8Codes::operator=(GpuFp8Codes&&) noexcept = default;
inline std::vector<float> GpuFp8Codes::evaluate(const Fp8AccumModel&, std::string*, Fp8GpuKernel, int64_t) const {
  QC_FAIL_INPUT("GpuFp8Codes: this build has no CUDA (rebuild with -DQCONFORM_WITH_CUDA=ON)");
}
inline std::array<std::vector<float>, 2> GpuFp8Codes::evaluate_pair(const Fp8AccumModel&, const Fp8AccumModel&,
                                                                    std::string*, int64_t) const {
  QC_FAIL_INPUT("GpuFp8Codes: this build has no CUDA (rebuild with -DQCONFORM_WITH_CUDA=ON)");
}
inline std::vector<float> GpuFp8Codes::evaluate_block(const BlockModel&, const Fp8BlockGemm&, std::string*,
                                                      Fp8GpuKernel) const {
  QC_FAIL_INPUT("GpuFp8Codes: this build has no CUDA (rebuild with -DQCONFORM_WITH_CUDA=ON)");
}
inline std::vector<float> fp8_block_evaluate_gpu(const BlockModel&, const Fp8BlockGemm&, std::string*, Fp8GpuKernel) {
  QC_FAIL_INPUT("fp8_block_evaluate_gpu: this build has no CUDA (rebuild with -DQCONFORM_WITH_CUDA=ON)");
}
inline std::vector<float> fp8_model_evaluate_gpu(const Fp8AccumModel&, const uint8_t*, Fp8Format, const uint8_t*,
                                                 Fp8Format, AccumShape, std::string*, Fp8GpuKernel) {
  QC_FAIL_INPUT("fp8_model_evaluate_gpu: this build has no CUDA (rebuild with -DQCONFORM_WITH_CUDA=ON)");
}
inline bool cuda_available(std::string* reason) {
  if (reason != nullptr) *reason = "this build has no CUDA (configured without nvcc or with QCONFORM_WITH_CUDA=OFF)";
  return false;
}
inline std::string cuda_device_description() { return "none (built without CUDA)"; }
inline void start_cuda_early() {}
inline GpuBf16Comparison compare_bf16_gpu(std::span<const uint16_t>, std::span<const uint16_t>) {
  QC_FAIL_INPUT("compare_bf16_gpu: this build has no CUDA (rebuild with -DQCONFORM_WITH_CUDA=ON)");
}
inline std::vector<int64_t> exact_accumulate_i64_gpu(const int8_t*, const int8_t*, AccumShape) {
  QC_FAIL_INPUT("exact_accumulate_i64_gpu: this build has no CUDA (rebuild with -DQCONFORM_WITH_CUDA=ON)");
}
inline std::vector<int32_t> exact_accumulate_i32_gpu(const int8_t*, const int8_t*, AccumShape) {
  QC_FAIL_INPUT("exact_accumulate_i32_gpu: this build has no CUDA (rebuild with -DQCONFORM_WITH_CUDA=ON)");
}
inline ExactAccumulators exact_accumulate_gpu(const int8_t*, const int8_t*, AccumShape) {
  QC_FAIL_INPUT("exact_accumulate_gpu: this build has no CUDA (rebuild with -DQCONFORM_WITH_CUDA=ON)");
}
inline std::vector<float> fp8_gemm_cublaslt_f32(const uint8_t*, const uint8_t*, AccumShape, bool, RunRecord*) {
  QC_FAIL_INPUT("fp8_gemm_cublaslt_f32: this build has no CUDA (rebuild with -DQCONFORM_WITH_CUDA=ON)");
}
#endif

}  // namespace qc
