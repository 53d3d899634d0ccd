// A spelling of every accumulation model that `fp8_accumulation_model` reads back
// (`fp8-model(step_k=32,term_bits=13,...)`, fp8_model.hpp): what `qconform identify` declares for a
// measured model that has no name, so that verify and conform can evaluate it (docs/identify.md).
// `interleave` is spelled only when nonzero (K order is the default, and every older spelling reads).
#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <iterator>
#include <string>
#include <utility>

#include "accum/fp8_model.hpp"
#include "qconform/error.hpp"

namespace qc {

namespace {

constexpr std::string_view kPrefix = "fp8-model(";

// The fields a spelling names, by their type (`alignment` apart).
constexpr std::pair<std::string_view, int32_t Fp8AccumModel::*> kIntFields[] = {
    {"step_k", &Fp8AccumModel::step_k}, {"term_bits", &Fp8AccumModel::term_bits},
    {"result_bits", &Fp8AccumModel::result_bits}, {"promote_steps", &Fp8AccumModel::promote_steps},
    {"promote_bits", &Fp8AccumModel::promote_bits}, {"splits", &Fp8AccumModel::splits},
    {"split_granule", &Fp8AccumModel::split_granule}, {"interleave", &Fp8AccumModel::interleave}};
constexpr std::pair<std::string_view, AccumRounding Fp8AccumModel::*> kRoundingFields[] = {
    {"term_rounding", &Fp8AccumModel::term_rounding},
    {"result_rounding", &Fp8AccumModel::result_rounding},
    {"promote_rounding", &Fp8AccumModel::promote_rounding}};

const char* rounding_word(AccumRounding r) { return r == AccumRounding::toward_zero ? "rz" : "rn"; }

AccumRounding parse_rounding(std::string_view v, std::string_view text, std::string_view field) {
  if (v == "rz") return AccumRounding::toward_zero;
  if (v == "rn") return AccumRounding::nearest_even;
  QC_FAIL_INPUT("accumulation model `{}`: field `{}`: expected rz or rn, found `{}`", text, field, v);
}

int32_t parse_int(std::string_view v, std::string_view text, std::string_view field) {
  int32_t x = 0;
  const auto [ptr, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
  QC_INPUT(ec == std::errc() && ptr == v.data() + v.size(), "accumulation model `{}`: field `{}`: expected an integer, found `{}`",
           text, field, v);
  return x;
}

}  // namespace

std::string fp8_model_spelling(const Fp8AccumModel& m) {
  return fmt::format(
      "fp8-model(step_k={},term_bits={},term_rounding={},result_bits={},result_rounding={},alignment={},"
      "promote_steps={},promote_bits={},promote_rounding={},splits={},split_granule={}{})",
      m.step_k, m.term_bits, rounding_word(m.term_rounding), m.result_bits, rounding_word(m.result_rounding),
      m.alignment == AccumAlignment::exponent_sum ? "exponent_sum" : "exact_exponent", m.promote_steps, m.promote_bits,
      rounding_word(m.promote_rounding), m.splits, m.split_granule,
      m.interleave > 0 ? fmt::format(",interleave={}", m.interleave) : std::string());
}

bool is_fp8_model_spelling(std::string_view text) { return text.starts_with(kPrefix); }

Fp8AccumModel parse_fp8_model_spelling(std::string_view text) {
  QC_INPUT(is_fp8_model_spelling(text) && text.ends_with(")"),
           "accumulation model `{}`: expected fp8-model(field=value,...) with the fields of docs/accumulation.md", text);
  std::string_view body = text.substr(kPrefix.size(), text.size() - kPrefix.size() - 1);
  Fp8AccumModel m;
  while (!body.empty()) {
    const size_t comma = body.find(',');
    std::string_view item = body.substr(0, comma);
    body = comma == std::string_view::npos ? std::string_view{} : body.substr(comma + 1);
    while (!item.empty() && item.front() == ' ') item.remove_prefix(1);
    const size_t eq = item.find('=');
    QC_INPUT(eq != std::string_view::npos, "accumulation model `{}`: expected field=value, found `{}`", text, item);
    const std::string_view f = item.substr(0, eq), v = item.substr(eq + 1);
    const auto named = [&](const auto& fields) {
      const auto it = std::find_if(std::begin(fields), std::end(fields), [&](const auto& x) { return x.first == f; });
      return it == std::end(fields) ? nullptr : &*it;
    };
    if (const auto* field = named(kIntFields)) {
      m.*(field->second) = parse_int(v, text, f);
    } else if (const auto* rounding = named(kRoundingFields)) {
      m.*(rounding->second) = parse_rounding(v, text, f);
    } else if (f == "alignment") {
      QC_INPUT(v == "exponent_sum" || v == "exact_exponent",
               "accumulation model `{}`: field `alignment`: expected exponent_sum or exact_exponent, found `{}`", text, v);
      m.alignment = v == "exponent_sum" ? AccumAlignment::exponent_sum : AccumAlignment::exact_exponent;
    } else {
      QC_FAIL_INPUT("accumulation model `{}`: unknown field `{}` (expected the fields of docs/accumulation.md)", text, f);
    }
  }
  validate_accumulation_model(m, text);
  return m;
}

}  // namespace qc
