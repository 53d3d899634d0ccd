// FP8 accumulation models on the GPU, for verify's reference side. Two kernels, chosen by
// `accum_fp64::path_of` (the same decision as the CPU's fast paths):
// - `fp8_accum_model_fp64_kernel` (every model with a fast path: the Hopper models, blocked-c,
//   split-k-s, sequential, exact on e4m3): `accum_fp64::evaluate_tile` (src/accum/fp8_model_fp64.hpp),
//   a register tile of outputs per thread,
//   fp64 arithmetic whose exactness is argued there and checked on the host against the reference
//   (tests/unit/test_accumulation_model.cpp). `w` is first transposed on the device to [K][N]
//   (`transpose_codes`, 32x32 tiles through shared memory) so that the 32 threads of a warp
//   (32 consecutive n) read 32 consecutive bytes per k (one sector) and share one byte of `a`
//   (a broadcast), instead of 32 rows K bytes apart. fp64 has full-rate hardware on sm_90; the
//   128-bit integer arithmetic of the reference is emulated in many 32-bit instructions.
// - `fp8_accum_model_kernel`, one thread per output (the rest, e.g. exact sums with e5m2 operands, results rounded to
//   fewer than 23 bits with exact terms): `accum_model::evaluate`, the text of
//   include/qconform/accumulation.hpp that the CPU's scalar reference compiles (int128 units of
//   2^-32). Also run for every model when the caller asks for the reference kernel.
// Nothing here depends on --fmad (the build passes --fmad=false; the fp64 path's products are
// exact, its sums exact or explicitly rounded through fp32 conversions).
//
// Test: tests/gpu/test_cuda_fp8_model.cpp (both kernels equal the CPU fast evaluation bit for bit).
// Timing: bench/bench_fp8_model_gpu.cpp.
#include "accum/fp8_model_fp64.hpp"
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

// w [N][K] -> wt [K][N]; block 32x8, one 32x32 tile (n0.., k0..) per block.
__global__ void __launch_bounds__(256) transpose_codes(const uint8_t* __restrict__ w, uint8_t* __restrict__ wt, int N,
                                                       int64_t K) {
  __shared__ uint8_t tile[32][33];
  const int64_t k0 = static_cast<int64_t>(blockIdx.x) * 32;
  const int n0 = blockIdx.y * 32;
  for (int j = threadIdx.y; j < 32; j += 8) {
    const int n = n0 + j;
    const int64_t k = k0 + threadIdx.x;
    if (n < N && k < K) tile[j][threadIdx.x] = w[static_cast<int64_t>(n) * K + k];
  }
  __syncthreads();
  for (int j = threadIdx.y; j < 32; j += 8) {
    const int64_t k = k0 + j;
    const int n = n0 + threadIdx.x;
    if (n < N && k < K) wt[k * N + n] = tile[threadIdx.x][j];
  }
}

// Reads of the transposed `w` and of `a` through the read-only cache.
struct LdgStrided {
  const uint8_t* p;
  int64_t stride;
  __device__ __forceinline__ uint8_t operator()(int64_t i) const { return __ldg(p + i * stride); }
};

// Each thread a TM x TN register tile of outputs: rows m0 + 8r, columns n0 + 32c (so a warp still
// reads 32 consecutive bytes of wt per column and k); a code is decoded once per tile row or
// column instead of once per product. Rows and columns past the edge are clamped for reading and
// not written. The path is a template argument, so each kernel holds only its own arithmetic (and
// registers).
template <int TM, int TN, accum_fp64::Path kPath>
__global__ void __launch_bounds__(256) fp8_accum_model_fp64_kernel(Fp8AccumModel model,
                                                                   const uint8_t* __restrict__ a, Fp8Format fa,
                                                                   const uint8_t* __restrict__ wt, Fp8Format fw,
                                                                   float* __restrict__ d, int M, int N, int64_t K) {
  const int n0 = blockIdx.x * (32 * TN) + threadIdx.x;
  const int m0 = blockIdx.y * (8 * TM) + threadIdx.y;
  if (m0 >= M || n0 >= N) return;
  LdgStrided ar[TM], wc[TN];
  for (int r = 0; r < TM; ++r) ar[r] = LdgStrided{a + static_cast<int64_t>(min(m0 + 8 * r, M - 1)) * K, 1};
  for (int c = 0; c < TN; ++c) wc[c] = LdgStrided{wt + min(n0 + 32 * c, N - 1), N};
  float out[TM * TN];
  accum_fp64::evaluate_tile<TM, TN>(model, kPath, ar, fa, wc, fw, K, out);
  for (int r = 0; r < TM; ++r) {
    for (int c = 0; c < TN; ++c) {
      const int m = m0 + 8 * r, n = n0 + 32 * c;
      if (m < M && n < N) d[static_cast<int64_t>(m) * N + n] = out[r * TN + c];
    }
  }
}

template <int TM, int TN, accum_fp64::Path kPath>
void launch_fp64(const Fp8AccumModel& model, const uint8_t* a, Fp8Format fa, const uint8_t* wt, Fp8Format fw, float* d,
                 int m, int n, int64_t k, cudaStream_t stream) {
  const dim3 block(32, 8);
  const dim3 grid((n + 32 * TN - 1) / (32 * TN), (m + 8 * TM - 1) / (8 * TM));
  fp8_accum_model_fp64_kernel<TM, TN, kPath><<<grid, block, 0, stream>>>(model, a, fa, wt, fw, d, m, n, k);
}

}  // namespace

std::string launch_fp8_accum_model(const Fp8AccumModel& model, const uint8_t* a, Fp8Format fa, const uint8_t* w,
                                   Fp8Format fw, uint8_t* w_t, float* d, int m, int n, int64_t k, bool reference_kernel,
                                   cudaStream_t stream) {
  if (m <= 0 || n <= 0) return "fp8_accum_model (empty)";
  const dim3 block(32, 8);
  const dim3 grid((n + 31) / 32, (m + 7) / 8);
  const accum_fp64::Path path = accum_fp64::path_of(model, fa, fw, k);
  if (reference_kernel || path == accum_fp64::Path::reference || k == 0) {
    fp8_accum_model_kernel<<<grid, block, 0, stream>>>(model, a, fa, w, fw, d, m, n, k);
    return "qconform fp8_accum_model (accumulation.hpp evaluate in int128, 1 thread per output, 32x8 blocks)";
  }
  const dim3 tgrid(static_cast<unsigned>((k + 31) / 32), (n + 31) / 32);
  transpose_codes<<<tgrid, block, 0, stream>>>(w, w_t, n, k);
  // Register tiles: 2 x 4 outputs per thread for the stepped models (five fp64 values of state per
  // output), 4 x 4 for the plain sums.
  using accum_fp64::Path;
  if (path == Path::steps) {
    launch_fp64<2, 4, Path::steps>(model, a, fa, w_t, fw, d, m, n, k, stream);
    return "qconform fp8_accum_model_fp64 (steps in fp64, w transposed, 2x4 outputs per thread, 32x8 threads)";
  }
  if (path == Path::fp32_sum) {
    launch_fp64<4, 4, Path::fp32_sum>(model, a, fa, w_t, fw, d, m, n, k, stream);
    return "qconform fp8_accum_model_fp64 (fp32 sums, w transposed, 4x4 outputs per thread, 32x8 threads)";
  }
  launch_fp64<4, 4, Path::exact>(model, a, fa, w_t, fw, d, m, n, k, stream);
  return "qconform fp8_accum_model_fp64 (exact sum in fp64, w transposed, 4x4 outputs per thread, 32x8 threads)";
}

}  // namespace qc::cuda_kernels
