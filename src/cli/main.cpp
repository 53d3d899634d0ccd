// qconform's command line: builds one CLI11 subcommand per registered verb and maps errors to
// exit codes (2 = bad usage or input, 3 = internal error).
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <map>

#include "cli/cli.hpp"
#include "qconform/error.hpp"

namespace qc::cli {

std::vector<Verb>& verbs() {
  static std::vector<Verb> registry;
  return registry;
}

bool stderr_is_terminal() { return isatty(fileno(stderr)) != 0; }

}  // namespace qc::cli

int main(int argc, char** argv) {
  using namespace qc::cli;
  CLI::App app{"qconform: are two implementations of a quantized linear layer interchangeable?\n"
               "Localizes any difference to the stage that made it and measures whether it changes tokens."};
  app.set_version_flag("--version", std::string("qconform ") + QC_VERSION);
  app.require_subcommand(1);
  app.fallthrough(false);

  auto registry = verbs();
  std::sort(registry.begin(), registry.end(), [](const Verb& a, const Verb& b) { return a.order < b.order; });
  std::map<CLI::App*, VerbRunner> runners;
  for (const Verb& verb : registry) {
    CLI::App* sub = app.add_subcommand(verb.name, verb.help);
    runners[sub] = verb.setup(*sub);
  }

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int code = app.exit(e);
    return code == 0 ? kExitOk : kExitBadInput;
  }

  try {
    for (auto& [sub, run] : runners) {
      if (sub->parsed()) return run();
    }
    return kExitBadInput;
  } catch (const qc::Error& e) {
    std::fprintf(stderr, "qconform: error: %s\n", e.what());
    return e.kind() == qc::ErrorKind::input ? kExitBadInput : kExitInternal;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "qconform: internal error: %s\n", e.what());
    return kExitInternal;
  }
}
