// The `cuda` arm backend: `cuda:mma-<epilogue>` (our INT8 tensor-core kernel with the named
// epilogue fused), `cuda:cublaslt-int8` (cuBLASLt INT8 GEMM + a separate declared epilogue),
// `cuda:cublaslt-fp8` and `cuda:cublaslt-fp8-fastacc` (cuBLASLt FP8 e4m3). See docs/gpu.md.
#pragma once

namespace qc {

void register_cuda_arms();

}  // namespace qc
