// `qconform identify --arm A`: which formula of the formula space the arm computes, found by
// designed probes through the arm and confirmed on held-out synthetic operands (docs/identify.md).
#include <fmt/format.h>

#include "checks/identify.hpp"
#include "cli/cli.hpp"
#include "cli/paths.hpp"
#include "core/fileio.hpp"

namespace qc::cli {
namespace {

VerbRunner setup_identify(CLI::App& app) {
  auto arm_label = std::make_shared<std::string>();
  auto json = std::make_shared<std::string>();
  auto seed = std::make_shared<uint64_t>(IdentifyOptions{}.seed);
  app.add_option("--arm", *arm_label, "the arm to identify (see `qconform arms`)")->required();
  app.add_option("--json", *json, "write the result as JSON");
  add_non_negative_option(app, "--seed", *seed, "seed of the probe design and the held-out operands");
  return [=] {
    auto arm = checked_arm(*arm_label, *json);
    IdentifyOptions options;
    options.seed = *seed;
    const IdentifyResult r = identify(*arm, options);
    fmt::print("{}", describe(r));
    if (!json->empty()) write_file_atomic(*json, to_json(r).dump(1) + "\n");
    return r.verdict == "unexplained" ? kExitCheckFailed : kExitOk;
  };
}

RegisterVerb register_identify{{"identify", "Name the formula an arm computes: designed probes over the formula space, "
                                            "then a held-out confirmation",
                                55, setup_identify}};

}  // namespace
}  // namespace qc::cli
