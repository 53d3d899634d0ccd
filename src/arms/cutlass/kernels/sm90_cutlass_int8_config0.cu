// vLLM's sm90 INT8 configuration `M32_NSmall` (cutlass_dispatch.hpp, kInt8ConfigTable[0]): tile
// 64 x 64 x 256, cluster 1 x 8, KernelTmaWarpSpecialized; ScaledEpilogue and ScaledEpilogueBias.
// Build and test: see sm90_cutlass_gemm.cuh and tests/gpu/test_cutlass_arms.cpp.
#include "sm90_cutlass_gemm.cuh"

namespace qc::cutlass_kernels {

LaunchResult launch_int8_vllm_config0(const ScaledMmArgs& args, bool bias) {
  using namespace cute;
  return detail::launch_int8_vllm<Shape<_64, _64, _256>, Shape<_1, _8, _1>,
                                  cutlass::gemm::KernelTmaWarpSpecialized>(args, bias);
}

}  // namespace qc::cutlass_kernels
