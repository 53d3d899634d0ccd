// Separate epilogue kernel for the cuBLASLt INT8 arm: INT32 accumulator in, bf16 out.
//
// Shapes and layouts: acc [M,N] int32 row-major, sa [M] fp32, sw [N] fp32, bias [N] bf16 or null,
// y [M,N] bf16 row-major; N a multiple of 16. Memory-bound: each thread converts 8 consecutive
// elements (two 16-byte loads of acc, one 16-byte store of y). The formula is the text the fused
// kernel and the CPU emulation compile too (`formula::apply`, include/qconform/epilogue_formula.hpp).
// The second kernel scales an fp32 GEMM result d [M,N] the same way (the FP8 arms' `fp8-scaled`
// row when cuBLASLt cannot apply the outer-vector scales itself).
//
// Test: `make test-gpu` (tests/gpu/test_cuda_arms.cpp, `cuda:cublaslt-int8` and
// `CudaKernels.ScaledEpilogueKernelsEqualTheirRows`).
#include "sm90_int32_scaled_epilogue.cuh"

#include <cstdio>


namespace qc::cuda_kernels {
namespace {

template <EpilogueKind F>
__global__ void int32_scaled_epilogue_kernel(const int32_t* __restrict__ acc, const float* __restrict__ sa,
                                             const float* __restrict__ sw, const uint16_t* __restrict__ bias,
                                             uint16_t* __restrict__ y, int m, int n, BiasMode bias_mode) {
  const bool has_bias = bias != nullptr;
  const int64_t groups = static_cast<int64_t>(m) * (n / 8);
  for (int64_t gi = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; gi < groups;
       gi += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t e = gi * 8;
    const int row = static_cast<int>(e / n);
    const int col = static_cast<int>(e % n);
    const int4 v0 = *reinterpret_cast<const int4*>(acc + e);
    const int4 v1 = *reinterpret_cast<const int4*>(acc + e + 4);
    const int32_t v[8] = {v0.x, v0.y, v0.z, v0.w, v1.x, v1.y, v1.z, v1.w};
    const float s = sa[row];
    uint32_t packed[4];
#pragma unroll
    for (int i = 0; i < 8; i += 2) {
      float b0 = 0.0f, b1 = 0.0f;
      if (has_bias) {
        b0 = formula::bf16_value(bias[col + i]);
        b1 = formula::bf16_value(bias[col + i + 1]);
      }
      const uint32_t lo = formula::apply<F>(v[i], s, sw[col + i], bias_mode, has_bias, b0);
      const uint32_t hi = formula::apply<F>(v[i + 1], s, sw[col + i + 1], bias_mode, has_bias, b1);
      packed[i / 2] = lo | (hi << 16);
    }
    *reinterpret_cast<uint4*>(y + e) = make_uint4(packed[0], packed[1], packed[2], packed[3]);
  }
}

template <EpilogueKind F>
__global__ void f32_scale_to_bf16_kernel(const float* __restrict__ d, const float* __restrict__ sa,
                                         const float* __restrict__ sw, uint16_t* __restrict__ y, int m, int n) {
  const int64_t total = static_cast<int64_t>(m) * n;
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < total;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int row = static_cast<int>(e / n);
    const int col = static_cast<int>(e % n);
    y[e] = formula::apply<F>(d[e], sa[row], sw[col], BiasMode::refuse, /*has_bias=*/false, 0.0f);
  }
}

int grid_for(int64_t work, int threads) {
  int sms = 132;
  int dev = 0;
  if (cudaGetDevice(&dev) == cudaSuccess) cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
  const int64_t blocks = (work + threads - 1) / threads;
  const int64_t cap = static_cast<int64_t>(sms) * 16;
  return static_cast<int>(blocks < cap ? (blocks > 0 ? blocks : 1) : cap);
}

}  // namespace

std::string launch_int32_scaled_epilogue(const int32_t* acc, const float* sa, const float* sw, const uint16_t* bias,
                                         uint16_t* y, int m, int n, EpilogueKind formula, BiasMode bias_mode,
                                         cudaStream_t stream) {
  if (const char* why = launch_formula_error(formula, bias_mode, bias != nullptr))
    return std::string("error: launch_int32_scaled_epilogue: ") + why;
  constexpr int kThreads = 256;
  const int grid = grid_for(static_cast<int64_t>(m) * (n / 8), kThreads);
  formula::visit_kernel_instance(formula, [&](auto kind) {
    int32_scaled_epilogue_kernel<decltype(kind)::value>
        <<<grid, kThreads, 0, stream>>>(acc, sa, sw, bias, y, m, n, bias_mode);
  });
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return std::string("error: launch: ") + cudaGetErrorString(err);
  char buf[160];
  std::snprintf(buf, sizeof buf, "qc::int32_scaled_epilogue_kernel<%s> grid=%d block=%d bias=%s",
                formula::kind_name(formula), grid, kThreads, bias_label(bias_mode, bias != nullptr));
  return buf;
}

std::string launch_f32_scale_to_bf16(const float* d, const float* sa, const float* sw, uint16_t* y, int m, int n,
                                     EpilogueKind formula, cudaStream_t stream) {
  if (const char* why = launch_formula_error(formula, BiasMode::refuse, false))
    return std::string("error: launch_f32_scale_to_bf16: ") + why;
  constexpr int kThreads = 256;
  const int grid = grid_for(static_cast<int64_t>(m) * n, kThreads);
  formula::visit_kernel_instance(formula, [&](auto kind) {
    f32_scale_to_bf16_kernel<decltype(kind)::value><<<grid, kThreads, 0, stream>>>(d, sa, sw, y, m, n);
  });
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return std::string("error: launch: ") + cudaGetErrorString(err);
  // The identity names the scaling order of the instance (the `fp8-scaled` row: sa first, then sw).
  char buf[128];
  std::snprintf(buf, sizeof buf, "qc::f32_scale_to_bf16_kernel (%s) grid=%d block=%d", formula::scale_order(formula),
                grid, kThreads);
  return buf;
}

}  // namespace qc::cuda_kernels
