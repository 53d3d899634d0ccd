// The formula space: enumeration, notation, parser and equivalence classes. The notation and the
// classes are both read from `formula::apply_point` (qconform/epilogue_formula.hpp) by evaluating
// it over symbolic types, so what a point prints, what it computes and which class it falls in come
// from one text.
#include "epilogue/formula_space.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <map>
#include <mutex>

#include "qconform/error.hpp"

namespace qc {

namespace notation {

// The printer: each primitive writes itself, rounding points explicit.
struct P {
  std::string s;
};
struct PAcc {};

P convert_acc(AccConversion c, PAcc) {
  switch (c) {
    case AccConversion::f32_rz: return {"f32_rz(acc)"};
    case AccConversion::bf16_rn: return {"bf16(acc)"};
    case AccConversion::f16_rn: return {"f16(acc)"};
    default: return {"f32(acc)"};
  }
}
P round_to(Precision p, const P& x) {
  if (p == Precision::bf16) return {"bf16(" + x.s + ")"};
  if (p == Precision::f16) return {"f16(" + x.s + ")"};
  return x;
}
P mul_rn(const P& a, const P& b) { return {"rn32(" + a.s + " * " + b.s + ")"}; }
P add_rn(const P& a, const P& b) { return {"rn32(" + a.s + " + " + b.s + ")"}; }
P fma_rn(const P& a, const P& b, const P& c) { return {"fma(" + a.s + ", " + b.s + ", " + c.s + ")"}; }
P out_round(Precision p, OutRounding r, const P& x) {
  const char* name = p == Precision::f16 ? (r == OutRounding::rz ? "f16_rz" : "f16") : (r == OutRounding::rz ? "bf16_rz" : "bf16");
  return {std::string(name) + "(" + x.s + ")"};
}
P widen_out(Precision, const P& x) { return {"f32(" + x.s + ")"}; }

}  // namespace notation

namespace classkey {

// The class reader: a value is its canonical text and a bound on its significant bits; an exact
// product keeps its factors so that products of exact products reassociate.
struct K {
  std::string s;
  int bits = 24;
  bool product = false;  // an exact (unrounded) product of `factors`
  std::vector<std::string> factors;
};
struct KAcc {};

constexpr int kF32Bits = 24, kBf16Bits = 8, kF16Bits = 11;
int precision_bits(Precision p) { return p == Precision::bf16 ? kBf16Bits : p == Precision::f16 ? kF16Bits : kF32Bits; }

K leaf(std::string s, int bits) { return K{std::move(s), bits, false, {}}; }

K convert_acc(AccConversion c, KAcc) {
  switch (c) {
    case AccConversion::f32_rz: return leaf("f32_rz(acc)", kF32Bits);
    case AccConversion::bf16_rn: return leaf("bf16(acc)", kBf16Bits);
    case AccConversion::f16_rn: return leaf("f16(acc)", kF16Bits);
    default: return leaf("f32(acc)", kF32Bits);
  }
}
// Rounding a value that already fits the format's significand changes nothing (in jurisdiction).
K round_to(Precision p, const K& x) {
  if (x.bits <= precision_bits(p)) return x;
  return leaf(std::string(p == Precision::bf16 ? "bf16(" : p == Precision::f16 ? "f16(" : "rn32(") + x.s + ")",
              precision_bits(p));
}
std::vector<std::string> factors_of(const K& x) { return x.product ? x.factors : std::vector<std::string>{x.s}; }
std::string joined_sorted(std::vector<std::string> v, const char* sep) {
  std::sort(v.begin(), v.end());
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) out += (i ? sep : "") + v[i];
  return out;
}
// The exact product; rounded to fp32 only when its significand can exceed 24 bits.
K exact_product(const K& a, const K& b) {
  std::vector<std::string> f = factors_of(a);
  const std::vector<std::string> g = factors_of(b);
  f.insert(f.end(), g.begin(), g.end());
  std::sort(f.begin(), f.end());
  return K{joined_sorted(f, " * "), a.bits + b.bits, true, f};
}
K mul_rn(const K& a, const K& b) {
  K p = exact_product(a, b);
  if (p.bits <= kF32Bits) return p;
  return leaf("rn32(" + p.s + ")", kF32Bits);
}
K add_rn(const K& a, const K& b) { return leaf("rn32(" + joined_sorted({a.s, b.s}, " + ") + ")", kF32Bits); }
K fma_rn(const K& a, const K& b, const K& c) {
  if (a.bits + b.bits <= kF32Bits) return add_rn(exact_product(a, b), c);  // the product is exact
  return leaf("fma(" + joined_sorted({a.s, b.s}, ", ") + ", " + c.s + ")", kF32Bits);
}
K out_round(Precision p, OutRounding r, const K& x) {
  const bool exact = x.bits <= precision_bits(p);  // the rounding mode cannot matter
  const char* name = p == Precision::f16 ? (r == OutRounding::rz && !exact ? "f16_rz" : "f16")
                                         : (r == OutRounding::rz && !exact ? "bf16_rz" : "bf16");
  return leaf(std::string(name) + "(" + x.s + ")", precision_bits(p));
}
K widen_out(Precision, const K& x) { return x; }

}  // namespace classkey

namespace {

// ---- the notation's grammar: expr := term ('+' term)*; term := atom ('*' atom)*;
//      atom := name | name '(' expr (',' expr)* ')' | '(' expr ')'
struct Node {
  enum Type { leaf, call, product, sum } type = leaf;
  std::string name;
  std::vector<Node> kids;
};

class Parser {
 public:
  explicit Parser(std::string_view text) : text_(text) {}

  Node parse() {
    Node n = expr();
    skip();
    if (pos_ != text_.size()) fail("end of the formula", fmt::format("`{}`", text_.substr(pos_, 1)));
    return n;
  }

 private:
  [[noreturn]] void fail(std::string_view expected, std::string found) const {
    QC_FAIL_INPUT("formula `{}`: column {}: expected {}, found {}", text_, pos_ + 1, expected, found);
  }
  void skip() {
    while (pos_ < text_.size() && std::isspace(static_cast<unsigned char>(text_[pos_]))) ++pos_;
  }
  bool eat(char c) {
    skip();
    if (pos_ < text_.size() && text_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  std::string found() const { return pos_ < text_.size() ? fmt::format("`{}`", text_.substr(pos_, 1)) : "the end"; }
  Node expr() {
    Node first = term();
    if (!eat('+')) return first;
    Node s{Node::sum, "", {std::move(first)}};
    do s.kids.push_back(term());
    while (eat('+'));
    return s;
  }
  Node term() {
    Node first = atom();
    if (!eat('*')) return first;
    Node p{Node::product, "", {std::move(first)}};
    do p.kids.push_back(atom());
    while (eat('*'));
    return p;
  }
  Node atom() {
    skip();
    if (eat('(')) {
      Node n = expr();
      if (!eat(')')) fail("`)`", found());
      return n;
    }
    const size_t start = pos_;
    while (pos_ < text_.size() && (std::isalnum(static_cast<unsigned char>(text_[pos_])) || text_[pos_] == '_')) ++pos_;
    if (pos_ == start) fail("a name (acc, sa, sw, bias) or a function (f32, rn32, bf16, ...)", found());
    Node n{Node::leaf, std::string(text_.substr(start, pos_ - start)), {}};
    if (!eat('(')) return n;
    n.type = Node::call;
    do n.kids.push_back(expr());
    while (eat(','));
    if (!eat(')')) fail("`,` or `)`", found());
    return n;
  }

  std::string_view text_;
  size_t pos_ = 0;
};

// Canonical text: operands of `*`, `+` and the two factors of `fma` sorted, one spacing.
std::string canonical(const Node& n) {
  switch (n.type) {
    case Node::leaf: return n.name;
    case Node::call: {
      std::vector<std::string> args;
      for (const Node& k : n.kids) args.push_back(canonical(k));
      if (n.name == "fma" && args.size() == 3) std::sort(args.begin(), args.begin() + 2);
      std::string out = n.name + "(";
      for (size_t i = 0; i < args.size(); ++i) out += (i ? ", " : "") + args[i];
      return out + ")";
    }
    case Node::product:
    case Node::sum: {
      std::vector<std::string> parts;
      for (const Node& k : n.kids) {
        const std::string c = canonical(k);
        parts.push_back(n.type == Node::product && k.type == Node::sum ? "(" + c + ")" : c);
      }
      std::sort(parts.begin(), parts.end());
      std::string out;
      for (size_t i = 0; i < parts.size(); ++i) out += (i ? (n.type == Node::sum ? " + " : " * ") : "") + parts[i];
      return out;
    }
  }
  return "";
}

constexpr FormulaPoint kExactPoint{AccConversion::exact, Precision::f32, Precision::f32, ScaleGrouping::acc_sw_sa,
                                   Precision::f32,       BiasPlacement::before_output, false, OutRounding::rn,
                                   Precision::bf16};
constexpr const char* kExactNotation = "bf16(acc * sa * sw + f32(bias))";

// canonical notation -> point (the first point of the enumeration with that notation).
const std::map<std::string, FormulaPoint>& notation_index() {
  static const std::map<std::string, FormulaPoint> index = [] {
    std::map<std::string, FormulaPoint> m;
    for (const FormulaPoint& p : formula_space()) m.emplace(canonical(Parser(formula_notation(p)).parse()), p);
    return m;
  }();
  return index;
}

const char* precision_name(Precision p) { return p == Precision::bf16 ? "bf16" : p == Precision::f16 ? "fp16" : "fp32"; }
const char* conversion_name(AccConversion c) {
  switch (c) {
    case AccConversion::f32_rn: return "fp32 RNE";
    case AccConversion::f32_rz: return "fp32 RZ";
    case AccConversion::bf16_rn: return "bf16 RNE (direct)";
    case AccConversion::f16_rn: return "fp16 RNE (direct)";
    case AccConversion::exact: return "exact (no rounding before the output)";
  }
  return "?";
}
const char* grouping_name(ScaleGrouping g) {
  switch (g) {
    case ScaleGrouping::acc_sa_sw: return "(acc*sa)*sw";
    case ScaleGrouping::acc_sw_sa: return "(acc*sw)*sa";
    case ScaleGrouping::scales_first: return "acc*(sa*sw)";
  }
  return "?";
}
const char* bias_name(const FormulaPoint& p) {
  switch (p.bias) {
    case BiasPlacement::none: return "none (refused)";
    case BiasPlacement::before_output: return p.fma ? "fused (FMA) before the output rounding" : "fp32 add before the output rounding";
    case BiasPlacement::after_output: return "added after the output rounding, in the output type";
  }
  return "?";
}

}  // namespace

const std::vector<FormulaPoint>& formula_space() {
  static const std::vector<FormulaPoint> space = [] {
    std::vector<FormulaPoint> v;
    const AccConversion convs[] = {AccConversion::f32_rn, AccConversion::f32_rz, AccConversion::bf16_rn, AccConversion::f16_rn};
    const Precision precs[] = {Precision::f32, Precision::bf16, Precision::f16};
    const ScaleGrouping groups[] = {ScaleGrouping::acc_sw_sa, ScaleGrouping::acc_sa_sw, ScaleGrouping::scales_first};
    const BiasPlacement biases[] = {BiasPlacement::none, BiasPlacement::before_output, BiasPlacement::after_output};
    for (AccConversion c : convs)
      for (Precision sa : precs)
        for (Precision sw : precs)
          for (ScaleGrouping g : groups)
            for (Precision first : precs)
              for (BiasPlacement b : biases)
                for (bool fma : {false, true})
                  for (OutRounding r : {OutRounding::rn, OutRounding::rz})
                    for (Precision out : {Precision::bf16, Precision::f16}) {
                      v.push_back(FormulaPoint{c, sa, sw, g, first, b, fma, r, out});
                    }
    v.push_back(kExactPoint);
    return v;
  }();
  return space;
}

std::string formula_notation(const FormulaPoint& p) {
  if (p.conv == AccConversion::exact) return kExactNotation;
  using notation::P;
  return formula::apply_point(p, notation::PAcc{}, P{"sa"}, P{"sw"}, p.bias != BiasPlacement::none, P{"f32(bias)"}).s;
}

bool looks_like_formula(std::string_view text) { return text.find('(') != std::string_view::npos; }

FormulaPoint parse_formula(std::string_view text) {
  if (!looks_like_formula(text)) {
    for (const Epilogue& e : all_epilogues()) {
      if (e.name != text) continue;
      QC_INPUT(!e.point.empty() && e.swap_point.empty(),
               "formula `{}`: the named formula dispatches on the GEMM's shape and is no single point of the space", text);
      return parse_formula(e.point);
    }
    QC_FAIL_INPUT("formula `{}`: expected a formula such as `bf16(rn32(sa * rn32(f32(acc) * sw)))` or a name from "
                  "`qconform arms`", text);
  }
  const std::string c = canonical(Parser(text).parse());
  const auto& index = notation_index();
  const auto it = index.find(c);
  QC_INPUT(it != index.end(),
           "formula `{}` is not a point of the formula space: expected bf16|bf16_rz|f16|f16_rz( ... ) over f32(acc), "
           "f32_rz(acc), bf16(acc) or f16(acc), the scales sa, sw (optionally bf16(..)/f16(..)), fp32 products "
           "rn32(x * y), an optional bias f32(bias) (rn32(y + f32(bias)), fma(x, y, f32(bias)) or "
           "rn32(f32(bf16(y)) + f32(bias))); see docs/identify.md, e.g. `{}`",
           text, formula_notation(FormulaPoint{}));
  return it->second;
}

std::string formula_class_key(const FormulaPoint& p) {
  if (p.conv == AccConversion::exact) return "exact";
  using classkey::K;
  const K sa = classkey::leaf("sa", classkey::kF32Bits), sw = classkey::leaf("sw", classkey::kF32Bits);
  const K bias = classkey::leaf("bias", classkey::kBf16Bits);
  const std::string plain = formula::apply_point(p, classkey::KAcc{}, sa, sw, false, bias).s;
  const std::string with = p.bias == BiasPlacement::none ? std::string("refuses a bias")
                                                           : formula::apply_point(p, classkey::KAcc{}, sa, sw, true, bias).s;
  return plain + " | " + with;
}

nlohmann::json describe_point(const FormulaPoint& p) {
  if (p.conv == AccConversion::exact) {
    return {{"conversion", conversion_name(p.conv)}, {"bias", "in the exact sum"}, {"output", "bf16 RNE, one rounding"}};
  }
  return {{"conversion", conversion_name(p.conv)},
          {"sa", precision_name(p.sa)},
          {"sw", precision_name(p.sw)},
          {"grouping", grouping_name(p.grouping)},
          {"first_product", precision_name(p.first)},
          {"bias", bias_name(p)},
          {"fma", p.fma},
          {"output", fmt::format("{} {}", p.out == Precision::f16 ? "fp16" : "bf16", p.rounding == OutRounding::rz ? "RZ" : "RNE")}};
}

std::string point_summary(const FormulaPoint& p) {
  if (p.conv == AccConversion::exact) return "exact: acc*sa*sw (+ bias) rounded once to bf16 (RNE)";
  return fmt::format("acc -> {}; sa {}, sw {}; {} with the first product in {}; bias {}; output {} {}",
                     conversion_name(p.conv), precision_name(p.sa), precision_name(p.sw), grouping_name(p.grouping),
                     precision_name(p.first), bias_name(p), p.out == Precision::f16 ? "fp16" : "bf16",
                     p.rounding == OutRounding::rz ? "RZ" : "RNE");
}

std::optional<FormulaPoint> row_point(const Epilogue& e) {
  if (e.kind == EpilogueKind::point) return e.space;
  if (e.point.empty()) return std::nullopt;
  return parse_formula(e.point);
}
std::optional<FormulaPoint> row_swap_point(const Epilogue& e) {
  if (e.swap_point.empty()) return std::nullopt;
  return parse_formula(e.swap_point);
}

}  // namespace qc
