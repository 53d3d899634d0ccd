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
// The accumulator: the integer `acc` (printed converted, `f32(acc)`) or an FP8 GEMM's fp32 `d`.
struct PAcc {
  bool fp32 = false;
};

P convert_acc(AccConversion c, PAcc a) {
  if (a.fp32) {
    switch (c) {
      case AccConversion::bf16_rn: return {"bf16(d)"};
      case AccConversion::f16_rn: return {"f16(d)"};
      default: return {"d"};
    }
  }
  switch (c) {
    case AccConversion::f32_rz: return {"f32_rz(acc)"};
    case AccConversion::bf16_rn: return {"bf16(acc)"};
    case AccConversion::f16_rn: return {"f16(acc)"};
    case AccConversion::bf16_via_f32: return {"bf16(f32(acc))"};
    case AccConversion::f16_via_f32: return {"f16(f32(acc))"};
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
struct KAcc {
  bool fp32 = false;
};

constexpr int kF32Bits = 24, kBf16Bits = 8, kF16Bits = 11;
int precision_bits(Precision p) { return p == Precision::bf16 ? kBf16Bits : p == Precision::f16 ? kF16Bits : kF32Bits; }

K leaf(std::string s, int bits) { return K{std::move(s), bits, false, {}}; }

K convert_acc(AccConversion c, KAcc a) {
  if (a.fp32) {
    switch (c) {
      case AccConversion::bf16_rn: return leaf("bf16(d)", kBf16Bits);
      case AccConversion::f16_rn: return leaf("f16(d)", kF16Bits);
      default: return leaf("d", kF32Bits);
    }
  }
  switch (c) {
    case AccConversion::f32_rz: return leaf("f32_rz(acc)", kF32Bits);
    case AccConversion::bf16_rn: return leaf("bf16(acc)", kBf16Bits);
    // In jurisdiction an fp16 accumulator is below 65504 < 2^24, where the fp32 conversion is exact:
    // through fp32 or straight, one rounding to fp16.
    case AccConversion::f16_rn:
    case AccConversion::f16_via_f32: return leaf("f16(acc)", kF16Bits);
    // Through fp32 to bf16 rounds twice beyond 2^24 (double rounding): not the direct conversion.
    case AccConversion::bf16_via_f32: return leaf("bf16(f32(acc))", kBf16Bits);
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
// True when `s` is one call `name(...)` whose parentheses enclose the rest of the text.
bool is_call_of(const std::string& s, const std::string& name) {
  if (s.rfind(name + "(", 0) != 0 || s.back() != ')') return false;
  int depth = 0;
  for (size_t i = name.size(); i < s.size(); ++i) {
    depth += s[i] == '(' ? 1 : s[i] == ')' ? -1 : 0;
    if (depth == 0) return i + 1 == s.size();
  }
  return false;
}
K out_round(Precision p, OutRounding r, const K& x) {
  const bool exact = x.bits <= precision_bits(p);  // the rounding mode cannot matter
  const char* name = p == Precision::f16 ? (r == OutRounding::rz && !exact ? "f16_rz" : "f16")
                                         : (r == OutRounding::rz && !exact ? "bf16_rz" : "bf16");
  // A value already rounded to the output's format (an intermediate stored in it) is its output.
  if (exact && is_call_of(x.s, name)) return leaf(x.s, precision_bits(p));
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
  Node expr() { return chain('+', Node::sum, &Parser::term); }
  Node term() { return chain('*', Node::product, &Parser::atom); }
  // `operand (op operand)*`: the operand alone, or a `type` node of all of them.
  Node chain(char op, Node::Type type, Node (Parser::*operand)()) {
    Node first = (this->*operand)();
    if (!eat(op)) return first;
    Node n{type, "", {std::move(first)}};
    do n.kids.push_back((this->*operand)());
    while (eat(op));
    return n;
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

// canonical notation -> point, over both spaces (integer and FP8 accumulators: `acc` and `d`).
const std::map<std::string, FormulaPoint>& notation_index() {
  static const std::map<std::string, FormulaPoint> index = [] {
    std::map<std::string, FormulaPoint> m;
    for (FormulaInput in : {FormulaInput::integer, FormulaInput::fp32}) {
      for (const FormulaPoint& p : formula_space(in)) {
        const bool fresh = m.emplace(canonical(Parser(formula_notation(p)).parse()), p).second;
        QC_CHECK(fresh, "formula space: two points print `{}`", formula_notation(p));
      }
    }
    return m;
  }();
  return index;
}

const char* precision_name(Precision p) { return p == Precision::bf16 ? "bf16" : p == Precision::f16 ? "fp16" : "fp32"; }
const char* conversion_name(const FormulaPoint& p) {
  if (p.input == FormulaInput::fp32) {
    switch (p.conv) {
      case AccConversion::bf16_rn: return "fp32 d rounded to bf16 (RNE)";
      case AccConversion::f16_rn: return "fp32 d rounded to fp16 (RNE)";
      default: return "fp32 d as it is";
    }
  }
  switch (p.conv) {
    case AccConversion::f32_rn: return "fp32 RNE";
    case AccConversion::f32_rz: return "fp32 RZ";
    case AccConversion::bf16_rn: return "bf16 RNE (direct)";
    case AccConversion::f16_rn: return "fp16 RNE (direct)";
    case AccConversion::bf16_via_f32: return "fp32 RNE, then bf16 RNE (two roundings)";
    case AccConversion::f16_via_f32: return "fp32 RNE, then fp16 RNE (two roundings)";
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

namespace {

// The points over one accumulator type. The tail after the output parameters lists only flags that
// act: an FMA only fuses a bias add before the output (then the second product is not rounded
// apart), so every point has one notation and one parse (docs/identify.md, "The formula space").
std::vector<FormulaPoint> enumerate_space(FormulaInput input) {
  std::vector<FormulaPoint> v;
  const std::vector<AccConversion> convs =
      input == FormulaInput::fp32
          ? std::vector<AccConversion>{AccConversion::f32_rn, AccConversion::bf16_rn, AccConversion::f16_rn}
          : std::vector<AccConversion>{AccConversion::f32_rn,  AccConversion::f32_rz,       AccConversion::bf16_rn,
                                       AccConversion::f16_rn,  AccConversion::bf16_via_f32, AccConversion::f16_via_f32};
  const Precision precs[] = {Precision::f32, Precision::bf16, Precision::f16};
  const ScaleGrouping groups[] = {ScaleGrouping::acc_sw_sa, ScaleGrouping::acc_sa_sw, ScaleGrouping::scales_first};
  struct Tail {
    BiasPlacement bias;
    bool fma;
    Precision second;
  };
  std::vector<Tail> tails;
  for (BiasPlacement b : {BiasPlacement::none, BiasPlacement::before_output, BiasPlacement::after_output}) {
    for (Precision second : precs) tails.push_back({b, false, second});
    if (b == BiasPlacement::before_output) tails.push_back({b, true, Precision::f32});
  }
  for (AccConversion c : convs)
    for (Precision sa : precs)
      for (Precision sw : precs)
        for (ScaleGrouping g : groups)
          for (Precision first : precs)
            for (const Tail& t : tails)
              for (OutRounding r : {OutRounding::rn, OutRounding::rz})
                for (Precision out : {Precision::bf16, Precision::f16}) {
                  FormulaPoint p{c, sa, sw, g, first, t.bias, t.fma, r, out};
                  p.second = t.second;
                  p.input = input;
                  v.push_back(p);
                }
  if (input == FormulaInput::integer) v.push_back(kExactPoint);
  return v;
}

}  // namespace

const std::vector<FormulaPoint>& formula_space(FormulaInput input) {
  static const std::vector<FormulaPoint> integer = enumerate_space(FormulaInput::integer);
  static const std::vector<FormulaPoint> fp32 = enumerate_space(FormulaInput::fp32);
  return input == FormulaInput::fp32 ? fp32 : integer;
}

std::string formula_notation(const FormulaPoint& p) {
  if (p.conv == AccConversion::exact) return kExactNotation;
  using notation::P;
  return formula::apply_point(p, notation::PAcc{p.input == FormulaInput::fp32}, P{"sa"}, P{"sw"},
                              p.bias != BiasPlacement::none, P{"f32(bias)"})
      .s;
}

bool looks_like_formula(std::string_view text) { return text.find('(') != std::string_view::npos; }

FormulaPoint parse_formula(std::string_view text) {
  if (!looks_like_formula(text)) {
    std::vector<const Epilogue*> rows;
    for (const Epilogue& e : all_epilogues()) rows.push_back(&e);
    rows.push_back(&fp8_epilogue());
    for (const Epilogue* row : rows) {
      const Epilogue& e = *row;
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
           "f32_rz(acc), bf16(acc), f16(acc), bf16(f32(acc)) or f16(f32(acc)) (an FP8 GEMM's fp32 result: d, bf16(d) "
           "or f16(d)), the scales sa, sw (optionally bf16(..)/f16(..)), fp32 products rn32(x * y) (optionally "
           "rounded on, bf16(rn32(x * y))), an optional bias f32(bias) (rn32(y + f32(bias)), fma(x, y, f32(bias)) or "
           "rn32(f32(bf16(y)) + f32(bias))); see docs/identify.md, e.g. `{}`",
           text, formula_notation(FormulaPoint{}));
  return it->second;
}

std::string formula_class_key(const FormulaPoint& p) {
  if (p.conv == AccConversion::exact) return "exact";
  using classkey::K;
  const K sa = classkey::leaf("sa", classkey::kF32Bits), sw = classkey::leaf("sw", classkey::kF32Bits);
  const K bias = classkey::leaf("bias", classkey::kBf16Bits);
  const classkey::KAcc acc{p.input == FormulaInput::fp32};
  const std::string plain = formula::apply_point(p, acc, sa, sw, false, bias).s;
  const std::string with = p.bias == BiasPlacement::none ? std::string("refuses a bias")
                                                           : formula::apply_point(p, acc, sa, sw, true, bias).s;
  return plain + " | " + with;
}

nlohmann::json describe_point(const FormulaPoint& p) {
  if (p.conv == AccConversion::exact) {
    return {{"conversion", conversion_name(p)}, {"bias", "in the exact sum"}, {"output", "bf16 RNE, one rounding"}};
  }
  return {{"accumulator", p.input == FormulaInput::fp32 ? "fp32 d (FP8 GEMM)" : "integer"},
          {"conversion", conversion_name(p)},
          {"sa", precision_name(p.sa)},
          {"sw", precision_name(p.sw)},
          {"grouping", grouping_name(p.grouping)},
          {"first_product", precision_name(p.first)},
          {"second_product", p.bias == BiasPlacement::before_output && p.fma ? "fused with the bias add" : precision_name(p.second)},
          {"bias", bias_name(p)},
          {"fma", p.fma},
          {"output", fmt::format("{} {}", p.out == Precision::f16 ? "fp16" : "bf16", p.rounding == OutRounding::rz ? "RZ" : "RNE")}};
}

std::string point_summary(const FormulaPoint& p) {
  if (p.conv == AccConversion::exact) return "exact: acc*sa*sw (+ bias) rounded once to bf16 (RNE)";
  return fmt::format("{} -> {}; sa {}, sw {}; {} with the first product in {}, the second in {}; bias {}; output {} {}",
                     p.input == FormulaInput::fp32 ? "d" : "acc", conversion_name(p), precision_name(p.sa),
                     precision_name(p.sw), grouping_name(p.grouping), precision_name(p.first),
                     p.bias == BiasPlacement::before_output && p.fma ? "the fused add" : precision_name(p.second),
                     bias_name(p), p.out == Precision::f16 ? "fp16" : "bf16", p.rounding == OutRounding::rz ? "RZ" : "RNE");
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

std::string_view dispatch_condition(const Epilogue& e) {
  if (e.kind == EpilogueKind::torch_rowwise) {
    return "when PyTorch runs the problem transposed (RowwiseScaledMM's shape dispatch, e.g. M = 65..128 with N <= 64)";
  }
  return "under swap-AB (M <= 16, or M <= 64 with N > 1280)";
}
std::string_view dispatch_name(const Epilogue& e) { return e.kind == EpilogueKind::torch_rowwise ? "transpose" : "swap-AB"; }

}  // namespace qc
