// INT8 scaled matrix multiply with the epilogue fused, Hopper `wgmma` + TMA (sm_90a).
//
// Shapes and layouts: a [M,K] int8 row-major, w [N,K] int8 row-major (both K-major: exactly the
// layout the s8 `wgmma` path requires, which has no transpose), sa [M] fp32, sw [N] fp32,
// optional bias [N] bf16; out y [M,N] bf16 row-major and, when asked, acc [M,N] int32 row-major.
// Constraints: M >= 1, N and K multiples of 16 (the TMA global stride K must be a multiple of 16
// bytes), K < 2^17 (every partial sum exact in int32). Ragged M, N and K tiles: TMA fills the
// out-of-bounds part of each box with zeros, and the epilogue masks rows >= M and cols >= N.
//
// Algorithm: 128 x BN output tiles (BN = 128 or 256); a persistent grid of at most one block per
// multiprocessor walks the tiles; 384 threads = 3 warpgroups.
// Warpgroup 0 is the producer: one thread issues `cp.async.bulk.tensor.2d` (TMA) loads of a
// 128-row A box and a BN-row W box, 128 bytes of K each, into a STAGES-deep ring of shared-memory
// stages in the 128-byte swizzle layout, completing on a `full` mbarrier per stage. Warpgroups 1
// and 2 are consumers: each owns 64 rows of the tile and issues four
// `wgmma.mma_async.sync.aligned.m64n{BN}k32.s32.s8.s8` per stage (both operands from shared
// memory through matrix descriptors), keeps one wgmma group in flight and releases the stage
// before it through an `empty` mbarrier. The producer runs ahead into the next tile while the
// consumers are in the epilogue. `setmaxnreg` moves registers from the producer to the
// consumers (BN/2 int32 accumulators per thread). The epilogue runs on the int32 registers with
// the same formula text as the mma.sync kernel and the CPU emulation (`formula::apply` of
// include/qconform/epilogue_formula.hpp: `__fmul_rn`, `__fmaf_rn` only where declared, bf16
// round-to-nearest-even); the formula kind is a template parameter, so one instance exists per
// formula body.
//
// The wgmma code exists only in an sm_90a compilation (`__CUDA_ARCH_FEAT_SM90_ALL`); in any other
// compilation the kernel body is empty and the entry point answers "unavailable: ..." (decided at
// run time by a probe kernel compiled under the same guard), and `launch_int8_scaled_mm` then
// runs the mma.sync kernel and says so in the kernel identity it returns for the RunRecord.
//
// Build (on the H200 machine; the default architecture 90 compiles but has no wgmma code):
//   cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DQCONFORM_WITH_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a
//   cmake --build build -j16 --target qconform_gpu_tests bench_cuda_scaled_mm
// Test: `./build/tests/qconform_gpu_tests` (every `cuda:mma-*` arm at M > 64 runs this kernel and
// is compared with `Epilogue::apply` of the exact accumulator bit for bit; CudaKernels.* runs every
// tile on a ragged shape); benchmark: `./build/bench/bench_cuda_scaled_mm`.

#include "sm90_int8_scaled_mm_wgmma.cuh"

#include <cuda.h>  // CUtensorMap and cuTensorMapEncodeTiled's types (the function comes from the runtime)

#include <cstdio>
#include <mutex>


namespace qc::cuda_kernels {
namespace {

constexpr int kBM = 128;       // two consumer warpgroups x 64 rows
constexpr int kBK = 128;       // bytes of K per stage: one 128-byte swizzle row
constexpr int kThreads = 384;  // producer warpgroup + two consumer warpgroups

template <int BN, int STAGES>
struct WgConfig {
  static constexpr int kABytes = kBM * kBK;
  static constexpr int kBBytes = BN * kBK;
  static constexpr int kStageBytes = kABytes + kBBytes;
  static constexpr int kSmemBytes = STAGES * kStageBytes + 1024;  // + slack to align the ring to 1024 B
  static_assert(BN == 128 || BN == 256, "wgmma n of the instance");
  static_assert(kSmemBytes <= 227 * 1024, "shared memory per block");
};

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
  asm volatile(
      "{\n"
      ".reg .pred P1;\n"
      "LAB_WAIT:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 P1, [%0], %1;\n"
      "@P1 bra DONE;\n"
      "bra LAB_WAIT;\n"
      "DONE:\n"
      "}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void mbar_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
// TMA: box at (c0 = K byte offset, c1 = row) of the tensor map into shared memory at `dst`.
__device__ __forceinline__ void tma_load_2d(uint32_t dst, const CUtensorMap* map, uint32_t bar, int c0, int c1) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n" ::"r"(
          dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(bar)
      : "memory");
}

// Shared-memory matrix descriptor, K-major operand in the 128-byte swizzle layout: rows of 128
// bytes, 8-row (1024-byte) swizzle atoms stacked along M/N (stride byte offset 1024); the leading
// byte offset is unused for swizzled K-major layouts (set to 1 as CUTLASS does).
__device__ __forceinline__ uint64_t smem_desc(uint32_t addr) {
  uint64_t d = 0;
  d |= static_cast<uint64_t>((addr & 0x3FFFF) >> 4);
  d |= static_cast<uint64_t>(1) << 16;
  d |= static_cast<uint64_t>(1024 >> 4) << 32;
  d |= static_cast<uint64_t>(1) << 62;  // SWIZZLE_128B
  return d;
}

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
template <int R>
__device__ __forceinline__ void setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(R));
}
template <int R>
__device__ __forceinline__ void setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(R));
}

// Keeps the accumulator registers live and ordered around the asynchronous wgmma (so that the
// compiler neither reads them early nor moves them).
template <int R>
__device__ __forceinline__ void fence_regs(int32_t (&d)[R]) {
#pragma unroll
  for (int i = 0; i < R; ++i) asm volatile("" : "+r"(d[i])::"memory");
}

// D[64x128] += A[64x32] . B[128x32]^T, both K-major in 128B-swizzled shared memory.
__device__ __forceinline__ void wgmma_m64n128k32(int32_t (&d)[64], uint64_t da, uint64_t db) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k32.s32.s8.s8 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,"
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31,"
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47,"
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
      "}, %64, %65, p;\n"
      "}\n"
      : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3]), "+r"(d[4]), "+r"(d[5]), "+r"(d[6]), "+r"(d[7]),
        "+r"(d[8]), "+r"(d[9]), "+r"(d[10]), "+r"(d[11]), "+r"(d[12]), "+r"(d[13]), "+r"(d[14]), "+r"(d[15]),
        "+r"(d[16]), "+r"(d[17]), "+r"(d[18]), "+r"(d[19]), "+r"(d[20]), "+r"(d[21]), "+r"(d[22]), "+r"(d[23]),
        "+r"(d[24]), "+r"(d[25]), "+r"(d[26]), "+r"(d[27]), "+r"(d[28]), "+r"(d[29]), "+r"(d[30]), "+r"(d[31]),
        "+r"(d[32]), "+r"(d[33]), "+r"(d[34]), "+r"(d[35]), "+r"(d[36]), "+r"(d[37]), "+r"(d[38]), "+r"(d[39]),
        "+r"(d[40]), "+r"(d[41]), "+r"(d[42]), "+r"(d[43]), "+r"(d[44]), "+r"(d[45]), "+r"(d[46]), "+r"(d[47]),
        "+r"(d[48]), "+r"(d[49]), "+r"(d[50]), "+r"(d[51]), "+r"(d[52]), "+r"(d[53]), "+r"(d[54]), "+r"(d[55]),
        "+r"(d[56]), "+r"(d[57]), "+r"(d[58]), "+r"(d[59]), "+r"(d[60]), "+r"(d[61]), "+r"(d[62]), "+r"(d[63])
      : "l"(da), "l"(db), "r"(1)
      : "memory");
}

// D[64x256] += A[64x32] . B[256x32]^T, both K-major in 128B-swizzled shared memory.
__device__ __forceinline__ void wgmma_m64n256k32(int32_t (&d)[128], uint64_t da, uint64_t db) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %130, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k32.s32.s8.s8 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,"
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31,"
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47,"
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63,"
      "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79,"
      "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95,"
      "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111,"
      "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
      "}, %128, %129, p;\n"
      "}\n"
      : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3]), "+r"(d[4]), "+r"(d[5]), "+r"(d[6]), "+r"(d[7]),
        "+r"(d[8]), "+r"(d[9]), "+r"(d[10]), "+r"(d[11]), "+r"(d[12]), "+r"(d[13]), "+r"(d[14]), "+r"(d[15]),
        "+r"(d[16]), "+r"(d[17]), "+r"(d[18]), "+r"(d[19]), "+r"(d[20]), "+r"(d[21]), "+r"(d[22]), "+r"(d[23]),
        "+r"(d[24]), "+r"(d[25]), "+r"(d[26]), "+r"(d[27]), "+r"(d[28]), "+r"(d[29]), "+r"(d[30]), "+r"(d[31]),
        "+r"(d[32]), "+r"(d[33]), "+r"(d[34]), "+r"(d[35]), "+r"(d[36]), "+r"(d[37]), "+r"(d[38]), "+r"(d[39]),
        "+r"(d[40]), "+r"(d[41]), "+r"(d[42]), "+r"(d[43]), "+r"(d[44]), "+r"(d[45]), "+r"(d[46]), "+r"(d[47]),
        "+r"(d[48]), "+r"(d[49]), "+r"(d[50]), "+r"(d[51]), "+r"(d[52]), "+r"(d[53]), "+r"(d[54]), "+r"(d[55]),
        "+r"(d[56]), "+r"(d[57]), "+r"(d[58]), "+r"(d[59]), "+r"(d[60]), "+r"(d[61]), "+r"(d[62]), "+r"(d[63]),
        "+r"(d[64]), "+r"(d[65]), "+r"(d[66]), "+r"(d[67]), "+r"(d[68]), "+r"(d[69]), "+r"(d[70]), "+r"(d[71]),
        "+r"(d[72]), "+r"(d[73]), "+r"(d[74]), "+r"(d[75]), "+r"(d[76]), "+r"(d[77]), "+r"(d[78]), "+r"(d[79]),
        "+r"(d[80]), "+r"(d[81]), "+r"(d[82]), "+r"(d[83]), "+r"(d[84]), "+r"(d[85]), "+r"(d[86]), "+r"(d[87]),
        "+r"(d[88]), "+r"(d[89]), "+r"(d[90]), "+r"(d[91]), "+r"(d[92]), "+r"(d[93]), "+r"(d[94]), "+r"(d[95]),
        "+r"(d[96]), "+r"(d[97]), "+r"(d[98]), "+r"(d[99]), "+r"(d[100]), "+r"(d[101]), "+r"(d[102]), "+r"(d[103]),
        "+r"(d[104]), "+r"(d[105]), "+r"(d[106]), "+r"(d[107]), "+r"(d[108]), "+r"(d[109]), "+r"(d[110]), "+r"(d[111]),
        "+r"(d[112]), "+r"(d[113]), "+r"(d[114]), "+r"(d[115]), "+r"(d[116]), "+r"(d[117]), "+r"(d[118]), "+r"(d[119]),
        "+r"(d[120]), "+r"(d[121]), "+r"(d[122]), "+r"(d[123]), "+r"(d[124]), "+r"(d[125]), "+r"(d[126]), "+r"(d[127])
      : "l"(da), "l"(db), "r"(1)
      : "memory");
}

template <int BN>
__device__ __forceinline__ void wgmma_tile(int32_t (&d)[BN / 2], uint64_t da, uint64_t db) {
  if constexpr (BN == 256) {
    wgmma_m64n256k32(d, da, db);
  } else {
    wgmma_m64n128k32(d, da, db);
  }
}

#endif  // __CUDA_ARCH_FEAT_SM90_ALL

// Writes 1 when this compilation (the one the device runs) holds the wgmma code.
__global__ void wgmma_probe_kernel(int* flag) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  *flag = 1;
#else
  *flag = 0;
#endif
}

template <int BN, int STAGES, EpilogueKind F>
__global__ void __launch_bounds__(kThreads, 1)
    int8_scaled_mm_wgmma_kernel(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_w,
                                ScaledMmArgs args) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using C = WgConfig<BN, STAGES>;
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  __shared__ __align__(8) uint64_t full_bar[STAGES];
  __shared__ __align__(8) uint64_t empty_bar[STAGES];
  const uint32_t ring = (smem_addr(smem_raw) + 1023u) & ~1023u;  // swizzle atoms need 1024-B alignment
  const int M = args.m, N = args.n, K = args.k;

  // Persistent grid: block b computes tiles b, b + gridDim.x, ... Grouped rasterization of the
  // tile index: 8 M-tiles share each W column tile while it is in L2.
  constexpr int kGroupM = 8;
  const int tiles_m = (M + kBM - 1) / kBM;
  const int tiles_n = (N + BN - 1) / BN;
  const int num_tiles = tiles_m * tiles_n;
  auto tile_origin = [&](int pid, int& m0, int& n0) {
    const int in_group = kGroupM * tiles_n;
    const int first_m = (pid / in_group) * kGroupM;
    const int group_m = min(tiles_m - first_m, kGroupM);
    m0 = (first_m + (pid % in_group) % group_m) * kBM;
    n0 = ((pid % in_group) / group_m) * BN;
  };
  const int k_tiles = (K + kBK - 1) / kBK;

  const int warp = threadIdx.x >> 5;
  const int lane = threadIdx.x & 31;
  const int wg = warp >> 2;

  if (threadIdx.x == 0) {
#pragma unroll
    for (int s = 0; s < STAGES; ++s) {
      mbar_init(smem_addr(&full_bar[s]), 1);   // the producer's arrive (+ the TMA bytes)
      mbar_init(smem_addr(&empty_bar[s]), 8);  // one arrive per consumer warp
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
  }
  __syncthreads();

  if (wg == 0) {
    // Producer warpgroup: gives registers away; one thread drives the copy engine.
    setmaxnreg_dec<40>();
    if (threadIdx.x == 0) {
      asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(&map_a)) : "memory");
      asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(&map_w)) : "memory");
      // It runs ahead into the next tile while the consumers are in their epilogue.
      int it = 0;  // stage uses so far: ring slot it % STAGES, its round's parity (it / STAGES) & 1
      for (int tile = blockIdx.x; tile < num_tiles; tile += gridDim.x) {
        int m0, n0;
        tile_origin(tile, m0, n0);
        for (int kt = 0; kt < k_tiles; ++kt, ++it) {
          const int s = it % STAGES;
          const uint32_t phase = (it / STAGES) & 1;
          mbar_wait(smem_addr(&empty_bar[s]), phase ^ 1);  // a fresh barrier passes parity 1 at once
          const uint32_t fb = smem_addr(&full_bar[s]);
          mbar_arrive_expect_tx(fb, C::kStageBytes);  // full boxes, out-of-bounds parts zero-filled
          const uint32_t a_dst = ring + s * C::kStageBytes;
          tma_load_2d(a_dst, &map_a, fb, kt * kBK, m0);
          tma_load_2d(a_dst + C::kABytes, &map_w, fb, kt * kBK, n0);
        }
      }
    }
    return;
  }

  // Consumer warpgroups 1 and 2: rows (wg - 1) * 64 .. + 63 of the tile.
  setmaxnreg_inc<232>();
  const int cw = wg - 1;
  int it = 0;  // the same stage-use count as the producer's
  for (int tile = blockIdx.x; tile < num_tiles; tile += gridDim.x) {
    int m0, n0;
    tile_origin(tile, m0, n0);
    int32_t acc[BN / 2];
#pragma unroll
    for (int i = 0; i < BN / 2; ++i) acc[i] = 0;

    for (int kt = 0; kt < k_tiles; ++kt, ++it) {
      const int s = it % STAGES;
      mbar_wait(smem_addr(&full_bar[s]), (it / STAGES) & 1);
      const uint32_t a_base = ring + s * C::kStageBytes + cw * 64 * kBK;
      const uint32_t b_base = ring + s * C::kStageBytes + C::kABytes;
      const uint64_t da = smem_desc(a_base);
      const uint64_t db = smem_desc(b_base);
      fence_regs(acc);
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < kBK / 32; ++kk) {
        // +32 bytes of K inside the swizzled 128-byte rows: +2 in the descriptor's address field.
        wgmma_tile<BN>(acc, da + 2 * kk, db + 2 * kk);
      }
      wgmma_commit();
      wgmma_wait<1>();  // the group of stage kt-1 has completed: its shared memory may be refilled
      fence_regs(acc);
      if (kt > 0 && lane == 0) mbar_arrive(smem_addr(&empty_bar[(it - 1) % STAGES]));
    }
    wgmma_wait<0>();
    fence_regs(acc);
    if (lane == 0) mbar_arrive(smem_addr(&empty_bar[(it - 1) % STAGES]));  // the tile's last stage

    // Epilogue on registers. Accumulator layout (m64nN): warp w of the warpgroup holds rows
    // 16w + g and 16w + g + 8 (g = lane / 4); acc[4j + 0, 1] = row g, cols 8j + 2t, 8j + 2t + 1
    // (t = lane % 4); acc[4j + 2, 3] = row g + 8, same cols.
    const int g = lane >> 2;
    const int t = lane & 3;
    const int row0 = m0 + cw * 64 + (warp & 3) * 16 + g;
    const bool has_bias = args.bias != nullptr;
    const BiasMode bias_mode = args.bias_mode;
    float sa[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) sa[h] = row0 + 8 * h < M ? args.sa[row0 + 8 * h] : 0.0f;
    // Columns in chunks of 8 n8-blocks: the chunk's scales and bias are loaded before any of its
    // stores. (A load after a store through another pointer cannot be hoisted above it, so a
    // load-compute-store loop over the 32 blocks of BN = 256 waited out one global-load latency
    // per block.)
    constexpr int kChunk = 8;
#pragma unroll
    for (int j0 = 0; j0 < BN / 8; j0 += kChunk) {
      float2 swc[kChunk];
      float2 bc[kChunk];
#pragma unroll
      for (int u = 0; u < kChunk; ++u) {
        const int col = n0 + (j0 + u) * 8 + t * 2;
        const bool in = col < N;  // N is a multiple of 16, so col + 1 < N too
        swc[u] = in ? *reinterpret_cast<const float2*>(args.sw + col) : make_float2(0.0f, 0.0f);
        bc[u] = make_float2(0.0f, 0.0f);
        if (in && has_bias)
          bc[u] = make_float2(formula::bf16_value(args.bias[col]), formula::bf16_value(args.bias[col + 1]));
      }
#pragma unroll
      for (int u = 0; u < kChunk; ++u) {
        const int j = j0 + u;
        const int col = n0 + j * 8 + t * 2;
        if (col >= N) continue;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int row = row0 + 8 * h;
          if (row >= M) continue;
          const int32_t v0 = acc[4 * j + 2 * h];
          const int32_t v1 = acc[4 * j + 2 * h + 1];
          const uint32_t lo = formula::apply<F>(v0, sa[h], swc[u].x, bias_mode, has_bias, bc[u].x);
          const uint32_t hi = formula::apply<F>(v1, sa[h], swc[u].y, bias_mode, has_bias, bc[u].y);
          const int64_t off = static_cast<int64_t>(row) * N + col;
          *reinterpret_cast<uint32_t*>(args.y + off) = lo | (hi << 16);
          if (args.acc != nullptr) *reinterpret_cast<int2*>(args.acc + off) = make_int2(v0, v1);
        }
      }
    }
  }  // tiles
#endif  // __CUDA_ARCH_FEAT_SM90_ALL
}

// ---- host side ----

using EncodeTiledFn = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                   const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                   CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

// Whether the wgmma code runs on the current device; `why` says why not. Decided once per process
// by running the probe kernel (what the device actually loads), then cached.
bool wgmma_runs_here(std::string* why) {
  static std::once_flag once;
  static bool ok = false;
  static std::string reason;
  std::call_once(once, [] {
    int dev = 0;
    cudaDeviceProp prop{};
    if (cudaGetDevice(&dev) != cudaSuccess || cudaGetDeviceProperties(&prop, dev) != cudaSuccess) {
      reason = "no CUDA device";
      return;
    }
    if (prop.major != 9 || prop.minor != 0) {
      reason = "device is sm_" + std::to_string(prop.major * 10 + prop.minor) + ", wgmma code is sm_90a only";
      return;
    }
    int* flag = nullptr;
    if (cudaMalloc(&flag, sizeof(int)) != cudaSuccess) {
      reason = "cudaMalloc failed in the wgmma probe";
      return;
    }
    int host = 0;
    wgmma_probe_kernel<<<1, 1>>>(flag);
    const cudaError_t err = cudaMemcpy(&host, flag, sizeof(int), cudaMemcpyDeviceToHost);
    cudaFree(flag);
    if (err != cudaSuccess) {
      reason = std::string("wgmma probe: ") + cudaGetErrorString(err);
      (void)cudaGetLastError();
      return;
    }
    ok = host == 1;
    if (!ok) reason = "this build has no sm_90a code (configure with -DCMAKE_CUDA_ARCHITECTURES=90a)";
  });
  if (!ok && why != nullptr) *why = reason;
  return ok;
}

EncodeTiledFn encode_tiled(std::string* why) {
  static std::once_flag once;
  static EncodeTiledFn fn = nullptr;
  static std::string reason;
  std::call_once(once, [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult q{};
    const cudaError_t err =
        cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &q);
    if (err != cudaSuccess || q != cudaDriverEntryPointSuccess || p == nullptr) {
      reason = "cuTensorMapEncodeTiled not found in the driver";
      return;
    }
    fn = reinterpret_cast<EncodeTiledFn>(p);
  });
  if (fn == nullptr && why != nullptr) *why = reason;
  return fn;
}

// 2-D map over a [rows, k] int8 row-major matrix; box = 128 bytes of K x box_rows rows, 128-byte
// swizzle (the layout `smem_desc` describes), out-of-bounds elements read as zero.
bool make_map(EncodeTiledFn encode, CUtensorMap* map, const int8_t* ptr, int rows, int k, int box_rows,
              std::string* why) {
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(k), static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(k)};  // bytes between rows
  const cuuint32_t box[2] = {static_cast<cuuint32_t>(kBK), static_cast<cuuint32_t>(box_rows)};
  const cuuint32_t elem_strides[2] = {1, 1};
  const CUresult r = encode(map, CU_TENSOR_MAP_DATA_TYPE_UINT8, 2, const_cast<int8_t*>(ptr), dims, strides, box,
                            elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                            CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) {
    *why = "cuTensorMapEncodeTiled failed with CUresult " + std::to_string(static_cast<int>(r));
    return false;
  }
  return true;
}

template <int BN, int STAGES, EpilogueKind F>
std::string launch_wgmma_config(const ScaledMmArgs& args, cudaStream_t stream) {
  using C = WgConfig<BN, STAGES>;
  std::string why;
  if (!wgmma_runs_here(&why)) return "unavailable: " + why;
  const EncodeTiledFn encode = encode_tiled(&why);
  if (encode == nullptr) return "unavailable: " + why;
  if (reinterpret_cast<uintptr_t>(args.a) % 16 != 0 || reinterpret_cast<uintptr_t>(args.w) % 16 != 0)
    return "unavailable: operands not 16-byte aligned (TMA)";
  CUtensorMap map_a, map_w;
  if (!make_map(encode, &map_a, args.a, args.m, args.k, kBM, &why) ||
      !make_map(encode, &map_w, args.w, args.n, args.k, BN, &why))
    return "error: " + why;
  auto kernel = int8_scaled_mm_wgmma_kernel<BN, STAGES, F>;
  // Raise the dynamic shared-memory limit once per instance (per process; single device).
  static const cudaError_t attr_err =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, C::kSmemBytes);
  if (attr_err != cudaSuccess) return std::string("error: cudaFuncSetAttribute: ") + cudaGetErrorString(attr_err);
  cudaError_t err = cudaSuccess;
  const int tiles = ((args.m + kBM - 1) / kBM) * ((args.n + BN - 1) / BN);
  static const int sms = [] {
    int dev = 0, count = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess)
      return 1;
    return count;
  }();
  const int grid = tiles < sms ? tiles : sms;  // persistent: one block per multiprocessor at most
  kernel<<<grid, kThreads, C::kSmemBytes, stream>>>(map_a, map_w, args);
  err = cudaGetLastError();
  if (err != cudaSuccess) return std::string("error: launch: ") + cudaGetErrorString(err);
  char buf[320];
  std::snprintf(buf, sizeof buf,
                "qc::int8_scaled_mm_wgmma_kernel<BM=%d,BN=%d,stages=%d,%s> wgmma.m64n%dk32.s8 sm_90a, "
                "TMA 128B-swizzle, "
                "1 producer + 2 consumer warpgroups, persistent grid=%d over %d tiles block=%d smem=%d bias=%s",
                kBM, BN, STAGES, formula::kind_name(F), BN, grid, tiles, kThreads, C::kSmemBytes,
                bias_label(args.bias_mode, args.bias != nullptr));
  return buf;
}

template <int BN, int STAGES>
std::string launch_wgmma_tile(const ScaledMmArgs& args, cudaStream_t stream) {
  if (const char* why = launch_formula_error(args.formula, args.bias_mode, args.bias != nullptr))
    return std::string("error: launch_int8_scaled_mm_wgmma: ") + why;
  return formula::visit_kernel_instance(
      args.formula, [&](auto kind) { return launch_wgmma_config<BN, STAGES, decltype(kind)::value>(args, stream); });
}

}  // namespace

std::string launch_int8_scaled_mm_wgmma(const ScaledMmArgs& args, cudaStream_t stream) {
  switch (args.tile) {
    case MmTile::wg128x256: return launch_wgmma_tile<256, 4>(args, stream);
    case MmTile::wg128x128: return launch_wgmma_tile<128, 6>(args, stream);
    default: break;
  }
  return "error: launch_int8_scaled_mm_wgmma: not a wgmma tile";
}

}  // namespace qc::cuda_kernels
