// `qconform boundary --arm A`: C1, the arithmetic preconditions, through the arm itself.
#include <fmt/format.h>

#include "cli/cli.hpp"
#include "cli/paths.hpp"
#include "checks/c1_boundary.hpp"
#include "core/fileio.hpp"

namespace qc::cli {
namespace {

VerbRunner setup_boundary(CLI::App& app) {
  auto arm_label = std::make_shared<std::string>();
  auto json = std::make_shared<std::string>();
  auto verbose = std::make_shared<bool>(false);
  app.add_option("--arm", *arm_label, "the arm to test (see `qconform arms`)")->required();
  app.add_option("--json", *json, "write the results as JSON");
  app.add_flag("--verbose,-v", *verbose, "print every case, not only failures and summaries");
  auto seed = std::make_shared<uint64_t>(Fp8MeasureOptions{}.seed);
  add_non_negative_option(app, "--seed", *seed, "FP8 arms: seed of the confirmation operands");
  return [=] {
    auto arm = checked_arm(*arm_label, *json);
    BoundaryOptions options;
    options.fp8.seed = *seed;
    const BoundaryResult r = run_boundary(*arm, options);
    fmt::print("boundary suite (C1) for {}\n  kernel: {}\n  device: {}\n  build: {}\n\n", r.arm.label, r.record.kernel,
               r.record.device, r.record.build);
    if (r.fp8) fmt::print("{}\n", describe(*r.fp8));
    if (r.block) fmt::print("{}\n", describe(*r.block));
    std::string group;
    for (const BoundaryCase& c : r.cases) {
      if (!*verbose && c.verdict == Verdict::pass && c.group == group) continue;
      group = c.group;
      fmt::print("  {:<22} {:<46} {}\n", verdict_name(c.verdict), c.id, c.detail);
      if (c.verdict == Verdict::fail) fmt::print("  {:<22} inputs: {}\n  {:<22} points to: {}\n", "", c.inputs, "", c.points_to);
    }
    fmt::print("\nC1 {}: {}\n", verdict_name(r.c1.verdict), r.c1.summary);
    if (r.c1.verdict == Verdict::fail) fmt::print("points to: {}\n", r.c1.points_to);
    if (!json->empty()) write_file_atomic(*json, to_json(r).dump(1) + "\n");
    if (r.c1.verdict == Verdict::fail) return kExitCheckFailed;
    if (!r.checked()) {
      fmt::print(stderr, "qconform: error: boundary: nothing to check: the arm {} ran no probe of {} (exit 0 would "
                         "claim a pass that was never checked)\n",
                 printable_text(r.arm.label), fmt::join(r.families_not_run, ", "));
      return kExitBadInput;
    }
    return kExitOk;
  };
}

RegisterVerb register_boundary{{"boundary", "C1: arithmetic preconditions (2^24, exact accumulation, pow2 commutation, "
                                            "bf16 midpoints, FTZ/DAZ) through an arm; FP8 arms: their accumulation "
                                            "model measured",
                                50, setup_boundary}};

}  // namespace
}  // namespace qc::cli
