// Benchmark of the exact INT8 accumulator (`qc::exact_accumulate_i32`, packing included).
// Its named baseline, numpy/OpenBLAS float64 matmul on the same operands (the paper's emulation
// method), is timed in the same run by bench/bench_accum.py, which drives this executable:
//   python3 bench/bench_accum.py --build build-accum
// Standalone:
//   bench_accum M N K [--reps R] [--threads T] [--target NAME] [--a A.bin --w W.bin] [--out ACC.bin]
// --target forces one Highway target (e.g. AVX3 for the int16 `pmaddwd` kernel instead of the
// VNNI one), through hwy::SetSupportedTargetsForTest.
// A.bin / W.bin: raw int8, [M,K] and [N,K] row-major; without them the operands are uniform
// random int8 (seed 1). ACC.bin: raw little-endian int32 [M,N] of the last repetition.
// Prints one JSON line: target, threads, shape, best and median seconds, GOPS (2·M·N·K / best).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#ifndef HWY_WANT_AVX3_DL
#define HWY_WANT_AVX3_DL  // the same target set as src/accum/accum_kernels.cpp
#endif
#include <hwy/targets.h>

#include "qconform/accumulation.hpp"
#include "qconform/error.hpp"

namespace {

std::vector<int8_t> read_raw(const std::string& path, int64_t count) {
  std::ifstream in(path, std::ios::binary);
  QC_INPUT(in.good(), "{}: cannot open", path);
  std::vector<int8_t> v(static_cast<size_t>(count));
  in.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(count));
  QC_INPUT(in.gcount() == count, "{}: expected {} bytes, found {}", path, count, in.gcount());
  return v;
}

int usage() {
  std::fprintf(stderr,
               "usage: bench_accum M N K [--reps R] [--threads T] [--target NAME] [--a A.bin --w W.bin] "
               "[--out ACC.bin]\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) try {
  if (argc < 4) return usage();
  const int64_t m = std::atoll(argv[1]), n = std::atoll(argv[2]), k = std::atoll(argv[3]);
  int reps = 5, threads = 0;
  std::string a_path, w_path, out_path, target;
  for (int i = 4; i < argc; ++i) {
    const std::string arg = argv[i];
    if (i + 1 >= argc) return usage();
    if (arg == "--reps") reps = std::atoi(argv[++i]);
    else if (arg == "--threads") threads = std::atoi(argv[++i]);
    else if (arg == "--a") a_path = argv[++i];
    else if (arg == "--w") w_path = argv[++i];
    else if (arg == "--out") out_path = argv[++i];
    else if (arg == "--target") target = argv[++i];
    else return usage();
  }
  if (m <= 0 || n <= 0 || k <= 0 || reps <= 0) return usage();

  if (!target.empty()) {
    bool found = false;
    for (int64_t t : hwy::SupportedAndGeneratedTargets()) {
      if (target == hwy::TargetName(t)) {
        hwy::SetSupportedTargetsForTest(t);
        found = true;
      }
    }
    QC_INPUT(found, "--target: {} is not compiled in or not supported by this CPU", target);
  }

  std::vector<int8_t> a, w;
  if (!a_path.empty() || !w_path.empty()) {
    QC_INPUT(!a_path.empty() && !w_path.empty(), "--a and --w must be given together");
    a = read_raw(a_path, m * k);
    w = read_raw(w_path, n * k);
  } else {
    std::mt19937_64 rng(1);
    std::uniform_int_distribution<int> d(-128, 127);
    a.resize(static_cast<size_t>(m * k));
    w.resize(static_cast<size_t>(n * k));
    for (auto& x : a) x = static_cast<int8_t>(d(rng));
    for (auto& x : w) x = static_cast<int8_t>(d(rng));
  }
  std::vector<int32_t> acc(static_cast<size_t>(m * n));
  const qc::AccumShape s{m, n, k};

  qc::exact_accumulate_i32(a.data(), w.data(), s, acc.data(), threads);  // warm-up
  std::vector<double> secs;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    qc::exact_accumulate_i32(a.data(), w.data(), s, acc.data(), threads);
    const auto t1 = std::chrono::steady_clock::now();
    secs.push_back(std::chrono::duration<double>(t1 - t0).count());
  }
  std::sort(secs.begin(), secs.end());
  const double best = secs.front(), median = secs[secs.size() / 2];
  const double ops = 2.0 * double(m) * double(n) * double(k);

  if (!out_path.empty()) {
    std::ofstream out(out_path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(acc.data()), static_cast<std::streamsize>(acc.size() * sizeof(int32_t)));
    QC_INPUT(out.good(), "{}: write failed", out_path);
  }
  const int used_threads = threads > 0 ? threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  std::printf(
      "{\"bench\": \"exact_accumulate_i32\", \"target\": \"%s\", \"threads\": %d, \"m\": %lld, \"n\": %lld, "
      "\"k\": %lld, \"reps\": %d, \"best_s\": %.6f, \"median_s\": %.6f, \"gops\": %.2f}\n",
      qc::accum_target_name().c_str(), used_threads, static_cast<long long>(m), static_cast<long long>(n),
      static_cast<long long>(k), reps, best, median, ops / best * 1e-9);
  return 0;
} catch (const qc::Error& e) {
  std::fprintf(stderr, "bench_accum: %s\n", e.what());
  return 2;
}
