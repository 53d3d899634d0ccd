// Every `cuda:mma-*` arm and `cuda:cublaslt-int8` against the CPU: the accumulator equals the
// exact reference (`exact_accumulate_i32`, SIMD on the CPU) and the output equals `Epilogue::apply`
// of the arm's declared formula on that accumulator, bit for bit, on all layer shapes of
// Qwen3-1.7B at M in {1, 16, 64, 512} and ragged M {7, 100, 333}.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/env_setting.hpp"
#include "gpu_test_util.hpp"
#include "qconform/accumulation.hpp"
#include "qconform/arm.hpp"
#include "arms/cuda/cuda.hpp"
#include "qconform/epilogue.hpp"
#include "qconform/error.hpp"
#include "qconform/numerics.hpp"

#ifdef QC_WITH_CUDA
#include "arms/cuda/cuda_common.hpp"
#include "arms/cuda/kernels/sm90_int32_scaled_epilogue.cuh"
#include "arms/cuda/kernels/sm90_int8_scaled_mm.cuh"
#endif

namespace qc {
namespace {

struct LayerShape {
  const char* name;
  int64_t n, k;
};
// Qwen3-1.7B: hidden 2048, intermediate 6144, 16 q heads / 8 kv heads of 128.
constexpr LayerShape kQwen3_1_7B[] = {
    {"q_proj", 2048, 2048}, {"k_proj", 1024, 2048}, {"v_proj", 1024, 2048}, {"o_proj", 2048, 2048},
    {"gate_proj", 6144, 2048}, {"up_proj", 6144, 2048}, {"down_proj", 2048, 6144},
};
constexpr int64_t kMs[] = {1, 16, 64, 512, 7, 100, 333};

const std::vector<std::string>& int8_arms() {
  static const std::vector<std::string> arms = {
      "cuda:mma-vllm-cutlass", "cuda:mma-vllm-cutlass-fma", "cuda:mma-vllm-cutlass-muladd", "cuda:mma-vllm-triton",
      "cuda:mma-sglang-sm89",  "cuda:mma-sglang-sm90",      "cuda:cublaslt-int8"};
  return arms;
}

// Runs `arm` on `ops` and checks acc == exact and y == Epilogue::apply(exact). Returns the
// number of failures (each reported through ADD_FAILURE with the case id).
int check_arm(Arm& arm, const LayerOperands& ops, const std::vector<int32_t>& exact, const std::string& case_id) {
  const ArmInfo info = arm.info();
  const ArmOutput out = arm.run(ops);
  int failures = 0;
  if (!out.acc) {
    ADD_FAILURE() << case_id << " " << info.label << ": exposes no accumulator";
    return 1;
  }
  const std::string acc_diff = gpu_test::diff_report(*out.acc, exact, ops.n, "accumulator");
  if (!acc_diff.empty()) {
    ADD_FAILURE() << case_id << " " << info.label << " " << acc_diff;
    ++failures;
  }
  const Epilogue& e = epilogue(info.epilogue);
  std::vector<uint16_t> want(static_cast<size_t>(ops.m * ops.n));
  apply_epilogue(e, exact.data(), ops.a_scale.data(), ops.w_scale.data(), ops.has_bias() ? ops.bias.data() : nullptr,
                 ops.m, ops.n, want.data());
  const std::string y_diff = gpu_test::diff_report(out.y, want, ops.n, "output vs Epilogue::apply");
  if (!y_diff.empty()) {
    ADD_FAILURE() << case_id << " " << info.label << " (kernel " << out.record.kernel << ") " << y_diff;
    ++failures;
  }
  if (out.record.kernel.empty() || out.record.device.empty()) {
    ADD_FAILURE() << case_id << " " << info.label << ": RunRecord lacks kernel or device identity";
    ++failures;
  }
  return failures;
}

TEST(CudaArms, Qwen3_1_7B_AllShapesAllM_BitExact) {
  std::vector<std::unique_ptr<Arm>> arms;
  for (const auto& label : int8_arms()) arms.push_back(make_arm(label));
  int cases = 0, failures = 0;
  uint64_t seed = 1000;
  for (const LayerShape& shape : kQwen3_1_7B) {
    for (int64_t m : kMs) {
      const LayerOperands ops = gpu_test::make_layer(shape.name, m, shape.n, shape.k, ++seed, /*bias=*/false);
      std::vector<int32_t> exact(static_cast<size_t>(m * shape.n));
      exact_accumulate_i32(ops.a_q.data(), ops.w_q.data(), AccumShape{m, shape.n, shape.k}, exact.data());
      const std::string case_id = fmt::format("{} M={} N={} K={} seed={}", shape.name, m, shape.n, shape.k, seed);
      for (auto& arm : arms) {
        failures += check_arm(*arm, ops, exact, case_id);
        ++cases;
      }
      if (failures > 20) FAIL() << "stopping after " << failures << " failures";
    }
  }
  std::printf("CudaArms: %d (arm, layer, M) cases, %d failures\n", cases, failures);
  EXPECT_EQ(failures, 0);
}

TEST(CudaArms, BiasVariantsBitExact) {
  const std::vector<std::string> labels = {"cuda:mma-vllm-cutlass-fma", "cuda:mma-vllm-cutlass-muladd",
                                           "cuda:mma-vllm-triton", "cuda:mma-sglang-sm89", "cuda:cublaslt-int8"};
  int failures = 0;
  for (const auto& label : labels) {
    auto arm = make_arm(label);
    for (int64_t m : {int64_t{1}, int64_t{16}, int64_t{333}}) {
      const LayerOperands ops = gpu_test::make_layer("o_proj+bias", m, 2048, 2048, 77 + m, /*bias=*/true);
      std::vector<int32_t> exact(static_cast<size_t>(m * 2048));
      exact_accumulate_i32(ops.a_q.data(), ops.w_q.data(), AccumShape{m, 2048, 2048}, exact.data());
      failures += check_arm(*arm, ops, exact, fmt::format("bias M={}", m));
    }
  }
  EXPECT_EQ(failures, 0);
}

TEST(CudaArms, AmbiguousBiasAndBadShapesAreInputErrors) {
  const LayerOperands with_bias = gpu_test::make_layer("bias", 4, 64, 64, 5, /*bias=*/true);
  for (const char* label : {"cuda:mma-vllm-cutlass", "cuda:mma-sglang-sm90"}) {
    auto arm = make_arm(label);
    try {
      arm->run(with_bias);
      ADD_FAILURE() << label << " accepted a bias its formula refuses";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::input) << e.what();
    }
  }
  auto arm = make_arm("cuda:mma-vllm-triton");
  for (auto [n, k] : {std::pair<int64_t, int64_t>{72, 64}, {64, 72}}) {
    const LayerOperands bad = gpu_test::make_layer("bad", 3, n, k, 6, false);
    try {
      arm->run(bad);
      ADD_FAILURE() << "N=" << n << " K=" << k << " accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::input);
      EXPECT_NE(std::string(e.what()).find("cuda:mma-vllm-triton"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("multiple of 16"), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(make_arm("cuda:mma-exact"), Error);
}

// Under power-of-two weight scales, without bias, the CUTLASS and Triton orders must agree bit
// for bit (production-epilogues.md; the DESIGN's C5 argument) on the GPU as on the CPU.
TEST(CudaArms, PowerOfTwoScalesCutlassEqualsTriton) {
  LayerOperands ops = gpu_test::make_layer("gate_proj", 512, 6144, 2048, 4242, false);
  std::vector<float> sw(ops.w_scale.begin(), ops.w_scale.end());
  for (auto& v : sw) v = std::exp2(std::round(std::log2(v)));
  ops = with_scales(ops, std::vector<float>(ops.a_scale.begin(), ops.a_scale.end()), sw);
  const ArmOutput cutlass = make_arm("cuda:mma-vllm-cutlass")->run(ops);
  const ArmOutput triton = make_arm("cuda:mma-vllm-triton")->run(ops);
  const std::string d = gpu_test::diff_report(cutlass.y, triton.y, ops.n, "cutlass vs triton (pow2 sw)");
  EXPECT_TRUE(d.empty()) << d;
}

// Every tile configuration of the tensor-core kernel, on shapes that are ragged for it (M, N and
// K not multiples of the block tile or the 128-byte K stage).
TEST(CudaKernels, EveryTileConfigurationRaggedShapes) {
#ifdef QC_WITH_CUDA
  using namespace cuda_kernels;
  const MmTile tiles[] = {MmTile::m128n128,      MmTile::m128n256,       MmTile::m64n128,    MmTile::m16n64_k4,
                          MmTile::m32n64_k4,     MmTile::m16n32_k4,      MmTile::wg128x128,  MmTile::wg128x256,
                          MmTile::wgpp64x256,    MmTile::wgpp128x128,    MmTile::wgpp64x256_c2,
                          MmTile::wgpp128x128_c2, MmTile::wg128x256_c2};
  // Ragged for every tile: M = 2x128 + 77, N = 4x256 + 16, K = 16x128 + 16; a shape smaller
  // than one tile in all three dimensions (K < one 128-byte stage); one with more tiles than the H200
  // has multiprocessors and fewer k-steps (3) than any ring has stages (the persistent wgmma grid walks
  // several tiles per block, the producer more than a tile ahead); and the same M x N with K = 16x128 +
  // 16 (17 k-steps), whose last partial wave the single-block wgmma tiles cut along K (stream-K: on 132
  // multiprocessors 153 tiles of 128x256 leave a tail of 21, 297 of 128x128 one of 33, 306 of 64x256
  // one of 42; the shares are 4-6 k-steps, at least kSkFixupSteps; wgmma_work_plan.hpp). Each shape
  // runs under three settings of the wgmma kernel (docs/gpu.md): stream-K allowed; forbidden; allowed,
  // with the epilogue operands prefetched, raster groups of 256 rows and one release per consumer
  // warpgroup. The stream-K slots are filled with 0xA5 bytes before every launch (QC_WGMMA_SK_POISON), so
  // that a part read before its sums landed cannot pass as an earlier launch's equal sums. Every run
  // must equal the exact accumulation.
  struct Setting {
    const char *streamk, *prefetch, *group_rows, *one_release;
  };
  const Setting settings[] = {{"1", "", "", ""}, {"0", "", "", ""}, {"1", "1", "256", "1"}};
  const int64_t shapes[][3] = {{333, 1040, 2064}, {5, 48, 80}, {1100, 4112, 272}, {1100, 4112, 2064}};
  int streamk_runs = 0, eligible = 0;
  int sms = 0;
  QC_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const ScopedEnv streamk_env("QC_WGMMA_STREAMK"), prefetch_env("QC_WGMMA_PREFETCH"),
      group_env("QC_WGMMA_GROUP_ROWS"), release_env("QC_WGMMA_ONE_RELEASE"), poison_env("QC_WGMMA_SK_POISON");
  poison_env.set("1");
  for (const auto& shape : shapes) {
    const int64_t m = shape[0], n = shape[1], k = shape[2];
    const LayerOperands ops = gpu_test::make_layer("ragged", m, n, k, 99 + m, /*bias=*/true);
    std::vector<int32_t> exact(static_cast<size_t>(m * n));
    exact_accumulate_i32(ops.a_q.data(), ops.w_q.data(), AccumShape{m, n, k}, exact.data());
    cuda::DeviceBuffer<int8_t> a(ops.a_q), w(ops.w_q);
    cuda::DeviceBuffer<float> sa(ops.a_scale), sw(ops.w_scale);
    cuda::DeviceBuffer<uint16_t> bias(ops.bias), y(static_cast<size_t>(m * n));
    cuda::DeviceBuffer<int32_t> acc(static_cast<size_t>(m * n));
    for (const Setting& st : settings) {
      streamk_env.set(st.streamk), prefetch_env.set(st.prefetch), group_env.set(st.group_rows);
      release_env.set(st.one_release);
      const std::string setting =
          fmt::format("QC_WGMMA_STREAMK={} QC_WGMMA_PREFETCH={} QC_WGMMA_GROUP_ROWS={} QC_WGMMA_ONE_RELEASE={}",
                      st.streamk, st.prefetch, st.group_rows, st.one_release);
      for (MmTile tile : tiles) {
        for (const char* name : {"vllm-cutlass-fma", "vllm-triton", "sglang-sm89"}) {
          const Epilogue& e = epilogue(name);
          ScaledMmArgs args;
          args.a = a.get(), args.w = w.get(), args.sa = sa.get(), args.sw = sw.get(), args.bias = bias.get();
          args.y = y.get(), args.acc = acc.get(), args.m = m, args.n = n, args.k = k;
          args.formula = formula::instance_kind(e.kind, m, n);
          args.bias_mode = e.bias_mode;
          args.tile = tile;
          QC_CUDA_CHECK(cudaMemset(y.get(), 0xFF, y.size() * 2));  // poison: every element must be written
          QC_CUDA_CHECK(cudaMemset(acc.get(), 0xFF, acc.size() * 4));
          const std::string id = launch_int8_scaled_mm(args, nullptr);
          ASSERT_EQ(id.rfind("error:", 0), std::string::npos) << id;
          QC_CUDA_CHECK(cudaDeviceSynchronize());
          const bool wgmma = id.find("int8_scaled_mm_wgmma_kernel<") != std::string::npos;
          const bool cut = id.find("stream-K") != std::string::npos;
          EXPECT_FALSE(cut && std::string(st.streamk) == "0") << id;
          streamk_runs += cut;
          // A single-block wgmma launch (no "cluster=2x1") of the fourth shape with stream-K allowed.
          eligible += std::string(st.streamk) == "1" && k == 2064 && m == 1100 && wgmma &&
                      id.find("cluster=2x1") == std::string::npos;
          // The kernel string names the settings that are not at their defaults.
          if (wgmma && std::string(st.prefetch) == "1") {
            EXPECT_NE(id.find("epilogue operands prefetched to L1"), std::string::npos) << id;
            // Groups of 256 rows differ from the default's 1024 only where the M-tiles (64, 128 or, in a
            // 2x1 cluster, 256 rows each) are more than a 256-row group holds: M > 256. Otherwise the order
            // is the same and the string does not name it.
            EXPECT_EQ(id.find("raster groups of 256 rows") != std::string::npos, m > 256) << id;
            EXPECT_NE(id.find("stages released once per consumer warpgroup"), std::string::npos) << id;
          }
          std::vector<uint16_t> want(exact.size());
          apply_epilogue(e, exact.data(), ops.a_scale.data(), ops.w_scale.data(), ops.bias.data(), m, n, want.data());
          const std::string da = gpu_test::diff_report(acc.to_host(), exact, n, "accumulator");
          const std::string dy = gpu_test::diff_report(y.to_host(), want, n, "output");
          EXPECT_TRUE(da.empty()) << setting << " " << id << " " << da;
          EXPECT_TRUE(dy.empty()) << setting << " " << id << " " << dy;
          if (std::string(name) == "vllm-triton")
            std::printf("  M=%lld N=%lld K=%lld %s ran: %s\n", static_cast<long long>(m), static_cast<long long>(n),
                        static_cast<long long>(k), setting.c_str(), id.c_str());
        }
      }
    }
  }
  // Every single-block wgmma launch of the fourth shape cut its tail where stream-K was allowed, where the
  // counts above hold: 132 multiprocessors (H100 and H200 SXM). (Without the wgmma code none ran: see the
  // printed identities.)
  std::printf("  stream-K: %d launches cut the tail, of %d single-block wgmma launches of the fourth shape allowed to\n",
              streamk_runs, eligible);
  if (sms == 132) {
    EXPECT_EQ(streamk_runs, eligible);
  }
#else
  GTEST_SKIP() << "this build has no CUDA";
#endif
}

// The separate epilogue kernels against the CPU rows they instantiate, without a GEMM in front:
// every row with a formula body (and `sglang-sm90` on both sides of its swap-AB rule), with and
// without a bias where the row takes one, on int32 accumulators; and the `fp8-scaled` row on
// fp32 GEMM results (the cuBLASLt FP8 arms' scale kernel). Device and host compile the same
// `formula::apply` text: the outputs must be identical bit for bit.
TEST(CudaKernels, ScaledEpilogueKernelsEqualTheirRows) {
#ifdef QC_WITH_CUDA
  using namespace cuda_kernels;
  const int64_t n = 1040;
  for (int64_t m : {int64_t{16}, int64_t{333}}) {
    std::mt19937_64 rng(4711 + m);
    std::uniform_int_distribution<int32_t> dacc(-(1 << 26), 1 << 26);
    std::uniform_real_distribution<float> dscale(0.5f, 2.0f);
    std::vector<int32_t> acc(static_cast<size_t>(m * n));
    std::vector<float> d(acc.size()), sa(static_cast<size_t>(m)), sw(static_cast<size_t>(n));
    std::vector<uint16_t> bias(static_cast<size_t>(n));
    for (size_t i = 0; i < acc.size(); ++i) {
      acc[i] = dacc(rng);
      d[i] = static_cast<float>(acc[i]) * 0x1p-7f + static_cast<float>(i % 5) * 0x1p-9f;
    }
    for (auto& v : sa) v = dscale(rng) * 0x1p-9f;
    for (auto& v : sw) v = dscale(rng) * 0x1p-11f;
    for (auto& v : bias) v = f32_to_bf16(dscale(rng) * (rng() % 2 ? 1.0f : -1.0f));
    cuda::DeviceBuffer<int32_t> dacc_dev{std::span<const int32_t>(acc)};
    cuda::DeviceBuffer<float> d_dev{std::span<const float>(d)};
    cuda::DeviceBuffer<float> sa_dev{std::span<const float>(sa)}, sw_dev{std::span<const float>(sw)};
    cuda::DeviceBuffer<uint16_t> bias_dev{std::span<const uint16_t>(bias)}, y(acc.size());
    for (const Epilogue& e : all_epilogues()) {
      if (e.kind == EpilogueKind::exact) continue;
      for (bool with_bias : {false, true}) {
        if (with_bias && !e.accepts_bias()) continue;
        QC_CUDA_CHECK(cudaMemset(y.get(), 0xFF, y.size() * 2));  // poison: every element must be written
        const std::string id = launch_int32_scaled_epilogue(
            dacc_dev.get(), sa_dev.get(), sw_dev.get(), with_bias ? bias_dev.get() : nullptr, y.get(), static_cast<int>(m),
            static_cast<int>(n), formula::instance_kind(e.kind, m, n), e.bias_mode, nullptr);
        ASSERT_EQ(id.rfind("error:", 0), std::string::npos) << id;
        QC_CUDA_CHECK(cudaDeviceSynchronize());
        std::vector<uint16_t> want(acc.size());
        apply_epilogue(e, acc.data(), sa.data(), sw.data(), with_bias ? bias.data() : nullptr, m, n, want.data());
        const std::string dy = gpu_test::diff_report(y.to_host(), want, n, "int32 epilogue kernel vs Epilogue row");
        EXPECT_TRUE(dy.empty()) << e.name << " bias=" << with_bias << " M=" << m << " " << id << " " << dy;
      }
    }
    const Epilogue& fp8 = fp8_epilogue();
    QC_CUDA_CHECK(cudaMemset(y.get(), 0xFF, y.size() * 2));
    const std::string id = launch_f32_scale_to_bf16(d_dev.get(), sa_dev.get(), sw_dev.get(), y.get(), static_cast<int>(m),
                                                    static_cast<int>(n), fp8.kind, nullptr);
    ASSERT_EQ(id.rfind("error:", 0), std::string::npos) << id;
    QC_CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<uint16_t> want(d.size());
    apply_epilogue(fp8, d.data(), sa.data(), sw.data(), nullptr, m, n, want.data());
    const std::string dy = gpu_test::diff_report(y.to_host(), want, n, "fp32 scale kernel vs fp8-scaled row");
    EXPECT_TRUE(dy.empty()) << "M=" << m << " " << id << " " << dy;
  }
  // A kind without a body, or a bias for a formula that refuses one, is refused at launch.
  cuda::DeviceBuffer<uint16_t> y1(16);
  EXPECT_EQ(launch_int32_scaled_epilogue(nullptr, nullptr, nullptr, nullptr, y1.get(), 1, 16, EpilogueKind::exact,
                                         BiasMode::exact, nullptr)
                .rfind("error:", 0),
            0u);
#else
  GTEST_SKIP() << "this build has no CUDA";
#endif
}

// The kernel identity in the RunRecord names what actually ran: for M > 64 the wgmma kernel, or
// the mma.sync kernel with the reason wgmma was not available. With QC_EXPECT_WGMMA=1 in the
// environment (set on the H200 with an sm_90a build) the wgmma kernel must have run.
TEST(CudaKernels, LargeMRecordNamesWgmmaOrFallback) {
  const LayerOperands ops = gpu_test::make_layer("gate_proj", 512, 6144, 2048, 31337, false);
  const ArmOutput out = make_arm("cuda:mma-vllm-cutlass")->run(ops);
  std::printf("  M=512 gate_proj ran: %s\n", out.record.kernel.c_str());
  const bool wgmma = out.record.kernel.find("wgmma.m64n") != std::string::npos;
  const bool fallback = out.record.kernel.find("fallback from wgmma") != std::string::npos;
  EXPECT_TRUE(wgmma != fallback) << out.record.kernel;
  const char* expect = std::getenv("QC_EXPECT_WGMMA");
  if (expect != nullptr && std::string(expect) == "1") {
    EXPECT_TRUE(wgmma) << out.record.kernel;
  }
}

}  // namespace
}  // namespace qc
