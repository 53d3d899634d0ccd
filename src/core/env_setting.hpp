// The pipeline's measurement settings read from the environment (QC_VERIFY_OVERLAP, QC_FP8_MODEL_TILE_N, ...:
// docs/gpu.md): one reading for all of them, so that they agree on what unset, empty and out-of-range mean.
#pragma once

#include <algorithm>
#include <cstdlib>

namespace qc {

// An integer setting of the environment, clamped to [lo, hi]; `otherwise` when it is unset or empty.
inline int env_int(const char* name, int otherwise, int lo, int hi) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::clamp(std::atoi(v), lo, hi) : otherwise;
}

}  // namespace qc
