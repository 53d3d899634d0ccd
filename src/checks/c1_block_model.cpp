// Measuring a block-scaled FP8 arm's block model (c1_block_model.hpp).
#include "checks/c1_block_model.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <cmath>

#include "qconform/error.hpp"
#include "qconform/numerics.hpp"
#include "synth/synth.hpp"

namespace qc {

namespace {

// The arm as an unscaled FP8 GEMM: each `fp8_accumulate` call runs the arm on a block-scaled layer of
// the call's codes with every scale 1 and returns the arm's exposed D. It declares the unit-scale
// model of the arm's declared block model (`unit_scale_equivalent`), so that the FP8 prober measures the
// arm against it.
class UnitScaleArm final : public Arm {
 public:
  UnitScaleArm(Arm& arm, ArmInfo info, int64_t block_k, int64_t block_n, std::string declared)
      : arm_(arm), info_(std::move(info)), block_k_(block_k), block_n_(block_n) {
    info_.accumulation_model = std::move(declared);
    info_.label += " (at unit scales)";
  }
  ArmInfo info() const override { return info_; }
  ArmOutput run(const LayerOperands&) override {
    QC_FAIL_INPUT("{}: the unit-scale view of a block-scaled arm takes only fp8_accumulate calls", info_.label);
  }
  std::vector<float> fp8_accumulate(const uint8_t* a, const uint8_t* w, int64_t m, int64_t n, int64_t k,
                                    nlohmann::json& record, int) override {
    OperandStorage s;
    s.a_type = s.w_type = ElementType::e4m3;
    s.a_scaling = ScaleLayout::token_group(block_k_);
    s.w_scaling = ScaleLayout::block(block_n_, block_k_);
    s.a_q.assign(reinterpret_cast<const int8_t*>(a), reinterpret_cast<const int8_t*>(a) + m * k);
    s.w_q.assign(reinterpret_cast<const int8_t*>(w), reinterpret_cast<const int8_t*>(w) + n * k);
    s.a_scale.assign(static_cast<size_t>(s.a_scaling.scale_count(m, k)), 1.0f);
    s.w_scale.assign(static_cast<size_t>(s.w_scaling.scale_count(n, k)), 1.0f);
    const LayerOperands ops = make_operands("unit-scale-probe", m, n, k, std::move(s), "boundary (unit-scale probe)");
    ArmOutput out = arm_.run(ops);
    QC_INPUT(out.d.has_value(),
             "arm {}: exposes no fp32 accumulator D with its runs (ArmOutput::d), so its block accumulation cannot be "
             "measured (bf16 outputs hide the fp32 differences the probes separate)",
             arm_.info().label);
    QC_INPUT(static_cast<int64_t>(out.d->size()) == m * n, "arm {}: fp32 accumulator of {} elements, expected {}x{}",
             arm_.info().label, out.d->size(), m, n);
    record = out.record;
    return std::move(*out.d);
  }

 private:
  Arm& arm_;
  ArmInfo info_;
  int64_t block_k_, block_n_;
};

}  // namespace

LayerOperands random_block_layer(int64_t m, int64_t n, int64_t k, int64_t block_k, int64_t block_n, uint64_t seed) {
  OperandStorage s;
  s.a_type = s.w_type = ElementType::e4m3;
  s.a_scaling = ScaleLayout::token_group(block_k);
  s.w_scaling = ScaleLayout::block(block_n, block_k);
  uint64_t st = seed;
  const auto code = [&] {
    uint8_t c = static_cast<uint8_t>(splitmix64(st));
    if ((c & 0x7F) == 0x7F) c ^= 1;
    return static_cast<int8_t>(c);
  };
  const auto scale = [&] {
    const uint64_t r = splitmix64(st);
    const uint32_t e = static_cast<uint32_t>(127 - 12 + static_cast<int>(r % 9));
    return f32_from_bits((e << 23) | static_cast<uint32_t>((r >> 8) & 0x7FFFFF));
  };
  s.a_q.resize(static_cast<size_t>(m * k));
  s.w_q.resize(static_cast<size_t>(n * k));
  for (int8_t& c : s.a_q) c = code();
  for (int8_t& c : s.w_q) c = code();
  s.a_scale.resize(static_cast<size_t>(s.a_scaling.scale_count(m, k)));
  s.w_scale.resize(static_cast<size_t>(s.w_scaling.scale_count(n, k)));
  for (float& x : s.a_scale) x = scale();
  for (float& x : s.w_scale) x = scale();
  return make_operands(fmt::format("random-scales-{}x{}x{}", m, n, k), m, n, k, std::move(s),
                       fmt::format("boundary (random-scale probe, seed {})", seed));
}

namespace {

bool same_chain(const Fp8AccumModel& x, const Fp8AccumModel& y) {
  return model_differences(x, y).empty();
}

}  // namespace

// The probes of `m` that `chain`, from zero over every `interval` products and promoted into fp32 (any
// form at unit scales: the block model's own text with unit scales), does not predict; the first
// `keep` of them printed into `first`, and counting stops after `stop_after`.
int64_t probe_misses(const Fp8Measurement& m, const Fp8AccumModel& chain, int64_t interval, bool through_run,
                     nlohmann::json* first, size_t keep, int64_t stop_after) {
  const float one = 1.0f;
  int64_t misses = 0;
  for (const Fp8Probe& p : m.probes) {
    std::vector<uint8_t> a(static_cast<size_t>(p.k), 0), w(static_cast<size_t>(p.k), 0);
    for (const auto& t : p.terms) a[static_cast<size_t>(t.pos)] = t.a, w[static_cast<size_t>(t.pos)] = t.w;
    const float want = block_model::evaluate(chain, BlockPromotion::triton, a.data(), Fp8Format::e4m3, w.data(),
                                             Fp8Format::e4m3, p.k, interval, {&one, 0, &one, 0});
    if (through_run ? f32_to_bf16(want) == f32_to_bf16(p.observed) : f32_bits(want) == f32_bits(p.observed)) continue;
    if (first && first->size() < keep) {
      first->push_back(fmt::format("unit-scale probe {} (K = {}): got {:a}, the chain over every {} products (every "
                                   "form at unit scales) gives {:a}",
                                   p.id, p.k, p.observed, interval, want));
    }
    if (++misses >= stop_after) break;
  }
  return misses;
}

// The first named chain of the accumulation table that predicts every probe of `m` over `interval`.
std::optional<NamedAccumModel> named_chain_at(const Fp8Measurement& m, int64_t interval, bool through_run) {
  if (m.probes.empty() || interval < 1) return std::nullopt;
  for (const NamedAccumModel& row : fp8_accumulation_models()) {
    if (probe_misses(m, row.model, interval, through_run, nullptr, 0, 1) == 0) return row;
  }
  return std::nullopt;
}


namespace {

// The confirmation of a chain the fallback named (the prober's own confirmation held its failed
// nearest structure): random unit-scale layers of the prober's shapes and code distribution through
// the arm's unit-scale view, against `chain` from zero per K block of `bk` promoted into fp32 (every
// form at unit scales), bit for bit (the bf16 patterns when measured through `run`).
void confirm_named_chain(Arm& unit, const NamedAccumModel& chain, int64_t bk, const Fp8MeasureOptions& o, Fp8Measurement& m) {
  Fp8ConfirmCodes codes(o.seed);
  const float one = 1.0f;
  m.confirm_matching = m.confirm_outputs = 0;
  m.confirmation = nlohmann::json::array();
  for (const auto& sh : o.confirm_shapes) {
    const int64_t rows = sh[0], cols = sh[1], k = sh[2];
    std::vector<uint8_t> a = codes.next(rows * k), w = codes.next(cols * k);
    nlohmann::json record;
    const std::vector<float> d = unit.fp8_accumulate(a.data(), w.data(), rows, cols, k, record, o.threads);
    int64_t ok = 0;
    std::string first;
    for (int64_t i = 0; i < rows; ++i) {
      for (int64_t j = 0; j < cols; ++j) {
        const float want = block_model::evaluate(chain.model, BlockPromotion::triton, &a[static_cast<size_t>(i * k)],
                                                 Fp8Format::e4m3, &w[static_cast<size_t>(j * k)], Fp8Format::e4m3, k, bk,
                                                 {&one, 0, &one, 0});
        const float got = d[static_cast<size_t>(i * cols + j)];
        const bool same = o.through_run ? f32_to_bf16(want) == f32_to_bf16(got) : f32_bits(want) == f32_bits(got);
        ok += same;
        if (!same && first.empty()) first = fmt::format("d[{},{}]: arm {:a}, chain {:a}", i, j, got, want);
      }
    }
    nlohmann::json row = {{"m", rows}, {"n", cols}, {"k", k}, {"outputs", rows * cols}, {"matching", ok}, {"chain", chain.name}};
    if (!first.empty()) row["first_mismatch"] = first;
    m.confirmation.push_back(row);
    m.confirm_matching += ok;
    m.confirm_outputs += rows * cols;
  }
}

// The per-block chain from the unit-scale structure: the measured model without its promotion, or,
// where the prober's structures hold none (a whole-range chain such as `exact` run per K block), the
// first named chain of the accumulation table that predicts every probe and every confirmation output.
void chain_of_structure(Arm& unit, const BlockMeasureOptions& options, BlockMeasurement& r) {
  r.structure_measured = r.structure.measured;
  if (!r.structure_measured) {
    // Chains the prober's structure search does not span (a whole-range chain such as `exact`, run per K
    // block): each named chain of the accumulation table, per K block from zero and promoted into fp32
    // (every form at unit scales), against every probe; the first that predicts them all is the chain.
    if (std::optional<NamedAccumModel> named =
            named_chain_at(r.structure, r.block_k_probed, options.structure.through_run)) {
      confirm_named_chain(unit, *named, r.block_k_probed, options.structure, r.structure);
      if (r.structure.confirm_matching == r.structure.confirm_outputs) {
        r.structure_measured = true;
        r.promotion_interval = r.block_k_probed;
        r.chain_model = named->model;
        r.chain = named->name;
        r.chain_note = "a named chain over whole K blocks (outside the prober's structures) explains every probe and "
                       "every confirmation output";
      }
    }
  } else {
    const Fp8AccumModel& u = r.structure.model;
    r.promotion_interval = u.promote_steps > 0 && u.step_k > 0 ? int64_t{u.promote_steps} * u.step_k : 0;
    Fp8AccumModel chain = u;
    chain.promote_steps = 0;
    chain.promote_bits = 23;
    chain.promote_rounding = AccumRounding::nearest_even;
    r.chain_model = chain;
    const std::string named = named_model_of(chain);
    r.chain = named.empty() ? accumulation_formula(chain) : named;
  }
}

}  // namespace

BlockMeasurement measure_block_model(Arm& arm, const BlockMeasureOptions& options) {
  const auto t0 = std::chrono::steady_clock::now();
  BlockMeasurement r;
  r.arm = arm.info();
  r.declared_name = r.arm.accumulation_model;
  QC_INPUT(r.arm.block(), "arm {}: declares no block model (accumulation model `{}`): expected a block-scaled FP8 arm",
           r.arm.label, r.declared_name);
  try {
    if (!r.declared_name.empty()) r.declared = fp8_block_model(r.declared_name);
  } catch (const Error&) {
    r.declared.reset();
  }
  r.block_k_probed = r.arm.block_k > 0 ? r.arm.block_k : options.block_k;
  const int64_t block_n = r.arm.block_n > 0 ? r.arm.block_n : 128;
  std::string unit_declared;
  if (r.declared) unit_declared = unit_scale_equivalent(*r.declared, r.block_k_probed).value_or("");

  // 1. The structure at unit scales, by the FP8 prober.
  UnitScaleArm unit(arm, r.arm, r.block_k_probed, block_n, unit_declared);
  try {
    r.structure = measure_fp8_accumulation(unit, options.structure);
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::input) throw;
    r.verdict = "not measured";
    r.reason = e.what();
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return r;
  }
  chain_of_structure(unit, options, r);

  // 2. The promotion form over the measured chain, on random scales.
  if (r.chain_model && r.promotion_interval == r.block_k_probed) {
    NamedAccumModel chain{r.chain, *r.chain_model, "the measured chain"};
    for (BlockPromotion f : block_promotions()) r.forms.push_back({std::string(block_promotion_name(f)), 0, ""});
    uint64_t seed = options.seed;
    for (const auto& shape : options.form_shapes) {
      const LayerOperands ops = random_block_layer(shape[0], shape[1], shape[2], r.block_k_probed, block_n, seed++);
      const ArmOutput out = arm.run(ops);
      QC_INPUT(out.d && static_cast<int64_t>(out.d->size()) == ops.m * ops.n,
               "arm {}: expected an fp32 accumulator D of {}x{} with its run, found {}", r.arm.label, ops.m, ops.n,
               out.d ? fmt::format("{} elements", out.d->size()) : std::string("none"));
      const Fp8LayerCodes codes = fp8_layer_codes("boundary", ops);
      const Fp8BlockGemm g = fp8_block_gemm("boundary", codes, ops);
      r.form_outputs += ops.m * ops.n;
      for (size_t fi = 0; fi < block_promotions().size(); ++fi) {
        BlockModel model{"(measured chain)", chain, block_promotions()[fi], ""};
        std::vector<float> want(static_cast<size_t>(ops.m * ops.n));
        fp8_block_evaluate(model, g, want.data(), options.structure.threads);
        BlockFormEvidence& e = r.forms[fi];
        for (size_t i = 0; i < want.size(); ++i) {
          const float got = (*out.d)[i];
          if (f32_bits(got) == f32_bits(want[i])) {
            ++e.matching;
          } else if (e.first_miss.empty()) {
            e.first_miss = fmt::format("{}[{},{}]: arm {} (0x{:08x}), form gives {} (0x{:08x})", ops.name,
                                       static_cast<int64_t>(i) / ops.n, static_cast<int64_t>(i) % ops.n, got,
                                       f32_bits(got), want[i], f32_bits(want[i]));
          }
        }
      }
    }
    for (const BlockFormEvidence& e : r.forms) {
      if (e.matching == r.form_outputs) r.form_class.push_back(e.form);
    }
  }

  // The verdict.
  std::vector<std::string> differs;
  if (!r.structure_measured) {
    r.verdict = "not a block model of this family";
    r.reason = fmt::format("at unit scales the arm is no model of the FP8 family: {}", r.structure.reason);
  } else if (r.promotion_interval != r.block_k_probed) {
    r.verdict = "not a block model of this family";
    r.reason = fmt::format(
        "at unit scales over K blocks of {} the arm {} (measured {}): a block model promotes once per K block",
        r.block_k_probed,
        r.promotion_interval == 0 ? "never promotes" : fmt::format("promotes every {} products", r.promotion_interval),
        accumulation_formula(r.structure.model));
  } else if (r.form_class.empty()) {
    r.verdict = "not a block model of this family";
    r.reason = fmt::format("no promotion form over the measured chain {} explains the arm's D on random scales ({} "
                           "outputs); block-triton's first miss: {}",
                           r.chain, r.form_outputs, r.forms.front().first_miss);
  } else if (!r.declared) {
    r.verdict = "differs from declaration";
    r.reason = r.declared_name.empty()
                   ? fmt::format("the arm declares no block model; measured per K block of {} the chain {} from zero, "
                                 "then {} (qconform identify names it)",
                                 r.block_k_probed, r.chain, fmt::join(r.form_class, " or "))
                   : fmt::format("the arm declares `{}`, which is not a block model qconform knows", r.declared_name);
  } else {
    if (!same_chain(*r.chain_model, r.declared->chain.model)) {
      differs.push_back(fmt::format("chain: {} (declared {})", r.chain, r.declared->chain.name));
    }
    const std::string declared_form(block_promotion_name(r.declared->form));
    if (std::find(r.form_class.begin(), r.form_class.end(), declared_form) == r.form_class.end()) {
      differs.push_back(fmt::format("form: {} (declared {})", fmt::join(r.form_class, " or "), declared_form));
    }
    r.verdict = differs.empty() ? "matches declaration" : "differs from declaration";
    r.reason = differs.empty()
                   ? fmt::format("per K block of {} the chain {} from zero, then {} (explains {} of {} outputs on random "
                                 "scales{})",
                                 r.block_k_probed, r.chain, block_promotion_formula(r.declared->form), r.form_outputs,
                                 r.form_outputs,
                                 r.form_class.size() > 1 ? fmt::format("; not separated from {}", fmt::join(r.form_class, ", "))
                                                         : std::string())
                   : fmt::format("{}", fmt::join(differs, "; "));
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

nlohmann::json to_json(const BlockMeasurement& r) {
  nlohmann::json forms = nlohmann::json::array();
  for (const BlockFormEvidence& e : r.forms) {
    forms.push_back({{"form", e.form},
                     {"matching", e.matching},
                     {"outputs", r.form_outputs},
                     {"first_miss", e.first_miss.empty() ? nlohmann::json(nullptr) : nlohmann::json(e.first_miss)}});
  }
  return {{"declared", r.declared_name},
          {"verdict", r.verdict},
          {"reason", r.reason},
          {"block_k_probed", r.block_k_probed},
          {"promotion_interval", r.promotion_interval},
          {"chain", r.chain.empty() ? nlohmann::json(nullptr) : nlohmann::json(r.chain)},
          {"chain_note", r.chain_note.empty() ? nlohmann::json(nullptr) : nlohmann::json(r.chain_note)},
          {"forms", forms},
          {"form_class", r.form_class},
          {"unit_scale_structure", r.structure_measured || !r.structure.verdict.empty() ? to_json(r.structure)
                                                                                         : nlohmann::json(nullptr)},
          {"seconds", r.seconds}};
}

std::string describe(const BlockMeasurement& r) {
  std::string s = fmt::format("block model of {} (declared {}): {}\n  {}\n", r.arm.label, r.declared_name, r.verdict,
                              r.reason);
  if (r.structure_measured) {
    s += fmt::format("  at unit scales over K blocks of {}: {} ({}), promoted every {} products{}\n", r.block_k_probed,
                     r.chain, accumulation_formula(*r.chain_model), r.promotion_interval,
                     r.chain_note.empty() ? std::string() : " (" + r.chain_note + ")");
  }
  for (const BlockFormEvidence& e : r.forms) {
    s += fmt::format("  form {:<15} {} of {} outputs{}\n", e.form, e.matching, r.form_outputs,
                     e.first_miss.empty() ? std::string() : "; first miss " + e.first_miss);
  }
  return s;
}

}  // namespace qc
