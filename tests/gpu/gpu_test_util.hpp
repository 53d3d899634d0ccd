// Helpers of the GPU tests: operand generation with extremes, bitwise comparisons that print
// coordinates, values and bit patterns of the first mismatches, and verify's results to compare
// between its two references.
#pragma once

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "checks/verify.hpp"
#include "qconform/arm.hpp"
#include "qconform/numerics.hpp"
#include "qconform/operands.hpp"

namespace qc::gpu_test {

// Random operands: int8 codes over the full range [-128, 127] with extreme rows/columns (all
// -128, all 127, alternating), realistic positive scales (absmax/127 and absmax/127.5 over three
// decades, a few powers of two), optional bf16 bias.
inline LayerOperands make_layer(const std::string& name, int64_t m, int64_t n, int64_t k, uint64_t seed, bool bias) {
  std::mt19937_64 rng(seed);
  OperandStorage s;
  s.a_q.resize(static_cast<size_t>(m * k));
  s.w_q.resize(static_cast<size_t>(n * k));
  std::uniform_int_distribution<int> code(-128, 127);
  for (auto& v : s.a_q) v = static_cast<int8_t>(code(rng));
  for (auto& v : s.w_q) v = static_cast<int8_t>(code(rng));
  // Extremes: row 0 of A all -128 (with w rows all -128 the accumulator reaches K·2^14), row 1
  // all 127, row 2 alternating; W rows 0, 1 likewise.
  auto fill_row = [&](std::vector<int8_t>& x, int64_t row, int64_t rows, int pattern) {
    if (row >= rows) return;
    for (int64_t c = 0; c < k; ++c) {
      x[static_cast<size_t>(row * k + c)] =
          static_cast<int8_t>(pattern == 0 ? -128 : pattern == 1 ? 127 : ((c & 1) ? 127 : -128));
    }
  };
  fill_row(s.a_q, 0, m, 0), fill_row(s.a_q, 1, m, 1), fill_row(s.a_q, 2, m, 2);
  fill_row(s.w_q, 0, n, 0), fill_row(s.w_q, 1, n, 1), fill_row(s.w_q, 2, n, 2);
  std::uniform_real_distribution<float> decade(-2.0f, 1.0f);
  s.a_scale.resize(static_cast<size_t>(m));
  s.w_scale.resize(static_cast<size_t>(n));
  for (auto& v : s.a_scale) v = std::pow(10.0f, decade(rng)) / 127.0f;
  for (auto& v : s.w_scale) v = std::pow(10.0f, decade(rng) - 1.0f) / 127.5f;
  if (n > 5) s.w_scale[5] = 0.0078125f;  // a power of two
  if (bias) {
    std::normal_distribution<float> b(0.0f, 0.5f);
    s.bias.resize(static_cast<size_t>(n));
    for (auto& v : s.bias) v = f32_to_bf16(b(rng));
  }
  return make_operands(name, m, n, k, std::move(s), fmt::format("gpu test seed={}", seed));
}

// Returns "" when equal, else a description of the count and the first `show` mismatches.
template <typename T, typename U>
std::string diff_report(const std::vector<T>& got, const std::vector<U>& want, int64_t n_cols, const char* what,
                        int show = 8) {
  if (got.size() != want.size()) return fmt::format("{}: size {} vs {}", what, got.size(), want.size());
  int64_t count = 0;
  std::string lines;
  for (size_t i = 0; i < got.size(); ++i) {
    if (static_cast<int64_t>(got[i]) == static_cast<int64_t>(want[i])) continue;
    if (count++ < show) {
      const int64_t r = static_cast<int64_t>(i) / n_cols, c = static_cast<int64_t>(i) % n_cols;
      if constexpr (sizeof(T) == 2) {
        lines += fmt::format("\n  [{},{}] got {:#06x} ({}) want {:#06x} ({})", r, c, static_cast<unsigned>(got[i]),
                             bf16_to_f32(static_cast<uint16_t>(got[i])), static_cast<unsigned>(want[i]),
                             bf16_to_f32(static_cast<uint16_t>(want[i])));
      } else {
        lines += fmt::format("\n  [{},{}] got {} ({:#010x}) want {} ({:#018x})", r, c, static_cast<int64_t>(got[i]),
                             static_cast<uint32_t>(got[i]), static_cast<int64_t>(want[i]),
                             static_cast<uint64_t>(want[i]));
      }
    }
  }
  if (count == 0) return "";
  return fmt::format("{}: {} of {} elements differ; first:{}", what, count, got.size(), lines);
}

// `verify` of `a` against `b` on `layers` (their own predictions) with the reference
// `options.reference`, as JSON less what may differ between the two references: the timings, and
// the reference's description, which must contain `place` ("CUDA cores", "on the host", ...).
inline nlohmann::json reference_json(const std::string& a, const std::string& b, const std::vector<LayerOperands>& layers,
                                     const VerifyOptions& options, const std::string& place) {
  const PredictionSet p = predict(layers, "mem", "sha256:none");
  auto arm_a = make_arm(a), arm_b = make_arm(b);
  nlohmann::json j = to_json(verify_layers(*arm_a, *arm_b, layers, p, options));
  EXPECT_NE(j["reference"].get<std::string>().find(place), std::string::npos) << j["reference"];
  for (const char* timing_or_place : {"seconds", "wall_seconds", "reference"}) j.erase(timing_or_place);
  return j;
}

}  // namespace qc::gpu_test
