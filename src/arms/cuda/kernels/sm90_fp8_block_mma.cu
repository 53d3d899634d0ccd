// qconform's own block-scaled FP8 GEMM (sm90_fp8_block_mma.cuh): a plain `mma.sync` kernel written for a
// known order, not for speed. A block of 4 warps computes a 64 x 64 tile of outputs; per 128-K block it
// stages the block's 64 x 128 codes of a and of w in shared memory (zero codes past M, N, K), each warp
// chains the block's four `mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32` steps (k = 32 each, in K
// order) from a zero fp32 fragment over its 16 x 64 outputs, and then promotes every output into its D
// with `block_model::promote` (the one text, src/epilogue/fp8_block_model.hpp; __fmul_rn / __fadd_rn /
// __fmaf_rn on the device, nothing left to --fmad) and the block's two scales. y = bf16(D), RNE.
// The chain per block is the tensor cores' (the model it follows is measured: tests/gpu/test_cuda_fp8_block.cpp).
#include "sm90_fp8_block_mma.cuh"

#include <cuda_bf16.h>

namespace qc::cuda_kernels {
namespace {

constexpr int kBM = 64, kBN = 64, kBK = 128;
constexpr int kPad = 16;  // bytes of padding per shared row (spreads the fragment loads over banks)

__device__ __forceinline__ void mma_e4m3(float (&c)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

__device__ __forceinline__ uint32_t load_u32(const uint8_t* p) { return *reinterpret_cast<const uint32_t*>(p); }

__global__ void __launch_bounds__(128) fp8_block_mma_kernel(BlockPromotion form, const uint8_t* __restrict__ a,
                                                            const uint8_t* __restrict__ w, DeviceBlockScales sa,
                                                            DeviceBlockScales sw, float* __restrict__ d,
                                                            uint16_t* __restrict__ y, int M, int N, int K) {
  __shared__ __align__(16) uint8_t sa_tile[kBM][kBK + kPad];
  __shared__ __align__(16) uint8_t sw_tile[kBN][kBK + kPad];
  const int m0 = blockIdx.y * kBM, n0 = blockIdx.x * kBN;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int group = lane / 4, tig = lane % 4;  // the fragment layout of m16n8k32 (8-bit operands)
  float acc[8][4];                             // D of this thread's outputs: 8 n-tiles x 4 elements
  for (auto& t : acc) t[0] = t[1] = t[2] = t[3] = 0.0f;  // D from +0
  const int blocks = (K + kBK - 1) / kBK;
  for (int b = 0; b < blocks; ++b) {
    const int k0 = b * kBK;
    __syncthreads();  // the previous block's fragments are read
    for (int i = tid; i < kBM * kBK; i += 128) {
      const int r = i / kBK, c = i % kBK;
      const bool in_k = k0 + c < K;
      sa_tile[r][c] = m0 + r < M && in_k ? a[static_cast<int64_t>(m0 + r) * K + k0 + c] : uint8_t{0};
      sw_tile[r][c] = n0 + r < N && in_k ? w[static_cast<int64_t>(n0 + r) * K + k0 + c] : uint8_t{0};
    }
    __syncthreads();
    float c[8][4];
    for (auto& t : c) t[0] = t[1] = t[2] = t[3] = 0.0f;  // the block's chain from zero
    const int row = warp * 16 + group;
    for (int ks = 0; ks < kBK / 32; ++ks) {  // the 4 k32 steps, in K order
      const int kk = ks * 32 + tig * 4;
      const uint32_t af[4] = {load_u32(&sa_tile[row][kk]), load_u32(&sa_tile[row + 8][kk]),
                              load_u32(&sa_tile[row][kk + 16]), load_u32(&sa_tile[row + 8][kk + 16])};
      for (int t = 0; t < 8; ++t) {
        const int col = t * 8 + group;
        const uint32_t bf[2] = {load_u32(&sw_tile[col][kk]), load_u32(&sw_tile[col][kk + 16])};
        mma_e4m3(c[t], af, bf);
      }
    }
    // Promotion of every output of this thread: c[t][0..1] row `row`, c[t][2..3] row `row + 8`, columns
    // t*8 + tig*2 + {0, 1}.
    for (int t = 0; t < 8; ++t) {
      for (int e = 0; e < 4; ++e) {
        const int gm = m0 + row + (e >= 2 ? 8 : 0), gn = n0 + t * 8 + tig * 2 + (e & 1);
        if (gm >= M || gn >= N) continue;
        const float s_a = sa.p[(gm / sa.block_rows) * sa.cols + b * sa.step];
        const float s_w = sw.p[(gn / sw.block_rows) * sw.cols + b * sw.step];
        acc[t][e] = block_model::promote(form, c[t][e], s_a, s_w, acc[t][e]);
      }
    }
  }
  const int row = warp * 16 + group;
  for (int t = 0; t < 8; ++t) {
    for (int e = 0; e < 4; ++e) {
      const int gm = m0 + row + (e >= 2 ? 8 : 0), gn = n0 + t * 8 + tig * 2 + (e & 1);
      if (gm >= M || gn >= N) continue;
      const int64_t i = static_cast<int64_t>(gm) * N + gn;
      d[i] = acc[t][e];
      y[i] = __bfloat16_as_ushort(__float2bfloat16_rn(acc[t][e]));
    }
  }
}

}  // namespace

std::string launch_fp8_block_mma(BlockPromotion form, const uint8_t* a, const uint8_t* w, DeviceBlockScales sa,
                                 DeviceBlockScales sw, float* d, uint16_t* y, int m, int n, int k,
                                 cudaStream_t stream) {
  if (m <= 0 || n <= 0 || k <= 0) return "error: fp8_block_mma: empty GEMM";
  const dim3 grid((n + kBN - 1) / kBN, (m + kBM - 1) / kBM);
  fp8_block_mma_kernel<<<grid, 128, 0, stream>>>(form, a, w, sa, sw, d, y, m, n, k);
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return std::string("error: ") + cudaGetErrorString(err) + " launching fp8_block_mma";
  return "qc::fp8_block_mma_kernel<64x64 tile, 4 warps> mma.sync.m16n8k32.f32.e4m3.e4m3, per 128-K block 4 k32 "
         "steps chained from zero, then block_model::promote";
}

}  // namespace qc::cuda_kernels
