// C8 end to end: c8_decoder.hpp.
#include "checks/c8_decoder.hpp"

#include <fmt/format.h>

#include <atomic>
#include <bit>
#include <cmath>
#include <cstring>

#include "qconform/error.hpp"
#include "synth/synth.hpp"

namespace qc {

LinearFn with_batch_mates(LinearFn inner, std::vector<int64_t> mates, uint64_t seed,
                          std::shared_ptr<BatchMateStats> stats) {
  QC_INPUT(!mates.empty(), "--batch-mates: expected a comma-separated list of mate counts");
  for (int64_t b : mates) QC_INPUT(b >= 0, "--batch-mates: expected counts >= 0, found {}", b);
  auto calls = std::make_shared<std::atomic<int64_t>>(0);
  return [inner = std::move(inner), mates = std::move(mates), seed, stats, calls](const LinearLayer& layer,
                                                                                   const float* x, int64_t M, float* y) {
    const int64_t call = calls->fetch_add(1);
    const int64_t b = mates[static_cast<size_t>(call % static_cast<int64_t>(mates.size()))];
    const int64_t k = layer.k_in, n = layer.n_out;
    std::vector<float> xb(static_cast<size_t>((M + b) * k)), yb(static_cast<size_t>((M + b) * n));
    std::copy_n(x, M * k, xb.begin());
    double ss = 0;
    for (int64_t i = 0; i < M * k; ++i) ss += static_cast<double>(x[i]) * x[i];
    const float rms = static_cast<float>(std::sqrt(ss / static_cast<double>(std::max<int64_t>(M * k, 1))));
    uint64_t state = seed ^ (0x9e3779b97f4a7c15ull * static_cast<uint64_t>(call + 1));
    for (int64_t i = M * k; i < (M + b) * k; ++i) {
      const double u = static_cast<double>(splitmix64(state) >> 11) / 9007199254740992.0;  // [0, 1)
      xb[static_cast<size_t>(i)] = static_cast<float>((4.0 * u - 2.0) * rms);
    }
    inner(layer, xb.data(), M + b, yb.data());
    std::copy_n(yb.begin(), M * n, y);
    if (!stats) return;
    std::vector<float> alone(static_cast<size_t>(M * n));
    inner(layer, x, M, alone.data());
    std::lock_guard lock(stats->mu);
    BatchMateStats::Layer& s = stats->layers[layer.name];
    ++s.calls;
    s.elements += M * n;
    for (int64_t i = 0; i < M * n; ++i) {
      const uint32_t a = std::bit_cast<uint32_t>(alone[i]), g = std::bit_cast<uint32_t>(y[i]);
      if (a == g) continue;
      if (s.differing++ == 0) s.first_row = i / n, s.first_col = i % n, s.first_alone = a, s.first_batched = g;
    }
  };
}

std::string BatchMateStats::describe() {
  std::lock_guard lock(mu);
  std::string s;
  int64_t calls = 0, elements = 0, differing = 0, variant_layers = 0;
  for (const auto& [name, l] : layers) {
    calls += l.calls, elements += l.elements, differing += l.differing;
    if (l.differing == 0) continue;
    ++variant_layers;
    s += fmt::format("  {}: {} of {} outputs differ from the rows run alone ({} calls); first at row {} col {}: alone "
                     "0x{:08x} ({:g}), batched 0x{:08x} ({:g})\n",
                     name, l.differing, l.elements, l.calls, l.first_row, l.first_col, l.first_alone,
                     std::bit_cast<float>(l.first_alone), l.first_batched, std::bit_cast<float>(l.first_batched));
  }
  s += fmt::format("batch mates: {} linear layers, {} calls, {} outputs: {} differ bitwise from the same rows run alone "
                   "({} layers variant){}\n",
                   layers.size(), calls, elements, differing, variant_layers,
                   layers.empty() ? "" : (differing == 0 ? ": invariant" : ": variant"));
  return s;
}

}  // namespace qc
