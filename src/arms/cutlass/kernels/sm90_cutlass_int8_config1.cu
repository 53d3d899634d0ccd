// vLLM's sm90 INT8 configuration `M32_NBig` (cutlass_dispatch.hpp, kInt8ConfigTable[1]): tile
// 64 x 128 x 256, cluster 1 x 4, KernelTmaWarpSpecialized; ScaledEpilogue and ScaledEpilogueBias.
// Build and test: see sm90_cutlass_gemm.cuh and tests/gpu/test_cutlass_arms.cpp.
#include "sm90_cutlass_gemm.cuh"

namespace qc::cutlass_kernels {

LaunchResult launch_int8_vllm_config1(const ScaledMmArgs& args, bool bias) {
  using namespace cute;
  return detail::launch_int8_vllm<Shape<_64, _128, _256>, Shape<_1, _4, _1>,
                                  cutlass::gemm::KernelTmaWarpSpecialized>(args, bias);
}

}  // namespace qc::cutlass_kernels
