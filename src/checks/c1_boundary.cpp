// C1: the arithmetic preconditions of the alibi, run through the arm itself.
#include "checks/c1_boundary.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cctype>
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <map>
#include <optional>
#include <set>

#include "accum/fp8_model.hpp"
#include "qconform/accumulation.hpp"
#include "qconform/epilogue.hpp"
#include "qconform/error.hpp"
#include "core/numerics_checked.hpp"
#include "qconform/numerics.hpp"
#include "synth/synth.hpp"
#include "arms/environment.hpp"
#include "core/results_json.hpp"

namespace qc {

namespace {

constexpr int64_t kCols = 16;  // every probe uses N = 16 (CUDA arms need N and K multiples of 16)

int64_t round_up16(int64_t k) { return std::max<int64_t>(16, (k + 15) / 16 * 16); }

struct Probe {
  std::vector<int8_t> a, w;  // [m,k], [n,k]
  std::vector<float> sa, sw;
  int64_t m = 0, n = 0, k = 0;
  LayerOperands ops(const std::string& name) const {
    return make_operands(name, m, n, k, OperandStorage{a, sa, w, sw, {}}, "boundary suite");
  }
};

// One row of int8 pairs whose products sum to exactly `t` (|t| < 2^31), padded with zeros.
void decompose(int64_t t, std::vector<int8_t>& a, std::vector<int8_t>& w) {
  const bool negative = t < 0;
  int64_t u = negative ? -t : t;
  const int64_t big = negative ? 16256 : 16384;  // 127*-128 or -128*-128
  for (int64_t i = 0, q = u / big; i < q; ++i) {
    a.push_back(negative ? 127 : -128);
    w.push_back(-128);
  }
  u %= big;
  for (int64_t i = 0, q = u / 127; i < q; ++i) {
    a.push_back(127);
    w.push_back(negative ? -1 : 1);
  }
  if (u % 127) {
    a.push_back(static_cast<int8_t>(u % 127));
    w.push_back(negative ? -1 : 1);
  }
}

// Every row and column hold the same dot product `t`; row i is scaled by `sa[i]`.
Probe constant_acc_probe(int64_t t, const std::vector<float>& sa) {
  std::vector<int8_t> ta, tw;
  decompose(t, ta, tw);
  Probe p;
  p.m = static_cast<int64_t>(sa.size());
  p.n = kCols;
  p.k = round_up16(static_cast<int64_t>(ta.size()) + 1);
  ta.resize(static_cast<size_t>(p.k), 0);
  tw.resize(static_cast<size_t>(p.k), 0);
  for (int64_t i = 0; i < p.m; ++i) p.a.insert(p.a.end(), ta.begin(), ta.end());
  for (int64_t j = 0; j < p.n; ++j) p.w.insert(p.w.end(), tw.begin(), tw.end());
  p.sa = sa;
  p.sw.assign(static_cast<size_t>(p.n), 1.0f);
  return p;
}

// What a failure of each family points to, in its own terms (the C1 row of the check table lists them
// all); the overflow case has its own (`accumulation_case`).
std::string family_points_to(const std::string& group) {
  if (group == "int-to-fp32") return "the arm's int32 -> fp32 conversion (its rounding mode)";
  if (group == "accumulation") {
    return "the arm's integer accumulation: saturation, wraparound, a dropped K tail or float accumulation";
  }
  if (group == "pow2-commutation") return "the epilogue's scale products: an extra rounding, FMA contraction or a wrong scale";
  if (group == "bf16-midpoints") return "the arm's bf16 rounding: not round-to-nearest-even at ties";
  if (group == "subnormal") return "flush-to-zero (FTZ/DAZ) in the arm's build or device";
  if (group == "fp8-model") return "the arm's FP8 accumulation: this parameter of its model is not the declared one";
  if (group == "fp8-confirmation") return "the arm's FP8 accumulation: the measured model does not explain every output";
  return "the hardware, compiler flags (FTZ/DAZ, fast-math, contraction) or the arm's conversion";
}

BoundaryCase new_case(std::string group, std::string id) {
  BoundaryCase c;
  c.points_to = family_points_to(group);
  c.group = std::move(group);
  c.id = std::move(id);
  return c;
}

std::string joined(const std::vector<std::string>& v) { return fmt::format("{}", fmt::join(v, "; ")); }

std::string bits(uint16_t b) { return fmt::format("0x{:04x} ({:.9g})", b, bf16_to_f32(b)); }

class Suite {
 public:
  Suite(Arm& arm, const BoundaryOptions& options) : arm_(arm), options_(options), info_(arm.info()) {
    if (!info_.epilogue.empty()) formula_ = &epilogue(info_.epilogue);
  }

  BoundaryResult run() {
    int_to_fp32();
    accumulation();
    pow2_commutation();
    bf16_midpoints();
    subnormals();
    return finish();
  }

 private:
  // The formula that predicts this arm's output: its declared one, else the generic fp32 model
  // (`vllm-cutlass`: every fp32 formula agrees with it under the probes' power-of-two scales).
  const Epilogue& model() const { return formula_ ? *formula_ : epilogue("vllm-cutlass"); }

  std::optional<ArmOutput> run_arm(const LayerOperands& ops, BoundaryCase& c) {
    try {
      ArmOutput out = arm_.run(ops);
      if (record_.arm.empty()) record_ = out.record;
      QC_INPUT(static_cast<int64_t>(out.y.size()) == ops.m * ops.n, "arm {} returned {} outputs, expected {}",
               info_.label, out.y.size(), ops.m * ops.n);
      return out;
    } catch (const Error& e) {
      if (e.kind() != ErrorKind::input) throw;
      c.verdict = Verdict::not_applicable;
      c.detail = fmt::format("the arm refuses this probe: {}", e.what());
      return std::nullopt;
    }
  }

  void add(BoundaryCase c) { cases_.push_back(std::move(c)); }

  // ---- 1. int -> fp32 at the 2^24 boundary, and the arm's conversion mode ----------------------
  void int_to_fp32() {
    const int64_t p24 = int64_t{1} << 24;
    for (int64_t base : {p24 - 1, p24, p24 + 1, p24 + 2, p24 + 3}) {
      for (int64_t sign : {1, -1}) int_to_fp32_case(sign * base);
    }
  }

  void int_to_fp32_case(int64_t t) {
    BoundaryCase c = new_case("int-to-fp32", fmt::format("int-to-fp32/acc={}", t));
    const float rne = static_cast<float>(t);
    const float rz = std::fabs(static_cast<double>(rne)) > std::fabs(static_cast<double>(t)) ? std::nextafter(rne, 0.0f) : rne;
    const float ru = static_cast<double>(rne) < static_cast<double>(t) ? std::nextafter(rne, INFINITY) : rne;
    const float rd = static_cast<double>(rne) > static_cast<double>(t) ? std::nextafter(rne, -INFINITY) : rne;
    std::set<float> candidate_set = {std::nextafter(rne, -INFINITY), rne, std::nextafter(rne, INFINITY), rz, ru, rd};
    const std::vector<float> candidates(candidate_set.begin(), candidate_set.end());
    // One row per adjacent pair of candidates, with an activation scale that puts a bf16
    // rounding boundary of rn32(x * c) between them; the rows together identify f32(acc).
    const auto g = [](float x, float c) { return f32_to_bf16(x * c); };
    std::vector<float> scales;
    for (size_t i = 0; i + 1 < candidates.size(); ++i) {
      const float lo = candidates[i], hi = candidates[i + 1];
      int e = 0;
      std::frexp(std::fabs(hi), &e);
      bool found = false;
      // Products near the top of a binade resolve the finest steps, so search the whole binade.
      for (int j = 0; j < 128 && !found; ++j) {
        for (int d = -8; d <= 8 && !found; ++d) {
          const float c = std::ldexp(1.0f + (2 * j + 1) * 0x1p-8f + d * 0x1p-23f, -e + 1);
          if (g(lo, c) != g(hi, c)) {
            scales.push_back(c);
            found = true;
          }
        }
      }
      QC_CHECK(found, "no separating scale between {} and {}", lo, hi);
    }
    const Probe probe = constant_acc_probe(t, scales);
    c.inputs = fmt::format("a_q [{},{}] x w_q [{},{}] int8 pairs whose every dot product is {}, weight scales 1, one "
                           "activation scale per row that puts a bf16 rounding boundary between two fp32 candidates",
                           probe.m, probe.k, probe.n, probe.k, t);
    auto out = run_arm(probe.ops(c.id), c);
    if (!out) return add(std::move(c));
    // The acc the arm exposes, and the value f32(acc) its outputs imply.
    std::vector<float> consistent;
    for (float x : candidates) {
      bool all = true;
      for (int64_t r = 0; r < probe.m; ++r) all = all && g(x, scales[r]) == out->y[r * probe.n];
      if (all) consistent.push_back(x);
    }
    std::vector<std::string> failures;
    for (int64_t r = 0; r < probe.m; ++r) {
      const uint16_t want = model().apply(t, scales[r], 1.0f, std::nullopt, probe.m, probe.n);
      for (int64_t col = 0; col < probe.n; ++col) {
        const uint16_t got = out->y[r * probe.n + col];
        if (got != want && failures.size() < 3) {
          failures.push_back(fmt::format("y[{},{}] = {}, expected {} (sa = {:a})", r, col, bits(got), bits(want), scales[r]));
        }
      }
    }
    if (out->acc) {
      for (int32_t v : *out->acc) {
        if (v != t) {
          failures.push_back(fmt::format("exposed acc {} (0x{:08x}), expected {}", v, static_cast<uint32_t>(v), t));
          break;
        }
      }
    }
    std::string implied = "ambiguous";
    if (consistent.size() == 1) {
      const float x = consistent[0];
      std::vector<std::string> modes;
      if (x == rne) modes.emplace_back("RNE");
      if (x == rz) modes.emplace_back("RZ");
      if (x == ru) modes.emplace_back("RU");
      if (x == rd) modes.emplace_back("RD");
      implied = fmt::format("f32(acc) = {:.1f} ({}{})", x, x == static_cast<double>(t) ? "exact" : "rounded",
                            modes.empty() ? "" : fmt::format(", consistent with {}", fmt::join(modes, "/")));
      observed_conversion_[t] = modes;
    }
    if (formula_ && formula_->kind == EpilogueKind::exact) implied = "no fp32 conversion (exact formula rounds once)";
    c.verdict = failures.empty() ? Verdict::pass : Verdict::fail;
    c.detail = failures.empty() ? implied : fmt::format("{}; {}", fmt::join(failures, "; "), implied);
    c.evidence = {{"acc", t}, {"implied", implied}, {"rows", probe.m}};
    add(std::move(c));
  }

  // ---- 2. exact integer accumulation against INT64 -----------------------------------------------
  void accumulation() {
    std::vector<int64_t> ks;
    for (int64_t k = 512; k <= options_.max_k; k *= 2) ks.push_back(k);
    ks.push_back(1008);  // a multiple of 16 but not of 64: a dropped partial tile shows
    ks.push_back(1000);  // ragged: arms restricted to multiples of 16 refuse it
    for (const char* pattern : {"random", "all-min", "pm127", "rise-fall", "absorb"}) {
      for (int64_t k : ks) accumulation_case(pattern, k, 4);
    }
    if (options_.overflow_probe) accumulation_case("all-min", 131072, 1);
  }

  void accumulation_case(const std::string& pattern, int64_t k, int64_t m) {
    BoundaryCase c = new_case("accumulation", fmt::format("accumulation/{}/K={}", pattern, k));
    Probe p;
    p.m = m;
    p.n = kCols;
    p.k = k;
    p.a.resize(static_cast<size_t>(m * k));
    p.w.resize(static_cast<size_t>(kCols * k));
    uint64_t state = 0x5EEDull ^ static_cast<uint64_t>(k) * 31 ^ std::hash<std::string>{}(pattern);
    const auto fill = [&](std::vector<int8_t>& v, int64_t rows, bool is_a) {
      for (int64_t i = 0; i < rows * k; ++i) {
        const uint64_t r = splitmix64(state);
        const int64_t col = i % k;
        if (pattern == "random") {
          v[i] = static_cast<int8_t>(r & 0xFF);
        } else if (pattern == "all-min") {
          v[i] = -128;
        } else if (pattern == "pm127") {
          v[i] = (r & 1) ? int8_t{127} : (is_a ? int8_t{-127} : int8_t{-128});
        } else if (pattern == "rise-fall") {  // partial sums climb to K/2 * 16384, then fall back
          v[i] = is_a ? int8_t{-128} : (col < k / 2 ? int8_t{-128} : int8_t{127});
        } else {  // absorb: climb past 2^24 (1100 * 16384), then add ones a float accumulator would absorb
          v[i] = col < 1100 ? int8_t{-128} : int8_t{1};
        }
      }
    };
    fill(p.a, m, true);
    fill(p.w, kCols, false);
    p.sa.assign(static_cast<size_t>(m), 0x1p-10f);
    p.sw.assign(kCols, 0x1p-12f);
    const std::map<std::string, std::string> operands = {
        {"random", "random int8 codes"},
        {"all-min", "every code -128 (each product 2^14)"},
        {"pm127", "random +-127 (a) and 127/-128 (w)"},
        {"rise-fall", "a all -128, w -128 for the first K/2 and 127 after (partial sums climb, then fall)"},
        {"absorb", "-128 for the first 1100 positions, then 1 (partial sums pass 2^24, then add ones)"}};
    c.inputs = fmt::format("a_q [{},{}], w_q [{},{}]: {}; a_scale 2^-10, w_scale 2^-12", m, k, kCols, k,
                           operands.count(pattern) ? operands.at(pattern) : pattern);
    std::vector<int64_t> exact(static_cast<size_t>(m * kCols));
    accumulate_ref_i64(p.a.data(), p.w.data(), {m, kCols, k}, exact.data());
    const bool fits_i32 = std::all_of(exact.begin(), exact.end(), [](int64_t v) {
      return v >= std::numeric_limits<int32_t>::min() && v <= std::numeric_limits<int32_t>::max();
    });
    if (!fits_i32) {
      c.points_to = fmt::format(
          "the arm's missing refusal: at K = {} the exact accumulator leaves INT32 (K * 2^14 >= 2^31 for any K > "
          "131071), so an INT32 kernel must refuse that K (or return the exact result) instead of wrapping around "
          "(docs/plugins.md, \"What an arm must do\")",
          k);
    }
    auto out = run_arm(p.ops(c.id), c);
    if (!out) {
      // Beyond INT32 a refusal passes only when it is about the overflow (not some other constraint).
      std::string lower = c.detail;
      for (char& ch : lower) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
      if (!fits_i32 && (lower.find("overflow") != std::string::npos || lower.find("int32") != std::string::npos)) {
        c.verdict = Verdict::pass;
        c.detail = "the exact value leaves INT32 and the arm refuses the shape (overflow detected): " + c.detail;
      }
      return add(std::move(c));
    }
    std::vector<uint16_t> want(exact.size());
    apply_epilogue(model(), exact.data(), p.sa.data(), p.sw.data(), nullptr, m, kCols, want.data());
    std::vector<std::string> failures;
    int64_t acc_bad = 0, y_bad = 0;
    for (size_t i = 0; i < exact.size(); ++i) {
      if (out->acc && fits_i32 && (*out->acc)[i] != exact[i]) {
        if (acc_bad++ < 3) {
          failures.push_back(fmt::format("acc[{},{}] = {} (0x{:08x}), exact {}", i / kCols, i % kCols, (*out->acc)[i],
                                         static_cast<uint32_t>((*out->acc)[i]), exact[i]));
        }
      }
      if (out->y[i] != want[i] && y_bad++ < 3) {
        failures.push_back(fmt::format("y[{},{}] = {}, expected {} from the exact acc {}", i / kCols, i % kCols,
                                       bits(out->y[i]), bits(want[i]), exact[i]));
      }
    }
    const int64_t max_abs_exact =
        std::abs(*std::max_element(exact.begin(), exact.end(), [](int64_t x, int64_t y) { return std::abs(x) < std::abs(y); }));
    c.evidence = {{"k", k}, {"m", m}, {"max_abs_exact", max_abs_exact}, {"acc_mismatches", acc_bad},
                  {"output_mismatches", y_bad}, {"exposes_acc", out->acc.has_value()}};
    if (!fits_i32) {
      // Beyond the INT32 proof: an arm must refuse the shape or return the exact result;
      // returning anything else is INT32 wraparound without detection.
      c.verdict = y_bad ? Verdict::fail : Verdict::pass;
      c.detail = y_bad ? fmt::format("the exact value {} leaves INT32 and the arm returned a wrong result without "
                                     "refusing (wraparound without detection): {}",
                                     exact[0], fmt::join(failures, "; "))
                       : fmt::format("the exact value {} leaves INT32; the arm's output equals the exact result", exact[0]);
    } else {
      c.verdict = failures.empty() ? Verdict::pass : Verdict::fail;
      c.detail = failures.empty()
                     ? fmt::format("exact ({} outputs{}; max |acc| {})", exact.size(), out->acc ? " and accumulators" : "",
                                   max_abs_exact)
                     : joined(failures);
    }
    add(std::move(c));
  }

  // ---- 3. power-of-two scaling commutes with rounding ---------------------------------------------
  void pow2_commutation() {
    constexpr int64_t kM = 32, kK = 64;
    std::vector<int> exps;
    for (int e = -149; e <= 127; ++e) exps.push_back(e);
    const int64_t n = round_up16(static_cast<int64_t>(exps.size()));
    while (static_cast<int64_t>(exps.size()) < n) exps.push_back(0);
    Probe base;
    base.m = kM;
    base.n = n;
    base.k = kK;
    uint64_t state = 0xC0FFEE;
    base.a.resize(kM * kK);
    base.w.resize(static_cast<size_t>(n * kK));
    for (auto& v : base.a) v = static_cast<int8_t>(splitmix64(state) & 0xFF);
    for (int64_t i = 0; i < kK; ++i) base.a[i] = 0;  // row 0: acc = 0, the signed-zero row
    for (auto& v : base.w) v = static_cast<int8_t>(splitmix64(state) & 0xFF);
    for (int64_t r = 0; r < kM; ++r) {
      base.sa.push_back(std::ldexp(1.0f + static_cast<float>(splitmix64(state) >> 41) * 0x1p-23f, -12 + static_cast<int>(r % 8)));
    }
    base.sw.assign(static_cast<size_t>(n), 1.0f);
    Probe scaled = base;
    for (int64_t j = 0; j < n; ++j) scaled.sw[j] = std::ldexp(1.0f, exps[j]);

    BoundaryCase c = new_case("pow2-commutation", "pow2-commutation/normal-and-signed-zero");
    BoundaryCase outside = new_case("pow2-commutation", "pow2-commutation/subnormal-and-overflow");
    c.inputs = outside.inputs = fmt::format(
        "a_q [{},{}] and w_q [{},{}] random int8 (row 0 all zero), random activation scales; run with weight scales 1 "
        "and with weight scale 2^e in column e, e = -149..127",
        kM, kK, n, kK);
    auto out1 = run_arm(base.ops(c.id), c);
    auto oute = out1 ? run_arm(scaled.ops(c.id), c) : std::nullopt;
    if (!out1 || !oute) {
      outside.verdict = Verdict::not_applicable;
      outside.detail = c.detail;
      add(std::move(c));
      return add(std::move(outside));
    }
    std::vector<int64_t> exact(static_cast<size_t>(kM * n));
    accumulate_ref_i64(base.a.data(), base.w.data(), {kM, n, kK}, exact.data());
    int64_t checked = 0, zeros = 0, excluded = 0, excluded_differ = 0;
    std::vector<std::string> failures, outside_examples;
    for (int64_t r = 0; r < kM; ++r) {
      for (int64_t j = 0; j < n; ++j) {
        const size_t i = static_cast<size_t>(r * n + j);
        const double scaled_value = static_cast<double>(bf16_to_f32(out1->y[i])) * std::ldexp(1.0, exps[j]);
        // Jurisdiction from exact values, plus the reference (rounding, then scaling) itself normal.
        const bool in_range = pow2_in_jurisdiction(exact[i], base.sa[r], scaled.sw[j]) &&
                              (exact[i] == 0 || (std::fabs(scaled_value) >= FLT_MIN && std::fabs(scaled_value) <= FLT_MAX));
        const uint16_t want = f32_to_bf16(static_cast<float>(scaled_value));
        const uint16_t got = oute->y[i];
        if (!in_range) {
          ++excluded;
          if (got != want) {
            ++excluded_differ;
            if (outside_examples.size() < 3) {
              outside_examples.push_back(fmt::format("[{},{}] 2^{}: scaled after rounding {}, arm {}", r, j, exps[j],
                                                     bits(want), bits(got)));
            }
          }
          continue;
        }
        ++checked;
        zeros += exact[i] == 0;
        if (got != want && failures.size() < 5) {
          failures.push_back(fmt::format("[{},{}] acc {} sa {:a} sw 2^{}: arm {}, rounding then scaling {}", r, j,
                                         exact[i], base.sa[r], exps[j], bits(got), bits(want)));
        }
      }
    }
    c.verdict = failures.empty() ? Verdict::pass : Verdict::fail;
    c.detail = failures.empty() ? fmt::format("{} elements (exponents -149..127, {} exact zeros) commute bitwise", checked, zeros)
                                : joined(failures);
    c.evidence = {{"checked", checked}, {"zeros", zeros}};
    outside.verdict = Verdict::outside_jurisdiction;
    outside.detail = fmt::format("{} elements with a subnormal or overflowing value or intermediate; {} of them do not "
                                 "commute (expected: outside the argument's jurisdiction){}{}",
                                 excluded, excluded_differ, outside_examples.empty() ? "" : ": ",
                                 fmt::join(outside_examples, "; "));
    outside.evidence = {{"excluded", excluded}, {"differ", excluded_differ}};
    add(std::move(c));
    add(std::move(outside));
  }

  // ---- 4. bf16 rounding midpoints and one fp32 ulp on either side ---------------------------------
  void bf16_midpoints() {
    std::vector<float> values;
    for (int e = -126; e <= 127; e += 3) {
      for (uint32_t mant : {0x00u, 0x01u, 0x40u, 0x7Eu, 0x7Fu}) {
        if (e == 127 && mant == 0x7F) continue;  // its midpoint rounds to inf: overflow, outside jurisdiction
        const uint16_t lo = static_cast<uint16_t>(((e + 127) << 7) | mant);
        const float mid = f32_from_bits((uint32_t{lo} << 16) | 0x8000u);
        for (float v : {std::nextafter(mid, 0.0f), mid, std::nextafter(mid, INFINITY)}) values.push_back(v);
      }
    }
    BoundaryCase c = new_case("bf16-midpoints", "bf16-midpoints/ties-and-neighbours");
    Probe p;
    p.m = static_cast<int64_t>(values.size()) * 2;
    c.inputs = fmt::format("{} rows with accumulator +1 or -1 and an activation scale at a bf16 tie or one fp32 ulp "
                           "beside it, weight scales 1",
                           p.m);
    p.n = kCols;
    p.k = 16;
    p.a.assign(static_cast<size_t>(p.m * p.k), 0);
    p.w.assign(static_cast<size_t>(p.n * p.k), 0);
    for (int64_t r = 0; r < p.m; ++r) p.a[r * p.k] = r % 2 ? -1 : 1;  // acc = +1 or -1
    for (int64_t j = 0; j < p.n; ++j) p.w[j * p.k] = 1;
    for (float v : values) {
      p.sa.push_back(v);
      p.sa.push_back(v);
    }
    p.sw.assign(kCols, 1.0f);
    auto out = run_arm(p.ops(c.id), c);
    if (!out) return add(std::move(c));
    std::vector<std::string> failures;
    int64_t ties = 0;
    for (int64_t r = 0; r < p.m; ++r) {
      const float v = (r % 2 ? -1.0f : 1.0f) * p.sa[r];
      const uint16_t want = f32_to_bf16(v);
      ties += (f32_bits(v) & 0xFFFFu) == 0x8000u;
      for (int64_t j = 0; j < p.n; ++j) {
        const uint16_t got = out->y[r * p.n + j];
        if (got != want && failures.size() < 5) {
          failures.push_back(fmt::format("row {} value {:a} (0x{:08x}): arm {}, RNE {}", r, v, f32_bits(v), bits(got), bits(want)));
        }
      }
    }
    c.verdict = failures.empty() ? Verdict::pass : Verdict::fail;
    c.detail = failures.empty() ? fmt::format("{} values ({} exact ties, both signs) round to nearest even", p.m, ties)
                                : joined(failures);
    c.evidence = {{"values", p.m}, {"ties", ties}};
    add(std::move(c));
  }

  // ---- 5. subnormals: results and inputs are not flushed (FTZ/DAZ) --------------------------------
  void subnormals() {
    BoundaryCase c = new_case("subnormal", "subnormal/ftz-daz");
    c.inputs = "single-row layers (acc, sa, sw): (1, 2^-120, 2^-10), (3, 2^-120, 2^-12), (-5, 2^-125, 2^-6), (1, 2^-130, "
               "2^4), (64, 2^-140, 2^20), (1, 1.5*2^-127, 1)";
    // (acc, sa, sw): a subnormal result; a subnormal scale with a normal result; a subnormal
    // intermediate whose final result is normal again.
    const std::vector<std::tuple<int64_t, float, float>> rows = {
        {1, 0x1p-120f, 0x1p-10f}, {3, 0x1p-120f, 0x1p-12f}, {-5, 0x1p-125f, 0x1p-6f},
        {1, 0x1p-130f, 0x1p4f},   {64, 0x1p-140f, 0x1p20f}, {1, 0x1.8p-127f, 1.0f}};
    Probe p;
    p.m = static_cast<int64_t>(rows.size());
    p.n = kCols;
    p.k = 16;
    p.a.assign(static_cast<size_t>(p.m * p.k), 0);
    p.w.assign(static_cast<size_t>(p.n * p.k), 0);
    for (int64_t j = 0; j < p.n; ++j) p.w[j * p.k] = 1;
    std::vector<float> sw_row;
    for (int64_t r = 0; r < p.m; ++r) {
      const auto [acc, sa, sw] = rows[r];
      p.a[r * p.k] = static_cast<int8_t>(acc);
      p.sa.push_back(sa);
      sw_row.push_back(sw);
    }
    // One weight scale per probe: run each row with its own sw across all columns.
    std::vector<std::string> failures;
    for (int64_t r = 0; r < p.m; ++r) {
      Probe one = p;
      one.m = 1;
      one.a.assign(p.a.begin() + r * p.k, p.a.begin() + (r + 1) * p.k);
      one.sa = {p.sa[r]};
      one.sw.assign(kCols, sw_row[r]);
      BoundaryCase sub = c;
      auto out = run_arm(one.ops(c.id), sub);
      if (!out) {
        c.verdict = sub.verdict;
        c.detail = sub.detail;
        return add(std::move(c));
      }
      const auto [acc, sa, sw] = rows[r];
      const uint16_t want = model().apply(acc, sa, sw, std::nullopt, 1, kCols);
      for (int64_t col = 0; col < kCols; ++col) {
        const uint16_t got = out->y[col];
        if (got == want) continue;
        failures.push_back(fmt::format("acc {} sa {:a} sw {:a}, column {}: arm {}, IEEE {}{}", acc, sa, sw, col, bits(got),
                                       bits(want), (got & 0x7FFF) == 0 ? " (flushed to zero: FTZ/DAZ)" : ""));
        break;
      }
    }
    c.verdict = failures.empty() ? Verdict::pass : Verdict::fail;
    c.detail = failures.empty() ? fmt::format("{} subnormal probes keep gradual underflow (no FTZ/DAZ)", rows.size())
                                : joined(failures);
    add(std::move(c));
  }

  BoundaryResult finish() {
    BoundaryResult r;
    r.arm = info_;
    r.record = record_;
    r.environment = environment_stamp();
    r.environment["arm"] = record_;
    // The conversion mode as observed at the rounding points (2^24+1 and 2^24+3 and negatives).
    std::set<std::string> common = {"RNE", "RZ", "RU", "RD"};
    bool any = false;
    for (const auto& [t, modes] : observed_conversion_) {
      if (std::llabs(t) <= (int64_t{1} << 24) || std::llabs(t) % 2 == 0) continue;
      any = true;
      std::set<std::string> s(modes.begin(), modes.end()), keep;
      for (const auto& m : common) if (s.count(m)) keep.insert(m);
      common = keep;
    }
    r.conversion_mode = formula_ && formula_->kind == EpilogueKind::exact ? "none (exact formula)"
                        : !any                                           ? "not observed"
                        : common.empty()                                 ? "inconsistent"
                                                                         : fmt::format("{}", fmt::join(common, "/"));
    r.cases = cases_;
    CheckResult& c1 = r.c1;
    c1 = make_check("C1", Verdict::not_applicable);
    std::map<std::string, int> counts;
    std::vector<std::string> failed;
    for (const BoundaryCase& bc : cases_) {
      ++counts[std::string(verdict_name(bc.verdict))];
      if (bc.verdict == Verdict::fail) failed.push_back(fmt::format("{}: {}", bc.id, bc.detail));
    }
    // Exit 0 means checked: every mandatory probe family must have run through the arm (at least
    // one case that passed or failed). An arm that refuses a whole family (an unavailable device,
    // a plugin that refuses every probe) leaves C1 unchecked, never passed.
    for (const char* family : kBoundaryFamilies) {
      int ran = 0, total = 0;
      for (const BoundaryCase& bc : cases_) {
        if (bc.group != family) continue;
        ++total;
        ran += bc.verdict == Verdict::pass || bc.verdict == Verdict::fail;
      }
      r.families[family] = {{"cases", total}, {"ran_through_arm", ran}};
      if (ran == 0) r.families_not_run.push_back(family);
    }
    c1.verdict = !failed.empty()                 ? Verdict::fail
                 : !r.families_not_run.empty() ? Verdict::not_applicable
                                               : Verdict::pass;
    c1.summary = fmt::format("{} cases: {} pass, {} fail, {} outside jurisdiction, {} not applicable; int32->fp32 "
                             "conversion {}",
                             cases_.size(), counts["pass"], counts["fail"], counts["outside-jurisdiction"],
                             counts["not-applicable"], r.conversion_mode);
    if (failed.empty() && !r.families_not_run.empty()) {
      c1.summary = fmt::format("nothing to check: no probe of {} ran through the arm (it refused them: {}); {}",
                               fmt::join(r.families_not_run, ", "), first_refusal(r.families_not_run.front()),
                               c1.summary);
    }
    nlohmann::json failed_cases = nlohmann::json::array();
    for (const BoundaryCase& bc : cases_) {
      if (bc.verdict != Verdict::fail) continue;
      if (failed_cases.empty()) {
        c1.points_to = bc.points_to;  // the first failed case's own cause
        c1.summary += fmt::format("; first failure: {}", bc.id);
      }
      failed_cases.push_back({{"id", bc.id}, {"inputs", bc.inputs}, {"detail", bc.detail}, {"points_to", bc.points_to}});
    }
    c1.evidence = {{"failed", failed}, {"failed_cases", failed_cases}, {"conversion_mode", r.conversion_mode},
                   {"families", r.families}, {"families_not_run", r.families_not_run}};
    return r;
  }

  std::string first_refusal(const std::string& family) const {
    for (const BoundaryCase& bc : cases_) {
      if (bc.group == family && bc.verdict == Verdict::not_applicable) return bc.detail.substr(0, 300);
    }
    return "no case";
  }

  Arm& arm_;
  BoundaryOptions options_;
  ArmInfo info_;
  const Epilogue* formula_ = nullptr;
  RunRecord record_;
  std::vector<BoundaryCase> cases_;
  std::map<int64_t, std::vector<std::string>> observed_conversion_;
};

}  // namespace

namespace {

// The result's arm, record and environment from the record of a measurement's first probe batch.
void take_record(BoundaryResult& r, const ArmInfo& arm, const nlohmann::json& rec) {
  r.arm = arm;
  r.record.arm = arm.label;
  r.record.kernel = rec.value("kernel", std::string());
  r.record.device = rec.value("device", std::string());
  r.record.library = rec.value("library", std::string());
  r.record.build = rec.value("build", std::string());
  if (rec.contains("extra")) r.record.extra = rec.at("extra");
  r.environment = environment_stamp();
  r.environment["arm"] = rec;
}

// C1 of an FP8 arm: one case per parameter of the measured model (pass: it equals the declared
// value), one for the confirmation on random operands; C1 passes when the measured model matches
// the declaration and explains every confirmation output.
BoundaryResult run_fp8_boundary(Arm& arm, const BoundaryOptions& options) {
  BoundaryResult r;
  Fp8MeasureOptions mo = options.fp8;
  mo.through_run = mo.through_run || !arm.info().offers_unscaled();  // a kernel with only its scaled entry
  r.fp8 = measure_fp8_accumulation(arm, mo);
  const Fp8Measurement& m = *r.fp8;
  take_record(r, m.arm, m.record);
  r.conversion_mode = "not applicable (FP8: the fp32 accumulator is the output)";
  if (m.measured) {
    for (const Fp8ParameterEvidence& e : m.evidence) {
      BoundaryCase c = new_case("fp8-model", fmt::format("fp8-model/{}", e.parameter));
      const bool equal = e.value == e.declared;
      c.verdict = equal ? Verdict::pass : Verdict::fail;
      std::vector<std::string> alts;
      for (const auto& a : e.alternatives) {
        alts.push_back(a.probe.empty() ? fmt::format("{} not separated", a.value)
                                       : fmt::format("{} fails {}", a.value, a.probe));
      }
      c.inputs = fmt::format("{} designed probes through the arm's fp8_accumulate (docs/accumulation.md)", m.probes.size());
      c.detail = fmt::format("measured {}, declared {}{}", e.value, e.declared,
                             alts.empty() ? std::string() : fmt::format(" ({})", fmt::join(alts, "; ")));
      r.cases.push_back(std::move(c));
    }
  } else {
    BoundaryCase c = new_case("fp8-model", "fp8-model/parameters");
    c.verdict = Verdict::fail;
    c.detail = m.reason;
    r.cases.push_back(std::move(c));
  }
  BoundaryCase conf = new_case("fp8-confirmation", "fp8-confirmation/random-operands");
  conf.inputs = "random e4m3 codes of randn*2 (held out: no probe used them)";
  conf.verdict = m.measured && m.confirm_matching == m.confirm_outputs ? Verdict::pass : Verdict::fail;
  conf.detail = m.measured ? fmt::format("{} of {} outputs equal the measured model bit for bit", m.confirm_matching,
                                         m.confirm_outputs)
                           : std::string("no measured model to confirm");
  if (m.confirm_declared_matching >= 0) {
    conf.detail += fmt::format(" (declared model: {} of {})", m.confirm_declared_matching, m.confirm_outputs);
  }
  r.cases.push_back(std::move(conf));
  for (const char* family : kBoundaryFamiliesFp8) {
    int total = 0;
    for (const BoundaryCase& bc : r.cases) total += bc.group == family;
    r.families[family] = {{"cases", total}, {"ran_through_arm", total}};
  }
  const bool pass = m.verdict == "matches declaration" && m.confirm_matching == m.confirm_outputs;
  const std::string measured = m.measured ? fmt::format("{} ({}; confirmation {} of {})", accumulation_formula(m.model),
                                                        m.model_name.empty() ? "no named model" : m.model_name,
                                                        m.confirm_matching, m.confirm_outputs)
                                          : m.reason;
  if (m.declared_name.empty()) {
    // Nothing declared, so nothing to hold the measurement to: reported, neither a pass nor a failure
    // (the cases compared each parameter with a declaration that does not exist).
    for (BoundaryCase& c : r.cases) {
      c.verdict = Verdict::not_applicable;
      c.detail = "no model declared to compare with; " + c.detail;
    }
    r.c1 = make_check("C1", Verdict::not_applicable);
    r.c1.summary = fmt::format("no accumulation model declared: nothing to hold the measurement to; measured {} "
                               "(declare it, or run identify)",
                               measured);
  } else {
    r.c1 = make_check("C1", pass ? Verdict::pass : Verdict::fail);
    r.c1.summary = fmt::format("FP8 accumulation model {}: {}", m.verdict, measured);
  }
  nlohmann::json failed_cases = nlohmann::json::array();
  for (const BoundaryCase& c : r.cases) {
    if (c.verdict != Verdict::fail) continue;
    if (failed_cases.empty()) r.c1.points_to = c.points_to;
    failed_cases.push_back({{"id", c.id}, {"inputs", c.inputs}, {"detail", c.detail}, {"points_to", c.points_to}});
  }
  r.c1.evidence = {{"verdict", m.verdict}, {"reason", m.reason}, {"families", r.families},
                   {"failed_cases", failed_cases}};
  return r;
}

// C1 of a block-scaled FP8 arm: the chain and the K block measured at unit scales, the promotion form on
// random scales; C1 passes when the measurement matches the declared block model.
BoundaryResult run_block_boundary(Arm& arm, const BoundaryOptions& options) {
  BoundaryResult r;
  r.block = measure_block_model(arm, options.block);
  const BlockMeasurement& m = *r.block;
  take_record(r, m.arm, m.structure.record);
  r.conversion_mode = "not applicable (block-scaled FP8: the fp32 accumulator D is rounded once, to bf16)";
  const bool known = m.declared.has_value();
  BoundaryCase chain = new_case("block-structure", "block-structure/chain");
  chain.verdict = known && m.chain_model && model_differences(*m.chain_model, m.declared->chain.model).empty()
                      ? Verdict::pass
                      : Verdict::fail;
  chain.detail = fmt::format("measured {}, declared {}", m.chain.empty() ? "none (" + m.reason + ")" : m.chain,
                             known ? m.declared->chain.name : "unknown");
  r.cases.push_back(std::move(chain));
  BoundaryCase block = new_case("block-structure", "block-structure/block");
  block.verdict = m.structure_measured && m.promotion_interval == m.block_k_probed ? Verdict::pass : Verdict::fail;
  block.detail = fmt::format("on K blocks of {} at unit scales: promoted every {} products", m.block_k_probed,
                             m.promotion_interval);
  r.cases.push_back(std::move(block));
  if (m.structure_measured) {
    BoundaryCase conf = new_case("block-structure", "block-structure/confirmation");
    conf.verdict = m.structure.confirm_matching == m.structure.confirm_outputs ? Verdict::pass : Verdict::fail;
    conf.detail = fmt::format("{} of {} random unit-scale outputs equal the measured structure", m.structure.confirm_matching,
                              m.structure.confirm_outputs);
    r.cases.push_back(std::move(conf));
  }
  BoundaryCase form = new_case("block-form", "block-form/random-scales");
  const std::string declared_form = known ? std::string(block_promotion_name(m.declared->form)) : "";
  form.verdict = known && std::find(m.form_class.begin(), m.form_class.end(), declared_form) != m.form_class.end()
                     ? Verdict::pass
                     : Verdict::fail;
  std::vector<std::string> counts;
  for (const BlockFormEvidence& e : m.forms) counts.push_back(fmt::format("{} {}/{}", e.form, e.matching, m.form_outputs));
  form.detail = m.forms.empty() ? "not measured: " + m.reason
                                : fmt::format("forms explaining every output: {} (declared {}); {}",
                                              m.form_class.empty() ? "none" : fmt::format("{}", fmt::join(m.form_class, ", ")),
                                              declared_form, fmt::join(counts, ", "));
  r.cases.push_back(std::move(form));
  for (const char* family : kBoundaryFamiliesBlock) {
    int total = 0;
    for (const BoundaryCase& bc : r.cases) total += bc.group == family;
    r.families[family] = {{"cases", total}, {"ran_through_arm", total}};
  }
  const bool pass = m.verdict == "matches declaration" &&
                    std::all_of(r.cases.begin(), r.cases.end(), [](const BoundaryCase& c) { return c.verdict == Verdict::pass; });
  r.c1 = make_check("C1", m.verdict == "not measured" ? Verdict::not_applicable : pass ? Verdict::pass : Verdict::fail);
  r.c1.summary = fmt::format("block model {}: {}", m.verdict, m.reason);
  r.c1.evidence = {{"verdict", m.verdict}, {"reason", m.reason}, {"families", r.families}};
  return r;
}

}  // namespace

BoundaryResult run_boundary(Arm& arm, const BoundaryOptions& options) {
  if (arm.info().block()) return run_block_boundary(arm, options);
  if (arm.info().fp8()) return run_fp8_boundary(arm, options);
  return Suite(arm, options).run();
}

std::vector<std::string> describe_failed_cases(const std::vector<BoundaryCase>& cases) {
  std::vector<std::string> out;
  for (const BoundaryCase& c : cases) {
    if (c.verdict != Verdict::fail) continue;
    out.push_back(fmt::format("case {}: inputs {}; {}; points to {}", c.id, c.inputs.empty() ? "-" : c.inputs, c.detail,
                              c.points_to));
  }
  return out;
}

nlohmann::json to_json(const BoundaryResult& r) {
  nlohmann::json cases = nlohmann::json::array();
  for (const BoundaryCase& c : r.cases) {
    cases.push_back({{"group", c.group}, {"id", c.id}, {"verdict", verdict_name(c.verdict)}, {"detail", c.detail},
                     {"inputs", c.inputs}, {"points_to", c.points_to}, {"evidence", c.evidence}});
  }
  return results_envelope("boundary",
                          {{"arm", {{"label", r.arm.label}, {"epilogue", r.arm.epilogue}, {"record", r.record}}},
                           {"environment", r.environment},
                           {"conversion_mode", r.conversion_mode},
                           {"check", r.c1},
                           {"checked", r.checked()},
                           {"families", r.families},
                           {"families_not_run", r.families_not_run},
                           {"cases", cases},
                           {"fp8_accumulation", r.fp8 ? to_json(*r.fp8) : nlohmann::json(nullptr)},
                           {"block_accumulation", r.block ? to_json(*r.block) : nlohmann::json(nullptr)}});
}

}  // namespace qc
