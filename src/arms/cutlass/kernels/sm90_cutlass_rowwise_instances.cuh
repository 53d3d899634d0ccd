// The FP8 rowwise instances, one translation unit each (sm90_cutlass_fp8_rowwise_t*_c*_*.cu, which
// cmake/cutlass.cmake generates from sm90_cutlass_fp8_rowwise_instance.cu.in), as the
// dispatcher (sm90_cutlass_dispatch.cu) calls them. `transposed`: launch Dᵀ = W·Xᵀ.
#pragma once

#include "sm90_cutlass_scaled_mm.cuh"

namespace qc::cutlass_kernels::detail {

LaunchResult launch_rowwise_t64_c1x2_default(const ScaledMmArgs& args, bool transposed);
LaunchResult launch_rowwise_t64_c2x1_default(const ScaledMmArgs& args, bool transposed);
LaunchResult launch_rowwise_t128_c1x2_default(const ScaledMmArgs& args, bool transposed);
LaunchResult launch_rowwise_t128_c2x1_default(const ScaledMmArgs& args, bool transposed);
LaunchResult launch_rowwise_t64_c1x2_fast(const ScaledMmArgs& args, bool transposed);
LaunchResult launch_rowwise_t64_c2x1_fast(const ScaledMmArgs& args, bool transposed);
LaunchResult launch_rowwise_t128_c1x2_fast(const ScaledMmArgs& args, bool transposed);
LaunchResult launch_rowwise_t128_c2x1_fast(const ScaledMmArgs& args, bool transposed);

}  // namespace qc::cutlass_kernels::detail
