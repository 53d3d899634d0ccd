// C8's reduction models and collectives (c8_tp.hpp): one closed form and one step-by-step execution
// per model, and the collectives the tensor-parallel simulation runs.
#include <fmt/format.h>

#include <charconv>

#include "checks/c8_tp.hpp"
#include "qconform/error.hpp"
#include "qconform/numerics.hpp"

namespace qc {

namespace {

// The working value of a partial sum: fp32 (with `fp32`) or a bf16 kept as its fp32 value.
struct Adder {
  bool fp32 = false;
  float load(uint16_t p) const { return bf16_to_f32(p); }
  // One addition of the collective: bf16(rn32(a + b)) for bf16 sums, rn32(a + b) for fp32 sums.
  float add(float a, float b) const {
    const float s = a + b;
    return fp32 ? s : bf16_to_f32(f32_to_bf16(s));
  }
  uint16_t store(float v) const { return f32_to_bf16(v); }
};

int64_t largest_pow2_below(int64_t n) {  // n >= 2
  int64_t h = 1;
  while (h * 2 < n) h *= 2;
  return h;
}

float tree_sum(const Adder& ad, const Partials& p, size_t e, int64_t lo, int64_t hi) {
  if (hi - lo == 1) return ad.load(p[static_cast<size_t>(lo)][e]);
  const int64_t mid = lo + largest_pow2_below(hi - lo);
  return ad.add(tree_sum(ad, p, e, lo, mid), tree_sum(ad, p, e, mid, hi));
}

// NCCL's chunking of one ring all-reduce (one channel): the chunk size of the loop that starts at
// `offset` of `count` elements, and the loop's length.
int64_t ring_chunk(const ReductionModel& m, int64_t ranks, int64_t count, int64_t offset) {
  const int64_t remaining = count - offset;
  if (m.chunk > 0 && remaining >= ranks * m.chunk) return m.chunk;
  const int64_t per_rank = (remaining + ranks - 1) / ranks;
  return (per_rank + 7) / 8 * 8;  // alignUp(divUp(remCount, nranks), 16 / sizeof(bf16))
}

void check_partials(const Partials& p) {
  QC_CHECK(!p.empty(), "reduction over no partials");
  for (const auto& v : p) QC_CHECK(v.size() == p[0].size(), "partials of different lengths");
}

}  // namespace

std::string ReductionModel::name() const {
  std::string s = algo == ReductionAlgo::sequential ? "sequential" : algo == ReductionAlgo::ring ? "ring" : "tree";
  if (algo == ReductionAlgo::ring && chunk > 0) s += fmt::format(":{}", chunk);
  if (fp32) s += "+fp32";
  return s;
}

ReductionModel parse_reduction_model(std::string_view spec, std::string_view what) {
  ReductionModel m;
  std::string_view s = spec;
  if (s.ends_with("+fp32")) {
    m.fp32 = true;
    s.remove_suffix(5);
  } else if (s.ends_with("+bf16")) {
    s.remove_suffix(5);
  }
  if (s == "sequential") {
    m.algo = ReductionAlgo::sequential;
  } else if (s == "tree") {
    m.algo = ReductionAlgo::tree;
  } else if (s == "ring") {
    m.algo = ReductionAlgo::ring;
  } else if (s.starts_with("ring:")) {
    m.algo = ReductionAlgo::ring;
    const std::string_view d = s.substr(5);
    const auto [end, ec] = std::from_chars(d.data(), d.data() + d.size(), m.chunk);
    QC_INPUT(ec == std::errc() && end == d.data() + d.size() && m.chunk >= 1,
             "{}: expected ring:<chunk> with a positive number of elements, found `{}`", what, spec);
  } else {
    QC_FAIL_INPUT("{}: expected sequential, ring, ring:<chunk> or tree (optionally +fp32 or +bf16), found `{}`", what,
                  spec);
  }
  return m;
}

std::vector<uint16_t> reduce_closed_form(const ReductionModel& m, const Partials& p) {
  check_partials(p);
  const Adder ad{m.fp32};
  const int64_t t = static_cast<int64_t>(p.size()), count = static_cast<int64_t>(p[0].size());
  std::vector<uint16_t> out(static_cast<size_t>(count));
  int64_t loop_start = 0, loop_chunk = 0;
  for (int64_t e = 0; e < count; ++e) {
    const size_t i = static_cast<size_t>(e);
    float v = 0;
    switch (m.algo) {
      case ReductionAlgo::sequential:
        v = ad.load(p[0][i]);
        for (int64_t r = 1; r < t; ++r) v = ad.add(v, ad.load(p[static_cast<size_t>(r)][i]));
        break;
      case ReductionAlgo::tree: v = tree_sum(ad, p, i, 0, t); break;
      case ReductionAlgo::ring: {
        if (e == 0 || e >= loop_start + t * loop_chunk) {
          if (e > 0) loop_start += t * loop_chunk;
          loop_chunk = ring_chunk(m, t, count, loop_start);
        }
        const int64_t c = (e - loop_start) / loop_chunk;  // the chunk: its sum starts at rank c+1, ends at c
        v = ad.load(p[static_cast<size_t>((c + 1) % t)][i]);
        for (int64_t j = 2; j <= t; ++j) v = ad.add(v, ad.load(p[static_cast<size_t>((c + j) % t)][i]));
        break;
      }
    }
    out[i] = ad.store(v);
  }
  return out;
}

std::vector<uint16_t> reduce_by_steps(const ReductionModel& m, const Partials& p) {
  check_partials(p);
  const Adder ad{m.fp32};
  const int64_t t = static_cast<int64_t>(p.size()), count = static_cast<int64_t>(p[0].size());
  // Each rank's buffer, in the collective's working precision.
  std::vector<std::vector<float>> buf(static_cast<size_t>(t), std::vector<float>(static_cast<size_t>(count)));
  for (int64_t r = 0; r < t; ++r) {
    for (int64_t e = 0; e < count; ++e) buf[r][e] = ad.load(p[r][e]);
  }
  std::vector<uint16_t> out(static_cast<size_t>(count));
  if (m.algo == ReductionAlgo::sequential) {
    // A chain: rank r receives the running sum from r-1 and adds its own; the last rank holds the result.
    for (int64_t r = 1; r < t; ++r) {
      for (int64_t e = 0; e < count; ++e) buf[r][e] = ad.add(buf[r - 1][e], buf[r][e]);
    }
    for (int64_t e = 0; e < count; ++e) out[e] = ad.store(buf[t - 1][e]);
    return out;
  }
  if (m.algo == ReductionAlgo::tree) {
    for (int64_t d = 1; d < t; d *= 2) {
      for (int64_t r = 0; r + d < t; r += 2 * d) {
        for (int64_t e = 0; e < count; ++e) buf[r][e] = ad.add(buf[r][e], buf[r + d][e]);
      }
    }
    for (int64_t e = 0; e < count; ++e) out[e] = ad.store(buf[0][e]);
    return out;
  }
  // The ring, loop by loop: reduce-scatter in T-1 steps (at step s rank i sends chunk (i-1-s) mod T to
  // rank i+1, which adds its own copy), then the all-gather copies chunk c from rank c, which holds it.
  for (int64_t start = 0; start < count;) {
    const int64_t chunk = ring_chunk(m, t, count, start);
    const auto range = [&](int64_t c) {
      const int64_t b = std::min(count, start + c * chunk);
      return std::pair<int64_t, int64_t>{b, std::min(count, b + chunk)};
    };
    for (int64_t s = 0; s + 1 < t; ++s) {
      std::vector<std::vector<float>> sent(static_cast<size_t>(t));
      for (int64_t i = 0; i < t; ++i) {
        const auto [b, e] = range(((i - 1 - s) % t + t) % t);
        sent[i].assign(buf[i].begin() + b, buf[i].begin() + e);
      }
      for (int64_t i = 0; i < t; ++i) {
        const int64_t to = (i + 1) % t;
        const auto [b, e] = range(((i - 1 - s) % t + t) % t);
        for (int64_t x = b; x < e; ++x) buf[to][x] = ad.add(sent[i][x - b], buf[to][x]);
      }
    }
    for (int64_t c = 0; c < t; ++c) {
      const auto [b, e] = range(c);
      for (int64_t x = b; x < e; ++x) out[x] = ad.store(buf[c][x]);
    }
    start += t * chunk;
  }
  return out;
}

namespace {

class ModelCollective final : public Collective {
 public:
  explicit ModelCollective(ReductionModel m) : m_(m) {}
  std::string label() const override { return m_.name(); }
  CollectiveOutcome all_reduce(const Partials& p) override { return {reduce_by_steps(m_, p), m_.name()}; }

 private:
  ReductionModel m_;
};

class TreeFromMutant final : public Collective {
 public:
  TreeFromMutant(int64_t from, bool fp32) : from_(from), fp32_(fp32) {}
  std::string label() const override { return fmt::format("mutant:tree-from-{}{}", from_, fp32_ ? "+fp32" : ""); }
  CollectiveOutcome all_reduce(const Partials& p) override {
    ReductionModel m;
    m.algo = static_cast<int64_t>(p.size()) >= from_ ? ReductionAlgo::tree : ReductionAlgo::ring;
    m.fp32 = fp32_;
    return {reduce_by_steps(m, p), m.name()};
  }

 private:
  int64_t from_;
  bool fp32_;
};

}  // namespace

std::unique_ptr<Collective> make_collective(std::string_view spec) {
  constexpr std::string_view mutant = "mutant:tree-from-";
  if (spec.starts_with(mutant)) {
    std::string_view d = spec.substr(mutant.size());
    const bool fp32 = d.ends_with("+fp32");
    if (fp32) d.remove_suffix(5);
    int64_t from = 0;
    const auto [end, ec] = std::from_chars(d.data(), d.data() + d.size(), from);
    QC_INPUT(ec == std::errc() && end == d.data() + d.size() && from >= 2,
             "--collective: expected mutant:tree-from-<T> with T >= 2 ranks, found `{}`", spec);
    return std::make_unique<TreeFromMutant>(from, fp32);
  }
  return std::make_unique<ModelCollective>(parse_reduction_model(spec, "--collective"));
}

}  // namespace qc
