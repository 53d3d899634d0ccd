// `qconform checks`: the check table (C0–C8): what each check proves, what a violation points to
// first, its exclusions. `--markdown` prints the table of docs/checks.md, which is generated from it
// (the ctest `docs_checks_table` fails when the checked-in section differs).
#include <fmt/format.h>

#include "cli/cli.hpp"
#include "qconform/check.hpp"

namespace qc::cli {
namespace {

VerbRunner setup_checks(CLI::App& app) {
  auto markdown = std::make_shared<bool>(false);
  app.add_flag("--markdown", *markdown, "print the table as the Markdown section of docs/checks.md");
  return [markdown] {
    if (*markdown) {
      fmt::print("{}", check_table_markdown());
      return kExitOk;
    }
    for (const CheckSpec& s : check_table()) {
      fmt::print("{} {} ({})\n", s.id, s.title, s.falsifiable ? "falsifiable" : "tolerance-based");
      fmt::print("  proves:      {}\n", s.proves);
      fmt::print("  points to:   {}\n", s.points_to);
      if (s.exclusions.empty()) fmt::print("  exclusions:  none\n");
      for (size_t i = 0; i < s.exclusions.size(); ++i) {
        fmt::print("  {:<12} {}\n", i == 0 ? "exclusions:" : "", s.exclusions[i]);
      }
    }
    return kExitOk;
  };
}

RegisterVerb register_checks{
    {"checks", "The checks " + check_id_range() + ": what each proves, what a violation points to, its exclusions", 15, setup_checks}};

}  // namespace
}  // namespace qc::cli
