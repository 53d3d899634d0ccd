// vLLM's sm90 INT8 configuration `M128` (cutlass_dispatch.hpp, kInt8ConfigTable[3]): tile
// 64 x 128 x 128, cluster 2 x 1, KernelTmaWarpSpecializedPingpong; ScaledEpilogue and ScaledEpilogueBias.
// Build and test: see sm90_cutlass_gemm.cuh and tests/gpu/test_cutlass_arms.cpp.
#include "sm90_cutlass_gemm.cuh"

namespace qc::cutlass_kernels {

LaunchResult launch_int8_vllm_config3(const ScaledMmArgs& args, bool bias) {
  using namespace cute;
  return detail::launch_int8_vllm<Shape<_64, _128, _128>, Shape<_2, _1, _1>,
                                  cutlass::gemm::KernelTmaWarpSpecializedPingpong>(args, bias);
}

}  // namespace qc::cutlass_kernels
