// The one place that knows which arm backends this build contains.
#include "arms/backends.hpp"

namespace qc::detail {

void register_builtin_arm_backends() {
  // Backends are added here as they land (cpu, mutant, onednn, plugin, cuda).
}

}  // namespace qc::detail
