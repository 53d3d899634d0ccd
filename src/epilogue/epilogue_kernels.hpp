// Internal interface of the Highway fast path of the `fp8-scaled` epilogue over fp32 accumulators
// (src/epilogue/epilogue_kernels.cpp). Not part of the public API: include/qconform/epilogue.hpp is.
// The text it must equal is `formula::apply<EpilogueKind::vllm_triton>` without a bias
// (include/qconform/epilogue_formula.hpp); tests/unit/test_epilogue.cpp checks the two bit for bit.
#pragma once

#include <cstdint>

namespace qc::epilogue_detail {

// y[m*N + n] = bf16(rn32(rn32(d[m*N + n] * sa[m]) * sw[n])) for m < rows, n < N: the Triton order
// (`fp8-scaled`, `vllm-triton` without a bias) over an fp32 accumulator, round to nearest even at
// each step, NaN kept quiet as `f32_to_bf16` keeps it. Serial; no checks (the caller's).
void triton_f32_rows(const float* d, const float* sa, const float* sw, int64_t rows, int64_t N, uint16_t* y);

// The Highway target the dispatcher selects for `triton_f32_rows` here.
const char* epilogue_target();

}  // namespace qc::epilogue_detail
