// identify's probe design (docs/identify.md, "The probes"): the int8 operands of a probe whose
// exact accumulators the design chose, the accumulators worth trying, the bisection that finds the
// rare accumulators separating two classes, the design of one probe round, the jurisdiction of an
// operand read from the formula itself, and the search for an operand separating two classes.
//
// Every probe is a layer whose accumulators, scales and bias the probe chooses: sa per row, sw and
// bias per column, and for each element the accumulator that splits the surviving classes best
// (among accumulators near powers of two and random ones of every magnitude). The int8 operands
// that produce those accumulators are built digit by digit (`build_probe`), with the last digits in
// the final partial K tile, so that the arm computes exactly the accumulators the design chose
// through its own code path.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "accum/fp8_model.hpp"
#include "checks/identify_internal.hpp"
#include "epilogue/formula_space.hpp"
#include "qconform/error.hpp"

namespace qc::identify_detail {

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

float Rng::scale(int lo, int hi) {
  const float sig = f32_from_bits(0x3F800000u | static_cast<uint32_t>(next() & 0x7FFFFFu));
  return std::ldexp(sig, lo + static_cast<int>(below(hi - lo)));
}

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
                                      std::optional<uint16_t> bias, Rng& rng, int64_t limit, int binades) {
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
namespace {
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
  bool fp32 = false;  // an FP8 GEMM's `d` instead of an integer
  float d = 0;
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
  const Precision p = c == AccConversion::bf16_rn || c == AccConversion::bf16_via_f32 ? Precision::bf16
                      : c == AccConversion::f16_rn || c == AccConversion::f16_via_f32 ? Precision::f16
                                                                                    : Precision::f32;
  if (a.fp32) return checked(formula::convert_acc(c, a.d), p, a.notes, "the converted accumulator", a.d);
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
}  // namespace

// Why `o` is outside jurisdiction for point `p` (empty: inside), `acc_bits` the accumulator bound.
std::vector<std::string> outside_jurisdiction(const FormulaPoint& p, const Operand& o, int acc_bits) {
  juris::Notes n;
  const bool fp32 = p.input == FormulaInput::fp32;
  const int64_t bound = acc_bits >= 31 ? int64_t{INT32_MAX} : int64_t{1} << acc_bits;
  if (!fp32 && (o.acc > bound || o.acc < -bound - (acc_bits >= 31 ? 1 : 0))) {
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
  const juris::J y = formula::apply_point(p, juris::JAcc{o.acc, &n, fp32, o.d}, juris::J{o.sa, &n}, juris::J{o.sw, &n},
                                          o.bias.has_value(), juris::J{o.bias ? bf16_to_f32(*o.bias) : 0.0f, &n});
  QC_CHECK(y.bits == eval(p, o), "identify: the jurisdiction reading of {} gives 0x{:04x}, the point 0x{:04x}",
           formula_notation(p), y.bits, eval(p, o));
  return n.list;
}

// ---- FP8 probes ---------------------------------------------------------------------------------

namespace {
// Term j's weight code, 2^(8 - 4j), and its position in column n.
uint8_t fp8_weight_code(int j) { return f32_to_e4m3fn(std::ldexp(1.0f, 8 - 4 * j), false); }
int64_t fp8_position(int j, int64_t n) { return j * kFp8Block + n; }
}  // namespace

LayerOperands build_fp8_probe(const ProbeSpec& s, const std::string& name) {
  OperandStorage st;
  st.a_q.assign(static_cast<size_t>(s.m * kFp8K), 0);
  st.w_q.assign(static_cast<size_t>(kCols * kFp8K), 0);
  for (int64_t n = 0; n < kCols; ++n) {
    for (int j = 0; j < kFp8Terms; ++j) {
      st.w_q[static_cast<size_t>(n * kFp8K + fp8_position(j, n))] = static_cast<int8_t>(fp8_weight_code(j));
    }
  }
  for (int64_t m = 0; m < s.m; ++m) {
    for (int64_t n = 0; n < kCols; ++n) {
      const Fp8Recipe& r = s.recipes[static_cast<size_t>(m * kCols + n)];
      for (int j = 0; j < kFp8Terms; ++j) st.a_q[static_cast<size_t>(m * kFp8K + fp8_position(j, n))] = static_cast<int8_t>(r[j]);
    }
  }
  st.a_scale = s.sa;
  st.w_scale = s.sw;
  st.bias = s.bias;
  st.a_type = st.w_type = ElementType::e4m3;
  return make_operands(name, s.m, kCols, kFp8K, std::move(st), "identify FP8 epilogue probe");
}

float fp8_recipe_d(const Fp8AccumModel& m, const Fp8Recipe& recipe, int64_t n) {
  std::vector<uint8_t> a(static_cast<size_t>(kFp8K), 0), w(static_cast<size_t>(kFp8K), 0);
  for (int j = 0; j < kFp8Terms; ++j) {
    a[static_cast<size_t>(fp8_position(j, n))] = recipe[j];
    w[static_cast<size_t>(fp8_position(j, n))] = fp8_weight_code(j);
  }
  return accum_model::evaluate(m, a.data(), Fp8Format::e4m3, w.data(), Fp8Format::e4m3, kFp8K);
}

// An element whose terms are the nibbles of a 20-bit significand `sig` (the top one 8..15), term j
// = nibble_j * 2^(t + 5 - 4j): t in [-6, 4] keeps every a code a normal or subnormal e4m3 value; `d`
// is what the measured model makes of them in column `n`.
Operand Identifier::fp8_operand(int64_t sig, int t, bool neg, int64_t n) const {
  Operand o;
  for (int j = 0; j < kFp8Terms; ++j) {
    const int64_t digit = (sig >> (4 * (kFp8Terms - 1 - j))) & 15;
    const float a = static_cast<float>(std::ldexp(static_cast<double>(digit), t - 3));
    o.recipe[j] = digit == 0 ? 0 : static_cast<uint8_t>(f32_to_e4m3fn(neg ? -a : a, false));
  }
  o.d = fp8_recipe_d(model_, o.recipe, n);
  return o;
}

// A random element: a random significand whose low nibbles may be zero (d of 4 to 20 bits).
Operand Identifier::random_fp8_operand(int64_t n) {
  const int t = -6 + static_cast<int>(rng_.below(11));
  const bool neg = rng_.below(4) == 0;
  const int used = 1 + static_cast<int>(rng_.below(kFp8Terms));
  int64_t sig = 8 + rng_.below(8);
  for (int j = 1; j < kFp8Terms; ++j) sig = sig * 16 + (j < used ? rng_.below(16) : 0);
  return fp8_operand(sig, t, neg, n);
}

// The FP8 counterpart of `separating_acc`: the output of `a` is a monotone step function of the
// significand of d (the models are monotone), so bisection between two significands of one binade
// finds adjacent ones where `a` steps; `b` rarely steps at the same place unless the two agree
// there. This finds the rare elements random ones miss, e.g. two scale orders one fp32 ulp apart
// that only a bf16 midpoint tells apart. Scales and bias as in `base`.
std::optional<Operand> Identifier::separating_fp8(const FormulaPoint& a, const FormulaPoint& b, const Operand& base,
                                                 int64_t n) {
  constexpr int64_t kTop = int64_t{1} << (4 * kFp8Terms);  // significands in [kTop/2, kTop)
  for (int attempt = 0; attempt < 4; ++attempt) {
    const int t = -6 + static_cast<int>(rng_.below(11));
    const bool neg = rng_.below(4) == 0;
    const auto at = [&](int64_t sig) {
      Operand o = fp8_operand(sig, t, neg, n);
      o.sa = base.sa;
      o.sw = base.sw;
      o.bias = base.bias;
      return o;
    };
    int64_t lo = kTop / 2 + rng_.below(kTop / 2), hi = kTop - 1;
    if (eval(a, at(lo)) == eval(a, at(hi))) continue;
    while (hi - lo > 1) {
      const int64_t mid = lo + (hi - lo) / 2;
      if (eval(a, at(mid)) == eval(a, at(lo))) {
        lo = mid;
      } else {
        hi = mid;
      }
    }
    for (int64_t sig : {lo, hi}) {
      const Operand o = at(sig);
      if (eval(a, o) != eval(b, o)) return o;
    }
  }
  return std::nullopt;
}

LayerOperands Identifier::build(const ProbeSpec& spec, const std::string& name) const {
  return input_ == FormulaInput::fp32 ? build_fp8_probe(spec, name) : build_probe(spec, name);
}

int64_t Identifier::probe_limit() const { return int64_t{1} << std::clamp(options_.probe_acc_bits, 8, 40); }

std::vector<Operand> Identifier::element_tries(const std::vector<const Candidate*>& reps, int64_t m, int64_t n, float sa,
                                               float sw, std::optional<uint16_t> bias) {
  std::vector<Operand> tries;
  const auto with_scales = [&](Operand o) {
    o.sa = sa;
    o.sw = sw;
    o.bias = bias;
    return o;
  };
  const auto random_pair = [&]() -> std::pair<const Candidate*, const Candidate*> {
    const Candidate* a = reps[static_cast<size_t>(rng_.below(static_cast<int64_t>(reps.size())))];
    const Candidate* b = reps[static_cast<size_t>(rng_.below(static_cast<int64_t>(reps.size())))];
    return {a, b};
  };
  if (input_ == FormulaInput::fp32) {
    // FP8: random elements, and for random pairs of classes the first of a few that separates them.
    for (int t = 0; t < kTries; ++t) tries.push_back(with_scales(random_fp8_operand(n)));
    for (int t = 0; t < kPairTries && reps.size() > 1; ++t) {
      const auto [a, b] = random_pair();
      if (a == b) continue;
      if (auto o = separating_fp8(a->at(m, kCols), b->at(m, kCols), with_scales(Operand{}), n)) tries.push_back(*o);
    }
    return tries;
  }
  // INT8: random accumulators, and ones built to separate a random pair of classes.
  for (int t = 0; t < kTries; ++t) {
    Operand o = with_scales(Operand{});
    o.acc = try_acc(rng_, probe_limit());
    tries.push_back(o);
  }
  for (int t = 0; t < kPairTries && reps.size() > 1; ++t) {
    const auto [a, b] = random_pair();
    if (a == b) continue;
    if (const auto acc = separating_acc(a->at(m, kCols), b->at(m, kCols), sa, sw, bias, rng_, probe_limit())) {
      Operand o = with_scales(Operand{});
      o.acc = *acc;
      tries.push_back(o);
    }
  }
  return tries;
}

ProbeSpec Identifier::design(int64_t m, bool with_bias, bool plain, int64_t* score) {
  const std::vector<const Candidate*> reps = representatives(plain);
  const bool fp8 = input_ == FormulaInput::fp32;
  ProbeSpec s;
  s.m = m;
  // INT8 accumulators reach 2^26, FP8 `d`s 2^16: the scales keep the outputs of both in bf16's and fp16's normal range.
  for (int64_t i = 0; i < m; ++i) s.sa.push_back(fp8 ? rng_.scale(-6, -2) : rng_.scale(-9, -3));
  for (int64_t n = 0; n < kCols; ++n) s.sw.push_back(fp8 ? rng_.scale(-6, -2) : rng_.scale(-12, -5));
  if (with_bias) {
    // Biases near the size of the outputs (2^-10 to 2^3 of them) put the add's rounding in play.
    for (int64_t n = 0; n < kCols; ++n) {
      const double typical = fp8 ? std::ldexp(1.0, 2 + static_cast<int>(rng_.below(10))) * s.sw[static_cast<size_t>(n)] * 0x1p-4
                                 : std::ldexp(1.0, 10 + static_cast<int>(rng_.below(10))) * s.sw[static_cast<size_t>(n)] * 0x1p-6;
      const float b = static_cast<float>(std::ldexp(typical * (1.0 + rng_.uniform()), -10 + static_cast<int>(rng_.below(14))));
      s.bias.push_back(f32_to_bf16(rng_.below(3) == 0 ? -b : b));
    }
  }
  *score = 0;
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t n = 0; n < kCols; ++n) {
      const float sa = s.sa[static_cast<size_t>(i)], sw = s.sw[static_cast<size_t>(n)];
      const std::optional<uint16_t> bias = with_bias ? std::optional<uint16_t>(s.bias[static_cast<size_t>(n)]) : std::nullopt;
      const std::vector<Operand> tries = element_tries(reps, m, n, sa, sw, bias);
      size_t best = 0;
      int64_t best_score = -1;
      for (size_t t = 0; t < tries.size() && reps.size() > 1; ++t) {
        std::map<uint16_t, int64_t> groups;
        for (const Candidate* c : reps) ++groups[eval(c->at(m, kCols), tries[t])];
        // Pairs of representatives this accumulator separates.
        const int64_t r = static_cast<int64_t>(reps.size());
        int64_t same = 0;
        for (const auto& [v, g] : groups) same += g * g;
        const int64_t sc = (r * r - same) / 2;
        if (sc > best_score) {
          best_score = sc;
          best = t;
        }
      }
      *score += std::max<int64_t>(best_score, 0);
      s.target.push_back(tries[best].acc);
      s.recipes.push_back(tries[best].recipe);
    }
  }
  return s;
}

// One operand the separator search tries for points `pa`, `pb` (try `t` of kSeparationTries), one
// they give different outputs on, or nullopt. Outside jurisdiction, the first half stays near it
// (the scales of the search inside, the accumulator up to 2^9 past the bound), so that the operand
// reported is as ordinary as can be; the second half goes anywhere.
std::optional<Operand> Identifier::separator_try(const FormulaPoint& pa, const FormulaPoint& pb, bool bias_ok, bool inside,
                                                 int t) {
  const bool near = inside || t < kSeparationTries / 2;
  const bool fp8 = input_ == FormulaInput::fp32;
  const int jbits = std::clamp(options_.jurisdiction_acc_bits, 8, 31);
  const int acc_bits = inside ? std::min(jbits >= 31 ? 30 : jbits, kSeparationAccBits) : near ? std::min(jbits + 9, 40) : 40;
  const int64_t acc_max = int64_t{1} << acc_bits;
  // FP8: a random element (in column 0 of the layout); INT8: an accumulator near a power of two or of any magnitude.
  Operand o = fp8 ? random_fp8_operand(0) : Operand{};
  const int lo = fp8 ? -12 : -24, hi = fp8 ? 2 : 6;
  o.sa = near ? rng_.scale(lo, hi) : rng_.scale(-150, 100);
  o.sw = near ? rng_.scale(lo, hi) : rng_.scale(-150, 100);
  if (bias_ok && rng_.below(2) == 0) {
    // A bias near the output's size puts the add's rounding in play.
    const double y = fp8 ? std::fabs(static_cast<double>(o.d)) * o.sa * o.sw
                         : std::ldexp(1.0, static_cast<int>(rng_.below(acc_bits))) * o.sa * o.sw;
    const float bv = static_cast<float>(std::ldexp(y * (1.0 + rng_.uniform()), -10 + static_cast<int>(rng_.below(14))));
    o.bias = f32_to_bf16(rng_.below(3) == 0 ? -bv : bv);
  }
  if (!fp8) {
    if (rng_.below(3) == 0) {
      o.acc = (int64_t{1} << (1 + rng_.below(acc_bits - 1))) + rng_.below(7) - 3;
    } else {
      o.acc = static_cast<int64_t>(std::ldexp(1.0, static_cast<int>(rng_.below(acc_bits))) * (1.0 + rng_.uniform()));
    }
    o.acc = std::min(o.acc, acc_max);
    if (rng_.below(4) == 0) o.acc = -o.acc;
  }
  if (eval(pa, o) != eval(pb, o)) return o;
  // Bisection on the output steps of `a` finds the rare operands where `b` steps elsewhere.
  if (fp8) return separating_fp8(pa, pb, o, 0);
  const auto acc = separating_acc(pa, pb, o.sa, o.sw, o.bias, rng_, acc_max, acc_bits - 3);
  if (!acc) return std::nullopt;
  o.acc = *acc;
  return o;
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
    const std::optional<Operand> o = separator_try(pa, pb, bias_ok, inside, t);
    if (!o) continue;
    std::vector<std::string> why = outside_jurisdiction(pa, *o, jbits);
    for (std::string& w : outside_jurisdiction(pb, *o, jbits)) {
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

}  // namespace qc::identify_detail
