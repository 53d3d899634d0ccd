// The CUDA arms. Each `run` copies the layer's operands to the device, runs, copies back and
// records what actually ran (kernel template instance and launch configuration, or the cuBLASLt
// algorithm the heuristic chose), the GPU, driver and runtime.
#include "arms/cuda/cuda_arms.hpp"

#include <fmt/format.h>

#include <array>
#include <climits>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>

#include "accum/fp8_model.hpp"  // fp8_layer_codes: the one rule both FP8 arm families apply
#include "arms/block_fp8_operands.hpp"
#include "arms/cuda/cublaslt_gemm.hpp"
#include "arms/cuda/cuda.hpp"
#include "arms/cuda/cuda_common.hpp"
#include "arms/cuda/kernels/sm90_fp8_block_mma.cuh"
#include "arms/cuda/kernels/sm90_int32_scaled_epilogue.cuh"
#include "arms/cuda/kernels/sm90_int8_scaled_mm.cuh"
#include "arms/cutlass/cutlass_arms.hpp"
#include "epilogue/block_models.hpp"
#include "qconform/accumulation.hpp"
#include "qconform/arm.hpp"
#include "qconform/epilogue.hpp"
#include "qconform/numerics.hpp"
#include "core/version.hpp"

namespace qc {
namespace cuda {

namespace {

// A bias reaches the device only for formulas that take one (the kernels' `formula::apply` cannot
// throw): the same refusal as the CPU's `apply_epilogue`, named after the arm's variants.
void require_bias_accepted(const Epilogue& e, bool has_bias) {
  QC_INPUT(!has_bias || e.accepts_bias(),
           "epilogue `{}`: a bias is ambiguous for this formula (CUTLASS `multiply_add` may or may not be contracted "
           "into an FMA); use the `-fma` or `-muladd` variant of the arm",
           e.name);
}

// `int32_accumulator`: the INT8 arms accumulate in INT32, which is exact only while K * 2^14 < 2^31;
// beyond that they refuse the shape instead of wrapping silently (C1's overflow probe).
void check_shape(const std::string& arm, const LayerOperands& ops, bool int32_accumulator) {
  ops.validate();
  QC_INPUT(!int32_accumulator || ops.k <= kAccumMaxKInt32,
           "arm {}: layer `{}` ({}): K={} can overflow the INT32 accumulator (K * 2^14 >= 2^31); this arm accepts K <= {}",
           arm, ops.name, ops.source, ops.k, kAccumMaxKInt32);
  QC_INPUT(ops.m >= 1, "arm {}: layer `{}` ({}): expected M >= 1, found M={}", arm, ops.name, ops.source, ops.m);
  QC_INPUT(ops.n % 16 == 0 && ops.n > 0, "arm {}: layer `{}` ({}): N must be a positive multiple of 16, found N={}",
           arm, ops.name, ops.source, ops.n);
  QC_INPUT(ops.k % 16 == 0 && ops.k > 0, "arm {}: layer `{}` ({}): K must be a positive multiple of 16, found K={}",
           arm, ops.name, ops.source, ops.k);
  QC_INPUT(ops.m <= INT_MAX && ops.n <= INT_MAX && ops.k <= INT_MAX,
           "arm {}: layer `{}`: dimensions must fit in int32, found M={} N={} K={}", arm, ops.name, ops.m, ops.n,
           ops.k);
}

RunRecord cuda_record(const ArmInfo& info, std::string kernel, std::string library) {
  RunRecord r;
  r.arm = info.label;
  r.kernel = std::move(kernel);
  r.epilogue = info.epilogue;
  r.device = device_description();
  r.library = std::move(library);
  r.build = kernel_build_description();
  return r;
}

// True when the caller's current device is not `device` (the one an arm's buffers live on), which
// then becomes it: the caller releases its buffers, to allocate them again there.
bool switched_device(int& device) {
  int current = 0;
  QC_CUDA_CHECK(cudaGetDevice(&current));
  if (current == device) return false;
  device = current;
  return true;
}

// An INT8 arm's device buffers, kept across runs: operands uploaded, outputs poisoned before the
// kernel writes them. One run at a time per arm object (`mu`); when the caller has switched to
// another device since the last run, the buffers are released and allocated there.
struct DeviceLayer {
  std::mutex mu;
  int device = -1;
  DeviceScratch<int8_t> a, w;
  DeviceScratch<float> sa, sw;
  DeviceScratch<uint16_t> bias, y;
  DeviceScratch<int32_t> acc;
  void upload(const LayerOperands& ops) {
    if (switched_device(device)) {
      a.release(), w.release(), sa.release(), sw.release(), bias.release(), y.release(), acc.release();
    }
    a.upload(ops.a_q), w.upload(ops.w_q), sa.upload(ops.a_scale), sw.upload(ops.w_scale), bias.upload(ops.bias);
    const size_t mn = static_cast<size_t>(ops.m * ops.n);
    y.poison(mn), acc.poison(mn);
  }
  ArmOutput download(const LayerOperands& ops) const {
    const size_t mn = static_cast<size_t>(ops.m * ops.n);
    ArmOutput out;
    out.y = y.download(mn);
    out.acc = acc.download(mn);
    return out;
  }
};

// An FP8 arm's device buffers, kept across runs as `DeviceLayer` keeps an INT8 arm's: codes, scales,
// the bf16 output and the fp32 accumulator, outputs poisoned before each run.
struct DeviceFp8Layer {
  std::mutex mu;
  int device = -1;
  DeviceScratch<uint8_t> a, w;
  DeviceScratch<float> sa, sw, d;
  DeviceScratch<uint16_t> y;
  void select_device() {
    if (switched_device(device)) a.release(), w.release(), sa.release(), sw.release(), d.release(), y.release();
  }
};

// `cuda:mma-<epilogue>`.
class MmaArm final : public Arm {
 public:
  explicit MmaArm(const Epilogue& e) : epilogue_(e) {
    QC_INPUT(e.kind != EpilogueKind::exact,
             "epilogue `{}` has no CUDA kernel instance (the exact formula is CPU-only: use cpu:exact)", e.name);
  }
  ArmInfo info() const override {
    ArmInfo i;
    i.label = fmt::format("cuda:mma-{}", epilogue_.name);
    i.description = fmt::format(
        "qconform INT8 tensor-core GEMM (wgmma m64nNk32 s8 + TMA on sm_90a for M > 64, else mma.sync m16n8k32 s8) "
        "with fused epilogue: {}",
                                epilogue_.formula);
    i.epilogue = std::string(epilogue_.name);
    i.exposes_accumulator = true;
    i.concurrent_calls = true;  // its device buffers are used under `d_.mu`
    i.resident = true;
    return i;
  }
  ArmOutput run(const LayerOperands& ops) override {
    check(ops);
    std::lock_guard lock(d_.mu);
    d_.upload(ops);
    const ResidentOperands on{&ops, d_.a.get(), d_.w.get(), d_.sa.get(), d_.sw.get(), d_.bias.get(), nullptr};
    RunRecord record = launch(on, {d_.y.get(), d_.acc.get()});
    QC_CUDA_CHECK(cudaDeviceSynchronize());
    ArmOutput out = d_.download(ops);
    out.record = std::move(record);
    return out;
  }
  RunRecord run_resident(const ResidentOperands& ops, const ResidentOutputs& out) override {
    check(*ops.host);
    return launch(ops, out);
  }

 private:
  void check(const LayerOperands& ops) const {
    const std::string label = info().label;
    check_shape(label, ops, /*int32_accumulator=*/true);
    require_bias_accepted(epilogue_, ops.has_bias());
    require_device(label);
  }
  // The kernel on device operands, enqueued on `ops.stream`.
  RunRecord launch(const ResidentOperands& ops, const ResidentOutputs& out) {
    const ArmInfo i = info();
    const LayerOperands& h = *ops.host;
    cuda_kernels::ScaledMmArgs args;
    args.a = ops.a, args.w = ops.w, args.sa = ops.a_scale, args.sw = ops.w_scale;
    args.bias = h.has_bias() ? ops.bias : nullptr;
    args.y = out.y, args.acc = out.acc;
    args.m = static_cast<int>(h.m), args.n = static_cast<int>(h.n), args.k = static_cast<int>(h.k);
    // `sglang-sm90` runs the CUTLASS or (swap-AB shapes) the Triton instance: the rule the CPU uses.
    args.formula = formula::instance_kind(epilogue_.kind, h.m, h.n);
    args.bias_mode = epilogue_.bias_mode;
    std::string kernel = checked_launch(
        cuda_kernels::launch_int8_scaled_mm(args, static_cast<cudaStream_t>(ops.stream)), i.label.c_str());
    RunRecord record = cuda_record(i, std::move(kernel), fmt::format("qconform {} CUDA kernels", version()));
    record.extra["formula_instance"] = formula::kind_name(args.formula);
    return record;
  }

  const Epilogue& epilogue_;
  DeviceLayer d_;
};

using PlanKey = std::tuple<int, int, int, int>;

class PlanCache {
 public:
  CublasLtGemm& get(CublasLtGemm::Kind kind, int m, int n, int k, bool fast, bool a_e5m2 = false,
                    bool w_e5m2 = false) {
    std::lock_guard<std::mutex> lock(mu_);
    const int variant = ((static_cast<int>(kind) * 2 + (a_e5m2 ? 1 : 0)) * 2 + (w_e5m2 ? 1 : 0)) * 2 + (fast ? 1 : 0);
    auto& slot = plans_[PlanKey{variant, m, n, k}];
    if (!slot) slot = std::make_unique<CublasLtGemm>(kind, m, n, k, fast, a_e5m2, w_e5m2);
    return *slot;
  }

 private:
  std::mutex mu_;
  std::map<PlanKey, std::unique_ptr<CublasLtGemm>> plans_;
};

// `cuda:cublaslt-int8`: cuBLASLt INT8 GEMM (s32 out) + the separate `vllm-cutlass-muladd` epilogue
// kernel (identical to `vllm-cutlass` without bias; with a bias, multiply then add, never an FMA).
class CublasLtInt8Arm final : public Arm {
 public:
  ArmInfo info() const override {
    ArmInfo i;
    i.label = "cuda:cublaslt-int8";
    i.description = "cuBLASLt INT8 GEMM (TN, s32 out) + separate epilogue kernel vllm-cutlass-muladd";
    i.epilogue = "vllm-cutlass-muladd";
    i.exposes_accumulator = true;
    i.concurrent_calls = true;  // its device buffers are used under `d_.mu`
    i.resident = true;
    return i;
  }
  ArmOutput run(const LayerOperands& ops) override {
    CublasLtGemm& plan = checked_plan(ops);
    std::lock_guard lock(d_.mu);
    d_.upload(ops);
    const ResidentOperands on{&ops, d_.a.get(), d_.w.get(), d_.sa.get(), d_.sw.get(), d_.bias.get(), nullptr};
    RunRecord record = launch(plan, on, {d_.y.get(), d_.acc.get()});
    QC_CUDA_CHECK(cudaDeviceSynchronize());
    ArmOutput out = d_.download(ops);
    out.record = std::move(record);
    return out;
  }
  RunRecord run_resident(const ResidentOperands& ops, const ResidentOutputs& out) override {
    QC_CHECK(out.acc != nullptr, "arm cuda:cublaslt-int8: its GEMM writes the accumulator: expected a buffer for it");
    return launch(checked_plan(*ops.host), ops, out);
  }

 private:
  // The layer checked, and the plan for its shape.
  CublasLtGemm& checked_plan(const LayerOperands& ops) {
    const ArmInfo i = info();
    check_shape(i.label, ops, /*int32_accumulator=*/true);
    require_bias_accepted(epilogue(i.epilogue), ops.has_bias());
    require_device(i.label);
    CublasLtGemm& plan = plans_.get(CublasLtGemm::Kind::int8_s32, static_cast<int>(ops.m), static_cast<int>(ops.n),
                                    static_cast<int>(ops.k), false);
    QC_INPUT(plan.ok(), "arm {}: layer `{}`: {}", i.label, ops.name, plan.error());
    return plan;
  }
  // The GEMM into `out.acc`, then the epilogue kernel into `out.y`, enqueued on `ops.stream`.
  RunRecord launch(CublasLtGemm& plan, const ResidentOperands& ops, const ResidentOutputs& out) {
    const ArmInfo i = info();
    const LayerOperands& h = *ops.host;
    const Epilogue& e = epilogue(i.epilogue);
    const int m = static_cast<int>(h.m), n = static_cast<int>(h.n);
    const auto stream = static_cast<cudaStream_t>(ops.stream);
    plan.run(ops.a, ops.w, out.acc, nullptr, nullptr, stream);
    std::string epi = checked_launch(
        cuda_kernels::launch_int32_scaled_epilogue(out.acc, ops.a_scale, ops.w_scale, h.has_bias() ? ops.bias : nullptr,
                                                   out.y, m, n, formula::instance_kind(e.kind, m, n), e.bias_mode, stream),
        i.label.c_str());
    return cuda_record(i, plan.identity() + " + " + epi, cublaslt_description());
  }

  PlanCache plans_;
  DeviceLayer d_;
};

// `cuda:cublaslt-fp8[-fastacc]`: FP8 operands (e4m3 x e4m3, e5m2 activations x e4m3 weights, e4m3 x
// e5m2; cuBLASLt has no e5m2 x e5m2), per-token / per-channel fp32 scales, bf16 out.
class CublasLtFp8Arm final : public Arm {
 public:
  explicit CublasLtFp8Arm(bool fast) : fast_(fast) {}
  // The model a run follows, or none with the reason: a split-K algorithm (chosen by cuBLASLt's
  // heuristic for small M and large K) was measured off the one-pass models.
  // The model this run follows: the declared one for one pass over K, its split-K form when
  // cuBLASLt split K and reduced the partials in fp32 (measured), none otherwise (with the reason).
  static void declare_model(nlohmann::json& extra, const std::string& model, long long split_k, long long reduction) {
    extra["split_k"] = split_k;
    extra["reduction_scheme"] = reduction;
    std::string refusal;
    const std::string followed = cublaslt_split_k_model(model, split_k, reduction, refusal);
    if (refusal.empty()) {
      extra["accumulation_model"] = followed;
      extra.erase("accumulation_model_refused");
    } else {
      extra["accumulation_model"] = nullptr;
      extra["accumulation_model_refused"] = refusal;
    }
  }

  ArmInfo info() const override {
    ArmInfo i;
    i.label = fast_ ? "cuda:cublaslt-fp8-fastacc" : "cuda:cublaslt-fp8";
    i.description = fmt::format(
        "cuBLASLt FP8 GEMM (e4m3 x e4m3, e5m2 x e4m3 or e4m3 x e5m2; {} accumulation), per-token/per-channel "
        "outer-vector scales, bf16 out; int8 codes re-encoded to e4m3 only when exact",
        fast_ ? "fast (CUBLASLT_MATMUL_DESC_FAST_ACCUM)" : "default");
    i.exposes_accumulator = false;
    // The models measured to reproduce these paths bit for bit on the H200
    // (../shared/reference/fp8-accumulation.md; scripts/fp8-model-check.py re-measures them).
    i.accumulation_model = fast_ ? "hopper-fp8-chain" : "hopper-fp8-promote4";
    i.concurrent_calls = true;  // its device buffers are used under `d_.mu`, its plans under the cache's lock
    i.resident = true;
    return i;
  }
  // The unscaled fp32 GEMM (e4m3 x e4m3), through this arm's plans and device buffers.
  std::vector<float> fp8_accumulate(const uint8_t* a, const uint8_t* w, int64_t m, int64_t n, int64_t k,
                                    nlohmann::json& record, int /*threads*/) override {
    CublasLtGemm& plan = accumulator_plan(m, n, k);
    std::lock_guard lock(d_.mu);
    d_.select_device();
    const size_t mn = static_cast<size_t>(m * n);
    d_.a.upload({a, static_cast<size_t>(m * k)}), d_.w.upload({w, static_cast<size_t>(n * k)});
    d_.d.poison(mn);
    plan.run(d_.a.get(), d_.w.get(), d_.d.get(), nullptr, nullptr, nullptr);
    QC_CUDA_CHECK(cudaStreamSynchronize(nullptr));  // its own (legacy) stream: not verify's model evaluation beside it
    record = accumulator_record(plan);
    return d_.d.download(mn);
  }
  RunRecord accumulate_resident(const ResidentOperands& ops, float* d) override {
    const LayerOperands& h = *ops.host;
    CublasLtGemm& plan = accumulator_plan(h.m, h.n, h.k);
    std::lock_guard lock(d_.mu);  // the plan's workspace, in stream order with this arm's other calls
    plan.run(ops.a, ops.w, d, nullptr, nullptr, static_cast<cudaStream_t>(ops.stream));
    return accumulator_record(plan);
  }
  ArmOutput run(const LayerOperands& ops) override {
    const ArmInfo i = info();
    check_shape(i.label, ops, /*int32_accumulator=*/false);
    check_layer(ops);
    const Fp8LayerCodes codes = fp8_layer_codes(i.label, ops);
    check_codes(ops, codes);
    const size_t mn = static_cast<size_t>(ops.m * ops.n);
    std::lock_guard lock(d_.mu);
    d_.select_device();
    // The operands as the arm received them (an FP8 layer's own bytes; an INT8 layer's re-encoded codes).
    d_.a.upload(codes.a), d_.w.upload(codes.w), d_.sa.upload(ops.a_scale), d_.sw.upload(ops.w_scale);
    d_.y.poison(mn);
    const ResidentOperands on{&ops, reinterpret_cast<const int8_t*>(d_.a.get()), reinterpret_cast<const int8_t*>(d_.w.get()),
                              d_.sa.get(), d_.sw.get(), nullptr, nullptr};
    RunRecord record = launch(on, codes, d_.y.get());
    QC_CUDA_CHECK(cudaStreamSynchronize(nullptr));  // its own (legacy) stream: not verify's model evaluation beside it
    ArmOutput out;
    out.y = d_.y.download(mn);
    out.record = std::move(record);
    return out;
  }
  // The codes resident are the layer's own (an FP8 layer: verify's device pipeline takes no INT8 layer for
  // an FP8 pair). The fallback path's fp32 scratch is this arm's, used in stream order.
  RunRecord run_resident(const ResidentOperands& ops, const ResidentOutputs& out) override {
    const LayerOperands& h = *ops.host;
    const ArmInfo i = info();
    check_shape(i.label, h, /*int32_accumulator=*/false);
    QC_CHECK(h.fp8(), "arm {}: resident operands of layer `{}` are INT8 codes", i.label, h.name);
    check_layer(h);
    const Fp8LayerCodes codes = fp8_layer_codes(i.label, h);  // views of the layer's bytes: nothing copied
    check_codes(h, codes);
    std::lock_guard lock(d_.mu);
    d_.select_device();
    return launch(ops, codes, out.y);
  }

 private:
  CublasLtGemm& accumulator_plan(int64_t m, int64_t n, int64_t k) {
    const ArmInfo i = info();
    QC_INPUT(m >= 1 && n % 16 == 0 && n > 0 && k % 16 == 0 && k > 0 && m <= INT_MAX && n <= INT_MAX && k <= INT_MAX,
             "arm {}: fp32 accumulator: expected M >= 1, N and K positive multiples of 16 in int32 range, found M={} "
             "N={} K={}",
             i.label, m, n, k);
    require_device(i.label);
    CublasLtGemm& plan = plans_.get(CublasLtGemm::Kind::fp8_f32, static_cast<int>(m), static_cast<int>(n),
                                    static_cast<int>(k), fast_);
    QC_INPUT(plan.ok(), "arm {}: fp32 accumulator: {}", i.label, plan.error());
    return plan;
  }
  RunRecord accumulator_record(const CublasLtGemm& plan) const {
    const ArmInfo i = info();
    RunRecord rec = cuda_record(i, plan.identity(), cublaslt_description());
    declare_model(rec.extra, i.accumulation_model, plan.split_k(), plan.reduction_scheme());
    return rec;
  }
  void check_layer(const LayerOperands& ops) const {
    const ArmInfo i = info();
    QC_INPUT(!ops.has_bias(), "arm {}: layer `{}`: the FP8 arms take no bias (not modelled)", i.label, ops.name);
    require_device(i.label);
  }
  void check_codes(const LayerOperands& ops, const Fp8LayerCodes& codes) const {
    const ArmInfo i = info();
    const bool a_e5m2 = codes.a_format == Fp8Format::e5m2, w_e5m2 = codes.w_format == Fp8Format::e5m2;
    QC_INPUT(!(a_e5m2 && w_e5m2),
             "arm {}: layer `{}`: expected e4m3 x e4m3, e5m2 x e4m3 or e4m3 x e5m2 operands, found {} (cuBLASLt has no "
             "e5m2 x e5m2 FP8 GEMM)",
             i.label, ops.name, codes.description);
  }
  // The GEMM on device codes and scales into `y`, enqueued on `ops.stream`: cuBLASLt's outer-vector scaled
  // plan, else its fp32 plan and our scale kernel through the `fp8-scaled` row.
  RunRecord launch(const ResidentOperands& ops, const Fp8LayerCodes& codes, uint16_t* y) {
    const ArmInfo i = info();
    const LayerOperands& h = *ops.host;
    const bool a_e5m2 = codes.a_format == Fp8Format::e5m2, w_e5m2 = codes.w_format == Fp8Format::e5m2;
    const int m = static_cast<int>(h.m), n = static_cast<int>(h.n), k = static_cast<int>(h.k);
    const auto stream = static_cast<cudaStream_t>(ops.stream);
    std::string kernel;
    long long split_k = -1, reduction = -1;
    CublasLtGemm& vec = plans_.get(CublasLtGemm::Kind::fp8_bf16_vec, m, n, k, fast_, a_e5m2, w_e5m2);
    if (vec.ok()) {
      vec.run(ops.a, ops.w, y, ops.a_scale, ops.w_scale, stream);
      kernel = vec.identity();
      split_k = vec.split_k();
      reduction = vec.reduction_scheme();
    } else {
      CublasLtGemm& f32 = plans_.get(CublasLtGemm::Kind::fp8_f32, m, n, k, fast_, a_e5m2, w_e5m2);
      QC_INPUT(f32.ok(), "arm {}: layer `{}`: {}; {}", i.label, h.name, vec.error(), f32.error());
      const size_t mn = static_cast<size_t>(h.m * h.n);
      float* d = d_.d.reserve(mn);
      QC_CUDA_CHECK(cudaMemsetAsync(d, 0xFF, mn * sizeof(float), stream));
      f32.run(ops.a, ops.w, d, nullptr, nullptr, stream);
      split_k = f32.split_k();
      reduction = f32.reduction_scheme();
      kernel = f32.identity() + " + " +
               checked_launch(cuda_kernels::launch_f32_scale_to_bf16(d, ops.a_scale, ops.w_scale, y, m, n,
                                                                    fp8_epilogue().kind, stream),
                              i.label.c_str()) +
               " (outer-vector scaling unavailable: " + vec.error() + ")";
    }
    RunRecord record = cuda_record(i, std::move(kernel), cublaslt_description());
    record.extra["operands"] = codes.description;
    declare_model(record.extra, i.accumulation_model, split_k, reduction);
    return record;
  }

  bool fast_;
  PlanCache plans_;
  DeviceFp8Layer d_;
};

// `cuda:cublaslt-fp8-block`: cuBLASLt's block-scaled FP8 GEMM (CUDA 12.9+ on Hopper): e4m3 x e4m3,
// weight scales per 128x128 block (BLK128x128_32F), activation scales per token and 128 columns of K
// (VEC128_32F), bf16 out. No fast-accumulation variant: the block scale modes are promoted per 128-K
// block by construction (PyTorch refuses use_fast_accum with them, aten/src/ATen/cuda/CUDABlas.cpp).
// Operands are zero-padded: M and N to multiples of 16, K to whole 128-blocks (block_fp8_operands.hpp).
// The declared model is a guess until measured on the H200 (docs/gpu.md, "Block-scaled FP8 arms"; tests/gpu/test_cuda_fp8_block.cpp prints
// every form's mismatch count): CUTLASS's form for a tile with several activation scales and one
// weight scale (the scale product first, then one FFMA per block), i.e. block-deepgemm.
class CublasLtFp8BlockArm final : public Arm {
 public:
  ArmInfo info() const override {
    ArmInfo i;
    i.label = "cuda:cublaslt-fp8-block";
    i.description =
        "cuBLASLt block-scaled FP8 GEMM (e4m3 x e4m3, weight scales BLK128x128_32F, activation scales VEC128_32F, bf16 "
        "out; operands zero-padded: M, N to multiples of 16, K to whole 128-blocks)";
    i.accumulation_model = "block-deepgemm";
    i.element = ElementType::e4m3;
    i.block_k = 128;
    i.block_n = 128;
    i.concurrent_calls = true;  // its device buffers are used under `d_.mu`, its plans under the cache's lock
    return i;
  }
  ArmOutput run(const LayerOperands& ops) override {
    const ArmInfo i = info();
    // K padded to whole 128-blocks (the layouts of PyTorch's blockwise checks), N and M to 16.
    const int64_t kp = (ops.k + 127) / 128 * 128;
    const BlockFp8Operands o = block_fp8_operands(i.label, ops, 16, 16, 128, /*weights_k_major=*/true,
                                                  CublasLtGemm::block_scale_ld(static_cast<int>(std::min<int64_t>(kp, INT_MAX))));
    require_device(i.label);
    const int m = static_cast<int>(o.mp), n = static_cast<int>(o.np), k = static_cast<int>(o.kp);
    CublasLtGemm& plan = plans_.get(CublasLtGemm::Kind::fp8_bf16_block, m, n, k, false);
    QC_INPUT(plan.ok(), "arm {}: layer `{}`: cuBLASLt offers no block-scaled FP8 GEMM here: {}", i.label, ops.name,
             plan.error());
    std::lock_guard lock(d_.mu);
    d_.select_device();
    d_.a.upload(o.a()), d_.w.upload(o.w()), d_.sa.upload(o.sa), d_.sw.upload(o.sw);
    d_.y.poison(static_cast<size_t>(o.mp * o.np));
    plan.run(d_.a.get(), d_.w.get(), d_.y.get(), d_.sa.get(), d_.sw.get(), nullptr);
    // D through the fp32-out plan of the same scale modes, when cuBLASLt offers one and it is the same
    // algorithm (heuristic id and tile) as the bf16 plan's; otherwise D is not exposed, with the reason.
    CublasLtGemm& f32 = plans_.get(CublasLtGemm::Kind::fp8_f32_block, m, n, k, false);
    std::string d_note;
    if (!f32.ok()) {
      d_note = "not exposed: " + f32.error();
    } else if (f32.algorithm() != plan.algorithm()) {
      d_note = fmt::format("not exposed: the fp32-out plan's algorithm ({}) is not the bf16 plan's ({})",
                           f32.algorithm(), plan.algorithm());
    } else {
      d_.d.poison(static_cast<size_t>(o.mp * o.np));
      f32.run(d_.a.get(), d_.w.get(), d_.d.get(), d_.sa.get(), d_.sw.get(), nullptr);
      d_note = "the same algorithm with fp32 out: " + f32.identity();
    }
    QC_CUDA_CHECK(cudaStreamSynchronize(nullptr));  // its own (legacy) stream
    ArmOutput out;
    out.y = o.crop(d_.y.download(static_cast<size_t>(o.mp * o.np)));
    if (d_note.starts_with("the same")) out.d = o.crop(d_.d.download(static_cast<size_t>(o.mp * o.np)));
    out.record = cuda_record(i, plan.identity() + fmt::format(" on {}x{}x{} (padded from {}x{}x{})", o.mp, o.np, o.kp,
                                                             ops.m, ops.n, ops.k),
                             cublaslt_description());
    out.record.extra["operands"] = o.codes;
    out.record.extra["scales"] = ops.scaling_description();
    out.record.extra["d"] = d_note;
    const long long split = plan.split_k();
    out.record.extra["split_k"] = split;
    out.record.extra["reduction_scheme"] = plan.reduction_scheme();
    if (split > 1) {  // the partial sums of a split K range are reduced afterwards: not a chain of blocks
      out.record.extra["accumulation_model"] = nullptr;
      out.record.extra["accumulation_model_refused"] = fmt::format(
          "cuBLASLt split K into {} ranges (reduction scheme {}); the block models promote every K block into one "
          "accumulator in order",
          split, plan.reduction_scheme());
    } else {
      out.record.extra["accumulation_model"] = i.accumulation_model;
    }
    return out;
  }

 private:
  PlanCache plans_;
  DeviceFp8Layer d_;
};

// `cuda:mma-fp8-block-<form>`: qconform's own block-scaled FP8 kernel (kernels/sm90_fp8_block_mma.cu), per
// 128-K block the 4 `mma.sync` k32 steps chained from zero, then the promotion form `<form>` of the block
// model table written as the kernel's text (`block_model::promote`). Any block-scaled e4m3 layer with K
// blocks of 128 (weight blocks of any rows, per-channel or per-token scales too); D exposed. The chain is
// the tensor cores' for `mma.sync` on e4m3, measured on the H200 (0 of 388,736 fp32 outputs off):
// `sm90-mma-sync-e4m3`, two HMMA f16 steps per k32 instruction over interleaved halves, then an fp32
// add (fp8_model.cpp); tests/gpu/test_cuda_fp8_block.cpp holds it to that.
class MmaFp8BlockArm final : public Arm {
 public:
  explicit MmaFp8BlockArm(BlockPromotion form) : form_(form) {}
  ArmInfo info() const override {
    ArmInfo i;
    i.label = fmt::format("cuda:mma-fp8-block-{}", block_promotion_name(form_));
    i.accumulation_model = fmt::format("block-{}+sm90-mma-sync-e4m3", block_promotion_name(form_));
    i.description = fmt::format(
        "qconform block-scaled FP8 kernel (mma.sync m16n8k32 e4m3, 64x64 tiles): per 128-K block 4 k32 steps chained "
        "from zero (each two HMMA f16 steps and an fp32 add: sm90-mma-sync-e4m3), then {}; y = bf16(D)",
        block_promotion_formula(form_));
    i.element = ElementType::e4m3;
    i.block_k = 128;
    i.concurrent_calls = true;  // its device buffers are used under `d_.mu`
    return i;
  }
  ArmOutput run(const LayerOperands& ops) override {
    const ArmInfo i = info();
    ops.validate();
    QC_INPUT(!ops.has_bias(), "arm {}: layer `{}`: the FP8 arms take no bias (not modelled)", i.label, ops.name);
    const Fp8LayerCodes codes = fp8_layer_codes(i.label, ops);
    QC_INPUT(codes.a_format == Fp8Format::e4m3 && codes.w_format == Fp8Format::e4m3,
             "arm {}: layer `{}`: expected e4m3 x e4m3 operands, found {}", i.label, ops.name, codes.description);
    QC_INPUT(ops.m >= 1 && ops.m <= INT_MAX && ops.n <= INT_MAX && ops.k <= INT_MAX,
             "arm {}: layer `{}`: expected M >= 1 and dimensions in int32 range, found M={} N={} K={}", i.label,
             ops.name, ops.m, ops.n, ops.k);
    require_device(i.label);
    const size_t mn = static_cast<size_t>(ops.m * ops.n);
    std::lock_guard lock(d_.mu);
    d_.select_device();
    d_.a.upload(codes.a), d_.w.upload(codes.w), d_.sa.upload(ops.a_scale), d_.sw.upload(ops.w_scale);
    d_.d.poison(mn), d_.y.poison(mn);
    const auto scales = [&](const float* p, const ScaleLayout& l) {
      return cuda_kernels::DeviceBlockScales{p, l.block_rows, l.scale_cols(ops.k), l.k_blocked() ? 1 : 0};
    };
    std::string kernel = checked_launch(
        cuda_kernels::launch_fp8_block_mma(form_, d_.a.get(), d_.w.get(), scales(d_.sa.get(), ops.a_scaling),
                                           scales(d_.sw.get(), ops.w_scaling), d_.d.get(), d_.y.get(),
                                           static_cast<int>(ops.m), static_cast<int>(ops.n), static_cast<int>(ops.k),
                                           nullptr),
        i.label.c_str());
    QC_CUDA_CHECK(cudaStreamSynchronize(nullptr));
    ArmOutput out;
    out.y = d_.y.download(mn);
    out.d = d_.d.download(mn);
    out.record = cuda_record(i, std::move(kernel), fmt::format("qconform {} CUDA kernels", version()));
    out.record.extra["operands"] = codes.description;
    out.record.extra["scales"] = ops.scaling_description();
    out.record.extra["accumulation_model"] = i.accumulation_model;
    return out;
  }

 private:
  BlockPromotion form_;
  DeviceFp8Layer d_;
};

}  // namespace
}  // namespace cuda

namespace {

// The FP8 families of this backend, as messages list them (the CUTLASS ones only in a build with CUTLASS).
std::vector<Fp8ArmFamily> cuda_fp8_families() {
  std::vector<Fp8ArmFamily> f = {{"cuda:cublaslt-fp8", false},
                                 {"cuda:cublaslt-fp8-fastacc", false},
                                 {"cuda:cublaslt-fp8-block", true},
                                 {"cuda:mma-fp8-block-<form>", true}};
  if (!cutlass_arm_variants().empty()) {
    f.push_back({"cuda:cutlass-fp8-rowwise[-fastacc]", false});
    f.push_back({"cuda:cutlass-fp8-blockwise", true});
  }
  return f;
}

}  // namespace

void register_cuda_arms() {
  register_arm_backend(ArmBackend{
      "cuda",
      "NVIDIA GPU arms: qconform's INT8 tensor-core kernel with a fused named epilogue (mma-<epilogue>), cuBLASLt "
      "INT8 + declared epilogue, cuBLASLt FP8 (default and fast accumulation) and block-scaled FP8 (1x128 x 128x128 "
      "scales), qconform's own block-scaled FP8 kernel per promotion form (mma-fp8-block-<form>); with CUTLASS's "
      "headers, real CUTLASS kernels of vLLM's INT8, PyTorch's rowwise FP8 scaled-MM and the sm90 blockwise-scaled "
      "FP8 mainloop (cutlass-*)",
      [] {
        std::vector<std::string> names;
        for (const Epilogue& e : all_epilogues()) {
          if (e.kind != EpilogueKind::exact) names.push_back(fmt::format("mma-{}", e.name));
        }
        names.emplace_back("cublaslt-int8");
        names.emplace_back("cublaslt-fp8");
        names.emplace_back("cublaslt-fp8-fastacc");
        names.emplace_back("cublaslt-fp8-block");
        for (BlockPromotion f : block_promotions()) names.push_back(fmt::format("mma-fp8-block-{}", block_promotion_name(f)));
        for (std::string& v : cutlass_arm_variants()) names.push_back(std::move(v));
        return names;
      },
      [](std::string_view variant) -> std::unique_ptr<Arm> {
        if (variant.starts_with("mma-fp8-block-")) {
          for (BlockPromotion f : block_promotions()) {
            if (variant.substr(14) == block_promotion_name(f)) return std::make_unique<cuda::MmaFp8BlockArm>(f);
          }
          QC_FAIL_INPUT("unknown CUDA arm `cuda:{}`: expected mma-fp8-block-<form> with a form of the block model "
                        "table (triton, triton-nofma, deepgemm, deepgemm-nofma)",
                        variant);
        }
        if (variant.rfind("mma-", 0) == 0) return std::make_unique<cuda::MmaArm>(epilogue(variant.substr(4)));
        if (variant == "cublaslt-int8") return std::make_unique<cuda::CublasLtInt8Arm>();
        if (variant == "cublaslt-fp8") return std::make_unique<cuda::CublasLtFp8Arm>(false);
        if (variant == "cublaslt-fp8-fastacc") return std::make_unique<cuda::CublasLtFp8Arm>(true);
        if (variant == "cublaslt-fp8-block") return std::make_unique<cuda::CublasLtFp8BlockArm>();
        if (is_cutlass_variant(variant)) return make_cutlass_arm(variant);
        std::string formulas;  // the epilogues with a kernel instance, from the formula table
        for (const Epilogue& e : all_epilogues()) {
          if (e.kind == EpilogueKind::exact) continue;
          formulas += (formulas.empty() ? "" : ", ") + std::string(e.name);
        }
        QC_FAIL_INPUT(
            "unknown CUDA arm `cuda:{}`: expected mma-<epilogue> ({}), mma-fp8-block-<form>, cublaslt-int8, cublaslt-fp8, "
            "cublaslt-fp8-fastacc, cublaslt-fp8-block or cutlass-*",
            variant, formulas);
      },
      /*variant_is_file=*/false,
      /*fp8_families=*/cuda_fp8_families()});
}

}  // namespace qc
