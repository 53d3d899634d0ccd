// C8 end to end: a prompt's linear layers run inside batches with other rows (docs/invariance.md,
// "End to end"). `with_batch_mates` wraps the decoder's LinearFn: every call's rows x [M, k] run as
// the first rows of a batch of M + B rows, B cycling through `mates` from call to call (so the batch
// sizes cross the engines' bucket edges), the mates synthetic rows of x's magnitude; only the prompt's
// rows are kept. With `stats`, each call also runs the rows alone and counts, per layer, the outputs
// whose fp32 bits differ (signed zeros and NaN payloads count): per-layer invariance inside the model.
// The sequences themselves are compared by running generate/replay twice (alone and with mates) and
// `qconform transfer` on the two record files (C7's flip statistics).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "model/model.hpp"

namespace qc {

struct BatchMateStats {
  std::string title = "batch mates";               // the printout's first word
  std::string baseline = "the same rows run alone";  // what each call is compared with
  struct Layer {
    int64_t calls = 0, elements = 0, differing = 0;
    int64_t first_row = -1, first_col = -1;  // the first differing output
    uint32_t first_alone = 0, first_batched = 0;  // its fp32 bit patterns
  };
  std::mutex mu;
  std::map<std::string, Layer> layers;  // by LinearLayer::name
  std::string describe();               // one line per layer with a difference, then the totals
  // {"title", "baseline", "layers": [{layer, calls, elements, differing, first}], "calls", "elements",
  // "differing"}; `first` {row, col, baseline, here} as fp32 bit patterns and values, null when none differ.
  nlohmann::json to_json();
};

// The inputs of the model's linear layers as other prompts produced them: rows by layer, each tagged with
// its sequence (the prompt's index), at most `cap` rows per (layer, sequence). `with_row_recorder` fills it
// during a plain run; `with_batch_mates` then takes a call's mates from the rows of the other sequences,
// so that a prompt runs inside batches of other prompts' tokens. `current` is the sequence now running
// (set by the caller before each prompt; calls of one process run one prompt at a time).
struct PromptRows {
  std::mutex mu;
  int64_t cap = 64;
  std::atomic<int64_t> current{0};
  struct Row {
    int64_t sequence;
    std::vector<float> x;
  };
  std::map<std::string, std::vector<Row>> rows;  // by LinearLayer::name, in the order recorded
  std::atomic<int64_t> from_prompts{0}, synthetic{0};  // mate rows taken from other prompts / made up
};
LinearFn with_row_recorder(LinearFn inner, std::shared_ptr<PromptRows> pool);

// QC_INPUT for an empty list or a negative count. With `from`, the mates are rows of other prompts at
// the same layer (cycling through them from call to call); a mate the pool cannot supply (no other
// prompt recorded at that layer) is a synthetic row, counted in `from->synthetic`.
LinearFn with_batch_mates(LinearFn inner, std::vector<int64_t> mates, uint64_t seed,
                          std::shared_ptr<BatchMateStats> stats = nullptr, std::shared_ptr<PromptRows> from = nullptr);

// Tensor parallelism inside the decoder (docs/invariance.md, "End to end"): every linear layer runs as
// `degree` shards through `inner` (a W8A8 LinearFn: its outputs are bf16 values), column-parallel layers
// split along N and concatenated, row-parallel ones (o_proj, down_proj: `parallel_style_of`) split along
// K (each shard's activations quantized on their own, as each rank does; the bias on shard 0) and their
// bf16 partials summed by `reduction` (a c8_tp.hpp model, run step by step). A layer whose N (column) or
// K (row) the degree does not divide, or whose weights are block-scaled, runs unsharded (counted). With
// `stats`, each call also runs unsharded and the outputs that differ are counted per layer.
struct TpDecoderCounts {
  std::mutex mu;
  std::map<std::string, std::string> unsharded;  // layer -> why it ran whole
};
// `options`: the W8A8 run's; an unquantized layer's weights are quantized whole with them first and then
// sliced, so that every shard keeps the full row's weight scale, as an engine's ranks do.
LinearFn with_tensor_parallel(LinearFn inner, int degree, const std::string& reduction, const W8a8Options& options,
                              std::shared_ptr<BatchMateStats> stats, std::shared_ptr<TpDecoderCounts> counts);

}  // namespace qc
