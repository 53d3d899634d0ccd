// Benchmark of a sharded operand set's layer loads (`OperandSet::load`, the sharded loader of
// src/core/operands_io.cpp), as verify's device pipeline makes them, against the named baseline in the same
// run: the same loads with the previous layer released first, so that every load maps its shard and parses
// its header anew (what every load did before the loader took a live layer's mapping). Ours holds the
// previous layer while the next is loaded, as the pipeline does (the current layer and the one uploaded
// ahead), so the next layer of the same shard takes its mapping. Counter `loads/s`.
//
//   cmake --build build -j2 --target bench_layer_load
//   ./build/bench/bench_layer_load                       (56 qwen3-1.7b layers at M = 16 in one shard, in $TMPDIR)
//   QC_BENCH_FILE=set.index.json ./build/bench/bench_layer_load    (a set of your own, e.g. `qconform synth
//       --shapes llama3-70b --layers 35 --m 16 --shard-size 5000000000 --out /dev/shm/s/set.index.json`)
#include "bench_main.hpp"

#if __has_include(<benchmark/benchmark.h>)
#include <benchmark/benchmark.h>

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>

#include "core/operands_io.hpp"
#include "synth/synth.hpp"

namespace {

std::optional<qc::OperandSet> g_set;

void BM_Fresh(benchmark::State& state) {
  for (auto _ : state) {
    for (size_t i = 0; i < g_set->size(); ++i) {
      const qc::LayerOperands layer = g_set->load(i);  // released before the next load
      benchmark::DoNotOptimize(layer.w_q.data());
    }
  }
  state.counters["loads/s"] =
      benchmark::Counter(static_cast<double>(g_set->size()), benchmark::Counter::kIsIterationInvariantRate);
}

void BM_Held(benchmark::State& state) {
  for (auto _ : state) {
    std::optional<qc::LayerOperands> previous;
    for (size_t i = 0; i < g_set->size(); ++i) {
      qc::LayerOperands layer = g_set->load(i);
      benchmark::DoNotOptimize(layer.w_q.data());
      previous = std::move(layer);  // held while the next one loads, as the device pipeline holds it
    }
  }
  state.counters["loads/s"] =
      benchmark::Counter(static_cast<double>(g_set->size()), benchmark::Counter::kIsIterationInvariantRate);
}

}  // namespace

int main(int argc, char** argv) {
  const char* given = std::getenv("QC_BENCH_FILE");
  std::string index;
  std::filesystem::path made;
  if (given != nullptr && *given != '\0') {
    index = given;
  } else {
    made = std::filesystem::temp_directory_path() / ("qc-bench-layer-load-" + std::to_string(::getpid()));
    std::filesystem::create_directories(made);
    qc::SynthOptions options;
    options.m = 16;
    options.seed = 1;
    options.max_layers = 56;
    qc::ShardedOperandWriter writer((made / "set.index.json").string(), {{"format", "qconform-operands"}},
                                    int64_t{1} << 40);
    qc::synth_operands_each(options, [&](qc::LayerOperands l) { writer.add(std::move(l)); });
    index = writer.finish();
  }
  // As verify opens it for the device pipeline: digests beside, tree leaves registered for the device.
  g_set = qc::open_operands(index, /*with_digest=*/false, /*digest_beside=*/true, /*device_leaves=*/true);
  std::printf("%s: %zu layers\n", index.c_str(), g_set->size());
  benchmark::RegisterBenchmark("every load maps its shard (baseline: the previous layer released)", BM_Fresh)
      ->Unit(benchmark::kMillisecond)
      ->UseRealTime();
  benchmark::RegisterBenchmark("the previous layer held (its shard's mapping taken)", BM_Held)
      ->Unit(benchmark::kMillisecond)
      ->UseRealTime();
  const int rc = qc::bench::run_registered(argc, argv);
  g_set.reset();
  if (!made.empty()) std::filesystem::remove_all(made);
  return rc;
}
#else
QC_BENCH_SKIPPED_MAIN
#endif
