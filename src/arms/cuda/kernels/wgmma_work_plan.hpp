// The persistent wgmma INT8 kernel's division of work among its units (sm90_int8_scaled_mm_wgmma.cu):
// whole tiles round robin, and stream-K over the tail. Plain C++ shared by the kernel (device), its
// launcher (host) and the host unit tests (tests/unit/test_wgmma_work_plan.cpp, which check on any
// machine that every k-step of every tile is computed exactly once and that the stage-use counts,
// slots and arrival counts agree).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

#if defined(__CUDACC__)
#define QC_HOST_DEVICE __host__ __device__
#else
#define QC_HOST_DEVICE
#endif

namespace qc::cuda_kernels {

// How a launch's units (blocks, or clusters) share the work; computed on the host (`plan_work`).
// Without stream-K (sk_units = 0) unit u computes the whole tiles u, u + units, ... < tiles. With it,
// the last tiles - dp_tiles tiles (the tail that would leave most multiprocessors idle in a last
// partial wave; dp_tiles is then a multiple of units, so every unit computes as many whole tiles) are
// cut along K instead, each into sk_parts parts: unit u < sk_units = tail x sk_parts computes, after its
// whole tiles, part u % sk_parts of tail tile u / sk_parts, k-steps [j k_tiles / sk_parts, (j + 1) k_tiles
// / sk_parts) for j = u % sk_parts. A part stores its int32 partial sums in slot j of the tile's workspace
// and counts itself in; the part that counts in last adds the others' partial sums to its own (integer
// sums: exact in any order, K < 2^17) and runs the epilogue. Nobody waits for anybody, so no unit depends
// on another being resident. A unit's share never spans two tiles: each part pays one fix-up, and a
// tail with fewer than two units per tile is left whole (measured: docs/performance.md, fifteenth session).
struct WgPlan {
  int tiles = 0;     // output tiles (cluster tiles when CM > 1)
  int k_tiles = 0;   // k-steps (kBK bytes of K) per tile
  int dp_tiles = 0;  // tiles computed whole, round robin; == tiles without stream-K
  int sk_units = 0;  // units that compute a part of a tail tile (0: no stream-K)
  int sk_parts = 0;  // parts per tail tile (workspace slots per tail tile)
  int32_t* sk_work = nullptr;   // [tail tile][part][BM * BN] partial sums, in the parts' register order
  int* sk_count = nullptr;      // [tail tile][consumer part] arrivals; zero before and after every launch
  // The order of the tiles: groups of group_units (cluster) M-tiles walk each W column tile in turn
  // (QC_WGMMA_GROUP_ROWS, 1024 rows by default).
  int group_units = 1;
  // 1: each consumer warpgroup prefetches its item's epilogue operands (the scales of its rows and
  // columns, the bias) to L1 before the item's mainloop (QC_WGMMA_PREFETCH=1; 0 by default).
  int prefetch = 0;
  // 1: one arrival per consumer warpgroup releases a stage instead of one per warp (QC_WGMMA_ONE_RELEASE=1).
  int one_release = 0;
};

// Part j's first k-step of a tile of k_tiles steps cut into `parts` (j = parts: the end).
QC_HOST_DEVICE inline int sk_part_begin(int j, int k_tiles, int parts) { return j * k_tiles / parts; }

// One work item of a unit: k-steps [k0, k1) of tile `tile` (raster order), starting at the unit's
// stage use `it`; for a tail tile, its index `sk` among the tail tiles, the slot of this part and the
// number of parts.
struct WorkItem {
  int tile, k0, k1, it;
  int sk, slot, contributors;
};

QC_HOST_DEVICE inline int dp_items(const WgPlan& p, int u, int units) {
  return u < p.dp_tiles ? (p.dp_tiles - u + units - 1) / units : 0;
}
QC_HOST_DEVICE inline int work_items(const WgPlan& p, int u, int units) {
  return dp_items(p, u, units) + (u < p.sk_units ? 1 : 0);
}
QC_HOST_DEVICE inline WorkItem work_item(const WgPlan& p, int u, int units, int i) {
  const int nd = dp_items(p, u, units);
  const int kt = p.k_tiles;
  if (i < nd) return WorkItem{u + i * units, 0, kt, i * kt, -1, 0, 1};
  const int r = u / p.sk_parts, j = u % p.sk_parts;  // the tail tile and the part of this unit
  return WorkItem{p.dp_tiles + r, sk_part_begin(j, kt, p.sk_parts), sk_part_begin(j + 1, kt, p.sk_parts), nd * kt,
                  r, j, p.sk_parts};
}

// Stream-K in k-steps: a part's fix-up (its partial sums stored and counted in; the last part's reads of
// the others') is taken to cost about this many k-steps of the mainloop. A tail tile is cut only where a
// part plus this is shorter than the whole tile, and into parts of at least this many k-steps. (An
// estimate: docs/gpu.md.)
constexpr int kSkFixupSteps = 4;
// At most this many parts per tail tile, so that parts stay long.
constexpr int kSkMaxShare = 4;
// The workspace starts with the arrival counters (zero between launches), then the partial sums.
constexpr size_t kSkCountBytes = 16 << 10;

// Whether a launch may cut its tail (`plan_work`'s `allow`): single-block units only (a cluster's blocks
// would have to agree on the cut), not on the per-thread default stream (one handle, and so one workspace,
// for many streams), and by `setting` (QC_WGMMA_STREAMK: 1 at any M, 0 never; unset, -1, where M >=
// kSkDefaultMinM, the regime measured: docs/performance.md, fifteenth session).
constexpr int kSkDefaultMinM = 2048;
inline bool streamk_allowed(int setting, int m, int cluster, bool per_thread_stream) {
  if (cluster != 1 || per_thread_stream) return false;
  return setting == 1 || (setting < 0 && m >= kSkDefaultMinM);
}

// Whole tiles round robin, and stream-K over the tail where it pays, when `allow` (`streamk_allowed`): the tail's tiles are cut into as many parts as there are units per tail tile
// (at most kSkMaxShare, and none shorter than kSkFixupSteps), two at least.
inline WgPlan plan_work(int tiles, int k_tiles, int units, int parts, bool allow) {
  WgPlan p;
  p.tiles = tiles, p.k_tiles = k_tiles, p.dp_tiles = tiles;
  const int tail = tiles % units;
  if (!allow || tiles <= units || tail == 0 || size_t{sizeof(int)} * tail * parts > kSkCountBytes) return p;
  int d = std::min(kSkMaxShare, units / tail);
  while (d >= 2 && k_tiles / d < kSkFixupSteps) --d;
  // Fewer than two parts, or the longest part plus its fix-up no shorter than the whole tile.
  if (d < 2 || (k_tiles + d - 1) / d + kSkFixupSteps >= k_tiles) return p;
  p.dp_tiles = tiles - tail, p.sk_units = tail * d, p.sk_parts = d;
  return p;
}

}  // namespace qc::cuda_kernels

#undef QC_HOST_DEVICE
