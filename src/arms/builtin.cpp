// The one place that knows which arm backends this build contains.
#include "arms/absent_backends.hpp"  // generated: QC_ONEDNN_ABSENT, QC_CUTLASS_ABSENT
#include <string_view>

#include "arms/backends.hpp"
#include "qconform/arm.hpp"
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
  register_fp8_alias_arms();
  register_mutant_arms();
  register_shape_mutant_arms();
#ifdef QC_WITH_ONEDNN
  register_onednn_arms();
#endif
  register_plugin_arms();
#ifdef QC_WITH_CUDA
  register_cuda_arms();
#endif
}

}  // namespace qc::detail

namespace qc {

const std::vector<AbsentBackend>& absent_arm_backends() {
  static const std::vector<AbsentBackend> absent = [] {
    std::vector<AbsentBackend> a;
#ifndef QC_WITH_ONEDNN
    a.push_back({"onednn", QC_ONEDNN_ABSENT});
#endif
#ifndef QC_WITH_CUDA
    a.push_back({"cuda", "this build has no CUDA (no nvcc found at configure time, or QCONFORM_WITH_CUDA=OFF)"});
#else
    // The CUTLASS arms live in the `cuda` namespace (cuda:cutlass-*) but need CUTLASS's headers too.
    if (std::string_view(QC_CUTLASS_ABSENT) != "") a.push_back({"cuda:cutlass-*", QC_CUTLASS_ABSENT});
#endif
    return a;
  }();
  return absent;
}

}  // namespace qc
