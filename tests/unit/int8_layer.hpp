// Random INT8 layers of the arm tests (oneDNN, plugins): codes uniform over [-128, 127] (or all
// `fill`), positive scales over realistic ranges, an optional bf16 bias; the same operands for the
// same seed on every machine.
#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <utility>

#include "qconform/operands.hpp"

namespace qc::test {

inline int8_t uniform_int8(std::mt19937& r) { return static_cast<int8_t>(static_cast<int>(r() & 0xFF) - 128); }

inline LayerOperands int8_layer(int64_t m, int64_t n, int64_t k, bool bias, uint32_t seed, int fill = 0) {
  std::mt19937 r(seed);
  OperandStorage st;
  st.a_q.resize(static_cast<size_t>(m * k));
  st.w_q.resize(static_cast<size_t>(n * k));
  for (auto& x : st.a_q) x = fill == 0 ? uniform_int8(r) : static_cast<int8_t>(fill);
  for (auto& x : st.w_q) x = fill == 0 ? uniform_int8(r) : static_cast<int8_t>(fill);
  std::uniform_real_distribution<float> sa(1e-4f, 3e-2f), sw(1e-4f, 3e-3f), b(-4.0f, 4.0f);
  for (int64_t i = 0; i < m; ++i) st.a_scale.push_back(sa(r));
  for (int64_t j = 0; j < n; ++j) st.w_scale.push_back(sw(r));
  if (bias) {
    for (int64_t j = 0; j < n; ++j) {
      const float v = b(r);
      uint32_t u;
      std::memcpy(&u, &v, 4);
      st.bias.push_back(static_cast<uint16_t>(u >> 16));  // truncation: any bf16 value will do
    }
  }
  return make_operands("test.layer", m, n, k, std::move(st), fmt::format("test seed={}", seed));
}

}  // namespace qc::test
