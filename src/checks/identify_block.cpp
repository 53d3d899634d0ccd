// identify on block-scaled FP8 arms (docs/identify.md, "Block-scaled FP8 arms"): the block model of
// src/epilogue/block_models.hpp (K block and weight block, the chain per block, the promotion form)
// measured through the arm's bf16 output, in four stages; each can end the identification as
// `unexplained`, naming itself, its nearest candidate and the outputs that separate them:
//   1. the scale blocks: one product per row at position p (a[p, p] = 1, w = 1) and power-of-two
//      scales, a distinct exponent per K block of the activation scales and per (N block, K block) of
//      the weight scales: every output is an exact power of two whose exponent names the two scales the
//      kernel applied to product p of column j (the block edges along K, and along N, are read off);
//   2. the chain per block, at unit scales (every form is then D <- rn32(D + C)): the FP8 prober of
//      c1_fp8_model.hpp (the per-tensor FP8 identify's measurement) through an adapter that gives the
//      arm each probe as a block-scaled layer of unit scales: through the arm's unscaled
//      `fp8_accumulate` where it offers one for these blocks, else through `run` and its bf16 output.
//      The products per promotion must be the K block (else: the chain length is outside the table);
//   3. the promotion form: designed probes whose forms' fp32 D differ in their last bits and then
//      survive the bf16 rounding: block 0 sets D exactly (unit scales), block 1 promotes one product
//      with random-fraction scales (where the forms round differently), blocks 2..6 subtract the
//      expected D's leading bits exactly (power-of-two scales, one e4m3 product each): what is left is
//      D's low bits, which bf16 holds. Every form over the measured chain is evaluated by the block
//      model's own text on the probe; the forms that predict every output survive;
//   4. held-out: random codes and random-fraction scales (boundary's random block layers, not used by
//      any probe), partial blocks included: the identified model must predict every bf16 output.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <span>

#include "accum/fp8_model.hpp"
#include "checks/c1_block_model.hpp"
#include "checks/c1_fp8_model.hpp"
#include "checks/identify_internal.hpp"
#include "epilogue/block_models.hpp"
#include "qconform/error.hpp"
#include "qconform/numerics.hpp"

namespace qc::identify_detail {

namespace {

constexpr uint8_t kE4m3One = 0x38;
constexpr int64_t kEdgeKBlocks = 3, kEdgeNBlocks = 2;  // stage 1: K and N blocks of the probe
constexpr int64_t kFormBlocks = 7;                      // stage 3: D, the designed block, 5 cancellations
constexpr int kFormTries = 24;                          // stage 3: codes tried per element

LayerOperands block_layer(std::string name, int64_t m, int64_t n, int64_t k, int64_t bk, int64_t bn,
                          std::span<const uint8_t> a, std::span<const uint8_t> w, std::vector<float> sa,
                          std::vector<float> sw, std::string source) {
  OperandStorage s;
  s.a_type = s.w_type = ElementType::e4m3;
  s.a_scaling = ScaleLayout::token_group(bk);
  s.w_scaling = ScaleLayout::block(bn, bk);
  s.a_q.assign(reinterpret_cast<const int8_t*>(a.data()), reinterpret_cast<const int8_t*>(a.data()) + a.size());
  s.w_q.assign(reinterpret_cast<const int8_t*>(w.data()), reinterpret_cast<const int8_t*>(w.data()) + w.size());
  s.a_scale = std::move(sa);
  s.w_scale = std::move(sw);
  return make_operands(std::move(name), m, n, k, std::move(s), std::move(source));
}

// The arm at unit scales, as an FP8 GEMM for the FP8 prober: each call is one block-scaled layer of
// the call's codes with every scale 1 in K blocks of `bk` (and weight blocks of `bn`).
class UnitScaleView final : public Arm {
 public:
  UnitScaleView(Arm& arm, ArmInfo info, int64_t bk, int64_t bn, std::string declared)
      : arm_(arm), info_(std::move(info)), bk_(bk), bn_(bn) {
    info_.label += fmt::format(" (unit scales, K blocks of {})", bk);
    info_.accumulation_model = std::move(declared);
    info_.element = ElementType::e4m3;
    info_.block_k = info_.block_n = 0;
  }
  ArmInfo info() const override { return info_; }
  ArmOutput run(const LayerOperands& ops) override {
    const Fp8LayerCodes codes = fp8_layer_codes(info_.label, ops);
    const int64_t kb = (ops.k + bk_ - 1) / bk_, nb = (ops.n + bn_ - 1) / bn_;
    const LayerOperands block = block_layer(ops.name, ops.m, ops.n, ops.k, bk_, bn_, codes.a, codes.w,
                                            std::vector<float>(static_cast<size_t>(ops.m * kb), 1.0f),
                                            std::vector<float>(static_cast<size_t>(nb * kb), 1.0f),
                                            "identify (block chain probe, unit scales)");
    ArmOutput out = arm_.run(block);
    out.d.reset();  // the prober reads the output, as from any kernel
    return out;
  }
  std::vector<float> fp8_accumulate(const uint8_t* a, const uint8_t* w, int64_t m, int64_t n, int64_t k,
                                    nlohmann::json& record, int threads) override {
    return arm_.fp8_accumulate(a, w, m, n, k, record, threads);
  }

 private:
  Arm& arm_;
  ArmInfo info_;
  int64_t bk_, bn_;
};

std::string y_text(uint16_t b) { return fmt::format("0x{:04x} ({:.9g})", b, bf16_to_f32(b)); }

// Each form over `chain` on `ops`: its bf16 outputs.
std::vector<std::vector<uint16_t>> form_outputs(const NamedAccumModel& chain, const LayerOperands& ops) {
  const Fp8LayerCodes codes = fp8_layer_codes("identify", ops);
  const Fp8BlockGemm g = fp8_block_gemm("identify", codes, ops);
  std::vector<std::vector<uint16_t>> out;
  std::vector<float> d(static_cast<size_t>(ops.m * ops.n));
  for (const BlockPromotion f : block_promotions()) {
    fp8_block_evaluate(BlockModel{"(measured chain)", chain, f, ""}, g, d.data());
    std::vector<uint16_t> y(d.size());
    for (size_t i = 0; i < d.size(); ++i) y[i] = f32_to_bf16(d[i]);
    out.push_back(std::move(y));
  }
  return out;
}

// The stage-3 probe: M rows, N = min(64, bk) columns, K = kFormBlocks * bk; column j's products sit
// at position b * bk + j of each block b (w zero elsewhere), so that every element's codes are its own.
LayerOperands design_form_probe(int64_t m, int64_t bk, int64_t bn, Rng& rng, const std::string& name) {
  const int64_t n = std::min<int64_t>(64, bk), k = kFormBlocks * bk;
  const int64_t nbk = kFormBlocks, nbn = (n + bn - 1) / bn;
  std::vector<uint8_t> a(static_cast<size_t>(m * k), 0), w(static_cast<size_t>(n * k), 0);
  std::vector<float> sa(static_cast<size_t>(m * nbk), 1.0f), sw(static_cast<size_t>(nbn * nbk), 1.0f);
  const auto code_in = [&](int lo, int span) {  // a positive normal e4m3 code with exponent lo..lo+span-1
    return static_cast<uint8_t>(((lo + 7 + static_cast<int>(rng.below(span))) << 3) | static_cast<int>(rng.below(8)));
  };
  for (int64_t j = 0; j < n; ++j) {
    w[static_cast<size_t>(j * k + j)] = code_in(0, 2);
    w[static_cast<size_t>(j * k + bk + j)] = code_in(0, 2);
    for (int64_t b = 2; b < nbk; ++b) w[static_cast<size_t>(j * k + b * bk + j)] = kE4m3One;
  }
  for (int64_t i = 0; i < m; ++i) sa[static_cast<size_t>(i * nbk + 1)] = rng.scale(-1, 1);
  for (int64_t c = 0; c < nbn; ++c) sw[static_cast<size_t>(c * nbk + 1)] = rng.scale(-1, 1);
  // Block 0 and 1: per element the codes of the try that makes the most forms' D differ (pairs not
  // yet separated first); D of each form from the two products, exact in fp32 (one product per block).
  const std::vector<BlockPromotion>& forms = block_promotions();
  const size_t nf = forms.size();
  std::vector<int64_t> covered(nf * nf, 0);
  std::vector<float> ref(static_cast<size_t>(m * n));
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      const float w0 = e4m3fn_to_f32(w[static_cast<size_t>(j * k + j)]);
      const float w1 = e4m3fn_to_f32(w[static_cast<size_t>(j * k + bk + j)]);
      const float s1a = sa[static_cast<size_t>(i * nbk + 1)], s1w = sw[static_cast<size_t>((j / bn) * nbk + 1)];
      int64_t best = -1;
      uint8_t best0 = 0, best1 = 0;
      std::vector<float> best_d(nf);
      for (int t = 0; t < kFormTries; ++t) {
        const uint8_t c0 = code_in(0, 4), c1 = code_in(-2, 6);
        std::vector<float> d(nf);
        for (size_t f = 0; f < nf; ++f) {
          const float d0 = block_model::promote(forms[f], e4m3fn_to_f32(c0) * w0, 1.0f, 1.0f, 0.0f);
          d[f] = block_model::promote(forms[f], e4m3fn_to_f32(c1) * w1, s1a, s1w, d0);
        }
        int64_t score = 0;
        for (size_t x = 0; x < nf; ++x) {
          for (size_t y = x + 1; y < nf; ++y) {
            if (f32_bits(d[x]) != f32_bits(d[y])) score += 1 + 1000 / (1 + covered[x * nf + y]);
          }
        }
        if (score > best) best = score, best0 = c0, best1 = c1, best_d = d;
      }
      for (size_t x = 0; x < nf; ++x) {
        for (size_t y = x + 1; y < nf; ++y) covered[x * nf + y] += f32_bits(best_d[x]) != f32_bits(best_d[y]);
      }
      a[static_cast<size_t>(i * k + j)] = best0;
      a[static_cast<size_t>(i * k + bk + j)] = best1;
      ref[static_cast<size_t>(i * n + j)] = best_d[0];
    }
  }
  // Blocks 2..6: subtract the leading bits of the first form's D, one e4m3 value times a power of two
  // per block (the row's scale), exactly in every form; the remainder is D's low bits.
  for (int64_t b = 2; b < nbk; ++b) {
    for (int64_t i = 0; i < m; ++i) {
      float top = 0.0f;
      for (int64_t j = 0; j < n; ++j) top = std::max(top, std::fabs(ref[static_cast<size_t>(i * n + j)]));
      if (top == 0.0f) continue;
      const int e = std::ilogb(top) - 7;
      sa[static_cast<size_t>(i * nbk + b)] = std::ldexp(1.0f, e);
      for (int64_t j = 0; j < n; ++j) {
        float& r = ref[static_cast<size_t>(i * n + j)];
        const uint8_t c = f32_to_e4m3fn(-std::ldexp(r, -e), true);
        a[static_cast<size_t>(i * k + b * bk + j)] = c;
        r += std::ldexp(e4m3fn_to_f32(c), e);  // exact: a coarser grid than r's
      }
    }
  }
  return block_layer(name, m, n, k, bk, bn, a, w, std::move(sa), std::move(sw),
                     "identify (block promotion-form probe: designed codes and scales)");
}

}  // namespace

void Identifier::block_unexplained(const std::string& stage, const std::string& summary, nlohmann::json nearest,
                                   nlohmann::json first) {
  r_.verdict = "unexplained";
  r_.reason = fmt::format("the {}: {}", stage, summary);
  nlohmann::json d = {{"kind", "stage"}, {"stage", stage}, {"summary", summary}};
  if (!first.empty()) d["first"] = first;
  r_.diagnosis = nlohmann::json::array({d});
  if (!nearest.is_null()) r_.nearest = nlohmann::json::array({nearest});
  r_.block["verdict_stage"] = stage;
}

bool Identifier::block_edges(int64_t bk, int64_t bn) {
  const int64_t k = kEdgeKBlocks * bk, m = k, n = kEdgeNBlocks * bn;
  std::vector<uint8_t> a(static_cast<size_t>(m * k), 0), w(static_cast<size_t>(n * k), kE4m3One);
  for (int64_t p = 0; p < k; ++p) a[static_cast<size_t>(p * k + p)] = kE4m3One;
  std::vector<float> sa(static_cast<size_t>(m * kEdgeKBlocks)), sw(static_cast<size_t>(kEdgeNBlocks * kEdgeKBlocks));
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t b = 0; b < kEdgeKBlocks; ++b) sa[static_cast<size_t>(i * kEdgeKBlocks + b)] = std::ldexp(1.0f, static_cast<int>(b));
  }
  for (int64_t c = 0; c < kEdgeNBlocks; ++c) {
    for (int64_t b = 0; b < kEdgeKBlocks; ++b) {
      sw[static_cast<size_t>(c * kEdgeKBlocks + b)] = std::ldexp(1.0f, static_cast<int>(4 * (c * kEdgeKBlocks + b)) - 12);
    }
  }
  const std::string id = fmt::format("block-edges/{}x{}x{}", m, n, k);
  const LayerOperands ops = block_layer(id, m, n, k, bk, bn, a, w, std::move(sa), std::move(sw),
                                        "identify (block-edge probe: one product per row, power-of-two scales)");
  const ArmOutput out = arm_.run(ops);
  QC_INPUT(static_cast<int64_t>(out.y.size()) == m * n, "identify: arm {} returned {} outputs for probe `{}`, expected {}x{}",
           r_.arm.label, out.y.size(), id, m, n);
  if (r_.record.arm.empty()) r_.record = out.record;
  // Decode: output (p, j) = 2^(ea + ew), ea = the activation block used, ew = 4 (nb * blocks + kb) - 12.
  int64_t bad = 0;
  nlohmann::json first = nlohmann::json::array();
  for (int64_t p = 0; p < m; ++p) {
    for (int64_t j = 0; j < n; ++j) {
      const uint16_t y = out.y[static_cast<size_t>(p * n + j)];
      const int64_t want_kb = p / bk, want_nb = j / bn;
      const int want_e = static_cast<int>(want_kb + 4 * (want_nb * kEdgeKBlocks + want_kb) - 12);
      const uint16_t want = f32_to_bf16(std::ldexp(1.0f, want_e));
      if (y == want) continue;
      if (bad++ < 4) {
        const float v = bf16_to_f32(y);
        std::string got = "not a power of two: no pair of the probe's scales";
        if (v > 0 && (f32_bits(v) & 0x7FFFFF) == 0) {
          const int t = std::ilogb(v) + 12;
          if (t >= 0 && t % 4 < kEdgeKBlocks && t / 4 < kEdgeNBlocks * kEdgeKBlocks) {
            got = fmt::format("the activation scale of K block {} times the weight scale of N block {}, K block {}", t % 4,
                              t / 4 / kEdgeKBlocks, t / 4 % kEdgeKBlocks);
          }
        }
        first.push_back(fmt::format("{} [{},{}] product at K position {}: got {} = {}; blocks of {}x{} give {} (K block {}, N "
                                    "block {})",
                                    id, p, j, p, y_text(y), got, bn, bk, y_text(want), want_kb, want_nb));
      }
    }
  }
  r_.probes.push_back({{"id", id}, {"stage", "block edges"}, {"m", m}, {"n", n}, {"k", k}, {"elements", m * n},
                       {"unexplained", bad}});
  r_.block["k_block"] = bad == 0 ? nlohmann::json(bk) : nlohmann::json(nullptr);
  r_.block["n_block"] = bad == 0 ? nlohmann::json(bn) : nlohmann::json(nullptr);
  if (bad == 0) return true;
  block_unexplained("scale blocks",
                    fmt::format("{} of {} outputs of the block-edge probe are not the product's scales for K blocks of {} "
                                "and weight blocks of {} rows (the layer's layout): the kernel applies its scales to other "
                                "K or N positions than the table's block models",
                                bad, m * n, bk, bn),
                    {{"role", "the layer's blocks"}, {"formula", fmt::format("K blocks of {}, weight blocks {}x{}", bk, bn, bk)},
                     {"unexplained", bad}, {"outputs", m * n}, {"unexplained_per_million", 1e6 * static_cast<double>(bad) / static_cast<double>(m * n)},
                     {"ordered_difference_histogram", nlohmann::json::object()}},
                    first);
  return false;
}

std::optional<NamedAccumModel> Identifier::block_chain(int64_t bk, int64_t bn) {
  std::string unit_declared;
  if (is_block_model_name(r_.arm.accumulation_model)) {
    try {
      unit_declared = unit_scale_equivalent(fp8_block_model(r_.arm.accumulation_model), bk).value_or("");
    } catch (const Error&) {
      unit_declared.clear();  // a block model qconform does not know: nothing to hold the measurement to
    }
  }
  UnitScaleView view(arm_, r_.arm, bk, bn, unit_declared);
  // The arm's unscaled entry where it offers one for these blocks (cpu:fp8-block-*: unit scales in K
  // blocks of 128); a kernel that refuses it is measured through its bf16 output.
  bool unscaled = false;
  if (r_.arm.offers_unscaled() && bk == 128) {
    try {
      const uint8_t one = kE4m3One;
      nlohmann::json rec;
      (void)arm_.fp8_accumulate(&one, &one, 1, 1, 1, rec, 1);
      unscaled = true;
    } catch (const Error& e) {
      if (e.kind() != ErrorKind::input) throw;
    }
  }
  Fp8MeasureOptions mo;
  mo.seed = options_.seed;
  mo.through_run = !unscaled;
  const Fp8Measurement m = measure_fp8_accumulation(view, mo);
  r_.fp8_accumulation = to_json(m);
  r_.fp8_accumulation.erase("probes");
  r_.fp8_accumulation["probe_count"] = m.probes.size();
  r_.block["chain_measured_through"] = m.observed_through;
  r_.block["chain_probes"] = m.probes.size();
  if (!m.measured || m.confirm_matching != m.confirm_outputs) {
    // Chains the prober's structure search does not span (a whole-range chain such as `exact`, run per
    // K block): each named chain of the accumulation table, per K block from zero and promoted into
    // fp32 (any form at unit scales, by the block model's own text), against every probe.
    if (std::optional<NamedAccumModel> named = named_chain_explaining(m, bk, mo.through_run)) {
      r_.block["unit_scale_model"] = fmt::format("{} per K block of {}, promoted into fp32", named->name, bk);
      r_.block["promotion_interval"] = bk;
      r_.block["chain"] = named->name;
      r_.block["chain_formula"] = accumulation_formula(named->model);
      r_.block["chain_note"] = "a named chain over whole K blocks (outside the prober's structures) explains every probe";
      return named;
    }
    for (const int64_t other : {bk / 2, bk / 4, bk * 2}) {
      const std::optional<NamedAccumModel> at = other >= 1 && other != bk ? named_chain_at(m, other, mo.through_run) : std::nullopt;
      if (!at) continue;
      r_.block["promotion_interval"] = other;
      r_.block["chain"] = at->name;
      r_.block["chain_formula"] = accumulation_formula(at->model);
      std::vector<BlockModel> near;
      for (const BlockPromotion f : block_promotions()) near.push_back(BlockModel{block_name(f, *at), *at, f, ""});
      auto [best, heldout_first] = block_nearest(near);
      nlohmann::json first = nlohmann::json::array();
      best["separating_probes"] = probe_misses(m, at->model, bk, mo.through_run, &first, 4);
      for (const auto& f : heldout_first) first.push_back(f);
      block_unexplained("per-block chain length",
                        fmt::format("at unit scales the arm is the named chain {} from zero over every {} products, "
                                    "promoted into fp32 each time, over K blocks of {}: every block model of the table "
                                    "chains one K block of the scales before it promotes. The nearest, {}, misses {} of "
                                    "the {} unit-scale probes and {} of {} held-out outputs",
                                    at->name, other, bk, best.value("model", std::string()),
                                    best["separating_probes"].get<int64_t>(), m.probes.size(),
                                    best["unexplained"].get<int64_t>(), best["outputs"].get<int64_t>()),
                        best, first);
      return std::nullopt;
    }
    block_unexplained("per-block chain",
                      fmt::format("at unit scales (every promotion form is then D <- rn32(D + C)) no model of the FP8 "
                                  "accumulation family explains the arm's outputs (measured through {}): {}",
                                  m.observed_through, m.reason),
                      m.contradiction.empty() ? nlohmann::json(nullptr) : m.contradiction, nlohmann::json::array());
    return std::nullopt;
  }
  const Fp8AccumModel& u = m.model;
  // Products per promotion into fp32: promote_steps steps; without promotion, a chain whose every step's
  // result is an fp32 rounding (rn23) adds into fp32 every step (its steps are the promotions); else never.
  const bool fp32_steps = u.result_bits == 23 && u.result_rounding == AccumRounding::nearest_even;
  const int64_t interval = u.step_k <= 0                                  ? 0
                           : u.promote_steps > 0                           ? int64_t{u.promote_steps} * u.step_k
                           : fp32_steps && u.splits == 1 && u.step_k <= bk ? int64_t{u.step_k}
                                                                          : 0;
  Fp8AccumModel chain = u;
  chain.promote_steps = 0;
  chain.promote_bits = 23;
  chain.promote_rounding = AccumRounding::nearest_even;
  const std::string named = named_model_of(chain);
  NamedAccumModel c{named.empty() ? fp8_model_spelling(chain) : named, chain, "the chain measured per K block"};
  r_.block["unit_scale_model"] = m.model_name.empty() ? fp8_model_spelling(u) : m.model_name;
  r_.block["promotion_interval"] = interval;
  r_.block["chain"] = c.name;
  r_.block["chain_formula"] = accumulation_formula(chain);
  if (interval == bk) return c;
  // The chain length is outside the table. Its nearest block model is this chain over whole K blocks
  // (at unit scales every form is the chain promoted once per block); the outputs that separate them
  // are the prober's probes that model does not predict (random held-out operands mostly do not).
  std::vector<BlockModel> near;
  for (const BlockPromotion f : block_promotions()) near.push_back(BlockModel{block_name(f, c), c, f, ""});
  auto [best, heldout_first] = block_nearest(near);
  nlohmann::json first = nlohmann::json::array();
  const int64_t separating = probe_misses(m, chain, bk, mo.through_run, &first, 4);
  for (const auto& f : heldout_first) first.push_back(f);
  best["separating_probes"] = separating;
  block_unexplained(
      "per-block chain length",
      fmt::format("at unit scales the arm promotes its chain into fp32 {} over K blocks of {} ({}): every block "
                  "model of the table chains one K block of the scales before it promotes. The nearest, {} (this chain over "
                  "whole blocks; at unit scales every form is the same), misses {} of the {} unit-scale probes and {} of "
                  "{} held-out outputs",
                  interval == 0 ? std::string("never") : fmt::format("every {} products", interval), bk,
                  accumulation_formula(u), best.value("model", std::string()), separating, m.probes.size(),
                  best["unexplained"].get<int64_t>(), best["outputs"].get<int64_t>()),
      best, first);
  return std::nullopt;
}

std::optional<NamedAccumModel> Identifier::named_chain_explaining(const Fp8Measurement& m, int64_t bk, bool through_run) const {
  return named_chain_at(m, bk, through_run);
}

std::string Identifier::block_name(BlockPromotion f, const NamedAccumModel& chain) const {
  return chain.name == kDefaultBlockChain ? fmt::format("block-{}", block_promotion_name(f))
                                          : fmt::format("block-{}+{}", block_promotion_name(f), chain.name);
}

void Identifier::block_heldout(int64_t bk, int64_t bn) {
  const std::vector<std::array<int64_t, 3>> shapes = {{64, 2 * bn, 5 * bk}, {24, bn + 16, 3 * bk - 64}};
  uint64_t seed = options_.seed ^ 0xB10CB10Cull;
  for (const auto& s : shapes) {
    LayerOperands ops = random_block_layer(s[0], s[1], s[2], bk, bn, seed++);
    ArmOutput out = arm_.run(ops);
    QC_INPUT(static_cast<int64_t>(out.y.size()) == ops.m * ops.n,
             "identify: arm {} returned {} outputs for held-out layer `{}`, expected {}x{}", r_.arm.label, out.y.size(),
             ops.name, ops.m, ops.n);
    block_heldout_.push_back({std::move(ops), std::move(out.y)});
  }
}

std::pair<nlohmann::json, nlohmann::json> Identifier::block_nearest(const std::vector<BlockModel>& models) const {
  nlohmann::json best, first = nlohmann::json::array();
  int64_t best_bad = INT64_MAX;
  for (const BlockModel& model : models) {
    int64_t bad = 0, total = 0;
    nlohmann::json miss = nlohmann::json::array();
    for (const auto& [ops, y] : block_heldout_) {
      const Fp8LayerCodes codes = fp8_layer_codes("identify", ops);
      const Fp8BlockGemm g = fp8_block_gemm("identify", codes, ops);
      std::vector<float> d(static_cast<size_t>(ops.m * ops.n));
      fp8_block_evaluate(model, g, d.data());
      for (size_t e = 0; e < d.size(); ++e, ++total) {
        const uint16_t want = f32_to_bf16(d[e]);
        if (want == y[e]) continue;
        if (bad++ < 4) {
          miss.push_back(fmt::format("held-out {} [{},{}]: got {}, {} gives {} (its D {:a})", ops.name, e / ops.n,
                                     e % ops.n, y_text(y[e]), model.name, y_text(want), d[e]));
        }
      }
    }
    if (bad < best_bad) {
      best_bad = bad;
      first = miss;
      best = {{"role", "nearest"},
              {"model", model.name},
              {"formula", fmt::format("{}: {}", model.name, block_model_formula(model))},
              {"unexplained", bad},
              {"outputs", total},
              {"unexplained_per_million", total ? 1e6 * static_cast<double>(bad) / static_cast<double>(total) : 0.0},
              {"ordered_difference_histogram", nlohmann::json::object()}};
    }
  }
  return {best, first};
}

std::vector<BlockPromotion> Identifier::block_forms(const NamedAccumModel& chain, int64_t bk, int64_t bn) {
  const std::vector<BlockPromotion>& forms = block_promotions();
  const size_t nf = forms.size();
  std::vector<int64_t> bad(nf, 0), total(nf, 0);
  std::vector<nlohmann::json> first(nf, nlohmann::json::array());
  for (const int64_t m : {int64_t{40}, int64_t{8}}) {
    const std::string id = fmt::format("block-forms/M={}", m);
    const LayerOperands ops = design_form_probe(m, bk, bn, rng_, id);
    const std::vector<std::vector<uint16_t>> want = form_outputs(chain, ops);
    const ArmOutput out = arm_.run(ops);
    QC_INPUT(static_cast<int64_t>(out.y.size()) == ops.m * ops.n,
             "identify: arm {} returned {} outputs for probe `{}`, expected {}x{}", r_.arm.label, out.y.size(), id,
             ops.m, ops.n);
    nlohmann::json separated = nlohmann::json::object(), unexplained = nlohmann::json::object();
    for (size_t x = 0; x < nf; ++x) {
      for (size_t y = x + 1; y < nf; ++y) {
        int64_t c = 0;
        for (size_t e = 0; e < want[x].size(); ++e) c += want[x][e] != want[y][e];
        separated[fmt::format("{} / {}", block_promotion_name(forms[x]), block_promotion_name(forms[y]))] = c;
      }
      int64_t b = 0;
      for (size_t e = 0; e < want[x].size(); ++e) {
        if (want[x][e] == out.y[e]) continue;
        if (b++ < 4 && first[x].size() < 4) {
          first[x].push_back(fmt::format("{} [{},{}]: got {}, {} gives {}", id, e / ops.n, e % ops.n, y_text(out.y[e]),
                                         block_promotion_name(forms[x]), y_text(want[x][e])));
        }
      }
      bad[x] += b;
      total[x] += ops.m * ops.n;
      unexplained[std::string(block_promotion_name(forms[x]))] = b;
    }
    r_.probes.push_back({{"id", id}, {"stage", "promotion form"}, {"m", ops.m}, {"n", ops.n}, {"k", ops.k},
                         {"elements", ops.m * ops.n}, {"pairs_separated", separated}, {"unexplained", unexplained}});
  }
  std::vector<BlockPromotion> alive;
  size_t nearest = 0;
  for (size_t x = 0; x < nf; ++x) {
    if (bad[x] == 0) alive.push_back(forms[x]);
    if (bad[x] < bad[nearest]) nearest = x;
  }
  nlohmann::json forms_json = nlohmann::json::array();
  for (size_t x = 0; x < nf; ++x) {
    forms_json.push_back({{"form", block_promotion_name(forms[x])}, {"formula", block_promotion_formula(forms[x])},
                          {"unexplained", bad[x]}, {"outputs", total[x]}});
  }
  r_.block["forms"] = forms_json;
  if (alive.empty()) {
    const BlockModel near{block_name(forms[nearest], chain), chain, forms[nearest], ""};
    block_unexplained(
        "promotion form",
        fmt::format("over the measured chain {} in K blocks of {}, no promotion form of the table explains the designed "
                    "probes' outputs; the nearest, {} ({}), misses {} of {}",
                    chain.name, bk, block_promotion_name(forms[nearest]), block_promotion_formula(forms[nearest]),
                    bad[nearest], total[nearest]),
        {{"role", "nearest"},
         {"formula", fmt::format("{}: {}", near.name, block_model_formula(near))},
         {"unexplained", bad[nearest]},
         {"outputs", total[nearest]},
         {"unexplained_per_million", 1e6 * static_cast<double>(bad[nearest]) / static_cast<double>(total[nearest])},
         {"ordered_difference_histogram", nlohmann::json::object()}},
        first[nearest]);
  }
  return alive;
}

void Identifier::identify_block() {
  r_.block = nlohmann::json::object();
  const int64_t bk = r_.arm.block_k > 0 ? r_.arm.block_k : 128;
  const int64_t bn = r_.arm.block_n > 0 ? r_.arm.block_n : 128;
  r_.block["declared"] = r_.arm.accumulation_model;
  r_.block["layout"] = fmt::format("activations per-token-group:{}, weights per-block:{}x{}{}", bk, bn, bk,
                                   r_.arm.block_k > 0 ? " (the arm's own)" : " (the default; the arm takes any)");
  // 1. The scale blocks along K and N.
  if (!block_edges(bk, bn)) return;
  block_heldout(bk, bn);
  // 2. The chain per K block, and its length.
  const std::optional<NamedAccumModel> chain = block_chain(bk, bn);
  if (!chain) return;
  // 3. The promotion form.
  const std::vector<BlockPromotion> alive = block_forms(*chain, bk, bn);
  if (alive.empty()) return;
  // 4. Held-out: the survivors predict every output.
  std::vector<BlockModel> models;
  for (const BlockPromotion f : alive) models.push_back(BlockModel{block_name(f, *chain), *chain, f, ""});
  std::vector<std::string> explaining;
  int64_t outputs = 0, best_matching = -1;
  for (const BlockModel& model : models) {
    const auto [near, first] = block_nearest({model});
    outputs = near["outputs"].get<int64_t>();
    const int64_t matching = outputs - near["unexplained"].get<int64_t>();
    best_matching = std::max(best_matching, matching);
    if (matching == outputs) explaining.push_back(model.name);
    if (models.size() == 1 && matching != outputs) {
      r_.outputs = outputs;
      r_.matching = matching;
      block_unexplained("promotion form (held-out)",
                        fmt::format("{} explains every designed probe but {} of {} held-out outputs differ from it",
                                    model.name, outputs - matching, outputs),
                        near, first);
      return;
    }
  }
  r_.outputs = outputs;
  r_.matching = best_matching;
  nlohmann::json heldout = nlohmann::json::array();
  for (const auto& [ops, y] : block_heldout_) heldout.push_back(fmt::format("{} ({}x{}x{})", ops.name, ops.m, ops.n, ops.k));
  r_.block["heldout_layers"] = heldout;
  if (explaining.size() != 1) {
    r_.verdict = explaining.empty() ? "unexplained" : "ambiguous";
    std::vector<std::string> names;
    for (const BlockModel& model : models) names.push_back(model.name);
    r_.reason = explaining.empty()
                    ? fmt::format("the promotion form (held-out): none of {} explains every held-out output",
                                  fmt::join(names, ", "))
                    : fmt::format("the designed probes and {} held-out outputs do not separate {}", outputs,
                                  fmt::join(explaining, ", "));
    return;
  }
  const BlockModel model = fp8_block_model(explaining.front());  // the table's row, read back from its name
  r_.verdict = "identified";
  r_.block_model = model.name;
  r_.named = {model.name};
  r_.formula = block_model_formula(model);
  r_.block["model"] = model.name;
  r_.block["against_declaration"] =
      r_.arm.accumulation_model.empty()      ? "the arm declares no block model"
      : r_.arm.accumulation_model == model.name ? "matches the declaration"
                                                : fmt::format("differs from the declaration ({})", r_.arm.accumulation_model);
  r_.reason = fmt::format("scale blocks {}x{} (block-edge probe), the chain {} per K block of {} ({} probes through {}), "
                          "the promotion {} (designed probes); {} of {} held-out outputs explained",
                          bn, bk, chain->name, bk, r_.block["chain_probes"].get<size_t>(),
                          r_.block["chain_measured_through"].get<std::string>(), block_promotion_formula(model.form),
                          r_.matching, r_.outputs);
}

}  // namespace qc::identify_detail
