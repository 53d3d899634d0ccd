// Benchmark of the operands' tree digest (`qc::sha256_tree_file`, docs/formats.md "Tree digest": 64 MiB
// pieces hashed on every core) against the named baseline in the same run: the file's plain SHA-256
// (`qc::sha256_file`, one stream, reading ahead while it hashes), on the same file with the page cache
// warm (a first untimed read of each). Counter `bytes/s`.
//
//   cmake --build build -j2 --target bench_digest
//   QC_BENCH_FILE=ops.safetensors ./build/bench/bench_digest --benchmark_min_time=2
// Without QC_BENCH_FILE a 1 GiB file of pseudo-random bytes is written to $TMPDIR and removed at the end.
#include "bench_main.hpp"

#if __has_include(<benchmark/benchmark.h>)
#include <benchmark/benchmark.h>

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "core/fileio.hpp"
#include "core/sha256.hpp"

namespace {

std::string g_file;
uint64_t g_size = 0;

void BM_Plain(benchmark::State& state) {
  for (auto _ : state) benchmark::DoNotOptimize(qc::sha256_file(g_file));
  state.counters["bytes/s"] = benchmark::Counter(static_cast<double>(g_size), benchmark::Counter::kIsIterationInvariantRate);
}

void BM_Tree(benchmark::State& state) {
  for (auto _ : state) benchmark::DoNotOptimize(qc::sha256_tree_file(g_file));
  state.counters["bytes/s"] = benchmark::Counter(static_cast<double>(g_size), benchmark::Counter::kIsIterationInvariantRate);
}

}  // namespace

int main(int argc, char** argv) {
  const char* given = std::getenv("QC_BENCH_FILE");
  bool made = false;
  if (given != nullptr && *given != '\0') {
    g_file = given;
  } else {
    g_file = (std::filesystem::temp_directory_path() / ("qc-bench-digest-" + std::to_string(::getpid()) + ".bin")).string();
    std::vector<uint64_t> words((size_t{1} << 30) / 8);
    std::mt19937_64 rng(1);
    for (uint64_t& w : words) w = rng();
    qc::write_file_atomic(g_file, std::string_view(reinterpret_cast<const char*>(words.data()), words.size() * 8));
    made = true;
  }
  g_size = std::filesystem::file_size(g_file);
  // The page cache warm for both, and the two digests of the file printed (what is timed is what runs).
  std::printf("file %s, %llu bytes\n  %s\n  %s\n", g_file.c_str(), static_cast<unsigned long long>(g_size),
              qc::sha256_file(g_file).c_str(), qc::sha256_tree_file(g_file).c_str());
  benchmark::RegisterBenchmark("sha256_file (baseline: one stream)", BM_Plain)->Unit(benchmark::kMillisecond)->UseRealTime();
  benchmark::RegisterBenchmark("sha256_tree_file (64 MiB pieces, every core)", BM_Tree)->Unit(benchmark::kMillisecond)->UseRealTime();
  const int rc = qc::bench::run_registered(argc, argv);
  if (made) std::filesystem::remove(g_file);
  return rc;
}
#else
QC_BENCH_SKIPPED_MAIN
#endif
