// identify's elimination (docs/identify.md, "The probes", steps 2 and 3): the candidates (every
// point of the formula space and the named shape dispatches), one layer observed through the arm,
// the elimination of every candidate an observed output contradicts, and the rounds of designed
// probes. `run` orders the whole identification.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <set>

#include "accum/fp8_model.hpp"
#include "checks/identify_internal.hpp"
#include "core/parallel.hpp"
#include "epilogue/block_models.hpp"
#include "epilogue/formula_space.hpp"
#include "qconform/accumulation.hpp"
#include "qconform/error.hpp"

namespace qc::identify_detail {

uint16_t eval(const FormulaPoint& p, int64_t acc, float sa, float sw, std::optional<uint16_t> bias) {
  if (p.conv == AccConversion::exact) return exact_bf16(acc, sa, sw, bias);
  return formula::apply_point(p, acc, sa, sw, bias.has_value(), bias ? bf16_to_f32(*bias) : 0.0f);
}

uint16_t eval(const FormulaPoint& p, const Operand& o) {
  if (p.input == FormulaInput::fp32) {
    return formula::apply_point(p, o.d, o.sa, o.sw, o.bias.has_value(), o.bias ? bf16_to_f32(*o.bias) : 0.0f);
  }
  return eval(p, o.acc, o.sa, o.sw, o.bias);
}

uint16_t eval_element(const FormulaPoint& p, const Observation& o, int64_t i, int64_t j, std::optional<uint16_t> bias) {
  const size_t e = static_cast<size_t>(i * o.n + j);
  if (p.input == FormulaInput::fp32) {
    return formula::apply_point(p, o.d[e], o.sa[i], o.sw[j], bias.has_value(), bias ? bf16_to_f32(*bias) : 0.0f);
  }
  return eval(p, o.acc[e], o.sa[i], o.sw[j], bias);
}

std::string accumulator_text(const Observation& o, size_t e) {
  return o.d.empty() ? fmt::format("{}", o.acc[e]) : fmt::format("{:a}", o.d[e]);
}

std::string bits16(uint16_t b, Precision out) {
  return fmt::format("0x{:04x} ({:.9g})", b, out == Precision::f16 ? f16_to_f32(b) : bf16_to_f32(b));
}

// Elements of `o` where candidate `c` disagrees (the refusal counts as every element).
int64_t disagreements(const Candidate& c, const Observation& o, int64_t stop_after) {
  const bool has_bias = !o.bias.empty();
  if (o.refused) return c.refuses_bias() && has_bias ? 0 : o.size();
  if (has_bias && c.refuses_bias()) return o.size();
  const FormulaPoint& p = c.at(o.m, o.n);
  int64_t bad = 0;
  for (int64_t i = 0; i < o.m && bad < stop_after; ++i) {
    for (int64_t j = 0; j < o.n; ++j) {
      if (eval_element(p, o, i, j, o.bias_at(j)) != o.y[static_cast<size_t>(i * o.n + j)]) ++bad;
    }
  }
  return bad;
}

namespace {

// The parameters that act on an output without a bias, as one number: candidates that share it
// give the same output on every element of an observation without a bias.
uint32_t plain_code(const FormulaPoint& p) {
  uint32_t c = 0;
  for (uint32_t v : {static_cast<uint32_t>(p.input), static_cast<uint32_t>(p.conv), static_cast<uint32_t>(p.sa),
                     static_cast<uint32_t>(p.sw), static_cast<uint32_t>(p.grouping), static_cast<uint32_t>(p.first),
                     static_cast<uint32_t>(p.second), static_cast<uint32_t>(p.rounding), static_cast<uint32_t>(p.out)}) {
    c = c * 8 + v;
  }
  return c;
}

}  // namespace

void Identifier::make_candidates() {
  for (const FormulaPoint& p : formula_space(input_)) {
    Candidate c;
    c.main = c.swapped = p;
    c.notation = formula_notation(p);
    c.key = formula_class_key(p);
    c.plain_key = c.key.substr(0, c.key.find(" | "));
    cands_.push_back(std::move(c));
  }
  std::vector<const Epilogue*> rows;
  if (input_ == FormulaInput::fp32) {
    for (const Epilogue& e : fp8_epilogues()) rows.push_back(&e);
  } else {
    for (const Epilogue& e : all_epilogues()) rows.push_back(&e);
  }
  for (const Epilogue* row : rows) {
    const Epilogue& e = *row;
    const auto p = row_point(e);
    if (!p) continue;
    const auto s = row_swap_point(e);
    if (!s) {
      named_by_key_[formula_class_key(*p)].emplace_back(e.name);
      continue;
    }
    // A shape dispatch is a candidate of its own: one point, another on its other side (under
    // swap-AB, transposed).
    Candidate c;
    c.main = *p;
    c.swapped = *s;
    c.dispatch = true;
    c.via = e.kind;
    c.notation = fmt::format("{}: {}; {}: {}", e.name, formula_notation(*p), dispatch_condition(e), formula_notation(*s));
    const std::string a = formula_class_key(*p), b = formula_class_key(*s);
    const std::string kind = fmt::format("{} dispatch", dispatch_name(e));
    c.key = kind + " [" + a + "] [" + b + "]";
    c.plain_key = kind + " [" + a.substr(0, a.find(" | ")) + "] [" + b.substr(0, b.find(" | ")) + "]";
    named_by_key_[c.key].emplace_back(e.name);
    cands_.push_back(std::move(c));
  }
}

Observation Identifier::observe(const LayerOperands& ops, std::string id, bool heldout) {
  Observation o;
  o.id = std::move(id);
  o.heldout = heldout;
  o.m = ops.m;
  o.n = ops.n;
  o.k = ops.k;
  o.sa.assign(ops.a_scale.begin(), ops.a_scale.end());
  o.sw.assign(ops.w_scale.begin(), ops.w_scale.end());
  o.bias.assign(ops.bias.begin(), ops.bias.end());
  if (input_ == FormulaInput::fp32) {
    // The measured accumulation model on the layer's codes: what the epilogue starts from.
    const Fp8LayerCodes codes = fp8_layer_codes(r_.arm.label, ops);
    o.d.resize(static_cast<size_t>(ops.m * ops.n));
    fp8_model_evaluate(model_, codes.gemm(), o.d.data());
    if (r_.arm.offers_unscaled() && codes.a_format == Fp8Format::e4m3 && codes.w_format == Fp8Format::e4m3) {
      own_fp8_d(o, codes);
    }
  } else {
    const ExactAccumulators exact = exact_accumulate(ops.a_q.data(), ops.w_q.data(), {ops.m, ops.n, ops.k});
    if (exact.wide()) {
      o.acc = exact.i64;
    } else {
      o.acc.assign(exact.i32.begin(), exact.i32.end());
    }
  }
  try {
    ArmOutput out = arm_.run(ops);
    if (r_.record.arm.empty()) r_.record = out.record;
    QC_INPUT(static_cast<int64_t>(out.y.size()) == ops.m * ops.n, "identify: arm {} returned {} outputs for probe `{}`, expected {}x{}",
             r_.arm.label, out.y.size(), o.id, ops.m, ops.n);
    o.y = std::move(out.y);
    if (input_ == FormulaInput::integer && out.acc && static_cast<int64_t>(out.acc->size()) == ops.m * ops.n) {
      o.acc_exposed = ops.m * ops.n;
      for (int64_t e = 0; e < o.acc_exposed; ++e) {
        const int64_t want = o.acc[static_cast<size_t>(e)];
        if (want < INT32_MIN || want > INT32_MAX) continue;  // beyond INT32: nothing to compare
        const int32_t got = (*out.acc)[static_cast<size_t>(e)];
        if (got == want) continue;
        if (o.acc_first.size() < 3) {
          o.acc_first.push_back(fmt::format("{} acc[{},{}] = {} (0x{:08x}), exact {} (0x{:08x}), difference {}", o.id, e / o.n,
                                            e % o.n, got, static_cast<uint32_t>(got), want, static_cast<uint32_t>(want),
                                            static_cast<int64_t>(got) - want));
        }
        ++o.acc_wrong;
      }
    }
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::input) throw;
    QC_INPUT(ops.has_bias(), "identify: arm {} refuses probe `{}` ({}x{}x{}): {}", r_.arm.label, o.id, ops.m, ops.n, ops.k,
             e.what());
    o.refused = true;
    o.refusal = e.what();
  }
  return o;
}

// An arm with an unscaled entry: its own d on this layer against the measured model's, bit for bit.
// The epilogue then starts from the arm's own d (what its epilogue was given), so a layer on which
// the model does not hold is charged to the accumulation, not to the epilogue.
void Identifier::own_fp8_d(Observation& o, const Fp8LayerCodes& codes) {
  nlohmann::json record;
  std::vector<float> own = arm_.fp8_accumulate(codes.a.data(), codes.w.data(), o.m, o.n, o.k, record);
  QC_INPUT(static_cast<int64_t>(own.size()) == o.size(), "identify: arm {}'s fp8_accumulate returned {} values for probe `{}`, "
           "expected {}x{}", r_.arm.label, own.size(), o.id, o.m, o.n);
  o.acc_exposed = o.size();
  for (int64_t e = 0; e < o.size(); ++e) {
    const uint32_t got = f32_bits(own[static_cast<size_t>(e)]), want = f32_bits(o.d[static_cast<size_t>(e)]);
    if (got == want) continue;
    if (o.acc_first.size() < 3) {
      o.acc_first.push_back(fmt::format("{} d[{},{}]: the arm's fp8_accumulate gives {:a} (0x{:08x}), the measured model {:a} "
                                        "(0x{:08x})",
                                        o.id, e / o.n, e % o.n, own[static_cast<size_t>(e)], got, o.d[static_cast<size_t>(e)], want));
    }
    ++o.acc_wrong;
  }
  o.d = std::move(own);
}

int64_t Identifier::eliminate(const Observation& o) {
  const bool plain = o.bias.empty();
  // Every candidate is compared on the probes (the nearest ones of an unexplained arm come from
  // these counts); on the held-out sets only the survivors are. Without a bias, the candidates that
  // share their bias-free parameters are evaluated once (`plain_code`).
  std::vector<size_t> todo;
  std::map<uint32_t, size_t> first_of;
  std::vector<size_t> same_as(cands_.size(), SIZE_MAX);
  for (size_t i = 0; i < cands_.size(); ++i) {
    const Candidate& c = cands_[i];
    if (o.heldout && !c.alive && !(plain && c.plain_alive)) continue;
    if (plain && !c.dispatch && !o.refused) {
      const auto [it, fresh] = first_of.emplace(plain_code(c.main), i);
      if (!fresh) {
        same_as[i] = it->second;
        continue;
      }
    }
    todo.push_back(i);
  }
  std::vector<int64_t> bad_of(cands_.size(), -1);
  parallel_for(static_cast<int64_t>(todo.size()), 0, [&](int64_t t) { bad_of[todo[t]] = disagreements(cands_[todo[t]], o); });
  int64_t gone = 0;
  for (size_t i = 0; i < cands_.size(); ++i) {
    if (bad_of[i] < 0 && same_as[i] != SIZE_MAX) bad_of[i] = bad_of[same_as[i]];
    if (bad_of[i] < 0) continue;
    Candidate& c = cands_[i];
    const int64_t bad = bad_of[i];
    c.mismatches += bad;
    c.compared += o.size();
    if (bad > 0 && plain) c.plain_alive = false;
    if (bad > 0 && c.alive) {
      c.alive = false;
      ++gone;
    }
  }
  return gone;
}

std::vector<const Candidate*> Identifier::representatives(bool plain) {
  std::map<std::string, const Candidate*> reps;
  for (const Candidate& c : cands_) {
    if (c.alive) reps.emplace(plain ? c.plain_key : c.key, &c);
  }
  std::vector<const Candidate*> out;
  for (const auto& [k, c] : reps) out.push_back(c);
  // A bounded subset scores the design; the elimination itself always sees every candidate.
  if (out.size() > kMaxReps) {
    for (size_t i = 0; i < kMaxReps; ++i) std::swap(out[i], out[i + static_cast<size_t>(rng_.below(static_cast<int64_t>(out.size() - i)))]);
    out.resize(kMaxReps);
  }
  return out;
}

size_t Identifier::alive_classes(bool plain) const {
  std::set<std::string> keys;
  for (const Candidate& c : cands_) {
    if (c.alive) keys.insert(plain ? c.plain_key : c.key);
  }
  return keys.size();
}

// One designed probe: returns whether it eliminated anything.
bool Identifier::probe_round(int round, bool with_bias, bool plain) {
  const int64_t m = round % 2 == 0 ? kRowsPlain : rows_swapped();
  int64_t score = 0;
  const ProbeSpec spec = design(m, with_bias, plain, &score);
  const std::string id = fmt::format("probe{}/M={}{}", round, m, with_bias ? "/bias" : "");
  const Observation& o = run_probe(spec, id, score);
  if (with_bias) {
    bias_tested_ = true;
    bias_refused_ = o.refused;
  }
  return r_.probes.back()["eliminated"].get<int64_t>() > 0;
}

const Observation& Identifier::run_probe(const ProbeSpec& spec, const std::string& id, int64_t score) {
  const size_t before_classes = alive_classes(false);
  int64_t before = 0;
  for (const Candidate& c : cands_) before += c.alive;
  Observation o = observe(build(spec, id), id, false);
  const int64_t gone = eliminate(o);
  int64_t left = 0;
  for (const Candidate& c : cands_) left += c.alive;
  r_.probes.push_back({{"id", id},
                       {"m", o.m},
                       {"n", o.n},
                       {"k", o.k},
                       {"bias", !spec.bias.empty()},
                       {"refused", o.refused},
                       {"elements", o.size()},
                       {"design_pairs_split", score},
                       {"candidates_before", before},
                       {"classes_before", before_classes},
                       {"eliminated", gone},
                       {"candidates_left", left},
                       {"classes_left", alive_classes(false)}});
  obs_.push_back(std::move(o));
  return obs_.back();
}

IdentifyResult Identifier::run() {
  const auto t0 = std::chrono::steady_clock::now();
  r_.arm = arm_.info();
  r_.outputs = 0;
  if (r_.arm.block()) {
    identify_block();  // block-scaled FP8: the block model, measured (identify_block.cpp)
  } else if (r_.arm.fp8()) {
    identify_fp8();
  } else {
    identify_epilogue();
  }
  r_.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r_;
}

void Identifier::identify_epilogue() {
  make_candidates();
  // Phase 1, no bias: rounds alternate a shape without swap-AB and one with it, until one class of
  // the bias-free behaviour is left (both shapes probed) or two rounds in a row eliminate nothing.
  int round = 0, idle = 0;
  while (round < options_.max_rounds) {
    const bool gone = probe_round(round++, false, true);
    idle = gone ? 0 : idle + 1;
    if ((round >= 2 && alive_classes(true) <= 1) || idle >= 2) break;
  }
  // Phase 2, with a bias: refused (only points without a bias stay) or taken (probing continues
  // until one class is left).
  idle = 0;
  for (int b = 0; round < options_.max_rounds + 8; ++b) {
    const bool gone = probe_round(round++, true, false);
    if (bias_refused_) break;
    idle = gone ? 0 : idle + 1;
    if ((b >= 1 && alive_classes(false) <= 1) || idle >= 2) break;
  }
  heldout();
  conclude();
}

}  // namespace qc::identify_detail
