// `qconform identify`: designed probes through the arm eliminate points of the formula space until
// one equivalence class is left, then held-out synthetic operands confirm it (docs/identify.md).
//
// Every probe is a layer whose accumulators, scales and bias the probe chooses: sa per row, sw and
// bias per column, and for each element the accumulator that splits the surviving classes best
// (among accumulators near powers of two and random ones of every magnitude). The int8 operands
// that produce those accumulators are built digit by digit (`build_probe`), with the last digits in
// the final partial K tile, so that the arm computes exactly the accumulators the design chose
// through its own code path.
#include "checks/identify.hpp"
#include "epilogue/block_models.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <optional>
#include <set>

#include "accum/fp8_model.hpp"
#include "checks/c1_fp8_model.hpp"
#include "synth/synth.hpp"
#include "epilogue/formula_space.hpp"
#include "qconform/accumulation.hpp"
#include "qconform/epilogue.hpp"
#include "qconform/error.hpp"
#include "qconform/numerics.hpp"

namespace qc {

namespace {

constexpr int64_t kCols = 16;       // N of every probe (CUDA arms need N and K multiples of 16)
constexpr int64_t kRowsPlain = 40;  // M of the probes without swap-AB (sglang_sm90_swaps is false)
constexpr int64_t kRowsSwap = 8;    // M of the probes with swap-AB
constexpr int kTries = 24;          // accumulators tried per element when designing
constexpr int kPairTries = 4;       // accumulators built to separate a random pair of classes, per element
constexpr size_t kMaxReps = 400;    // class representatives the design scores against
constexpr int kSeparationTries = 4000;   // operands tried per pair of classes left after the probes
constexpr int kSeparationRounds = 4;     // separation probes at most (each can leave new pairs)
constexpr size_t kSeparationPairs = 64;  // pairs of classes searched per round
constexpr int kSeparationAccBits = 28;   // |acc| a separation probe builds (K about 2^18)

struct Candidate {
  FormulaPoint main, swapped;
  bool dispatch = false;  // a named shape dispatch (`sglang-sm90`): `swapped` under swap-AB
  std::string notation, key, plain_key;
  bool alive = true;
  bool plain_alive = true;  // explains every output of the observations without a bias
  int64_t mismatches = 0, compared = 0;
  const FormulaPoint& at(int64_t m, int64_t n) const {
    return dispatch && formula::sglang_sm90_swaps(m, n) ? swapped : main;
  }
  bool refuses_bias() const { return main.bias == BiasPlacement::none && main.conv != AccConversion::exact; }
};

uint16_t eval(const FormulaPoint& p, int64_t acc, float sa, float sw, std::optional<uint16_t> bias) {
  if (p.conv == AccConversion::exact) return exact_bf16(acc, sa, sw, bias);
  return formula::apply_point(p, acc, sa, sw, bias.has_value(), bias ? bf16_to_f32(*bias) : 0.0f);
}

struct Observation {
  std::string id;
  bool heldout = false;
  int64_t m = 0, n = 0, k = 0;
  std::vector<int64_t> acc;  // exact
  std::vector<float> sa, sw;
  std::vector<uint16_t> bias;  // empty: no bias
  bool refused = false;
  std::string refusal;
  std::vector<uint16_t> y;
  int64_t acc_exposed = 0, acc_wrong = 0;
  std::vector<std::string> acc_first;
  std::optional<uint16_t> bias_at(int64_t n) const { return bias.empty() ? std::nullopt : std::optional<uint16_t>(bias[n]); }
  int64_t size() const { return m * n; }
};

std::string bits16(uint16_t b, Precision out) {
  return fmt::format("0x{:04x} ({:.9g})", b, out == Precision::f16 ? f16_to_f32(b) : bf16_to_f32(b));
}

// Elements of `o` where candidate `c` disagrees (the refusal counts as every element).
int64_t disagreements(const Candidate& c, const Observation& o, int64_t stop_after = INT64_MAX) {
  const bool has_bias = !o.bias.empty();
  if (o.refused) return c.refuses_bias() && has_bias ? 0 : o.size();
  if (has_bias && c.refuses_bias()) return o.size();
  const FormulaPoint& p = c.at(o.m, o.n);
  int64_t bad = 0;
  for (int64_t i = 0; i < o.m && bad < stop_after; ++i) {
    for (int64_t j = 0; j < o.n; ++j) {
      const size_t e = static_cast<size_t>(i * o.n + j);
      if (eval(p, o.acc[e], o.sa[i], o.sw[j], o.bias_at(j)) != o.y[e]) ++bad;
    }
  }
  return bad;
}

// ---- probes ------------------------------------------------------------------------------------

struct ProbeSpec {
  int64_t m = 0;
  std::vector<float> sa, sw;
  std::vector<uint16_t> bias;
  std::vector<int64_t> target;  // [m, kCols]
};

// int8 operands whose exact accumulators are `target`: column n owns a block of `big` digits
// against w = -128, a first digit against w = 1 in the first 16 positions of K and a 1 against
// w = 1 in the final 16 (inside the last partial 64-wide K tile): acc = first - 128 * sum(block)
// + 1, first = (acc mod 128) - 1. The odd first digit makes a float accumulation round at every
// step beyond 2^24; the last one makes a dropped K tail show.
LayerOperands build_probe(const ProbeSpec& s, const std::string& name) {
  int64_t big = 1;
  std::vector<int64_t> blocks(s.target.size()), last(s.target.size());
  for (size_t e = 0; e < s.target.size(); ++e) {
    const int64_t t = s.target[e];
    last[e] = ((t % 128) + 128) % 128;
    blocks[e] = (last[e] - t) / 128;
    big = std::max<int64_t>(big, (std::llabs(blocks[e]) + 126) / 127);
  }
  int64_t k = kCols + kCols * big + kCols;
  while (k % 64 != 32) k += 16;
  const int64_t tail0 = k - kCols, block0 = kCols;
  OperandStorage st;
  st.a_q.assign(static_cast<size_t>(s.m * k), 0);
  st.w_q.assign(static_cast<size_t>(kCols * k), 0);
  for (int64_t n = 0; n < kCols; ++n) {
    for (int64_t i = 0; i < big; ++i) st.w_q[static_cast<size_t>(n * k + block0 + n * big + i)] = -128;
    st.w_q[static_cast<size_t>(n * k + n)] = 1;
    st.w_q[static_cast<size_t>(n * k + tail0 + n)] = 1;
  }
  for (int64_t m = 0; m < s.m; ++m) {
    for (int64_t n = 0; n < kCols; ++n) {
      const size_t e = static_cast<size_t>(m * kCols + n);
      int64_t rest = blocks[e];
      for (int64_t i = 0; i < big && rest != 0; ++i) {
        const int64_t d = rest > 0 ? std::min<int64_t>(rest, 127) : std::max<int64_t>(rest, -128);
        st.a_q[static_cast<size_t>(m * k + block0 + n * big + i)] = static_cast<int8_t>(d);
        rest -= d;
      }
      QC_CHECK(rest == 0, "identify: probe digits for acc {} do not fit {} digits", s.target[e], big);
      st.a_q[static_cast<size_t>(m * k + n)] = static_cast<int8_t>(last[e] - 1);
      st.a_q[static_cast<size_t>(m * k + tail0 + n)] = 1;
    }
  }
  st.a_scale = s.sa;
  st.w_scale = s.sw;
  st.bias = s.bias;
  return make_operands(name, s.m, kCols, k, std::move(st), "identify probe");
}

class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t next() { return splitmix64(state_); }
  double uniform() { return static_cast<double>(next() >> 11) * 0x1p-53; }
  int64_t below(int64_t n) { return static_cast<int64_t>(next() % static_cast<uint64_t>(n)); }
  // A random fp32 with a full 24-bit significand, log-uniform in [2^lo, 2^hi).
  float scale(int lo, int hi) {
    const float sig = f32_from_bits(0x3F800000u | static_cast<uint32_t>(next() & 0x7FFFFFu));
    return std::ldexp(sig, lo + static_cast<int>(below(hi - lo)));
  }

 private:
  uint64_t state_;
};

// Accumulators worth trying: near powers of two (where conversions and roundings change step),
// and random magnitudes from 2^3 to 2^25 (above 2^24 the fp32 conversion rounds).
// `limit` caps |acc| (`IdentifyOptions::probe_acc_bits`; the default draws never reach it).
int64_t try_acc(Rng& rng, int64_t limit) {
  int64_t v;
  if (rng.below(3) == 0) {
    v = (int64_t{1} << (8 + rng.below(18))) + rng.below(7) - 3;
  } else {
    const double mag = std::ldexp(1.0, 3 + static_cast<int>(rng.below(22))) * (1.0 + rng.uniform());
    v = static_cast<int64_t>(mag);
  }
  v = std::min(v, limit);
  return rng.below(4) == 0 ? -v : v;
}

// An accumulator on which points `a` and `b` give different outputs at (sa, sw, bias), if the
// search finds one. Both are monotone step functions of acc; an output step of `a` (two adjacent
// accumulators where `a` changes, found by bisection in a random binade) is rarely a step of `b`
// at the same integer, unless the two agree there. This finds the rare differences random
// accumulators miss: a conversion that rounds differently above 2^24, a product one ulp apart.
// `max_bits` bounds the binades searched (23 draws binades up to [2^25, 2^26]); `limit` caps |acc|.
std::optional<int64_t> separating_acc(const FormulaPoint& a, const FormulaPoint& b, float sa, float sw,
                                      std::optional<uint16_t> bias, Rng& rng, int64_t limit = INT64_MAX,
                                      int binades = 23) {
  for (int attempt = 0; attempt < 4; ++attempt) {
    const int e = 3 + static_cast<int>(rng.below(binades));
    const int64_t sign = rng.below(4) == 0 ? -1 : 1;
    int64_t lo = int64_t{1} << e, hi = int64_t{1} << (e + 1);
    lo += rng.below(lo / 2);
    hi = std::min(hi, limit);
    lo = std::min(lo, hi);
    const auto ya = [&](int64_t x) { return eval(a, sign * x, sa, sw, bias); };
    if (ya(lo) == ya(hi)) continue;
    while (hi - lo > 1) {
      const int64_t mid = lo + (hi - lo) / 2;
      if (ya(mid) == ya(lo)) {
        lo = mid;
      } else {
        hi = mid;
      }
    }
    for (int64_t x : {lo, hi}) {
      if (eval(a, sign * x, sa, sw, bias) != eval(b, sign * x, sa, sw, bias)) return sign * x;
    }
  }
  return std::nullopt;
}

// ---- jurisdiction -----------------------------------------------------------------------------

// `formula::apply_point` read once more, over floats that note every step leaving jurisdiction
// (docs/identify.md, "What equivalent means": finite scales > 0, every intermediate zero or normal
// in its own format, no overflow, the accumulator within the bound). The values are the float
// arithmetic itself (`formula::` primitives), so the outputs are `eval`'s, bit for bit.
namespace juris {

struct Notes {
  std::vector<std::string> list;
  void add(std::string s) {
    if (std::find(list.begin(), list.end(), s) == list.end()) list.push_back(std::move(s));
  }
};
struct J {
  float v = 0;
  Notes* notes = nullptr;
  uint16_t bits = 0;  // out_round's result: the output bit pattern
};
struct JAcc {
  int64_t v = 0;
  Notes* notes = nullptr;
};

const char* format_name(Precision p) { return p == Precision::bf16 ? "bf16" : p == Precision::f16 ? "fp16" : "fp32"; }
double min_normal(Precision p) { return p == Precision::f16 ? 0x1p-14 : 0x1p-126; }

// `r` is `what` rounded to format `p` from `in` (nonzero in, zero out: an underflow).
J checked(float r, Precision p, Notes* n, const char* what, float in) {
  if (!std::isfinite(r)) {
    n->add(fmt::format("{} overflows {}", what, format_name(p)));
  } else if (r == 0 && in != 0) {
    n->add(fmt::format("{} underflows to zero in {}", what, format_name(p)));
  } else if (r != 0 && std::fabs(static_cast<double>(r)) < min_normal(p)) {
    n->add(fmt::format("{} is subnormal in {}", what, format_name(p)));
  }
  return J{r, n};
}

J convert_acc(AccConversion c, const JAcc& a) {
  const Precision p = c == AccConversion::bf16_rn ? Precision::bf16 : c == AccConversion::f16_rn ? Precision::f16 : Precision::f32;
  return checked(formula::convert_acc(c, a.v), p, a.notes, "the converted accumulator", a.v == 0 ? 0.0f : 1.0f);
}
J round_to(Precision p, const J& x) { return checked(formula::round_to(p, x.v), p, x.notes, "a cast or rounded intermediate", x.v); }
J mul_rn(const J& a, const J& b) {
  return checked(formula::mul_rn(a.v, b.v), Precision::f32, a.notes, "a product", a.v != 0 && b.v != 0 ? 1.0f : 0.0f);
}
J add_rn(const J& a, const J& b) { return checked(formula::add_rn(a.v, b.v), Precision::f32, a.notes, "a sum", 0.0f); }
J fma_rn(const J& a, const J& b, const J& c) {
  return checked(formula::fma_rn(a.v, b.v, c.v), Precision::f32, a.notes, "a fused multiply-add", 0.0f);
}
J out_round(Precision p, OutRounding r, const J& x) {
  const uint16_t b = formula::out_round(p, r, x.v);
  J o = checked(formula::widen_out(p, b), p, x.notes, "the output", x.v);
  o.bits = b;
  return o;
}
J widen_out(Precision, const J& x) { return x; }

}  // namespace juris

// An operand of one output element.
struct Operand {
  int64_t acc = 0;
  float sa = 1, sw = 1;
  std::optional<uint16_t> bias;
};

// Why `o` is outside jurisdiction for point `p` (empty: inside), `acc_bits` the accumulator bound.
std::vector<std::string> outside_jurisdiction(const FormulaPoint& p, const Operand& o, int acc_bits) {
  juris::Notes n;
  const int64_t bound = acc_bits >= 31 ? int64_t{INT32_MAX} : int64_t{1} << acc_bits;
  if (o.acc > bound || o.acc < -bound - (acc_bits >= 31 ? 1 : 0)) {
    n.add(acc_bits >= 31 ? "the accumulator is beyond INT32" : fmt::format("|acc| is beyond 2^{}", acc_bits));
  }
  for (const auto& [v, name] : {std::pair{o.sa, "sa"}, std::pair{o.sw, "sw"}}) {
    if (!(std::isfinite(v) && v > 0)) {
      n.add(fmt::format("{} is not a finite scale > 0", name));
    } else if (v < 0x1p-126f) {
      n.add(fmt::format("{} is an fp32 subnormal", name));
    }
  }
  if (o.bias && bf16_to_f32(*o.bias) != 0 && std::fabs(bf16_to_f32(*o.bias)) < 0x1p-126f) n.add("the bias is a bf16 subnormal");
  if (p.conv == AccConversion::exact) {
    const uint16_t y = exact_bf16(o.acc, o.sa, o.sw, o.bias);
    juris::checked(bf16_to_f32(y), Precision::bf16, &n, "the output", o.acc == 0 ? 0.0f : 1.0f);
    return n.list;
  }
  const juris::J y = formula::apply_point(p, juris::JAcc{o.acc, &n}, juris::J{o.sa, &n}, juris::J{o.sw, &n}, o.bias.has_value(),
                                          juris::J{o.bias ? bf16_to_f32(*o.bias) : 0.0f, &n});
  QC_CHECK(y.bits == eval(p, o.acc, o.sa, o.sw, o.bias), "identify: the jurisdiction reading of {} gives 0x{:04x}, the point 0x{:04x}",
           formula_notation(p), y.bits, eval(p, o.acc, o.sa, o.sw, o.bias));
  return n.list;
}

// ---- the identification ---------------------------------------------------------------------------

class Identifier {
 public:
  Identifier(Arm& arm, const IdentifyOptions& o) : arm_(arm), options_(o), rng_(o.seed) {}

  IdentifyResult run();

 private:
  void make_candidates();
  Observation observe(const LayerOperands& ops, std::string id, bool heldout);
  // Eliminates by `o`; returns how many candidates it eliminated.
  int64_t eliminate(const Observation& o);
  std::vector<const Candidate*> representatives(bool plain);
  size_t alive_classes(bool plain) const;
  ProbeSpec design(int64_t m, bool with_bias, bool plain, int64_t* score);
  bool probe_round(int round, bool with_bias, bool plain);
  // Runs one probe through the arm, eliminates by it and records it in `r_.probes`.
  const Observation& run_probe(const ProbeSpec& spec, const std::string& id, int64_t score);
  int64_t probe_limit() const { return int64_t{1} << std::clamp(options_.probe_acc_bits, 8, 40); }
  // Several classes left after the probes: separating operands, probed where in jurisdiction.
  void separate();
  std::optional<Operand> find_separator(const Candidate& a, const Candidate& b, int64_t m, bool bias_ok, bool inside,
                                        std::vector<std::string>* why_outside);
  void heldout();
  void conclude();
  void identify_fp8();
  void describe_unexplained();
  nlohmann::json class_list() const;

  Arm& arm_;
  IdentifyOptions options_;
  Rng rng_;
  IdentifyResult r_;
  std::vector<Candidate> cands_;
  std::map<std::string, std::vector<std::string>> named_by_key_;
  std::vector<Observation> obs_;
  bool bias_refused_ = false, bias_tested_ = false;
};

void Identifier::make_candidates() {
  for (const FormulaPoint& p : formula_space()) {
    Candidate c;
    c.main = c.swapped = p;
    c.notation = formula_notation(p);
    c.key = formula_class_key(p);
    c.plain_key = c.key.substr(0, c.key.find(" | "));
    cands_.push_back(std::move(c));
  }
  for (const Epilogue& e : all_epilogues()) {
    const auto p = row_point(e);
    if (!p) continue;
    const auto s = row_swap_point(e);
    if (!s) {
      named_by_key_[formula_class_key(*p)].emplace_back(e.name);
      continue;
    }
    // A shape dispatch is a candidate of its own: one point, another under swap-AB.
    Candidate c;
    c.main = *p;
    c.swapped = *s;
    c.dispatch = true;
    c.notation = fmt::format("{}: {}; under swap-AB (M <= 16, or M <= 64 with N > 1280): {}", e.name,
                             formula_notation(*p), formula_notation(*s));
    const std::string a = formula_class_key(*p), b = formula_class_key(*s);
    c.key = "swap-AB dispatch [" + a + "] [" + b + "]";
    c.plain_key = "swap-AB dispatch [" + a.substr(0, a.find(" | ")) + "] [" + b.substr(0, b.find(" | ")) + "]";
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
  const ExactAccumulators exact = exact_accumulate(ops.a_q.data(), ops.w_q.data(), {ops.m, ops.n, ops.k});
  if (exact.wide()) {
    o.acc = exact.i64;
  } else {
    o.acc.assign(exact.i32.begin(), exact.i32.end());
  }
  try {
    ArmOutput out = arm_.run(ops);
    if (r_.record.arm.empty()) r_.record = out.record;
    QC_INPUT(static_cast<int64_t>(out.y.size()) == ops.m * ops.n, "identify: arm {} returned {} outputs for probe `{}`, expected {}x{}",
             r_.arm.label, out.y.size(), o.id, ops.m, ops.n);
    o.y = std::move(out.y);
    if (out.acc && static_cast<int64_t>(out.acc->size()) == ops.m * ops.n) {
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

int64_t Identifier::eliminate(const Observation& o) {
  int64_t gone = 0;
  for (Candidate& c : cands_) {
    // Every candidate is compared on the probes (the nearest ones of an unexplained arm come from
    // these counts); on the held-out sets only the survivors are.
    const bool plain = o.bias.empty();
    if (o.heldout && !c.alive && !(plain && c.plain_alive)) continue;
    const int64_t bad = disagreements(c, o);
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

ProbeSpec Identifier::design(int64_t m, bool with_bias, bool plain, int64_t* score) {
  const std::vector<const Candidate*> reps = representatives(plain);
  ProbeSpec s;
  s.m = m;
  for (int64_t i = 0; i < m; ++i) s.sa.push_back(rng_.scale(-9, -3));
  for (int64_t n = 0; n < kCols; ++n) s.sw.push_back(rng_.scale(-12, -5));
  if (with_bias) {
    // Biases near the size of the outputs (2^-10 to 2^3 of them) put the add's rounding in play.
    for (int64_t n = 0; n < kCols; ++n) {
      const double y = std::ldexp(1.0, 10 + static_cast<int>(rng_.below(10))) * s.sw[static_cast<size_t>(n)] * 0x1p-6;
      const float b = static_cast<float>(std::ldexp(y * (1.0 + rng_.uniform()), -10 + static_cast<int>(rng_.below(14))));
      s.bias.push_back(f32_to_bf16(rng_.below(3) == 0 ? -b : b));
    }
  }
  *score = 0;
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t n = 0; n < kCols; ++n) {
      const float sa = s.sa[static_cast<size_t>(i)], sw = s.sw[static_cast<size_t>(n)];
      const std::optional<uint16_t> bias = with_bias ? std::optional<uint16_t>(s.bias[static_cast<size_t>(n)]) : std::nullopt;
      // Accumulators to score: random ones, and ones built to separate a random pair of classes.
      std::vector<int64_t> tries;
      for (int t = 0; t < kTries; ++t) tries.push_back(try_acc(rng_, probe_limit()));
      for (int t = 0; t < kPairTries && reps.size() > 1; ++t) {
        const Candidate* a = reps[static_cast<size_t>(rng_.below(static_cast<int64_t>(reps.size())))];
        const Candidate* b = reps[static_cast<size_t>(rng_.below(static_cast<int64_t>(reps.size())))];
        if (a != b) {
          if (const auto acc = separating_acc(a->at(m, kCols), b->at(m, kCols), sa, sw, bias, rng_, probe_limit())) {
            tries.push_back(*acc);
          }
        }
      }
      int64_t best = tries.front(), best_score = -1;
      for (size_t t = 0; t < tries.size() && reps.size() > 1; ++t) {
        const int64_t acc = tries[t];
        std::map<uint16_t, int64_t> groups;
        for (const Candidate* c : reps) {
          const FormulaPoint& p = c->at(m, kCols);
          ++groups[eval(p, acc, sa, sw, bias)];
        }
        // Pairs of representatives this accumulator separates.
        const int64_t r = static_cast<int64_t>(reps.size());
        int64_t same = 0;
        for (const auto& [v, g] : groups) same += g * g;
        const int64_t sc = (r * r - same) / 2;
        if (sc > best_score) {
          best_score = sc;
          best = acc;
        }
      }
      *score += std::max<int64_t>(best_score, 0);
      s.target.push_back(best);
    }
  }
  return s;
}

// One designed probe: returns whether it eliminated anything.
bool Identifier::probe_round(int round, bool with_bias, bool plain) {
  const int64_t m = round % 2 == 0 ? kRowsPlain : kRowsSwap;
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
  Observation o = observe(build_probe(spec, id), id, false);
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

void Identifier::heldout() {
  // Realistic operands the probes never used: `synth` layers, one swap-AB shape and one without,
  // with a bias where the arm takes one.
  for (size_t i = 0; i < options_.heldout_m.size(); ++i) {
    SynthOptions so;
    so.shapes = options_.heldout_shapes;
    so.m = options_.heldout_m[i];
    so.seed = options_.seed + 1000 + i;
    so.bias = bias_tested_ && !bias_refused_ && i + 1 == options_.heldout_m.size();
    for (const LayerOperands& ops : synth_operands(so)) {
      const std::string id = fmt::format("heldout/{}/M={}{}", ops.name, ops.m, so.bias ? "/bias" : "");
      Observation o = observe(ops, id, true);
      r_.outputs += o.size();
      eliminate(o);
      obs_.push_back(std::move(o));
    }
  }
}

// An operand on which candidates `a` and `b` give different outputs at shape (m, kCols). `inside`:
// only operands in jurisdiction whose accumulator a probe can build (|acc| <= 2^kSeparationAccBits);
// else anywhere (the accumulator up to 2^40, scales over the whole fp32 range, subnormals
// included), preferring the operand that leaves jurisdiction in the fewest ways (`why_outside`).
std::optional<Operand> Identifier::find_separator(const Candidate& a, const Candidate& b, int64_t m, bool bias_ok, bool inside,
                                                  std::vector<std::string>* why_outside) {
  const FormulaPoint& pa = a.at(m, kCols);
  const FormulaPoint& pb = b.at(m, kCols);
  const int jbits = std::clamp(options_.jurisdiction_acc_bits, 8, 31);
  std::optional<Operand> best;
  std::vector<std::string> best_why;
  for (int t = 0; t < kSeparationTries; ++t) {
    // Outside jurisdiction, the first half stays near it (the scales of the search inside, the
    // accumulator up to 2^9 past the bound), so that the operand reported is as ordinary as can be;
    // the second half goes anywhere.
    const bool near = inside || t < kSeparationTries / 2;
    const int acc_bits = inside ? std::min(jbits >= 31 ? 30 : jbits, kSeparationAccBits) : near ? std::min(jbits + 9, 40) : 40;
    const int64_t acc_max = int64_t{1} << acc_bits;
    Operand o;
    o.sa = near ? rng_.scale(-24, 6) : rng_.scale(-150, 100);
    o.sw = near ? rng_.scale(-24, 6) : rng_.scale(-150, 100);
    if (bias_ok && rng_.below(2) == 0) {
      // A bias near the output's size puts the add's rounding in play.
      const double y = std::ldexp(1.0, static_cast<int>(rng_.below(acc_bits))) * o.sa * o.sw;
      const float bv = static_cast<float>(std::ldexp(y * (1.0 + rng_.uniform()), -10 + static_cast<int>(rng_.below(14))));
      o.bias = f32_to_bf16(rng_.below(3) == 0 ? -bv : bv);
    }
    if (rng_.below(3) == 0) {
      o.acc = (int64_t{1} << (1 + rng_.below(acc_bits - 1))) + rng_.below(7) - 3;
    } else {
      o.acc = static_cast<int64_t>(std::ldexp(1.0, static_cast<int>(rng_.below(acc_bits))) * (1.0 + rng_.uniform()));
    }
    o.acc = std::min(o.acc, acc_max);
    if (rng_.below(4) == 0) o.acc = -o.acc;
    if (eval(pa, o.acc, o.sa, o.sw, o.bias) == eval(pb, o.acc, o.sa, o.sw, o.bias)) {
      // Bisection on the output steps of `a` finds the rare accumulators where `b` steps elsewhere.
      const auto acc = separating_acc(pa, pb, o.sa, o.sw, o.bias, rng_, acc_max, acc_bits - 3);
      if (!acc) continue;
      o.acc = *acc;
    }
    std::vector<std::string> why = outside_jurisdiction(pa, o, jbits);
    for (std::string& w : outside_jurisdiction(pb, o, jbits)) {
      if (std::find(why.begin(), why.end(), w) == why.end()) why.push_back(std::move(w));
    }
    if (inside && !why.empty()) continue;
    if (!best || why.size() < best_why.size()) {
      best = o;
      best_why = why;
      if (why.size() <= 1) break;
    }
  }
  if (why_outside) *why_outside = best_why;
  return best;
}

void Identifier::separate() {
  std::vector<nlohmann::json> probed;
  const bool bias_ok = bias_tested_ && !bias_refused_;
  const auto bits_of = [](const FormulaPoint& p, uint16_t b) { return bits16(b, p.out); };
  const auto operand_json = [](const Operand& o) {
    return nlohmann::json{{"acc", o.acc},
                          {"sa", fmt::format("{:a}", o.sa)},
                          {"sw", fmt::format("{:a}", o.sw)},
                          {"bias", o.bias ? bits16(*o.bias, Precision::bf16) : std::string("none")}};
  };
  for (int round = 0; round <= kSeparationRounds; ++round) {
    std::map<std::string, const Candidate*> reps;
    for (const Candidate& c : cands_) {
      if (c.alive) reps.emplace(c.key, &c);
    }
    if (reps.size() <= 1) break;
    std::vector<const Candidate*> rv;
    for (const auto& [k, c] : reps) rv.push_back(c);
    // Every pair when few classes are left; else each class against the first (a separator of
    // those pairs eliminates all but one side of each).
    std::vector<std::pair<const Candidate*, const Candidate*>> pairs;
    for (size_t i = 0; i < rv.size(); ++i) {
      for (size_t j = i + 1; j < rv.size() && (rv.size() <= 8 || i == 0); ++j) pairs.emplace_back(rv[i], rv[j]);
    }
    if (pairs.size() > kSeparationPairs) pairs.resize(kSeparationPairs);  // the time bound; the next round sees the rest
    // Plan: in-jurisdiction separators, grouped by probe shape (M = 40, else the swap-AB M = 8) and bias.
    struct Planned {
      const Candidate *a, *b;
      Operand o;
    };
    std::map<std::pair<int64_t, bool>, std::vector<Planned>> plan;
    std::vector<nlohmann::json> unresolved;
    for (const auto& [a, b] : pairs) {
      std::optional<Operand> found;
      int64_t m = kRowsPlain;
      for (int64_t mm : {kRowsPlain, kRowsSwap}) {
        found = find_separator(*a, *b, mm, bias_ok, /*inside=*/true, nullptr);
        if (found) {
          m = mm;
          break;
        }
      }
      if (found) {
        plan[{m, found->bias.has_value()}].push_back({a, b, *found});
        continue;
      }
      nlohmann::json e = {{"a", a->notation}, {"b", b->notation}};
      std::vector<std::string> why;
      const auto outside = find_separator(*a, *b, kRowsPlain, bias_ok, /*inside=*/false, &why);
      if (outside) {
        const uint16_t ya = eval(a->at(kRowsPlain, kCols), outside->acc, outside->sa, outside->sw, outside->bias);
        const uint16_t yb = eval(b->at(kRowsPlain, kCols), outside->acc, outside->sa, outside->sw, outside->bias);
        e["separable"] = why.empty() ? "in jurisdiction, beyond the probes' reach" : "outside jurisdiction";
        e["operand"] = operand_json(*outside);
        e["gives"] = {bits_of(a->at(kRowsPlain, kCols), ya), bits_of(b->at(kRowsPlain, kCols), yb)};
        e["outside"] = why;
        e["summary"] = fmt::format(
            "would separate: acc={}, sa={:a}, sw={:a}, bias={} gives {} vs {}{}", outside->acc, outside->sa, outside->sw,
            outside->bias ? bits16(*outside->bias, Precision::bf16) : std::string("none"), e["gives"][0].get<std::string>(),
            e["gives"][1].get<std::string>(),
            why.empty() ? fmt::format(" (in jurisdiction, but |acc| is beyond 2^{}, what a separation probe builds)", kSeparationAccBits)
                        : fmt::format(" (outside jurisdiction: {})", fmt::join(why, "; ")));
      } else {
        e["separable"] = "none found";
        e["summary"] = fmt::format(
            "no operand of {} tried in jurisdiction and {} outside it (accumulators to 2^40, scales over the whole fp32 "
            "range, subnormals, with and without a bias) separates them; their class keys differ, so equality is not "
            "proved either",
            kSeparationTries * 2, kSeparationTries);
      }
      unresolved.push_back(std::move(e));
    }
    if (round == kSeparationRounds) {
      // The rounds are spent: what is still separable in jurisdiction is reported, not probed.
      for (const auto& [shape, list] : plan) {
        for (const Planned& pl : list) {
          unresolved.push_back({{"a", pl.a->notation},
                                {"b", pl.b->notation},
                                {"separable", "in jurisdiction, not probed"},
                                {"operand", operand_json(pl.o)},
                                {"summary", fmt::format("would separate in jurisdiction: acc={}, sa={:a}, sw={:a} (not probed: "
                                                        "the {} separation rounds are spent)",
                                                        pl.o.acc, pl.o.sa, pl.o.sw, kSeparationRounds)}});
        }
      }
      plan.clear();
    }
    if (plan.empty()) {
      r_.separation = probed;
      for (auto& e : unresolved) r_.separation.push_back(std::move(e));
      return;
    }
    // One probe per group (and per M rows of separators): separator i on the diagonal element
    // (i, i) with its own sa (row i), sw and bias (column i); every other accumulator is 0.
    int serial = 0;
    for (const auto& [shape, list] : plan) {
      const auto [m, with_bias] = shape;
      const size_t per_probe = static_cast<size_t>(std::min<int64_t>(m, kCols));
      for (size_t first = 0; first < list.size(); first += per_probe) {
        ProbeSpec spec;
        spec.m = m;
        spec.sa.assign(static_cast<size_t>(m), 0x1p-6f);
        spec.sw.assign(kCols, 0x1p-8f);
        if (with_bias) spec.bias.assign(kCols, f32_to_bf16(0.5f));
        spec.target.assign(static_cast<size_t>(m * kCols), 0);
        const size_t count = std::min(per_probe, list.size() - first);
        for (size_t i = 0; i < count; ++i) {
          const Operand& o = list[first + i].o;
          spec.sa[i] = o.sa;
          spec.sw[i] = o.sw;
          if (with_bias) spec.bias[i] = *o.bias;
          spec.target[i * kCols + i] = o.acc;
        }
        const std::string id = fmt::format("separate{}.{}/M={}{}", round, serial++, m, with_bias ? "/bias" : "");
        run_probe(spec, id, static_cast<int64_t>(count));
        for (size_t i = 0; i < count; ++i) {
          const Planned& pl = list[first + i];
          const FormulaPoint& pa = pl.a->at(m, kCols);
          const FormulaPoint& pb = pl.b->at(m, kCols);
          probed.push_back({{"a", pl.a->notation},
                            {"b", pl.b->notation},
                            {"separable", "in jurisdiction: probed"},
                            {"probe", id},
                            {"operand", operand_json(pl.o)},
                            {"gives", {bits_of(pa, eval(pa, pl.o.acc, pl.o.sa, pl.o.sw, pl.o.bias)),
                                       bits_of(pb, eval(pb, pl.o.acc, pl.o.sa, pl.o.sw, pl.o.bias))}},
                            {"summary", fmt::format("separated in jurisdiction by acc={}, sa={:a}, sw={:a}: probed through "
                                                    "the arm as element [{},{}] of {}",
                                                    pl.o.acc, pl.o.sa, pl.o.sw, i, i, id)}});
        }
      }
    }
  }
  r_.separation = probed;
}

nlohmann::json Identifier::class_list() const {
  std::map<std::string, std::vector<const Candidate*>> classes;
  for (const Candidate& c : cands_) {
    if (c.alive) classes[c.key].push_back(&c);
  }
  nlohmann::json out = nlohmann::json::array();
  for (const auto& [key, members] : classes) {
    nlohmann::json ms = nlohmann::json::array();
    for (size_t i = 0; i < members.size() && i < 8; ++i) {
      const Candidate& m = *members[i];
      // Points whose notation is the same string differ only in an FMA flag with nothing to fuse.
      ms.push_back(m.notation + (m.main.fma && !m.dispatch && formula_notation(m.main) == formula_notation(FormulaPoint{
                                     m.main.conv, m.main.sa, m.main.sw, m.main.grouping, m.main.first, m.main.bias, false,
                                     m.main.rounding, m.main.out})
                                     ? "   [FMA flag: no add follows a multiply]"
                                     : ""));
    }
    auto it = named_by_key_.find(key);
    out.push_back({{"formula", members.front()->notation},
                   {"parameters", members.front()->dispatch ? nlohmann::json("shape dispatch") : describe_point(members.front()->main)},
                   {"key", key},
                   {"members", members.size()},
                   {"member_formulas", ms},
                   {"named", it == named_by_key_.end() ? nlohmann::json::array() : nlohmann::json(it->second)}});
  }
  return out;
}

void Identifier::describe_unexplained() {
  // The nearest candidates: fewest disagreements over everything each was compared on.
  std::vector<const Candidate*> order;
  for (const Candidate& c : cands_) order.push_back(&c);
  std::stable_sort(order.begin(), order.end(), [](const Candidate* a, const Candidate* b) {
    const double ra = static_cast<double>(a->mismatches) / std::max<int64_t>(a->compared, 1);
    const double rb = static_cast<double>(b->mismatches) / std::max<int64_t>(b->compared, 1);
    return ra < rb;
  });
  r_.nearest = nlohmann::json::array();
  r_.unexplained = nlohmann::json::array();
  nlohmann::json diag = nlohmann::json::array();
  int64_t acc_wrong = 0, acc_exposed = 0;
  std::vector<std::string> acc_first;
  for (const Observation& o : obs_) {
    acc_wrong += o.acc_wrong;
    acc_exposed += o.acc_exposed;
    for (const std::string& s : o.acc_first) {
      if (acc_first.size() < 3) acc_first.push_back(s);
    }
  }
  // The bias-free behaviour on its own: a point that explains every output without a bias, and
  // whether the arm's outputs with a bias are its outputs without one.
  const Candidate* plain = nullptr;
  for (const Candidate& c : cands_) {
    if (c.plain_alive && !plain) plain = &c;
  }
  if (plain) {
    auto it = named_by_key_.end();
    for (auto i = named_by_key_.begin(); i != named_by_key_.end(); ++i) {
      if (i->first.substr(0, i->first.find(" | ")) == plain->plain_key) it = i;
    }
    diag.push_back({{"kind", "without-bias"},
                    {"summary", fmt::format("without a bias every output is explained by {}{}; the unexplained outputs come "
                                            "with a bias",
                                            plain->notation,
                                            it == named_by_key_.end() ? std::string(" (no production formula of the table)")
                                                                      : fmt::format(" (as {})", fmt::join(it->second, ", ")))},
                    {"formula", plain->notation}});
    int64_t biased = 0, ignored = 0;
    for (const Observation& o : obs_) {
      if (o.bias.empty() || o.refused) continue;
      const FormulaPoint& p = plain->at(o.m, o.n);
      for (int64_t i = 0; i < o.m; ++i) {
        for (int64_t j = 0; j < o.n; ++j) {
          const size_t e = static_cast<size_t>(i * o.n + j);
          ++biased;
          ignored += eval(p, o.acc[e], o.sa[i], o.sw[j], std::nullopt) == o.y[e];
        }
      }
    }
    if (biased > 0 && ignored == biased) {
      diag.push_back({{"kind", "bias"},
                      {"summary", fmt::format("with a bias, all {} outputs equal that formula WITHOUT the bias: the arm "
                                              "ignores the bias it is given",
                                              biased)}});
    }
  }
  if (acc_wrong > 0) {
    diag.push_back({{"kind", "accumulator"},
                    {"summary", fmt::format("accumulator fault: {} of {} exposed INT32 accumulators differ from the exact dot "
                                            "products; the epilogue is not the first suspect",
                                            acc_wrong, acc_exposed)},
                    {"first", acc_first}});
  }
  // The residuals are analysed against the formula the arm declares, when it declares a point of
  // the space (a faulty kernel is best described against what it claims), else the nearest one.
  std::vector<const Candidate*> analysed(order.begin(), order.begin() + std::min<size_t>(3, order.size()));
  const Candidate* declared = nullptr;
  if (!r_.arm.epilogue.empty()) {
    try {
      if (const auto p = row_point(epilogue(r_.arm.epilogue)); p && !row_swap_point(epilogue(r_.arm.epilogue))) {
        for (const Candidate& c : cands_) {
          if (!c.dispatch && c.main == *p) declared = &c;
        }
      }
    } catch (const Error&) {
      declared = nullptr;  // a declaration that is no formula (verify reports it); nothing to analyse against
    }
  }
  if (declared && std::find(analysed.begin(), analysed.end(), declared) == analysed.end()) analysed.push_back(declared);
  const Candidate* primary = declared ? declared : analysed.front();
  // The first unexplained outputs: against the primary formula, or the nearest one where the
  // primary has none (a declared formula that refuses the bias the arm took).
  std::map<const Candidate*, nlohmann::json> firsts;
  for (size_t rank = 0; rank < analysed.size(); ++rank) {
    const Candidate& c = *analysed[rank];
    const bool is_primary = &c == primary;
    // Residual statistics over every observation the candidate explains or not, in its output's
    // ordered encoding (ulps of its output type).
    int64_t bad = 0, total = 0, bias_ignored = 0, other_column = 0, other_acc = 0, biased_bad = 0;
    std::map<int64_t, int64_t> hist;
    int64_t max_acc_delta = 0;
    for (const Observation& o : obs_) {
      if (o.refused) continue;
      if (!o.bias.empty() && c.refuses_bias()) continue;
      const FormulaPoint& p = c.at(o.m, o.n);
      for (int64_t i = 0; i < o.m; ++i) {
        for (int64_t j = 0; j < o.n; ++j) {
          const size_t e = static_cast<size_t>(i * o.n + j);
          const uint16_t want = eval(p, o.acc[e], o.sa[i], o.sw[j], o.bias_at(j));
          ++total;
          if (want == o.y[e]) continue;
          ++bad;
          const int64_t d = static_cast<int64_t>(bf16_ordered(o.y[e])) - bf16_ordered(want);
          ++hist[std::clamp<int64_t>(d, -4, 4)];
          if (!o.bias.empty()) {
            ++biased_bad;
            if (eval(p, o.acc[e], o.sa[i], o.sw[j], std::nullopt) == o.y[e]) ++bias_ignored;
          }
          for (int64_t dj : {int64_t{1}, o.n - 1}) {
            const int64_t j2 = (j + dj) % o.n;
            if (eval(p, o.acc[e], o.sa[i], o.sw[j2], o.bias_at(j)) == o.y[e]) {
              ++other_column;
              break;
            }
          }
          // The accumulator the output implies: outputs are monotone in acc (positive scales), so
          // bracket the observed output by doubling steps away from acc, then bisect.
          const auto ord = [&](int64_t x) { return bf16_ordered(eval(p, x, o.sa[i], o.sw[j], o.bias_at(j))); };
          const int32_t target = bf16_ordered(o.y[e]);
          const bool up = bf16_ordered(want) < target;
          int64_t near = o.acc[e], far = near;
          bool bracketed = false;
          for (int64_t step = 1; step < (int64_t{1} << 40); step *= 2) {
            far = up ? o.acc[e] + step : o.acc[e] - step;
            if (up ? ord(far) >= target : ord(far) <= target) {
              bracketed = true;
              break;
            }
            near = far;
          }
          if (bracketed) {
            int64_t lo = near, hi = far;  // the target lies past `lo` and is reached at `hi`
            while (std::llabs(hi - lo) > 1) {
              const int64_t mid = lo + (hi - lo) / 2;
              if (up ? ord(mid) >= target : ord(mid) <= target) {
                hi = mid;
              } else {
                lo = mid;
              }
            }
            if (ord(hi) == target) {
              ++other_acc;
              max_acc_delta = std::max<int64_t>(max_acc_delta, std::llabs(hi - o.acc[e]));
            }
          }
          nlohmann::json& first = firsts[&c];
          if (first.size() < 8) {
            first.push_back(
                {{"probe", o.id}, {"m", i}, {"n", j}, {"acc", o.acc[e]}, {"sa", fmt::format("{:a}", o.sa[i])},
                 {"sw", fmt::format("{:a}", o.sw[j])},
                 {"bias", o.bias.empty() ? std::string("none") : bits16(o.bias[j], Precision::bf16)},
                 {"got", bits16(o.y[e], p.out)}, {"formula_gives", bits16(want, p.out)}, {"ordered_difference", d}});
          }
        }
      }
    }
    nlohmann::json h = nlohmann::json::object();
    for (const auto& [d, count] : hist) h[d <= -4 ? "<=-4" : d >= 4 ? ">=4" : std::to_string(d)] = count;
    r_.nearest.push_back({{"formula", c.notation},
                          {"role", &c == declared ? (rank < 3 ? "nearest, declared" : "declared") : "nearest"},
                          {"outputs", total},
                          {"unexplained", bad},
                          {"unexplained_per_million", total ? 1e6 * static_cast<double>(bad) / static_cast<double>(total) : 0.0},
                          {"ordered_difference_histogram", h}});
    if (!is_primary || bad == 0) continue;
    // What the residuals of the nearest candidate look like.
    const bool have_bias_diag = std::any_of(diag.begin(), diag.end(), [](const nlohmann::json& d) { return d["kind"] == "bias"; });
    if (biased_bad > 0 && bias_ignored == biased_bad && !have_bias_diag) {
      diag.push_back({{"kind", "bias"},
                      {"summary", fmt::format("with a bias, all {} unexplained outputs equal the formula WITHOUT the bias: "
                                              "the arm ignores the bias it is given",
                                              biased_bad)}});
    }
    if (other_column == bad) {
      diag.push_back({{"kind", "scale"},
                      {"summary", fmt::format("every unexplained output ({}) is the formula with the weight scale of a "
                                              "neighbouring column: the weight scales are indexed wrongly",
                                              bad)}});
    }
    if (other_acc == bad && !(biased_bad > 0 && bias_ignored == biased_bad) && other_column != bad) {
      diag.push_back({{"kind", "accumulator"},
                      {"summary", fmt::format("every unexplained output ({}) is what the {} gives for another "
                                              "accumulator (|acc' - acc| up to {}): the residuals look like an accumulator "
                                              "fault rather than an epilogue",
                                              bad, declared ? "declared formula" : "nearest formula", max_acc_delta)}});
    }
    if (std::none_of(diag.begin(), diag.end(), [](const nlohmann::json& d) { return d["kind"] != "without-bias"; })) {
      const int64_t ones = (hist.count(1) ? hist[1] : 0) + (hist.count(-1) ? hist[-1] : 0);
      diag.push_back({{"kind", "epilogue"},
                      {"summary", fmt::format("no formula of the space explains the outputs; the {} differs in {} of {} "
                                              "outputs ({} of them by one ulp): epilogue arithmetic outside the space "
                                              "(another rounding step, precision or order), or a fault",
                                              declared ? "declared formula" : "nearest", bad, total, ones)}});
    }
  }
  r_.diagnosis = diag;
  r_.unexplained = firsts.count(primary) && !firsts[primary].empty() ? firsts[primary] : firsts[analysed.front()];
  if (r_.unexplained.is_null()) r_.unexplained = nlohmann::json::array();
}

void Identifier::conclude() {
  if (alive_classes(false) > 1) separate();
  std::set<std::string> keys;
  for (const Candidate& c : cands_) {
    if (c.alive) keys.insert(c.key);
  }
  int64_t acc_wrong = 0;
  for (const Observation& o : obs_) acc_wrong += o.acc_wrong;
  r_.candidates = {{"space", formula_space().size()},
                   {"named_dispatches", cands_.size() - formula_space().size()},
                   {"survivors", class_list()}};
  {
    std::set<std::string> all;
    for (const Candidate& c : cands_) all.insert(c.key);
    r_.candidates["classes"] = all.size();
  }
  if (acc_wrong > 0) {
    // The exposed accumulators are evidence about the arm's accumulation, not about which formula
    // turns its outputs out: reported with every verdict, decided by the outputs alone.
    std::vector<std::string> first;
    int64_t exposed = 0;
    for (const Observation& o : obs_) {
      exposed += o.acc_exposed;
      for (const std::string& f : o.acc_first) {
        if (first.size() < 3) first.push_back(f);
      }
    }
    r_.accumulator = {{"exposed", exposed}, {"differ", acc_wrong}, {"first", first}};
  }
  if (keys.size() == 1) {
    const Candidate* rep = nullptr;
    for (const Candidate& c : cands_) {
      if (c.alive && !rep) rep = &c;
    }
    r_.verdict = "identified";
    r_.formula = rep->notation;
    auto it = named_by_key_.find(rep->key);
    if (it != named_by_key_.end()) r_.named = it->second;
    r_.matching = r_.outputs;
    r_.reason = fmt::format("one equivalence class is left after {} probes and explains all {} held-out outputs", r_.probes.size(),
                            r_.outputs);
    return;
  }
  if (keys.size() > 1) {
    r_.verdict = "ambiguous";
    r_.matching = r_.outputs;
    int64_t outside = 0, unprobed = 0, none = 0, separation_probes = 0;
    for (const auto& e : r_.separation) {
      outside += e["separable"] == "outside jurisdiction";
      none += e["separable"] == "none found";
      unprobed += e["separable"] != "outside jurisdiction" && e["separable"] != "none found" && e["separable"] != "in jurisdiction: probed";
    }
    for (const auto& p : r_.probes) separation_probes += p["id"].get<std::string>().rfind("separate", 0) == 0;
    r_.reason = fmt::format(
        "{} classes agree on every probe ({} designed, {} built from separating operands) and every held-out output; "
        "of the pairs left, {} would be separated by an operand outside jurisdiction, {} by an operand in jurisdiction "
        "that no probe ran (below), {} by none the search found (different class keys prove no difference; equal "
        "outputs on every operand tried prove no equality: docs/identify.md, \"Verdicts\")",
        keys.size(), static_cast<int64_t>(r_.probes.size()) - separation_probes, separation_probes, outside, unprobed, none);
    return;
  }
  r_.verdict = "unexplained";
  describe_unexplained();
  if (!r_.nearest.empty()) {
    const auto& n0 = r_.nearest[0];
    r_.matching = 0;
    // The nearest candidate's explained share of the held-out outputs.
    const std::string f = n0["formula"].get<std::string>();
    for (const Candidate& c : cands_) {
      if (c.notation != f) continue;
      for (const Observation& o : obs_) {
        if (o.heldout) r_.matching += o.size() - disagreements(c, o);
      }
      break;
    }
  }
  r_.reason = "no candidate of the formula space explains every output";
}

// FP8: the accumulation part of the formula is the model `boundary` measures (one prober, in
// c1_fp8_model.cpp); the epilogue part is the declared `fp8-scaled`, which is not probed.
void Identifier::identify_fp8() {
  Fp8MeasureOptions mo;
  mo.seed = options_.seed;
  const Fp8Measurement m = measure_fp8_accumulation(arm_, mo);
  r_.fp8_accumulation = to_json(m);
  r_.fp8_accumulation.erase("probes");  // the printout and --json of boundary carry them
  r_.record.arm = m.arm.label;
  r_.record.kernel = m.record.value("kernel", std::string());
  r_.record.device = m.record.value("device", std::string());
  if (m.record.contains("extra")) r_.record.extra = m.record.at("extra");
  r_.outputs = m.confirm_outputs;
  r_.matching = m.measured ? m.confirm_matching : 0;
  for (const Fp8Probe& p : m.probes) {
    r_.probes.push_back({{"id", p.id}, {"family", p.family}, {"k", p.k}, {"observed", fmt::format("{:a}", p.observed)}});
  }
  nlohmann::json members = nlohmann::json::array();
  for (const Fp8AccumModel& e : m.equivalent) members.push_back(accumulation_formula(e));
  const std::string epi = std::string(fp8_epilogue().name);
  r_.candidates = {{"space", "fp8 accumulation models (docs/accumulation.md)"},
                   {"tried", m.candidates_tried},
                   {"classes", m.measured ? 1 : 0},
                   {"survivors", m.measured ? nlohmann::json::array({{{"formula", accumulation_formula(m.model)},
                                                                      {"members", m.equivalent.size()},
                                                                      {"member_formulas", members}}})
                                            : nlohmann::json::array()}};
  if (m.measured && m.confirm_matching == m.confirm_outputs) {
    r_.verdict = "identified";
    r_.formula = fmt::format("accumulation: {}; epilogue: {} (declared, not probed)", accumulation_formula(m.model), epi);
    if (!m.model_name.empty()) r_.named.push_back(m.model_name);
    for (size_t i = 1; i < m.equivalent.size(); ++i) {
      const std::string n = named_model_of(m.equivalent[i]);
      if (!n.empty()) r_.named.push_back(n);
    }
    r_.reason = fmt::format("the accumulation model measured by {} designed probes explains all {} held-out outputs "
                            "(random e4m3 operands) bit for bit; against the declaration: {}",
                            m.probes.size(), r_.outputs, m.verdict);
    return;
  }
  r_.verdict = "unexplained";
  r_.reason = m.reason;
  if (!m.contradiction.empty()) r_.nearest = nlohmann::json::array({m.contradiction});
  for (const auto& row : m.confirmation) {
    if (row.contains("first_mismatch")) r_.unexplained.push_back(row);
  }
}

IdentifyResult Identifier::run() {
  const auto t0 = std::chrono::steady_clock::now();
  r_.arm = arm_.info();
  r_.outputs = 0;
  if (is_block_model_name(r_.arm.accumulation_model)) {
    // Block-scaled FP8: the block model (chain, K block, promotion form) is measured by `boundary`
    // (measure_block_model, src/checks/c1_block_model.hpp); identify's formula space does not hold it yet.
    r_.verdict = "not-supported";
    r_.reason = fmt::format("identify: arm {} is a block-scaled FP8 arm (block model {}); identifying a block model is "
                            "not implemented in identify: `qconform boundary --arm {}` measures its chain, K block and "
                            "promotion form",
                            r_.arm.label, r_.arm.accumulation_model, r_.arm.label);
    return r_;
  }
  if (!r_.arm.accumulation_model.empty()) {
    identify_fp8();
    r_.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return r_;
  }
  const std::string lower = r_.arm.label;
  if (lower.find("fp8") != std::string::npos || r_.arm.epilogue == "fp8-scaled") {
    r_.verdict = "not-supported";
    r_.reason = fmt::format("identify: arm {} looks like an FP8 arm but declares no accumulation model "
                            "(ArmInfo::accumulation_model), so it has no fp8_accumulate to measure",
                            r_.arm.label);
    return r_;
  }
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
  r_.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r_;
}

}  // namespace

IdentifyResult identify(Arm& arm, const IdentifyOptions& options) { return Identifier(arm, options).run(); }

nlohmann::json to_json(const IdentifyResult& r) {
  return {{"kind", "qconform-identify"},
          {"schema_version", 1},
          {"arm", {{"label", r.arm.label}, {"declared_epilogue", r.arm.epilogue}, {"record", r.record}}},
          {"verdict", r.verdict},
          {"formula", r.formula},
          {"named", r.named},
          {"reason", r.reason},
          {"explained", {{"outputs", r.outputs}, {"matching", r.matching}}},
          {"candidates", r.candidates},
          {"probes", r.probes},
          {"nearest", r.nearest},
          {"unexplained", r.unexplained},
          {"diagnosis", r.diagnosis},
          {"separation", r.separation},
          {"accumulator", r.accumulator},
          {"fp8_accumulation", r.fp8_accumulation},
          {"seconds", r.seconds}};
}

std::string describe(const IdentifyResult& r) {
  std::string s = fmt::format("identify {} (declares {})\n", r.arm.label, r.arm.epilogue.empty() ? "nothing" : r.arm.epilogue);
  if (r.verdict == "not-supported") return s + r.reason + "\n";
  if (!r.fp8_accumulation.is_null()) {
    const auto& f = r.fp8_accumulation;
    s += fmt::format("\nFP8 arm: the accumulation model measured with {} designed probes through fp8_accumulate "
                     "({} parameter sets tried; `qconform boundary --arm {}` prints the evidence per parameter)\n",
                     r.probes.size(), f["candidates_tried"].get<int64_t>(), r.arm.label);
    for (const auto& n : f["split_k_runs"]) s += fmt::format("NOTE: the arm's record says split-K: {}\n", n.get<std::string>());
    s += fmt::format("\nverdict: {}\n", r.verdict);
    if (r.verdict == "identified") {
      s += fmt::format("formula: {}\n", r.formula);
      s += fmt::format("named:   {}\n", r.named.empty() ? std::string("none (not a named accumulation model)")
                                                        : fmt::format("{}", fmt::join(r.named, ", ")));
      const auto& cls = r.candidates["survivors"][0];
      if (cls["members"].get<size_t>() > 1) {
        s += fmt::format("class:   {} parameter sets explain every probe, e.g.\n", cls["members"].get<size_t>());
        for (size_t i = 1; i < cls["member_formulas"].size() && i < 6; ++i) {
          s += fmt::format("           {}\n", cls["member_formulas"][i].get<std::string>());
        }
      }
      s += fmt::format("declared: {} ({})\n", f["declared"].get<std::string>(), f["verdict"].get<std::string>());
    }
    s += fmt::format("{}\nheld-out: {} of {} outputs explained\n({:.1f} s)\n", r.reason, r.matching, r.outputs, r.seconds);
    return s;
  }
  s += fmt::format("\nprobes ({} designed, then held-out synth operands):\n", r.probes.size());
  for (const auto& p : r.probes) {
    s += fmt::format("  {:<22} {:>3}x{}x{:<6} {:>6} elements  {}{:>5} eliminated, {:>5} candidates in {:>4} classes left\n",
                     p["id"].get<std::string>(), p["m"].get<int64_t>(), p["n"].get<int64_t>(), p["k"].get<int64_t>(),
                     p["elements"].get<int64_t>(), p["refused"].get<bool>() ? "REFUSED (no bias) " : "",
                     p["eliminated"].get<int64_t>(), p["candidates_left"].get<int64_t>(), p["classes_left"].get<size_t>());
  }
  s += fmt::format("  held-out: {} outputs\n\nverdict: {}\n", r.outputs, r.verdict);
  if (!r.accumulator.empty()) {
    s += fmt::format("WARNING: {} of {} exposed INT32 accumulators differ from the exact dot products (the outputs "
                     "are judged on their own; C4 would fail):\n",
                     r.accumulator["differ"].get<int64_t>(), r.accumulator["exposed"].get<int64_t>());
    for (const auto& f : r.accumulator["first"]) s += fmt::format("  {}\n", f.get<std::string>());
  }
  if (r.verdict == "identified") {
    s += fmt::format("formula: {}\n", r.formula);
    s += fmt::format("named:   {}\n", r.named.empty() ? std::string("none (not a production formula of the table)")
                                                      : fmt::format("{}", fmt::join(r.named, ", ")));
    const auto& cls = r.candidates["survivors"][0];
    if (cls["members"].get<size_t>() > 1) {
      s += fmt::format("class:   {} equivalent points (same output for every operand in jurisdiction), e.g.\n", cls["members"].get<size_t>());
      for (const auto& f : cls["member_formulas"]) s += fmt::format("           {}\n", f.get<std::string>());
    }
    s += fmt::format("held-out: {} of {} outputs explained\n", r.matching, r.outputs);
    if (!r.separation.empty()) {
      s += fmt::format("separated after the designed probes ({} pair(s) of classes, by operands in jurisdiction):\n", r.separation.size());
      for (const auto& e : r.separation) s += fmt::format("  {}\n", e["summary"].get<std::string>());
    }
  } else if (r.verdict == "ambiguous") {
    s += r.reason + "\n";
    for (const auto& c : r.candidates["survivors"]) {
      s += fmt::format("  class ({} points): {}\n", c["members"].get<size_t>(), c["formula"].get<std::string>());
    }
    s += "pairs of classes:\n";
    for (const auto& e : r.separation) {
      s += fmt::format("  {}\n    vs {}\n    {}\n", e["a"].get<std::string>(), e["b"].get<std::string>(),
                       e["summary"].get<std::string>());
    }
  } else {
    s += r.reason + "\n";
    for (const auto& d : r.diagnosis) s += fmt::format("  {}: {}\n", d["kind"].get<std::string>(), d["summary"].get<std::string>());
    for (const auto& d : r.diagnosis) {
      if (d.contains("first")) {
        for (const auto& f : d["first"]) s += fmt::format("    {}\n", f.get<std::string>());
      }
    }
    s += "nearest candidates:\n";
    for (const auto& n : r.nearest) {
      s += fmt::format("  [{}] {} unexplained of {} ({:.1f} per million), ordered differences {}: {}\n",
                       n["role"].get<std::string>(), n["unexplained"].get<int64_t>(),
                       n["outputs"].get<int64_t>(), n["unexplained_per_million"].get<double>(),
                       n["ordered_difference_histogram"].dump(), n["formula"].get<std::string>());
    }
    s += fmt::format("first unexplained outputs (against the {}):\n",
                     r.arm.epilogue.empty() ? "nearest candidate" : "declared formula where it is a point, else the nearest");
    for (const auto& u : r.unexplained) {
      s += fmt::format("  {} [{},{}] acc={} sa={} sw={} bias={}: got {}, formula gives {}\n", u["probe"].get<std::string>(),
                       u["m"].get<int64_t>(), u["n"].get<int64_t>(), u["acc"].get<int64_t>(), u["sa"].get<std::string>(),
                       u["sw"].get<std::string>(), u["bias"].get<std::string>(), u["got"].get<std::string>(),
                       u["formula_gives"].get<std::string>());
    }
  }
  s += fmt::format("({:.1f} s)\n", r.seconds);
  return s;
}

std::string identified_declaration(const IdentifyResult& r) {
  if (r.verdict != "identified") return "";
  return r.named.empty() ? r.formula : r.named.front();
}

std::string identify_provenance(const IdentifyResult& r) {
  return fmt::format("identified by qconform identify, {} probes, held-out {}/{}", r.probes.size(), r.matching, r.outputs);
}

nlohmann::json identify_summary(const IdentifyResult& r) {
  nlohmann::json j = {{"source", "identify"},
                      {"verdict", r.verdict},
                      {"formula", r.formula},
                      {"named", r.named},
                      {"declared", identified_declaration(r)},
                      {"probes", r.probes.size()},
                      {"heldout", {{"outputs", r.outputs}, {"matching", r.matching}}},
                      {"reason", r.reason},
                      {"seconds", r.seconds}};
  if (r.verdict == "identified") j["provenance"] = identify_provenance(r);
  if (r.verdict == "ambiguous") {
    nlohmann::json classes = nlohmann::json::array();
    for (const auto& c : r.candidates["survivors"]) classes.push_back(c["formula"]);
    j["survivors"] = classes;
  }
  if (!r.separation.empty()) j["separation"] = r.separation;
  if (r.verdict == "unexplained") {
    j["diagnosis"] = r.diagnosis;
    if (!r.nearest.empty()) j["nearest"] = r.nearest[0];
  }
  if (!r.accumulator.empty()) j["accumulator"] = r.accumulator;
  return j;
}

}  // namespace qc
