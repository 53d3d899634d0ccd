#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "qconform/accumulation.hpp"
#include "qconform/arm.hpp"

namespace qc {

void register_cpu_arms();
void register_mutant_arms();
// `mutant-shape:` (shape_mutants.cpp): C8's positive controls, apart from the C0–C7 mutant matrix.
void register_shape_mutant_arms();
// `fp8:<order>`, the sweep's old FP8 labels, as aliases of `cpu:fp8-<model>` (fp8_arms.cpp).
void register_fp8_alias_arms();
// `cpu:fp8-<model>` (fp8_arms.cpp); QC_INPUT for an unknown model.
std::unique_ptr<Arm> make_cpu_fp8_arm(std::string_view model);
// The RunRecord of an arm that runs on this CPU inside qconform itself.
RunRecord cpu_run_record(const ArmInfo& info, std::string kernel);
// What every mutant declares (mutants.cpp; `mutant:`, `mutant-shape:`): faulty on purpose, breaking
// `stage`. An FP8 mutant's adds the `fp8-scaled` epilogue and the accumulation model it `declares`
// (and breaks the accumulation).
ArmInfo mutant_info(std::string label, std::string description, std::string stage);
ArmInfo fp8_mutant_info(std::string label, std::string description, std::string declares);
// An FP8 mutant's layer (mutants.cpp; `mutant:fp8-rne-steps`, `mutant-shape:fp8-splitk-m<T>`): `model` on the
// layer's codes, then `fp8-scaled`; the record claims `claimed` (a bias is an input error).
ArmOutput fp8_mutant_run(const ArmInfo& info, const Fp8AccumModel& model, const LayerOperands& ops,
                         const std::string& kernel, const std::string& claimed);
// Its unscaled e4m3 x e4m3 GEMM under `model`, the record claiming `claimed`.
std::vector<float> fp8_mutant_accumulate(const ArmInfo& info, const Fp8AccumModel& model, const uint8_t* a,
                                         const uint8_t* w, int64_t m, int64_t n, int64_t k, nlohmann::json& record,
                                         int threads, const std::string& kernel, const std::string& claimed);

}  // namespace qc
