// PyTorch's sm90 rowwise FP8 kernel, tile 64 x 128 x 128, cluster 2 x 1, default
// accumulation, both orientations (cutlass_dispatch.hpp, `torch_rowwise_choice`). Build and test:
// see sm90_cutlass_gemm.cuh and tests/gpu/test_cutlass_arms.cpp.
#include "sm90_cutlass_gemm.cuh"
#include "sm90_cutlass_rowwise_instances.cuh"

namespace qc::cutlass_kernels::detail {

LaunchResult launch_rowwise_t64_c2x1_default(const ScaledMmArgs& args, bool transposed) {
  using Tile = Shape<_64, _128, _128>;
  using Cluster = Shape<_2, _1, _1>;
  if (transposed) return TorchRowwiseGemm<Tile, Cluster, true, false>::launch(args);
  return TorchRowwiseGemm<Tile, Cluster, false, false>::launch(args);
}

}  // namespace qc::cutlass_kernels::detail
