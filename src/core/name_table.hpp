// One name table per enum: each value with its spelling, once; the enum-to-name function, the
// name-to-enum parser and the "expected a, b or c" of its error messages all read the same rows.
//
//   constexpr NameRow<ScaleMode> kScaleModeNames[] = {{ScaleMode::real, "real"}, ...};
//   name_of(kScaleModeNames, mode)            -> "real" ("?" for a value with no row)
//   value_of(kScaleModeNames, "real")         -> std::optional<ScaleMode>
//   names_or(kScaleModeNames)                 -> "real, pow2-channel or pow2-layer"
//   names_or(kScaleModeNames, "`")            -> "`real`, `pow2-channel` or `pow2-layer`"
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace qc {

template <class E>
struct NameRow {
  E value;
  std::string_view name;
};

template <class E, size_t N>
constexpr std::string_view name_of(const NameRow<E> (&table)[N], E value) {
  for (const NameRow<E>& row : table) {
    if (row.value == value) return row.name;
  }
  return "?";
}

template <class E, size_t N>
constexpr std::optional<E> value_of(const NameRow<E> (&table)[N], std::string_view name) {
  for (const NameRow<E>& row : table) {
    if (row.name == name) return row.value;
  }
  return std::nullopt;
}

// The names in table order, "a, b or c", each between `quote`s.
template <class E, size_t N>
std::string names_or(const NameRow<E> (&table)[N], std::string_view quote = "") {
  std::string out;
  for (size_t i = 0; i < N; ++i) {
    if (i > 0) out += i + 1 == N ? " or " : ", ";
    out.append(quote).append(table[i].name).append(quote);
  }
  return out;
}

}  // namespace qc
