// Entry points of `verify_pass.cu`: verify's element pass on the device (docs/gpu.md, "verify on the
// device"), the operand comparison behind C3, and the near-zero limit of the comparison.
//
// The pass computes, for one run of both arms on a layer, exactly what the host's element pass
// (src/checks/element_pass.cpp, over src/compare/compare.cpp's comparison) counts, element for
// element: the comparison of A with B and the element checks of C2, C4, C5 and C6. Its lists (the
// first differing elements, the first accumulator mismatches, the first power-of-two violations) are
// not made here: the pass counts per row, and the host lists from the rows that hold them.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "arms/cuda/verify_pass_types.hpp"
#include "compare/bf16_square_sum.hpp"

namespace qc::cuda_kernels {

// One INT8 run on the device. Arrays [m,n] row-major, 16-byte aligned, n a multiple of 8; `acc[s]`
// null when arm s exposes no accumulator, `f[s]` null when it declares no formula (else the formula
// over `exact`, the same text the host evaluates: `launch_int32_scaled_epilogue`).
struct Int8PassArgs {
  const int32_t* exact = nullptr;
  const uint16_t* y[2] = {nullptr, nullptr};
  const int32_t* acc[2] = {nullptr, nullptr};
  const uint16_t* f[2] = {nullptr, nullptr};
  const float* sa = nullptr;  // [m]
  const float* sw = nullptr;  // [n]
  int m = 0, n = 0;
  bool safe = false;          // the pinned prediction (C2's part two)
  bool pow2 = false;          // a power-of-two scale regime (C5)
  const uint16_t* near_bits = nullptr;  // device: `launch_near_zero_bits`'s result
};

// The pass: `counts` and `large_hist` (kLargeHist entries) zeroed by the caller, `row_counts` [m,
// kRowCounters] too.
std::string launch_int8_element_pass(const Int8PassArgs& args, PassCounts* counts, unsigned long long* large_hist,
                                     unsigned* row_counts, cudaStream_t stream);

// One FP8 run on the device (per-tensor, per-token and per-channel scales). `want[s]`: arm s's declared
// model + epilogue under the run's scales (null when its run claims no model); `key[s]`: the fp32
// accumulators of the models the two runs claim, compared bitwise (null unless both are modelled).
struct Fp8PassArgs {
  const uint16_t* y[2] = {nullptr, nullptr};
  const uint16_t* want[2] = {nullptr, nullptr};
  const float* key[2] = {nullptr, nullptr};
  int m = 0, n = 0;
  bool pow2 = false;
  const uint16_t* near_bits = nullptr;
};
std::string launch_fp8_element_pass(const Fp8PassArgs& args, PassCounts* counts, unsigned long long* large_hist,
                                    unsigned* row_counts, cudaStream_t stream);
// The arms' exposed fp32 accumulators `got[s]` against the models their calls claimed `want[s]`, bitwise
// (s skipped where null): kAccMismatchA/B and the rows' kRowAcc. [m, n] each, n a multiple of 4.
std::string launch_fp32_accumulator_check(const float* const (&got)[2], const float* const (&want)[2], int m, int n,
                                          PassCounts* counts, unsigned* row_counts, cudaStream_t stream);

// C2's statistics (`RangeCounts`, zeroed by the caller) of the exact accumulators exact[0, count), the
// activation codes a[0, a_count) and the weight rows w [n, k]. count < 2^32 and n < 2^32 (the keys).
std::string launch_range_counts(const int32_t* exact, int64_t count, const int8_t* a, int64_t a_count, const int8_t* w,
                                int n, int k, RangeCounts* out, cudaStream_t stream);

// The exact sum of squares of the finite values of y[0, count) into `sum` (zeroed by the caller).
std::string launch_square_sum(const uint16_t* y, int64_t count, Bf16SquareSum* sum, cudaStream_t stream);
// `*limit` = fraction · sqrt(sum / count) (0 when count is 0), the host's near-zero limit (compare.cpp)
// from the same sum, and `*bits` = near_zero_magnitude_bits(*limit).
std::string launch_near_zero_bits(const Bf16SquareSum* sum, double fraction, double* limit, uint16_t* bits,
                                  cudaStream_t stream);

// C3: up to kMaxPieces byte ranges, each compared with its copy; `first[p]` (set to ~0 by the caller)
// receives the smallest differing byte offset of piece p.
constexpr int kMaxPieces = 8;
struct BytePieces {
  const unsigned char* now[kMaxPieces] = {};
  const unsigned char* was[kMaxPieces] = {};
  unsigned long long bytes[kMaxPieces] = {};
  int count = 0;
};
std::string launch_first_byte_diff(const BytePieces& pieces, unsigned long long* first, cudaStream_t stream);
// Then the first piece with a difference, its element (of `element_size[p]` bytes) and that element's
// bytes now and in the copy, into `out`.
std::string launch_capture_diff(const BytePieces& pieces, const int* element_size, const unsigned long long* first,
                                OperandDiff* out, cudaStream_t stream);

// Rows `rows[0, count)` of `arrays` arrays ([rows, n] each, `bytes[j]` bytes per element) gathered into
// `dst[j]` ([count, n] each).
constexpr int kMaxGather = 6;
struct RowGather {
  const unsigned char* src[kMaxGather] = {};
  unsigned char* dst[kMaxGather] = {};
  int bytes[kMaxGather] = {};
  int arrays = 0;
};
std::string launch_gather_rows(const RowGather& g, const int64_t* rows, int count, int64_t n, cudaStream_t stream);

}  // namespace qc::cuda_kernels
