// The oneDNN arm: oneDNN's own int8 matmul (s8 x s8 -> s32) followed by a declared epilogue.
//
// a_q [M,K] row-major s8 is oneDNN's `src` (strides {K,1}); w_q [N,K] row-major is oneDNN's
// `weights` [K,N] with strides {1,K} (format `ba`), passed without a copy; `dst` is s32 [M,N]
// row-major. The arm exposes oneDNN's s32 output unchanged as its accumulator, so check C4
// tests oneDNN itself, not an emulation. Findings about oneDNN's accumulation (exact with VNNI,
// int16 pair saturation without it) are in docs/plugins.md, section "The oneDNN arm".
//
// Test: `cmake --build build -j2 --target qconform_unit_tests &&
//        ./build/tests/qconform_unit_tests --gtest_filter='OnednnArm*'`
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace qc {

// Registers the `onednn` backend (`onednn:s8s8`, `onednn:s8s8-<epilogue>`). Only built when the
// build found oneDNN (`QC_WITH_ONEDNN`).
void register_onednn_arms();

// What one oneDNN s8s8 matmul returned and who computed it.
struct OnednnMatmul {
  std::vector<int32_t> acc;   // [m,n] row-major, exactly as oneDNN wrote it
  std::string impl;           // `primitive_desc::impl_info_str()`, e.g. "brg:avx512_core_vnni"
  std::string isa;            // oneDNN's effective CPU ISA, e.g. "avx512_core_vnni"
  std::string version;        // "oneDNN 2.6.3 (commit ...)"
};

// Runs oneDNN's matmul on a [m,k] x w [n,k]^T. Throws QC_INPUT when oneDNN refuses the shape.
OnednnMatmul onednn_s8s8_matmul(const int8_t* a, const int8_t* w, int64_t m, int64_t n, int64_t k);

}  // namespace qc
