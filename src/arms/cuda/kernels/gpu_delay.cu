#include "gpu_delay.cuh"

namespace qc::cuda_kernels {
namespace {

__device__ __forceinline__ uint64_t global_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__global__ void gpu_delay_kernel(uint64_t ns) {
  const uint64_t start = global_ns();
  while (global_ns() - start < ns) __nanosleep(1000);
}

}  // namespace

std::string launch_gpu_delay(uint64_t ns, cudaStream_t stream) {
  gpu_delay_kernel<<<1, 1, 0, stream>>>(ns);
  const cudaError_t err = cudaGetLastError();
  return err == cudaSuccess ? "" : std::string("error: gpu_delay: ") + cudaGetErrorString(err);
}

}  // namespace qc::cuda_kernels
