// C8 end to end: c8_decoder.hpp.
#include "checks/c8_decoder.hpp"

#include <fmt/format.h>

#include <atomic>
#include <bit>
#include <cmath>
#include <cstring>

#include "checks/c8_tp.hpp"
#include "epilogue/quantize.hpp"
#include "qconform/error.hpp"
#include "qconform/numerics.hpp"
#include "synth/synth.hpp"

namespace qc {

namespace {

// Runs `layer` unsharded and alone on x and counts the outputs whose fp32 bits differ from `y`.
void compare_with_baseline(BatchMateStats& stats, const LinearFn& inner, const LinearLayer& layer, const float* x,
                           int64_t M, const float* y) {
  const int64_t n = layer.n_out;
  std::vector<float> alone(static_cast<size_t>(M * n));
  inner(layer, x, M, alone.data());
  std::lock_guard lock(stats.mu);
  BatchMateStats::Layer& s = stats.layers[layer.name];
  ++s.calls;
  s.elements += M * n;
  for (int64_t i = 0; i < M * n; ++i) {
    const uint32_t a = std::bit_cast<uint32_t>(alone[i]), g = std::bit_cast<uint32_t>(y[i]);
    if (a == g) continue;
    if (s.differing++ == 0) s.first_row = i / n, s.first_col = i % n, s.first_alone = a, s.first_batched = g;
  }
}

// The layer with its weights quantized whole (INT8 per channel, or the FP8 run's element type and
// scaling), as the W8A8 linear would quantize them; a quantized checkpoint's layer as it is.
LinearLayer quantized_whole(const LinearLayer& l, const W8a8Options& o) {
  LinearLayer q = l;
  if (l.quantized()) return q;
  q.weight_q.resize(static_cast<size_t>(l.n_out * l.k_in));
  q.weight_scale.resize(static_cast<size_t>(l.n_out));
  if (o.fp8) {
    q.weight_type = o.fp8->weight;
    q.weight_scaling = o.fp8->weight_scaling;
    quantize_weights_fp8(q.weight_type, q.weight_scaling, l.weight.data(), l.n_out, l.k_in,
                         reinterpret_cast<uint8_t*>(q.weight_q.data()), q.weight_scale.data(), o.weight_dtype);
  } else {
    q.weight_type = ElementType::int8;
    q.weight_scaling = WeightScaling::per_channel;
    quantize_weights_per_channel(l.weight.data(), l.n_out, l.k_in, q.weight_q.data(), q.weight_scale.data(),
                                 o.weight_dtype);
  }
  return q;
}

// Shard t of `degree` of a linear layer: rows [t*N/T, ...) of its weights (column-parallel) or columns
// [t*K/T, ...) (row-parallel, the bias on shard 0), fp32 and quantized weights alike; named apart, as the
// W8A8 weight cache is keyed by name.
LinearLayer shard_layer(const LinearLayer& l, bool row, int degree, int t) {
  LinearLayer s;
  s.name = fmt::format("{}#tp{}.{}", l.name, degree, t);
  s.weight_type = l.weight_type;
  s.weight_scaling = l.weight_scaling;
  const int64_t n = row ? l.n_out : l.n_out / degree, k = row ? l.k_in / degree : l.k_in;
  const int64_t n0 = row ? 0 : n * t, k0 = row ? k * t : 0;
  s.n_out = n, s.k_in = k;
  const auto slice = [&](const auto& src, auto& dst) {
    if (src.empty()) return;
    dst.resize(static_cast<size_t>(n * k));
    for (int64_t r = 0; r < n; ++r) std::copy_n(&src[(n0 + r) * l.k_in + k0], k, &dst[r * k]);
  };
  slice(l.weight, s.weight);
  slice(l.weight_q, s.weight_q);
  if (!l.weight_scale.empty()) s.weight_scale.assign(l.weight_scale.begin() + n0, l.weight_scale.begin() + n0 + n);
  if (!l.bias.empty() && (!row || t == 0)) s.bias.assign(l.bias.begin() + n0, l.bias.begin() + n0 + n);
  return s;
}

}  // namespace

LinearFn with_row_recorder(LinearFn inner, std::shared_ptr<PromptRows> pool) {
  return [inner = std::move(inner), pool](const LinearLayer& layer, const float* x, int64_t M, float* y) {
    {
      const int64_t seq = pool->current.load();
      std::lock_guard lock(pool->mu);
      std::vector<PromptRows::Row>& rows = pool->rows[layer.name];
      int64_t kept = 0;
      for (const PromptRows::Row& r : rows) kept += r.sequence == seq;
      for (int64_t i = 0; i < M && kept < pool->cap; ++i, ++kept) {
        rows.push_back({seq, std::vector<float>(x + i * layer.k_in, x + (i + 1) * layer.k_in)});
      }
    }
    inner(layer, x, M, y);
  };
}

LinearFn with_batch_mates(LinearFn inner, std::vector<int64_t> mates, uint64_t seed,
                          std::shared_ptr<BatchMateStats> stats, std::shared_ptr<PromptRows> from) {
  QC_INPUT(!mates.empty(), "--batch-mates: expected a comma-separated list of mate counts");
  for (int64_t b : mates) QC_INPUT(b >= 0, "--batch-mates: expected counts >= 0, found {}", b);
  auto calls = std::make_shared<std::atomic<int64_t>>(0);
  return [inner = std::move(inner), mates = std::move(mates), seed, stats, calls, from](
             const LinearLayer& layer, const float* x, int64_t M, float* y) {
    const int64_t call = calls->fetch_add(1);
    const int64_t b = mates[static_cast<size_t>(call % static_cast<int64_t>(mates.size()))];
    const int64_t k = layer.k_in, n = layer.n_out;
    std::vector<float> xb(static_cast<size_t>((M + b) * k)), yb(static_cast<size_t>((M + b) * n));
    std::copy_n(x, M * k, xb.begin());
    // Mates from other prompts' rows at this layer (none without a pool), copied under the pool's lock:
    // the r-th mate is the (call * 7919 + r)-th of them in recorded order, cyclically.
    int64_t from_pool = 0;
    if (from) {
      const int64_t seq = from->current.load();
      std::lock_guard lock(from->mu);
      std::vector<const std::vector<float>*> others;
      if (auto it = from->rows.find(layer.name); it != from->rows.end()) {
        for (const PromptRows::Row& r : it->second) {
          if (r.sequence != seq && static_cast<int64_t>(r.x.size()) == k) others.push_back(&r.x);
        }
      }
      for (; !others.empty() && from_pool < b; ++from_pool) {
        const std::vector<float>& src = *others[static_cast<size_t>((call * 7919 + from_pool) % static_cast<int64_t>(others.size()))];
        std::copy(src.begin(), src.end(), xb.begin() + (M + from_pool) * k);
      }
      from->from_prompts += from_pool;
      from->synthetic += b - from_pool;
    }
    double ss = 0;
    for (int64_t i = 0; i < M * k; ++i) ss += static_cast<double>(x[i]) * x[i];
    const float rms = static_cast<float>(std::sqrt(ss / static_cast<double>(std::max<int64_t>(M * k, 1))));
    uint64_t state = seed ^ (0x9e3779b97f4a7c15ull * static_cast<uint64_t>(call + 1));
    for (int64_t i = (M + from_pool) * k; i < (M + b) * k; ++i) {  // the rest: synthetic rows
      const double u = static_cast<double>(splitmix64(state) >> 11) / 9007199254740992.0;  // [0, 1)
      xb[static_cast<size_t>(i)] = static_cast<float>((4.0 * u - 2.0) * rms);
    }
    inner(layer, xb.data(), M + b, yb.data());
    std::copy_n(yb.begin(), M * n, y);
    if (stats) compare_with_baseline(*stats, inner, layer, x, M, y);
  };
}

LinearFn with_tensor_parallel(LinearFn inner, int degree, const std::string& reduction, const W8a8Options& options,
                              std::shared_ptr<BatchMateStats> stats, std::shared_ptr<TpDecoderCounts> counts) {
  QC_INPUT(degree >= 1, "--tp-degree: expected a degree >= 1, found {}", degree);
  if (!counts) counts = std::make_shared<TpDecoderCounts>();
  const ReductionModel model = parse_reduction_model(reduction, "--tp-reduction");
  struct Shards {
    std::mutex mu;
    std::map<std::string, std::vector<std::unique_ptr<LinearLayer>>> by_layer;
  };
  auto shards = std::make_shared<Shards>();
  return [=](const LinearLayer& layer, const float* x, int64_t M, float* y) {
    const ParallelStyle style = parallel_style_of(layer.name);
    const bool row = style == ParallelStyle::row;
    const int64_t n = layer.n_out, k = layer.k_in;
    std::string why;
    if (layer.weight_blocks || (options.fp8 && options.fp8->weight_blocks)) why = "block-scaled weights";
    if ((row ? k : n) % degree != 0) why = fmt::format("{} = {} is not divisible by {}", row ? "K" : "N", row ? k : n, degree);
    if (degree == 1 || !why.empty()) {
      if (!why.empty()) {
        std::lock_guard lock(counts->mu);
        counts->unsharded.emplace(layer.name, why);
      }
      return inner(layer, x, M, y);
    }
    std::vector<LinearLayer*> parts;
    {
      std::lock_guard lock(shards->mu);
      auto& v = shards->by_layer[layer.name];
      if (v.empty()) {
        const LinearLayer whole = quantized_whole(layer, options);
        for (int t = 0; t < degree; ++t) v.push_back(std::make_unique<LinearLayer>(shard_layer(whole, row, degree, t)));
      }
      for (auto& p : v) parts.push_back(p.get());
    }
    const int64_t ns = row ? n : n / degree, ks = row ? k / degree : k;
    std::vector<float> xs(static_cast<size_t>(M * ks)), ys(static_cast<size_t>(M * ns));
    Partials partials;
    for (int t = 0; t < degree; ++t) {
      for (int64_t r = 0; r < M; ++r) std::copy_n(x + r * k + (row ? t * ks : 0), ks, &xs[r * ks]);
      inner(*parts[t], xs.data(), M, ys.data());
      if (!row) {
        for (int64_t r = 0; r < M; ++r) std::copy_n(&ys[r * ns], ns, y + r * n + t * ns);
        continue;
      }
      std::vector<uint16_t> p(ys.size());
      for (size_t i = 0; i < ys.size(); ++i) p[i] = f32_to_bf16(ys[i]);  // the W8A8 output is bf16 (exact)
      partials.push_back(std::move(p));
    }
    if (row) {
      const std::vector<uint16_t> sum = reduce_by_steps(model, partials);
      for (size_t i = 0; i < sum.size(); ++i) y[i] = bf16_to_f32(sum[i]);
    }
    if (stats) compare_with_baseline(*stats, inner, layer, x, M, y);
  };
}

nlohmann::json BatchMateStats::to_json() {
  std::lock_guard lock(mu);
  const auto bits = [](uint32_t b) { return fmt::format("0x{:08x} ({:g})", b, std::bit_cast<float>(b)); };
  nlohmann::json per_layer = nlohmann::json::array();
  int64_t calls = 0, elements = 0, differing = 0;
  for (const auto& [name, l] : layers) {
    calls += l.calls, elements += l.elements, differing += l.differing;
    per_layer.push_back({{"layer", name}, {"calls", l.calls}, {"elements", l.elements}, {"differing", l.differing},
                         {"first", l.differing == 0 ? nlohmann::json()
                                                    : nlohmann::json{{"row", l.first_row}, {"col", l.first_col},
                                                                     {"baseline", bits(l.first_alone)},
                                                                     {"here", bits(l.first_batched)}}}});
  }
  return {{"title", title}, {"baseline", baseline}, {"layers", per_layer}, {"calls", calls}, {"elements", elements},
          {"differing", differing}};
}

std::string BatchMateStats::describe() {
  std::lock_guard lock(mu);
  std::string s;
  int64_t calls = 0, elements = 0, differing = 0, variant_layers = 0;
  for (const auto& [name, l] : layers) {
    calls += l.calls, elements += l.elements, differing += l.differing;
    if (l.differing == 0) continue;
    ++variant_layers;
    s += fmt::format("  {}: {} of {} outputs differ from {} ({} calls); first at row {} col {}: baseline 0x{:08x} "
                     "({:g}), here 0x{:08x} ({:g})\n",
                     name, l.differing, l.elements, baseline, l.calls, l.first_row, l.first_col, l.first_alone,
                     std::bit_cast<float>(l.first_alone), l.first_batched, std::bit_cast<float>(l.first_batched));
  }
  s += fmt::format("{}: {} linear layers, {} calls, {} outputs: {} differ bitwise from {} ({} layers variant){}\n",
                   title, layers.size(), calls, elements, differing, baseline, variant_layers,
                   layers.empty() ? "" : (differing == 0 ? ": invariant" : ": variant"));
  return s;
}

}  // namespace qc
