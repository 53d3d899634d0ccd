// Entry point of `sha256_leaves.cu`: SHA-256 of consecutive fixed-size leaves of device memory,
// one thread per leaf.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>

namespace qc::cuda_kernels {

inline constexpr uint64_t kSha256LeafBytes = 4096;

// SHA-256 of each of `leaves` consecutive 4096-byte leaves starting at `data` (device memory, any
// alignment: `data` may be at an odd address), 32 digest bytes per leaf in the standard (big-endian)
// byte order into out[32*i .. 32*i+31] (device, any alignment). Enqueued on `stream`. Reads no byte
// outside data[0 .. 4096*leaves) and writes none outside out[0 .. 32*leaves). `leaves` == 0 launches
// nothing. Returns a description of the launch, or "error: ...".
std::string launch_sha256_leaves(const unsigned char* data, uint64_t leaves, unsigned char* out, cudaStream_t stream);

}  // namespace qc::cuda_kernels
