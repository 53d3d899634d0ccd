// The cuBLASLt FP8 arms and the raw FP8 GEMM. The FP8 arms take int8 codes only when each is an
// exact e4m3 value; with |q| <= 16 every product is an integer <= 256 and every partial sum of
// K = 2048 products stays below 2^24, so any fp32 accumulation order is exact: the output must be
// within one bf16 ulp of the correctly rounded acc·sa·sw (two fp32 roundings, then bf16). The raw
// GEMM is checked against the CPU emulation's error bound and its agreement with each declared
// accumulation order is printed (the depth-sweep data point).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "../unit/input_error.hpp"
#include "gpu_test_util.hpp"
#include "qconform/accumulation.hpp"
#include "qconform/arm.hpp"
#include "arms/cuda/cuda.hpp"
#include "qconform/epilogue.hpp"
#include "qconform/error.hpp"
#include "accum/fp8_model.hpp"
#include "qconform/numerics.hpp"

namespace qc {
namespace {

int64_t ordered(uint16_t h) { return (h & 0x8000u) ? -static_cast<int64_t>(h & 0x7FFF) : static_cast<int64_t>(h); }

TEST(CudaFp8Arms, SmallCodesWithinOneUlpOfExact) {
  const int64_t m = 100, n = 1024, k = 2048;
  LayerOperands base = gpu_test::make_layer("fp8", m, n, k, 31, false);
  OperandStorage s;
  std::mt19937_64 rng(8);
  std::uniform_int_distribution<int> code(-16, 16);
  s.a_q.resize(static_cast<size_t>(m * k));
  s.w_q.resize(static_cast<size_t>(n * k));
  for (auto& v : s.a_q) v = static_cast<int8_t>(code(rng));
  for (auto& v : s.w_q) v = static_cast<int8_t>(code(rng));
  s.a_scale.assign(base.a_scale.begin(), base.a_scale.end());
  s.w_scale.assign(base.w_scale.begin(), base.w_scale.end());
  const LayerOperands ops = make_operands("fp8", m, n, k, std::move(s), "gpu test fp8 |q|<=16");
  std::vector<int32_t> acc(static_cast<size_t>(m * n));
  exact_accumulate_i32(ops.a_q.data(), ops.w_q.data(), AccumShape{m, n, k}, acc.data());
  std::vector<uint16_t> exact(acc.size());
  apply_epilogue(epilogue("exact"), acc.data(), ops.a_scale.data(), ops.w_scale.data(), nullptr, m, n, exact.data());
  for (const char* label : {"cuda:cublaslt-fp8", "cuda:cublaslt-fp8-fastacc"}) {
    const ArmOutput out = make_arm(label)->run(ops);
    int64_t differ = 0, beyond = 0, worst = 0;
    for (size_t i = 0; i < exact.size(); ++i) {
      ASSERT_TRUE(std::isfinite(bf16_to_f32(out.y[i]))) << label << " element " << i;
      const int64_t d = std::llabs(ordered(out.y[i]) - ordered(exact[i]));
      differ += d != 0, worst = std::max(worst, d), beyond += d > 1;
    }
    std::printf("%s: %lld of %zu outputs differ from the correctly rounded result, max %lld ulp\n  kernel: %s\n", label,
                static_cast<long long>(differ), exact.size(), static_cast<long long>(worst), out.record.kernel.c_str());
    if (std::string(label) == "cuda:cublaslt-fp8") {
      EXPECT_EQ(beyond, 0) << label;
    }
  }
  // A code e4m3 cannot hold is an input error naming the arm and the coordinate.
  OperandStorage bad;
  bad.a_q.assign(16 * 16, 1);
  bad.a_q[5] = 17;
  bad.w_q.assign(16 * 16, 1);
  bad.a_scale.assign(16, 1.0f);
  bad.w_scale.assign(16, 1.0f);
  const LayerOperands b = make_operands("bad", 16, 16, 16, std::move(bad), "gpu test");
  const std::string msg = test::input_error([&] { make_arm("cuda:cublaslt-fp8")->run(b); });  // code 17
  EXPECT_NE(msg.find("a_q[0,5]"), std::string::npos) << msg;
}

TEST(CudaFp8Gemm, RawGemmAgainstEmulatedOrders) {
  const int64_t m = 64, n = 256, k = 4096;
  std::mt19937_64 rng(12);
  std::uniform_int_distribution<int> byte(0, 255);
  auto draw = [&](size_t count) {
    std::vector<uint8_t> v(count);
    for (auto& x : v) {
      do x = static_cast<uint8_t>(byte(rng));
      while ((x & 0x7F) == 0x7F || (x & 0x7F) > 0x60);  // finite, |x| <= 2^5: no fp32 overflow anywhere
    }
    return v;
  };
  const auto a = draw(static_cast<size_t>(m * k)), w = draw(static_cast<size_t>(n * k));
  const AccumShape s{m, n, k};
  std::vector<float> exact(m * n), seq(m * n), blk(m * n);
  const Fp8Gemm g{a.data(), Fp8Format::e4m3, w.data(), Fp8Format::e4m3, s};
  fp8_model_evaluate(fp8_accumulation_model("exact").model, g, exact.data());
  fp8_model_evaluate(fp8_accumulation_model("sequential").model, g, seq.data());
  fp8_model_evaluate(fp8_accumulation_model("blocked-128").model, g, blk.data());
  for (bool fast : {false, true}) {
    RunRecord rec;
    const std::vector<float> d = fp8_gemm_cublaslt_f32(a.data(), w.data(), s, fast, &rec);
    int64_t eq_exact = 0, eq_seq = 0, eq_blk = 0;
    double worst_rel = 0;
    for (size_t i = 0; i < d.size(); ++i) {
      ASSERT_TRUE(std::isfinite(d[i])) << i;
      eq_exact += f32_bits(d[i]) == f32_bits(exact[i]);
      eq_seq += f32_bits(d[i]) == f32_bits(seq[i]);
      eq_blk += f32_bits(d[i]) == f32_bits(blk[i]);
      if (exact[i] != 0) worst_rel = std::max(worst_rel, std::fabs((static_cast<double>(d[i]) - exact[i]) / exact[i]));
    }
    std::printf("fp8 GEMM K=%lld %s: equal to exact %lld, to sequential %lld, to blocked(128) %lld of %zu; max rel "
                "err vs exact %.3g\n  kernel: %s\n",
                static_cast<long long>(k), fast ? "fast-accum" : "default", static_cast<long long>(eq_exact),
                static_cast<long long>(eq_seq), static_cast<long long>(eq_blk), d.size(), worst_rel, rec.kernel.c_str());
    // A loose bound that any accumulator of >= 11 significant bits meets: catches wrong
    // operands, layouts or scales, not the rounding behaviour the sweep measures.
    int64_t out_of_bound = 0;
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double abs_sum = 0;
        for (int64_t x = 0; x < k; ++x)
          abs_sum += std::fabs(static_cast<double>(e4m3fn_to_f32(a[i * k + x])) * e4m3fn_to_f32(w[j * k + x]));
        out_of_bound += std::fabs(static_cast<double>(d[i * n + j]) - exact[i * n + j]) > 0x1p-10 * abs_sum;
      }
    EXPECT_EQ(out_of_bound, 0) << (fast ? "fast-accum" : "default");
  }
}

}  // namespace
}  // namespace qc
