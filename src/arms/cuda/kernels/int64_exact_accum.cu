// Exact INT8 accumulation on CUDA cores, independent of the tensor cores under test (C2/C4).
//
// Shapes and layouts: a [M,K] int8 row-major, w [N,K] int8 row-major, out [M,N] int64 row-major;
// any K (word loads when K is a multiple of 4, byte loads otherwise). Plain integer multiply-adds
// of sign-extended bytes (no dp4a, no mma): the point is a second, differently built
// implementation of the same exact sum. Each product is at most 2^14 in magnitude, so an int32
// partial over 2^16 terms cannot overflow (2^30); partials are flushed into int64 every `kFlushK`
// terms, which makes the result exact for any K.
//
// Block: 16x16 threads, a 64x64 output tile, each thread rows ty+16r and cols tx+16c; K is staged
// through shared memory 32 bytes at a time (rows padded to 9 words: conflict-free).
//
// Test: `make test-gpu` (tests/gpu/test_cuda_compare.cpp: equals the CPU exact reference,
// including all-extreme operands at K = 32768).
#include "int64_exact_accum.cuh"

namespace qc::cuda_kernels {
namespace {

constexpr int kTile = 64;
constexpr int kKc = 32;               // bytes of K per shared-memory stage
constexpr int kRowWords = kKc / 4 + 1;  // padded
constexpr int kFlushK = 1 << 16;

// Sign-extended byte `i` of `word`, and a 32-bit multiply-add, both as inline PTX: written in
// plain C++, nvcc recognises the four byte products of a word and emits IDP.4A (dp4a), which
// this kernel must not use. `cuobjdump --dump-sass` of this object shows IMAD and no IDP.
__device__ __forceinline__ int32_t sbyte(uint32_t word, int i) {
  int32_t r;
  asm volatile("bfe.s32 %0, %1, %2, 8;" : "=r"(r) : "r"(word), "r"(8 * i));
  return r;
}
__device__ __forceinline__ int32_t mad_s32(int32_t a, int32_t b, int32_t c) {
  int32_t r;
  asm volatile("mad.lo.s32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(c));
  return r;
}

// Bytes kb..kb+3 of one row (those below K; zero beyond), packed little-endian like a word load.
__device__ __forceinline__ uint32_t load_word_bytes(const int8_t* p, bool row_ok, int64_t row_start, int kb, int K) {
  uint32_t v = 0;
  if (!row_ok) return 0;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    if (kb + i < K) v |= static_cast<uint32_t>(static_cast<uint8_t>(p[row_start + kb + i])) << (8 * i);
  }
  return v;
}

template <typename Out>
__global__ void __launch_bounds__(256) int64_exact_accum_kernel(const int8_t* __restrict__ a,
                                                                const int8_t* __restrict__ w,
                                                                Out* __restrict__ out, int M, int N, int K) {
  __shared__ uint32_t as[kTile][kRowWords];
  __shared__ uint32_t ws[kTile][kRowWords];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int tid = ty * 16 + tx;
  const int m0 = blockIdx.y * kTile, n0 = blockIdx.x * kTile;

  int64_t total[4][4] = {};
  int32_t part[4][4] = {};
  int since_flush = 0;
  for (int k0 = 0; k0 < K; k0 += kKc) {
    // 64 rows x 8 words per operand = 512 words: two per thread and operand.
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int idx = tid + i * 256;
      const int row = idx >> 3, word = idx & 7;
      const int kb = k0 + word * 4;
      uint32_t va = 0, vw = 0;
      if ((K & 3) == 0) {  // aligned words
        if (m0 + row < M && kb < K) va = *reinterpret_cast<const uint32_t*>(a + static_cast<int64_t>(m0 + row) * K + kb);
        if (n0 + row < N && kb < K) vw = *reinterpret_cast<const uint32_t*>(w + static_cast<int64_t>(n0 + row) * K + kb);
      } else {  // any K: bytes, zero past the end of the row
        va = load_word_bytes(a, m0 + row < M, static_cast<int64_t>(m0 + row) * K, kb, K);
        vw = load_word_bytes(w, n0 + row < N, static_cast<int64_t>(n0 + row) * K, kb, K);
      }
      as[row][word] = va;
      ws[row][word] = vw;
    }
    __syncthreads();
#pragma unroll
    for (int word = 0; word < kKc / 4; ++word) {
      uint32_t ra[4], rw[4];
#pragma unroll
      for (int r = 0; r < 4; ++r) ra[r] = as[ty + 16 * r][word];
#pragma unroll
      for (int c = 0; c < 4; ++c) rw[c] = ws[tx + 16 * c][word];
#pragma unroll
      for (int byte = 0; byte < 4; ++byte) {
        int32_t xa[4], xw[4];
#pragma unroll
        for (int r = 0; r < 4; ++r) xa[r] = sbyte(ra[r], byte);
#pragma unroll
        for (int c = 0; c < 4; ++c) xw[c] = sbyte(rw[c], byte);
#pragma unroll
        for (int r = 0; r < 4; ++r)
#pragma unroll
          for (int c = 0; c < 4; ++c) part[r][c] = mad_s32(xa[r], xw[c], part[r][c]);
      }
    }
    __syncthreads();
    since_flush += kKc;
    if (since_flush >= kFlushK) {
#pragma unroll
      for (int r = 0; r < 4; ++r)
#pragma unroll
        for (int c = 0; c < 4; ++c) {
          total[r][c] += part[r][c];
          part[r][c] = 0;
        }
      since_flush = 0;
    }
  }
#pragma unroll
  for (int r = 0; r < 4; ++r) {
    const int row = m0 + ty + 16 * r;
    if (row >= M) continue;
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      const int col = n0 + tx + 16 * c;
      if (col < N) out[static_cast<int64_t>(row) * N + col] = static_cast<Out>(total[r][c] + part[r][c]);
    }
  }
}

template <typename Out>
std::string launch(const int8_t* a, const int8_t* w, Out* out, int m, int n, int k, cudaStream_t stream) {
  const dim3 grid((n + kTile - 1) / kTile, (m + kTile - 1) / kTile);
  int64_exact_accum_kernel<Out><<<grid, dim3(16, 16), 0, stream>>>(a, w, out, m, n, k);
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return std::string("error: launch: ") + cudaGetErrorString(err);
  return std::string("qc::int64_exact_accum_kernel<") + (sizeof(Out) == 8 ? "int64" : "int32") +
         " out> (CUDA-core int32 IMAD, int64 flush every 65536) grid=" + std::to_string(grid.x) + "x" +
         std::to_string(grid.y) + " block=16x16";
}

}  // namespace

std::string launch_int64_exact_accum(const int8_t* a, const int8_t* w, int64_t* out, int m, int n, int k,
                                     cudaStream_t stream) {
  return launch(a, w, out, m, n, k, stream);
}

std::string launch_int64_exact_accum(const int8_t* a, const int8_t* w, int32_t* out, int m, int n, int k,
                                     cudaStream_t stream) {
  if (k > 131071) return "error: int32 output needs K <= 131071 (K*2^14 < 2^31)";
  return launch(a, w, out, m, n, k, stream);
}

}  // namespace qc::cuda_kernels
