// Host-side helpers shared by the CUDA launchers: the CUDA error check macro, an owning device
// buffer, and the identity strings RunRecords carry.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "qconform/error.hpp"

// `QC_CUDA_CHECK(call)`: a failed CUDA runtime call is an internal error naming the call.
#define QC_CUDA_CHECK(call)                                                                          \
  do {                                                                                               \
    const cudaError_t qc_cuda_err_ = (call);                                                         \
    if (qc_cuda_err_ != cudaSuccess) {                                                               \
      ::qc::detail::throw_error(::qc::ErrorKind::internal, __FILE__, __LINE__, #call,                \
                                ::fmt::format("CUDA error {}: {}", cudaGetErrorName(qc_cuda_err_),   \
                                              cudaGetErrorString(qc_cuda_err_)));                    \
    }                                                                                                \
  } while (0)

#define QC_CUBLAS_CHECK(call)                                                                        \
  do {                                                                                               \
    const cublasStatus_t qc_cublas_st_ = (call);                                                     \
    if (qc_cublas_st_ != CUBLAS_STATUS_SUCCESS) {                                                    \
      ::qc::detail::throw_error(::qc::ErrorKind::internal, __FILE__, __LINE__, #call,                \
                                ::fmt::format("cuBLAS status {}", static_cast<int>(qc_cublas_st_))); \
    }                                                                                                \
  } while (0)

namespace qc::cuda {

// A launcher returns the launched kernel's identity, or a string starting with "error:".
std::string checked_launch(std::string identity, const char* what);

// Owning device allocation of `count` elements of T.
template <typename T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t count) : count_(count) {
    if (count > 0) QC_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&ptr_), count * sizeof(T)));
  }
  explicit DeviceBuffer(std::span<const T> host) : DeviceBuffer(host.size()) {
    if (!host.empty()) QC_CUDA_CHECK(cudaMemcpy(ptr_, host.data(), host.size_bytes(), cudaMemcpyHostToDevice));
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(o.ptr_), count_(o.count_) { o.ptr_ = nullptr, o.count_ = 0; }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      reset();
      ptr_ = o.ptr_, count_ = o.count_;
      o.ptr_ = nullptr, o.count_ = 0;
    }
    return *this;
  }
  ~DeviceBuffer() { reset(); }
  void reset() {
    if (ptr_ != nullptr) cudaFree(ptr_);
    ptr_ = nullptr, count_ = 0;
  }
  T* get() const { return ptr_; }
  size_t size() const { return count_; }
  // The first `count` elements (all of them by default).
  std::vector<T> to_host(size_t count = SIZE_MAX) const {
    std::vector<T> out(std::min(count, count_));
    if (!out.empty()) QC_CUDA_CHECK(cudaMemcpy(out.data(), ptr_, out.size() * sizeof(T), cudaMemcpyDeviceToHost));
    return out;
  }

 private:
  T* ptr_ = nullptr;
  size_t count_ = 0;
};

// A device allocation kept across calls (an arm's per-layer buffers): grows when a call needs more,
// never shrinks, so a verify of hundreds of layers does not allocate and free for every run.
template <typename T>
class DeviceScratch {
 public:
  T* reserve(size_t count) {
    if (buffer_.size() < count) {
      buffer_.reset();  // free before allocating the larger one
      buffer_ = DeviceBuffer<T>(count);
    }
    return buffer_.get();
  }
  void upload(std::span<const T> host) {
    T* d = reserve(host.size());
    if (!host.empty()) QC_CUDA_CHECK(cudaMemcpy(d, host.data(), host.size_bytes(), cudaMemcpyHostToDevice));
  }
  // `count` elements filled with 0xFF bytes (bf16 NaN, int32 -1), so an output element a kernel
  // forgot to write cannot keep a plausible value from an earlier run.
  void poison(size_t count) {
    T* d = reserve(count);
    if (count > 0) QC_CUDA_CHECK(cudaMemset(d, 0xFF, count * sizeof(T)));
  }
  T* get() const { return buffer_.get(); }
  void release() { buffer_.reset(); }
  std::vector<T> download(size_t count) const { return buffer_.to_host(count); }

 private:
  DeviceBuffer<T> buffer_;
};

// Throws QC_INPUT naming `who` when no usable device is present.
void require_device(const std::string& who);
// "NVIDIA H200 (sm_90, 132 SMs), driver 13.0, CUDA runtime 13.0" (queried once per device: the
// properties query costs milliseconds and every run records it).
std::string device_description();
// "cuBLASLt 130100 (header 130100)".
std::string cublaslt_description();
// "nvcc 13.0 --fmad=false -O3 sm_90" (what the kernels were built with).
std::string kernel_build_description();

}  // namespace qc::cuda
