// Exact INT8 accumulation on CUDA cores with dp4a, independent of the tensor cores under test (C2/C4).
//
// Shapes and layouts: a [M,K] int8 row-major, w [N,K] int8 row-major (Wᵀ as column-major),
// out [M,N] row-major, int64 for any K or int32 for K <= 131071; device pointers 4-byte aligned.
// out[m,n] = Σ_k a[m,k]·w[n,k] exactly, for every input.
//
// Independence: the sums are built from `__dp4a` (SASS `IDP.4A`), a CUDA-core integer instruction
// that adds the four products of two words' sign-extended bytes to an int32. No mma, wgmma or
// tensor core is involved: this is a second, differently built implementation of the sum the
// tensor-core arms compute, and the reference they are checked against.
//
// Why exact: each product is at most 2^14 in magnitude ((-128)·(-128)), so each dp4a adds at most
// 4·2^14, and an int32 partial over at most `kSplitMaxK` = 65536 terms stays within 2^30 < 2^31
// at every step. A block sums one K range of at most 65536 terms in int32 (longer K is always
// split), and the K ranges of an output are added in int64 (int32 output: in int32, where the
// final sum fits by K·2^14 < 2^31): by atomic adds into the zeroed output when K is split, which
// wrap in two's complement and so give the exact sum in any order, or by a plain store when not.
//
// Block: 256 threads, a 128x128 output tile, each thread 8x8 outputs in int32 registers (rows
// m0 + 4·ty + {0..3} and m0 + 64 + 4·ty + {0..3}, columns likewise with tx). K is staged through
// shared memory 64 bytes at a time, double-buffered, stored word-transposed (`[k word][row]`, the
// 128 rows padded to 132 words) so that a thread reads its four consecutive rows of a k word with
// one conflict-free 16-byte load: per k word, 4 shared loads feed 64 dp4a. Global loads go through
// registers: 16-byte chunks when K is a multiple of 16 and both pointers 16-byte aligned, 4-byte
// words when K is a multiple of 4 (pointers 4-byte aligned), bytes otherwise (rows then start
// unaligned). Bytes past the end of the K range load as zero; rows past M or N load the last valid
// row, whose sums are computed and never stored.
//
// Split-K: when the output tiles are few compared with the SMs' block slots, K is cut into
// `gridDim.z` ranges of whole 64-byte stages (the last range is ragged), chosen by a simple model
// of waves times stages; any K above 65536 is split regardless.
//
// Test: `make test-gpu` (tests/gpu/test_cuda_compare.cpp, `CudaExactAccum.*`: equals the CPU exact
// reference, including all-extreme operands at K = 32768, K past the int32 proof, K not a multiple
// of 4, and split K); benchmark: `build/bench/bench_cuda_scaled_mm --exact`.
#include "int64_exact_accum.cuh"

#include <algorithm>
#include <cstdint>

namespace qc::cuda_kernels {
namespace {

constexpr int kThreads = 256;
constexpr int kTile = 128;                      // output rows and columns per block
constexpr int kHalf = kTile / 2;                // a thread's second group of 4 rows (columns) starts here
constexpr int kStageBytes = 64;                 // bytes of K per shared-memory stage
constexpr int kStageWords = kStageBytes / 4;
constexpr int kSmemRow = kTile + 4;             // words per k-word row in shared memory
constexpr int kSplitMaxK = 1 << 16;             // most terms a block sums in int32
constexpr int kMaxStagesPerSplit = kSplitMaxK / kStageBytes;

static_assert(int64_t{kSplitMaxK} * (1 << 14) <= int64_t{1} << 30, "an int32 partial stays within 2^30");
static_assert(kSplitMaxK % kStageBytes == 0, "a K range is whole stages");
static_assert(kTile * kStageBytes / 16 == 2 * kThreads, "each thread loads two 16-byte chunks per operand");
static_assert((kSmemRow * 4) % 16 == 0, "16-byte shared loads stay aligned");
static_assert(16 * 16 == kThreads && 2 * 4 * 16 == kTile, "16x16 threads of 8x8 outputs cover the tile");
static_assert(2 * 2 * kStageWords == kHalf, "the stage buffers hold half the tile's int32 sums");

// How a thread reads its 16-byte chunks of a row from global memory.
enum class RowLoad { vec16, word, byte };

// Bytes k..k+15 of `row`, little-endian in four words as one 16-byte load would give them; bytes
// at `len` or beyond are zero. `vec16` needs K % 16 == 0 and 16-byte aligned rows (a chunk is then
// wholly inside or outside the range), `word` K % 4 == 0 and 4-byte aligned rows; `byte` takes any.
template <RowLoad L>
__device__ __forceinline__ uint4 load_chunk(const int8_t* __restrict__ row, int k, int len) {
  uint4 v = make_uint4(0, 0, 0, 0);
  if constexpr (L == RowLoad::vec16) {
    if (k < len) v = *reinterpret_cast<const uint4*>(row + k);
  } else if constexpr (L == RowLoad::word) {
    const uint32_t* p = reinterpret_cast<const uint32_t*>(row + k);
    if (k < len) v.x = p[0];
    if (k + 4 < len) v.y = p[1];
    if (k + 8 < len) v.z = p[2];
    if (k + 12 < len) v.w = p[3];
  } else {
    uint32_t x[4] = {0, 0, 0, 0};
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      if (k + i < len) x[i / 4] |= static_cast<uint32_t>(static_cast<uint8_t>(row[k + i])) << (8 * (i % 4));
    }
    v = make_uint4(x[0], x[1], x[2], x[3]);
  }
  return v;
}

// One stage of a thread's 8x8 sums: 16 k words, each 4 shared loads and 64 dp4a.
__device__ __forceinline__ void mac_stage(const uint32_t (*as)[kSmemRow], const uint32_t (*ws)[kSmemRow], int tx,
                                          int ty, int32_t (&acc)[8][8]) {
#pragma unroll
  for (int kw = 0; kw < kStageWords; ++kw) {
    const uint4 a_lo = *reinterpret_cast<const uint4*>(&as[kw][4 * ty]);
    const uint4 a_hi = *reinterpret_cast<const uint4*>(&as[kw][kHalf + 4 * ty]);
    const uint4 w_lo = *reinterpret_cast<const uint4*>(&ws[kw][4 * tx]);
    const uint4 w_hi = *reinterpret_cast<const uint4*>(&ws[kw][kHalf + 4 * tx]);
    const int ra[8] = {static_cast<int>(a_lo.x), static_cast<int>(a_lo.y), static_cast<int>(a_lo.z),
                       static_cast<int>(a_lo.w), static_cast<int>(a_hi.x), static_cast<int>(a_hi.y),
                       static_cast<int>(a_hi.z), static_cast<int>(a_hi.w)};
    const int rw[8] = {static_cast<int>(w_lo.x), static_cast<int>(w_lo.y), static_cast<int>(w_lo.z),
                       static_cast<int>(w_lo.w), static_cast<int>(w_hi.x), static_cast<int>(w_hi.y),
                       static_cast<int>(w_hi.z), static_cast<int>(w_hi.w)};
#pragma unroll
    for (int i = 0; i < 8; ++i)
#pragma unroll
      for (int j = 0; j < 8; ++j) acc[i][j] = __dp4a(ra[i], rw[j], acc[i][j]);
  }
}

// The two chunks a thread loaded (rows `lrow` and `lrow + 64`, words `4q..4q+3` of the stage),
// stored word-transposed.
__device__ __forceinline__ void store_chunks(uint32_t (*s)[kSmemRow], const uint4 (&v)[2], int lrow, int q) {
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    s[4 * q + 0][lrow + kHalf * i] = v[i].x;
    s[4 * q + 1][lrow + kHalf * i] = v[i].y;
    s[4 * q + 2][lrow + kHalf * i] = v[i].z;
    s[4 * q + 3][lrow + kHalf * i] = v[i].w;
  }
}

// The exact sum, added into the zeroed output when K is split (two's-complement wrap-around makes
// the atomic adds exact in any order), stored otherwise.
__device__ __forceinline__ void put(int64_t* p, int32_t v, bool add) {
  if (add) {
    atomicAdd(reinterpret_cast<unsigned long long*>(p), static_cast<unsigned long long>(static_cast<int64_t>(v)));
  } else {
    *p = v;
  }
}
__device__ __forceinline__ void put(int32_t* p, int32_t v, bool add) {
  if (add) {
    atomicAdd(p, v);
  } else {
    *p = v;
  }
}

// Grid: x the M tiles (fastest, so the blocks sharing a W tile run together), y the N tiles, z the
// K ranges of `split_k` bytes each (a multiple of `kStageBytes`, at most `kSplitMaxK`).
template <typename Out, RowLoad L>
__global__ void __launch_bounds__(kThreads, 2)
    int64_exact_accum_kernel(const int8_t* __restrict__ a, const int8_t* __restrict__ w, Out* __restrict__ out,
                             int M, int N, int K, int split_k) {
  // [operand][buffer][k word][row]; after the last stage, the staging area of the epilogue.
  __shared__ __align__(16) uint32_t smem[2][2][kStageWords][kSmemRow];
  uint32_t (*const as)[kStageWords][kSmemRow] = smem[0];
  uint32_t (*const ws)[kStageWords][kSmemRow] = smem[1];
  const int tid = static_cast<int>(threadIdx.x);
  const int tx = tid & 15, ty = tid >> 4;
  const int m0 = static_cast<int>(blockIdx.x) * kTile, n0 = static_cast<int>(blockIdx.y) * kTile;
  // K positions below are relative to this block's range [k_begin, k_begin + len), len <= kSplitMaxK.
  const int64_t k_begin = static_cast<int64_t>(blockIdx.z) * split_k;
  const int len = static_cast<int>(K - k_begin < split_k ? K - k_begin : split_k);
  const int stages = (len + kStageBytes - 1) / kStageBytes;

  // A warp loads 8 rows x 64 contiguous bytes per operand: whole 32-byte sectors.
  const int lrow = tid >> 2, q = tid & 3;
  const int8_t* a_row[2];
  const int8_t* w_row[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int ra = m0 + lrow + kHalf * i, rw = n0 + lrow + kHalf * i;
    a_row[i] = a + static_cast<int64_t>(ra < M ? ra : M - 1) * K + k_begin;
    w_row[i] = w + static_cast<int64_t>(rw < N ? rw : N - 1) * K + k_begin;
  }
  uint4 va[2], vw[2];
  const auto load = [&](int k0) {
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      va[i] = load_chunk<L>(a_row[i], k0 + 16 * q, len);
      vw[i] = load_chunk<L>(w_row[i], k0 + 16 * q, len);
    }
  };

  // `acc` is exact: at most kSplitMaxK terms, |acc| <= 2^30 at every step.
  int32_t acc[8][8];
#pragma unroll
  for (int i = 0; i < 8; ++i)
#pragma unroll
    for (int j = 0; j < 8; ++j) acc[i][j] = 0;

  load(0);
  store_chunks(as[0], va, lrow, q);
  store_chunks(ws[0], vw, lrow, q);
  __syncthreads();
  for (int s = 0; s < stages; ++s) {
    // The next stage's global loads are in flight while this one is summed; its buffer was last
    // read in stage s - 1, which every thread finished before the barrier that ended it. After the
    // last stage the loads are all past `len` (zeros, no memory access) and the stores harmless.
    // The loop has no branch on purpose: behind `if (s + 1 < stages)` the compiler moved the global
    // loads after the sums, into the branch of the stores, and nothing overlapped their latency.
    const int buf = s & 1;
    load((s + 1) * kStageBytes);
    mac_stage(as[buf], ws[buf], tx, ty, acc);
    store_chunks(as[buf ^ 1], va, lrow, q);
    store_chunks(ws[buf ^ 1], vw, lrow, q);
    __syncthreads();
  }

  // The sums leave through shared memory, 64 tile rows at a time, so that a warp's stores (or atomic
  // adds) cover 32 consecutive outputs of one row: whole 32-byte sectors, not one per thread. The
  // barrier that ended the last stage (or the prologue's) orders the first half's writes after
  // every shared read of the stages.
  int32_t (*const staged)[kSmemRow] = reinterpret_cast<int32_t (*)[kSmemRow]>(&smem[0][0][0][0]);
  const bool add = gridDim.z > 1;
  const int col = n0 + (tid & (kTile - 1));
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    if (h > 0) __syncthreads();  // the first half's reads are done
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int32_t* r = acc[4 * h + i];
      *reinterpret_cast<int4*>(&staged[4 * ty + i][4 * tx]) = make_int4(r[0], r[1], r[2], r[3]);
      *reinterpret_cast<int4*>(&staged[4 * ty + i][kHalf + 4 * tx]) = make_int4(r[4], r[5], r[6], r[7]);
    }
    __syncthreads();
#pragma unroll 4
    for (int r = tid / kTile; r < kHalf; r += kThreads / kTile) {
      const int row = m0 + kHalf * h + r;
      if (row < M && col < N) put(out + static_cast<int64_t>(row) * N + col, staged[r][tid & (kTile - 1)], add);
    }
  }
}

const char* row_load_name(RowLoad l) {
  switch (l) {
    case RowLoad::vec16: return "16-byte";
    case RowLoad::word: return "4-byte";
    default: return "1-byte";
  }
}

// The split of K into `split` ranges of `stages_per_split` stages: the fewest estimated stage-times,
// counting whole waves of block slots (SMs x resident blocks) and an epilogue of about one stage,
// six when it adds 16384 sums atomically (estimates, not measurements). K > 65536 is always split.
struct KSplit {
  int split;
  int stages_per_split;
};
KSplit choose_split(int64_t tiles, int k, int64_t slots) {
  const int64_t stages = std::max<int64_t>(1, (static_cast<int64_t>(k) + kStageBytes - 1) / kStageBytes);
  const int64_t min_split = (stages + kMaxStagesPerSplit - 1) / kMaxStagesPerSplit;
  const int64_t max_split = std::min<int64_t>(stages, std::max<int64_t>(min_split, 64));
  KSplit best{0, 0};
  double best_cost = 0;
  for (int64_t s = min_split; s <= max_split; ++s) {
    const int64_t per = (stages + s - 1) / s;
    const int64_t used = (stages + per - 1) / per;  // no empty ranges
    const int64_t waves = (tiles * used + slots - 1) / slots;
    const double cost = static_cast<double>(waves) * (static_cast<double>(per) + (used > 1 ? 6.0 : 1.0));
    if (best.split == 0 || cost < best_cost) best = {static_cast<int>(used), static_cast<int>(per)}, best_cost = cost;
  }
  return best;
}

template <typename Out, RowLoad L>
std::string launch_as(const int8_t* a, const int8_t* w, Out* out, int m, int n, int k, cudaStream_t stream) {
  const auto kernel = int64_exact_accum_kernel<Out, L>;
  int device = 0, sms = 0, per_sm = 0;
  cudaError_t err = cudaGetDevice(&device);
  if (err == cudaSuccess) err = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  if (err == cudaSuccess) err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kThreads, 0);
  if (err != cudaSuccess) return std::string("error: device query: ") + cudaGetErrorString(err);
  const int64_t m_tiles = (m + kTile - 1) / kTile, n_tiles = (n + kTile - 1) / kTile;
  if (n_tiles > 65535) return "error: N=" + std::to_string(n) + " exceeds the grid's 65535 column tiles of 128";
  const KSplit split = choose_split(m_tiles * n_tiles, k, std::max(1, sms * std::max(1, per_sm)));
  if (split.split > 1) {
    err = cudaMemsetAsync(out, 0, static_cast<size_t>(m) * static_cast<size_t>(n) * sizeof(Out), stream);
    if (err != cudaSuccess) return std::string("error: zeroing the output: ") + cudaGetErrorString(err);
  }
  const dim3 grid(static_cast<unsigned>(m_tiles), static_cast<unsigned>(n_tiles), static_cast<unsigned>(split.split));
  kernel<<<grid, kThreads, 0, stream>>>(a, w, out, m, n, k, split.stages_per_split * kStageBytes);
  err = cudaGetLastError();
  if (err != cudaSuccess) return std::string("error: launch: ") + cudaGetErrorString(err);
  std::string d = std::string("qc::int64_exact_accum_kernel<") + (sizeof(Out) == 8 ? "int64" : "int32") + " out, " +
                  row_load_name(L) + " loads> (CUDA-core dp4a IDP.4A, int32 partials of <= " +
                  std::to_string(split.stages_per_split * kStageBytes) + " K terms) tile=128x128 block=256 (8x8 each) grid=" +
                  std::to_string(grid.x) + "x" + std::to_string(grid.y) + "x" + std::to_string(grid.z) +
                  " split-K=" + std::to_string(split.split);
  if (split.split > 1) d += std::string(" (ranges added by ") + (sizeof(Out) == 8 ? "int64" : "int32") + " atomics into the zeroed output)";
  return d;
}

template <typename Out>
std::string launch(const int8_t* a, const int8_t* w, Out* out, int m, int n, int k, cudaStream_t stream) {
  if (m < 0 || n < 0 || k < 0) {
    return "error: expected M, N, K >= 0, found M=" + std::to_string(m) + " N=" + std::to_string(n) +
           " K=" + std::to_string(k);
  }
  if (m == 0 || n == 0) return "qc::int64_exact_accum_kernel: empty output, nothing launched";
  const auto aligned = [&](uintptr_t to) {
    return reinterpret_cast<uintptr_t>(a) % to == 0 && reinterpret_cast<uintptr_t>(w) % to == 0;
  };
  if (k % 16 == 0 && aligned(16)) return launch_as<Out, RowLoad::vec16>(a, w, out, m, n, k, stream);
  if (k % 4 == 0 && aligned(4)) return launch_as<Out, RowLoad::word>(a, w, out, m, n, k, stream);
  return launch_as<Out, RowLoad::byte>(a, w, out, m, n, k, stream);
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
