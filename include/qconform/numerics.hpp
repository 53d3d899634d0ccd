// Bit-exact scalar numerics: the conversions and distances every other part of qconform uses.
//
// Everything here is a small constexpr bit manipulation with NaN, rounding and saturation
// handled explicitly. Callers must compile with `-ffp-contract=off` and without fast-math (the
// project's flags do). Types are raw bit patterns (`uint16_t` for bf16/fp16, `uint8_t` for fp8)
// so nothing converts implicitly.
#pragma once

#include <bit>
#include <cstdint>

namespace qc {

constexpr uint32_t f32_bits(float x) { return std::bit_cast<uint32_t>(x); }
constexpr float f32_from_bits(uint32_t b) { return std::bit_cast<float>(b); }

// bf16 -> fp32 is exact: bf16 is the top half of an fp32.
constexpr float bf16_to_f32(uint16_t b) { return f32_from_bits(uint32_t{b} << 16); }

// fp32 -> bf16, round to nearest, ties to even.
// 1. NaN stays NaN: keep sign and the top payload bits, set the quiet bit (a payload living only
//    in the low 16 bits would otherwise vanish and turn the NaN into an infinity).
// 2. Finite and infinite values: add the rounding bias 0x7FFF plus the lowest kept bit, then
//    truncate. A carry out of the mantissa rounds into the exponent, which gives overflow to inf.
constexpr uint16_t f32_to_bf16(float x) {
  const uint32_t u = f32_bits(x);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) {
    return static_cast<uint16_t>((u >> 16) | 0x0040u);
  }
  const uint32_t lsb = (u >> 16) & 1u;
  return static_cast<uint16_t>((u + 0x7FFFu + lsb) >> 16);
}

// int32 -> fp32 with round-to-nearest-even (what C++ and CUTLASS do on these targets; exact while
// |v| <= 2^24).
constexpr float i32_to_f32(int32_t v) { return static_cast<float>(v); }

static_assert(f32_to_bf16(1.0f) == 0x3F80);
static_assert(bf16_to_f32(0x3F80) == 1.0f);

}  // namespace qc
