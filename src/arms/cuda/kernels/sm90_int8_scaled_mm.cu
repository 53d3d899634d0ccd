// INT8 tensor-core scaled matrix multiply with the epilogue fused (sm_90, mma.sync).
//
// Shapes and layouts: a [M,K] int8 row-major, w [N,K] int8 row-major (Wᵀ as column-major, the
// "TN" layout every production W8A8 kernel uses), sa [M] fp32, sw [N] fp32, optional bias [N]
// bf16; out y [M,N] bf16 row-major and, when asked, acc [M,N] int32 row-major.
// Constraints: M >= 1 (ragged M is zero-filled), N and K multiples of 16 (a 16-byte copy chunk
// is then either wholly inside or wholly outside the matrix), K < 2^17 keeps every partial sum
// exact in the int32 tensor-core accumulator for all int8 operands.
//
// Algorithm: block tile BM x BN over a 128-byte K slice per pipeline stage, `cp.async` 16-byte
// copies into an XOR-swizzled shared-memory layout (conflict-free `ldmatrix`), STAGES deep;
// warps compute m16n8k32 s8·s8→s32 `mma.sync` tiles. For decode shapes (small M) warps also split
// the K slice (WARPS_K > 1) and their int32 partial sums are added through shared memory, which is
// exact in any order. The epilogue (`formula::apply` of include/qconform/epilogue_formula.hpp, the
// text the CPU emulation compiles too) runs on the int32 registers; the formula kind is a template
// parameter, so one instance exists per formula body.
//
// Test: `make test-gpu` (tests/gpu/test_cuda_arms.cpp compares every instance with the CPU
// emulation of its formula bit for bit); benchmark: `build/bench/bench_cuda_scaled_mm`.
#include "sm90_int8_scaled_mm.cuh"
#include "sm90_int8_scaled_mm_wgmma.cuh"
#include "formula_pair.cuh"

#include <cstdio>


namespace qc::cuda_kernels {
namespace {

constexpr int kStageK = 128;  // bytes of K per pipeline stage (8 chunks of 16 bytes)

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16-byte asynchronous copy; `src_bytes` = 0 writes zeros (rows past M or N, chunks past K).
__device__ __forceinline__ void cp_async_16(uint32_t dst, const void* src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t addr, uint32_t& r0, uint32_t& r1, uint32_t& r2, uint32_t& r3) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
               : "r"(addr));
}

// D = A·B + D, m16n8k32, s8 x s8 -> s32 (wrapping, no .satfinite: what production kernels do).
__device__ __forceinline__ void mma_s8(int32_t (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Byte offset of 16-byte chunk `chunk` (0..7) of tile row `row` (128-byte rows): the chunk index
// is XORed with the low three row bits, so the 8 rows one `ldmatrix` phase reads hit 8 different
// 16-byte bank groups.
__device__ __forceinline__ uint32_t swz(int row, int chunk) {
  return static_cast<uint32_t>(row * kStageK + ((chunk ^ (row & 7)) << 4));
}

template <int BM, int BN, int WARPS_M, int WARPS_N, int WARPS_K, int STAGES>
struct Config {
  static constexpr int kThreads = 32 * WARPS_M * WARPS_N * WARPS_K;
  static constexpr int kWarpM = BM / WARPS_M;
  static constexpr int kWarpN = BN / WARPS_N;
  static constexpr int kMt = kWarpM / 16;  // m16 tiles per warp
  static constexpr int kNt = kWarpN / 8;   // n8 tiles per warp
  static constexpr int kStageBytes = (BM + BN) * kStageK;
  static constexpr int kPipeBytes = STAGES * kStageBytes;
  static constexpr int kReduceBytes = (WARPS_K - 1) * BM * BN * 4;
  static constexpr int kSmemBytes = kPipeBytes > kReduceBytes ? kPipeBytes : kReduceBytes;
  static_assert(BM % (16 * WARPS_M) == 0 && BN % (16 * WARPS_N) == 0, "warp tile must be m16 x n16 multiples");
  static_assert((kStageK / 32) % WARPS_K == 0, "the K slice must split evenly across warps");
  static_assert(kNt % 2 == 0, "B fragments are loaded two n8 tiles at a time");
};

template <int BM, int BN, int WARPS_M, int WARPS_N, int WARPS_K, int STAGES, EpilogueKind F>
__global__ void __launch_bounds__(32 * WARPS_M * WARPS_N * WARPS_K, 1)
    int8_scaled_mm_kernel(ScaledMmArgs args) {
  using C = Config<BM, BN, WARPS_M, WARPS_N, WARPS_K, STAGES>;
  extern __shared__ __align__(128) uint8_t smem[];
  const int M = args.m, N = args.n, K = args.k;

  // Grouped rasterization: 8 M-tiles share each W column tile while it is in L2.
  constexpr int kGroupM = 8;
  const int tiles_m = (M + BM - 1) / BM;
  const int tiles_n = (N + BN - 1) / BN;
  const int pid = blockIdx.x;
  const int in_group = kGroupM * tiles_n;
  const int first_m = (pid / in_group) * kGroupM;
  const int group_m = min(tiles_m - first_m, kGroupM);
  const int tile_m = first_m + (pid % in_group) % group_m;
  const int tile_n = (pid % in_group) / group_m;
  const int m0 = tile_m * BM;
  const int n0 = tile_n * BN;

  const int tid = threadIdx.x;
  const int lane = tid & 31;
  const int warp = tid >> 5;
  const int wk = warp / (WARPS_M * WARPS_N);
  const int wmn = warp % (WARPS_M * WARPS_N);
  const int wm = wmn / WARPS_N;
  const int wn = wmn % WARPS_N;

  const uint32_t smem_base = smem_u32(smem);
  const int k_tiles = (K + kStageK - 1) / kStageK;

  auto load_stage = [&](int stage, int kt) {
    const uint32_t stage_base = smem_base + stage * C::kStageBytes;
    const int k0 = kt * kStageK;
#pragma unroll
    for (int c = tid; c < (BM + BN) * 8; c += C::kThreads) {
      const int row = c >> 3;
      const int chunk = c & 7;
      const int kb = k0 + chunk * 16;
      const int8_t* src;
      bool valid;
      if (row < BM) {
        const int gm = m0 + row;
        valid = gm < M && kb < K;
        src = args.a + (valid ? static_cast<int64_t>(gm) * K + kb : 0);
      } else {
        const int gn = n0 + row - BM;
        valid = gn < N && kb < K;
        src = args.w + (valid ? static_cast<int64_t>(gn) * K + kb : 0);
      }
      cp_async_16(stage_base + swz(row, chunk), src, valid ? 16 : 0);
    }
  };

  int32_t acc[C::kMt][C::kNt][4];
#pragma unroll
  for (int i = 0; i < C::kMt; ++i)
#pragma unroll
    for (int j = 0; j < C::kNt; ++j)
#pragma unroll
      for (int r = 0; r < 4; ++r) acc[i][j][r] = 0;

#pragma unroll
  for (int s = 0; s < STAGES - 1; ++s) {
    if (s < k_tiles) load_stage(s, s);
    cp_async_commit();
  }

  for (int kt = 0; kt < k_tiles; ++kt) {
    cp_async_wait<STAGES - 2>();
    __syncthreads();  // tile kt is visible to all; every warp is done with tile kt-1's stage
    {
      const int next = kt + STAGES - 1;
      if (next < k_tiles) load_stage(next % STAGES, next);
      cp_async_commit();
    }
    const uint32_t a_base = smem_base + (kt % STAGES) * C::kStageBytes;
    const uint32_t b_base = a_base + BM * kStageK;
#pragma unroll
    for (int ks = wk; ks < kStageK / 32; ks += WARPS_K) {
      uint32_t af[C::kMt][4];
      uint32_t bf[C::kNt][2];
#pragma unroll
      for (int i = 0; i < C::kMt; ++i) {
        const int row = wm * C::kWarpM + i * 16 + (lane & 15);
        ldmatrix_x4(a_base + swz(row, ks * 2 + (lane >> 4)), af[i][0], af[i][1], af[i][2], af[i][3]);
      }
#pragma unroll
      for (int j = 0; j < C::kNt; j += 2) {
        const int row = wn * C::kWarpN + j * 8 + (lane & 7) + ((lane >> 4) << 3);
        ldmatrix_x4(b_base + swz(row, ks * 2 + ((lane >> 3) & 1)), bf[j][0], bf[j][1], bf[j + 1][0], bf[j + 1][1]);
      }
#pragma unroll
      for (int i = 0; i < C::kMt; ++i)
#pragma unroll
        for (int j = 0; j < C::kNt; ++j) mma_s8(acc[i][j], af[i], bf[j][0], bf[j][1]);
    }
  }
  cp_async_wait<0>();

  if constexpr (WARPS_K > 1) {
    // Integer partial sums: their order cannot change the result.
    __syncthreads();
    int32_t* red = reinterpret_cast<int32_t*>(smem);
    constexpr int kPerWarp = C::kMt * C::kNt * 4 * 32;
    if (wk > 0) {
      int32_t* dst = red + ((wk - 1) * WARPS_M * WARPS_N + wmn) * kPerWarp;
#pragma unroll
      for (int i = 0; i < C::kMt; ++i)
#pragma unroll
        for (int j = 0; j < C::kNt; ++j)
#pragma unroll
          for (int r = 0; r < 4; ++r) dst[((i * C::kNt + j) * 4 + r) * 32 + lane] = acc[i][j][r];
    }
    __syncthreads();
    if (wk > 0) return;
#pragma unroll
    for (int p = 0; p < WARPS_K - 1; ++p) {
      const int32_t* src = red + (p * WARPS_M * WARPS_N + wmn) * kPerWarp;
#pragma unroll
      for (int i = 0; i < C::kMt; ++i)
#pragma unroll
        for (int j = 0; j < C::kNt; ++j)
#pragma unroll
          for (int r = 0; r < 4; ++r) acc[i][j][r] += src[((i * C::kNt + j) * 4 + r) * 32 + lane];
    }
  }

  // Epilogue on registers. Fragment c0,c1: row g, cols 2t, 2t+1; c2,c3: row g+8.
  const int g = lane >> 2;
  const int t = lane & 3;
  const bool has_bias = args.bias != nullptr;
  const BiasMode bias_mode = args.bias_mode;
#pragma unroll
  for (int j = 0; j < C::kNt; ++j) {
    const int col = n0 + wn * C::kWarpN + j * 8 + t * 2;
    if (col >= N) continue;  // N is a multiple of 16, so col + 1 < N too
    const float sw0 = args.sw[col];
    const float sw1 = args.sw[col + 1];
    float b0 = 0.0f, b1 = 0.0f;
    if (has_bias) {
      b0 = formula::bf16_value(args.bias[col]);
      b1 = formula::bf16_value(args.bias[col + 1]);
    }
#pragma unroll
    for (int i = 0; i < C::kMt; ++i) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int row = m0 + wm * C::kWarpM + i * 16 + g + h * 8;
        if (row >= M) continue;
        const float sa = args.sa[row];
        const int32_t v0 = acc[i][j][2 * h];
        const int32_t v1 = acc[i][j][2 * h + 1];
        const int64_t off = static_cast<int64_t>(row) * N + col;
        *reinterpret_cast<uint32_t*>(args.y + off) =
            formula_pair::apply<F>(v0, v1, sa, sa, sw0, sw1, bias_mode, has_bias, b0, b1);
        if (args.acc != nullptr) *reinterpret_cast<int2*>(args.acc + off) = make_int2(v0, v1);
      }
    }
  }
}

template <int BM, int BN, int WARPS_M, int WARPS_N, int WARPS_K, int STAGES, EpilogueKind F>
std::string launch_config(const ScaledMmArgs& args, cudaStream_t stream) {
  using C = Config<BM, BN, WARPS_M, WARPS_N, WARPS_K, STAGES>;
  auto kernel = int8_scaled_mm_kernel<BM, BN, WARPS_M, WARPS_N, WARPS_K, STAGES, F>;
  // Raising the dynamic shared-memory limit is needed above 48 KB; done once per instance (per
  // process, single device): on every launch it added host time that decode-sized launches feel.
  static const cudaError_t attr_err =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, C::kSmemBytes);
  if (attr_err != cudaSuccess) return std::string("error: cudaFuncSetAttribute: ") + cudaGetErrorString(attr_err);
  cudaError_t err = cudaSuccess;
  const int tiles = ((args.m + BM - 1) / BM) * ((args.n + BN - 1) / BN);
  kernel<<<tiles, C::kThreads, C::kSmemBytes, stream>>>(args);
  err = cudaGetLastError();
  if (err != cudaSuccess) return std::string("error: launch: ") + cudaGetErrorString(err);
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "qc::int8_scaled_mm_kernel<BM=%d,BN=%d,warps=%dx%dx%d,stages=%d,%s> mma.sync.m16n8k32.s8 "
                "grid=%d block=%d smem=%d bias=%s",
                BM, BN, WARPS_M, WARPS_N, WARPS_K, STAGES, formula::kind_name(F), tiles, C::kThreads, C::kSmemBytes,
                bias_label(args.bias_mode, args.bias != nullptr));
  return buf;
}

template <EpilogueKind F>
std::string launch_formula(const ScaledMmArgs& args, MmTile tile, cudaStream_t stream) {
  switch (tile) {
    case MmTile::m128n256: return launch_config<128, 256, 2, 4, 1, 3, F>(args, stream);
    case MmTile::m128n128: return launch_config<128, 128, 2, 4, 1, 4, F>(args, stream);
    case MmTile::m64n128: return launch_config<64, 128, 2, 2, 1, 4, F>(args, stream);
    case MmTile::m32n64_k4: return launch_config<32, 64, 1, 2, 4, 6, F>(args, stream);
    case MmTile::m16n32_k4: return launch_config<16, 32, 1, 2, 4, 8, F>(args, stream);
    case MmTile::m16n64_k4:
    case MmTile::wg128x128:  // handled by launch_int8_scaled_mm
    case MmTile::wg128x256:
    case MmTile::wgpp64x256:
    case MmTile::wgpp128x128:
    case MmTile::wgpp64x256_c2:
    case MmTile::wgpp128x128_c2:
    case MmTile::wg128x256_c2:
    case MmTile::automatic: return launch_config<16, 64, 1, 2, 4, 6, F>(args, stream);
  }
  return "error: unknown tile";
}

}  // namespace

MmTile select_tile(int m, int n, int k) {
  // Measured on the H200 (docs/performance.md, "CUDA arms (H200)"). Decode: memory-bound, so
  // the narrow tile that gives the most blocks (bytes in flight) wins until N alone fills the
  // 132 multiprocessors twice.
  if (m <= 16) return n / 64 < 2 * 132 ? MmTile::m16n32_k4 : MmTile::m16n64_k4;
  if (m <= 32) return MmTile::m32n64_k4;
  if (m <= 64) return MmTile::m64n128;
  // M > 64: the wgmma kernel (sm90_int8_scaled_mm_wgmma.cu; mma.sync runs instead where it is
  // unavailable). M >= 2048 with two waves of 64x256 tiles or more: ping-pong 64x256, the fastest tile
  // timed back to back against cuBLASLt's GEMM alone at 4096^3 and 8192^3 on three H100s (twelfth session
  // 0.979x and 0.991x; fifteenth session 0.961-0.976x and 0.985-0.994x, where ping-pong 128x128 measured
  // 0.939-0.946x and 128x256 0.907-0.941x: docs/performance.md). Below M = 2048 (verify's M = 512 layers)
  // ping-pong 128x128 where every block gets two tiles or more (one consumer's epilogue then runs beside
  // the other's mainloop), else 128x128: back to back on an H100 (fifteenth session), (512, 12288, 4096)
  // 1.378x cuBLASLt's GEMM alone against 1.238x for 128x128 and (512, 28672, 8192) 1.236x against 1.096x
  // for 128x256, the tiles the rule before chose there.
  const int64_t tiles128 = ((int64_t{m} + 127) / 128) * ((int64_t{n} + 127) / 128);
  return tiles128 >= 2 * 132 ? MmTile::wgpp128x128 : MmTile::wg128x128;
}

namespace {

// The wgmma tiles: the name a fallback record gives, and the mma.sync tile of the same width that runs
// where the wgmma code does not.
struct WgmmaTile {
  MmTile tile;
  const char* name;
  MmTile fallback;
};
constexpr WgmmaTile kWgmmaTiles[] = {
    {MmTile::wg128x128, "128x128", MmTile::m128n128},
    {MmTile::wg128x256, "128x256", MmTile::m128n256},
    {MmTile::wgpp64x256, "ping-pong 64x256", MmTile::m128n256},
    {MmTile::wgpp128x128, "ping-pong 128x128", MmTile::m128n128},
    {MmTile::wgpp64x256_c2, "ping-pong 64x256 cluster 2x1", MmTile::m128n256},
    {MmTile::wgpp128x128_c2, "ping-pong 128x128 cluster 2x1", MmTile::m128n128},
    {MmTile::wg128x256_c2, "128x256 cluster 2x1", MmTile::m128n256},
};

}  // namespace

std::string launch_int8_scaled_mm(const ScaledMmArgs& args, cudaStream_t stream) {
  if (const char* why = launch_formula_error(args.formula, args.bias_mode, args.bias != nullptr))
    return std::string("error: launch_int8_scaled_mm: ") + why;
  MmTile tile = args.tile == MmTile::automatic ? select_tile(args.m, args.n, args.k) : args.tile;
  std::string note;
  for (const WgmmaTile& wt : kWgmmaTiles) {
    if (wt.tile != tile) continue;
    ScaledMmArgs wg = args;
    wg.tile = tile;
    std::string id = launch_int8_scaled_mm_wgmma(wg, stream);
    if (id.rfind("unavailable:", 0) != 0) return id;
    // The record names what ran: the mma.sync tile of the same width, and why not wgmma.
    note = " (fallback from wgmma " + std::string(wt.name) + ": " + id.substr(13) + ")";
    tile = wt.fallback;
    break;
  }
  const std::string id = formula::visit_kernel_instance(
      args.formula, [&](auto kind) { return launch_formula<decltype(kind)::value>(args, tile, stream); });
  return id.rfind("error:", 0) == 0 ? id : id + note;
}

}  // namespace qc::cuda_kernels
