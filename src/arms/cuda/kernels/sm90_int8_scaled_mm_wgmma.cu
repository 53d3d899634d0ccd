// INT8 scaled matrix multiply with the epilogue fused, Hopper `wgmma` + TMA (sm_90a).
//
// Shapes and layouts: a [M,K] int8 row-major, w [N,K] int8 row-major (both K-major: exactly the
// layout the s8 `wgmma` path requires, which has no transpose), sa [M] fp32, sw [N] fp32,
// optional bias [N] bf16; out y [M,N] bf16 row-major and, when asked, acc [M,N] int32 row-major.
// Constraints: M >= 1, N and K multiples of 16 (the TMA global stride K must be a multiple of 16
// bytes), K < 2^17 (every partial sum exact in int32), a and w 16-byte aligned, y and acc 8-byte aligned
// (otherwise "unavailable", and `launch_int8_scaled_mm` runs the mma.sync kernel). Ragged M, N and K tiles:
// TMA fills the out-of-bounds part of each box with zeros, and the epilogue masks rows >= M and cols >= N.
//
// Algorithm: a persistent grid of at most one block per multiprocessor walks BM x BN output tiles
// (grouped rasterization: the tiles of 1024 consecutive rows, QC_WGMMA_GROUP_ROWS, share each W column
// tile while it is in L2) as work items (`WgPlan`, wgmma_work_plan.hpp): whole tiles round robin and,
// with stream-K (single-block tiles only; by default where M >= 2048), parts of the last partial wave's tiles cut
// along K (below); 384 threads = 3 warpgroups.
// Warpgroup 0 is the producer: one thread issues `cp.async.bulk.tensor.2d` (TMA) loads of a
// BM-row A box and a BN-row W box, 128 bytes of K each, into a STAGES-deep ring of shared-memory
// stages in the 128-byte swizzle layout, completing on a `full` mbarrier per stage; it walks the
// block's work items in order, one stage per k-step of each, so stage use number `it` (counted from 0
// over the whole block; an item's first is `WorkItem::it`) sits in ring slot it % STAGES, in round
// it / STAGES of that slot. Warpgroups 1 and 2
// are consumers: per stage each issues `wgmma.mma_async.sync.aligned.m64n{BN}k32.s32.s8.s8` (both
// operands from shared memory through matrix descriptors; four k32 steps, one m64 wgmma per 64 of
// its rows), keeps one wgmma group in flight and releases the stage before it through an `empty`
// mbarrier. `setmaxnreg` moves registers from the producer to the consumers (at most 128 int32
// accumulators per thread). Two schedules (template parameter `Schedule`):
//  - cooperative (MmTile::wg128x256, wg128x128; BM = 128): both consumers work on every tile, each
//    on 64 of its rows (BN/2 accumulators per thread), and so both run the epilogue at the same
//    time; only the producer runs ahead into the next tile meanwhile.
//  - ping-pong (MmTile::wgpp64x256: BM = 64; wgpp128x128: BM = 128, two m64n128 wgmmas per k32
//    step; 128 accumulators per thread either way): each consumer owns whole work items, consumer 0
//    the block's even items (local index i = 0, 2, ...), consumer 1 the odd ones. (Below, "tile i" is
//    the block's work item i.) Their mainloops take
//    turns through two named barriers (ids kTurnBar + c, 256 threads: the owner's 128 `bar.sync`,
//    the other consumer's 128 `bar.arrive`), so one consumer's epilogue runs while the other's
//    wgmmas keep the tensor cores busy.
//  - clusters of 2 blocks along M (template parameter CM = 2; ping-pong MmTile::wgpp64x256_c2,
//    wgpp128x128_c2, cooperative wg128x256_c2): the cluster walks cluster tiles of 2 x BM rows,
//    block rank r the M-tile 2q + r of cluster tile q (entirely past M for the last one when the
//    M-tile count is odd: its A box reads as zeros and its stores are masked). Each block's
//    producer loads its own A box and half of the W box (BN / 2 rows, rank r the rows r BN / 2 ..)
//    multicast into the same stage offset of both blocks, which halves the W traffic out of L2.
// Stream-K (`finish_item`): a work item that is part of a tile stores its int32 partial sums in its slot
// of a per-stream workspace, and the warpgroup counts in (a barrier of the warpgroup alone: named barrier
// kPartBar + c, 128 threads, then one acquire-release atomic, then the barrier again). The part that counts
// in last adds the other slots to its registers and runs the epilogue; the others run none. Nobody waits
// for another part, so the protocol below is unchanged: a work item's stages are used and released as a
// whole tile's are.
// The epilogue runs on the int32 registers, 64 rows at a time, with the same formula text as the
// mma.sync kernel and the CPU emulation (`formula::apply` of include/qconform/epilogue_formula.hpp:
// `__fmul_rn`, `__fmaf_rn` only where declared, bf16 round-to-nearest-even); the formula kind is a
// template parameter, so one instance exists per formula body and tile. Both schedules call the
// same `epilogue_m64`.
//
// Synchronization protocol (parity p(it) = (it / STAGES) & 1 of stage use `it`):
//  - full[s] (count 1): the producer's `arrive.expect_tx` of the stage's bytes, then the two TMA
//    copies' bytes complete phase it / STAGES. The consumer of use `it` waits with parity p(it).
//  - empty[s] (count 8 cooperative = one arrive per consumer warp, both warpgroups read every
//    stage; count 4 ping-pong = the 4 warps of the one warpgroup that owns the stage's tile; with
//    QC_WGMMA_ONE_RELEASE=1 2 and 1, one arrive per warpgroup: `Releaser`, `empty_arrivals`): the
//    consumer arrives for use `it` once the wgmma group reading it has completed (after the
//    `wgmma.wait_group 1` of use it + 1, or the `wait_group 0` after the tile's last use); that
//    completes phase it / STAGES. The producer waits for it before use it + STAGES, with parity
//    p(it + STAGES) ^ 1 (a fresh barrier passes parity 1 at once, so the first round waits for
//    nothing).
//  - A parity wait is exact only while the barrier is at most one phase away from the awaited one.
//    empty: the producer waited for every earlier phase itself. full: the phase after the awaited
//    one needs the waiter's own release first; the phase before it (use it - STAGES) must have
//    completed already, which the cooperative consumers ensure by reading every stage in order.
//    A ping-pong consumer skips the other's uses, and TMA copies may complete out of order, so
//    the turn order is what ensures it: consumer c starts the mainloop of its tile i > 0 with
//    `bar.sync kTurnBar + c, 256`, which completes when the other consumer has finished the
//    mainloop of tile i - 1 (all of its full waits done) and executed `bar.arrive kTurnBar + c, 256`;
//    so every use before tile i has completed its full phase before consumer c waits on any use of
//    tile i, and by induction the mainloops run strictly in tile order. The arrive for tile i is
//    made only when tile i exists (i < the block's tile count) and the sync only for i > 0, so
//    each barrier generation has exactly 128 + 128 threads; the next arrive on the same barrier
//    (for tile i + 2) comes after the mainloop of tile i + 1, which waited for this generation's
//    sync to pass, so generations never mix. The last stage of a tile is released after the turn
//    is handed on (the tail's `wait_group 0`), which waits on nothing else. No deadlock: the
//    earliest unfinished mainloop has its turn, each of its full waits needs only the release of
//    a use at least STAGES >= 2 earlier (done or in a finished mainloop's tail), and epilogues
//    wait on nothing (a stream-K count-in waits only on its own warpgroup's barrier).
//  - Clusters (CM = 2): full[s] of each block expects the whole stage's bytes from its own producer's
//    expect_tx and receives them from three copies: its A box, its own W half and the peer's W half
//    (that multicast may complete before the expect_tx; the phase cannot complete before the
//    arrive). empty[s] counts the arrives of both blocks' consumers of the use (8 ping-pong, 16
//    cooperative): each consumer warp arrives on its own block's empty[s] and, through `mapa`, on
//    the peer's, since the refill of slot s by either producer writes into both blocks (with
//    QC_WGMMA_ONE_RELEASE=1: 2 and 4, one arrive of each warpgroup on each block). Both blocks walk the same
//    tiles, so stage use `it` means the same (tile, k) in both. The peer's copies for use it + STAGES
//    need this block's release of use `it`, so neither barrier gets an arrive or bytes of a phase
//    before the previous phase has completed. The mbarrier inits are published by
//    `fence.mbarrier_init.release.cluster` and a cluster barrier (all threads) before any copy.
//    Exit: a block's consumers wait for every full phase (all bytes landed, the peer's too); its
//    producer thread, after its last load, waits for the last STAGES uses' empty phases (every
//    arrive of the peer's consumers on this block has landed), so no block exits while the peer can
//    still write into its shared memory.
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

#include "formula_pair.cuh"
#include "wgmma_work_plan.hpp"

#include <cuda.h>  // CUtensorMap and cuTensorMapEncodeTiled's types (the function comes from the runtime)

#include <algorithm>
#include <cstdio>
#include <map>
#include <mutex>
#include <utility>

#include "core/env_setting.hpp"


namespace qc::cuda_kernels {
namespace {

constexpr int kBK = 128;       // bytes of K per stage: one 128-byte swizzle row
constexpr int kThreads = 384;  // producer warpgroup + two consumer warpgroups
constexpr int kConsumerThreads = 256;  // the two consumer warpgroups: a turn barrier's thread count
constexpr int kTurnBar = 1;    // named barrier kTurnBar + c: ping-pong consumer c's mainloop turn (0 is __syncthreads)
constexpr int kPartBar = 3;    // named barrier kPartBar + c: consumer warpgroup c alone (stream-K's count-in)
constexpr int kWgThreads = 128;

// How the two consumer warpgroups share the work (see the header).
enum class Schedule { cooperative, pingpong };

template <Schedule S, int BM, int BN, int STAGES, int CM>
struct WgConfig {
  static constexpr bool kPingpong = S == Schedule::pingpong;
  static constexpr int kCluster = CM;        // blocks per cluster along M: they share each W box
  static constexpr int kWBoxRows = BN / CM;  // rows of the W box this block loads (multicast when CM = 2)
  static constexpr int kWgRows = kPingpong ? BM : BM / 2;  // rows of one consumer warpgroup's accumulators
  static constexpr int kMBlocks = kWgRows / 64;            // m64 wgmmas per k32 step
  static constexpr int kABytes = BM * kBK;
  static constexpr int kBBytes = BN * kBK;
  static constexpr int kStageBytes = kABytes + kBBytes;
  static constexpr int kSmemBytes = STAGES * kStageBytes + 1024;  // + slack to align the ring to 1024 B
  // Arrivals that release a stage: one per warp of the stage's consumers, in each block of the cluster;
  // one per consumer warpgroup with WgPlan::one_release.
  __host__ __device__ static constexpr uint32_t empty_arrivals(bool one_release) { return (one_release ? 1 : 4) * (kPingpong ? 1 : 2) * CM; }
  static_assert(BN == 128 || BN == 256, "wgmma n of the instance");
  static_assert(kPingpong ? (BM == 64 || BM == 128) : BM == 128, "tile rows of the schedule");
  static_assert(kMBlocks * BN / 2 <= 128, "accumulators per thread within the consumers' register budget");
  static_assert(STAGES >= 2, "a stage is released one stage late");
  static_assert(CM == 1 || CM == 2, "cluster size along M");
  static_assert(kSmemBytes + 1024 <= 227 * 1024, "shared memory per block (+ the static barriers' 1 KB)");
  // Stream-K partial sums: the tile's accumulators in parts of one consumer warpgroup each (the
  // whole tile for ping-pong, 64 rows for cooperative), kRegs int32 per thread of a part.
  static constexpr int kParts = kPingpong ? 1 : 2;
  static constexpr int kRegs = kMBlocks * BN / 2;
  static_assert(kParts * kRegs * 128 == BM * BN, "a tile's parts hold its BM x BN sums (the workspace's slot size)");
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
// Arrive on the mbarrier at shared::cluster address `bar` (another block's, from `mapa`). Default
// (.release.cta) semantics, as CUTLASS's ClusterBarrier::arrive: what it orders is the completion of
// this block's wgmma reads (wgmma.wait_group) before the peer's TMA refill. (`.release.cluster`
// compiled to MEMBAR.ALL.GPU + ERRBAR + CCTL.IVALL per release, and the cluster tiles ran 1.4 to
// 1.7x slower than without a cluster, H100.)
__device__ __forceinline__ void mbar_arrive_cluster(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cluster.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
// The shared::cluster address of the variable at `addr` (a shared::cta address) in block `rank` of the cluster.
__device__ __forceinline__ uint32_t mapa_shared(uint32_t addr, uint32_t rank) {
  uint32_t out;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(out) : "r"(addr), "r"(rank));
  return out;
}
__device__ __forceinline__ uint32_t cluster_ctarank() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
  return r;
}
// Every thread of every block of the cluster (release/acquire: mbarrier inits are visible after).
__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}
// TMA: box at (c0 = K byte offset, c1 = row) of the tensor map into shared memory at `dst`.
__device__ __forceinline__ void tma_load_2d(uint32_t dst, const CUtensorMap* map, uint32_t bar, int c0, int c1) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n" ::"r"(
          dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(bar)
      : "memory");
}

// The same box into shared memory at offset `dst` of every block in `cta_mask` of the cluster; each
// destination block's mbarrier at offset `bar` receives the bytes that land in that block.
__device__ __forceinline__ void tma_load_2d_multicast(uint32_t dst, const CUtensorMap* map, uint32_t bar, int c0,
                                                      int c1, uint16_t cta_mask) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster [%0], [%1, {%2, "
      "%3}], [%4], %5;\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(bar), "h"(cta_mask)
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

// Named barrier `id` over `threads` threads (a multiple of 32, whole warps): `sync` counts the
// calling warp's threads and waits for the barrier to complete, `arrive` only counts them.
__device__ __forceinline__ void named_bar_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void named_bar_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
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

// Which threads of a consumer warpgroup release its stages: on this block's empty barrier (`local`) and, in
// a cluster, on the peer block's (`peer`: its producer multicast half of the slot's W box here). By default
// lane 0 of each warp does both; with WgPlan::one_release lane 0 of the warpgroup's first warp arrives here
// and of its second warp on the peer, as CUTLASS's PipelineTmaAsync spreads one arrival per consumer
// warpgroup and block: the wgmma group is the warpgroup's, so one warp past its `wait_group` means the
// group's shared-memory reads are done for all four.
struct Releaser {
  bool local, peer;
};
__device__ __forceinline__ Releaser releaser(bool one_release, int cluster, int warp, int lane) {
  const int w = warp & 3;
  return Releaser{lane == 0 && (!one_release || w == 0), cluster > 1 && lane == 0 && (!one_release || w == 1)};
}

// Release of stage slot `s` by the threads `r` names. `peer_empty0` is the peer's empty_bar[0] as a
// shared::cluster address (unused when CM = 1).
template <class C>
__device__ __forceinline__ void release_stage(uint32_t empty0, uint32_t peer_empty0, int s, Releaser r) {
  if (r.local) mbar_arrive(empty0 + 8 * s);
  if constexpr (C::kCluster > 1) {
    if (r.peer) mbar_arrive_cluster(peer_empty0 + 8 * s);
  }
}

// One consumer warpgroup's mainloop over one tile: k_tiles stages from stage use `it`; per stage
// and k32 step one m64 wgmma per 64 rows (the A rows at `a_off` bytes into the stage's A box, then
// every 64 rows 64 x 128 bytes further), all against the stage's whole W box. Zeroes `acc` first.
// Returns with the last stage's wgmma group still in flight and every other stage released.
template <class C, int BN, int STAGES>
__device__ __forceinline__ void mma_mainloop(int32_t (&acc)[C::kMBlocks][BN / 2], int it, int k_tiles, uint32_t ring,
                                             uint32_t a_off, uint32_t full0, uint32_t empty0, uint32_t peer_empty0,
                                             Releaser rel) {
#pragma unroll
  for (int h = 0; h < C::kMBlocks; ++h)
#pragma unroll
    for (int i = 0; i < BN / 2; ++i) acc[h][i] = 0;

  for (int kt = 0; kt < k_tiles; ++kt, ++it) {
    const int s = it % STAGES;
    mbar_wait(full0 + 8 * s, (it / STAGES) & 1);
    const uint32_t a_base = ring + s * C::kStageBytes + a_off;
    const uint32_t b_base = ring + s * C::kStageBytes + C::kABytes;
    const uint64_t db = smem_desc(b_base);
#pragma unroll
    for (int h = 0; h < C::kMBlocks; ++h) fence_regs(acc[h]);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kBK / 32; ++kk) {
#pragma unroll
      for (int h = 0; h < C::kMBlocks; ++h) {
        // +32 bytes of K inside the swizzled 128-byte rows: +2 in the descriptor's address field.
        const uint64_t da = smem_desc(a_base + h * 64 * kBK);
        wgmma_tile<BN>(acc[h], da + 2 * kk, db + 2 * kk);
      }
    }
    wgmma_commit();
    wgmma_wait<1>();  // the group of stage kt-1 has completed: its shared memory may be refilled
#pragma unroll
    for (int h = 0; h < C::kMBlocks; ++h) fence_regs(acc[h]);
    if (kt > 0) release_stage<C>(empty0, peer_empty0, (it - 1) % STAGES, rel);
  }
}

// After `mma_mainloop` ended at stage use `it_end` (exclusive): waits for the last wgmma group and
// releases its stage.
template <class C, int BN, int STAGES>
__device__ __forceinline__ void mma_tail(int32_t (&acc)[C::kMBlocks][BN / 2], int it_end, uint32_t empty0,
                                         uint32_t peer_empty0, Releaser rel) {
  wgmma_wait<0>();
#pragma unroll
  for (int h = 0; h < C::kMBlocks; ++h) fence_regs(acc[h]);
  release_stage<C>(empty0, peer_empty0, (it_end - 1) % STAGES, rel);  // the tile's last stage
}

// The four lanes of a quad (lane % 4 = t) each hold one 32-bit word of two adjacent bf16 outputs of
// one row in each of two adjacent n8 blocks: `p0` cols 2t, 2t + 1 of the first block, `p1` those of the
// second (16 columns, 32 bytes of the row in all). Returns the 8 bytes of cols 4t .. 4t + 3 for lane t,
// low word first, so that the quad stores the row's 32 bytes as one full sector (one 8-byte store per
// lane instead of two 4-byte stores that each fill half a sector). Two exchanges: across lanes t ^ 2
// (lanes 0, 1 keep their first block's word and send the second, lanes 2, 3 the other way round), then
// across t ^ 1. Every lane of the warp must call it (full-warp shuffles).
__device__ __forceinline__ uint2 quad_row_words(uint32_t p0, uint32_t p1, int t) {
  const bool low = t < 2;
  const uint32_t keep = low ? p0 : p1;
  const uint32_t recv = __shfl_xor_sync(0xFFFFFFFFu, low ? p1 : p0, 2);
  // (keep, recv) in columns of the 16: lane 0 (0-1, 4-5), lane 1 (2-3, 6-7), lane 2 (12-13, 8-9), lane 3 (14-15, 10-11).
  // Lanes 0 and 3 send recv, 1 and 2 keep; each ends with its 4 columns as (rest, got), odd lanes (got, rest).
  const bool send_recv = t == 0 || t == 3;
  const uint32_t got = __shfl_xor_sync(0xFFFFFFFFu, send_recv ? recv : keep, 1);
  const uint32_t rest = send_recv ? keep : recv;
  return (t & 1) ? make_uint2(got, rest) : make_uint2(rest, got);
}

// Epilogue on registers of one m64 x BN accumulator block whose first row is `row_base`.
// Accumulator layout (m64nN): warp w of the warpgroup holds rows 16w + g and 16w + g + 8
// (g = lane / 4); acc[4j + 0, 1] = row g, cols 8j + 2t, 8j + 2t + 1 (t = lane % 4);
// acc[4j + 2, 3] = row g + 8, same cols. The bf16 outputs of two adjacent n8 blocks are regrouped in
// the quad (`quad_row_words`) and stored 8 bytes a lane: full 32-byte sectors.
template <int BN, EpilogueKind F>
__device__ __forceinline__ void epilogue_m64(const int32_t (&acc)[BN / 2], const ScaledMmArgs& args, int row_base,
                                             int n0, int warp, int lane) {
  const int M = args.m, N = args.n;
  const int g = lane >> 2;
  const int t = lane & 3;
  const int row0 = row_base + (warp & 3) * 16 + g;
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
    for (int u = 0; u < kChunk; u += 2) {
      const int j = j0 + u;  // even: blocks j and j + 1 are the 16 columns from span (a multiple of 16)
      const int span = n0 + j * 8;
      if (span >= N) continue;  // the same for the whole warp; N is a multiple of 16, so the span is in whole
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int row = row0 + 8 * h;
        uint32_t p[2];
#pragma unroll
        for (int b = 0; b < 2; ++b) {
          p[b] = formula_pair::apply<F>(acc[4 * (j + b) + 2 * h], acc[4 * (j + b) + 2 * h + 1], sa[h], sa[h],
                                        swc[u + b].x, swc[u + b].y, bias_mode, has_bias, bc[u + b].x, bc[u + b].y);
        }
        const uint2 words = quad_row_words(p[0], p[1], t);
        if (row >= M) continue;
        const int64_t off = static_cast<int64_t>(row) * N + span;
        *reinterpret_cast<uint2*>(args.y + off + 4 * t) = words;
        if (args.acc != nullptr) {
#pragma unroll
          for (int b = 0; b < 2; ++b) {
            *reinterpret_cast<int2*>(args.acc + off + 8 * b + 2 * t) =
                make_int2(acc[4 * (j + b) + 2 * h], acc[4 * (j + b) + 2 * h + 1]);
          }
        }
      }
    }
  }
}


// Before a work item's mainloop (WgPlan::prefetch): one warp of the consumer warpgroup asks L1 for the
// 128-byte lines of the epilogue's operands that the item's rows [row0, row0 + rows) and columns
// [n0, n0 + BN) will read (the column scales, the bias, the row scales), so that the epilogue after the
// mainloop finds them there instead of waiting on L2 (in the cooperative schedule no wgmma runs while
// both consumers are in the epilogue).
template <int BN>
__device__ __forceinline__ void prefetch_epilogue_operands(const ScaledMmArgs& args, int row0, int rows, int n0,
                                                           int warp, int lane) {
  if ((warp & 3) != 0) return;
  constexpr int kSwLines = BN * 4 / 128, kBiasLines = BN * 2 / 128;
  const void* p = nullptr;
  if (lane < kSwLines) {
    const int col = n0 + lane * 32;
    if (col < args.n) p = args.sw + col;
  } else if (lane < kSwLines + kBiasLines) {
    const int col = n0 + (lane - kSwLines) * 64;
    if (args.bias != nullptr && col < args.n) p = args.bias + col;
  } else if (lane < kSwLines + kBiasLines + rows / 32) {
    const int row = row0 + (lane - kSwLines - kBiasLines) * 32;
    if (row < args.m) p = args.sa + row;
  }
  if (p != nullptr) asm volatile("prefetch.global.L1 [%0];\n" ::"l"(p));
}

// atomicAdd with release and acquire semantics at GPU scope: the count-in publishes the warpgroup's
// partial sums (ordered before it by the warpgroup's barrier: release is cumulative) and, for the last
// part, orders the reads of the others' after it (through the barrier after it).
__device__ __forceinline__ int atomic_add_acq_rel(int* p, int v) {
  int old;
  asm volatile("atom.acq_rel.gpu.global.add.s32 %0, [%1], %2;\n" : "=r"(old) : "l"(p), "r"(v) : "memory");
  return old;
}

// The end of a work item for one consumer warpgroup, `part` of the tile (its kMBlocks m64 blocks from
// row `rows`): a whole tile's epilogue; for part of a tail tile (stream-K, `WgPlan`), the partial sums
// stored in the unit's slot and counted in, and, by the part that counts in last, the other slots'
// partial sums added to its own and the epilogue. `last` is this warpgroup's flag in shared memory.
// The count-in is CUTLASS's stream-K barrier pattern (cutlass/barrier.h: `arrive_inc`, `wait_eq`): every
// thread's stores, the warpgroup's barrier, then one thread's acquire-release atomic at GPU scope, and the
// barrier again before the last part's reads (L2: `ld.global.cg`). No per-thread `__threadfence()`: it
// compiles to MEMBAR.SC.GPU, and with it the fix-up measured several microseconds a part (fifteenth session).
template <class C, int BN, EpilogueKind F>
__device__ __forceinline__ void finish_item(int32_t (&acc)[C::kMBlocks][BN / 2], const WorkItem& w, const WgPlan& plan,
                                            int part, int cw, const ScaledMmArgs& args, int rows, int n0, int warp,
                                            int lane, volatile int* last) {
  if (C::kCluster == 1 && (w.k0 != 0 || w.k1 != plan.k_tiles)) {  // clusters have no tail items (plan_work)
    const int tid = static_cast<int>(threadIdx.x) % kWgThreads;
    constexpr size_t kPartInts = size_t{C::kRegs} * kWgThreads;
    const auto part_base = [&](int slot) {
      return reinterpret_cast<int4*>(plan.sk_work +
                                     ((static_cast<size_t>(w.sk) * plan.sk_parts + slot) * C::kParts + part) * kPartInts);
    };
    int4* const mine = part_base(w.slot);
#pragma unroll
    for (int h = 0; h < C::kMBlocks; ++h)
#pragma unroll
      for (int i = 0; i < BN / 2; i += 4)
        mine[((h * BN / 2 + i) / 4) * kWgThreads + tid] = make_int4(acc[h][i], acc[h][i + 1], acc[h][i + 2], acc[h][i + 3]);
    named_bar_sync(kPartBar + cw, kWgThreads);
    int* const count = plan.sk_count + w.sk * C::kParts + part;
    if (tid == 0) *last = atomic_add_acq_rel(count, 1) == w.contributors - 1;
    named_bar_sync(kPartBar + cw, kWgThreads);
    if (!*last) return;
    for (int slot = 0; slot < w.contributors; ++slot) {
      if (slot == w.slot) continue;
      const int4* const other = part_base(slot);
#pragma unroll
      for (int h = 0; h < C::kMBlocks; ++h)
#pragma unroll
        for (int i = 0; i < BN / 2; i += 4) {
          const int4 v = __ldcg(other + ((h * BN / 2 + i) / 4) * kWgThreads + tid);
          acc[h][i] += v.x, acc[h][i + 1] += v.y, acc[h][i + 2] += v.z, acc[h][i + 3] += v.w;
        }
    }
    if (tid == 0) *count = 0;  // every part has counted in: zero again for the next launch on this stream
  }
#pragma unroll
  for (int h = 0; h < C::kMBlocks; ++h) epilogue_m64<BN, F>(acc[h], args, rows + h * 64, n0, warp, lane);
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

template <Schedule S, int BM, int BN, int STAGES, int CM, EpilogueKind F>
__global__ void __launch_bounds__(kThreads, 1)
    int8_scaled_mm_wgmma_kernel(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_w,
                                ScaledMmArgs args, WgPlan plan) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using C = WgConfig<S, BM, BN, STAGES, CM>;
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  __shared__ __align__(8) uint64_t full_bar[STAGES];
  __shared__ __align__(8) uint64_t empty_bar[STAGES];
  __shared__ int sk_last[2];  // per consumer warpgroup: it counted in last for a tail tile (finish_item)
  const uint32_t ring = (smem_addr(smem_raw) + 1023u) & ~1023u;  // swizzle atoms need 1024-B alignment
  const uint32_t full0 = smem_addr(&full_bar[0]);    // full_bar[s] at full0 + 8 s
  const uint32_t empty0 = smem_addr(&empty_bar[0]);  // empty_bar[s] at empty0 + 8 s
  const int M = args.m, N = args.n;  // K: plan.k_tiles steps of kBK bytes

  // Cluster of CM blocks along M (consecutive block indices): rank r computes the M-tile CM q + r of
  // the cluster's tile q, so the cluster's blocks share each W box. CM = 1: the block is the unit.
  const uint32_t rank = CM > 1 ? cluster_ctarank() : 0;
  const uint32_t peer_empty0 = CM > 1 ? mapa_shared(empty0, rank ^ 1) : 0;
  const int unit = static_cast<int>(blockIdx.x) / CM;
  const int units = static_cast<int>(gridDim.x) / CM;

  // Persistent grid: unit u computes its work items (`WgPlan`: the (cluster) tiles u, u + units, ...,
  // then its share of a stream-K tail). Grouped rasterization of the tile index: groups of 1024 rows
  // share each W column tile while it is in L2 (plan.group_units).
  const int group = plan.group_units;  // (cluster) M-tiles per group
  const int tiles_m = (M + CM * BM - 1) / (CM * BM);
  const int tiles_n = (N + BN - 1) / BN;
  auto tile_origin = [&](int pid, int& m0, int& n0) {
    const int in_group = group * tiles_n;
    const int first_m = (pid / in_group) * group;
    const int group_m = min(tiles_m - first_m, group);
    m0 = ((first_m + (pid % in_group) % group_m) * CM + static_cast<int>(rank)) * BM;  // may be >= M when CM > 1
    n0 = ((pid % in_group) / group_m) * BN;
  };

  const int warp = threadIdx.x >> 5;
  const int lane = threadIdx.x & 31;
  const int wg = warp >> 2;

  if (threadIdx.x == 0) {
#pragma unroll
    for (int s = 0; s < STAGES; ++s) {
      mbar_init(full0 + 8 * s, 1);                    // the producer's arrive (+ the TMA bytes)
      mbar_init(empty0 + 8 * s, C::empty_arrivals(plan.one_release != 0));  // the stage's releasing consumers
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
  }
  if constexpr (CM > 1) {
    cluster_sync();  // the peer's barriers are initialized before anyone multicasts or arrives there
  } else {
    __syncthreads();
  }

  if (wg == 0) {
    // Producer warpgroup: gives registers away; one thread drives the copy engine.
    setmaxnreg_dec<40>();
    if (threadIdx.x == 0) {
      asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(&map_a)) : "memory");
      asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(&map_w)) : "memory");
      // It runs ahead into the next tile while the consumers are in their epilogue.
      int it = 0;  // stage uses so far: ring slot it % STAGES, its round's parity (it / STAGES) & 1
      const int items = work_items(plan, unit, units);
      for (int i = 0; i < items; ++i) {
        const WorkItem w = work_item(plan, unit, units, i);
        int m0, n0;
        tile_origin(w.tile, m0, n0);
        for (int kt = w.k0; kt < w.k1; ++kt, ++it) {
          const int s = it % STAGES;
          const uint32_t phase = (it / STAGES) & 1;
          mbar_wait(empty0 + 8 * s, phase ^ 1);  // a fresh barrier passes parity 1 at once
          const uint32_t fb = full0 + 8 * s;
          // Full boxes, out-of-bounds parts zero-filled; in a cluster the W box arrives in CM parts,
          // this block's own and the peer's multicast (which may land before this expect_tx).
          mbar_arrive_expect_tx(fb, C::kStageBytes);
          const uint32_t a_dst = ring + s * C::kStageBytes;
          tma_load_2d(a_dst, &map_a, fb, kt * kBK, m0);
          if constexpr (CM == 1) {
            tma_load_2d(a_dst + C::kABytes, &map_w, fb, kt * kBK, n0);
          } else {
            const int part = static_cast<int>(rank) * C::kWBoxRows;  // this block's rows of the W box
            tma_load_2d_multicast(a_dst + C::kABytes + part * kBK, &map_w, fb, kt * kBK, n0 + part,
                                  static_cast<uint16_t>((1u << CM) - 1));
          }
        }
      }
      if constexpr (CM > 1) {
        // Wait until every stage use of the block has been released by both blocks' consumers: the
        // peer's last arrives on this block's barriers have landed, so the block may exit.
        for (int j = 0; j < STAGES; ++j, ++it) mbar_wait(empty0 + 8 * (it % STAGES), ((it / STAGES) & 1) ^ 1);
      }
    }
    return;
  }

  setmaxnreg_inc<232>();
  const int cw = wg - 1;  // consumer 0 or 1
  const Releaser rel = releaser(plan.one_release != 0, CM, warp, lane);
  if constexpr (!C::kPingpong) {
    // Cooperative: consumer cw computes rows cw * 64 .. + 63 of every work item of the block.
    const int items = work_items(plan, unit, units);
    for (int i = 0; i < items; ++i) {
      const WorkItem w = work_item(plan, unit, units, i);  // w.it: the same stage-use count as the producer's
      int m0, n0;
      tile_origin(w.tile, m0, n0);
      int32_t acc[C::kMBlocks][BN / 2];
      if (plan.prefetch) prefetch_epilogue_operands<BN>(args, m0 + cw * 64, 64, n0, warp, lane);
      mma_mainloop<C, BN, STAGES>(acc, w.it, w.k1 - w.k0, ring, cw * 64 * kBK, full0, empty0, peer_empty0, rel);
      mma_tail<C, BN, STAGES>(acc, w.it + (w.k1 - w.k0), empty0, peer_empty0, rel);
      finish_item<C, BN, F>(acc, w, plan, cw, cw, args, m0 + cw * 64, n0, warp, lane, &sk_last[cw]);
    }
  } else {
    // Ping-pong: consumer cw computes the block's work items of local index i = cw, cw + 2, ...;
    // their stage uses are w.it .. + (w.k1 - w.k0) - 1. Mainloops take turns in item order.
    const int items = work_items(plan, unit, units);  // >= 1: at most plan.tiles units
    for (int i = cw; i < items; i += 2) {
      const WorkItem w = work_item(plan, unit, units, i);
      int m0, n0;
      tile_origin(w.tile, m0, n0);
      int32_t acc[C::kMBlocks][BN / 2];
      if (plan.prefetch) prefetch_epilogue_operands<BN>(args, m0, BM, n0, warp, lane);
      if (i > 0) named_bar_sync(kTurnBar + cw, kConsumerThreads);  // item i - 1's mainloop has ended
      mma_mainloop<C, BN, STAGES>(acc, w.it, w.k1 - w.k0, ring, 0, full0, empty0, peer_empty0, rel);
      if (i + 1 < items) named_bar_arrive(kTurnBar + (cw ^ 1), kConsumerThreads);  // item i + 1's turn
      mma_tail<C, BN, STAGES>(acc, w.it + (w.k1 - w.k0), empty0, peer_empty0, rel);
      finish_item<C, BN, F>(acc, w, plan, 0, cw, args, m0, n0, warp, lane, &sk_last[cw]);
    }
  }
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

// Stream-K's device workspace, one per (device, stream): launches on one stream run one after the
// other, launches on two streams may run at once. Grown when a launch needs more (after the stream's
// earlier work has finished); zeroed when allocated, and every launch leaves its counters zero. The key
// assumes a stream handle names one stream while its launches run: the per-thread default stream does
// not (one handle for every thread's stream; stream-K is not used on it), nor would a destroyed stream's
// handle reused by a new one with the old one's launch still pending (the pipeline's streams live for the
// whole run). At most kSkSpaces workspaces are kept: past that, the device is synchronized and the others
// freed (each new stream handle would otherwise keep its workspace to the end of the process).
constexpr size_t kSkSpaces = 8;
std::string sk_workspace(cudaStream_t stream, size_t bytes, void** out) {
  static std::mutex mu;
  static std::map<std::pair<int, cudaStream_t>, std::pair<void*, size_t>> spaces;
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) return "cudaGetDevice failed";
  std::lock_guard<std::mutex> lock(mu);
  const std::pair<int, cudaStream_t> key{dev, stream};
  if (spaces.find(key) == spaces.end() && spaces.size() >= kSkSpaces) {
    if (cudaDeviceSynchronize() != cudaSuccess) return "cudaDeviceSynchronize failed";
    for (auto& [k, space] : spaces) {
      if (k.first != dev) continue;
      cudaFree(space.first);
      space = {nullptr, 0};
    }
  }
  auto& [ptr, size] = spaces[key];
  if (size < bytes) {
    if (ptr != nullptr) {
      if (cudaStreamSynchronize(stream) != cudaSuccess || cudaFree(ptr) != cudaSuccess) return "freeing the old workspace failed";
      ptr = nullptr, size = 0;
    }
    if (cudaMalloc(&ptr, bytes) != cudaSuccess) {
      (void)cudaGetLastError();
      ptr = nullptr;
      return "cudaMalloc of " + std::to_string(bytes) + " bytes failed";
    }
    if (cudaMemsetAsync(ptr, 0, bytes, stream) != cudaSuccess) {
      cudaFree(ptr);
      ptr = nullptr;
      return "cudaMemsetAsync failed";
    }
    size = bytes;
  }
  *out = ptr;
  return "";
}

template <Schedule S, int BM, int BN, int STAGES, int CM, EpilogueKind F>
std::string launch_wgmma_config(const ScaledMmArgs& args, cudaStream_t stream) {
  using C = WgConfig<S, BM, BN, STAGES, CM>;
  std::string why;
  if (!wgmma_runs_here(&why)) return "unavailable: " + why;
  const EncodeTiledFn encode = encode_tiled(&why);
  if (encode == nullptr) return "unavailable: " + why;
  if (reinterpret_cast<uintptr_t>(args.a) % 16 != 0 || reinterpret_cast<uintptr_t>(args.w) % 16 != 0)
    return "unavailable: operands not 16-byte aligned (TMA)";
  if (reinterpret_cast<uintptr_t>(args.y) % 8 != 0 || (args.acc != nullptr && reinterpret_cast<uintptr_t>(args.acc) % 8 != 0))
    return "unavailable: outputs not 8-byte aligned (the epilogue's 8-byte stores)";
  CUtensorMap map_a, map_w;
  if (!make_map(encode, &map_a, args.a, args.m, args.k, BM, &why) ||
      !make_map(encode, &map_w, args.w, args.n, args.k, C::kWBoxRows, &why))
    return "error: " + why;
  auto kernel = int8_scaled_mm_wgmma_kernel<S, BM, BN, STAGES, CM, F>;
  // Raise the dynamic shared-memory limit once per instance (per process; single device).
  static const cudaError_t attr_err =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, C::kSmemBytes);
  if (attr_err != cudaSuccess) return std::string("error: cudaFuncSetAttribute: ") + cudaGetErrorString(attr_err);
  // Units (blocks, or clusters of CM blocks) resident at once: the persistent grid's size at most.
  static const int max_units = [&]() -> int {
    int dev = 0, count = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess)
      return 1;
    if constexpr (CM == 1) {
      return count;
    } else {
      cudaLaunchConfig_t cfg{};
      cudaLaunchAttribute attr{};
      attr.id = cudaLaunchAttributeClusterDimension;
      attr.val.clusterDim.x = CM, attr.val.clusterDim.y = 1, attr.val.clusterDim.z = 1;
      cfg.gridDim = dim3(static_cast<unsigned>(count / CM * CM));
      cfg.blockDim = dim3(kThreads);
      cfg.dynamicSmemBytes = C::kSmemBytes;
      cfg.attrs = &attr, cfg.numAttrs = 1;
      int clusters = 0;
      if (cudaOccupancyMaxActiveClusters(&clusters, kernel, &cfg) != cudaSuccess || clusters < 1) {
        (void)cudaGetLastError();
        return count / CM;  // one block per multiprocessor, rounded down to whole clusters
      }
      return clusters;
    }
  }();
  const int tiles_m = (args.m + CM * BM - 1) / (CM * BM);
  const int tiles = tiles_m * ((args.n + BN - 1) / BN);  // cluster tiles when CM > 1
  const int units = tiles < max_units ? tiles : max_units;  // persistent: one block per multiprocessor at most
  const int grid = units * CM;
  // Stream-K over the tail (`streamk_allowed`: by default where M >= 2048, measured at 8192^3 +1.8-2.4 %;
  // verify's M = 512 layers it would cut are not timed; docs/gpu.md).
  WgPlan plan = plan_work(tiles, (args.k + kBK - 1) / kBK, units, C::kParts,
                          streamk_allowed(env_int("QC_WGMMA_STREAMK", -1, 0, 1), args.m, CM, stream == cudaStreamPerThread));
  // Measurement settings (docs/gpu.md); named in the kernel string only when not at their defaults.
  // Raster groups in (cluster) M-tiles, at most all of them (the same order; group x tiles_n stays an int).
  const auto group_units = [&](int rows) { return std::max(1, std::min(rows / (CM * BM), tiles_m)); };
  plan.group_units = group_units(env_int("QC_WGMMA_GROUP_ROWS", 1024, CM * BM, 1 << 20));
  plan.prefetch = env_int("QC_WGMMA_PREFETCH", 0, 0, 1);
  plan.one_release = env_int("QC_WGMMA_ONE_RELEASE", 0, 0, 1);
  char settings_note[256] = "";
  int note_len = 0;
  if (plan.group_units != group_units(1024))
    note_len += std::snprintf(settings_note + note_len, sizeof settings_note - note_len, ", raster groups of %d rows",
                              plan.group_units * CM * BM);
  if (plan.prefetch)
    note_len += std::snprintf(settings_note + note_len, sizeof settings_note - note_len, ", epilogue operands prefetched to L1");
  if (plan.one_release)
    note_len += std::snprintf(settings_note + note_len, sizeof settings_note - note_len,
                              ", stages released once per consumer warpgroup");
  if (plan.sk_units > 0) {
    const int tail = tiles - plan.dp_tiles;
    const size_t slot_bytes = size_t{4} * BM * BN * static_cast<size_t>(tail) * plan.sk_parts;
    void* space = nullptr;
    const std::string ws = sk_workspace(stream, kSkCountBytes + slot_bytes, &space);
    if (!ws.empty()) return "error: stream-K workspace: " + ws;
    plan.sk_count = static_cast<int*>(space);
    plan.sk_work = reinterpret_cast<int32_t*>(static_cast<char*>(space) + kSkCountBytes);
    // A test's setting (QC_WGMMA_SK_POISON=1): the slots filled with 0xA5 bytes before the launch, so that a
    // part that read a slot before its writer's sums landed would add garbage, not an earlier launch's
    // equal sums (the GPU tests run the same operands again and again).
    if (env_int("QC_WGMMA_SK_POISON", 0, 0, 1) == 1 && cudaMemsetAsync(plan.sk_work, 0xA5, slot_bytes, stream) != cudaSuccess)
      return "error: stream-K workspace: cudaMemsetAsync failed";
    std::snprintf(settings_note + note_len, sizeof settings_note - note_len,
                  ", stream-K tail: %d tiles in %d parts of %d-%d k-steps over %d units", tail, plan.sk_parts,
                  plan.k_tiles / plan.sk_parts, (plan.k_tiles + plan.sk_parts - 1) / plan.sk_parts, plan.sk_units);
  }
  cudaError_t err = cudaSuccess;
  if constexpr (CM == 1) {
    kernel<<<grid, kThreads, C::kSmemBytes, stream>>>(map_a, map_w, args, plan);
    err = cudaGetLastError();
  } else {
    cudaLaunchConfig_t cfg{};
    cudaLaunchAttribute attr{};
    attr.id = cudaLaunchAttributeClusterDimension;
    attr.val.clusterDim.x = CM, attr.val.clusterDim.y = 1, attr.val.clusterDim.z = 1;
    cfg.gridDim = dim3(static_cast<unsigned>(grid));
    cfg.blockDim = dim3(kThreads);
    cfg.dynamicSmemBytes = C::kSmemBytes;
    cfg.stream = stream;
    cfg.attrs = &attr, cfg.numAttrs = 1;
    err = cudaLaunchKernelEx(&cfg, kernel, map_a, map_w, args, plan);
  }
  if (err != cudaSuccess) return std::string("error: launch: ") + cudaGetErrorString(err);
  char buf[720];
  if constexpr (C::kPingpong) {
    std::snprintf(buf, sizeof buf,
                  "qc::int8_scaled_mm_wgmma_kernel<pingpong,BM=%d,BN=%d,stages=%d,cluster=%dx1,%s> wgmma.m64n%dk32.s8 "
                  "sm_90a, TMA 128B-swizzle%s, "
                  "1 producer + 2 ping-pong consumer warpgroups (a %dx%d tile each, mainloops in turn), "
                  "persistent grid=%d over %d tiles%s block=%d smem=%d bias=%s",
                  BM, BN, STAGES, CM, formula::kind_name(F), BN, CM > 1 ? " (W multicast)" : "", BM, BN, grid,
                  tiles * CM, settings_note, kThreads, C::kSmemBytes, bias_label(args.bias_mode, args.bias != nullptr));
  } else {
    char cluster[32] = "";
    if (CM > 1) std::snprintf(cluster, sizeof cluster, ",cluster=%dx1", CM);
    std::snprintf(buf, sizeof buf,
                  "qc::int8_scaled_mm_wgmma_kernel<BM=%d,BN=%d,stages=%d%s,%s> wgmma.m64n%dk32.s8 sm_90a, "
                  "TMA 128B-swizzle%s, "
                  "1 producer + 2 consumer warpgroups, persistent grid=%d over %d tiles%s block=%d smem=%d bias=%s",
                  BM, BN, STAGES, cluster, formula::kind_name(F), BN, CM > 1 ? " (W multicast)" : "", grid,
                  tiles * CM, settings_note, kThreads, C::kSmemBytes, bias_label(args.bias_mode, args.bias != nullptr));
  }
  return buf;
}

template <Schedule S, int BM, int BN, int STAGES, int CM>
std::string launch_wgmma_tile(const ScaledMmArgs& args, cudaStream_t stream) {
  if (const char* why = launch_formula_error(args.formula, args.bias_mode, args.bias != nullptr))
    return std::string("error: launch_int8_scaled_mm_wgmma: ") + why;
  return formula::visit_kernel_instance(args.formula, [&](auto kind) {
    return launch_wgmma_config<S, BM, BN, STAGES, CM, decltype(kind)::value>(args, stream);
  });
}

}  // namespace

std::string launch_int8_scaled_mm_wgmma(const ScaledMmArgs& args, cudaStream_t stream) {
  switch (args.tile) {
    case MmTile::wg128x256: return launch_wgmma_tile<Schedule::cooperative, 128, 256, 4, 1>(args, stream);
    case MmTile::wg128x128: return launch_wgmma_tile<Schedule::cooperative, 128, 128, 6, 1>(args, stream);
    case MmTile::wgpp64x256: return launch_wgmma_tile<Schedule::pingpong, 64, 256, 5, 1>(args, stream);
    case MmTile::wgpp128x128: return launch_wgmma_tile<Schedule::pingpong, 128, 128, 7, 1>(args, stream);
    case MmTile::wgpp64x256_c2: return launch_wgmma_tile<Schedule::pingpong, 64, 256, 5, 2>(args, stream);
    case MmTile::wgpp128x128_c2: return launch_wgmma_tile<Schedule::pingpong, 128, 128, 7, 2>(args, stream);
    case MmTile::wg128x256_c2: return launch_wgmma_tile<Schedule::cooperative, 128, 256, 4, 2>(args, stream);
    default: break;
  }
  return "error: launch_int8_scaled_mm_wgmma: not a wgmma tile";
}

}  // namespace qc::cuda_kernels
