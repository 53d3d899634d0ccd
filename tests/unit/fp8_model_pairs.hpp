// Pairs of FP8 accumulation models that run the same steps (`accum_fp32::same_steps`: they differ only in
// their promotion), which the fp32 evaluation takes in one pass: the cuBLASLt pair both ways round, round-to-
// nearest terms and results, 16-term steps, and a split-K pair. Shared by the host test of the paired
// evaluation (test_accumulation_model.cpp) and the GPU test of its kernel (tests/gpu/test_cuda_fp8_model.cpp).
#pragma once

#include <array>
#include <string>
#include <utility>
#include <vector>

#include "accum/fp8_model.hpp"

namespace qc::test {

inline std::vector<std::pair<std::string, std::array<Fp8AccumModel, 2>>> paired_models() {
  const Fp8AccumModel chain = fp8_accumulation_model("hopper-fp8-chain").model;
  const Fp8AccumModel promote4 = fp8_accumulation_model("hopper-fp8-promote4").model;
  std::vector<std::pair<std::string, std::array<Fp8AccumModel, 2>>> pairs;
  pairs.push_back({"promote4 + chain", {promote4, chain}});
  pairs.push_back({"chain + promote4", {chain, promote4}});
  Fp8AccumModel p1 = promote4, c_rn = chain;
  p1.promote_steps = 1;
  p1.term_rounding = p1.result_rounding = c_rn.term_rounding = c_rn.result_rounding = AccumRounding::nearest_even;
  pairs.push_back({"promote1 rn + chain rn", {p1, c_rn}});
  Fp8AccumModel k16p = promote4, k16c = chain;
  k16p.step_k = k16c.step_k = 16;
  k16p.term_bits = k16p.result_bits = k16c.term_bits = k16c.result_bits = 10;
  pairs.push_back({"16-term steps, 10 bits: promote4 + chain", {k16p, k16c}});
  pairs.push_back({"promote4-splitk-6 + chain-splitk-6",
                   {fp8_accumulation_model("hopper-fp8-promote4-splitk-6").model,
                    fp8_accumulation_model("hopper-fp8-chain-splitk-6").model}});
  return pairs;
}

}  // namespace qc::test
