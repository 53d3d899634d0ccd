// "Did you mean": the known names nearest to a misspelt one, by edit distance. One helper for the
// CLI (unknown flags and verbs, src/cli/did_you_mean.cpp) and the arm registry (unknown arm labels,
// src/arms/registry.cpp); CLI11 has no suggestions of its own.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace qc {

// The optimal-string-alignment distance: insertions, deletions, substitutions and swaps of two
// adjacent characters each cost one (`--arsm` is one edit from `--arms`).
size_t edit_distance(std::string_view a, std::string_view b);

// The candidates within `max(2, size(name) / 3)` edits of `name`, nearest first (ties keep the
// candidates' order), at most `limit` of them; a candidate equal to `name` is not a suggestion.
std::vector<std::string> nearest_names(std::string_view name, const std::vector<std::string>& candidates,
                                       size_t limit = 3);

// "; did you mean `x`?" or "; did you mean `x` or `y`?"; "" when no candidate is near.
std::string did_you_mean(std::string_view name, const std::vector<std::string>& candidates);
// The same sentence for names already chosen (`did_you_mean` is this over `nearest_names`).
std::string did_you_mean_sentence(const std::vector<std::string>& names);

}  // namespace qc
