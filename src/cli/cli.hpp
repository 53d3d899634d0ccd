// The CLI's verb registry. Each verb lives in its own file `src/cli/verb_<name>.cpp` and
// registers itself with a static `qc::cli::RegisterVerb`; `main.cpp` builds the CLI11 app from
// the registry. Conventions for every verb: human summary on stdout, machine results with
// `--json FILE` (written atomically), exit 0 = all checks passed, 1 = a check failed,
// 2 = bad usage or bad input, 3 = internal error.
#pragma once

#include <CLI/CLI.hpp>

#include <cmath>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

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

// Validators for numeric options. CLI11's own let two things through: NaN passes `CLI::Range`
// and `CLI::NonNegativeNumber` (every comparison with NaN is false), and an unsigned option
// accepts "-1" and wraps it to 2^64 - 1. Every seed, count and rate option uses one of these.
//
// `non_negative_integer`: digits only (seeds, thread counts: 0 is allowed).
inline CLI::Validator non_negative_integer() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        if (text.empty() || text.find_first_not_of("0123456789") != std::string::npos) {
          return "expected a non-negative integer, found `" + text + "`";
        }
        return "";
      },
      "INT>=0");
}

// `finite_in(lo, hi)`: a finite number in [lo, hi].
inline CLI::Validator finite_in(double lo, double hi) {
  return CLI::Validator(
      [lo, hi](std::string& text) -> std::string {
        char* end = nullptr;
        const double v = std::strtod(text.c_str(), &end);
        if (text.empty() || end != text.c_str() + text.size() || !std::isfinite(v) || v < lo || v > hi) {
          return "expected a finite number in [" + CLI::detail::to_string(lo) + ", " + CLI::detail::to_string(hi) +
                 "], found `" + text + "`";
        }
        return "";
      },
      "FINITE in [" + CLI::detail::to_string(lo) + ", " + CLI::detail::to_string(hi) + "]");
}

}  // namespace qc::cli
