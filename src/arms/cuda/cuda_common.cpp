// Host-side CUDA helpers: availability, device and library identity strings.
#include "arms/cuda/cuda_common.hpp"

#include <fmt/format.h>

#include <future>
#include <map>
#include <mutex>

#include "arms/cuda/cuda.hpp"

namespace qc {
namespace cuda {

std::string checked_launch(std::string identity, const char* what) {
  if (identity.rfind("error:", 0) == 0) QC_FAIL("{}: {}", what, identity);
  return identity;
}

void require_device(const std::string& who) {
  std::string reason;
  QC_INPUT(cuda_available(&reason), "{}: needs a CUDA device: {}", who, reason);
}

std::string device_description() {
  static std::mutex mu;
  static std::map<int, std::string> known;
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) return "unknown GPU";
  std::lock_guard lock(mu);
  auto it = known.find(dev);
  if (it != known.end()) return it->second;
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, dev) != cudaSuccess) return "unknown GPU";
  int driver = 0, runtime = 0;
  cudaDriverGetVersion(&driver);
  cudaRuntimeGetVersion(&runtime);
  return known[dev] = fmt::format("{} (sm_{}{}, {} SMs, {} MiB), driver API {}.{}, CUDA runtime {}.{}", prop.name,
                                  prop.major, prop.minor, prop.multiProcessorCount, prop.totalGlobalMem >> 20,
                                  driver / 1000, (driver % 1000) / 10, runtime / 1000, (runtime % 1000) / 10);
}

std::string cublaslt_description() {
  return fmt::format("cuBLASLt {} (headers {}), CUDA runtime {}", cublasLtGetVersion(), CUBLAS_VERSION,
                     cublasLtGetCudartVersion());
}

std::string kernel_build_description() {
  return fmt::format("nvcc {}.{}, --fmad=false, explicit __fmul_rn/__fadd_rn/__fmaf_rn, sm_90", CUDART_VERSION / 1000,
                     (CUDART_VERSION % 1000) / 10);
}

}  // namespace cuda

bool cuda_available(std::string* reason) {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    if (reason != nullptr) *reason = fmt::format("cudaGetDeviceCount failed: {}", cudaGetErrorString(err));
    cudaGetLastError();  // clear the sticky-free error so later calls start clean
    return false;
  }
  if (count == 0) {
    if (reason != nullptr) *reason = "cudaGetDeviceCount: 0 devices";
    return false;
  }
  if (reason != nullptr) reason->clear();
  return true;
}

std::string cuda_device_description() { return cuda::device_description(); }

void start_cuda_early() {
  // A static future: its destructor (at exit) waits for the thread, which never outlives the driver.
  static std::future<void> started = std::async(std::launch::async, [] {
    int count = 0;
    if (cudaGetDeviceCount(&count) == cudaSuccess && count > 0) cudaFree(nullptr);
    cudaGetLastError();  // this thread's error state; the first real use reports its own
  });
}

}  // namespace qc
