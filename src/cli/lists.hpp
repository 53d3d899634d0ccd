// Parsing of the comma-separated option values every verb takes (`--arms A,B`, `--k 512,1024`).
#pragma once

#include <charconv>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "qconform/error.hpp"

namespace qc::cli {

// "a,b,,c" -> {"a", "b", "", "c"}. Commas inside parentheses do not split: an arm label may name a
// spelled model, `cpu:fp8-block-triton+fp8-model(step_k=16,term_bits=25,...)` (what identify prints).
inline std::vector<std::string> split_commas(const std::string& text) {
  std::vector<std::string> out(1);
  int depth = 0;
  for (const char c : text) {
    if (c == ',' && depth == 0) {
      out.emplace_back();
      continue;
    }
    depth += c == '(' ? 1 : c == ')' && depth > 0 ? -1 : 0;
    out.back().push_back(c);
  }
  return out;
}

// `--option A,B`: exactly two non-empty labels.
inline std::pair<std::string, std::string> parse_pair(const std::string& option, const std::string& text) {
  const std::vector<std::string> parts = split_commas(text);
  QC_INPUT(parts.size() == 2 && !parts[0].empty() && !parts[1].empty(),
           "{} `{}`: expected two arm labels separated by one comma", option, text);
  return {parts[0], parts[1]};
}

// `--option 1,4,16`: positive integers.
inline std::vector<int64_t> parse_positive_list(const std::string& option, const std::string& text) {
  std::vector<int64_t> out;
  for (const std::string& item : split_commas(text)) {
    int64_t v = 0;
    const auto [ptr, ec] = std::from_chars(item.data(), item.data() + item.size(), v);
    QC_INPUT(ec == std::errc() && ptr == item.data() + item.size() && v > 0,
             "{}: expected a comma-separated list of positive integers, found {}{}", option,
             item.empty() ? std::string("an empty item") : printable(item),
             item == text ? std::string() : " (in " + printable(text) + ")");
    out.push_back(v);
  }
  return out;
}

// `--option 0,15,63`: non-negative integers.
inline std::vector<int64_t> parse_count_list(const std::string& option, const std::string& text) {
  std::vector<int64_t> out;
  for (const std::string& item : split_commas(text)) {
    int64_t v = 0;
    const auto [ptr, ec] = std::from_chars(item.data(), item.data() + item.size(), v);
    QC_INPUT(ec == std::errc() && ptr == item.data() + item.size() && v >= 0,
             "{}: expected a comma-separated list of non-negative integers, found {}{}", option,
             item.empty() ? std::string("an empty item") : printable(item),
             item == text ? std::string() : " (in " + printable(text) + ")");
    out.push_back(v);
  }
  return out;
}

// `--shard-size 2G`: a positive byte count with an optional K, M, G or T suffix (powers of 1024).
inline int64_t parse_byte_size(const std::string& option, const std::string& text) {
  int64_t v = 0;
  const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  const std::string_view suffix(ptr, static_cast<size_t>(text.data() + text.size() - ptr));
  int shift = -1;
  if (suffix.empty() || suffix == "B") shift = 0;
  if (suffix == "K" || suffix == "KiB") shift = 10;
  if (suffix == "M" || suffix == "MiB") shift = 20;
  if (suffix == "G" || suffix == "GiB") shift = 30;
  if (suffix == "T" || suffix == "TiB") shift = 40;
  QC_INPUT(ec == std::errc() && v > 0 && shift >= 0 && v <= (INT64_MAX >> shift),
           "{}: expected a positive size in bytes, optionally with K, M, G or T (e.g. 2G), found {}", option,
           text.empty() ? std::string("nothing") : printable(text));
  return v << shift;
}

}  // namespace qc::cli
