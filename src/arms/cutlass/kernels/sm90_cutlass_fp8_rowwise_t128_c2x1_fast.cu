// PyTorch's sm90 rowwise FP8 kernel, tile 128 x 128 x 128, cluster 2 x 1, fast
// accumulation, both orientations (cutlass_dispatch.hpp, `torch_rowwise_choice`). Build and test:
// see sm90_cutlass_gemm.cuh and tests/gpu/test_cutlass_arms.cpp.
#include "sm90_cutlass_gemm.cuh"
#include "sm90_cutlass_rowwise_instances.cuh"

namespace qc::cutlass_kernels::detail {

LaunchResult launch_rowwise_t128_c2x1_fast(const ScaledMmArgs& args, bool transposed) {
  using Tile = Shape<_128, _128, _128>;
  using Cluster = Shape<_2, _1, _1>;
  if (transposed) return TorchRowwiseGemm<Tile, Cluster, true, true>::launch(args);
  return TorchRowwiseGemm<Tile, Cluster, false, true>::launch(args);
}

}  // namespace qc::cutlass_kernels::detail
