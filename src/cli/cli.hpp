// The CLI's verb registry. Each verb lives in its own file `src/cli/verb_<name>.cpp` and
// registers itself with a static `qc::cli::RegisterVerb`; `main.cpp` builds the CLI11 app from
// the registry. Conventions for every verb: human summary on stdout, machine results with
// `--json FILE` (written atomically), exit 0 = all checks passed, 1 = a check failed,
// 2 = bad usage or bad input, 3 = internal error.
#pragma once

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "qconform/error.hpp"

namespace qc::cli {

enum ExitCode : int { kExitOk = 0, kExitCheckFailed = 1, kExitBadInput = 2, kExitInternal = 3 };

// `setup` adds the verb's options to its subcommand and returns the function that runs it.
using VerbRunner = std::function<int()>;
using VerbSetup = std::function<VerbRunner(CLI::App&)>;

struct Verb {
  std::string name;
  std::string help;
  int order;  // position in `qconform --help`
  VerbSetup setup;
};

std::vector<Verb>& verbs();

struct RegisterVerb {
  explicit RegisterVerb(Verb verb) { verbs().push_back(std::move(verb)); }
};

// True when stderr is a terminal: progress bars are drawn only then.
bool stderr_is_terminal();

// Validators for numeric options, one message style for every verb, in qconform's words:
//   --bootstrap: expected a positive integer, found 0
//   --max-flip-rate: expected a finite number in [0, 1], found nan
// CLI11's own validators print bounds such as 1.79769e+308 in 300 digits, let NaN through
// (`CLI::Range`, `CLI::NonNegativeNumber`: every comparison with NaN is false) and an unsigned
// option accepts "-1" and wraps it to 2^64 - 1. Every numeric option uses one of these; the
// integer ones take the option's variable to know its type's range.
namespace numeric {

// The value shown after "found": the text as given, escaped, or "nothing".
inline std::string found(const std::string& text) {
  return text.empty() ? std::string("nothing") : printable(text.size() > 80 ? text.substr(0, 80) + "..." : text);
}

// `text` as an integer in [lo, hi] (digits, one leading '-' for a negative bound), or the message.
// A leading zero is refused: CLI11 converts with strtoll base 0, which reads "010" as octal 8
// (and "0x10" as 16, refused here too: not digits).
inline std::string check_integer(const std::string& text, long double lo, long double hi, const std::string& what,
                                 bool hi_in_what) {
  const bool negative = !text.empty() && text[0] == '-';
  const std::string digits = negative ? text.substr(1) : text;
  if (digits.empty() || digits.find_first_not_of("0123456789") != std::string::npos) {
    return "expected " + what + ", found " + found(text);
  }
  if (digits.size() > 1 && digits[0] == '0') {
    return "expected " + what + " written without leading zeros (it would be read as octal), found " + found(text);
  }
  long double v = 0;
  for (char c : digits) v = v * 10 + (c - '0');  // exact up to 2^64 (long double has 64 mantissa bits)
  if (negative) v = -v;
  if (v < lo) return "expected " + what + ", found " + found(text);
  if (v > hi) {
    return "expected " + what +
           (hi_in_what ? "" : " of at most " + CLI::detail::to_string(static_cast<unsigned long long>(hi))) +
           ", found " + found(text);
  }
  return "";
}

inline std::string describe_integers(long double lo, long double hi, bool hi_is_type_max) {
  if (lo == 1 && hi_is_type_max) return "a positive integer";
  if (lo == 0 && hi_is_type_max) return "a non-negative integer";
  return "an integer in [" + CLI::detail::to_string(static_cast<long long>(lo)) + ", " +
         CLI::detail::to_string(static_cast<long long>(hi)) + "]";
}

}  // namespace numeric

// `integer_in(variable, lo, hi)`: an integer in [lo, hi] (hi defaults to the largest value of the
// variable's type).
template <class T>
CLI::Validator integer_in(const T& /*variable*/, T lo, T hi = std::numeric_limits<T>::max()) {
  static_assert(std::is_integral_v<T>, "integer_in takes an integer option's variable");
  const std::string what = numeric::describe_integers(static_cast<long double>(lo), static_cast<long double>(hi),
                                                      hi == std::numeric_limits<T>::max());
  return CLI::Validator(
      [lo, hi, what](std::string& text) {
        return numeric::check_integer(text, static_cast<long double>(lo), static_cast<long double>(hi), what,
                                      hi != std::numeric_limits<T>::max());
      },
      lo == 1 && hi == std::numeric_limits<T>::max()   ? "INT>0"
      : lo == 0 && hi == std::numeric_limits<T>::max() ? "INT>=0"
                                                       : "INT in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
}

// Counts, sizes, depths: 1 or more.
template <class T>
CLI::Validator positive_integer(const T& variable) {
  return integer_in(variable, T{1});
}

// Seeds, thread counts (0: all cores), tolerances in ulps: 0 or more.
template <class T>
CLI::Validator non_negative_integer(const T& variable) {
  return integer_in(variable, T{0});
}

// An integer option with its default shown in --help, checked by `positive_integer` (a count, a size)
// or `non_negative_integer` (a seed, a thread count, a tolerance).
template <class T>
CLI::Option* add_positive_option(CLI::App& app, const std::string& name, T& variable, const std::string& help) {
  return app.add_option(name, variable, help)->capture_default_str()->check(positive_integer(variable));
}
template <class T>
CLI::Option* add_non_negative_option(CLI::App& app, const std::string& name, T& variable, const std::string& help) {
  return app.add_option(name, variable, help)->capture_default_str()->check(non_negative_integer(variable));
}

// `number_in(lo, hi, what)`: a finite number in [lo, hi], described as `what` (default "a finite
// number in [lo, hi]").
inline CLI::Validator number_in(double lo, double hi, std::string what = "", std::string type_name = "") {
  if (what.empty()) what = "a finite number in [" + CLI::detail::to_string(lo) + ", " + CLI::detail::to_string(hi) + "]";
  return CLI::Validator(
      [lo, hi, what](std::string& text) -> std::string {
        char* end = nullptr;
        const double v = std::strtod(text.c_str(), &end);
        if (text.empty() || end != text.c_str() + text.size() || !std::isfinite(v) || v < lo || v > hi) {
          return "expected " + what + ", found " + numeric::found(text);
        }
        return "";
      },
      type_name.empty() ? "NUMBER in [" + CLI::detail::to_string(lo) + ", " + CLI::detail::to_string(hi) + "]" : type_name);
}

// Rates and levels: a finite number in [lo, hi].
inline CLI::Validator finite_in(double lo, double hi) { return number_in(lo, hi); }

}  // namespace qc::cli
