// "Did you mean" for unknown verbs and flags (did_you_mean.hpp).
#include "cli/did_you_mean.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <string_view>
#include <vector>

#include "core/fileio.hpp"
#include "core/suggest.hpp"

namespace qc::cli {

namespace {

// Every long name of the verb's options as typed (`--arms`, and an old spelling such as `--pair`),
// with the option's first name, which a suggestion names (an alias is never the one suggested).
struct FlagName {
  std::string typed, canonical;
};
std::vector<FlagName> flag_names(const CLI::App& verb) {
  std::vector<FlagName> names = {{"--help", "--help"}};
  for (const CLI::Option* opt : verb.get_options()) {
    const std::vector<std::string>& l = opt->get_lnames();
    for (const std::string& n : l) names.push_back({"--" + n, "--" + l.front()});
  }
  return names;
}

// `did_you_mean` over the typed names, naming the canonical ones.
std::string flag_hint(const std::string& flag, const std::vector<FlagName>& names) {
  std::vector<std::string> typed;
  for (const FlagName& n : names) typed.push_back(n.typed);
  std::vector<std::string> canonical;
  for (const std::string& near : nearest_names(flag, typed)) {
    for (const FlagName& n : names) {
      if (n.typed == near && std::find(canonical.begin(), canonical.end(), n.canonical) == canonical.end()) {
        canonical.push_back(n.canonical);
      }
    }
  }
  return did_you_mean_sentence(canonical);
}

}  // namespace

std::string unknown_name_hints(const CLI::App& app, int argc, const char* const* argv) {
  std::vector<std::string> verbs;
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) verbs.push_back(sub->get_name());
  // The verb is the first argument that names one; before it, a word that is none is a misspelt verb.
  const CLI::App* verb = nullptr;
  std::string out;
  int i = 1;
  for (; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg.rfind("-", 0) == 0) continue;
    for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) {
      if (sub->get_name() == arg) verb = sub;
    }
    if (verb == nullptr) {
      const std::string hint = did_you_mean(arg, verbs);
      if (!hint.empty()) out += fmt::format("qconform: unknown verb `{}`{}\n", printable_text(arg), hint);
    }
    break;
  }
  if (verb == nullptr) return out;
  const std::vector<FlagName> names = flag_names(*verb);
  for (++i; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--") break;  // the rest are positional
    if (arg.rfind("--", 0) != 0) continue;
    const std::string flag(arg.substr(0, arg.find('=')));
    if (verb->get_option_no_throw(flag) != nullptr || flag == "--help") continue;
    const std::string hint = flag_hint(flag, names);
    out += fmt::format("qconform {}: unknown flag `{}`{}\n", verb->get_name(), printable_text(flag),
                       hint.empty() ? fmt::format(" (see `qconform {} --help`)", verb->get_name()) : hint);
  }
  return out;
}

}  // namespace qc::cli
