// Block-scaled FP8 accumulation models on the GPU (fp8_block_model.cuh), from the one text
// src/epilogue/fp8_block_model.hpp that the CPU's scalar reference and fast path compile:
// - the reference kernel runs `block_model::evaluate` per output (one thread each);
// - the fast path (GpuFp8Codes::evaluate_block, src/arms/cuda/cuda_api.cpp) gathers each K block's
//   columns contiguous (`launch_gather_columns`), evaluates the block's chain from zero with the
//   per-tensor kernels of fp8_accum_model.cu, and promotes every output into D with the header's
//   `block_model::promote` (`launch_block_promote`) — the CPU fast path's structure
//   (src/epilogue/block_models.cpp, `fp8_block_evaluate`).
// Nothing here depends on --fmad: the promotion is written with __fmul_rn / __fadd_rn / __fmaf_rn
// (formula::mul_rn, add_rn, fma_rn).
//
// Test: tests/gpu/test_cuda_fp8_block.cpp (both paths equal the CPU scalar reference bit for bit).
#include "fp8_block_model.cuh"

namespace qc::cuda_kernels {
namespace {

__device__ __forceinline__ const float* row_scales(const DeviceBlockScales& s, int64_t r) {
  return s.p + (r / s.block_rows) * s.cols;
}

__global__ void __launch_bounds__(256) fp8_block_model_kernel(Fp8AccumModel chain, BlockPromotion form,
                                                              const uint8_t* __restrict__ a, Fp8Format fa,
                                                              const uint8_t* __restrict__ w, Fp8Format fw,
                                                              float* __restrict__ d, int M, int N, int64_t K,
                                                              int64_t block_k, DeviceBlockScales sa,
                                                              DeviceBlockScales sw) {
  const int n = blockIdx.x * blockDim.x + threadIdx.x;
  const int m = blockIdx.y * blockDim.y + threadIdx.y;
  if (m >= M || n >= N) return;
  const block_model::OutputScales s{row_scales(sa, m), sa.step, row_scales(sw, n), sw.step};
  d[static_cast<int64_t>(m) * N + n] = block_model::evaluate(chain, form, a + static_cast<int64_t>(m) * K, fa,
                                                             w + static_cast<int64_t>(n) * K, fw, K, block_k, s);
}

__global__ void __launch_bounds__(256) gather_columns(const uint8_t* __restrict__ src, uint8_t* __restrict__ dst,
                                                      int rows, int64_t k, int64_t k0, int64_t len, int64_t step_k,
                                                      int64_t interleave, int64_t len_out) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= static_cast<int64_t>(rows) * len_out) return;
  const int64_t r = i / len_out, q = i % len_out;
  int64_t c = q;
  if (interleave > 0) {  // the q-th position in step order (accumulation.hpp interleaved_offset)
    const int64_t pair = 2 * step_k, u = q % pair;
    c = q / pair * pair + accum_model::interleaved_offset(interleave, u / step_k, u % step_k);
  }
  dst[i] = c < len ? src[r * k + k0 + c] : uint8_t{0};
}

__global__ void __launch_bounds__(256) block_promote(BlockPromotion form, const float* __restrict__ c,
                                                     float* __restrict__ d, int M, int N, int64_t b,
                                                     DeviceBlockScales sa, DeviceBlockScales sw) {
  const int n = blockIdx.x * blockDim.x + threadIdx.x;
  const int m = blockIdx.y * blockDim.y + threadIdx.y;
  if (m >= M || n >= N) return;
  const int64_t i = static_cast<int64_t>(m) * N + n;
  d[i] = block_model::promote(form, c[i], row_scales(sa, m)[b * sa.step], row_scales(sw, n)[b * sw.step], d[i]);
}

std::string launch_error(const char* what) {
  const cudaError_t err = cudaGetLastError();  // this host thread's launches only
  if (err != cudaSuccess) return std::string("error: ") + cudaGetErrorString(err) + " launching " + what;
  return what;
}

}  // namespace

std::string launch_fp8_block_model_reference(const Fp8AccumModel& chain, BlockPromotion form, const uint8_t* a,
                                             Fp8Format fa, const uint8_t* w, Fp8Format fw, float* d, int m, int n,
                                             int64_t k, int64_t block_k, DeviceBlockScales sa, DeviceBlockScales sw,
                                             cudaStream_t stream) {
  if (m <= 0 || n <= 0) return "fp8_block_model (empty)";
  const dim3 block(32, 8);
  const dim3 grid((n + 31) / 32, (m + 7) / 8);
  fp8_block_model_kernel<<<grid, block, 0, stream>>>(chain, form, a, fa, w, fw, d, m, n, k, block_k, sa, sw);
  return launch_error(
      "qconform fp8_block_model (fp8_block_model.hpp evaluate, chains in int128, 1 thread per output, 32x8 blocks)");
}

std::string launch_gather_columns(const uint8_t* src, uint8_t* dst, int rows, int64_t k, int64_t k0, int64_t len,
                                  cudaStream_t stream, int64_t step_k, int64_t interleave, int64_t len_out) {
  if (interleave == 0) len_out = len;
  const int64_t count = static_cast<int64_t>(rows) * len_out;
  if (count <= 0) return "gather_columns (empty)";
  gather_columns<<<static_cast<unsigned>((count + 255) / 256), 256, 0, stream>>>(src, dst, rows, k, k0, len, step_k,
                                                                                 interleave, len_out);
  return launch_error("qconform gather_columns");
}

std::string launch_block_promote(BlockPromotion form, const float* c, float* d, int m, int n, int64_t b,
                                 DeviceBlockScales sa, DeviceBlockScales sw, cudaStream_t stream) {
  if (m <= 0 || n <= 0) return "block_promote (empty)";
  const dim3 block(32, 8);
  const dim3 grid((n + 31) / 32, (m + 7) / 8);
  block_promote<<<grid, block, 0, stream>>>(form, c, d, m, n, b, sa, sw);
  return launch_error("qconform block_promote (fp8_block_model.hpp promote)");
}

}  // namespace qc::cuda_kernels
