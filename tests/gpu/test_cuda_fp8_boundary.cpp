// `boundary` on the cuBLASLt FP8 arms (label gpu; the binary exits 77 = SKIPPED without a GPU):
// the accumulation model measured through cuBLASLt with the designed probes of
// src/checks/c1_fp8_model.cpp must be the model each arm declares, hopper-fp8-promote4 for the
// default path and hopper-fp8-chain for fast accumulation (../shared/reference/fp8-accumulation.md),
// and explain every confirmation output bit for bit. The probe batches have M >= 128 rows and
// K <= 1024, the confirmation K <= 4096: shapes cuBLASLt ran in one pass in our H200 measurements.
// If a run's record says split-K anyway, the failure says so (the measured model is then that of a
// split-K schedule, which is not the declaration's).
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>

#include "accum/fp8_model.hpp"
#include "checks/c1_boundary.hpp"
#include "checks/c1_fp8_model.hpp"
#include "checks/identify.hpp"
#include "qconform/arm.hpp"

namespace qc {
namespace {

TEST(CudaFp8Boundary, CublasLtArmsAreMeasuredAsTheirDeclaredModels) {
  for (const auto& [label, want] : {std::pair<const char*, const char*>{"cuda:cublaslt-fp8", "hopper-fp8-promote4"},
                                    {"cuda:cublaslt-fp8-fastacc", "hopper-fp8-chain"}}) {
    auto arm = make_arm(label);
    const BoundaryResult b = run_boundary(*arm);
    ASSERT_TRUE(b.fp8.has_value()) << label;
    const Fp8Measurement& r = *b.fp8;
    const std::string split =
        r.split_k_runs.empty() ? std::string("every run one pass (split_k 1)")
                               : fmt::format("the records say split-K: {}", fmt::join(r.split_k_runs, "; "));
    std::printf("%s\n", describe(r).c_str());
    EXPECT_TRUE(r.measured) << label << ": " << r.reason << " (" << split << ")";
    EXPECT_EQ(r.model_name, want) << label << ": measured " << (r.measured ? accumulation_formula(r.model) : "-")
                                  << "; " << r.reason << " (" << split << ")";
    EXPECT_EQ(r.verdict, "matches declaration") << label << ": " << r.reason << " (" << split << ")";
    EXPECT_EQ(r.confirm_matching, r.confirm_outputs) << label << " (" << split << ")";
    EXPECT_GT(r.confirm_outputs, 0);
    EXPECT_EQ(b.c1.verdict, Verdict::pass) << label << ": " << b.c1.summary;
    std::printf("[ measured ] %s: %s (%s); class of %zu; confirmation %lld of %lld; %s; %.1f s\n", label,
                r.model_name.c_str(), r.verdict.c_str(), r.equivalent.size(), static_cast<long long>(r.confirm_matching),
                static_cast<long long>(r.confirm_outputs), split.c_str(), r.seconds);
  }
}

TEST(CudaFp8Boundary, IdentifyNamesTheCublasLtModels) {
  for (const auto& [label, want] : {std::pair<const char*, const char*>{"cuda:cublaslt-fp8", "hopper-fp8-promote4"},
                                    {"cuda:cublaslt-fp8-fastacc", "hopper-fp8-chain"}}) {
    auto arm = make_arm(label);
    const IdentifyResult r = identify(*arm);
    EXPECT_EQ(r.verdict, "identified") << label << ": " << r.reason;
    ASSERT_FALSE(r.named.empty()) << label << ": " << r.reason;
    EXPECT_EQ(r.named[0], want) << label << ": " << r.formula;
    EXPECT_EQ(r.matching, r.outputs) << label;
  }
}

}  // namespace
}  // namespace qc
