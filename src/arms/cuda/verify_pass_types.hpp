// The counters of verify's element pass on the device (kernels/verify_pass.cuh), as plain C++ that the
// host side reads without CUDA headers (cuda.hpp, gpu_verify.cpp) and the kernels fill.
#pragma once

namespace qc::cuda_kernels {

// The pass's counters (one unsigned long long each in `PassCounts::count`), named as the host's
// `Comparison` and `ElementTally` name them.
enum PassCounter : int {
  kBitwiseDiff, kSignedZeroDiff, kNanA, kNanB, kInfA, kInfB, kSubnormalA, kSubnormalB, kNonfinitePairs,
  kNonfiniteDiff, kFinitePairs, kNearZero, kNearZeroDiff, kLargeUlps, kAccMismatchA, kAccMismatchB,
  kFormulaMismatchA, kFormulaMismatchB, kSafeContradicted, kPredictedDiff, kPredictedVsObserved, kPow2Excluded,
  kPow2Violations, kModelAccDiff, kPassCounters
};
// Per row of the run: how many elements of the row enter each of the host's lists (and two counts the
// host's pass over the same row must reproduce).
enum RowCounter : int { kRowDiff, kRowAcc, kRowPow2, kRowFormula, kRowPredicted, kRowPredictedVsObserved, kRowCounters };

// Ordered-ulp distances below this are counted in `small_hist`; larger ones in the 65536-entry
// histogram the caller passes (only when `count[kLargeUlps]` > 0 is it worth reading).
constexpr int kSmallUlps = 64;
constexpr int kLargeHist = 65536;

struct PassCounts {
  unsigned long long count[kPassCounters];
  unsigned long long max_ulp;
  unsigned long long max_rel_bits;           // the fp64 max |a-b|/|a| as its bit pattern (>= 0: ordered as integers)
  unsigned long long near_zero_max_abs_bits;  // the same for the near-zero pairs' max |a-b|
  unsigned long long small_hist[kSmallUlps];
};

// C2's statistics of one layer on the device, raw: the range of its exact accumulators (the key of the
// largest |acc| and its first index, packed as (|acc| << 32) | (2^32 - 1 - index), so that one atomic
// maximum keeps the first occurrence), the elements above 2^24 and those that do not convert to fp32
// exactly, the largest weight row L1 norm with its first row (packed the same way), and whether the
// activations hold -128. The host assembles `RangeStats` from them as from its own pass.
struct RangeCounts {
  unsigned long long max_key = 0;
  unsigned long long above = 0, inexact = 0;
  unsigned long long l1_key = 0;
  unsigned long long a_has_min = 0;
};

// C3 on the device: the first operand byte that differs from its copy (piece -1: none), and the bytes of
// its element before and after, captured right after the arm that changed it.
struct OperandDiff {
  int piece = -1;
  unsigned long long element = 0;
  unsigned char was[8] = {}, now[8] = {};
};

}  // namespace qc::cuda_kernels
