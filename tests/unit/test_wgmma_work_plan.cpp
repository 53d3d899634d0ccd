// The persistent wgmma kernel's division of work (src/arms/cuda/kernels/wgmma_work_plan.hpp), on the
// CPU in every build: the kernel's producer and consumers walk exactly these work items, so a gap or
// an overlap here is a wrong output there (the GPU tests, CudaKernels.*, compare the outputs bit for
// bit on the device). The shapes' expected plans are worked out by hand in the comments.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <array>
#include <set>
#include <string>
#include <vector>

#include "arms/cuda/kernels/wgmma_work_plan.hpp"

namespace {

using qc::cuda_kernels::plan_work;
using qc::cuda_kernels::WgPlan;
using qc::cuda_kernels::work_item;
using qc::cuda_kernels::work_items;
using qc::cuda_kernels::WorkItem;

// Walks every unit's items as the kernel does and returns "" or the first inconsistency: every k-step
// of every tile computed exactly once; each unit's stage-use count continuous from item to item (the
// producer counts its loads, each consumer takes `it` from the item); whole tiles only before the tail,
// and without stream-K exactly the round robin the kernel walked before it (tile u + i * units, stage
// uses from i * k_tiles); each tail tile's parts in distinct slots below its contributor count, which
// is the number of units that cover it and at most sk_slots, and each part at least kSkFixupSteps
// k-steps but for the tile's first and last (cut at a unit's range's ends); every unit with one item at
// least (the ping-pong turn order).
std::string walk(const WgPlan& p, int units) {
  std::vector<int> seen(static_cast<size_t>(p.tiles) * p.k_tiles, 0);
  std::vector<std::set<int>> tail_units(static_cast<size_t>(p.tiles - p.dp_tiles));
  std::vector<std::set<int>> tail_slots(tail_units.size());
  std::vector<int> tail_contributors(tail_units.size(), -1);
  for (int u = 0; u < units; ++u) {
    const int n = work_items(p, u, units);
    if (n < 1) return fmt::format("unit {} has no work item", u);
    int it = 0;
    for (int i = 0; i < n; ++i) {
      const WorkItem w = work_item(p, u, units, i);
      if (w.it != it) return fmt::format("unit {} item {}: it {} after {} stage uses", u, i, w.it, it);
      if (p.sk_units == 0 && (w.tile != u + i * units || w.it != i * p.k_tiles))
        return fmt::format("unit {} item {}: tile {} from stage use {}, not the round robin's", u, i, w.tile, w.it);
      if (w.tile < 0 || w.tile >= p.tiles || w.k0 < 0 || w.k1 > p.k_tiles || w.k0 >= w.k1)
        return fmt::format("unit {} item {}: tile {} steps [{}, {})", u, i, w.tile, w.k0, w.k1);
      for (int k = w.k0; k < w.k1; ++k) ++seen[static_cast<size_t>(w.tile) * p.k_tiles + k];
      it += w.k1 - w.k0;
      if (w.tile < p.dp_tiles) {
        if (w.k0 != 0 || w.k1 != p.k_tiles) return fmt::format("unit {}: whole tile {} cut", u, w.tile);
        continue;
      }
      const size_t r = static_cast<size_t>(w.tile - p.dp_tiles);
      if (w.sk != static_cast<int>(r)) return fmt::format("unit {}: tail tile {} named {}", u, r, w.sk);
      if (w.slot < 0 || w.slot >= w.contributors || w.contributors > p.sk_slots)
        return fmt::format("unit {}: slot {} of {} (slots {})", u, w.slot, w.contributors, p.sk_slots);
      if (!tail_slots[r].insert(w.slot).second) return fmt::format("tail tile {}: slot {} twice", r, w.slot);
      // A part inside the tile (not at its first or last k-step) is a whole unit's share.
      if (w.k0 > 0 && w.k1 < p.k_tiles && w.k1 - w.k0 < qc::cuda_kernels::kSkFixupSteps)
        return fmt::format("tail tile {}: a share of {} k-steps", r, w.k1 - w.k0);
      tail_units[r].insert(u);
      if (tail_contributors[r] >= 0 && tail_contributors[r] != w.contributors)
        return fmt::format("tail tile {}: {} and {} contributors", r, tail_contributors[r], w.contributors);
      tail_contributors[r] = w.contributors;
    }
  }
  for (size_t i = 0; i < seen.size(); ++i)
    if (seen[i] != 1) return fmt::format("tile {} k-step {} computed {} times", i / p.k_tiles, i % p.k_tiles, seen[i]);
  for (size_t r = 0; r < tail_units.size(); ++r)
    if (static_cast<int>(tail_units[r].size()) != tail_contributors[r])
      return fmt::format("tail tile {}: {} units, {} contributors", r, tail_units[r].size(), tail_contributors[r]);
  return "";
}

TEST(WgmmaWorkPlan, EveryStepOnceOverManyShapes) {
  int with_tail = 0, without = 0;
  for (int units : {1, 2, 7, 66, 114, 132, 144})
    for (int tiles : {1, 2, 5, 66, 131, 132, 133, 200, 263, 264, 265, 512, 1024, 4096})
      for (int k_tiles : {1, 3, 6, 9, 17, 32, 64, 255})
        for (int parts : {1, 2}) {
          const int u = tiles < units ? tiles : units;  // the launcher's grid
          for (bool allow : {true, false}) {
            const WgPlan p = plan_work(tiles, k_tiles, u, parts, allow);
            (p.sk_units > 0 ? with_tail : without) += 1;
            // Parts per tail tile: at most ceil(k_tiles / kSkFixupSteps) + 1 (wgmma_work_plan.hpp).
            const int most = (k_tiles + qc::cuda_kernels::kSkFixupSteps - 1) / qc::cuda_kernels::kSkFixupSteps + 1;
            ASSERT_LE(p.sk_slots, most) << fmt::format("tiles {} k_tiles {} units {}", tiles, k_tiles, u);
            const std::string bad = walk(p, u);
            ASSERT_TRUE(bad.empty()) << fmt::format("tiles {} k_tiles {} units {} parts {}: ", tiles, k_tiles, u, parts)
                                     << bad;
          }
        }
  // Both kinds of plan were walked (not a check of the rule, of the test's reach).
  EXPECT_GT(with_tail, 100);
  EXPECT_GT(without, 100);
}

// A plan's (dp_tiles, sk_units, sk_q, sk_rem, sk_slots).
std::array<int, 5> fields(const WgPlan& p) { return {p.dp_tiles, p.sk_units, p.sk_q, p.sk_rem, p.sk_slots}; }

// The rule at the shapes of the benchmark (132 units: an H100 or H200 SXM), worked by hand.
TEST(WgmmaWorkPlan, TailRuleAtTheBenchmarkShapes) {
  using Fields = std::array<int, 5>;
  // 4096^3, 128x128 or 64x256 tiles: 32 x 32 = 1024 tiles = 7 x 132 + 100; K = 4096 is 32 steps.
  // The tail's 100 x 32 = 3200 steps over min(132, 4 x 100) = 132 units: 3200 = 132 x 24 + 32, so 32
  // units take 25 steps and 100 take 24; 25 + 4 < 32: cut. A tail tile's 32 steps meet at most 3 units.
  EXPECT_EQ(fields(plan_work(1024, 32, 132, 1, true)), (Fields{924, 132, 24, 32, 3}));
  // 8192^3, 64x256: 128 x 32 = 4096 tiles = 31 x 132 + 4; 64 steps. 4 x 64 = 256 steps over
  // min(132, 16) = 16 units, 16 each: each tail tile is exactly 4 units' ranges.
  EXPECT_EQ(fields(plan_work(4096, 64, 132, 1, true)), (Fields{4092, 16, 16, 0, 4}));
  // 8192^3, 128x256 (two parts): 64 x 32 = 2048 = 15 x 132 + 68; 68 x 64 = 4352 = 132 x 32 + 128: units
  // 0-127 take 33 steps, so tail tile 1 (steps 64-127) meets units 1, 2 and 3.
  EXPECT_EQ(fields(plan_work(2048, 64, 132, 2, true)), (Fields{1980, 132, 32, 128, 3}));
  // 4096^3, 128x256: 512 = 3 x 132 + 116; 116 x 32 = 3712 = 132 x 28 + 16: 29 + 4 >= 32, not cut.
  EXPECT_EQ(fields(plan_work(512, 32, 132, 2, true)), (Fields{512, 0, 0, 0, 0}));
  // Verify's M = 512 layers: fewer tiles than units, one wave: nothing to cut.
  EXPECT_EQ(fields(plan_work(64, 32, 64, 2, true)), (Fields{64, 0, 0, 0, 0}));
  // A whole number of waves: no tail. Forbidden: none.
  EXPECT_EQ(fields(plan_work(264, 32, 132, 1, true)), (Fields{264, 0, 0, 0, 0}));
  EXPECT_EQ(fields(plan_work(1024, 32, 132, 1, false)), (Fields{1024, 0, 0, 0, 0}));
}

}  // namespace
