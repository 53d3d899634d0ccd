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
// partial wave) are cut along K instead: their (tiles - dp_tiles) * k_tiles k-steps in a row ("SK
// space": step g is k-step g % k_tiles of tail tile g / k_tiles) are dealt out in consecutive ranges to
// units 0 .. sk_units - 1 after their whole tiles, sk_q + 1 steps each to the first sk_rem of them
// and sk_q to the rest. A unit's range is cut at tile boundaries into work items. Each item that
// is part of a tile stores its int32 partial sums in slot (unit - first unit of the tile) of the
// tile's workspace and counts itself in; the part that counts in last adds the others' partial sums
// to its own (integer sums: exact in any order, K < 2^17) and runs the epilogue. Nobody waits for
// anybody, so no unit depends on another being resident.
struct WgPlan {
  int tiles = 0;     // output tiles (cluster tiles when CM > 1)
  int k_tiles = 0;   // k-steps (kBK bytes of K) per tile
  int dp_tiles = 0;  // tiles computed whole, round robin; == tiles without stream-K
  int sk_units = 0;  // units that share the tail's k-steps (0: no stream-K)
  int sk_q = 0, sk_rem = 0;
  int sk_slots = 0;             // workspace slots per tail tile: its most contributing units
  int32_t* sk_work = nullptr;   // [tail tile][slot][BM * BN] partial sums, in the parts' register order
  int* sk_count = nullptr;      // [tail tile][part] arrivals; zero before and after every launch
  // The order of the tiles: groups of group_units (cluster) M-tiles walk each W column tile in turn
  // (QC_WGMMA_GROUP_ROWS, 1024 rows by default).
  int group_units = 1;
  // 1: each consumer warpgroup prefetches its item's epilogue operands (the scales of its rows and
  // columns, the bias) to L1 before the item's mainloop (QC_WGMMA_PREFETCH=1; 0 by default).
  int prefetch = 0;
  // 1: one arrival per consumer warpgroup releases a stage instead of one per warp (QC_WGMMA_ONE_RELEASE=1).
  int one_release = 0;
};

// The unit whose range holds step g of SK space.
QC_HOST_DEVICE inline int sk_unit_of(const WgPlan& p, int g) {
  const int big = p.sk_rem * (p.sk_q + 1);
  return g < big ? g / (p.sk_q + 1) : p.sk_rem + (g - big) / p.sk_q;
}
// Unit u's range [b, e) of SK space (empty for u >= sk_units).
QC_HOST_DEVICE inline void sk_range(const WgPlan& p, int u, int& b, int& e) {
  if (u >= p.sk_units) {
    b = e = 0;
    return;
  }
  b = u * p.sk_q + (u < p.sk_rem ? u : p.sk_rem);
  e = b + p.sk_q + (u < p.sk_rem ? 1 : 0);
}

// One work item of a unit: k-steps [k0, k1) of tile `tile` (raster order), starting at the unit's
// stage use `it`; for a tail tile, its index `sk` among the tail tiles, the slot of this unit and the
// number of units that share it.
struct WorkItem {
  int tile, k0, k1, it;
  int sk, slot, contributors;
};

QC_HOST_DEVICE inline int dp_items(const WgPlan& p, int u, int units) {
  return u < p.dp_tiles ? (p.dp_tiles - u + units - 1) / units : 0;
}
QC_HOST_DEVICE inline int work_items(const WgPlan& p, int u, int units) {
  int b, e;
  sk_range(p, u, b, e);
  const int sk = e > b ? (e - 1) / p.k_tiles - b / p.k_tiles + 1 : 0;
  return dp_items(p, u, units) + sk;
}
QC_HOST_DEVICE inline WorkItem work_item(const WgPlan& p, int u, int units, int i) {
  const int nd = dp_items(p, u, units);
  const int kt = p.k_tiles;
  if (i < nd) return WorkItem{u + i * units, 0, kt, i * kt, -1, 0, 1};
  int b, e;
  sk_range(p, u, b, e);
  const int r = b / kt + (i - nd);  // the tail tile of this item
  const int g0 = b > r * kt ? b : r * kt;
  const int g1 = e < (r + 1) * kt ? e : (r + 1) * kt;
  const int first = sk_unit_of(p, r * kt);
  const int last = sk_unit_of(p, (r + 1) * kt - 1);
  return WorkItem{p.dp_tiles + r, g0 - r * kt, g1 - r * kt, nd * kt + (g0 - b), r, u - first, last - first + 1};
}

// Stream-K (`WgPlan`) in k-steps: a part's fix-up (its partial sums stored and counted in; the last part's
// reads of the others') is taken to cost about this many k-steps of the mainloop. The tail is cut along
// K only where a unit's share plus this is shorter than a whole tile, and every unit's share is at least
// this long (a part of one or two k-steps would pay a whole tile's store for them), so a tail tile has
// at most ceil(k_tiles / kSkFixupSteps) + 1 parts. (An estimate, not a measurement: docs/gpu.md.)
constexpr int kSkFixupSteps = 4;
// The tail's k-steps go to at most this many units per tail tile, so that shares stay long.
constexpr int kSkMaxShare = 4;
// The workspace starts with the arrival counters (zero between launches), then the partial sums.
constexpr size_t kSkCountBytes = 16 << 10;

// Whole tiles round robin, and stream-K over the tail where it pays, when `allow` (the launcher's
// QC_WGMMA_STREAMK=1).
inline WgPlan plan_work(int tiles, int k_tiles, int units, int parts, bool allow) {
  WgPlan p;
  p.tiles = tiles, p.k_tiles = k_tiles, p.dp_tiles = tiles;
  const int tail = tiles % units;
  if (!allow || tiles <= units || tail == 0 || size_t{sizeof(int)} * tail * parts > kSkCountBytes) return p;
  const int sk_units = std::min(units, kSkMaxShare * tail);
  const int64_t steps = int64_t{tail} * k_tiles;
  const int q = static_cast<int>(steps / sk_units), rem = static_cast<int>(steps % sk_units);
  // The last partial wave is cheaper, or the shares too short to pay for their fix-up.
  if (q < kSkFixupSteps || q + (rem > 0 ? 1 : 0) + kSkFixupSteps >= k_tiles) return p;
  p.dp_tiles = tiles - tail, p.sk_units = sk_units, p.sk_q = q, p.sk_rem = rem;
  for (int r = 0; r < tail; ++r)
    p.sk_slots = std::max(p.sk_slots, sk_unit_of(p, (r + 1) * k_tiles - 1) - sk_unit_of(p, r * k_tiles) + 1);
  return p;
}

}  // namespace qc::cuda_kernels

#undef QC_HOST_DEVICE
