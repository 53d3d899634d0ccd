// The `cuda` arm backend: `cuda:mma-<epilogue>` (our INT8 tensor-core kernel with the named
// epilogue fused), `cuda:cublaslt-int8` (cuBLASLt INT8 GEMM + a separate declared epilogue),
// `cuda:cublaslt-fp8` and `cuda:cublaslt-fp8-fastacc` (cuBLASLt FP8 e4m3). See docs/gpu.md.
#pragma once

#include "qconform/epilogue.hpp"
#include "arms/cuda/kernels/kernel_types.hpp"

namespace qc {

void register_cuda_arms();

namespace cuda {
// The kernel formula and bias treatment that implement epilogue `e` for a GEMM of m_rows x n_cols
// (`sglang-sm90` switches order with the shape). QC_INPUT for `exact` (CPU-only).
cuda_kernels::EpilogueFormula formula_for(const Epilogue& e, int64_t m_rows, int64_t n_cols);
cuda_kernels::BiasAdd bias_add_for(const Epilogue& e, bool has_bias);
}  // namespace cuda

}  // namespace qc
