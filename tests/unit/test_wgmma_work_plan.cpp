// The persistent wgmma kernel's division of work (src/arms/cuda/kernels/wgmma_work_plan.hpp), on the
// CPU in every build: the kernel's producer and consumers walk exactly these work items, so a gap or
// an overlap here is a wrong output there (the GPU tests, CudaKernels.*, compare the outputs bit for
// bit on the device). The shapes' expected plans are worked out by hand in the comments.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <algorithm>
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
// uses from i * k_tiles); with it, every unit as many whole tiles, at most one part of one tail tile
// after them, each tail tile's parts in distinct slots below its contributor count (= sk_parts, the
// number of units that cover it), each part at least kSkFixupSteps k-steps, and the busiest unit's
// k-steps plus a fix-up per part fewer than without stream-K; every unit with one item at least (the
// ping-pong turn order).
std::string walk(const WgPlan& p, int units) {
  std::vector<int> seen(static_cast<size_t>(p.tiles) * p.k_tiles, 0);
  std::vector<std::set<int>> tail_units(static_cast<size_t>(p.tiles - p.dp_tiles));
  std::vector<std::set<int>> tail_slots(tail_units.size());
  int busiest = 0;
  for (int u = 0; u < units; ++u) {
    const int n = work_items(p, u, units);
    if (n < 1) return fmt::format("unit {} has no work item", u);
    int it = 0, parts = 0, whole = 0;
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
        if (parts > 0) return fmt::format("unit {}: whole tile {} after a part", u, w.tile);
        ++whole;
        continue;
      }
      if (++parts > 1) return fmt::format("unit {}: two parts", u);
      const size_t r = static_cast<size_t>(w.tile - p.dp_tiles);
      if (w.sk != static_cast<int>(r)) return fmt::format("unit {}: tail tile {} named {}", u, r, w.sk);
      if (w.contributors != p.sk_parts || w.slot < 0 || w.slot >= w.contributors)
        return fmt::format("unit {}: slot {} of {} (parts {})", u, w.slot, w.contributors, p.sk_parts);
      if (!tail_slots[r].insert(w.slot).second) return fmt::format("tail tile {}: slot {} twice", r, w.slot);
      if (w.k1 - w.k0 < qc::cuda_kernels::kSkFixupSteps)
        return fmt::format("tail tile {}: a part of {} k-steps", r, w.k1 - w.k0);
      tail_units[r].insert(u);
    }
    if (p.sk_units > 0 && whole != p.dp_tiles / units)
      return fmt::format("unit {}: {} whole tiles of {} over {} units", u, whole, p.dp_tiles, units);
    busiest = std::max(busiest, it + parts * qc::cuda_kernels::kSkFixupSteps);
  }
  for (size_t i = 0; i < seen.size(); ++i)
    if (seen[i] != 1) return fmt::format("tile {} k-step {} computed {} times", i / p.k_tiles, i % p.k_tiles, seen[i]);
  for (size_t r = 0; r < tail_units.size(); ++r)
    if (static_cast<int>(tail_units[r].size()) != p.sk_parts)
      return fmt::format("tail tile {}: {} units, {} parts", r, tail_units[r].size(), p.sk_parts);
  const int without = (p.tiles + units - 1) / units * p.k_tiles;  // the round robin's busiest unit
  if (p.sk_units > 0 && busiest >= without)
    return fmt::format("stream-K's busiest unit {} k-steps with its fix-up, {} without", busiest, without);
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
            ASSERT_LE(p.sk_parts, qc::cuda_kernels::kSkMaxShare) << fmt::format("tiles {} k_tiles {} units {}", tiles, k_tiles, u);
            ASSERT_EQ(p.sk_units, (p.tiles - p.dp_tiles) * p.sk_parts);
            const std::string bad = walk(p, u);
            ASSERT_TRUE(bad.empty()) << fmt::format("tiles {} k_tiles {} units {} parts {}: ", tiles, k_tiles, u, parts)
                                     << bad;
          }
        }
  // Both kinds of plan were walked (not a check of the rule, of the test's reach).
  EXPECT_GT(with_tail, 100);
  EXPECT_GT(without, 100);
}

// A plan's (dp_tiles, sk_units, sk_parts).
std::array<int, 3> fields(const WgPlan& p) { return {p.dp_tiles, p.sk_units, p.sk_parts}; }

// The rule at the shapes of the benchmark (132 units: an H100 or H200 SXM), worked by hand.
TEST(WgmmaWorkPlan, TailRuleAtTheBenchmarkShapes) {
  using Fields = std::array<int, 3>;
  // 8192^3, 64x256 or 128x128: 128 x 32 = 4096 tiles = 31 x 132 + 4; K = 8192 is 64 steps. 132 / 4 = 33
  // units per tail tile, at most 4: 4 parts of 16 steps over 16 units; 16 + 4 < 64: cut.
  EXPECT_EQ(fields(plan_work(4096, 64, 132, 1, true)), (Fields{4092, 16, 4}));
  // 4096^3, 128x128 or 64x256: 32 x 32 = 1024 tiles = 7 x 132 + 100: one unit per tail tile (132 / 100),
  // not cut (the session-14 rule dealt 3200 steps over 132 units, most of them spanning two tiles, and
  // measured 12 % slower: docs/performance.md, fifteenth session).
  EXPECT_EQ(fields(plan_work(1024, 32, 132, 1, true)), (Fields{1024, 0, 0}));
  // 8192^3, 128x256 (two parts): 64 x 32 = 2048 = 15 x 132 + 68: 132 / 68 = 1, not cut.
  EXPECT_EQ(fields(plan_work(2048, 64, 132, 2, true)), (Fields{2048, 0, 0}));
  // The GPU test's shape (1100, 4112, 2064) with 128x128 tiles: 9 x 33 = 297 = 2 x 132 + 33, K 17 steps;
  // 132 / 33 = 4 parts of 4, 4, 4 and 5 steps (j x 17 / 4 = 0, 4, 8, 12, 17); 5 + 4 < 17: cut, all 132 units.
  EXPECT_EQ(fields(plan_work(297, 17, 132, 2, true)), (Fields{264, 132, 4}));
  // One tail tile of 9 steps: 4 parts would be 2 steps, 2 parts are 4 and 5; 5 + 4 = 9 is not shorter: not cut.
  EXPECT_EQ(fields(plan_work(133, 9, 132, 1, true)), (Fields{133, 0, 0}));
  // ... of 17 steps: 4 parts of 4-5: cut, over 4 units.
  EXPECT_EQ(fields(plan_work(133, 17, 132, 1, true)), (Fields{132, 4, 4}));
  // Verify's M = 512 layers: fewer tiles than units, one wave: nothing to cut.
  EXPECT_EQ(fields(plan_work(64, 32, 64, 2, true)), (Fields{64, 0, 0}));
  // A whole number of waves: no tail. Forbidden: none.
  EXPECT_EQ(fields(plan_work(264, 32, 132, 1, true)), (Fields{264, 0, 0}));
  EXPECT_EQ(fields(plan_work(4096, 64, 132, 1, false)), (Fields{4096, 0, 0}));
}

// When a launch may cut its tail: the setting forces it either way, unset it follows M; never in a
// cluster or on the per-thread default stream.
TEST(WgmmaWorkPlan, StreamKAllowedBySettingAndM) {
  using qc::cuda_kernels::kSkDefaultMinM;
  using qc::cuda_kernels::streamk_allowed;
  EXPECT_FALSE(streamk_allowed(-1, kSkDefaultMinM - 1, 1, false));  // verify's M = 512 layers: off by default
  EXPECT_TRUE(streamk_allowed(-1, kSkDefaultMinM, 1, false));
  EXPECT_TRUE(streamk_allowed(1, 512, 1, false));
  EXPECT_FALSE(streamk_allowed(0, 8192, 1, false));
  EXPECT_FALSE(streamk_allowed(1, 8192, 2, false));
  EXPECT_FALSE(streamk_allowed(1, 8192, 1, true));
  EXPECT_FALSE(streamk_allowed(-1, 8192, 1, true));
}

// The parts of a tile of k_tiles steps: consecutive, covering it, their lengths floor or ceil of k_tiles / parts.
TEST(WgmmaWorkPlan, PartsCoverTheTile) {
  for (int k_tiles = 1; k_tiles < 300; ++k_tiles)
    for (int parts = 1; parts <= qc::cuda_kernels::kSkMaxShare; ++parts) {
      EXPECT_EQ(qc::cuda_kernels::sk_part_begin(0, k_tiles, parts), 0);
      EXPECT_EQ(qc::cuda_kernels::sk_part_begin(parts, k_tiles, parts), k_tiles);
      for (int j = 0; j < parts; ++j) {
        const int len = qc::cuda_kernels::sk_part_begin(j + 1, k_tiles, parts) - qc::cuda_kernels::sk_part_begin(j, k_tiles, parts);
        EXPECT_TRUE(len == k_tiles / parts || len == (k_tiles + parts - 1) / parts) << k_tiles << " " << parts << " " << j;
      }
    }
}

}  // namespace
