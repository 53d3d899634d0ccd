// Bitwise and ordered-ulp comparison of two bf16 arrays on the GPU (the `verify` hot loop).
//
// Shapes and layouts: a [n], b [n] bf16 bit patterns, 16-byte aligned device arrays. Memory-bound
// by design: every thread streams 16-byte vectors of both arrays (two vectors of each in flight),
// counts in registers, and only differing pairs touch the shared-memory histogram. Non-finite
// values are sorted out before any distance is computed: a NaN is never "close".
// The ordered distance is the numeric core's (include/qconform/numerics.hpp, `bf16_ordered_distance`,
// the same function the CPU comparison calls): a bf16 maps to a signed integer (negative values
// mirrored below +0), so +0 and -0 are at distance 0 (counted as a bitwise difference in bucket 0)
// and adjacent finite values are at distance 1.
//
// Test: `make test-gpu` (tests/gpu/test_cuda_compare.cpp checks it against a CPU loop, and the
// benchmark reports GB/s against a cudaMemcpy device-to-device copy).
#include "sm90_compare_bf16.cuh"
#include "warp_reduce.cuh"

#include "qconform/numerics.hpp"

namespace qc::cuda_kernels {
namespace {

struct Local {
  unsigned long long bitwise = 0, finite = 0, nonfinite = 0, max_ulp = 0, first = ~0ull;
};

__device__ __forceinline__ void compare_one(uint32_t x, uint32_t y, unsigned long long index, Local& l,
                                            unsigned long long* hist) {
  if (x == y) return;
  l.bitwise++;
  if (index < l.first) l.first = index;
  if (!bf16_is_finite(static_cast<uint16_t>(x)) || !bf16_is_finite(static_cast<uint16_t>(y))) {
    l.nonfinite++;
    return;
  }
  l.finite++;
  const uint32_t ad = bf16_ordered_distance(static_cast<uint16_t>(x), static_cast<uint16_t>(y));
  if (ad > l.max_ulp) l.max_ulp = ad;
  const int bucket = ad == 0 ? 0 : 32 - __clz(ad);
  atomicAdd(&hist[bucket < kUlpBuckets ? bucket : kUlpBuckets - 1], 1ull);
}

__device__ __forceinline__ void compare_vec(const uint4& va, const uint4& vb, unsigned long long base, Local& l,
                                            unsigned long long* hist) {
  const uint32_t wa[4] = {va.x, va.y, va.z, va.w};
  const uint32_t wb[4] = {vb.x, vb.y, vb.z, vb.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    if (wa[i] == wb[i]) continue;  // the common case: two equal elements at once
    compare_one(wa[i] & 0xFFFFu, wb[i] & 0xFFFFu, base + 2 * i, l, hist);
    compare_one(wa[i] >> 16, wb[i] >> 16, base + 2 * i + 1, l, hist);
  }
}

__global__ void __launch_bounds__(256) compare_bf16_kernel(const uint16_t* __restrict__ a,
                                                           const uint16_t* __restrict__ b, int64_t n,
                                                           Bf16CompareCounts* out) {
  __shared__ unsigned long long hist[kUlpBuckets];
  if (threadIdx.x < kUlpBuckets) hist[threadIdx.x] = 0;
  __syncthreads();

  Local l;
  const int64_t vecs = n / 8;
  const uint4* va = reinterpret_cast<const uint4*>(a);
  const uint4* vb = reinterpret_cast<const uint4*>(b);
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  int64_t v = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  // Two independent 16-byte loads of each array in flight per thread.
  for (; v + stride < vecs; v += 2 * stride) {
    const uint4 a0 = __ldcs(va + v), b0 = __ldcs(vb + v);
    const uint4 a1 = __ldcs(va + v + stride), b1 = __ldcs(vb + v + stride);
    compare_vec(a0, b0, static_cast<unsigned long long>(v) * 8, l, hist);
    compare_vec(a1, b1, static_cast<unsigned long long>(v + stride) * 8, l, hist);
  }
  for (; v < vecs; v += stride) compare_vec(__ldcs(va + v), __ldcs(vb + v), static_cast<unsigned long long>(v) * 8, l, hist);
  // The tail (n not a multiple of 8), one element per thread of the first block.
  if (blockIdx.x == 0) {
    for (int64_t i = vecs * 8 + threadIdx.x; i < n; i += blockDim.x) compare_one(a[i], b[i], i, l, hist);
  }

  const unsigned long long bitwise = warp_sum(l.bitwise);
  const unsigned long long finite = warp_sum(l.finite);
  const unsigned long long nonfinite = warp_sum(l.nonfinite);
  const unsigned long long max_ulp = warp_max(l.max_ulp);
  const unsigned long long first = warp_min(l.first);
  if ((threadIdx.x & 31) == 0 && bitwise != 0) {
    atomicAdd(&out->bitwise_diff, bitwise);
    atomicAdd(&out->finite_diff, finite);
    atomicAdd(&out->nonfinite_mismatch, nonfinite);
    atomicMax(&out->max_ulp, max_ulp);
    atomicMin(&out->first_diff, first);
  }
  __syncthreads();
  if (threadIdx.x < kUlpBuckets && hist[threadIdx.x] != 0) atomicAdd(&out->ulp_hist[threadIdx.x], hist[threadIdx.x]);
  if (blockIdx.x == 0 && threadIdx.x == 0) out->elements = static_cast<unsigned long long>(n);
}

}  // namespace

std::string launch_compare_bf16(const uint16_t* a, const uint16_t* b, int64_t n, Bf16CompareCounts* out,
                                cudaStream_t stream) {
  if ((reinterpret_cast<uintptr_t>(a) | reinterpret_cast<uintptr_t>(b)) & 15u) {
    return "error: compare_bf16 needs 16-byte aligned arrays";
  }
  int sms = 132, dev = 0;
  if (cudaGetDevice(&dev) == cudaSuccess) cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
  constexpr int kThreads = 256;
  const int64_t want = (n / 8 + kThreads - 1) / kThreads;
  const int grid = static_cast<int>(want < sms * 8 ? (want > 0 ? want : 1) : sms * 8);
  compare_bf16_kernel<<<grid, kThreads, 0, stream>>>(a, b, n, out);
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return std::string("error: launch: ") + cudaGetErrorString(err);
  return "qc::compare_bf16_kernel grid=" + std::to_string(grid) + " block=256";
}

}  // namespace qc::cuda_kernels
