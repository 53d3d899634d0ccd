// Benchmark of the CUDA arms on the GPU: qconform's fused INT8 scaled-MM (`cuda:mma-vllm-cutlass`
// kernel) against the baseline cuBLASLt INT8 GEMM (s32 out) + separate epilogue kernel, at the
// shapes of issue 5; plus the GPU comparison kernel against a cudaMemcpy device-to-device copy,
// and the CUDA-core exact int64 accumulator.
//
// Method: CUDA events around each launch, 5 warm-ups and 25 ms of them at least, median of 30 timed
// launches; then ours ("auto" at M >= 512, or each tile `--tiles` names) against cuBLASLt's GEMM alone in
// 16 rounds of back-to-back batches, the order swapped each round (`bench::time_alternating`: one launch at
// a time charges each launch's start to the kernel, and a forward pass runs them back to back; each batch
// is queued ahead behind a delay kernel, so the host's launch rate is not charged either, and is printed). Weights
// and activations rotate over enough copies that the working set exceeds the 50 MB L2. TOPS count
// 2·M·N·K integer operations. Both paths compute the same formula, so their outputs are also
// compared bit for bit (a benchmark of wrong code is worthless).
//
// Run: `build/bench/bench_cuda_scaled_mm` (docs/performance.md, "CUDA arms (H200)"); `--quick`: the GEMMs alone;
// `--exact`: the exact accumulation alone (Qwen3-1.7B and Llama-3-70B layer shapes at M = 512);
// `--shape M,N,K [--tiles wg128x256,wgpp128x128c2,...] [--ab NAME=VALUE]`: that GEMM alone, with only those tiles of
// ours (for ncu); with `--ab`, each paired tile also with the environment setting NAME=VALUE (a kernel's measurement
// setting, docs/gpu.md: QC_WGMMA_STREAMK=0, QC_WGMMA_ONE_RELEASE=1, ...) against itself with the setting unset
// (the default), alternated, and its output compared.
#include <cstdio>

#ifndef QC_WITH_CUDA
int main() {
  std::printf("bench_cuda_scaled_mm: CUDA is not in this build (configure with -DQCONFORM_WITH_CUDA=ON)\n");
  return 0;
}
#else

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "arms/cuda/cublaslt_gemm.hpp"
#include "arms/cuda/cuda_common.hpp"
#include "arms/cuda/kernels/int64_exact_accum.cuh"
#include "arms/cuda/kernels/sm90_compare_bf16.cuh"
#include "arms/cuda/kernels/sm90_int32_scaled_epilogue.cuh"
#include "arms/cuda/kernels/sm90_int8_scaled_mm.cuh"
#include "arms/cuda/cuda.hpp"
#include "core/env_setting.hpp"
#include "cuda_event_timing.hpp"
#ifdef QC_WITH_CUTLASS
#include "arms/cutlass/cutlass_dispatch.hpp"
#include "arms/cutlass/kernels/sm90_cutlass_scaled_mm.cuh"
#endif

namespace {

using namespace qc;
using namespace qc::cuda_kernels;

constexpr int kWarmup = 5;
constexpr int kReps = 30;

template <typename F>
double median_ms(F&& launch) {
  return bench::time_launches(launch, kWarmup, kReps).median_ms;
}

template <typename T>
cuda::DeviceBuffer<T> random_device(size_t count, int lo, int hi, uint64_t seed) {
  std::vector<T> h(count);
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> d(lo, hi);
  for (auto& v : h) v = static_cast<T>(d(rng));
  return cuda::DeviceBuffer<T>(std::span<const T>(h));
}

cuda::DeviceBuffer<float> scales(size_t count, float base, uint64_t seed) {
  std::vector<float> h(count);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> d(0.5f, 2.0f);
  for (auto& v : h) v = base * d(rng);
  return cuda::DeviceBuffer<float>(std::span<const float>(h));
}

const char* tile_name(MmTile t) {
  switch (t) {
    case MmTile::automatic: return "auto";
    case MmTile::m128n128: return "128x128";
    case MmTile::m128n256: return "128x256";
    case MmTile::m64n128: return "64x128";
    case MmTile::m16n64_k4: return "16x64/k4";
    case MmTile::m32n64_k4: return "32x64/k4";
    case MmTile::m16n32_k4: return "16x32/k4";
    case MmTile::wg128x128: return "wg128x128";
    case MmTile::wg128x256: return "wg128x256";
    case MmTile::wgpp64x256: return "wgpp64x256";
    case MmTile::wgpp128x128: return "wgpp128x128";
    case MmTile::wgpp64x256_c2: return "wgpp64x256c2";
    case MmTile::wgpp128x128_c2: return "wgpp128x128c2";
    case MmTile::wg128x256_c2: return "wg128x256c2";
  }
  return "?";
}

void bench_gemm(int m, int n, int k, const std::vector<MmTile>& only = {}, const std::string& ab = "") {
  const double ops = 2.0 * m * n * k;
  // Rotate copies of (a, w) so that the working set exceeds L2 (50 MB): 256 MB at least.
  const size_t bytes = static_cast<size_t>(m + n) * k;
  const int copies = static_cast<int>(std::min<size_t>(16, std::max<size_t>(1, (size_t{256} << 20) / bytes + 1)));
  std::vector<cuda::DeviceBuffer<int8_t>> as, ws;
  for (int c = 0; c < copies; ++c) {
    as.push_back(random_device<int8_t>(static_cast<size_t>(m) * k, -128, 127, 10 + c));
    ws.push_back(random_device<int8_t>(static_cast<size_t>(n) * k, -128, 127, 100 + c));
  }
  auto sa = scales(m, 0.02f, 1), sw = scales(n, 0.001f, 2);
  cuda::DeviceBuffer<uint16_t> y_ours(static_cast<size_t>(m) * n), y_lt(static_cast<size_t>(m) * n);
  cuda::DeviceBuffer<int32_t> acc(static_cast<size_t>(m) * n);

  cuda::CublasLtGemm plan(cuda::CublasLtGemm::Kind::int8_s32, m, n, k, false);
  if (!plan.ok()) {
    std::printf("(%d,%d,%d): cuBLASLt: %s\n", m, n, k, plan.error().c_str());
    return;
  }
  const double t_lt = median_ms([&](int i) { plan.run(as[i % copies].get(), ws[i % copies].get(), acc.get(), nullptr, nullptr, nullptr); });
  const double t_pipe = median_ms([&](int i) {
    plan.run(as[i % copies].get(), ws[i % copies].get(), acc.get(), nullptr, nullptr, nullptr);
    launch_int32_scaled_epilogue(acc.get(), sa.get(), sw.get(), nullptr, y_lt.get(), m, n,
                                 EpilogueKind::vllm_cutlass, BiasMode::muladd, nullptr);
  });
  const double t_epi = median_ms([&](int) {
    launch_int32_scaled_epilogue(acc.get(), sa.get(), sw.get(), nullptr, y_lt.get(), m, n,
                                 EpilogueKind::vllm_cutlass, BiasMode::muladd, nullptr);
  });

  std::string cutlass_line;  // printed under the shape's header, beside our kernel's lines
#ifdef QC_WITH_CUTLASS
  {
    // CUTLASS's own sm90 INT8 GEMM with vLLM's ScaledEpilogue, the configuration vLLM picks for this
    // shape: the same formula as the pipeline's (`vllm-cutlass` = `vllm-cutlass-muladd` without a
    // bias), so the outputs must be identical.
    using cutlass_launch = cutlass_kernels::LaunchResult (*)(const cutlass_kernels::ScaledMmArgs&, bool);
    static constexpr cutlass_launch kLaunch[] = {
        cutlass_kernels::launch_int8_vllm_config0, cutlass_kernels::launch_int8_vllm_config1,
        cutlass_kernels::launch_int8_vllm_config2, cutlass_kernels::launch_int8_vllm_config3,
        cutlass_kernels::launch_int8_vllm_config4};
    const int config = static_cast<int>(cutlass_arms::vllm_int8_config(m, n));
    cuda::DeviceBuffer<uint16_t> y_cutlass(static_cast<size_t>(m) * n);
    cutlass_kernels::ScaledMmArgs c;
    c.sa = sa.get(), c.sw = sw.get(), c.y = y_cutlass.get(), c.m = m, c.n = n, c.k = k;
    const char* error = nullptr;
    const double t = median_ms([&](int i) {
      c.a = as[i % copies].get(), c.w = ws[i % copies].get();
      error = kLaunch[config](c, false).error;
    });
    c.a = as[0].get(), c.w = ws[0].get();
    kLaunch[config](c, false);
    plan.run(as[0].get(), ws[0].get(), acc.get(), nullptr, nullptr, nullptr);
    launch_int32_scaled_epilogue(acc.get(), sa.get(), sw.get(), nullptr, y_lt.get(), m, n, EpilogueKind::vllm_cutlass,
                                 BiasMode::muladd, nullptr);
    QC_CUDA_CHECK(cudaDeviceSynchronize());
    const auto ya = y_cutlass.to_host(), yb = y_lt.to_host();
    size_t diff = 0;
    for (size_t i = 0; i < ya.size(); ++i) diff += ya[i] != yb[i];
    char line[512];
    std::snprintf(line, sizeof line, "  CUTLASS (vLLM %s) %.4f ms = %5.0f TOPS  speed vs pipeline %.2fx  (vs GEMM alone %.2fx)  bitwise diffs %zu%s%s\n",
                  cutlass_arms::kInt8ConfigTable[config].name, t, ops / t / 1e9, t_pipe / t, t_lt / t, diff,
                  error ? "  error: " : "", error ? error : "");
    cutlass_line = line;
  }
#endif
  std::vector<MmTile> tiles = {MmTile::automatic};
  if (m <= 64) {
    tiles.insert(tiles.end(), {MmTile::m16n32_k4, MmTile::m16n64_k4, MmTile::m32n64_k4, MmTile::m64n128});
  } else {
    tiles.insert(tiles.end(), {MmTile::wg128x128, MmTile::wg128x256, MmTile::wgpp64x256, MmTile::wgpp128x128,
                               MmTile::wgpp64x256_c2, MmTile::wgpp128x128_c2, MmTile::wg128x256_c2, MmTile::m128n128,
                               MmTile::m128n256});
  }
  tiles.push_back(MmTile::automatic);  // timed again last: the spread between the two is the noise
  if (!only.empty()) tiles = only;
  std::printf("\n(M,N,K)=(%d,%d,%d)  cuBLASLt int8 GEMM alone %.4f ms = %.0f TOPS; + epilogue kernel %.4f ms; "
              "pipeline %.4f ms = %.0f TOPS\n  cuBLASLt: %s\n",
              m, n, k, t_lt, ops / t_lt / 1e9, t_epi, t_pipe, ops / t_pipe / 1e9, plan.identity().c_str());
  std::fputs(cutlass_line.c_str(), stdout);
  // Our kernel's arguments for a tile (the operands set per launch).
  const auto ours = [&](MmTile tile) {
    ScaledMmArgs args;
    args.sa = sa.get(), args.sw = sw.get(), args.y = y_ours.get();
    args.m = m, args.n = n, args.k = k;
    args.formula = EpilogueKind::vllm_cutlass;
    args.tile = tile;
    args.a = as[0].get(), args.w = ws[0].get();
    return args;
  };
  for (MmTile tile : tiles) {
    ScaledMmArgs args = ours(tile);
    std::string id;
    const double t = median_ms([&](int i) {
      args.a = as[i % copies].get(), args.w = ws[i % copies].get();
      id = launch_int8_scaled_mm(args, nullptr);
    });
    if (id.rfind("error:", 0) == 0) {
      std::printf("  ours %-13s %s\n", tile_name(tile), id.c_str());
      continue;
    }
    // Same operands, same formula: the outputs must be identical.
    args.a = as[0].get(), args.w = ws[0].get();
    launch_int8_scaled_mm(args, nullptr);
    plan.run(as[0].get(), ws[0].get(), acc.get(), nullptr, nullptr, nullptr);
    launch_int32_scaled_epilogue(acc.get(), sa.get(), sw.get(), nullptr, y_lt.get(), m, n,
                                 EpilogueKind::vllm_cutlass, BiasMode::muladd, nullptr);
    QC_CUDA_CHECK(cudaDeviceSynchronize());
    const auto ya = y_ours.to_host(), yb = y_lt.to_host();
    size_t diff = 0;
    for (size_t i = 0; i < ya.size(); ++i) diff += ya[i] != yb[i];
    std::printf("  ours %-13s %.4f ms = %5.0f TOPS  speed vs pipeline %.2fx  (vs GEMM alone %.2fx)  bitwise diffs %zu%s\n",
                tile_name(tile), t, ops / t / 1e9, t_pipe / t, t_lt / t, diff,
                tile == MmTile::automatic ? ("  [" + id + "]").c_str() : "");
  }
  // Issue #32 item 6: ours against cuBLASLt's GEMM alone, alternated in rounds ("auto" at M >= 512; with
  // `--shape ... --tiles`, each tile named).
  std::vector<MmTile> paired;
  if (!only.empty()) paired = only;
  else if (m >= 512) paired = {MmTile::automatic};
  for (MmTile tile : paired) {
    ScaledMmArgs args = ours(tile);
    if (launch_int8_scaled_mm(args, nullptr).rfind("error:", 0) == 0) continue;  // printed above
    const bench::PairedTiming p = bench::time_alternating(
        [&](int i) {
          args.a = as[i % copies].get(), args.w = ws[i % copies].get();
          launch_int8_scaled_mm(args, nullptr);
        },
        [&](int i) { plan.run(as[i % copies].get(), ws[i % copies].get(), acc.get(), nullptr, nullptr, nullptr); }, 16);
    std::printf("  ours %s vs cuBLASLt GEMM alone, alternating (%d rounds, order swapped each, batches of %d launches "
                "back to back): ours %.4f ms, cuBLASLt %.4f ms, speed ratio median %.3fx (range %.3f-%.3f); host time "
                "to queue a launch: ours %.1f us, cuBLASLt %.1f us (%s)\n",
                tile_name(tile), p.rounds, p.batch, p.a_ms, p.b_ms, p.ratio_median, p.ratio_min, p.ratio_max,
                p.a_host_us, p.b_host_us,
                p.ahead ? fmt::format("queued ahead; {} of {} batches queued slower than the delay", p.late, 2 * p.rounds).c_str()
                        : "not queued ahead: QC_BENCH_QUEUE_AHEAD=0");
  }
  // `--ab NAME=VALUE`: the setting's effect on each paired tile, measured against the same kernel without it.
  if (!ab.empty()) {
    const std::string value = ab.substr(ab.find('=') + 1);
    // "Without" is the setting unset (the kernel's default), whatever the environment held; that is
    // restored at the end.
    const ScopedEnv env(ab.substr(0, ab.find('=')));
    const auto setting = [&](bool on) {
      if (on) {
        env.set(value.c_str());
      } else {
        env.unset();
      }
    };
    plan.run(as[0].get(), ws[0].get(), acc.get(), nullptr, nullptr, nullptr);
    launch_int32_scaled_epilogue(acc.get(), sa.get(), sw.get(), nullptr, y_lt.get(), m, n, EpilogueKind::vllm_cutlass,
                                 BiasMode::muladd, nullptr);
    const auto yb = y_lt.to_host();
    for (MmTile tile : paired) {
      ScaledMmArgs args = ours(tile);
      setting(true);
      const std::string id = launch_int8_scaled_mm(args, nullptr);
      QC_CUDA_CHECK(cudaDeviceSynchronize());
      if (id.rfind("error:", 0) == 0) {
        std::printf("  ours %s with %s: %s\n", tile_name(tile), ab.c_str(), id.c_str());
        setting(false);
        continue;
      }
      const auto ya = y_ours.to_host();
      size_t diff = 0;
      for (size_t i = 0; i < ya.size(); ++i) diff += ya[i] != yb[i];
      const auto launch_as = [&](bool on) {
        return [&, on](int i) {
          setting(on);
          args.a = as[i % copies].get(), args.w = ws[i % copies].get();
          launch_int8_scaled_mm(args, nullptr);
        };
      };
      const bench::PairedTiming self = bench::time_alternating(launch_as(true), launch_as(false), 16);
      const bench::PairedTiming lt = bench::time_alternating(
          launch_as(true), [&](int i) { plan.run(as[i % copies].get(), ws[i % copies].get(), acc.get(), nullptr, nullptr, nullptr); },
          16);
      std::printf("  ours %s with %s vs without, alternating (batches of %d): %.4f ms vs %.4f ms, speed ratio median %.3fx "
                  "(range %.3f-%.3f); with it vs cuBLASLt GEMM alone %.3fx (range %.3f-%.3f); bitwise diffs %zu; %d of %d "
                  "batches queued slower than the delay ahead  [%s]\n",
                  tile_name(tile), ab.c_str(), self.batch, self.a_ms, self.b_ms, self.ratio_median, self.ratio_min,
                  self.ratio_max, lt.ratio_median, lt.ratio_min, lt.ratio_max, diff, self.late + lt.late,
                  2 * (self.rounds + lt.rounds), id.c_str());
    }
  }
  const double t_pipe2 = median_ms([&](int i) {
    plan.run(as[i % copies].get(), ws[i % copies].get(), acc.get(), nullptr, nullptr, nullptr);
    launch_int32_scaled_epilogue(acc.get(), sa.get(), sw.get(), nullptr, y_lt.get(), m, n,
                                 EpilogueKind::vllm_cutlass, BiasMode::muladd, nullptr);
  });
  std::printf("  cuBLASLt pipeline timed again: %.4f ms (first %.4f ms)\n", t_pipe2, t_pipe);
}

void bench_compare() {
  const size_t n = size_t{1} << 29;  // 512 Mi bf16 = 1 GiB per array
  cuda::DeviceBuffer<uint16_t> a(n), b(n);
  QC_CUDA_CHECK(cudaMemset(a.get(), 0x3C, n * 2));
  QC_CUDA_CHECK(cudaMemset(b.get(), 0x3C, n * 2));
  QC_CUDA_CHECK(cudaMemset(b.get() + 12345, 0x3D, 2));  // a few differences
  cuda::DeviceBuffer<Bf16CompareCounts> counts(1);
  const double t_cmp = median_ms([&](int) {
    cudaMemsetAsync(counts.get(), 0, sizeof(Bf16CompareCounts));
    launch_compare_bf16(a.get(), b.get(), static_cast<int64_t>(n), counts.get(), nullptr);
  });
  const double t_copy = median_ms([&](int) { cudaMemcpyAsync(b.get(), a.get(), n * 2, cudaMemcpyDeviceToDevice); });
  const double gb = static_cast<double>(n) * 2 * 2 / 1e9;  // compare reads two arrays; copy reads one, writes one
  std::printf("\ncompare_bf16: 2 x %.2f GB read in %.3f ms = %.0f GB/s; cudaMemcpy D2D %.2f GB moved in %.3f ms = %.0f GB/s; "
              "ratio %.2f\n",
              gb / 2, t_cmp, gb / t_cmp * 1e3, gb, t_copy, gb / t_copy * 1e3, t_copy / t_cmp);
}

// One M = 512 pass over a model's seven layer shapes ({N, K}), int64 and int32 outputs (verify's device
// pipeline stores int32).
void bench_exact_accum(const char* model, const int (&shapes)[7][2], int layers) {
  const int m = 512;
  double ms64 = 0, ms32 = 0, macs = 0;
  for (const auto& s : shapes) {
    auto a = random_device<int8_t>(static_cast<size_t>(m) * s[1], -128, 127, 5);
    auto w = random_device<int8_t>(static_cast<size_t>(s[0]) * s[1], -128, 127, 6);
    cuda::DeviceBuffer<int64_t> out(static_cast<size_t>(m) * s[0]);
    cuda::DeviceBuffer<int32_t> out32(static_cast<size_t>(m) * s[0]);
    ms64 += median_ms([&](int) { launch_int64_exact_accum(a.get(), w.get(), out.get(), m, s[0], s[1], nullptr); });
    ms32 += median_ms([&](int) { launch_int64_exact_accum(a.get(), w.get(), out32.get(), m, s[0], s[1], nullptr); });
    macs += static_cast<double>(m) * s[0] * s[1];
  }
  std::printf("\nexact accumulation (CUDA cores): one decoder block of %s at M=512, int64 out %.3f ms = %.2f T MAC/s, "
              "int32 out %.3f ms = %.2f T MAC/s; %d blocks (%d linear layers, int32) ~ %.1f ms\n",
              model, ms64, macs / ms64 / 1e9, ms32, macs / ms32 / 1e9, layers, 7 * layers, layers * ms32);
}

void bench_exact_accum() {
  // {N, K} of q, k, v, o, gate, up, down.
  const int qwen[7][2] = {{2048, 2048}, {1024, 2048}, {1024, 2048}, {2048, 2048}, {6144, 2048}, {6144, 2048}, {2048, 6144}};
  const int llama70b[7][2] = {{8192, 8192},  {1024, 8192},  {1024, 8192}, {8192, 8192},
                              {28672, 8192}, {28672, 8192}, {8192, 28672}};
  bench_exact_accum("Qwen3-1.7B", qwen, 28);
  bench_exact_accum("Llama-3-70B", llama70b, 80);
}

}  // namespace

int main(int argc, char** argv) {
  std::string reason;
  if (!qc::cuda_available(&reason)) {
    std::printf("bench_cuda_scaled_mm: SKIPPED: %s\n", reason.c_str());
    return 0;
  }
  std::printf("bench_cuda_scaled_mm on %s\n%s\n", qc::cuda::device_description().c_str(),
              qc::cuda::cublaslt_description().c_str());
  const int shapes[][3] = {{512, 4096, 4096}, {512, 12288, 4096}, {4096, 4096, 4096}, {8192, 8192, 8192},
                           {1, 4096, 4096},   {16, 4096, 4096}};
  const bool quick = argc > 1 && std::string(argv[1]) == "--quick";
  if (argc > 1 && std::string(argv[1]) == "--exact") {  // the exact accumulation alone
    bench_exact_accum();
    return 0;
  }
  if (argc > 2 && std::string(argv[1]) == "--shape") {  // one GEMM, optionally only some of our tiles
    int m = 0, n = 0, k = 0;
    if (std::sscanf(argv[2], "%d,%d,%d", &m, &n, &k) != 3 || m < 1 || n < 1 || k < 1) {
      std::fprintf(stderr, "bench_cuda_scaled_mm: --shape: expected M,N,K (positive), found \"%s\"\n", argv[2]);
      return 2;
    }
    std::vector<MmTile> only;
    std::string ab;
    if (argc % 2 == 0) {  // options come in pairs after --shape M,N,K
      std::fprintf(stderr, "bench_cuda_scaled_mm: %s without its value\n", argv[argc - 1]);
      return 2;
    }
    for (int i = 3; i + 1 < argc; i += 2) {
      if (std::string(argv[i]) == "--ab") {
        ab = argv[i + 1];
        if (ab.find('=') == std::string::npos || ab.find('=') == 0) {
          std::fprintf(stderr, "bench_cuda_scaled_mm: --ab: expected NAME=VALUE, found \"%s\"\n", ab.c_str());
          return 2;
        }
        continue;
      }
      if (std::string(argv[i]) != "--tiles") {
        std::fprintf(stderr, "bench_cuda_scaled_mm: expected --tiles or --ab, found \"%s\"\n", argv[i]);
        return 2;
      }
      std::string list = argv[i + 1];
      for (size_t at = 0; at <= list.size();) {
        const size_t end = std::min(list.find(',', at), list.size());
        const std::string name = list.substr(at, end - at);
        bool found = false;
        // Every tile `tile_name` knows (the enumerators are consecutive from 0; "?" past the last).
        for (int t = 0; std::string(tile_name(static_cast<MmTile>(t))) != "?"; ++t) {
          if (name == tile_name(static_cast<MmTile>(t))) only.push_back(static_cast<MmTile>(t)), found = true;
        }
        if (!found) {
          std::fprintf(stderr, "bench_cuda_scaled_mm: --tiles: no tile \"%s\"\n", name.c_str());
          return 2;
        }
        at = end + 1;
      }
    }
    bench_gemm(m, n, k, only, ab);
    return 0;
  }
  for (const auto& s : shapes) bench_gemm(s[0], s[1], s[2]);
  if (!quick) {
    bench_compare();
    bench_exact_accum();
  }
  return 0;
}
#endif
