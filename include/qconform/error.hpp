// One exception type for the whole library, and the check macros that throw it.
//
// `qc::Error` carries the source file, line and failed condition, plus a kind: `input` for bad
// input or usage (the CLI exits 2), `internal` for a broken invariant (exit 3), `failed` is
// never thrown by checks and exists for completeness of the exit-code mapping. The library never
// calls `exit()`: the Python binding must survive every error.
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace qc {

enum class ErrorKind { input, internal };

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

}  // namespace qc

// `QC_CHECK(cond, "format {}", args...)`: an invariant of the library; failure is a bug (exit 3).
#define QC_CHECK(cond, ...)                                                                          \
  do {                                                                                               \
    if (!(cond)) {                                                                                   \
      ::qc::detail::throw_error(::qc::ErrorKind::internal, __FILE__, __LINE__, #cond,                \
                                ::fmt::format(__VA_ARGS__));                                         \
    }                                                                                                \
  } while (0)

// `QC_INPUT(cond, "format {}", args...)`: validation of user input; the message must name the
// file, the field, what was expected and what was found (exit 2).
#define QC_INPUT(cond, ...)                                                                          \
  do {                                                                                               \
    if (!(cond)) {                                                                                   \
      ::qc::detail::throw_error(::qc::ErrorKind::input, __FILE__, __LINE__, #cond,                   \
                                ::fmt::format(__VA_ARGS__));                                         \
    }                                                                                                \
  } while (0)

// Unconditional failures.
#define QC_FAIL_INPUT(...) \
  ::qc::detail::throw_error(::qc::ErrorKind::input, __FILE__, __LINE__, "input", ::fmt::format(__VA_ARGS__))
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
