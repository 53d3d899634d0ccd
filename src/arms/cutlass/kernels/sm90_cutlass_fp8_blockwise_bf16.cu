// CUTLASS's sm90 blockwise-scaled FP8 GEMM, bf16 out (sm90_cutlass_fp8_blockwise.cuh). Test:
// tests/gpu/test_cuda_fp8_block.cpp.
#include "sm90_cutlass_fp8_blockwise.cuh"

namespace qc::cutlass_kernels {

LaunchResult launch_fp8_blockwise_bf16(const BlockwiseArgs& args) {
  return detail::BlockwiseGemm<cutlass::bfloat16_t>::launch(args, reinterpret_cast<cutlass::bfloat16_t*>(args.y));
}

}  // namespace qc::cutlass_kernels
