// FP8 accumulation models on the GPU, for verify's reference side. Three kernels:
// - `fp8_accum_model_fp32_kernel` (the stepped models `accum_fp32::gpu_kernel_takes`: the Hopper
//   models and their split-K forms): `accum_fp32::evaluate_tile` (src/accum/fp8_model_fp32.hpp) on a
//   4 x 2 tile of outputs per thread (4 x 4 with QC_FP8_MODEL_TILE_N=4), each step's terms staged decoded in shared memory; the
//   exactness argument and the host test are in that header.
// - `fp8_accum_model_fp64_kernel` (every other model with a fast path, `accum_fp64::path_of`, the
//   same decision as the CPU's fast paths: blocked-c, split-k-s, sequential, exact on e4m3; or on
//   request): `accum_fp64::evaluate_tile` (src/accum/fp8_model_fp64.hpp), a register tile of outputs
//   per thread, fp64 arithmetic whose exactness is argued there and checked on the host against the
//   reference (tests/unit/test_accumulation_model.cpp). `w` is first transposed on the device to
//   [K][N] (`transpose_codes`, 32x32 tiles through shared memory) so that the 32 threads of a warp
//   (32 consecutive n) read 32 consecutive bytes per k (one sector) and share one byte of `a`
//   (a broadcast), instead of 32 rows K bytes apart.
// - `fp8_accum_model_kernel`, one thread per output (the rest, e.g. exact sums with e5m2 operands,
//   results rounded to fewer than 23 bits with exact terms): `accum_model::evaluate`, the text of
//   include/qconform/accumulation.hpp that the CPU's scalar reference compiles (int128 units of
//   2^-32). Also run for every model when the caller asks for the reference kernel.
// Nothing here depends on --fmad (the build passes --fmad=false; the products are exact, the sums
// exact or explicitly rounded: `__fmaf_rz`/`__fmaf_rn` and `__fadd_rn` where a rounding is meant).
//
// Test: tests/gpu/test_cuda_fp8_model.cpp (all three kernels equal the CPU fast evaluation bit for bit).
// Timing: bench/bench_fp8_model_gpu.cpp.
#include "accum/fp8_model_fp32.hpp"
#include "accum/fp8_model_fp64.hpp"
#include "core/env_setting.hpp"
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


// ---- the stepped models in fp32 (accum_fp32, src/accum/fp8_model_fp32.hpp) -----------------------
//
// A block of 16 x 16 threads computes a tile of BM = 16·TM rows by BN = 16·TN columns; thread (tx, ty)
// owns rows ty·TM .. ty·TM+TM-1 and columns tx·TN .. tx·TN+TN-1 of it. Every step (KC = step_k terms)
// is staged in shared memory decoded, term-major ([i][row], rows padded; each thread's TM consecutive
// rows are one 16-byte load), from codes fetched into registers one step ahead (`CodeFetch`: word loads,
// their latency behind the previous step's arithmetic). A short step (the end of K or of a split range)
// is padded with zero codes, which take no part (accum_fp32's header), so the step loops run a fixed
// count and unroll.
//
// The exponents are staged packed for `max_exponents` below, which finds E for two outputs per
// instruction (`__viaddmax_s16x2`: max(x + y, z) on each 16-bit half): a row's exponent repeated in both
// halves of a word (`ae`), a column's as one 16-bit half (`we`: columns 2j and 2j + 1 are one word, 2j in
// the low half). Every exponent, and every sum of two (kNoExponent twice is -2048), fits in 16 bits.

// A code decoded (`accum_fp32::decode`), its exponent already in the packing of its operand's tile.
struct __align__(8) DecodedCode {
  float v;
  uint32_t e;
};

template <int TM, int TN, int KC>
struct SmemTiles {
  static constexpr int kBM = 16 * TM, kBN = 16 * TN, kPad = 4;
  float av[KC][kBM + kPad];
  uint32_t ae[KC][kBM + kPad];
  float wv[KC][kBN + kPad];
  int16_t we[KC][kBN + kPad];  // a row of 2 (kBN + 4) bytes: each thread's TN halves are one 8-byte load
  // Every code of each operand's format decoded once per block (`fill_decode_tables`): staging a code is
  // one 8-byte shared load instead of the decoding's ~30 instructions.
  DecodedCode a_codes[256], w_codes[256];
};

// The exponent packings of the staged tiles (see SmemTiles): a row's in both halves, a column's in one.
__device__ __forceinline__ uint32_t pack_row_exponent(int e) { return (static_cast<uint32_t>(e) & 0xFFFFu) * 0x10001u; }
__device__ __forceinline__ uint32_t pack_col_exponent(int e) { return static_cast<uint16_t>(static_cast<int16_t>(e)); }

// The block's decode tables; read after the first step's __syncthreads (SmemStage::load).
template <class Tiles>
__device__ __forceinline__ void fill_decode_tables(Tiles& s, Fp8Format fa, Fp8Format fw, int tid, int threads) {
  for (int c = tid; c < 256; c += threads) {
    const accum_fp32::Term ta = accum_fp32::decode(static_cast<uint8_t>(c), fa);
    const accum_fp32::Term tw = accum_fp32::decode(static_cast<uint8_t>(c), fw);
    s.a_codes[c] = DecodedCode{ta.v, pack_row_exponent(ta.e)};
    s.w_codes[c] = DecodedCode{tw.v, pack_col_exponent(tw.e)};
  }
}

// The values of one staged step for this thread's T rows (or columns), from `first` on.
template <int T, int kStride>
struct SmemValues {
  const float (*v)[kStride];
  int first;
  // Only the values: the exponents are read by `max_exponents`, packed.
  __device__ __forceinline__ void load(int i, accum_fp32::Term (&t)[T]) const {
    if constexpr (T == 4) {
      const float4 fv = *reinterpret_cast<const float4*>(&v[i][first]);
      t[0] = {fv.x, 0}, t[1] = {fv.y, 0}, t[2] = {fv.z, 0}, t[3] = {fv.w, 0};
    } else if constexpr (T == 2) {
      const float2 fv = *reinterpret_cast<const float2*>(&v[i][first]);
      t[0] = {fv.x, 0}, t[1] = {fv.y, 0};
    } else {
      for (int j = 0; j < T; ++j) t[j] = {v[i][first + j], 0};
    }
  }
};
template <int T, int kStride>
struct SmemRows : SmemValues<T, kStride> {
  const uint32_t (*e)[kStride];  // each exponent in both halves
};
template <int T, int kStride>
struct SmemCols : SmemValues<T, kStride> {
  const int16_t (*e)[kStride];
};

// accum_fp32::max_exponents for the staged tiles (found by argument-dependent lookup from step_tile):
// the same maxima, two columns per instruction.
template <int TM, int TN, int kStrideA, int kStrideW>
__device__ __forceinline__ void max_exponents(const SmemRows<TM, kStrideA>& a, const SmemCols<TN, kStrideW>& w,
                                              int count, int (&e)[TM][TN]) {
  static_assert(TN % 2 == 0, "columns in pairs");
  uint32_t e2[TM][TN / 2];
  for (int r = 0; r < TM; ++r) {
    for (int j = 0; j < TN / 2; ++j) e2[r][j] = (e[r][2 * j] & 0xFFFFu) | static_cast<uint32_t>(e[r][2 * j + 1]) << 16;
  }
  for (int i = 0; i < count; ++i) {
    uint32_t ea[TM], ew[TN / 2];
    for (int r = 0; r < TM; ++r) ea[r] = a.e[i][a.first + r];
    // Two adjacent int16 exponents read as one word (4-byte aligned: rows of 2 (kBN + 4) bytes, `first` a
    // multiple of TN, which is even); written by other threads before the step's __syncthreads, read after it.
    const uint32_t* wp = reinterpret_cast<const uint32_t*>(&w.e[i][w.first]);
    for (int j = 0; j < TN / 2; ++j) ew[j] = wp[j];
    for (int r = 0; r < TM; ++r) {
      for (int j = 0; j < TN / 2; ++j) e2[r][j] = __viaddmax_s16x2(ea[r], ew[j], e2[r][j]);
    }
  }
  for (int r = 0; r < TM; ++r) {
    for (int j = 0; j < TN / 2; ++j) {
      e[r][2 * j] = static_cast<int16_t>(e2[r][j] & 0xFFFFu);
      e[r][2 * j + 1] = static_cast<int32_t>(e2[r][j]) >> 16;
    }
  }
}

// The raw codes of one step for one operand's rows, fetched into registers a step ahead: thread `tid`
// holds words idx = tid + 256·j (j < kSlots) of the [kRows][KC] block of codes, row idx % kRows (so that
// consecutive threads store to consecutive rows of the term-major tile: no bank conflicts) and word
// idx / kRows (4 consecutive codes of the row). Codes past K or past the tile's valid rows are zero.
template <int kRows, int KC>
struct CodeFetch {
  static constexpr int kWords = kRows * KC / 4;
  static constexpr int kSlots = (kWords + 255) / 256;
  uint32_t word[kSlots];

  __device__ __forceinline__ void fetch(const uint8_t* rows0, int valid_rows, int64_t k, int64_t k0, bool aligned,
                                        int tid) {
    for (int j = 0; j < kSlots; ++j) {
      const int idx = tid + 256 * j;
      const int r = idx % kRows, wd = idx / kRows;
      const int64_t kk = k0 + 4 * wd;
      uint32_t v = 0;
      if (idx < kWords && r < valid_rows) {
        const uint8_t* p = rows0 + static_cast<int64_t>(r) * k + kk;
        if (aligned && kk + 4 <= k) {
          v = __ldg(reinterpret_cast<const uint32_t*>(p));
        } else {
          for (int b = 0; b < 4; ++b) {
            if (kk + b < k) v |= static_cast<uint32_t>(__ldg(p + b)) << (8 * b);
          }
        }
      }
      word[j] = v;
    }
  }
  // Decodes the fetched codes into the tile through the block's table of the operand's format
  // (`v[i][r]`, `e[i][r]` the packed exponent), terms i >= n as zero codes.
  template <int kStride, class E>
  __device__ __forceinline__ void store(float (*v)[kStride], E (*e)[kStride], const DecodedCode* table, int n,
                                        int tid) const {
    for (int j = 0; j < kSlots; ++j) {
      const int idx = tid + 256 * j;
      if (idx >= kWords) break;
      const int r = idx % kRows, wd = idx / kRows;
      for (int b = 0; b < 4; ++b) {
        const int i = 4 * wd + b;
        const uint32_t c = i < n ? (word[j] >> (8 * b)) & 0xFFu : 0u;
        const DecodedCode d = table[c];
        v[i][r] = d.v, e[i][r] = static_cast<E>(d.e);
      }
    }
  }
};

// What evaluate_tile's steps read. `load(k0, n)` stages terms k0 .. k0+n-1 and then fetches the codes
// of the step that follows (k0 + n: the steps of a model run in ascending, contiguous K order, split
// ranges included), whose global loads complete while this step is computed; a step that is not the
// one fetched (never, in that order) is fetched first.
template <int TM, int TN, int KC>
struct SmemStage {
  using Tiles = SmemTiles<TM, TN, KC>;
  Tiles& s;
  const uint8_t* a_rows;  // the tile's first row
  const uint8_t* w_cols;  // the tile's first column (a row of w)
  int rows, cols;    // valid rows and columns of the tile (the rest load zero codes)
  int64_t k;
  int64_t stop;      // the end of this launch's terms: no step from here on is fetched ahead
  int tid, ty, tx;
  bool aligned;      // word loads: K a multiple of 4 and both operands 4-byte aligned
  int64_t fetched = -1;  // the K offset whose codes the registers hold
  CodeFetch<Tiles::kBM, KC> a_codes;
  CodeFetch<Tiles::kBN, KC> w_codes;

  __device__ __forceinline__ void fetch(int64_t k0) {
    a_codes.fetch(a_rows, rows, k, k0, aligned, tid);
    w_codes.fetch(w_cols, cols, k, k0, aligned, tid);
    fetched = k0;
  }
  __device__ __forceinline__ void load(int64_t k0, int n) {
    if (fetched != k0) fetch(k0);
    __syncthreads();  // every thread is done with the previous step's terms
    a_codes.store(s.av, s.ae, s.a_codes, n, tid);
    w_codes.store(s.wv, s.we, s.w_codes, n, tid);
    __syncthreads();
    if (k0 + n < stop) fetch(k0 + n);
  }
  __device__ __forceinline__ static constexpr int count(int) { return KC; }
  // What accum_fp32::evaluate_tile reads: this thread's rows and columns of the staged step.
  __device__ __forceinline__ SmemRows<TM, Tiles::kBM + Tiles::kPad> a() const {
    return {{s.av, ty * TM}, s.ae};
  }
  __device__ __forceinline__ SmemCols<TN, Tiles::kBN + Tiles::kPad> w() const {
    return {{s.wv, tx * TN}, s.we};
  }
};

// The models one launch evaluates (P = 1, or 2 that run the same steps: accum_fp32::same_steps) and where
// each one's d goes; a __grid_constant__ kernel parameter, so the models are read in place.
template <int P>
struct ModelOutputs {
  Fp8AccumModel model[P];
  float* d[P];
  float* state = nullptr;  // the chains between launches over parts of K: [P][3][M][N] (ModelLaunches)
};

// Field f of model q's TileState for output mn (m·N + n), in ModelOutputs::state.
__device__ __forceinline__ int64_t state_at(int q, int f, int64_t mn, int M, int N) {
  return (static_cast<int64_t>(q) * 3 + f) * M * N + mn;
}

// f(q, r, c, m·N + n) for each model q and each output (r, c) of a thread's TM x TN tile at (row0, col0)
// inside the M x N outputs (unrolled: the tile's arrays stay in registers).
template <int P, int TM, int TN, class F>
__device__ __forceinline__ void for_each_output(int row0, int col0, int M, int N, const F& f) {
#pragma unroll
  for (int q = 0; q < P; ++q) {
#pragma unroll
    for (int r = 0; r < TM; ++r) {
#pragma unroll
      for (int c = 0; c < TN; ++c) {
        const int m = row0 + r, n = col0 + c;
        if (m < M && n < N) f(q, r, c, static_cast<int64_t>(m) * N + n);
      }
    }
  }
}

// Two blocks per multiprocessor (128 registers, a few spilled: measured on an H100, one 7-layer block of
// FP8 verify's models 19.98 ms against 21.83 ms at one block and 22.86 ms before the codes were fetched
// ahead; docs/performance.md). A pair of models (P = 2) holds twice the chains' state: two blocks of 4 x 2
// tiles (128 registers; the default), or one of 4 x 4 tiles (195 registers; QC_FP8_MODEL_TILE_N=4: more
// products a shared load, a quarter of the warps). On an H100 the pair's launch of a 512 x 2048 x 512 part
// took 149 us at 4 x 2 against 175 us at 4 x 4 (issue slots busy 68 % against 52 %; docs/performance.md).
template <int TM, int TN, int KC, int P>
__global__ void __launch_bounds__(256, P == 1 || TN == 2 ? 2 : 1)
    fp8_accum_model_fp32_kernel(const __grid_constant__ ModelOutputs<P> job, const uint8_t* __restrict__ a,
                                Fp8Format fa, const uint8_t* __restrict__ w, Fp8Format fw, int M, int N, int64_t K,
                                int64_t k_begin, int64_t k_end) {
  __shared__ __align__(16) SmemTiles<TM, TN, KC> tiles;
  constexpr int kBM = 16 * TM, kBN = 16 * TN;
  const int m0 = blockIdx.y * kBM, n0 = blockIdx.x * kBN;
  const int tx = threadIdx.x, ty = threadIdx.y, tid = ty * 16 + tx;
  const bool aligned = K % 4 == 0 && reinterpret_cast<uintptr_t>(a) % 4 == 0 && reinterpret_cast<uintptr_t>(w) % 4 == 0;
  SmemStage<TM, TN, KC> stage{tiles, a + static_cast<int64_t>(m0) * K, w + static_cast<int64_t>(n0) * K,
                              min(kBM, M - m0), min(kBN, N - n0), K, min(k_end, K), tid, ty, tx, aligned};
  fill_decode_tables(tiles, fa, fw, tid, 256);
  const Fp8AccumModel* models[P];
  for (int q = 0; q < P; ++q) models[q] = &job.model[q];
  // Each output's chains: from the launch before (a launch from k_begin > 0), and to the next one or,
  // once the launch has run to K's end, its d.
  accum_fp32::TileState<P, TM, TN> st;
  const int row0 = m0 + ty * TM, col0 = n0 + tx * TN;
  if (k_begin > 0) {
    for_each_output<P, TM, TN>(row0, col0, M, N, [&](int q, int r, int c, int64_t mn) {
      st.total[q][r][c] = job.state[state_at(q, 0, mn, M, N)];
      st.chain[q][r][c] = job.state[state_at(q, 1, mn, M, N)];
      st.promoted[q][r][c] = job.state[state_at(q, 2, mn, M, N)];
    });
  }
  accum_fp32::run_steps<TM, TN, P>(models, K, stage, k_begin, k_end, st);
  if (k_end >= K) {
    for_each_output<P, TM, TN>(row0, col0, M, N, [&](int q, int r, int c, int64_t mn) { job.d[q][mn] = st.total[q][r][c]; });
  } else {
    for_each_output<P, TM, TN>(row0, col0, M, N, [&](int q, int r, int c, int64_t mn) {
      job.state[state_at(q, 0, mn, M, N)] = st.total[q][r][c];
      job.state[state_at(q, 1, mn, M, N)] = st.chain[q][r][c];
      job.state[state_at(q, 2, mn, M, N)] = st.promoted[q][r][c];
    });
  }
}

// One launch per `per` terms of K (the last runs to K's end), the chains kept in job.state between them.
template <int KC, int P, int TN>
void launch_fp32(const ModelOutputs<P>& job, const uint8_t* a, Fp8Format fa, const uint8_t* w, Fp8Format fw, int m,
                 int n, int64_t k, int64_t per, cudaStream_t stream) {
  constexpr int TM = 4;
  const dim3 block(16, 16);
  const dim3 grid((n + 16 * TN - 1) / (16 * TN), (m + 16 * TM - 1) / (16 * TM));
  for (int64_t k_begin = 0;; k_begin += per) {
    const int64_t k_end = k_begin + per < k ? k_begin + per : k;
    fp8_accum_model_fp32_kernel<TM, TN, KC, P><<<grid, block, 0, stream>>>(job, a, fa, w, fw, m, n, k, k_begin, k_end);
    if (k_end >= k) break;
  }
}

// Outputs per thread along N of the fp32 kernel: 2 (the default) or 4 (QC_FP8_MODEL_TILE_N=4), read at each
// launch (a measurement's setting; the GPU tests run both).
int model_tile_n() { return env_int("QC_FP8_MODEL_TILE_N", 2, 2, 4) == 4 ? 4 : 2; }

template <int KC, int P>
void launch_fp32_tile(int tn, const ModelOutputs<P>& job, const uint8_t* a, Fp8Format fa, const uint8_t* w,
                      Fp8Format fw, int m, int n, int64_t k, int64_t per, cudaStream_t stream) {
  if (tn == 2) {
    launch_fp32<KC, P, 2>(job, a, fa, w, fw, m, n, k, per, stream);
  } else {
    launch_fp32<KC, P, 4>(job, a, fa, w, fw, m, n, k, per, stream);
  }
}

// The fp32 kernel for P models (accum_fp32::gpu_kernel_takes each; same_steps when P = 2), in launches of
// `launches.k_per_launch` terms; its identity.
template <int P>
std::string launch_fp32_models(ModelOutputs<P> job, const uint8_t* a, Fp8Format fa, const uint8_t* w, Fp8Format fw,
                               int m, int n, int64_t k, cudaStream_t stream, const ModelLaunches& launches) {
  const int step_k = job.model[0].step_k;
  int64_t per = k;
  if (launches.k_per_launch > 0 && launches.state != nullptr && launches.k_per_launch < k) {
    per = (launches.k_per_launch + step_k - 1) / step_k * step_k;  // every cut on a step boundary (run_steps)
    job.state = launches.state;
  }
  const int tn = model_tile_n();
  switch (step_k) {
    case 8: launch_fp32_tile<8>(tn, job, a, fa, w, fw, m, n, k, per, stream); break;
    case 16: launch_fp32_tile<16>(tn, job, a, fa, w, fw, m, n, k, per, stream); break;
    default: launch_fp32_tile<32>(tn, job, a, fa, w, fw, m, n, k, per, stream); break;
  }
  const std::string cut = per < k ? ", in launches of " + std::to_string(per) + " terms of K" : "";
  return std::string("qconform fp8_accum_model_fp32 (steps in fp32, ") +
         (P == 2 ? "two models sharing their steps in one pass over the products, " : "") + "each step of " +
         std::to_string(step_k) + " terms staged decoded in shared memory, 4x" + std::to_string(tn) +
         " outputs per thread, 16x16 threads" + cut +
         ")";
}

}  // namespace

namespace {

std::string launch(const Fp8AccumModel& model, const uint8_t* a, Fp8Format fa, const uint8_t* w, Fp8Format fw,
                   uint8_t* w_t, float* d, int m, int n, int64_t k, bool allow_fp32, bool reference_kernel,
                   cudaStream_t stream, const ModelLaunches& launches) {
  const dim3 block(32, 8);
  const dim3 grid((n + 31) / 32, (m + 7) / 8);
  const accum_fp64::Path path = accum_fp64::path_of(model, fa, fw, k);
  if (reference_kernel || path == accum_fp64::Path::reference || k == 0) {
    fp8_accum_model_kernel<<<grid, block, 0, stream>>>(model, a, fa, w, fw, d, m, n, k);
    return "qconform fp8_accum_model (accumulation.hpp evaluate in int128, 1 thread per output, 32x8 blocks)";
  }
  if (allow_fp32 && !reference_kernel && accum_fp32::gpu_kernel_takes(model, k)) {
    return launch_fp32_models(ModelOutputs<1>{{model}, {d}}, a, fa, w, fw, m, n, k, stream, launches);
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

// The kernel's identity, or "error: ..." when its launch failed (this host thread's launches only).
std::string launched(std::string identity) {
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return std::string("error: ") + cudaGetErrorString(err) + " launching " + identity;
  return identity;
}

}  // namespace

bool fp8_accum_models_share_steps(const Fp8AccumModel& first, const Fp8AccumModel& second, int64_t k) {
  return accum_fp32::same_steps(first, second) && accum_fp32::gpu_kernel_takes(first, k) &&
         accum_fp32::gpu_kernel_takes(second, k);
}

std::string launch_fp8_accum_model_pair(const Fp8AccumModel& first, const Fp8AccumModel& second, const uint8_t* a,
                                        Fp8Format fa, const uint8_t* w, Fp8Format fw, float* d_first, float* d_second,
                                        int m, int n, int64_t k, cudaStream_t stream, const ModelLaunches& launches) {
  if (!fp8_accum_models_share_steps(first, second, k)) {
    return "error: launch_fp8_accum_model_pair: the two models do not run the same steps in the fp32 kernel";
  }
  if (m <= 0 || n <= 0) return "fp8_accum_model (empty)";
  return launched(launch_fp32_models(ModelOutputs<2>{{first, second}, {d_first, d_second}}, a, fa, w, fw, m, n, k,
                                     stream, launches));
}

std::string launch_fp8_accum_model(const Fp8AccumModel& model, const uint8_t* a, Fp8Format fa, const uint8_t* w,
                                   Fp8Format fw, uint8_t* w_t, float* d, int m, int n, int64_t k, bool allow_fp32,
                                   bool reference_kernel, cudaStream_t stream, const ModelLaunches& launches) {
  if (m <= 0 || n <= 0) return "fp8_accum_model (empty)";
  return launched(launch(model, a, fa, w, fw, w_t, d, m, n, k, allow_fp32, reference_kernel, stream, launches));
}

}  // namespace qc::cuda_kernels
