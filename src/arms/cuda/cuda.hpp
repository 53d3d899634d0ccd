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
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "qconform/accumulation.hpp"
#include "qconform/arm.hpp"
#include "qconform/error.hpp"

namespace qc {

struct BlockModel;    // epilogue/block_models.hpp
struct Fp8BlockGemm;  // epilogue/block_models.hpp

// True when this build has CUDA and a device is present; otherwise false with the reason
// ("this build has no CUDA", "cudaGetDeviceCount: no CUDA-capable device is detected", ...).
bool cuda_available(std::string* reason = nullptr);

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
  // receives the identity of the kernel that ran.
  std::vector<float> evaluate(const Fp8AccumModel& model, std::string* kernel = nullptr,
                              Fp8GpuKernel which = Fp8GpuKernel::best) const;
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

#ifndef QC_WITH_CUDA
struct GpuFp8Codes::Impl {};
inline GpuFp8Codes::GpuFp8Codes(const uint8_t*, Fp8Format, const uint8_t*, Fp8Format, AccumShape) {
  QC_FAIL_INPUT("GpuFp8Codes: this build has no CUDA (rebuild with -DQCONFORM_WITH_CUDA=ON)");
}
inline GpuFp8Codes::~GpuFp8Codes() = default;
inline GpuFp8Codes::GpuFp8Codes(GpuFp8Codes&&) noexcept = default;
inline GpuFp8Codes& GpuFp8Codes::operator=(GpuFp8Codes&&) noexcept = default;
inline std::vector<float> GpuFp8Codes::evaluate(const Fp8AccumModel&, std::string*, Fp8GpuKernel) const {
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
