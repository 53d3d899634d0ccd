// The designed probes of an FP8 arm's accumulation-model measurement (c1_fp8_model.hpp,
// docs/accumulation.md "Measuring an arm's model"): fixed designs of a few nonzero terms each
// (../shared/reference/fp8-accumulation.md), and their readable variants for an arm measured
// through its bf16 output (`readable_variants`).
#include "checks/c1_fp8_probes.hpp"

#include <fmt/format.h>

#include <cmath>
#include <optional>
#include <random>
#include <set>
#include <tuple>

#include "qconform/error.hpp"
#include "qconform/numerics.hpp"

namespace qc {

namespace {

// The e4m3fn code of an exactly representable value (QC_CHECK otherwise: a design error).
uint8_t code_of(double v) {
  const uint8_t c = f32_to_e4m3fn(static_cast<float>(v), false);
  QC_CHECK(accum_model::fp8_code_finite(c, Fp8Format::e4m3) && static_cast<double>(e4m3fn_to_f32(c)) == v,
           "fp8 probe design: {} is not an e4m3fn value", v);
  return c;
}

// A pair of codes whose product is exactly v (both normal where possible), or nullopt.
std::optional<std::pair<uint8_t, uint8_t>> factor(double v) {
  std::optional<std::pair<uint8_t, uint8_t>> best;
  int best_rank = 99;
  const uint8_t sign = v < 0 ? 0x80 : 0;
  const double u = std::fabs(v);
  for (int a = 1; a < 0x7F; ++a) {
    const double av = e4m3fn_to_f32(static_cast<uint8_t>(a));
    const double wv = u / av;
    if (wv > 448.0 || wv < 0x1p-9) continue;
    const uint8_t wc = f32_to_e4m3fn(static_cast<float>(wv), false);
    if (!accum_model::fp8_code_finite(wc, Fp8Format::e4m3) || static_cast<double>(e4m3fn_to_f32(wc)) * av != u) {
      continue;
    }
    // Prefer normal codes (the alignment exponent is then floor(log2)), then a power-of-two w.
    const int rank = ((a >> 3) == 0) * 4 + ((wc >> 3) == 0) * 4 + ((wc & 7) != 0);
    if (rank < best_rank) {
      best_rank = rank;
      best = std::make_pair(static_cast<uint8_t>(a | sign), wc);
    }
  }
  return best;
}

struct Designer {
  std::vector<Fp8Probe> probes;

  bool add(std::string id, std::string family, int64_t k, const std::vector<std::pair<int64_t, double>>& terms) {
    Fp8Probe p;
    p.id = std::move(id);
    p.family = std::move(family);
    p.k = k;
    for (const auto& [pos, v] : terms) {
      const auto f = factor(v);
      if (!f) return false;  // no pair of e4m3 codes has this product: the design skips it
      p.terms.push_back({pos, f->first, f->second});
    }
    probes.push_back(std::move(p));
    return true;
  }
  void add_terms(std::string id, std::string family, int64_t k, std::vector<Fp8Probe::Term> terms) {
    Fp8Probe p;
    p.id = std::move(id);
    p.family = std::move(family);
    p.k = k;
    p.terms = std::move(terms);
    probes.push_back(std::move(p));
  }
  void add_pair(std::string id, std::string family, int64_t k, const std::vector<std::tuple<int64_t, double, double>>& t) {
    Fp8Probe p;
    p.id = std::move(id);
    p.family = std::move(family);
    p.k = k;
    for (const auto& [pos, a, w] : t) p.terms.push_back({pos, code_of(a), code_of(w)});
    probes.push_back(std::move(p));
  }
};

constexpr int64_t kLongK = kFp8LongK;
constexpr int64_t kStepK = 128;
constexpr int64_t kShortK = 16;

// The short probes (K = 16 and 128): kept bits, cancellation, alignment, steps.
void design_short_probes(Designer& d) {
  const double mants[] = {1.0, 1.125, 1.5, 1.75, 1.875};
  // Short probes first: they are the cheapest to evaluate and eliminate most parameter sets.
  // kept-bits: 2^16 (256·256) then ±m·2^(16-b) (and the reverse order, and two equal small
  // terms): the bits a step keeps below its largest term, and whether it truncates (rz) or rounds
  // (rn); m = 1.125 next to a half ulp tells a rounded term from an exact one (double rounding).
  const double big = 65536.0;
  for (int b = 4; b <= 30; ++b) {
    for (double m : mants) {
      const double s = m * std::ldexp(1.0, 16 - b);
      for (int sign : {1, -1}) {
        d.add(fmt::format("kept-bits/2^16{}{}*2^{}", sign > 0 ? "+" : "-", m, 16 - b), "kept-bits", kShortK,
              {{0, big}, {1, sign * s}});
      }
      d.add(fmt::format("kept-bits/{}*2^{}+2^16", m, 16 - b), "kept-bits", kShortK, {{0, s}, {1, big}});
      if (m == 1.5 || m == 1.0) {
        d.add(fmt::format("kept-bits/2^16+2x{}*2^{}", m, 16 - b), "kept-bits", kShortK, {{0, big}, {1, s}, {2, s}});
        d.add(fmt::format("kept-bits/-2^16+2x{}*2^{}", m, 16 - b), "kept-bits", kShortK, {{0, -big}, {1, s}, {2, s}});
      }
    }
  }
  // cancel: 2^16 - B' leaves a small sum whose own exponent is below E = 16: the terms are rounded
  // relative to E, the result relative to its own exponent, so term and result bits separate.
  for (double bp : {32768.0, 49152.0, 57344.0, 61440.0}) {
    for (int b = 8; b <= 30; ++b) {
      for (double m : {1.0, 1.5, 1.75}) {
        const double s = m * std::ldexp(1.0, 16 - b);
        d.add(fmt::format("cancel/2^16-{}+{}*2^{}", bp, m, 16 - b), "cancel", kShortK, {{0, big}, {1, -bp}, {2, s}});
        if (m == 1.5) {
          d.add(fmt::format("cancel/{}*2^{}+2^16-{}", m, 16 - b, bp), "cancel", kShortK, {{0, s}, {1, big}, {2, -bp}});
        }
      }
    }
  }
  // alignment: a product of two mantissas >= sqrt(2) lies one binade above e(a)+e(b); a small term
  // next to it is rounded to 2^(e(a)+e(b)-bits) (exponent-sum rule) or to 2^(floor(log2|ab|)-bits).
  for (double m : {1.5, 1.75, 1.875}) {
    for (int b = 6; b <= 18; ++b) {
      for (double sm : {1.0, 1.5}) {
        const auto f = factor(sm * std::ldexp(1.0, -b));
        if (!f) continue;
        const Fp8Probe::Term big{0, code_of(m), code_of(m)};
        d.add_terms(fmt::format("alignment/{}^2+{}*2^-{}", m, sm, b), "alignment", kShortK,
                    {big, {1, f->first, f->second}});
        d.add_terms(fmt::format("alignment/{}*2^-{}+{}^2", sm, b, m), "alignment", kShortK,
                    {{0, f->first, f->second}, {1, big.a, big.w}});
      }
    }
  }
  // alignment inside a step: two small terms beside the product (each below the grid of one rule
  // only), and the product less a smaller product, so that the step's result has a lower exponent
  // than E and keeps what the alignment let through.
  for (double m : {1.5, 1.75}) {
    for (int b = 10; b <= 16; ++b) {
      const auto f = factor(std::ldexp(1.0, -b));
      if (!f) continue;
      const Fp8Probe::Term big{0, code_of(m), code_of(m)}, small1{1, f->first, f->second}, small2{2, f->first, f->second};
      d.add_terms(fmt::format("alignment/{}^2+2x2^-{}", m, b), "alignment", kShortK, {big, small1, small2});
      d.add_terms(fmt::format("alignment/{}^2-1.5*1.25+2^-{}", m, b), "alignment", kShortK,
                  {big, {1, code_of(-1.5), code_of(1.25)}, small2});
    }
  }
  // steps: 2^-12 at positions 0..j-1, then 4 at j. The small terms in the same step as the 4 are
  // aligned to it and lost; those in earlier steps are summed first and survive: the count that
  // survives is step_k·floor(j/step_k).
  for (int64_t j : {1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65, 127}) {
    std::vector<std::pair<int64_t, double>> t;
    for (int64_t i = 0; i < j; ++i) t.emplace_back(i, 0x1p-12);
    t.emplace_back(j, 4.0);
    d.add(fmt::format("steps/{}x2^-12+4", j), "steps", kStepK, t);
  }
  // steps for wide terms (25 bits kept: the f16 tensor-core step of mma.sync on e4m3): 2^-10 at
  // positions 0..j-1, then 2^16 at j. A 2^-10 in the step of the 2^16 lies 26 bits below it and is
  // lost; those of earlier steps are C, which that step rounds to its grid 2^(16 - term_bits).
  for (int64_t j : {1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 18, 19, 31, 32, 33, 63, 64, 65, 127}) {
    std::vector<std::pair<int64_t, double>> t;
    for (int64_t i = 0; i < j; ++i) t.emplace_back(i, 0x1p-10);
    t.emplace_back(j, big);
    d.add(fmt::format("steps/{}x2^-10+2^16", j), "steps", kStepK, t);
  }
  // promotion rounding: 2^8 at 0, 3*2^-17 at j, a sum of 26 significant bits. Inside one step's result
  // truncated to fp32 it is 2^8; added by an fp32 promotion (rn) it is 2^8 + 2^-15: which positions
  // share a step result before a promotion, and which rounding joins them.
  for (int64_t j : {1, 2, 3, 4, 8, 15, 16, 17, 18, 19, 31, 32, 33, 63, 64, 65, 127}) {
    d.add(fmt::format("promote-rounding/2^8+3*2^-17@{}", j), "steps", kStepK, {{0, 256.0}, {j, 0x3p-17}});
  }
}

// The long probes (K = 256, 1024, 1536): random operands, structure, promotion.
void design_long_probes(Designer& d, uint64_t seed) {
  const double big = 65536.0;  // 2^16 = 256 * 256
  // random: dense randn·2 operands (the H200 measurement's), K = 256.
  std::mt19937_64 rng(seed ^ 0x5eed);
  std::normal_distribution<float> nd(0.0f, 2.0f);
  for (int r = 0; r < 8; ++r) {
    Fp8Probe p;
    p.id = fmt::format("random/{}", r);
    p.family = "random";
    p.k = 256;
    for (int64_t i = 0; i < p.k; ++i) {
      p.terms.push_back({i, f32_to_e4m3fn(nd(rng), true), f32_to_e4m3fn(nd(rng), true)});
    }
    d.probes.push_back(std::move(p));
  }
  // structure: 2^6 at j-1, 2^-18 at j and j+1. Together (one chain, one step of rounded terms) the
  // small terms are lost; separated from 2^6 by a promotion or split boundary (or all in one exact
  // step) they survive as 2^6 + 2^-17 in an fp32 add.
  std::set<int64_t> js;
  for (int64_t j = 1; j <= 9; ++j) js.insert(j);
  for (int64_t j = 16; j < kLongK - 1; j += 8) js.insert(j);
  for (int64_t j : {17, 33, 65, 129, 257, 341, 342, 682, 683, 1022}) js.insert(j);
  for (int64_t j : js) {
    d.add_pair(fmt::format("structure/2^6@{}+2x2^-18", j - 1), "structure", kLongK,
               {{j - 1, 8.0, 8.0}, {j, 0x1p-9, 0x1p-9}, {j + 1, 0x1p-9, 0x1p-9}});
  }
  // structure, exact sums: 2^-18 at 0, 2^8 at j-1, -2^8 at j. One exact sum keeps 2^-18; fp32
  // partials lose it unless 2^8 and -2^8 cancel inside one partial: a split boundary between j-1
  // and j shows even when every partial is exact.
  for (int64_t j : {1, 64, 128, 129, 256, 257, 341, 342, 384, 512, 513, 640, 682, 683, 768, 896, 1023}) {
    d.add_pair(fmt::format("structure/2^-18@0+2^8@{}-2^8@{}", j - 1, j), "structure", kLongK,
               {{0, 0x1p-9, 0x1p-9}, {j - 1, 16.0, 16.0}, {j, -16.0, 16.0}});
  }
  // structure, separate partials: 2^6 at 0, 2^-18 at j1 and at j2 in different chains. A running
  // sum (one accumulator, or chains promoted into one D) meets 2^6 first and loses both; partials
  // that start from zero (split-K ranges) sum the two small terms to 2^-17 first, which survives.
  for (const auto& [j1, j2] : std::vector<std::pair<int64_t, int64_t>>{
           {40, 100}, {130, 170}, {260, 330}, {300, 500}, {350, 600}, {520, 1000}, {600, 700}, {700, 1000}, {900, 1000}}) {
    d.add_pair(fmt::format("structure/2^6@0+2^-18@{}+2^-18@{}", j1, j2), "structure", kLongK,
               {{0, 8.0, 8.0}, {j1, 0x1p-9, 0x1p-9}, {j2, 0x1p-9, 0x1p-9}});
  }
  // The same at a second K: a split-K range is K/splits long, a promotion interval is not, so
  // `blocked-128` and `split-k-8` (equal at K = 1024) separate here.
  constexpr int64_t kOtherK = 1536;
  for (int64_t j : {128, 192, 256, 384, 512, 768, 1024, 1152, 1280}) {
    d.add_pair(fmt::format("structure/K{}/2^6@{}+2x2^-18", kOtherK, j - 1), "structure", kOtherK,
               {{j - 1, 8.0, 8.0}, {j, 0x1p-9, 0x1p-9}, {j + 1, 0x1p-9, 0x1p-9}});
  }
  for (const auto& [j1, j2] : std::vector<std::pair<int64_t, int64_t>>{{200, 300}, {600, 700}, {800, 1500}, {1300, 1500}}) {
    d.add_pair(fmt::format("structure/K{}/2^6@0+2^-18@{}+2^-18@{}", kOtherK, j1, j2), "structure", kOtherK,
               {{0, 8.0, 8.0}, {j1, 0x1p-9, 0x1p-9}, {j2, 0x1p-9, 0x1p-9}});
  }
  for (int r = 0; r < 4; ++r) {
    Fp8Probe p;
    p.id = fmt::format("random/k{}/{}", kLongK, r);
    p.family = "random";
    p.k = kLongK;
    for (int64_t i = 0; i < p.k; ++i) {
      p.terms.push_back({i, f32_to_e4m3fn(nd(rng), true), f32_to_e4m3fn(nd(rng), true)});
    }
    d.probes.push_back(std::move(p));
  }
  // promotion: 2^16 at 0, ±m·2^(16-b) at K-1 (the last chain, the last range): the promotion add's
  // (or the split reduction's) bits and rounding; and two small terms summed in the last chain.
  for (int b = 10; b <= 30; ++b) {
    for (double m : {1.0, 1.125, 1.5, 1.75}) {
      const double s = m * std::ldexp(1.0, 16 - b);
      for (int sign : {1, -1}) {
        d.add(fmt::format("promotion/2^16@0{}{}*2^{}@{}", sign > 0 ? "+" : "-", m, 16 - b, kLongK - 1), "promotion",
              kLongK, {{0, big}, {kLongK - 1, sign * s}});
      }
    }
    const double s = 0.75 * std::ldexp(1.0, 16 - b);
    d.add(fmt::format("promotion/2^16@0+2x{}*2^{}@{},{}", 0.75, 16 - b, kLongK - 2, kLongK - 1), "promotion", kLongK,
          {{0, big}, {kLongK - 2, s}, {kLongK - 1, s}});
  }
}

}  // namespace

std::vector<Fp8Probe> design_fp8_probes(uint64_t seed) {
  Designer d;
  design_short_probes(d);
  design_long_probes(d, seed);
  return d.probes;
}

std::vector<Fp8Probe> readable_fp8_variants(const std::vector<Fp8Probe>& probes) {
  std::vector<Fp8Probe> out;
  for (const Fp8Probe& p : probes) {
    if (p.family == "random" || p.terms.empty()) continue;
    // The largest term (its product's magnitude), negated by flipping the sign bit of its `a` code.
    const auto value = [](const Fp8Probe::Term& t) {
      return std::fabs(static_cast<double>(e4m3fn_to_f32(t.a)) * static_cast<double>(e4m3fn_to_f32(t.w)));
    };
    size_t big = 0;
    for (size_t i = 1; i < p.terms.size(); ++i) {
      if (value(p.terms[i]) > value(p.terms[big])) big = i;
    }
    Fp8Probe v = p;
    v.id = "readable/" + p.id;
    v.k = p.k + 32;
    v.terms.push_back({v.k - 1, static_cast<uint8_t>(p.terms[big].a ^ 0x80u), p.terms[big].w});
    out.push_back(std::move(v));
  }
  return out;
}

}  // namespace qc
