// C8 end to end: a prompt's linear layers run inside batches with other rows (docs/invariance.md,
// "End to end"). `with_batch_mates` wraps the decoder's LinearFn: every call's rows x [M, k] run as
// the first rows of a batch of M + B rows, B cycling through `mates` from call to call (so the batch
// sizes cross the engines' bucket edges), the mates synthetic rows of x's magnitude; only the prompt's
// rows are kept. With `stats`, each call also runs the rows alone and counts, per layer, the outputs
// whose fp32 bits differ (signed zeros and NaN payloads count): per-layer invariance inside the model.
// The sequences themselves are compared by running generate/replay twice (alone and with mates) and
// `qconform transfer` on the two record files (C7's flip statistics).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "model/model.hpp"

namespace qc {

struct BatchMateStats {
  struct Layer {
    int64_t calls = 0, elements = 0, differing = 0;
    int64_t first_row = -1, first_col = -1;  // the first differing output
    uint32_t first_alone = 0, first_batched = 0;  // its fp32 bit patterns
  };
  std::mutex mu;
  std::map<std::string, Layer> layers;  // by LinearLayer::name
  std::string describe();               // one line per layer with a difference, then the totals
};

// QC_INPUT for an empty list or a negative count.
LinearFn with_batch_mates(LinearFn inner, std::vector<int64_t> mates, uint64_t seed,
                          std::shared_ptr<BatchMateStats> stats = nullptr);

}  // namespace qc
