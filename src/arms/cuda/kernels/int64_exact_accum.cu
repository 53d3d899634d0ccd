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
// Where K is a multiple of 16 below 2^17 and the operands 16-byte aligned (every layer verify uploads), the
// fp32 kernel below computes the same sums, exactly, at about twice the rate.
//
// Test: `make test-gpu` (tests/gpu/test_cuda_compare.cpp: both kernels equal the CPU exact reference,
// including all-extreme operands at K = 32768, whose 1024-term partials reach 2^24 exactly).
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

// The same sums on the fp32 pipes, for K a multiple of 16 below 2^17 and 16-byte aligned operands. Exact:
// each product of two int8 is an integer of magnitude <= 2^14, and a partial over at most kFFlushK = 1024
// of them an integer of magnitude <= 2^24, which fp32 holds exactly, so the exact result of every FFMA is
// representable and nothing rounds; the partials go into int32 totals every 1024 terms (|sum| <= K·2^14 <
// 2^31). Still CUDA cores, not the INT8 tensor cores under test and not dp4a, at about twice the IMAD
// kernel's rate (sm_90 issues FFMA at twice the rate of IMAD, and the bytes are converted once, when staged).
//
// Block: 256 threads, a 128x128 output tile, 8x8 outputs per thread (rows 4ty..4ty+3 and 64+4ty..,
// columns likewise with tx); K staged 32 bytes at a time, each thread loading 16 bytes of one row of each
// operand (the next stage's while this one is computed) and storing them k-major as floats.
constexpr int kFTile = 128;
constexpr int kFKc = 32;
constexpr int kFFlushK = 1024;

__device__ __forceinline__ void store_as_floats(float (*s)[kFTile], int k, int row, int4 v) {
  const int words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 16; ++i) s[k + i][row] = static_cast<float>(static_cast<int8_t>(words[i / 4] >> (8 * (i % 4))));
}

template <typename Out>
__global__ void __launch_bounds__(256, 1) fp32_exact_accum_kernel(const int8_t* __restrict__ a,
                                                                 const int8_t* __restrict__ w,
                                                                 Out* __restrict__ out, int M, int N, int K) {
  __shared__ __align__(16) float as[kFKc][kFTile];
  __shared__ __align__(16) float ws[kFKc][kFTile];
  const int tid = threadIdx.x, tx = tid & 15, ty = tid >> 4;
  const int m0 = blockIdx.y * kFTile, n0 = blockIdx.x * kFTile;
  const int lrow = tid & 127, lhalf = tid >> 7;
  const bool a_ok = m0 + lrow < M, w_ok = n0 + lrow < N;
  const int4* a_row = reinterpret_cast<const int4*>(a + static_cast<int64_t>(a_ok ? m0 + lrow : 0) * K);
  const int4* w_row = reinterpret_cast<const int4*>(w + static_cast<int64_t>(w_ok ? n0 + lrow : 0) * K);
  const int4 zero = make_int4(0, 0, 0, 0);
  const auto load = [&](const int4* row, bool ok, int k0) {
    const int kb = k0 + 16 * lhalf;
    return ok && kb < K ? row[kb / 16] : zero;
  };
  float acc[8][8];
  int32_t total[8][8];
#pragma unroll
  for (int r = 0; r < 8; ++r)
#pragma unroll
    for (int c = 0; c < 8; ++c) acc[r][c] = 0.f, total[r][c] = 0;
  int4 ra = load(a_row, a_ok, 0), rw = load(w_row, w_ok, 0);
  for (int k0 = 0; k0 < K; k0 += kFKc) {
    store_as_floats(as, 16 * lhalf, lrow, ra);
    store_as_floats(ws, 16 * lhalf, lrow, rw);
    __syncthreads();
    ra = load(a_row, a_ok, k0 + kFKc), rw = load(w_row, w_ok, k0 + kFKc);
#pragma unroll 8
    for (int kk = 0; kk < kFKc; ++kk) {
      const float4 a0 = *reinterpret_cast<const float4*>(&as[kk][4 * ty]);
      const float4 a1 = *reinterpret_cast<const float4*>(&as[kk][64 + 4 * ty]);
      const float4 b0 = *reinterpret_cast<const float4*>(&ws[kk][4 * tx]);
      const float4 b1 = *reinterpret_cast<const float4*>(&ws[kk][64 + 4 * tx]);
      const float av[8] = {a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w};
      const float bv[8] = {b0.x, b0.y, b0.z, b0.w, b1.x, b1.y, b1.z, b1.w};
#pragma unroll
      for (int r = 0; r < 8; ++r)
#pragma unroll
        for (int c = 0; c < 8; ++c) acc[r][c] = __fmaf_rn(av[r], bv[c], acc[r][c]);
    }
    __syncthreads();
    if ((k0 + kFKc) % kFFlushK == 0 || k0 + kFKc >= K) {
#pragma unroll
      for (int r = 0; r < 8; ++r)
#pragma unroll
        for (int c = 0; c < 8; ++c) {
          total[r][c] += __float2int_rz(acc[r][c]);
          acc[r][c] = 0.f;
        }
    }
  }
#pragma unroll
  for (int r = 0; r < 8; ++r) {
    const int row = m0 + (r < 4 ? 4 * ty + r : 64 + 4 * ty + r - 4);
    if (row >= M) continue;
#pragma unroll
    for (int c = 0; c < 8; ++c) {
      const int col = n0 + (c < 4 ? 4 * tx + c : 64 + 4 * tx + c - 4);
      if (col < N) out[static_cast<int64_t>(row) * N + col] = static_cast<Out>(total[r][c]);
    }
  }
}

bool fp32_kernel_takes(const int8_t* a, const int8_t* w, int k) {
  return k % 16 == 0 && k < (1 << 17) && reinterpret_cast<uintptr_t>(a) % 16 == 0 &&
         reinterpret_cast<uintptr_t>(w) % 16 == 0;
}

template <typename Out>
std::string launch(const int8_t* a, const int8_t* w, Out* out, int m, int n, int k, cudaStream_t stream) {
  const char* out_name = sizeof(Out) == 8 ? "int64" : "int32";
  if (fp32_kernel_takes(a, w, k)) {
    const dim3 grid((n + kFTile - 1) / kFTile, (m + kFTile - 1) / kFTile);
    fp32_exact_accum_kernel<Out><<<grid, 256, 0, stream>>>(a, w, out, m, n, k);
    const cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess) return std::string("error: launch: ") + cudaGetErrorString(err);
    return std::string("qc::fp32_exact_accum_kernel<") + out_name +
           " out> (CUDA-core fp32 FFMA on integers, exact: partials <= 2^24, int32 totals every 1024) grid=" +
           std::to_string(grid.x) + "x" + std::to_string(grid.y) + " block=256";
  }
  const dim3 grid((n + kTile - 1) / kTile, (m + kTile - 1) / kTile);
  int64_exact_accum_kernel<Out><<<grid, dim3(16, 16), 0, stream>>>(a, w, out, m, n, k);
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return std::string("error: launch: ") + cudaGetErrorString(err);
  return std::string("qc::int64_exact_accum_kernel<") + out_name +
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
