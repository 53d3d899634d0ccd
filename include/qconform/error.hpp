// One exception type for the whole library, and the check macros that throw it.
//
// `qc::Error` carries the source file, line and failed condition, plus a kind: `input` for bad
// input or usage (the CLI exits 2), `internal` for a broken invariant (exit 3), `arm_failure`
// for an arm that failed while it ran (an isolated plugin that crashed, hung, exited or wrote
// into its inputs: the arm's failure, not qconform's; the CLI exits 1). The library never
// calls `exit()`: the Python binding must survive every error.
#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>

namespace qc {

enum class ErrorKind { input, internal, arm_failure };

class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, std::string message, const char* file, int line, const char* condition)
      : std::runtime_error(std::move(message)), kind_(kind), file_(file), line_(line), condition_(condition) {}
  ErrorKind kind() const { return kind_; }
  const char* file() const { return file_; }
  int line() const { return line_; }
  const char* condition() const { return condition_; }

 private:
  ErrorKind kind_;
  const char* file_;
  int line_;
  const char* condition_;
};

namespace detail {
[[noreturn]] inline void throw_error(ErrorKind kind, const char* file, int line, const char* condition,
                                     const std::string& message) {
  if (kind == ErrorKind::internal) {
    throw Error(kind, fmt::format("{} (internal check `{}` failed at {}:{})", message, condition, file, line), file,
                line, condition);
  }
  throw Error(kind, message, file, line, condition);
}
}  // namespace detail

// `text` made safe to print on a terminal: printable ASCII and well-formed UTF-8 of printable
// code points pass unchanged; every other byte (C0/C1 controls, DEL, stray or overlong UTF-8) is
// written `\xNN`, and a backslash `\\`, so a name can neither move the cursor nor hide text.
inline std::string printable(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  const auto escape = [&out](unsigned char c) {
    constexpr char kHex[] = "0123456789abcdef";
    out += "\\x";
    out += kHex[c >> 4];
    out += kHex[c & 0xF];
  };
  for (size_t i = 0; i < text.size();) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c >= 0x20 && c < 0x7F) {
      if (c == '\\') out += '\\';
      out += static_cast<char>(c);
      ++i;
      continue;
    }
    // A UTF-8 sequence passes whole when it is well formed (no overlong form, no surrogate, at
    // most U+10FFFF) and its code point is not a C1 control (U+0080..U+009F).
    const size_t len = c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
    uint32_t cp = len == 2 ? (c & 0x1Fu) : len == 3 ? (c & 0x0Fu) : (c & 0x07u);
    bool ok = len != 0 && i + len <= text.size();
    for (size_t j = 1; ok && j < len; ++j) {
      const auto d = static_cast<unsigned char>(text[i + j]);
      ok = (d & 0xC0) == 0x80;
      cp = (cp << 6) | (d & 0x3Fu);
    }
    ok = ok && cp >= 0xA0 && !(len == 3 && cp < 0x800) && !(len == 4 && (cp < 0x10000 || cp > 0x10FFFF)) &&
         !(cp >= 0xD800 && cp <= 0xDFFF);
    if (ok) {
      out.append(text.substr(i, len));
      i += len;
    } else {
      escape(c);
      ++i;
    }
  }
  return out;
}

}  // namespace qc

// `QC_CHECK(cond, "format {}", args...)`: an invariant of the library; failure is a bug (exit 3).
#define QC_CHECK(cond, ...) QC_DETAIL_CHECK(::qc::ErrorKind::internal, cond, #cond, __VA_ARGS__)

// `QC_INPUT(cond, "format {}", args...)`: validation of user input; the message must name the
// file, the field, what was expected and what was found (exit 2).
#define QC_INPUT(cond, ...) QC_DETAIL_CHECK(::qc::ErrorKind::input, cond, #cond, __VA_ARGS__)

// Both: an error of `kind` naming this file and line and the condition's text as written (`text`,
// stringized by the caller before `cond` is expanded).
#define QC_DETAIL_CHECK(kind, cond, text, ...)                                                       \
  do {                                                                                               \
    if (!(cond)) {                                                                                   \
      ::qc::detail::throw_error(kind, __FILE__, __LINE__, text, ::fmt::format(__VA_ARGS__));        \
    }                                                                                                \
  } while (0)

// Unconditional failures.
#define QC_FAIL_INPUT(...) \
  ::qc::detail::throw_error(::qc::ErrorKind::input, __FILE__, __LINE__, "input", ::fmt::format(__VA_ARGS__))
// An arm failed while it ran (crash, hang, exit, a write into its inputs): the CLI exits 1.
#define QC_FAIL_ARM(...) \
  ::qc::detail::throw_error(::qc::ErrorKind::arm_failure, __FILE__, __LINE__, "arm", ::fmt::format(__VA_ARGS__))
#define QC_FAIL(...) \
  ::qc::detail::throw_error(::qc::ErrorKind::internal, __FILE__, __LINE__, "unreachable", ::fmt::format(__VA_ARGS__))

// Debug-only assertion for hot loops (on in tests, which build with assertions).
#ifndef NDEBUG
#define QC_DCHECK(cond, ...) QC_CHECK(cond, __VA_ARGS__)
#else
#define QC_DCHECK(cond, ...) \
  do {                       \
  } while (0)
#endif
