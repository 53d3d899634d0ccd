// The one place that knows which arm backends this build contains.
#include "arms/backends.hpp"
#include "arms/cpu/cpu_arms.hpp"
#include "arms/plugin/plugin_arm.hpp"
#ifdef QC_WITH_ONEDNN
#include "arms/onednn/onednn_arm.hpp"
#endif
#ifdef QC_WITH_CUDA
#include "arms/cuda/cuda_arms.hpp"
#endif

namespace qc::detail {

void register_builtin_arm_backends() {
  // Backends are added here as they land (cpu, mutant, onednn, plugin, cuda).
  register_cpu_arms();
  register_mutant_arms();
#ifdef QC_WITH_ONEDNN
  register_onednn_arms();
#endif
  register_plugin_arms();
#ifdef QC_WITH_CUDA
  register_cuda_arms();
#endif
}

}  // namespace qc::detail
