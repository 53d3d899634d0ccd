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

// "a,b,,c" -> {"a", "b", "", "c"}.
inline std::vector<std::string> split_commas(const std::string& text) {
  std::vector<std::string> out;
  size_t start = 0;
  while (true) {
    const size_t comma = text.find(',', start);
    out.push_back(text.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (comma == std::string::npos) return out;
    start = comma + 1;
  }
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
             "{} `{}`: expected a comma-separated list of positive integers, found `{}`", option, text, item);
    out.push_back(v);
  }
  return out;
}

}  // namespace qc::cli
