// What verify.cpp and verify_json.cpp share. Internal to src/checks.
#pragma once

#include "qconform/arm.hpp"
#include "qconform/epilogue.hpp"

namespace qc {

// The arm's declared formula (null: none). An FP8 arm's is its declared epilogue over the fp32 GEMM
// result; an FP8 arm that names none (cuBLASLt, which scales inside the library) is held to
// `fp8-scaled`, the one FP8 epilogue (the FP8 sweep applies it to every FP8 arm too).
const Epilogue* verify_declared_formula(const ArmInfo& info);

}  // namespace qc
