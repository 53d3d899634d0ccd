// verify's element pass on the device (verify_pass.cuh), the near-zero limit and C3's byte comparison.
//
// The element pass: one block per stretch of up to 2048 columns of one row, 8 consecutive elements per
// thread (16-byte loads of each bf16 array, two of each int32 array). Every step is the host's, in the
// host's words (compare.cpp `add_pair`, element_pass.cpp `pass_rows`), over the numeric core's
// functions (classification, the ordered distance) and the formula text's C5 jurisdiction, so that
// both compilations count the same elements; fp64 arithmetic is IEEE (one rounding per operation,
// --fmad=false) on both. Counts go to registers, then a warp sum, then the block's shared counters,
// then one atomic per counter and block; the per-row counts of a block go to its row.
//
// Test: tests/gpu/test_gpu_verify_pass.cpp (the pass against the host's, field for field, on random and
// designed outputs: NaN, inf, signed zeros, subnormals, far ulp distances, power-of-two exclusions).
#include "verify_pass.cuh"
#include "warp_reduce.cuh"

#include "qconform/epilogue_formula.hpp"  // pow2_in_jurisdiction
#include "qconform/numerics.hpp"

namespace qc::cuda_kernels {
namespace {

constexpr int kThreads = 256;
constexpr int kPerThread = 8;
constexpr int kColsPerBlock = kThreads * kPerThread;
constexpr int64_t kFp32ExactInt = int64_t{1} << 24;  // kFp32ExactIntLimit: |acc| above it may not convert exactly

struct Local {
  unsigned count[kPassCounters] = {};
  unsigned equal_finite = 0;  // small_hist[0] of the equal pairs, added once per thread
  unsigned long long max_ulp = 0, max_rel_bits = 0, near_zero_max_abs_bits = 0;
};

__device__ __forceinline__ void count_class(uint16_t b, unsigned& nan, unsigned& inf, unsigned& subnormal) {
  const FpClass c = classify_bf16(b);
  nan += c == FpClass::nan;
  inf += c == FpClass::inf;
  subnormal += c == FpClass::subnormal;
}

// compare.cpp's `add_pair` for x (arm A, the reference side for near zero) and z (arm B), its lists
// aside: the pair's classes, then an equal finite pair or a differing pair.
__device__ __forceinline__ void compare_pair(uint16_t x, uint16_t z, uint16_t near_bits, Local& l,
                                             unsigned long long* small_hist, unsigned long long* large_hist) {
  count_class(x, l.count[kNanA], l.count[kInfA], l.count[kSubnormalA]);
  count_class(z, l.count[kNanB], l.count[kInfB], l.count[kSubnormalB]);
  const bool finite = bf16_is_finite(x) && bf16_is_finite(z);
  l.count[kNonfinitePairs] += !finite;
  const uint16_t mag = x & 0x7FFFu;
  const bool near = mag < near_bits || mag == 0;  // |x| < near_zero, or x == 0
  if (x == z) {
    if (bf16_is_finite(x)) {
      ++l.count[kFinitePairs];
      ++l.equal_finite;
      l.count[kNearZero] += near;
    }
    return;
  }
  ++l.count[kBitwiseDiff];
  if ((x & 0x7FFFu) == 0 && (z & 0x7FFFu) == 0) ++l.count[kSignedZeroDiff];
  if (!finite) {
    ++l.count[kNonfiniteDiff];
    return;
  }
  ++l.count[kFinitePairs];
  const unsigned long long ulp = bf16_ordered_distance(x, z);
  if (ulp < kSmallUlps) {
    atomicAdd(&small_hist[ulp], 1ull);
  } else {
    ++l.count[kLargeUlps];
    atomicAdd(&large_hist[ulp], 1ull);
  }
  l.max_ulp = max(l.max_ulp, ulp);
  const double xv = bf16_to_f32(x), zv = bf16_to_f32(z);
  const double diff = fabs(xv - zv);
  if (near) {
    ++l.count[kNearZero];
    ++l.count[kNearZeroDiff];
    l.near_zero_max_abs_bits = max(l.near_zero_max_abs_bits, static_cast<unsigned long long>(f64_bits(diff)));
  } else {
    l.max_rel_bits = max(l.max_rel_bits, static_cast<unsigned long long>(f64_bits(diff / fabs(xv))));
  }
}

template <int N, typename T, typename V>
__device__ __forceinline__ void load(const T* p, T (&out)[N]) {
  static_assert(sizeof(T) * N % sizeof(V) == 0);
  constexpr int kVecs = sizeof(T) * N / sizeof(V);
  const V* v = reinterpret_cast<const V*>(p);
#pragma unroll
  for (int i = 0; i < kVecs; ++i) reinterpret_cast<V*>(out)[i] = v[i];
}

// What one block of an element pass counts in shared memory (the small ulp histogram, the counters,
// the maxima, its row's counts) and where in the run it is: one row, a stretch of its columns, 8 per
// thread. `finish` adds a thread's counts to the block's, then the block's to the run's, one atomic each.
struct BlockPass {
  unsigned long long small_hist[kSmallUlps];
  unsigned long long counts[kPassCounters];
  unsigned long long maxima[3];
  unsigned row_local[kRowCounters];

  __device__ void start() {
    if (threadIdx.x < kSmallUlps) small_hist[threadIdx.x] = 0;
    if (threadIdx.x < kPassCounters) counts[threadIdx.x] = 0;
    if (threadIdx.x < 3) maxima[threadIdx.x] = 0;
    if (threadIdx.x < kRowCounters) row_local[threadIdx.x] = 0;
    __syncthreads();
  }
  // The block's row, and the first of the thread's 8 columns.
  __device__ static int row(int n) { return static_cast<int>(blockIdx.x / ((n + kColsPerBlock - 1) / kColsPerBlock)); }
  __device__ static int col0(int n) {
    return static_cast<int>(blockIdx.x % ((n + kColsPerBlock - 1) / kColsPerBlock)) * kColsPerBlock + threadIdx.x * kPerThread;
  }

  // `row_counts`: this block's row's counts in the run's [m, kRowCounters].
  __device__ void finish(const Local& l, const unsigned (&rows)[kRowCounters], PassCounts* out, unsigned* row_counts) {
    for (int c = 0; c < kRowCounters; ++c) {
      if (rows[c] != 0) atomicAdd(&row_local[c], rows[c]);
    }
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int c = 0; c < kPassCounters; ++c) {
      const unsigned long long v = warp_sum(l.count[c]);
      if (lane == 0 && v != 0) atomicAdd(&counts[c], v);
    }
    const unsigned long long eq = warp_sum(l.equal_finite);
    if (lane == 0 && eq != 0) atomicAdd(&small_hist[0], eq);
    const unsigned long long m[3] = {warp_max(l.max_ulp), warp_max(l.max_rel_bits), warp_max(l.near_zero_max_abs_bits)};
    if (lane == 0) {
      for (int i = 0; i < 3; ++i) {
        if (m[i] != 0) atomicMax(&maxima[i], m[i]);
      }
    }
    __syncthreads();
    if (threadIdx.x < kPassCounters && counts[threadIdx.x] != 0) atomicAdd(&out->count[threadIdx.x], counts[threadIdx.x]);
    if (threadIdx.x < kSmallUlps && small_hist[threadIdx.x] != 0) {
      atomicAdd(&out->small_hist[threadIdx.x], small_hist[threadIdx.x]);
    }
    if (threadIdx.x == 0) {
      if (maxima[0] != 0) atomicMax(&out->max_ulp, maxima[0]);
      if (maxima[1] != 0) atomicMax(&out->max_rel_bits, maxima[1]);
      if (maxima[2] != 0) atomicMax(&out->near_zero_max_abs_bits, maxima[2]);
    }
    if (threadIdx.x < kRowCounters && row_local[threadIdx.x] != 0) atomicAdd(&row_counts[threadIdx.x], row_local[threadIdx.x]);
  }
};

// element_pass.cpp's `pass_rows` (INT8), its lists aside: per element the comparison, each exposed
// accumulator against the exact one (C4, C2's part two), each declared formula against its arm (C6),
// the predicted difference against the observed one, and under power-of-two scales C5's jurisdiction
// and violations.
__global__ void __launch_bounds__(kThreads) int8_pass_kernel(Int8PassArgs p, PassCounts* out,
                                                             unsigned long long* large_hist, unsigned* row_counts) {
  __shared__ BlockPass block;
  block.start();
  const int row = BlockPass::row(p.n), col0 = BlockPass::col0(p.n);
  const uint16_t near_bits = *p.near_bits;
  Local l;
  unsigned rows[kRowCounters] = {};
  if (col0 < p.n) {
    const int64_t i0 = static_cast<int64_t>(row) * p.n + col0;
    uint16_t y[2][kPerThread], f[2][kPerThread];
    int32_t want[kPerThread], acc[2][kPerThread];
    load<kPerThread, uint16_t, uint4>(p.y[0] + i0, y[0]);
    load<kPerThread, uint16_t, uint4>(p.y[1] + i0, y[1]);
    load<kPerThread, int32_t, int4>(p.exact + i0, want);
    for (int s = 0; s < 2; ++s) {
      if (p.acc[s] != nullptr) load<kPerThread, int32_t, int4>(p.acc[s] + i0, acc[s]);
      if (p.f[s] != nullptr) load<kPerThread, uint16_t, uint4>(p.f[s] + i0, f[s]);
    }
    const float sa = p.sa[row];
#pragma unroll
    for (int e = 0; e < kPerThread; ++e) {
      const uint16_t x = y[0][e], z = y[1][e];
      compare_pair(x, z, near_bits, l, block.small_hist, large_hist);
      rows[kRowDiff] += x != z;
      for (int s = 0; s < 2; ++s) {
        if (p.acc[s] != nullptr) {
          const int64_t got = acc[s][e];
          const bool off = got != want[e];
          l.count[kAccMismatchA + s] += off;
          rows[kRowAcc] += off;
          l.count[kSafeContradicted] += p.safe && (got < 0 ? -got : got) > kFp32ExactInt;
        }
        if (p.f[s] != nullptr) {
          const bool off = f[s][e] != y[s][e];
          l.count[kFormulaMismatchA + s] += off;
          rows[kRowFormula] += off;
        }
      }
      if (p.f[0] != nullptr && p.f[1] != nullptr) {
        const bool predicted = f[0][e] != f[1][e];
        const bool wrong = predicted != (x != z);
        l.count[kPredictedDiff] += predicted;
        l.count[kPredictedVsObserved] += wrong;
        rows[kRowPredicted] += predicted;
        rows[kRowPredictedVsObserved] += wrong;
      }
      if (p.pow2) {
        if (!pow2_in_jurisdiction(want[e], sa, p.sw[col0 + e])) {
          ++l.count[kPow2Excluded];
        } else if (x != z) {
          ++l.count[kPow2Violations];
          ++rows[kRowPow2];
        }
      }
    }
  }
  block.finish(l, rows, out, row_counts + static_cast<int64_t>(row) * kRowCounters);
}

// element_pass.cpp's FP8 steps (`fp8_output_element`), its lists aside: per element the comparison, each
// modelled arm against its model + epilogue, and with both modelled the predicted difference against the
// observed one, the two models' accumulators, and under power-of-two scales a difference where those agree.
__global__ void __launch_bounds__(kThreads) fp8_pass_kernel(Fp8PassArgs p, PassCounts* out,
                                                            unsigned long long* large_hist, unsigned* row_counts) {
  __shared__ BlockPass block;
  block.start();
  const int row = BlockPass::row(p.n), col0 = BlockPass::col0(p.n);
  const uint16_t near_bits = *p.near_bits;
  const bool both = p.want[0] != nullptr && p.want[1] != nullptr;
  Local l;
  unsigned rows[kRowCounters] = {};
  if (col0 < p.n) {
    const int64_t i0 = static_cast<int64_t>(row) * p.n + col0;
    uint16_t y[2][kPerThread], want[2][kPerThread];
    float key[2][kPerThread];
    load<kPerThread, uint16_t, uint4>(p.y[0] + i0, y[0]);
    load<kPerThread, uint16_t, uint4>(p.y[1] + i0, y[1]);
    for (int s = 0; s < 2; ++s) {
      if (p.want[s] != nullptr) load<kPerThread, uint16_t, uint4>(p.want[s] + i0, want[s]);
      if (both) load<kPerThread, float, float4>(p.key[s] + i0, key[s]);
    }
#pragma unroll
    for (int e = 0; e < kPerThread; ++e) {
      const uint16_t x = y[0][e], z = y[1][e];
      compare_pair(x, z, near_bits, l, block.small_hist, large_hist);
      rows[kRowDiff] += x != z;
      for (int s = 0; s < 2; ++s) {
        if (p.want[s] == nullptr) continue;
        const bool off = y[s][e] != want[s][e];
        l.count[kFormulaMismatchA + s] += off;
        rows[kRowFormula] += off;
      }
      if (!both) continue;
      const bool predicted = want[0][e] != want[1][e];
      const bool wrong = predicted != (x != z);
      l.count[kPredictedDiff] += predicted;
      l.count[kPredictedVsObserved] += wrong;
      rows[kRowPredicted] += predicted;
      rows[kRowPredictedVsObserved] += wrong;
      const bool acc_differs = f32_bits(key[0][e]) != f32_bits(key[1][e]);
      l.count[kModelAccDiff] += acc_differs;
      if (p.pow2 && x != z && !acc_differs) {
        ++l.count[kPow2Violations];
        ++rows[kRowPow2];
      }
    }
  }
  block.finish(l, rows, out, row_counts + static_cast<int64_t>(row) * kRowCounters);
}

__global__ void __launch_bounds__(kThreads) fp32_accumulator_check_kernel(const float* got0, const float* got1,
                                                                          const float* want0, const float* want1,
                                                                          int n, PassCounts* out, unsigned* row_counts) {
  const int row = blockIdx.y;
  unsigned off[2] = {0, 0};
  const float* got[2] = {got0, got1};
  const float* want[2] = {want0, want1};
  for (int c = blockIdx.x * blockDim.x + threadIdx.x; c < n; c += gridDim.x * blockDim.x) {
    const int64_t i = static_cast<int64_t>(row) * n + c;
    for (int s = 0; s < 2; ++s) {
      if (got[s] != nullptr) off[s] += f32_bits(got[s][i]) != f32_bits(want[s][i]);
    }
  }
  for (int s = 0; s < 2; ++s) {
    const unsigned long long v = warp_sum(off[s]);
    if ((threadIdx.x & 31) == 0 && v != 0) {
      atomicAdd(&out->count[kAccMismatchA + s], v);
      atomicAdd(&row_counts[static_cast<int64_t>(row) * kRowCounters + kRowAcc], static_cast<unsigned>(v));
    }
  }
}

__global__ void __launch_bounds__(kThreads) range_counts_kernel(const int32_t* __restrict__ exact, int64_t count,
                                                                const int8_t* __restrict__ a, int64_t a_count,
                                                                RangeCounts* out) {
  unsigned long long best = 0, above = 0, inexact = 0, has_min = 0;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count; i += stride) {
    const int64_t v = exact[i];
    const unsigned long long mag = static_cast<unsigned long long>(v < 0 ? -v : v);
    best = max(best, (mag << 32) | (0xFFFFFFFFull - static_cast<unsigned long long>(i)));
    if (mag > static_cast<unsigned long long>(kFp32ExactInt)) {
      ++above;
      inexact += static_cast<int64_t>(static_cast<float>(v)) != v;  // int -> fp32 rounds to nearest even
    }
  }
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < a_count && !has_min; i += stride) {
    has_min = a[i] == -128;
  }
  best = warp_max(best);
  above = warp_sum(above);
  inexact = warp_sum(inexact);
  has_min = warp_max(has_min);
  if ((threadIdx.x & 31) == 0) {
    atomicMax(&out->max_key, best);
    if (above != 0) atomicAdd(&out->above, above);
    if (inexact != 0) atomicAdd(&out->inexact, inexact);
    if (has_min != 0) atomicMax(&out->a_has_min, has_min);
  }
}

// One block per weight row: Σ_k |w[n,k]|, the largest kept with its first row.
__global__ void __launch_bounds__(kThreads) weight_l1_kernel(const int8_t* __restrict__ w, int k, RangeCounts* out) {
  __shared__ unsigned long long warp_sums[kThreads / 32];
  const int n = blockIdx.x;
  const int8_t* row = w + static_cast<int64_t>(n) * k;
  unsigned long long sum = 0;
  for (int kk = threadIdx.x; kk < k; kk += blockDim.x) sum += static_cast<unsigned long long>(row[kk] < 0 ? -row[kk] : row[kk]);
  sum = warp_sum(sum);
  if ((threadIdx.x & 31) == 0) warp_sums[threadIdx.x / 32] = sum;
  __syncthreads();
  if (threadIdx.x == 0) {
    unsigned long long total = 0;
    for (int i = 0; i < kThreads / 32; ++i) total += warp_sums[i];
    atomicMax(&out->l1_key, (total << 32) | (0xFFFFFFFFull - static_cast<unsigned long long>(n)));
  }
}

__global__ void __launch_bounds__(kThreads) square_sum_kernel(const uint16_t* __restrict__ y, int64_t count,
                                                              Bf16SquareSum* sum) {
  __shared__ unsigned long long bins[Bf16SquareSum::kBins];
  __shared__ unsigned long long finite;
  for (int i = threadIdx.x; i < Bf16SquareSum::kBins; i += blockDim.x) bins[i] = 0;
  if (threadIdx.x == 0) finite = 0;
  __syncthreads();
  unsigned local_finite = 0;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  // Every lane of a warp takes the loop the same number of times, so that the match below is whole.
  const int64_t rounds = (count + stride - 1) / stride;
  int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  for (int64_t r = 0; r < rounds; ++r, i += stride) {
    uint32_t e = 0xFFFFFFFFu, m2 = 0;
    if (i < count && Bf16SquareSum::term(y[i], e, m2)) ++local_finite;
    // Lanes of one exponent add their m² once (each < 2^16: 32 of them fit in 32 bits).
    const unsigned same = __match_any_sync(0xFFFFFFFFu, e);
    const unsigned part = __reduce_add_sync(same, m2);
    if (e != 0xFFFFFFFFu && (threadIdx.x & 31) == __ffs(same) - 1) atomicAdd(&bins[e], static_cast<unsigned long long>(part));
  }
  const unsigned long long f = warp_sum(local_finite);
  if ((threadIdx.x & 31) == 0 && f != 0) atomicAdd(&finite, f);
  __syncthreads();
  for (int b = threadIdx.x; b < Bf16SquareSum::kBins; b += blockDim.x) {
    if (bins[b] != 0) atomicAdd(reinterpret_cast<unsigned long long*>(&sum->bin[b]), bins[b]);
  }
  if (threadIdx.x == 0 && finite != 0) atomicAdd(reinterpret_cast<unsigned long long*>(&sum->count), finite);
}

__global__ void near_zero_bits_kernel(const Bf16SquareSum* sum, double fraction, double* limit, uint16_t* bits) {
  const double rms = sum->count != 0 ? sqrt(sum->rounded() / static_cast<double>(sum->count)) : 0.0;
  *limit = fraction * rms;
  *bits = near_zero_magnitude_bits(*limit);
}

__global__ void __launch_bounds__(kThreads) first_byte_diff_kernel(BytePieces pieces, unsigned long long* first) {
  const int p = blockIdx.y;
  const unsigned char* now = pieces.now[p];
  const unsigned char* was = pieces.was[p];
  const unsigned long long bytes = pieces.bytes[p];
  const unsigned long long vecs = bytes / 16;
  const unsigned long long stride = static_cast<unsigned long long>(gridDim.x) * blockDim.x;
  unsigned long long found = ~0ull;
  for (unsigned long long v = blockIdx.x * static_cast<unsigned long long>(blockDim.x) + threadIdx.x; v < vecs;
       v += stride) {
    const uint4 a = reinterpret_cast<const uint4*>(now)[v], b = reinterpret_cast<const uint4*>(was)[v];
    if (a.x == b.x && a.y == b.y && a.z == b.z && a.w == b.w) continue;
    for (unsigned long long j = v * 16; j < v * 16 + 16; ++j) {
      if (now[j] != was[j]) {
        found = min(found, j);
        break;
      }
    }
    break;  // later vectors of this thread are farther
  }
  if (blockIdx.x == 0) {
    for (unsigned long long j = vecs * 16 + threadIdx.x; j < bytes; j += blockDim.x) {
      if (now[j] != was[j]) found = min(found, j);
    }
  }
  unsigned long long w = found;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) w = min(w, __shfl_xor_sync(0xFFFFFFFFu, w, o));
  if ((threadIdx.x & 31) == 0 && w != ~0ull) atomicMin(&first[p], w);
}

struct ElementSizes {
  int size[kMaxPieces];
};

__global__ void capture_diff_kernel(BytePieces pieces, ElementSizes sizes, const unsigned long long* first,
                                    OperandDiff* out) {
  out->piece = -1;
  for (int p = 0; p < pieces.count; ++p) {
    if (first[p] == ~0ull) continue;
    const int size = sizes.size[p];
    const unsigned long long element = first[p] / size;
    out->piece = p;
    out->element = element;
    for (int b = 0; b < size; ++b) {
      out->was[b] = pieces.was[p][element * size + b];
      out->now[b] = pieces.now[p][element * size + b];
    }
    return;
  }
}

__global__ void __launch_bounds__(kThreads) gather_rows_kernel(RowGather g, const int64_t* rows, int64_t n) {
  const int r = blockIdx.y;
  const int64_t from = rows[r];
  for (int j = 0; j < g.arrays; ++j) {
    const int64_t row_bytes = n * g.bytes[j];
    const unsigned char* src = g.src[j] + from * row_bytes;
    unsigned char* dst = g.dst[j] + r * row_bytes;
    for (int64_t b = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; b < row_bytes;
         b += static_cast<int64_t>(gridDim.x) * blockDim.x) {
      dst[b] = src[b];
    }
  }
}

std::string launched(const char* what) {
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return std::string("error: launch: ") + cudaGetErrorString(err);
  return what;
}

int grid_for(int64_t items, int per_block) {
  int sms = 132, dev = 0;
  if (cudaGetDevice(&dev) == cudaSuccess) cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
  const int64_t want = (items + per_block - 1) / per_block;
  return static_cast<int>(want < sms * 8 ? (want > 0 ? want : 1) : sms * 8);
}

}  // namespace

std::string launch_capture_diff(const BytePieces& pieces, const int* element_size, const unsigned long long* first,
                                OperandDiff* out, cudaStream_t stream) {
  ElementSizes sizes{};
  for (int p = 0; p < pieces.count; ++p) sizes.size[p] = element_size[p] > 0 && element_size[p] <= 8 ? element_size[p] : 1;
  capture_diff_kernel<<<1, 1, 0, stream>>>(pieces, sizes, first, out);
  return launched("qc::capture_diff_kernel");
}

std::string launch_gather_rows(const RowGather& g, const int64_t* rows, int count, int64_t n, cudaStream_t stream) {
  if (count <= 0) return "qc::gather_rows_kernel (no rows)";
  if (count > 65535) return "error: gather rows: more than 65535 rows";
  gather_rows_kernel<<<dim3(4, static_cast<unsigned>(count)), kThreads, 0, stream>>>(g, rows, n);
  return launched("qc::gather_rows_kernel");
}

std::string launch_int8_element_pass(const Int8PassArgs& args, PassCounts* counts, unsigned long long* large_hist,
                                     unsigned* row_counts, cudaStream_t stream) {
  if (args.m <= 0 || args.n <= 0 || args.n % kPerThread != 0) return "error: int8 element pass: n must be a positive multiple of 8";
  uintptr_t bits = reinterpret_cast<uintptr_t>(args.exact) | reinterpret_cast<uintptr_t>(args.y[0]) |
                   reinterpret_cast<uintptr_t>(args.y[1]);
  for (int s = 0; s < 2; ++s) bits |= reinterpret_cast<uintptr_t>(args.acc[s]) | reinterpret_cast<uintptr_t>(args.f[s]);
  if (bits & 15u) return "error: int8 element pass: arrays must be 16-byte aligned";
  const int64_t chunks = (args.n + kColsPerBlock - 1) / kColsPerBlock;
  const int64_t blocks = chunks * args.m;
  if (blocks > 0x7FFFFFFF) return "error: int8 element pass: too many rows";
  int8_pass_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(args, counts, large_hist, row_counts);
  return launched("qc::int8_pass_kernel");
}

std::string launch_fp8_element_pass(const Fp8PassArgs& args, PassCounts* counts, unsigned long long* large_hist,
                                    unsigned* row_counts, cudaStream_t stream) {
  if (args.m <= 0 || args.n <= 0 || args.n % kPerThread != 0) return "error: fp8 element pass: n must be a positive multiple of 8";
  uintptr_t bits = reinterpret_cast<uintptr_t>(args.y[0]) | reinterpret_cast<uintptr_t>(args.y[1]);
  for (int s = 0; s < 2; ++s) bits |= reinterpret_cast<uintptr_t>(args.want[s]) | reinterpret_cast<uintptr_t>(args.key[s]);
  if (bits & 15u) return "error: fp8 element pass: arrays must be 16-byte aligned";
  if ((args.want[0] != nullptr && args.want[1] != nullptr) && (args.key[0] == nullptr || args.key[1] == nullptr)) {
    return "error: fp8 element pass: both arms modelled without both models' accumulators";
  }
  const int64_t blocks = (args.n + kColsPerBlock - 1) / kColsPerBlock * static_cast<int64_t>(args.m);
  if (blocks > 0x7FFFFFFF) return "error: fp8 element pass: too many rows";
  fp8_pass_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(args, counts, large_hist, row_counts);
  return launched("qc::fp8_pass_kernel");
}

std::string launch_fp32_accumulator_check(const float* const (&got)[2], const float* const (&want)[2], int m, int n,
                                          PassCounts* counts, unsigned* row_counts, cudaStream_t stream) {
  if (m <= 0 || n <= 0 || m > 65535) return "error: fp32 accumulator check: expected 1 <= m <= 65535 and n > 0";
  const dim3 grid(static_cast<unsigned>((n + kThreads - 1) / kThreads < 8 ? (n + kThreads - 1) / kThreads : 8),
                  static_cast<unsigned>(m));
  fp32_accumulator_check_kernel<<<grid, kThreads, 0, stream>>>(got[0], got[1], want[0], want[1], n, counts, row_counts);
  return launched("qc::fp32_accumulator_check_kernel");
}

std::string launch_range_counts(const int32_t* exact, int64_t count, const int8_t* a, int64_t a_count, const int8_t* w,
                                int n, int k, RangeCounts* out, cudaStream_t stream) {
  if (count >= (int64_t{1} << 32) || n <= 0) return "error: range counts: expected fewer than 2^32 accumulators and n > 0";
  range_counts_kernel<<<grid_for(count, kThreads * 8), kThreads, 0, stream>>>(exact, count, a, a_count, out);
  weight_l1_kernel<<<n, kThreads, 0, stream>>>(w, k, out);
  return launched("qc::range_counts_kernel + qc::weight_l1_kernel");
}

std::string launch_square_sum(const uint16_t* y, int64_t count, Bf16SquareSum* sum, cudaStream_t stream) {
  square_sum_kernel<<<grid_for(count, kThreads * 4), kThreads, 0, stream>>>(y, count, sum);
  return launched("qc::square_sum_kernel");
}

std::string launch_near_zero_bits(const Bf16SquareSum* sum, double fraction, double* limit, uint16_t* bits,
                                  cudaStream_t stream) {
  near_zero_bits_kernel<<<1, 1, 0, stream>>>(sum, fraction, limit, bits);
  return launched("qc::near_zero_bits_kernel");
}

std::string launch_first_byte_diff(const BytePieces& pieces, unsigned long long* first, cudaStream_t stream) {
  if (pieces.count <= 0) return "qc::first_byte_diff_kernel (nothing to compare)";
  unsigned long long largest = 0;
  for (int p = 0; p < pieces.count; ++p) {
    if ((reinterpret_cast<uintptr_t>(pieces.now[p]) | reinterpret_cast<uintptr_t>(pieces.was[p])) & 15u) {
      return "error: first byte diff: arrays must be 16-byte aligned";
    }
    largest = max(largest, pieces.bytes[p]);
  }
  const dim3 grid(static_cast<unsigned>(grid_for(static_cast<int64_t>(largest / 16 + 1), kThreads)),
                  static_cast<unsigned>(pieces.count));
  first_byte_diff_kernel<<<grid, kThreads, 0, stream>>>(pieces, first);
  return launched("qc::first_byte_diff_kernel");
}

}  // namespace qc::cuda_kernels
