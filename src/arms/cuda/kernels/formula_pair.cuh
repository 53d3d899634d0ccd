// Two adjacent outputs of one epilogue formula at once, on the device: `formula::apply` (the one text
// of include/qconform/epilogue_formula.hpp) instantiated on a pair of lanes, so that the two bf16
// roundings of a 32-bit store are one `cvt.rn.bf16x2.f32` instead of two conversions and a pack.
//
// The formula body is generic over its value type and finds its primitives by argument-dependent
// lookup (the symbolic readers of the text rely on the same); here each primitive on a pair is the
// device primitive on each lane, so every lane rounds exactly as the scalar instantiation does (the GPU
// tests compare the kernels with the host's `Epilogue::apply` bit for bit). `__floats2bfloat162_rn`
// rounds each half to nearest even as `__float2bfloat16_rn` does; its first argument is the low half.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "qconform/epilogue_formula.hpp"

namespace qc::cuda_kernels::formula_pair {

struct F2 {  // two fp32 lanes
  float lo, hi;
};
struct I2 {  // two int32 accumulators
  int32_t lo, hi;
};
struct Bf2 {  // two bf16 bit patterns, the low lane in the low half
  uint32_t bits;
};

__device__ __forceinline__ F2 to_f32_rn(I2 a) { return {__int2float_rn(a.lo), __int2float_rn(a.hi)}; }
__device__ __forceinline__ F2 mul_rn(F2 a, F2 b) { return {__fmul_rn(a.lo, b.lo), __fmul_rn(a.hi, b.hi)}; }
__device__ __forceinline__ F2 add_rn(F2 a, F2 b) { return {__fadd_rn(a.lo, b.lo), __fadd_rn(a.hi, b.hi)}; }
__device__ __forceinline__ F2 fma_rn(F2 a, F2 b, F2 c) {
  return {__fmaf_rn(a.lo, b.lo, c.lo), __fmaf_rn(a.hi, b.hi, c.hi)};
}
__device__ __forceinline__ Bf2 bf16_rn(F2 x) {
  const __nv_bfloat162 r = __floats2bfloat162_rn(x.lo, x.hi);
  return {static_cast<uint32_t>(__bfloat16_as_ushort(r.x)) | static_cast<uint32_t>(__bfloat16_as_ushort(r.y)) << 16};
}
__device__ __forceinline__ F2 bf16_value(Bf2 b) {
  return {formula::bf16_value(static_cast<uint16_t>(b.bits)), formula::bf16_value(static_cast<uint16_t>(b.bits >> 16))};
}
__device__ __forceinline__ F2 zero_of(F2) { return {0.0f, 0.0f}; }

// formula F on (v0, v1) with per-lane scales and biases: the 32-bit word of the two bf16 outputs, v0's
// in the low half (the row-major order of two adjacent columns).
template <EpilogueKind F>
__device__ __forceinline__ uint32_t apply(int32_t v0, int32_t v1, float sa0, float sa1, float sw0, float sw1,
                                          BiasMode bias_mode, bool has_bias, float b0, float b1) {
  return formula::apply<F>(I2{v0, v1}, F2{sa0, sa1}, F2{sw0, sw1}, bias_mode, has_bias, F2{b0, b1}).bits;
}

}  // namespace qc::cuda_kernels::formula_pair
