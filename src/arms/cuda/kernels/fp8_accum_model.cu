// FP8 accumulation models on the GPU, for verify's reference side: one thread per output runs
// `qc::accum_model::evaluate`, the very text of include/qconform/accumulation.hpp that the CPU's
// scalar reference compiles (int128 units of 2^-32, no floating-point arithmetic before the final
// exact conversion, so nothing here depends on --fmad or rounding modes).
//
// Block 32x8: the 32 threads of a warp share one row of `a` (broadcast loads) and read 32 rows of
// `w`. Simple, not fast: a tiled version is future work (docs/accumulation.md).
//
// Test: tests/gpu/test_cuda_fp8_model.cpp (equals the CPU fast evaluation bit for bit).
#include "fp8_accum_model.cuh"

namespace qc::cuda_kernels {
namespace {

__global__ void __launch_bounds__(256) fp8_accum_model_kernel(Fp8AccumModel model, const uint8_t* __restrict__ a,
                                                              Fp8Format fa, const uint8_t* __restrict__ w,
                                                              Fp8Format fw, float* __restrict__ d, int M, int N,
                                                              int64_t K) {
  const int n = blockIdx.x * blockDim.x + threadIdx.x;
  const int m = blockIdx.y * blockDim.y + threadIdx.y;
  if (m >= M || n >= N) return;
  d[static_cast<int64_t>(m) * N + n] =
      accum_model::evaluate(model, a + static_cast<int64_t>(m) * K, fa, w + static_cast<int64_t>(n) * K, fw, K);
}

}  // namespace

std::string launch_fp8_accum_model(const Fp8AccumModel& model, const uint8_t* a, Fp8Format fa, const uint8_t* w,
                                   Fp8Format fw, float* d, int m, int n, int64_t k, cudaStream_t stream) {
  if (m <= 0 || n <= 0) return "fp8_accum_model (empty)";
  const dim3 block(32, 8);
  const dim3 grid((n + 31) / 32, (m + 7) / 8);
  fp8_accum_model_kernel<<<grid, block, 0, stream>>>(model, a, fa, w, fw, d, m, n, k);
  return "qconform fp8_accum_model (accumulation.hpp evaluate, 1 thread per output, 32x8 blocks)";
}

}  // namespace qc::cuda_kernels
