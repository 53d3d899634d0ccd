// CPU emulation of an FP8 (e4m3fn) GEMM with declared fp32 accumulation orders, and its exact
// reference: what the depth sweep compares cuBLASLt's FP8 arms against (docs/gpu.md).
//
// Layouts: `a` [M,K] e4m3fn bit patterns row-major, `w` [N,K] row-major, `d` [M,N] fp32 row-major
// (unscaled: the per-token / per-channel scales are applied after, as in the arms).
//
// Facts the emulation rests on (static_asserts and tests in tests/unit/test_fp8_emulation.cpp):
// - every finite e4m3fn value is an integer multiple of 2^-9 (the smallest subnormal) below
//   448·2^9 < 2^18, so every product is an integer multiple of 2^-18 below 2^36·2^-18, and a
//   sum of K < 2^27 products is exact in int64 units of 2^-18: `fp8_gemm_exact`;
// - a product of two e4m3 values has at most 8 significant bits, so it is exact in fp32: the
//   orders below differ only in where their fp32 additions round.
#pragma once

#include <cstdint>
#include <string>

#include "qconform/accumulation.hpp"

namespace qc {

enum class Fp8AccumOrder {
  sequential,  // d = (((p0 + p1) + p2) + ...) in fp32
  blocked,     // each `chunk` of K summed sequentially from 0 in fp32, then added to the running
               // fp32 total (promotion every chunk, as the default cuBLASLt/DeepGEMM mode does)
  split_k,     // K cut into `splits` contiguous ranges, each summed sequentially, the partials
               // then added in order (a split-K reduction)
};

struct Fp8AccumSpec {
  Fp8AccumOrder order = Fp8AccumOrder::sequential;
  int64_t chunk = 128;  // blocked: K elements per promotion (tensor-core k-chunk)
  int64_t splits = 1;   // split_k: number of K ranges (the last takes the remainder)
  std::string name() const;  // "sequential", "blocked(128)", "split-k(4)"
};

// d[m,n] = Σ_k e4m3(a[m,k])·e4m3(w[n,k]) in the declared fp32 order. NaN encodings in the
// operands are input errors (QC_INPUT with the coordinate). `threads` = 0: hardware concurrency.
// Input errors for a negative shape, a blocked order without a chunk, or split-K outside 1..K.
void validate_fp8_gemm(AccumShape s, const Fp8AccumSpec& spec);

void fp8_gemm_emulate(const uint8_t* a, const uint8_t* w, AccumShape s, const Fp8AccumSpec& spec, float* d,
                      int threads = 0);

// The exact sum, rounded once to fp32 (round to nearest even). K < 2^27.
void fp8_gemm_exact(const uint8_t* a, const uint8_t* w, AccumShape s, float* d, int threads = 0);

// A finite e4m3fn value times 2^9, as an exact integer (|v| <= 229376); QC_INPUT for NaN codes.
int32_t e4m3_times_512(uint8_t bits);

}  // namespace qc
