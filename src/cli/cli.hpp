// The CLI's verb registry. Each verb lives in its own file `src/cli/verb_<name>.cpp` and
// registers itself with a static `qc::cli::RegisterVerb`; `main.cpp` builds the CLI11 app from
// the registry. Conventions for every verb: human summary on stdout, machine results with
// `--json FILE` (written atomically), exit 0 = all checks passed, 1 = a check failed,
// 2 = bad usage or bad input, 3 = internal error.
#pragma once

#include <CLI/CLI.hpp>

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

}  // namespace qc::cli
