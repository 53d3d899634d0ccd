// The fields of an FP8 accumulation model (fp8_model_fields.hpp).
#include "checks/fp8_model_fields.hpp"

#include <fmt/format.h>

#include "accum/fp8_model.hpp"
#include "qconform/error.hpp"

namespace qc::fp8_fields {

// Parameters that do not act are set to the defaults of the named models, so that equal
// behaviour has one spelling: exact terms ignore term rounding and alignment; no promotion ignores
// the promotion add.
// And a chain of one single-product step (step_k 1, promote_steps 1) only rounds that product,
// which has at most 8 significant bits (e4m3·e4m3; e5m2 fewer) and lies on the grid 2^(E-7): with
// 7 or more term and result bits it is exact, and the chains are a running sum in the promotion
// add's precision, spelled as that (`blocked-1` is `sequential`). (Interleaving by step_k itself is not
// K order: a range that ends inside a pair still runs the pair's second step, which can round C.)
Fp8AccumModel canonical(Fp8AccumModel m) {
  if (m.step_k == 1 && m.promote_steps == 1 && (m.term_bits < 0 || m.term_bits >= 7) && m.result_bits >= 7) {
    m.term_bits = -1;
    m.result_bits = m.promote_bits;
    m.result_rounding = m.promote_rounding;
    m.promote_steps = 0;
  }
  if (m.term_bits < 0) {
    m.term_rounding = AccumRounding::toward_zero;
    m.alignment = AccumAlignment::exponent_sum;
  }
  if (m.promote_steps == 0) {
    m.promote_bits = 23;
    m.promote_rounding = AccumRounding::nearest_even;
  }
  return m;
}

std::array<int32_t, 11> key(const Fp8AccumModel& a) {
  return {a.step_k,
          a.term_bits,
          static_cast<int32_t>(a.term_rounding),
          a.result_bits,
          static_cast<int32_t>(a.result_rounding),
          static_cast<int32_t>(a.alignment),
          a.promote_steps,
          a.promote_bits,
          static_cast<int32_t>(a.promote_rounding),
          a.splits,
          a.interleave};
}

bool same_spelling(const Fp8AccumModel& x, const Fp8AccumModel& y) { return key(x) == key(y); }

bool same(const Fp8AccumModel& x, const Fp8AccumModel& y) { return key(canonical(x)) == key(canonical(y)); }

// The printed value of one field.
std::string value(const Fp8AccumModel& m, const std::string& f) {
  if (f == "step_k") return m.step_k == 0 ? std::string("0 (whole range)") : fmt::format("{}", m.step_k);
  if (f == "term_bits") return m.term_bits < 0 ? std::string("-1 (exact)") : fmt::format("{}", m.term_bits);
  if (f == "term_rounding") return m.term_bits < 0 ? std::string("- (exact terms)") : rounding_tag(m.term_rounding);
  if (f == "result_bits") return fmt::format("{}", m.result_bits);
  if (f == "result_rounding") return rounding_tag(m.result_rounding);
  if (f == "alignment") {
    return m.term_bits < 0 ? std::string("- (exact terms)")
                           : m.alignment == AccumAlignment::exponent_sum ? "e(a)+e(b)" : "e(a*b)";
  }
  if (f == "promote_steps") return m.promote_steps == 0 ? std::string("0 (never)") : fmt::format("{}", m.promote_steps);
  if (f == "promote_bits") return m.promote_steps == 0 ? std::string("- (no promotion)") : fmt::format("{}", m.promote_bits);
  if (f == "promote_rounding") return m.promote_steps == 0 ? std::string("- (no promotion)") : rounding_tag(m.promote_rounding);
  if (f == "splits") return fmt::format("{}", m.splits);
  if (f == "interleave") return m.interleave == 0 ? std::string("0 (K order)") : fmt::format("{}", m.interleave);
  return "?";
}

constexpr const char* kFields[] = {"step_k",        "interleave",   "term_bits",        "term_rounding",
                                   "result_bits",   "result_rounding", "alignment",     "promote_steps",
                                   "promote_bits",  "promote_rounding", "splits"};

std::span<const char* const> names() { return kFields; }

std::vector<Fp8AccumModel> alternatives(const Fp8AccumModel& m, const std::string& f) {
  std::vector<Fp8AccumModel> out;
  auto push = [&](Fp8AccumModel x) {
    x = canonical(x);
    try {
      validate_accumulation_model(x, "alternative");
    } catch (const Error&) {
      return;
    }
    if (same(x, m)) return;
    for (const auto& y : out) {
      if (same(x, y)) return;
    }
    out.push_back(x);
  };
  Fp8AccumModel x = m;
  if (f == "step_k") {
    for (int k : {1, 2, 4, 8, 16, 32, 64, 0}) (x = m).step_k = k, push(x);
  } else if (f == "term_bits") {
    if (m.term_bits < 0) {
      for (int t : {13, 23, 24, 25}) (x = m).term_bits = t, push(x);
    } else {
      for (int d : {-2, -1, 1, 2}) (x = m).term_bits = m.term_bits + d, push(x);
      (x = m).term_bits = -1, push(x);
    }
  } else if (f == "term_rounding") {
    if (m.term_bits >= 0) {
      (x = m).term_rounding = m.term_rounding == AccumRounding::toward_zero ? AccumRounding::nearest_even
                                                                            : AccumRounding::toward_zero;
      push(x);
    }
  } else if (f == "result_bits") {
    for (int d : {-2, -1, 1, 2}) (x = m).result_bits = m.result_bits + d, push(x);
  } else if (f == "result_rounding") {
    (x = m).result_rounding = m.result_rounding == AccumRounding::toward_zero ? AccumRounding::nearest_even
                                                                              : AccumRounding::toward_zero;
    push(x);
  } else if (f == "alignment") {
    if (m.term_bits >= 0) {
      (x = m).alignment = m.alignment == AccumAlignment::exponent_sum ? AccumAlignment::exact_exponent
                                                                      : AccumAlignment::exponent_sum;
      push(x);
    }
  } else if (f == "promote_steps") {
    if (m.promote_steps == 0) {
      for (int p : {1, 2, 4, 8}) (x = m).promote_steps = p, push(x);
    } else {
      for (int p : {0, m.promote_steps - 1, m.promote_steps + 1, m.promote_steps * 2, m.promote_steps / 2}) {
        (x = m).promote_steps = p, push(x);
      }
    }
  } else if (f == "promote_bits") {
    if (m.promote_steps > 0) {
      for (int d : {-2, -1, 1}) (x = m).promote_bits = m.promote_bits + d, push(x);
    }
  } else if (f == "promote_rounding") {
    if (m.promote_steps > 0) {
      (x = m).promote_rounding = m.promote_rounding == AccumRounding::toward_zero ? AccumRounding::nearest_even
                                                                                : AccumRounding::toward_zero;
      push(x);
    }
  } else if (f == "splits") {
    for (int s : {1, 2, 3, 4}) (x = m).splits = s, push(x);
  } else if (f == "interleave") {
    for (int g : {0, 1, 2, 4, 8}) {
      if (g < m.step_k) (x = m).interleave = g, push(x);  // g = step_k: a pair's halves are its steps in K order
    }
  }
  return out;
}

}  // namespace qc::fp8_fields
