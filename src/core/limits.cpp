#include "core/limits.hpp"

#include <fmt/format.h>

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "qconform/error.hpp"
#include "core/fileio.hpp"

namespace qc {

void check_json_depth(std::string_view text, std::string_view what, size_t max_depth) {
  size_t depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;  // the escaped character cannot end the string
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      QC_INPUT(++depth <= max_depth,
               "{}: JSON nested deeper than {} levels (arrays/objects) at byte offset {}: expected at most {} "
               "levels, refusing to parse it",
               what, max_depth, i, max_depth);
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
}

nlohmann::json parse_json(std::string_view text, std::string_view what, size_t max_depth) {
  check_json_depth(text, what, max_depth);
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    QC_FAIL_INPUT("{}: expected valid JSON, found invalid JSON ({})", what, printable_text(e.what()));
  }
}

std::string format_bytes(double bytes) {
  static const char* const units[] = {"bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  int u = 0;
  while (bytes >= 1024 && u < 6) {
    bytes /= 1024;
    ++u;
  }
  return u == 0 ? fmt::format("{:.0f} bytes", bytes) : fmt::format("{:.2f} {}", bytes, units[u]);
}

uint64_t available_memory_bytes() {
  if (const char* env = std::getenv("QCONFORM_MEMORY_LIMIT"); env != nullptr && *env != '\0') {
    char* end = nullptr;
    const double v = std::strtod(env, &end);
    QC_INPUT(end != env && *end == '\0' && std::isfinite(v) && v > 0,
             "environment variable QCONFORM_MEMORY_LIMIT: expected a positive number of bytes, found `{}`",
             printable_text(env));
    return static_cast<uint64_t>(std::min(v, 1.8e19));
  }
  // /proc/meminfo is a regular file to stat but reads like a stream: read_file handles both.
  std::string text;
  try {
    text = read_file("/proc/meminfo");
  } catch (const Error&) {
    return 0;
  }
  const size_t at = text.find("MemAvailable:");
  if (at == std::string::npos) return 0;
  const uint64_t kib = std::strtoull(text.c_str() + at + 13, nullptr, 10);
  return kib * 1024;
}

void check_memory_estimate(double bytes, std::string_view what) {
  QC_INPUT(std::isfinite(bytes) && bytes >= 0, "{}: the memory it needs cannot be estimated (found {})", what, bytes);
  const uint64_t available = available_memory_bytes();
  if (available == 0) return;
  QC_INPUT(bytes <= static_cast<double>(available),
           "{}: would allocate about {} ({:.0f} bytes), more than the {} this machine has available (MemAvailable "
           "of /proc/meminfo, or QCONFORM_MEMORY_LIMIT): refusing before allocating",
           what, format_bytes(bytes), bytes, format_bytes(static_cast<double>(available)));
}

}  // namespace qc
