// The public GPU entry points of arms/cuda/cuda.hpp: comparison, exact accumulation, raw FP8 GEMM.
#include <fmt/format.h>

#include <tuple>

#include "arms/cuda/cublaslt_gemm.hpp"
#include "arms/cuda/cuda_common.hpp"
#include "accum/fp8_model.hpp"
#include "accum/fp8_model_fp32.hpp"
#include "accum/fp8_model_fp64.hpp"
#include "arms/cuda/kernels/fp8_accum_model.cuh"
#include "arms/cuda/kernels/fp8_block_model.cuh"
#include "epilogue/block_models.hpp"
#include "arms/cuda/kernels/int64_exact_accum.cuh"
#include "arms/cuda/kernels/sm90_compare_bf16.cuh"
#include "arms/cuda/cuda.hpp"

namespace qc {

static_assert(GpuBf16Comparison::kUlpBuckets == cuda_kernels::kUlpBuckets);

GpuBf16Comparison compare_bf16_gpu(std::span<const uint16_t> a, std::span<const uint16_t> b) {
  QC_INPUT(a.size() == b.size(), "compare_bf16_gpu: arrays differ in length ({} vs {})", a.size(), b.size());
  cuda::require_device("compare_bf16_gpu");
  cuda::DeviceBuffer<uint16_t> da(a), db(b);
  cuda_kernels::Bf16CompareCounts zero;
  cuda::DeviceBuffer<cuda_kernels::Bf16CompareCounts> counts(std::span<const cuda_kernels::Bf16CompareCounts>(&zero, 1));
  cuda::checked_launch(cuda_kernels::launch_compare_bf16(da.get(), db.get(), static_cast<int64_t>(a.size()),
                                                         counts.get(), nullptr),
                       "compare_bf16_gpu");
  QC_CUDA_CHECK(cudaDeviceSynchronize());
  const cuda_kernels::Bf16CompareCounts c = counts.to_host()[0];
  GpuBf16Comparison r;
  r.elements = static_cast<int64_t>(a.size());
  r.bitwise_diff = static_cast<int64_t>(c.bitwise_diff);
  r.finite_diff = static_cast<int64_t>(c.finite_diff);
  r.nonfinite_mismatch = static_cast<int64_t>(c.nonfinite_mismatch);
  for (int i = 0; i < GpuBf16Comparison::kUlpBuckets; ++i) r.ulp_hist[i] = static_cast<int64_t>(c.ulp_hist[i]);
  r.max_ulp = static_cast<int64_t>(c.max_ulp);
  r.first_diff = c.first_diff == ~0ull ? -1 : static_cast<int64_t>(c.first_diff);
  return r;
}

namespace {

template <typename Out>
std::vector<Out> exact_accumulate_gpu(const int8_t* a, const int8_t* w, AccumShape s, const char* who) {
  QC_INPUT(s.m >= 0 && s.n >= 0 && s.k >= 0 && s.m <= INT32_MAX && s.n <= INT32_MAX && s.k <= INT32_MAX,
           "{}: expected M, N, K >= 0 in int32 range, found M={} N={} K={}", who, s.m, s.n, s.k);
  QC_INPUT(sizeof(Out) == 8 || s.k <= kAccumMaxKInt32,
           "{}: K={} violates the no-overflow proof K*2^14 < 2^31 (K <= {}); use exact_accumulate_i64_gpu", who, s.k,
           kAccumMaxKInt32);
  if (s.m == 0 || s.n == 0) return {};
  cuda::require_device(who);
  cuda::DeviceBuffer<int8_t> da(std::span<const int8_t>(a, static_cast<size_t>(s.m * s.k)));
  cuda::DeviceBuffer<int8_t> dw(std::span<const int8_t>(w, static_cast<size_t>(s.n * s.k)));
  cuda::DeviceBuffer<Out> out(static_cast<size_t>(s.m * s.n));
  cuda::checked_launch(cuda_kernels::launch_int64_exact_accum(da.get(), dw.get(), out.get(), static_cast<int>(s.m),
                                                              static_cast<int>(s.n), static_cast<int>(s.k), nullptr),
                       who);
  QC_CUDA_CHECK(cudaDeviceSynchronize());
  return out.to_host();
}

}  // namespace

std::vector<int64_t> exact_accumulate_i64_gpu(const int8_t* a, const int8_t* w, AccumShape s) {
  return exact_accumulate_gpu<int64_t>(a, w, s, "exact_accumulate_i64_gpu");
}

std::vector<int32_t> exact_accumulate_i32_gpu(const int8_t* a, const int8_t* w, AccumShape s) {
  return exact_accumulate_gpu<int32_t>(a, w, s, "exact_accumulate_i32_gpu");
}

ExactAccumulators exact_accumulate_gpu(const int8_t* a, const int8_t* w, AccumShape s) {
  ExactAccumulators e;
  if (s.k <= kAccumMaxKInt32) {
    e.i32 = exact_accumulate_gpu<int32_t>(a, w, s, "exact_accumulate_gpu");
  } else {
    e.i64 = exact_accumulate_gpu<int64_t>(a, w, s, "exact_accumulate_gpu");
  }
  return e;
}

std::vector<float> fp8_gemm_cublaslt_f32(const uint8_t* a_e4m3, const uint8_t* w_e4m3, AccumShape s, bool fast_accum,
                                         RunRecord* record) {
  QC_INPUT(s.m >= 1 && s.n % 16 == 0 && s.n > 0 && s.k % 16 == 0 && s.k > 0,
           "fp8_gemm_cublaslt_f32: expected M >= 1, N and K positive multiples of 16, found M={} N={} K={}", s.m, s.n,
           s.k);
  cuda::require_device("fp8_gemm_cublaslt_f32");
  cuda::CublasLtGemm plan(cuda::CublasLtGemm::Kind::fp8_f32, static_cast<int>(s.m), static_cast<int>(s.n),
                          static_cast<int>(s.k), fast_accum);
  QC_INPUT(plan.ok(), "fp8_gemm_cublaslt_f32: {}", plan.error());
  cuda::DeviceBuffer<uint8_t> da(std::span<const uint8_t>(a_e4m3, static_cast<size_t>(s.m * s.k)));
  cuda::DeviceBuffer<uint8_t> dw(std::span<const uint8_t>(w_e4m3, static_cast<size_t>(s.n * s.k)));
  cuda::DeviceBuffer<float> d(static_cast<size_t>(s.m * s.n));
  plan.run(da.get(), dw.get(), d.get(), nullptr, nullptr, nullptr);
  QC_CUDA_CHECK(cudaDeviceSynchronize());
  if (record != nullptr) {
    record->kernel = plan.identity();
    record->extra["split_k"] = plan.split_k();
    record->extra["reduction_scheme"] = plan.reduction_scheme();
    record->device = cuda::device_description();
    record->library = cuda::cublaslt_description();
  }
  return d.to_host();
}

// The codes live on a stream of their own (non-blocking, stream-ordered allocations), so that verify
// can evaluate models on a host thread beside the arms: nothing here waits for the arms' work on the
// legacy default stream, nor they (they synchronize their own stream) for this.
struct GpuFp8Codes::Impl {
  Fp8Format fa = Fp8Format::e4m3, fw = Fp8Format::e4m3;
  AccumShape s{0, 0, 0};
  cudaStream_t stream = nullptr;
  uint8_t* a = nullptr;
  uint8_t* w = nullptr;
  mutable uint8_t* wt = nullptr;  // w transposed, for the fp64 kernel (made when first needed)
  float* d = nullptr;
  mutable float* d2 = nullptr;  // the second model's d of `evaluate_pair` (made when first needed)
  // Block models (made when first needed): one K block's columns of a and w, its chain results, the scales.
  struct Block {
    uint8_t* a = nullptr;
    uint8_t* w = nullptr;
    uint8_t* wt = nullptr;
    float* c = nullptr;
    float* sa = nullptr;
    float* sw = nullptr;
    int64_t block_k = 0;
    size_t sa_count = 0, sw_count = 0;
  };
  mutable Block blk;
  // The chains between launches over parts of K (cuda_kernels::ModelLaunches), freed behind the call.
  struct LaunchState {
    const Impl& x;
    cuda_kernels::ModelLaunches launches;
    LaunchState(const Impl& impl, int models, int64_t k_per_launch) : x(impl) {
      if (k_per_launch <= 0) return;
      launches.k_per_launch = k_per_launch;
      launches.state = x.allocate<float>(cuda_kernels::ModelLaunches::state_floats(models, x.s.m, x.s.n));
    }
    ~LaunchState() {
      if (launches.state != nullptr) cudaFreeAsync(launches.state, x.stream);
    }
    LaunchState(const LaunchState&) = delete;
    LaunchState& operator=(const LaunchState&) = delete;
  };
  ~Impl() {
    for (void* p : {static_cast<void*>(a), static_cast<void*>(w), static_cast<void*>(wt), static_cast<void*>(d),
                    static_cast<void*>(d2),
                    static_cast<void*>(blk.a), static_cast<void*>(blk.w), static_cast<void*>(blk.wt),
                    static_cast<void*>(blk.c), static_cast<void*>(blk.sa), static_cast<void*>(blk.sw)}) {
      if (p != nullptr) cudaFreeAsync(p, stream);
    }
    if (stream != nullptr) cudaStreamDestroy(stream);  // returns at once; the frees complete in order
  }
  template <typename T>
  T* allocate(size_t count) const {
    void* p = nullptr;
    QC_CUDA_CHECK(cudaMallocAsync(&p, count * sizeof(T), stream));
    return static_cast<T*>(p);
  }
};

GpuFp8Codes::GpuFp8Codes(const uint8_t* a, Fp8Format fa, const uint8_t* w, Fp8Format fw, AccumShape s)
    : impl_(std::make_unique<Impl>()) {
  // The codes once, here (finite, shape sane); each evaluation checks only its model.
  validate_fp8_codes(Fp8Gemm{a, fa, w, fw, s});
  QC_INPUT(s.m <= INT32_MAX && s.n <= INT32_MAX, "GpuFp8Codes: expected M, N in int32 range, found M={} N={}", s.m, s.n);
  Impl& x = *impl_;
  x.fa = fa, x.fw = fw, x.s = s;
  if (s.m == 0 || s.n == 0 || s.k == 0) return;
  cuda::require_device("fp8 accumulation models on the GPU");
  QC_CUDA_CHECK(cudaStreamCreateWithFlags(&x.stream, cudaStreamNonBlocking));
  const size_t a_bytes = static_cast<size_t>(s.m * s.k), w_bytes = static_cast<size_t>(s.n * s.k);
  x.a = x.allocate<uint8_t>(a_bytes);
  x.w = x.allocate<uint8_t>(w_bytes);
  x.d = x.allocate<float>(static_cast<size_t>(s.m * s.n));
  QC_CUDA_CHECK(cudaMemcpyAsync(x.a, a, a_bytes, cudaMemcpyHostToDevice, x.stream));
  QC_CUDA_CHECK(cudaMemcpyAsync(x.w, w, w_bytes, cudaMemcpyHostToDevice, x.stream));
  QC_CUDA_CHECK(cudaStreamSynchronize(x.stream));  // the host codes may go away after this returns
}

GpuFp8Codes::~GpuFp8Codes() = default;
GpuFp8Codes::GpuFp8Codes(GpuFp8Codes&&) noexcept = default;
GpuFp8Codes& GpuFp8Codes::operator=(GpuFp8Codes&&) noexcept = default;

std::vector<float> GpuFp8Codes::evaluate(const Fp8AccumModel& model, std::string* kernel, Fp8GpuKernel which,
                                         int64_t k_per_launch) const {
  const Impl& x = *impl_;
  validate_fp8_model_for(model, x.s);
  if (x.s.m == 0 || x.s.n == 0) return {};
  if (x.s.k == 0) return std::vector<float>(static_cast<size_t>(x.s.m * x.s.n), 0.0f);  // every sum is +0
  const bool fp32_kernel = which == Fp8GpuKernel::best && accum_fp32::gpu_kernel_takes(model, x.s.k);
  if (x.wt == nullptr && !fp32_kernel && which != Fp8GpuKernel::reference &&
      accum_fp64::path_of(model, x.fa, x.fw, x.s.k) != accum_fp64::Path::reference) {
    x.wt = x.allocate<uint8_t>(static_cast<size_t>(x.s.n * x.s.k));  // the fp64 kernel's pre-pass writes it
  }
  const Impl::LaunchState cut(x, 1, fp32_kernel ? k_per_launch : 0);
  const std::string name = cuda::checked_launch(
      cuda_kernels::launch_fp8_accum_model(model, x.a, x.fa, x.w, x.fw, x.wt, x.d, static_cast<int>(x.s.m),
                                           static_cast<int>(x.s.n), x.s.k, /*allow_fp32=*/which == Fp8GpuKernel::best,
                                           /*reference_kernel=*/which == Fp8GpuKernel::reference, x.stream,
                                           cut.launches),
      "fp8 accumulation models on the GPU");
  std::vector<float> out(static_cast<size_t>(x.s.m * x.s.n));
  QC_CUDA_CHECK(cudaMemcpyAsync(out.data(), x.d, out.size() * sizeof(float), cudaMemcpyDeviceToHost, x.stream));
  QC_CUDA_CHECK(cudaStreamSynchronize(x.stream));
  if (kernel != nullptr) *kernel = name;
  return out;
}

std::array<std::vector<float>, 2> GpuFp8Codes::evaluate_pair(const Fp8AccumModel& first, const Fp8AccumModel& second,
                                                             std::string* kernel, int64_t k_per_launch) const {
  const Impl& x = *impl_;
  validate_fp8_model_for(first, x.s);
  validate_fp8_model_for(second, x.s);
  QC_INPUT(cuda_kernels::fp8_accum_models_share_steps(first, second, x.s.k),
           "GpuFp8Codes::evaluate_pair: expected two models that run the same steps in the fp32 kernel (they may differ "
           "only in their promotion), found models that do not at K = {}", x.s.k);
  const size_t mn = static_cast<size_t>(x.s.m * x.s.n);
  if (mn == 0) return {};
  if (x.d2 == nullptr) x.d2 = x.allocate<float>(mn);
  const Impl::LaunchState cut(x, 2, k_per_launch);
  const std::string name = cuda::checked_launch(
      cuda_kernels::launch_fp8_accum_model_pair(first, second, x.a, x.fa, x.w, x.fw, x.d, x.d2, static_cast<int>(x.s.m),
                                                static_cast<int>(x.s.n), x.s.k, x.stream, cut.launches),
      "fp8 accumulation models on the GPU");
  std::array<std::vector<float>, 2> out{std::vector<float>(mn), std::vector<float>(mn)};
  QC_CUDA_CHECK(cudaMemcpyAsync(out[0].data(), x.d, mn * sizeof(float), cudaMemcpyDeviceToHost, x.stream));
  QC_CUDA_CHECK(cudaMemcpyAsync(out[1].data(), x.d2, mn * sizeof(float), cudaMemcpyDeviceToHost, x.stream));
  QC_CUDA_CHECK(cudaStreamSynchronize(x.stream));
  if (kernel != nullptr) *kernel = name;
  return out;
}

namespace {

// A scale array on the device, reallocated when it grows.
void upload_scales(float*& dst, size_t& capacity, std::span<const float> host, cudaStream_t stream) {
  if (capacity < host.size()) {
    if (dst != nullptr) QC_CUDA_CHECK(cudaFreeAsync(dst, stream));
    QC_CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&dst), host.size_bytes(), stream));
    capacity = host.size();
  }
  QC_CUDA_CHECK(cudaMemcpyAsync(dst, host.data(), host.size_bytes(), cudaMemcpyHostToDevice, stream));
}

cuda_kernels::DeviceBlockScales device_scales(const float* p, const ScaleLayout& l, int64_t k) {
  return {p, l.block_rows, l.scale_cols(k), l.k_blocked() ? 1 : 0};
}

}  // namespace

std::vector<float> GpuFp8Codes::evaluate_block(const BlockModel& model, const Fp8BlockGemm& g, std::string* kernel,
                                               Fp8GpuKernel which) const {
  const Impl& x = *impl_;
  QC_INPUT(g.codes.s.m == x.s.m && g.codes.s.n == x.s.n && g.codes.s.k == x.s.k && g.codes.a_format == x.fa &&
               g.codes.w_format == x.fw,
           "GpuFp8Codes::evaluate_block: the GEMM ({}x{}x{}) is not the one uploaded ({}x{}x{})", g.codes.s.m,
           g.codes.s.n, g.codes.s.k, x.s.m, x.s.n, x.s.k);
  validate_block_model_for(model, g, model.name);
  const int64_t M = x.s.m, N = x.s.n, K = x.s.k, bk = g.block_k;
  if (M == 0 || N == 0) return {};
  if (K == 0) return std::vector<float>(static_cast<size_t>(M * N), 0.0f);  // D = +0
  Impl::Block& b = x.blk;
  upload_scales(b.sa, b.sa_count, g.a_scale, x.stream);
  upload_scales(b.sw, b.sw_count, g.w_scale, x.stream);
  const cuda_kernels::DeviceBlockScales sa = device_scales(b.sa, g.a_scaling, K), sw = device_scales(b.sw, g.w_scaling, K);
  const int m = static_cast<int>(M), n = static_cast<int>(N);
  const char* who = "block fp8 accumulation models on the GPU";
  std::string name;
  // An interleaved chain runs in K order over each block's codes gathered in step order (one range per block).
  const Fp8AccumModel& chain = model.chain.model;
  const bool interleaved = chain.interleave > 0;
  if (which == Fp8GpuKernel::reference || (interleaved && chain.splits > 1)) {
    name = cuda::checked_launch(cuda_kernels::launch_fp8_block_model_reference(model.chain.model, model.form, x.a, x.fa,
                                                                               x.w, x.fw, x.d, m, n, K, bk, sa, sw,
                                                                               x.stream),
                                who);
  } else {
    if (b.block_k < bk) {  // the block scratch, for blocks of up to bk columns
      for (uint8_t** p : {&b.a, &b.w, &b.wt}) {
        if (*p != nullptr) QC_CUDA_CHECK(cudaFreeAsync(*p, x.stream));
      }
      if (b.c != nullptr) QC_CUDA_CHECK(cudaFreeAsync(b.c, x.stream));
      b.a = x.allocate<uint8_t>(static_cast<size_t>(M * bk));
      b.w = x.allocate<uint8_t>(static_cast<size_t>(N * bk));
      b.wt = x.allocate<uint8_t>(static_cast<size_t>(N * bk));
      b.c = x.allocate<float>(static_cast<size_t>(M * N));
      b.block_k = bk;
    }
    QC_CUDA_CHECK(cudaMemsetAsync(x.d, 0, static_cast<size_t>(M * N) * sizeof(float), x.stream));  // D from +0
    std::string chain_kernel;
    int64_t blk = 0;
    const Fp8AccumModel run_chain = interleaved ? in_k_order(chain) : chain;
    for (int64_t k0 = 0; k0 < K; k0 += bk, ++blk) {
      const int64_t len = std::min(bk, K - k0);
      const int64_t cols = interleaved ? gathered_steps_k(chain, len) : len;  // <= bk: bk is whole pairs (validated)
      for (const auto& [src, dst, rows] : {std::tuple{x.a, b.a, m}, std::tuple{x.w, b.w, n}}) {
        cuda::checked_launch(cuda_kernels::launch_gather_columns(src, dst, rows, K, k0, len, x.stream, chain.step_k,
                                                                 chain.interleave, cols),
                             who);
      }
      chain_kernel = cuda::checked_launch(
          cuda_kernels::launch_fp8_accum_model(run_chain, b.a, x.fa, b.w, x.fw, b.wt, b.c, m, n, cols,
                                               /*allow_fp32=*/which == Fp8GpuKernel::best,
                                               /*reference_kernel=*/false, x.stream),
          who);
      cuda::checked_launch(cuda_kernels::launch_block_promote(model.form, b.c, x.d, m, n, blk, sa, sw, x.stream), who);
    }
    name = fmt::format("qconform fp8 block model {} on the GPU: per K block of {}, columns gathered{}, chain by {}, "
                       "then block_promote (fp8_block_model.hpp promote)",
                       model.name, bk, interleaved ? " in step order" : "", chain_kernel);
  }
  std::vector<float> out(static_cast<size_t>(M * N));
  QC_CUDA_CHECK(cudaMemcpyAsync(out.data(), x.d, out.size() * sizeof(float), cudaMemcpyDeviceToHost, x.stream));
  QC_CUDA_CHECK(cudaStreamSynchronize(x.stream));
  if (kernel != nullptr) *kernel = name;
  return out;
}

std::vector<float> fp8_block_evaluate_gpu(const BlockModel& model, const Fp8BlockGemm& g, std::string* kernel,
                                          Fp8GpuKernel which) {
  const Fp8Gemm& c = g.codes;
  return GpuFp8Codes(c.a, c.a_format, c.w, c.w_format, c.s).evaluate_block(model, g, kernel, which);
}

std::vector<float> fp8_model_evaluate_gpu(const Fp8AccumModel& model, const uint8_t* a, Fp8Format fa, const uint8_t* w,
                                          Fp8Format fw, AccumShape s, std::string* kernel, Fp8GpuKernel which) {
  return GpuFp8Codes(a, fa, w, fw, s).evaluate(model, kernel, which);
}

}  // namespace qc
