// Exact INT8 accumulation on CUDA cores, independent of the tensor cores under test (C2/C4).
//
// Shapes and layouts: a [M,K] int8 row-major, w [N,K] int8 row-major, out [M,N] int64 (or int32) row-major;
// any M, N, K (16-byte loads when K is a multiple of 16 and both operands 16-byte aligned, word loads when K
// is a multiple of 4, byte loads otherwise; rows are zero-padded past K).
//
// The products are formed by `dp4a.s32.s32` (SASS `IDP.4A`): four signed byte products summed into a 32-bit
// accumulator, on the CUDA cores' integer pipe. The arms under test use the tensor cores (`mma.sync` IMMA,
// `wgmma`, cuBLASLt's INT8 GEMM), a different unit with its own accumulation order; this kernel shares no
// code and no hardware path with them, and it is checked against the CPU's exact reference in the tests.
//
// Exactness: each product is at most 2^14 in magnitude, so any partial sum over at most 2^16 terms is at
// most 2^30, and the int32 accumulators (and every intermediate value of a dp4a) cannot overflow. K is cut
// into slices of at most `kFlushK` = 65536 terms; each block sums one slice in int32 and stores it (one
// slice) or adds it into the zeroed output (several: `atomicAdd`, exact and order-independent in integers).
// The int64 output is therefore exact for any K. The int32 output takes K <= 131071, where every partial
// and the total are below 2^31.
//
// Block: 256 threads, a 128x128 output tile, 8x8 outputs per thread (rows ty+16r, columns tx+16c); K staged
// through double-buffered shared memory 32 bytes at a time (bank reasoning beside `compute_stage`). The
// grid is (M tiles, N tiles, K slices); the launcher splits K further when the output tiles alone would
// leave SMs idle (`plan_slice_stages`).
//
// Test: `make test-gpu` (tests/gpu/test_cuda_compare.cpp: equals the CPU exact reference, int64 and int32
// outputs, K not a multiple of 4 or 16, ragged M and N, all-extreme operands at K = 32768 and K = 140000).
#include "int64_exact_accum.cuh"

#include <algorithm>

namespace qc::cuda_kernels {
namespace {

constexpr int kTile = 128;           // output tile: kTile x kTile
constexpr int kThreads = 256;        // 16 x 16 threads
constexpr int kPerThread = 8;        // each thread: 8 rows x 8 columns of the tile
constexpr int kKc = 32;              // bytes of K per shared-memory stage
constexpr int kChunk = 16;           // bytes one thread stages per row and operand
constexpr int kRowWords = kKc / 4 + 4;  // 8 words of K, padded to 12 (3 sixteen-byte units: see below)
constexpr int kFlushK = 1 << 16;        // terms per int32 partial
constexpr int kFlushStages = kFlushK / kKc;
constexpr int kMinSliceStages = 8;  // a split slice spans at least 256 bytes of K

static_assert(kTile == 16 * kPerThread && kThreads == 16 * 16, "16x16 threads, 8x8 outputs each");
static_assert(kTile * (kKc / kChunk) == kThreads, "one 16-byte chunk of one row of each operand per thread");
static_assert((kRowWords / 4) % 2 == 1 && kRowWords % 4 == 0,
              "rows of an odd number of 16-byte units: 8 consecutive rows start in 8 distinct bank quads");
static_assert(kFlushK % kKc == 0, "slices are whole stages");
static_assert(int64_t{kFlushK} * 128 * 128 <= (int64_t{1} << 30), "a slice's partial is at most 2^30: no int32 overflow");

enum class Loads { kVec16, kWord, kByte };

template <typename Out>
struct AccumArgs {
  const int8_t* a;
  const int8_t* w;
  Out* out;
  int m, n, k;
  int slice_stages;  // stages of K per blockIdx.z
};

// d = c + Σ_i sext(a.byte_i)·sext(b.byte_i): `IDP.4A` on the CUDA cores. Exact for every partial this
// kernel forms (|d| <= 2^30).
__device__ __forceinline__ int32_t dp4a(uint32_t a, uint32_t b, int32_t c) {
  int32_t d;
  asm("dp4a.s32.s32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
}

// Copies the 16 bytes at `src` into shared `dst` (16-byte aligned), of which the first `left` (possibly <= 0)
// lie before the end of the row; the rest become zero (nothing past the row is read). Byte i of the chunk
// lands in byte i%4 of word i/4 in every variant, as a little-endian word load would place it. The 16-byte
// and word variants are `cp.async` (with a source size of 0 past the row: zero-filled, unread), completed
// by `cp_async_wait_all`; the byte variant loads and stores through registers.
template <Loads kLoads>
__device__ __forceinline__ void stage_chunk(uint32_t* dst, const int8_t* src, int left) {
  const uint32_t d = static_cast<uint32_t>(__cvta_generic_to_shared(dst));
  if constexpr (kLoads == Loads::kVec16) {  // K % 16 == 0: a chunk lies wholly before K or wholly past it
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(d), "l"(src), "r"(left > 0 ? 16 : 0) : "memory");
  } else if constexpr (kLoads == Loads::kWord) {  // K % 4 == 0: a word lies wholly before K or wholly past it
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" ::"r"(d + 4 * i), "l"(src + 4 * i),
                   "r"(4 * i < left ? 4 : 0)
                   : "memory");
    }
  } else {
    uint32_t v[4] = {0, 0, 0, 0};
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      if (i < left) v[i / 4] |= static_cast<uint32_t>(static_cast<uint8_t>(src[i])) << (8 * (i % 4));
    }
    *reinterpret_cast<uint4*>(dst) = make_uint4(v[0], v[1], v[2], v[3]);
  }
}

// Closes this thread's batch of `cp.async` copies and waits for it (a no-op after byte staging).
__device__ __forceinline__ void cp_async_wait_all() {
  asm volatile("cp.async.commit_group;\ncp.async.wait_group 0;" ::: "memory");
}

using StageRows = uint32_t[kTile][kRowWords];

// One 32-byte stage: acc[r][c] += Σ a[ty+16r, k]·w[tx+16c, k] over its 8 words, as two 16-byte quads.
//
// Shared-memory banks. A row is 12 words = 3 sixteen-byte units, so the 16-byte load of quad q of row j
// touches unit 3j+q, i.e. banks 4·((3j+q) mod 8) .. +3. A 128-bit shared load returns 4 registers per
// thread, at least 4 passes of the 128-byte/clock shared path per warp (one per quarter-warp of 8 threads);
// it costs no more than that when each quarter-warp reads distinct bank quads or one address. The warp
// layout in the kernel gives each warp 4 consecutive ty and 8 consecutive tx, each quarter-warp one ty:
//  - an `as` load: the 8 threads of a quarter-warp read the same row (a broadcast), the warp 4 rows;
//  - a `ws` load: a quarter-warp reads 8 consecutive rows j..j+7 at one quad: 3j mod 8 over 8 consecutive
//    j is a permutation of 0..7 (3 is odd), so the 8 loads hit 8 distinct bank quads: conflict-free;
//  - the staging (`stage_chunk`) writes row t%128, quad t/128 from thread t: a quarter-warp writes 8
//    consecutive rows at one quad, distinct bank quads by the same argument.
// Per 4 words of K a thread issues 8+8 LDS.128 for 8·8·4 = 256 dp4a: the loads stay a fraction of the
// shared path's time while the dp4a keep the integer pipe busy (docs/gpu.md gives the figures).
__device__ __forceinline__ void compute_stage(const StageRows& as, const StageRows& ws, int ty, int tx,
                                              int32_t (&acc)[kPerThread][kPerThread]) {
#pragma unroll
  for (int q = 0; q < kKc / kChunk; ++q) {
    uint4 ra[kPerThread];
#pragma unroll
    for (int r = 0; r < kPerThread; ++r) ra[r] = *reinterpret_cast<const uint4*>(&as[ty + 16 * r][4 * q]);
#pragma unroll
    for (int c = 0; c < kPerThread; ++c) {
      const uint4 rw = *reinterpret_cast<const uint4*>(&ws[tx + 16 * c][4 * q]);
#pragma unroll
      for (int r = 0; r < kPerThread; ++r) {
        acc[r][c] = dp4a(ra[r].x, rw.x, acc[r][c]);
        acc[r][c] = dp4a(ra[r].y, rw.y, acc[r][c]);
        acc[r][c] = dp4a(ra[r].z, rw.z, acc[r][c]);
        acc[r][c] = dp4a(ra[r].w, rw.w, acc[r][c]);
      }
    }
  }
}

// `p` holds one slice's exact sum (|p| <= 2^30): added into the zeroed output, in two's complement, which is
// exact for int64 and, for the int32 output, exact because the final sum fits (K <= 131071).
template <typename Out>
__device__ __forceinline__ void add_into(Out* dst, int32_t p) {
  if constexpr (sizeof(Out) == 8) {
    atomicAdd(reinterpret_cast<unsigned long long*>(dst), static_cast<unsigned long long>(static_cast<int64_t>(p)));
  } else {
    atomicAdd(reinterpret_cast<int*>(dst), p);
  }
}

template <typename Out, Loads kLoads>
__global__ void __launch_bounds__(kThreads, 2) int64_exact_accum_kernel(const AccumArgs<Out> p) {
  __shared__ __align__(16) StageRows as[2];
  __shared__ __align__(16) StageRows ws[2];
  const int tid = static_cast<int>(threadIdx.x), lane = tid & 31, warp = tid >> 5;
  // Warp w covers ty 4(w/2)..+3 and tx 8(w%2)..+7; lanes 8i..8i+7 share one ty (see `compute_stage`).
  const int ty = (warp >> 1) * 4 + (lane >> 3), tx = (warp & 1) * 8 + (lane & 7);
  const int m0 = static_cast<int>(blockIdx.x) * kTile, n0 = static_cast<int>(blockIdx.y) * kTile;

  // The slice of K this block sums: stages [s_begin, s_begin + n_stages).
  const int64_t stages = (static_cast<int64_t>(p.k) + kKc - 1) / kKc;
  const int64_t s_begin = static_cast<int64_t>(blockIdx.z) * p.slice_stages;
  const int n_stages = static_cast<int>(stages - s_begin < p.slice_stages ? stages - s_begin : p.slice_stages);

  // The chunk this thread stages: row `srow` of each operand tile, bytes 16·`squad`.. of each stage. `a`, `w`
  // point at the chunk of the current stage; `left` counts the row's bytes from there (it fits in int:
  // K <= 2^31 - 1, and it stays >= -15). A row past M or N is never read (`a_ok`, `w_ok`).
  const int srow = tid % kTile, squad = tid / kTile;
  const bool a_ok = srow < p.m - m0, w_ok = srow < p.n - n0;  // (p.m - m0 >= 1: no overflow)
  const int64_t kb = s_begin * kKc + kChunk * squad;
  const int8_t* a = p.a + (a_ok ? static_cast<int64_t>(m0 + srow) * p.k + kb : 0);
  const int8_t* w = p.w + (w_ok ? static_cast<int64_t>(n0 + srow) * p.k + kb : 0);
  int left = static_cast<int>(p.k - kb);

  int32_t acc[kPerThread][kPerThread];
#pragma unroll
  for (int r = 0; r < kPerThread; ++r)
#pragma unroll
    for (int c = 0; c < kPerThread; ++c) acc[r][c] = 0;

  // Stage s+1 is copied into one buffer while stage s is computed from the other. One barrier per stage
  // suffices: the barrier before stage s's compute also ends every thread's compute of stage s-1, whose
  // buffer is the one the copies of stage s+1 then overwrite.
  if (n_stages > 0) stage_chunk<kLoads>(&as[0][srow][4 * squad], a, a_ok ? left : 0);
  if (n_stages > 0) stage_chunk<kLoads>(&ws[0][srow][4 * squad], w, w_ok ? left : 0);
  for (int s = 0; s < n_stages; ++s) {
    const int buf = s & 1;
    cp_async_wait_all();  // this thread's chunks of stage s have landed
    __syncthreads();      // and everyone's; and stage s-1 is computed
    if (s + 1 < n_stages) {
      a += kKc, w += kKc, left -= kKc;
      stage_chunk<kLoads>(&as[buf ^ 1][srow][4 * squad], a, a_ok ? left : 0);
      stage_chunk<kLoads>(&ws[buf ^ 1][srow][4 * squad], w, w_ok ? left : 0);
    }
    compute_stage(as[buf], ws[buf], ty, tx, acc);
  }

  const bool whole_k = gridDim.z == 1;  // one slice: its sum is the result; else add into the zeroed output
#pragma unroll
  for (int r = 0; r < kPerThread; ++r) {
    if (ty + 16 * r >= p.m - m0) continue;
    const int row = m0 + ty + 16 * r;
#pragma unroll
    for (int c = 0; c < kPerThread; ++c) {
      if (tx + 16 * c >= p.n - n0) continue;
      const int col = n0 + tx + 16 * c;
      Out* dst = p.out + static_cast<int64_t>(row) * p.n + col;
      if (whole_k) {
        *dst = static_cast<Out>(acc[r][c]);
      } else {
        add_into(dst, acc[r][c]);
      }
    }
  }
}

// Stages per K slice. At least ceil(stages / kFlushStages) slices (exactness); more only while the output
// tiles alone would fill less than `kMinFill` of the last wave of `slots` resident blocks (M = 512 layers
// have 32-256 tiles for 132 SMs): then the fewest slices that reach it (else the best filled), none
// shorter than kMinSliceStages. The bar is below 1 because a partial last wave costs less than a full one
// (a block alone on an SM runs faster) and every extra slice costs a zeroing pass and M·N atomics.
constexpr double kMinFill = 0.8;

int64_t plan_slice_stages(int64_t tiles, int64_t stages, int64_t slots) {
  if (stages == 0) return 1;
  const int64_t fewest = (stages + kFlushStages - 1) / kFlushStages;
  const int64_t most = std::max(fewest, std::min(stages / kMinSliceStages, fewest + slots));
  int64_t best_len = (stages + fewest - 1) / fewest;
  double best_fill = 0;
  for (int64_t want = fewest; want <= most; ++want) {
    const int64_t len = (stages + want - 1) / want;
    const int64_t blocks = tiles * ((stages + len - 1) / len);
    const double fill = static_cast<double>(blocks) / static_cast<double>((blocks + slots - 1) / slots * slots);
    if (fill > best_fill) best_fill = fill, best_len = len;
    if (fill >= kMinFill) break;
  }
  return best_len;
}

template <typename Out, Loads kLoads>
std::string launch_with(const AccumArgs<Out>& args, cudaStream_t stream) {
  const auto kernel = int64_exact_accum_kernel<Out, kLoads>;
  int device = 0, sms = 0, per_sm = 0;
  cudaError_t err = cudaGetDevice(&device);
  if (err == cudaSuccess) err = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  if (err == cudaSuccess) err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kThreads, 0);
  if (err != cudaSuccess) return std::string("error: device query: ") + cudaGetErrorString(err);

  const int64_t m_tiles = (int64_t{args.m} + kTile - 1) / kTile, n_tiles = (int64_t{args.n} + kTile - 1) / kTile;
  const int64_t stages = (static_cast<int64_t>(args.k) + kKc - 1) / kKc;
  const int64_t len = plan_slice_stages(m_tiles * n_tiles, stages, std::max<int64_t>(1, int64_t{sms} * per_sm));
  const int64_t slices = stages == 0 ? 1 : (stages + len - 1) / len;
  if (n_tiles > 65535 || slices > 65535) {
    return "error: N=" + std::to_string(args.n) + " or K=" + std::to_string(args.k) + " needs a grid beyond 65535 (y, z)";
  }
  AccumArgs<Out> p = args;
  p.slice_stages = static_cast<int>(len);
  if (slices > 1) {  // the slices add into the output
    err = cudaMemsetAsync(p.out, 0, static_cast<size_t>(args.m) * static_cast<size_t>(args.n) * sizeof(Out), stream);
    if (err != cudaSuccess) return std::string("error: zeroing the output: ") + cudaGetErrorString(err);
  }
  const dim3 grid(static_cast<unsigned>(m_tiles), static_cast<unsigned>(n_tiles), static_cast<unsigned>(slices));
  kernel<<<grid, kThreads, 0, stream>>>(p);
  err = cudaGetLastError();
  if (err != cudaSuccess) return std::string("error: launch: ") + cudaGetErrorString(err);
  const char* loads = kLoads == Loads::kVec16 ? "16-byte" : kLoads == Loads::kWord ? "word" : "byte";
  return std::string("qc::int64_exact_accum_kernel<") + (sizeof(Out) == 8 ? "int64" : "int32") +
         " out> (CUDA-core dp4a into int32, slices of <= 65536 terms; " + loads + " loads) grid=" +
         std::to_string(grid.x) + "x" + std::to_string(grid.y) + "x" + std::to_string(grid.z) + " block=256";
}

template <typename Out>
std::string launch(const int8_t* a, const int8_t* w, Out* out, int m, int n, int k, cudaStream_t stream) {
  if (m <= 0 || n <= 0) return "qc::int64_exact_accum_kernel: empty output, nothing launched";
  const AccumArgs<Out> args{a, w, out, m, n, k, /*slice_stages=*/0};  // this file is C++17 (CMAKE_CUDA_STANDARD)
  const bool aligned16 = reinterpret_cast<uintptr_t>(a) % 16 == 0 && reinterpret_cast<uintptr_t>(w) % 16 == 0;
  if (k % 16 == 0 && aligned16) return launch_with<Out, Loads::kVec16>(args, stream);
  if (k % 4 == 0) return launch_with<Out, Loads::kWord>(args, stream);
  return launch_with<Out, Loads::kByte>(args, stream);
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
