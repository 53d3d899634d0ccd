// Bounds qconform puts on what an input can make it do, checked before the work starts:
// how deep a JSON document may nest (every JSON qconform reads goes through `parse_json`), and how
// much memory one run may ask for (`check_memory_estimate`, before allocating).
//
// Both refuse with a `qc::Error` of kind `input` (exit 2) whose message names the file or option,
// the limit and what was found, instead of a stack overflow or `std::bad_alloc` later.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <string_view>

namespace qc {

// The deepest nesting of arrays and objects any JSON document qconform reads may have. qconform's
// own files nest at most 6 levels (a manifest's `run.config`); 64 leaves room for user metadata
// while keeping every recursive walk of a value (rendering it in a message, destroying it) shallow.
inline constexpr size_t kMaxJsonDepth = 64;

// Throws (input error naming `what` and the byte offset) when `text` nests arrays/objects deeper
// than `max_depth`. Brackets inside strings do not count. Linear, no recursion, no allocation.
void check_json_depth(std::string_view text, std::string_view what, size_t max_depth = kMaxJsonDepth);

// `check_json_depth`, then nlohmann's parser; a parse error becomes an input error naming `what`.
// `what` is the file (and line, for JSONL) the text came from.
nlohmann::json parse_json(std::string_view text, std::string_view what, size_t max_depth = kMaxJsonDepth);

// Memory the system can give this process now: MemAvailable of /proc/meminfo, or 0 when unknown.
// The environment variable QCONFORM_MEMORY_LIMIT (bytes, e.g. `4e9`) overrides it (tests, and
// machines whose /proc/meminfo does not reflect a container's limit).
uint64_t available_memory_bytes();

// Refuses (input error) a run whose estimated allocation `bytes` exceeds the available memory,
// naming `what` (the option and value that asked for it), the estimate and what is available.
// Does nothing when the available memory is unknown.
void check_memory_estimate(double bytes, std::string_view what);

// "1.50 GiB" etc., for messages.
std::string format_bytes(double bytes);

}  // namespace qc
