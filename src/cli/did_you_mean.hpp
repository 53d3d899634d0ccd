// "Did you mean" for the command line: after CLI11 refuses a command line, the verb or the flags it
// did not know, each with the nearest names the verb has (core/suggest.hpp's edit distance).
#pragma once

#include <CLI/CLI.hpp>

#include <string>

namespace qc::cli {

// One line per unknown verb or flag of `argv` that has a near name ("--arsm: did you mean
// `--arms`?"), "" when there is none. `app` is the parsed (or refused) application.
std::string unknown_name_hints(const CLI::App& app, int argc, const char* const* argv);

}  // namespace qc::cli
