// Entry point of `gpu_delay.cu`: one block that spins on the GPU's global timer, for the benchmarks
// (bench/cuda_event_timing.hpp): launched before a timed batch, it holds the stream while the host
// queues the batch, so that the batch's kernels run back to back whatever the host's launch rate.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>

namespace qc::cuda_kernels {

// Occupies `stream` for about `ns` nanoseconds. Returns "" or "error: ...".
std::string launch_gpu_delay(uint64_t ns, cudaStream_t stream);

}  // namespace qc::cuda_kernels
