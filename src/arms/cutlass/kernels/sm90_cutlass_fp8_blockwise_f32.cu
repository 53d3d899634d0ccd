// CUTLASS's sm90 blockwise-scaled FP8 GEMM, the fp32 accumulator D out (sm90_cutlass_fp8_blockwise.cuh):
// the same mainloop as the bf16 instance, so that the arm exposes D. Test: tests/gpu/test_cuda_fp8_block.cpp.
#include "sm90_cutlass_fp8_blockwise.cuh"

namespace qc::cutlass_kernels {

LaunchResult launch_fp8_blockwise_f32(const BlockwiseArgs& args) {
  return detail::BlockwiseGemm<float>::launch(args, args.d);
}

}  // namespace qc::cutlass_kernels
