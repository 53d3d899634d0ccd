// The FP8 entry points of the CUTLASS kernels: the rowwise instance an index names, and the
// identity-epilogue accumulator (sm90_cutlass_scaled_mm.cuh).
#include "sm90_cutlass_gemm.cuh"
#include "sm90_cutlass_rowwise_instances.cuh"

namespace qc::cutlass_kernels {

LaunchResult launch_fp8_rowwise(const ScaledMmArgs& args, int index, bool fast) {
  using Launch = LaunchResult (*)(const ScaledMmArgs&, bool);
  // Index: tile128 * 4 + cluster2x1 * 2 + transposed (cutlass_dispatch.hpp, `rowwise_index`).
  static constexpr Launch kDefault[4] = {detail::launch_rowwise_t64_c1x2_default, detail::launch_rowwise_t64_c2x1_default,
                                         detail::launch_rowwise_t128_c1x2_default, detail::launch_rowwise_t128_c2x1_default};
  static constexpr Launch kFast[4] = {detail::launch_rowwise_t64_c1x2_fast, detail::launch_rowwise_t64_c2x1_fast,
                                      detail::launch_rowwise_t128_c1x2_fast, detail::launch_rowwise_t128_c2x1_fast};
  if (index < 0 || index >= 8) return LaunchResult{"no such rowwise instance"};
  return (fast ? kFast : kDefault)[index / 2](args, (index & 1) != 0);
}

LaunchResult launch_fp8_accumulate(const ScaledMmArgs& args, bool fast) {
  if (fast) return detail::RowwiseAccumulate<true>::launch(args);
  return detail::RowwiseAccumulate<false>::launch(args);
}

}  // namespace qc::cutlass_kernels
