// Edit distances and "did you mean" (suggest.hpp).
#include "core/suggest.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <utility>

namespace qc {

size_t edit_distance(std::string_view a, std::string_view b) {
  // Three rows of the dynamic programme: `prev2` for the swap of two adjacent characters.
  std::vector<size_t> prev2(b.size() + 1), prev(b.size() + 1), row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t substitute = prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1);
      row[j] = std::min({prev[j] + 1, row[j - 1] + 1, substitute});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) row[j] = std::min(row[j], prev2[j - 2] + 1);
    }
    prev2 = prev;
    std::swap(prev, row);
  }
  return prev[b.size()];
}

std::vector<std::string> nearest_names(std::string_view name, const std::vector<std::string>& candidates, size_t limit) {
  const size_t within = std::max<size_t>(2, name.size() / 3);
  std::vector<std::pair<size_t, size_t>> near;  // (distance, index)
  for (size_t i = 0; i < candidates.size(); ++i) {
    if (candidates[i] == name) continue;
    const size_t d = edit_distance(name, candidates[i]);
    if (d <= within) near.emplace_back(d, i);
  }
  std::stable_sort(near.begin(), near.end(), [](const auto& x, const auto& y) { return x.first < y.first; });
  std::vector<std::string> out;
  for (const auto& [d, i] : near) {
    if (out.size() == limit) break;
    if (std::find(out.begin(), out.end(), candidates[i]) == out.end()) out.push_back(candidates[i]);
  }
  return out;
}

std::string did_you_mean(std::string_view name, const std::vector<std::string>& candidates) {
  return did_you_mean_sentence(nearest_names(name, candidates));
}

std::string did_you_mean_sentence(const std::vector<std::string>& near) {
  if (near.empty()) return "";
  std::vector<std::string> quoted;
  for (const std::string& n : near) quoted.push_back(fmt::format("`{}`", n));
  if (quoted.size() == 1) return fmt::format("; did you mean {}?", quoted[0]);
  const std::string last = quoted.back();
  quoted.pop_back();
  return fmt::format("; did you mean {} or {}?", fmt::join(quoted, ", "), last);
}

}  // namespace qc
