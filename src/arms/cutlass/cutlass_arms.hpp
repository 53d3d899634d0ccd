// The CUTLASS arms: real CUTLASS 3.x kernels (collective builders, sm90a) in the `cuda` backend's
// namespace, `cuda:cutlass-<variant>`. Present only in a build with CUDA and CUTLASS's headers
// (QCONFORM_WITH_CUTLASS, docs/gpu.md); otherwise `cutlass_arm_variants` is empty and
// `make_cutlass_arm` refuses with the reason the build recorded.
//
//   cuda:cutlass-int8-vllm-cutlass      vLLM's sm90 INT8 kernels and M-bucket dispatch, ScaledEpilogue
//   cuda:cutlass-int8-vllm-cutlass-fma  the same; with a bias ScaledEpilogueBias (multiply_add -> FFMA)
//   cuda:cutlass-fp8-rowwise[-fastacc]  PyTorch's sm90 f8f8bf16_rowwise kernels and dispatch
//   cuda:cutlass-fp8-blockwise          CUTLASS's sm90 blockwise-scaled FP8 mainloop (1x128 x 128x128 scales)
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "qconform/arm.hpp"

namespace qc {

// The variants (without the `cuda:` prefix), empty in a build without CUTLASS.
std::vector<std::string> cutlass_arm_variants();
// True for a `cutlass-...` variant name, whether or not this build has CUTLASS.
bool is_cutlass_variant(std::string_view variant);
// The arm for `variant` (`is_cutlass_variant`); QC_INPUT when this build has no CUTLASS (naming why)
// or the variant is unknown.
std::unique_ptr<Arm> make_cutlass_arm(std::string_view variant);
// "CUTLASS 4.2.0 (<include dir>)", or why this build has none.
std::string cutlass_description();

}  // namespace qc
