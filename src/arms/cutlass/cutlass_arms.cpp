// The CUTLASS arms (cutlass_arms.hpp): each `run` uploads the layer, picks the kernel instance the
// engine's own dispatch would pick for this shape (cutlass_dispatch.hpp), runs it and records what
// ran: CUTLASS version, tile, cluster, schedules, stage count, orientation.
#include "arms/cutlass/cutlass_arms.hpp"

#include <fmt/format.h>

#include <array>
#include <climits>
#include <mutex>

#include "arms/absent_backends.hpp"  // generated: QC_CUTLASS_ABSENT, QC_CUTLASS_VERSION, QC_CUTLASS_INCLUDE
#include "qconform/error.hpp"

#ifdef QC_WITH_CUTLASS
#include "accum/fp8_model.hpp"  // fp8_layer_codes
#include "arms/block_fp8_operands.hpp"
#include "arms/cuda/cuda_common.hpp"
#include "arms/cutlass/cutlass_dispatch.hpp"
#include "arms/cutlass/kernels/sm90_cutlass_scaled_mm.cuh"
#include "core/version.hpp"
#include "qconform/accumulation.hpp"
#include "qconform/epilogue.hpp"
#endif

namespace qc {

namespace {

constexpr std::array<std::string_view, 5> kVariants = {"cutlass-int8-vllm-cutlass", "cutlass-int8-vllm-cutlass-fma",
                                                      "cutlass-fp8-rowwise", "cutlass-fp8-rowwise-fastacc",
                                                      "cutlass-fp8-blockwise"};

#ifdef QC_WITH_CUTLASS

using cutlass_arms::KernelConfig;

std::string config_text(const KernelConfig& c, int tile_m, int cluster_m, int cluster_n, const char* kernel_schedule,
                        const char* epilogue_schedule, int stages) {
  return fmt::format("tile {}x{}x{}, cluster {}x{}x1, {}, epilogue {}, {} stages", tile_m, c.tile_n, c.tile_k,
                     cluster_m, cluster_n, kernel_schedule, epilogue_schedule, stages);
}

void record_config(nlohmann::json& extra, int tile_m, int tile_n, int tile_k, int cluster_m, int cluster_n,
                   const char* kernel_schedule, const char* epilogue_schedule, int stages) {
  extra["cutlass_version"] = QC_CUTLASS_VERSION;
  extra["tile"] = {tile_m, tile_n, tile_k};
  extra["cluster"] = {cluster_m, cluster_n, 1};
  extra["kernel_schedule"] = kernel_schedule;
  extra["epilogue_schedule"] = epilogue_schedule;
  extra["stages"] = stages;
}

// The kernels take device pointers; a launch error (CUTLASS's status) is an internal error naming
// the arm and the instance, a CUDA error after it one naming the call.
void check_launch(const cutlass_kernels::LaunchResult& r, const std::string& arm, const std::string& instance) {
  QC_CHECK(r.error == nullptr, "arm {}: CUTLASS kernel {} failed: {}", arm, instance, r.error);
  QC_CUDA_CHECK(cudaGetLastError());
}

// The shape rules every CUTLASS instance here shares: TMA needs 16-byte aligned rows (K a multiple
// of 16 one-byte codes), the bf16 output 16-byte aligned rows or columns (N a multiple of 8), and
// an INT8 arm refuses the K at which INT32 could overflow (C1's overflow case; docs/plugins.md).
void check_shape(const std::string& arm, const LayerOperands& ops, bool int32_accumulator) {
  ops.validate();
  QC_INPUT(!int32_accumulator || ops.k <= kAccumMaxKInt32,
           "arm {}: layer `{}` ({}): K={} can overflow the INT32 accumulator (K * 2^14 >= 2^31); this arm accepts K <= {}",
           arm, ops.name, ops.source, ops.k, kAccumMaxKInt32);
  QC_INPUT(ops.m >= 1 && ops.m <= INT_MAX, "arm {}: layer `{}`: expected 1 <= M <= {}, found M={}", arm, ops.name,
           INT_MAX, ops.m);
  QC_INPUT(ops.n > 0 && ops.n % 8 == 0 && ops.n <= INT_MAX,
           "arm {}: layer `{}`: N must be a positive multiple of 8 (16-byte bf16 output rows), found N={}", arm,
           ops.name, ops.n);
  QC_INPUT(ops.k > 0 && ops.k % 16 == 0 && ops.k <= INT_MAX,
           "arm {}: layer `{}`: K must be a positive multiple of 16 (16-byte TMA rows), found K={}", arm, ops.name,
           ops.k);
}

// Device buffers kept across runs, used under `mu`. Scales are padded with zeros to a multiple of
// 256 (the broadcast loads of the epilogue read whole tiles; PyTorch pads its token scales so).
struct DeviceBuffers {
  std::mutex mu;
  int device = -1;
  cuda::DeviceScratch<uint8_t> a, w;
  cuda::DeviceScratch<float> sa, sw, d;
  cuda::DeviceScratch<uint16_t> bias, y;
  void select_device() {
    int current = 0;
    QC_CUDA_CHECK(cudaGetDevice(&current));
    if (current == device) return;
    device = current;
    a.release(), w.release(), sa.release(), sw.release(), d.release(), bias.release(), y.release();
  }
  static void upload_padded(cuda::DeviceScratch<float>& buf, std::span<const float> host) {
    const size_t padded = (host.size() + 255) / 256 * 256;
    float* p = buf.reserve(padded);
    QC_CUDA_CHECK(cudaMemset(p, 0, padded * sizeof(float)));
    QC_CUDA_CHECK(cudaMemcpy(p, host.data(), host.size_bytes(), cudaMemcpyHostToDevice));
  }
  void upload(std::span<const uint8_t> a_codes, std::span<const uint8_t> w_codes, const LayerOperands& ops) {
    select_device();
    a.upload(a_codes), w.upload(w_codes);
    upload_padded(sa, ops.a_scale), upload_padded(sw, ops.w_scale);
    bias.upload(ops.bias);
    y.poison(static_cast<size_t>(ops.m * ops.n));
  }
};

// The device must be sm_90: the instances carry sm_90a code only.
void require_sm90(const std::string& arm) {
  cuda::require_device(arm);
  int dev = 0, major = 0, minor = 0;
  QC_CUDA_CHECK(cudaGetDevice(&dev));
  QC_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
  QC_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev));
  QC_INPUT(major == 9 && minor == 0, "arm {}: its CUTLASS kernels are built for sm_90a only; this device is sm_{}{}",
           arm, major, minor);
}

RunRecord cutlass_record(const ArmInfo& info, std::string kernel) {
  RunRecord r;
  r.arm = info.label;
  r.kernel = std::move(kernel);
  r.epilogue = info.epilogue;
  r.device = cuda::device_description();
  r.library = cutlass_description();
  r.build = fmt::format("nvcc {}.{}, default --fmad=true (as the engines build CUTLASS), sm_90a", CUDART_VERSION / 1000,
                        (CUDART_VERSION % 1000) / 10);
  return r;
}

// `cuda:cutlass-int8-vllm-cutlass[-fma]`.
class CutlassInt8Arm final : public Arm {
 public:
  explicit CutlassInt8Arm(bool fma) : fma_(fma) {}
  ArmInfo info() const override {
    ArmInfo i;
    i.label = fma_ ? "cuda:cutlass-int8-vllm-cutlass-fma" : "cuda:cutlass-int8-vllm-cutlass";
    i.epilogue = fma_ ? "vllm-cutlass-fma" : "vllm-cutlass";
    i.description = fmt::format(
        "CUTLASS {} sm90 INT8 GEMM (TMA warp-specialized collective builders) with vLLM's c3x ScaledEpilogue{} "
        "epilogue tree and vLLM's M-bucket configurations: {}",
        QC_CUTLASS_VERSION, fma_ ? " / ScaledEpilogueBias" : "", epilogue(i.epilogue).formula);
    i.exposes_accumulator = false;
    i.concurrent_calls = true;  // its device buffers are used under `d_.mu`
    return i;
  }
  ArmOutput run(const LayerOperands& ops) override {
    const ArmInfo i = info();
    check_shape(i.label, ops, /*int32_accumulator=*/true);
    // An FP8 layer never reaches here: make_arm's guard refuses it for every INT8 arm.
    const Epilogue& e = epilogue(i.epilogue);
    QC_INPUT(!ops.has_bias() || e.accepts_bias(),
             "arm {}: layer `{}`: the formula `{}` refuses a bias (vLLM's ScaledEpilogueBias contracts its "
             "multiply_add into an FMA: use cuda:cutlass-int8-vllm-cutlass-fma)",
             i.label, ops.name, e.name);
    require_sm90(i.label);
    const auto config = cutlass_arms::vllm_int8_config(ops.m, ops.n);
    const KernelConfig& c = cutlass_arms::kInt8ConfigTable[static_cast<int>(config)];
    std::lock_guard lock(d_.mu);
    const auto bytes = [](std::span<const int8_t> s) { return std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(s.data()), s.size()); };
    d_.upload(bytes(ops.a_q), bytes(ops.w_q), ops);
    cutlass_kernels::ScaledMmArgs args;
    args.a = d_.a.get(), args.w = d_.w.get(), args.sa = d_.sa.get(), args.sw = d_.sw.get();
    args.bias = ops.has_bias() ? d_.bias.get() : nullptr;
    args.y = d_.y.get();
    args.m = static_cast<int>(ops.m), args.n = static_cast<int>(ops.n), args.k = static_cast<int>(ops.k);
    using Launch = cutlass_kernels::LaunchResult (*)(const cutlass_kernels::ScaledMmArgs&, bool);
    static constexpr std::array<Launch, cutlass_arms::kInt8Configs> kLaunch = {
        cutlass_kernels::launch_int8_vllm_config0, cutlass_kernels::launch_int8_vllm_config1,
        cutlass_kernels::launch_int8_vllm_config2, cutlass_kernels::launch_int8_vllm_config3,
        cutlass_kernels::launch_int8_vllm_config4};
    const auto r = kLaunch[static_cast<int>(config)](args, ops.has_bias());
    const std::string tree = ops.has_bias() ? "ScaledEpilogueBias" : "ScaledEpilogue";
    const std::string instance = fmt::format("vLLM sm90 int8 config {}", c.name);
    check_launch(r, i.label, instance);
    QC_CUDA_CHECK(cudaDeviceSynchronize());
    ArmOutput out;
    out.y = d_.y.download(static_cast<size_t>(ops.m * ops.n));
    out.record = cutlass_record(
        i, fmt::format("CUTLASS {} GemmUniversal sm90, {}: {}; EVT {}", QC_CUTLASS_VERSION, instance,
                       config_text(c, c.tile_m, c.cluster_m, c.cluster_n, c.kernel_schedule, c.epilogue_schedule, r.stages),
                       tree));
    record_config(out.record.extra, c.tile_m, c.tile_n, c.tile_k, c.cluster_m, c.cluster_n, c.kernel_schedule,
                  c.epilogue_schedule, r.stages);
    out.record.extra["vllm_config"] = c.name;
    out.record.extra["epilogue_tree"] = tree;
    return out;
  }

 private:
  bool fma_;
  DeviceBuffers d_;
};

// `cuda:cutlass-fp8-rowwise[-fastacc]`.
class CutlassFp8RowwiseArm final : public Arm {
 public:
  explicit CutlassFp8RowwiseArm(bool fast) : fast_(fast) {}
  ArmInfo info() const override {
    ArmInfo i;
    i.label = fast_ ? "cuda:cutlass-fp8-rowwise-fastacc" : "cuda:cutlass-fp8-rowwise";
    i.description = fmt::format(
        "CUTLASS {} sm90 FP8 e4m3 GEMM with PyTorch's f8f8bf16_rowwise epilogue tree and dispatch (tile, "
        "cluster, orientation), {} accumulation",
        QC_CUTLASS_VERSION, fast_ ? "fast (FP8FastAccum schedules)" : "default (promotion every 4 wgmma k-steps)");
    i.epilogue = "torch-rowwise";
    // CUTLASS's sm90 FP8 mainloop: without fast accumulation, GmmaFP8Accumulation promotes the wgmma
    // accumulator into an fp32 one after every `mma_promotion_interval` (4) k-blocks of 32; the
    // FP8FastAccum schedules chain every k-block in the wgmma accumulator.
    i.accumulation_model = fast_ ? "hopper-fp8-chain" : "hopper-fp8-promote4";
    i.concurrent_calls = true;  // its device buffers are used under `d_.mu`
    return i;
  }
  std::vector<float> fp8_accumulate(const uint8_t* a, const uint8_t* w, int64_t m, int64_t n, int64_t k,
                                    nlohmann::json& record, int /*threads*/) override {
    const ArmInfo i = info();
    QC_INPUT(m >= 1 && n > 0 && n % 8 == 0 && k > 0 && k % 16 == 0 && m <= INT_MAX && n <= INT_MAX && k <= INT_MAX,
             "arm {}: fp32 accumulator: expected M >= 1, N a positive multiple of 8, K a positive multiple of 16, "
             "found M={} N={} K={}",
             i.label, m, n, k);
    require_sm90(i.label);
    std::lock_guard lock(d_.mu);
    d_.select_device();
    const size_t mn = static_cast<size_t>(m * n);
    d_.a.upload({a, static_cast<size_t>(m * k)}), d_.w.upload({w, static_cast<size_t>(n * k)});
    d_.d.poison(mn);
    cutlass_kernels::ScaledMmArgs args;
    args.a = d_.a.get(), args.w = d_.w.get(), args.d = d_.d.get();
    args.m = static_cast<int>(m), args.n = static_cast<int>(n), args.k = static_cast<int>(k);
    const auto r = cutlass_kernels::launch_fp8_accumulate(args, fast_);
    const char* schedule = cutlass_arms::rowwise_kernel_schedule(false, fast_);
    const char* epi_schedule = cutlass_arms::rowwise_epilogue_schedule(false, fast_);
    check_launch(r, i.label, "fp32 accumulator");
    QC_CUDA_CHECK(cudaDeviceSynchronize());
    RunRecord rec = cutlass_record(
        i, fmt::format("CUTLASS {} GemmUniversal sm90 FP8 mainloop with the identity epilogue (fp32 out): tile "
                       "64x128x128, cluster 2x1x1, {}, epilogue {}, {} stages",
                       QC_CUTLASS_VERSION, schedule, epi_schedule, r.stages));
    record_config(rec.extra, 64, 128, 128, 2, 1, schedule, epi_schedule, r.stages);
    rec.extra["accumulation_model"] = i.accumulation_model;
    record = rec;
    return d_.d.download(mn);
  }
  ArmOutput run(const LayerOperands& ops) override {
    const ArmInfo i = info();
    check_shape(i.label, ops, /*int32_accumulator=*/false);
    QC_INPUT(!ops.has_bias(), "arm {}: layer `{}`: the FP8 arms take no bias (not modelled)", i.label, ops.name);
    require_sm90(i.label);
    const Fp8LayerCodes codes = fp8_layer_codes(i.label, ops);
    QC_INPUT(codes.a_format == Fp8Format::e4m3 && codes.w_format == Fp8Format::e4m3,
             "arm {}: layer `{}`: expected e4m3 x e4m3 operands, found {}", i.label, ops.name, codes.description);
    int dev = 0, sms = 0;
    QC_CUDA_CHECK(cudaGetDevice(&dev));
    QC_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    const formula::TorchRowwiseChoice choice = formula::torch_rowwise_choice(ops.m, ops.n);
    // The tile is chosen on the problem as launched (transposed: N rows, M columns).
    const int64_t rows = choice.transposed ? ops.n : ops.m, cols = choice.transposed ? ops.m : ops.n;
    const bool tile128 = !cutlass_arms::torch_rowwise_small_tile(rows, cols, choice.cluster_m, choice.cluster_n, sms);
    const int index = cutlass_arms::rowwise_index(tile128, choice.cluster_m == 2, choice.transposed);
    std::lock_guard lock(d_.mu);
    d_.upload(codes.a, codes.w, ops);
    cutlass_kernels::ScaledMmArgs args;
    args.a = d_.a.get(), args.w = d_.w.get(), args.sa = d_.sa.get(), args.sw = d_.sw.get();
    args.y = d_.y.get();
    args.m = static_cast<int>(ops.m), args.n = static_cast<int>(ops.n), args.k = static_cast<int>(ops.k);
    args.swizzle = choice.swizzle;
    const auto r = cutlass_kernels::launch_fp8_rowwise(args, index, fast_);
    const int tile_m = tile128 ? 128 : 64;
    const char* schedule = cutlass_arms::rowwise_kernel_schedule(tile128, fast_);
    const char* epi_schedule = cutlass_arms::rowwise_epilogue_schedule(tile128, fast_);
    const std::string instance = fmt::format("PyTorch sm90 f8f8bf16_rowwise{}", choice.transposed ? " (transposed)" : "");
    check_launch(r, i.label, instance);
    QC_CUDA_CHECK(cudaDeviceSynchronize());
    ArmOutput out;
    out.y = d_.y.download(static_cast<size_t>(ops.m * ops.n));
    out.record = cutlass_record(
        i, fmt::format("CUTLASS {} GemmUniversal sm90, {}: tile {}x128x128, cluster {}x{}x1, {}, epilogue {}, {} "
                       "stages, swizzle {}; EVT Cast(Add(Bias=0, Multiply(WScale, Multiply(XScale, Accum))))",
                       QC_CUTLASS_VERSION, instance, tile_m, choice.cluster_m, choice.cluster_n, schedule,
                       epi_schedule, r.stages, choice.swizzle));
    record_config(out.record.extra, tile_m, 128, 128, choice.cluster_m, choice.cluster_n, schedule, epi_schedule,
                  r.stages);
    out.record.extra["transposed"] = choice.transposed;
    out.record.extra["swizzle"] = choice.swizzle;
    out.record.extra["operands"] = codes.description;
    out.record.extra["accumulation_model"] = i.accumulation_model;
    return out;
  }

 private:
  bool fast_;
  DeviceBuffers d_;
};

// `cuda:cutlass-fp8-blockwise`: CUTLASS's sm90 blockwise-scaled FP8 mainloop
// (kernels/sm90_cutlass_fp8_blockwise.cuh, which derives the declared model from the CUTLASS source),
// 1 x 128 activation groups x 128 x 128 weight blocks; bf16 out, and D from the fp32-out instance of
// the same mainloop (exposed as `ArmOutput::d`). M and N are zero-padded to multiples of 16 and K to
// whole 128-blocks (block_fp8_operands.hpp).
class CutlassFp8BlockwiseArm final : public Arm {
 public:
  ArmInfo info() const override {
    ArmInfo i;
    i.label = "cuda:cutlass-fp8-blockwise";
    i.description = fmt::format(
        "CUTLASS {} sm90 blockwise-scaled FP8 GEMM (KernelTmaWarpSpecializedCooperativeFP8BlockScaledAccum, tile "
        "128x128x128, cluster 1x2x1; activation scales 1x128, weight scales 128x128; bf16 out, D from the same "
        "mainloop with fp32 out)",
        QC_CUTLASS_VERSION);
    // ScaleMsPerTile = 128 > 1 and ScaleNsPerTile = 1: the scale product first, then one FFMA per K block.
    i.accumulation_model = "block-deepgemm";
    i.element = ElementType::e4m3;
    i.block_k = 128;
    i.block_n = 128;
    i.concurrent_calls = true;  // its device buffers are used under `d_.mu`
    return i;
  }
  ArmOutput run(const LayerOperands& ops) override {
    const ArmInfo i = info();
    // M padded to a multiple of 16 (the activation scales are loaded by TMA along M when a tile holds 128
    // of them, IsTmaLoadSFA: their K stride, M floats, must be 16-byte aligned, `can_implement`), N to a
    // multiple of 16 (16-byte TMA rows of the output), K to whole 128-blocks (the K tile).
    const BlockFp8Operands o = block_fp8_operands(i.label, ops, 16, 16, 128, /*weights_k_major=*/true, 0);
    require_sm90(i.label);
    std::lock_guard lock(d_.mu);
    d_.select_device();
    d_.a.upload(o.a()), d_.w.upload(o.w()), d_.sa.upload(o.sa), d_.sw.upload(o.sw);
    const size_t mn = static_cast<size_t>(o.mp * o.np);
    d_.y.poison(mn), d_.d.poison(mn);
    cutlass_kernels::BlockwiseArgs args;
    args.a = d_.a.get(), args.w = d_.w.get(), args.sa = d_.sa.get(), args.sw = d_.sw.get();
    args.y = d_.y.get(), args.d = d_.d.get();
    args.m = static_cast<int>(o.mp), args.n = static_cast<int>(o.np), args.k = static_cast<int>(o.kp);
    const auto r = cutlass_kernels::launch_fp8_blockwise_bf16(args);
    check_launch(r, i.label, "sm90 blockwise FP8, bf16 out");
    check_launch(cutlass_kernels::launch_fp8_blockwise_f32(args), i.label, "sm90 blockwise FP8, fp32 out");
    QC_CUDA_CHECK(cudaDeviceSynchronize());
    ArmOutput out;
    out.y = o.crop(d_.y.download(mn));
    out.d = o.crop(d_.d.download(mn));
    const char* schedule = "KernelTmaWarpSpecializedCooperativeFP8BlockScaledAccum";
    const char* epi_schedule = "TmaWarpSpecializedCooperative";
    out.record = cutlass_record(
        i, fmt::format("CUTLASS {} GemmUniversal sm90 blockwise-scaled FP8 (Sm90BlockwiseScaleConfig<1, 128, 128, MN, "
                       "K>): tile 128x128x128, cluster 1x2x1, {}, epilogue {}, {} stages, identity epilogue to bf16 "
                       "(and to fp32 for D); on {}x{}x{} (padded from {}x{}x{})",
                       QC_CUTLASS_VERSION, schedule, epi_schedule, r.stages, o.mp, o.np, o.kp, ops.m, ops.n, ops.k));
    record_config(out.record.extra, 128, 128, 128, 1, 2, schedule, epi_schedule, r.stages);
    out.record.extra["operands"] = o.codes;
    out.record.extra["scales"] = ops.scaling_description();
    out.record.extra["accumulation_model"] = i.accumulation_model;
    return out;
  }

 private:
  DeviceBuffers d_;
};

#endif  // QC_WITH_CUTLASS

}  // namespace

bool is_cutlass_variant(std::string_view variant) { return variant.rfind("cutlass-", 0) == 0; }

std::vector<std::string> cutlass_arm_variants() {
#ifdef QC_WITH_CUTLASS
  return {kVariants.begin(), kVariants.end()};
#else
  return {};
#endif
}

std::string cutlass_description() {
#ifdef QC_WITH_CUTLASS
  return fmt::format("CUTLASS {} (headers {})", QC_CUTLASS_VERSION, QC_CUTLASS_INCLUDE);
#else
  return fmt::format("no CUTLASS in this build: {}", QC_CUTLASS_ABSENT);
#endif
}

std::unique_ptr<Arm> make_cutlass_arm(std::string_view variant) {
#ifdef QC_WITH_CUTLASS
  if (variant == kVariants[0]) return std::make_unique<CutlassInt8Arm>(false);
  if (variant == kVariants[1]) return std::make_unique<CutlassInt8Arm>(true);
  if (variant == kVariants[2]) return std::make_unique<CutlassFp8RowwiseArm>(false);
  if (variant == kVariants[3]) return std::make_unique<CutlassFp8RowwiseArm>(true);
  if (variant == kVariants[4]) return std::make_unique<CutlassFp8BlockwiseArm>();
  QC_FAIL_INPUT("unknown CUTLASS arm `cuda:{}`: expected one of cuda:{}", variant, fmt::join(kVariants, ", cuda:"));
#else
  QC_FAIL_INPUT("arm `cuda:{}`: this build has no CUTLASS arms: {}", variant, QC_CUTLASS_ABSENT);
#endif
}

}  // namespace qc
