// C8, tensor-parallel half: one layer at several tensor-parallel degrees, simulated on the CPU
// (docs/invariance.md). Column-parallel layers (q/k/v, gate/up) split N: each rank computes its
// columns whole. Row-parallel layers (o_proj, down_proj) split K: each rank's exact accumulator
// covers its K shard only (the integer alibi holds per shard), the arm's epilogue runs per shard
// (its bf16 output is the partial; the bias on rank 0 only, as vLLM's RowParallelLinear does), and
// the partials are summed by a collective in the order of its algorithm. Block-scaled layers are cut on
// their scale blocks (a degree whose shards would split a block is not applicable, with the reason).
//
// Observed: the arm run on every shard (in this process, or by a ShardRunner: the shards on MPI ranks),
// the partials summed by the collective step by step. Predicted: the shards' claimed formulas on the shards' exact
// accumulators, summed in the closed-form order of the reduction model the collective's record
// names. Compared element for element at each degree, and the set of elements that differ from the
// first degree observed against the set predicted.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "checks/c8_invariance.hpp"

namespace qc {

enum class ReductionAlgo { sequential, ring, tree };

// A named reduction model of an all-reduce over T partials (bf16 bit patterns, one vector per rank,
// all of one length):
// - sequential: ((p0 + p1) + p2) + ... in rank order.
// - ring: NCCL's ring all-reduce, one channel: the buffer is cut into loops of T chunks of `chunk`
//   elements (NCCL's chunkCount; 0: one loop), the last (partial) loop's chunks of
//   alignUp(divUp(remaining, T), 8) elements (16 bytes of bf16); chunk c of a loop is first sent by
//   rank c+1 and reduced by c+2, ..., c, so its sum is ((p_{c+1} + p_{c+2}) + ...) + p_c (ranks mod T).
// - tree: balanced pairwise: the sum over ranks [lo, hi) is sum[lo, lo+h) + sum[lo+h, hi) with h the
//   largest power of two below hi - lo; a model of a binomial reduction tree, not NCCL's double binary
//   tree (whose order depends on the channel and the tree shape).
// Each addition is bf16(rn32(a + b)) (NCCL's bf16 sum), or, with `fp32`, partials are summed in fp32
// and rounded to bf16 once at the end.
struct ReductionModel {
  ReductionAlgo algo = ReductionAlgo::ring;
  int64_t chunk = 0;
  bool fp32 = false;
  std::string name() const;  // "ring", "ring:4096", "tree+fp32": the spelling parse_reduction_model reads
  bool operator==(const ReductionModel&) const = default;
};
// "sequential", "ring", "ring:<chunk>", "tree", each optionally followed by "+fp32" (or "+bf16", the
// default). QC_INPUT naming `what` otherwise.
ReductionModel parse_reduction_model(std::string_view spec, std::string_view what);

using Partials = std::vector<std::vector<uint16_t>>;
// The reduction as a closed form: for each element, its order from the model's formula.
std::vector<uint16_t> reduce_closed_form(const ReductionModel& model, const Partials& partials);
// The same model executed as its algorithm runs: per-rank buffers, the ring's T-1 reduce-scatter steps
// (each rank sends a chunk to the next, which adds its own) and the all-gather, the tree's levels (rank
// i receives from i + d at distance d = 1, 2, 4, ...), the sequential chain. An independent
// formulation of the same order (tests compare the two).
std::vector<uint16_t> reduce_by_steps(const ReductionModel& model, const Partials& partials);

// What sums the partials in the simulation (the observed side) and the model its record names.
struct CollectiveOutcome {
  std::vector<uint16_t> out;
  std::string algorithm;  // a parse_reduction_model spelling: the model the collective says it ran
};
class Collective {
 public:
  virtual ~Collective() = default;
  virtual std::string label() const = 0;
  virtual CollectiveOutcome all_reduce(const Partials& partials) = 0;
};
// "<model>" (that model, run by reduce_by_steps; its record names it) or
// "mutant:tree-from-<T>[+fp32]" (a positive control: the ring for fewer than T ranks, the tree from T
// ranks on, as a library that picks its algorithm by the number of ranks; its record names the one it
// ran). QC_INPUT otherwise.
std::unique_ptr<Collective> make_collective(std::string_view spec);

enum class ParallelStyle { column, row };
std::string_view parallel_style_name(ParallelStyle s);  // "column-parallel", "row-parallel"
// Row-parallel for the projections engines shard along K (o_proj, down_proj, out_proj, dense_4h_to_h,
// wo, w2, by the last part of the layer's name), column-parallel otherwise.
ParallelStyle parallel_style_of(std::string_view layer);

// Runs one degree's shards (shard t of `shards.size()`) and returns every shard's output in shard order,
// or nullopt in a process that only contributes shards (an MPI rank other than 0: it neither compares
// nor prints). Every process of a job calls it for the same shards in the same order.
using ShardRunner =
    std::function<std::optional<std::vector<ArmOutput>>(Arm& arm, const std::vector<LayerOperands>& shards)>;

struct TpOptions {
  std::vector<int> degrees = {1, 2, 4, 8};
  std::string style = "auto";          // auto (by name), column, row
  std::string declared = "ring";       // the reduction model the user expects (checked against what ran)
  std::string collective;              // what runs; "" = the declared model
  bool use_records = true;             // false: shards predicted from the arm's declaration alone
  int max_listed = 5;
  ShardRunner run_shards;              // empty: every shard run here, in shard order
  std::string placement = "this process";  // where the shards ran, for the printout and JSON
};

struct TpDegree {
  int degree = 0;
  bool applicable = true;
  std::string note;
  std::string kernel, claim;           // the shards' records (distinct values joined)
  std::string algorithm;               // the collective's record ("" for column-parallel or degree 1)
  std::string placement;               // where the shards ran ("this process", "4 MPI ranks ...")
  int64_t elements = 0;
  int64_t predicted_mismatch = -1;     // observed != predicted, elements (-1: no prediction)
  int64_t observed_diff = 0;           // elements differing from the first degree, observed
  int64_t predicted_diff = -1;         //   ... predicted
  int64_t mispredicted = -1;           // elements in one of those sets only
  int64_t declared_mismatch = -1;      // observed != the prediction under the declared model
  std::vector<ElementDiff> first, first_mispredicted;  // `reference`: the first degree's value
  std::optional<std::string> verdict;  // invariant / variant, predicted / variant, unexplained; null n/a
};

struct LayerTp {
  std::string layer;
  int64_t m = 0, n = 0, k = 0;
  ParallelStyle style = ParallelStyle::column;
  std::string collective, declared;
  std::vector<TpDegree> degrees;
  std::vector<std::string> thresholds;  // degrees where the recorded algorithm or the declared model changes
  std::optional<std::string> verdict;
  bool compared = true;  // false in a process that only contributed shards (nothing else is set)
};

LayerTp layer_tp(Arm& arm, const LayerOperands& ops, const TpOptions& options);
nlohmann::json to_json(const LayerTp& r);
std::string describe(const LayerTp& r);

}  // namespace qc
