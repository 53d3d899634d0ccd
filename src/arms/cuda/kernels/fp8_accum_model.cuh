// Entry point of `fp8_accum_model.cu`: any FP8 accumulation model evaluated on the GPU.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "qconform/accumulation.hpp"

namespace qc::cuda_kernels {

// A fp32 evaluation cut into launches over K (`accum_fp32::run_steps`), each running `k_per_launch` terms
// of every output (rounded up to a multiple of the step; 0: one launch over K), so that each of its
// blocks holds a multiprocessor for a short while and kernels of a stream of higher priority get one
// soon (verify's runs beside the next layer's models: docs/gpu.md). `state` (3 floats per model and
// output, device memory) carries the chains from one launch to the next. The outputs are the same bit for
// bit however K is cut.
struct ModelLaunches {
  int64_t k_per_launch = 0;
  float* state = nullptr;
  // The floats `state` must hold for `models` models over m x n outputs.
  static size_t state_floats(int models, int64_t m, int64_t n) { return static_cast<size_t>(3 * models * m * n); }
};

// d[m,n] = accum_model::evaluate(model, a[m,:], fa, w[n,:], fw, k) bit for bit: through the fp32
// stepped evaluation (src/accum/fp8_model_fp32.hpp) where `allow_fp32` and the model is one it takes
// (`accum_fp32::gpu_kernel_takes`), else the fp64 per-output evaluation (src/accum/fp8_model_fp64.hpp)
// where the model has one, else (or with `reference_kernel`) the text of
// include/qconform/accumulation.hpp compiled for the device. a [m,k], w [n,k] FP8 codes row-major (finite: the caller validates), `w_t` scratch of
// n·k bytes (w transposed there), d [m,n] fp32; device pointers. Returns the kernel's identity.
std::string launch_fp8_accum_model(const Fp8AccumModel& model, const uint8_t* a, Fp8Format fa, const uint8_t* w,
                                   Fp8Format fw, uint8_t* w_t, float* d, int m, int n, int64_t k, bool allow_fp32,
                                   bool reference_kernel, cudaStream_t stream, const ModelLaunches& launches = {});

// True when `first` and `second` run the same steps (accum_fp32::same_steps: they differ at most in their
// promotion) and the fp32 kernel takes both at this k: `launch_fp8_accum_model_pair` evaluates them in one
// pass over the products.
bool fp8_accum_models_share_steps(const Fp8AccumModel& first, const Fp8AccumModel& second, int64_t k);

// d_first and d_second as `launch_fp8_accum_model` makes them for `first` and `second` (bit for bit the same:
// the same text, each chain's arithmetic unchanged), in one launch whose products, exponents and staging the
// two share. Only where fp8_accum_models_share_steps; otherwise returns "error: ...".
std::string launch_fp8_accum_model_pair(const Fp8AccumModel& first, const Fp8AccumModel& second, const uint8_t* a,
                                        Fp8Format fa, const uint8_t* w, Fp8Format fw, float* d_first, float* d_second,
                                        int m, int n, int64_t k, cudaStream_t stream, const ModelLaunches& launches = {});

}  // namespace qc::cuda_kernels
