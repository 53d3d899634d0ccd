// `qconform mutants`: the detection matrix of the positive controls.
#include <fmt/format.h>

#include <algorithm>

#include "cli/cli.hpp"
#include "cli/paths.hpp"
#include "core/fileio.hpp"
#include "orchestrate/mutant_matrix.hpp"

namespace qc::cli {
namespace {

void print_row(const MutantRow& r) {
  std::string cells;
  for (const CheckResult& c : r.checks) {
    const bool fired = c.verdict == Verdict::fail;
    const bool stage = std::find(r.stage_checks.begin(), r.stage_checks.end(), c.id) != r.stage_checks.end();
    cells += fmt::format(" {:^6}", fired ? (stage ? "FIRED*" : "fired") : (c.verdict == Verdict::pass ? "." : "-"));
  }
  const std::string verdict = r.arm.is_mutant ? (r.caught_by_stage ? "caught by its stage check"
                                                 : r.caught          ? "caught, NOT by its stage check"
                                                                     : "SLIPPED THROUGH")
                                              : (r.fired.empty() ? "control: nothing fired" : "CONTROL FIRED");
  const std::string against =
      r.arm.accumulation_model.empty() ? "" : fmt::format(" (FP8: vs {} on FP8 operands)", r.reference);
  fmt::print("{:<28} {:<13}{}  {}{}\n", r.arm.label, r.arm.is_mutant ? r.arm.breaks_stage : "(control)", cells, verdict,
             against);
}

VerbRunner setup_mutants(CLI::App& app) {
  auto json = std::make_shared<std::string>();
  auto reference = std::make_shared<std::string>("cpu:vllm-cutlass");
  auto details = std::make_shared<bool>(false);
  app.add_option("--reference", *reference, "the correct arm the mutants are compared with")->capture_default_str();
  app.add_option("--json", *json, "write the matrix as JSON");
  app.add_flag("--details", *details, "print the evidence of every check that fired");
  return [=] {
    std::vector<PathUse> paths_in;
    add_arm_inputs(paths_in, "--reference", *reference);
    check_output_paths(paths_in, {{"--json", *json}});
    const MutantMatrix m = run_mutant_matrix(*reference);
    fmt::print("detection matrix: each mutant vs {} (FIRED* = the check for the stage it breaks)\n\n", m.reference);
    std::string header;
    for (const CheckResult& c : m.control.checks) header += fmt::format(" {:^6}", c.id);
    fmt::print("{:<28} {:<13}{}\n", "arm", "breaks", header);
    print_row(m.control);
    for (const MutantRow& r : m.rows) print_row(r);
    if (*details) {
      for (const MutantRow& r : m.rows) {
        fmt::print("\n{} ({})\n", r.arm.label, r.arm.description);
        for (const CheckResult& c : r.checks) {
          if (c.verdict == Verdict::fail) fmt::print("  {} {}: {}\n", c.id, c.title, c.summary);
        }
      }
    }
    const bool ok = m.all_caught_by_stage();
    fmt::print("\n{}\n", ok ? "every mutant was caught by the check for the stage it breaks; the control passed"
                            : "NOT every mutant was caught by its stage check (or the control fired): a finding to fix in the checks");
    if (!json->empty()) write_file_atomic(*json, to_json(m).dump(1) + "\n");
    return ok ? kExitOk : kExitCheckFailed;
  };
}

RegisterVerb register_mutants{{"mutants", "Positive controls: which check catches each deliberately faulty arm", 60,
                               setup_mutants}};

}  // namespace
}  // namespace qc::cli
