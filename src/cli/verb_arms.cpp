// `qconform arms`: every arm this build contains, with its identity and declared formula.
#include <fmt/format.h>

#include "cli/cli.hpp"
#include "qconform/arm.hpp"

namespace qc::cli {
namespace {

VerbRunner setup_arms(CLI::App& app) {
  return [] {
    const auto labels = list_arms();
    fmt::print("{} arms in this build ({})\n", labels.size(), cpu_description());
    for (const ArmBackend& backend : arm_backends()) {
      fmt::print("\n{}: {}\n", backend.prefix, backend.help);
      for (const std::string& variant : backend.variants()) {
        const ArmInfo info = make_arm(fmt::format("{}:{}", backend.prefix, variant))->info();
        fmt::print("  {:<32} {}{}{}{}\n", info.label, info.description,
                   info.epilogue.empty() ? "" : fmt::format(" [epilogue {}]", info.epilogue),
                   info.accumulation_model.empty() ? "" : fmt::format(" [accumulation {}]", info.accumulation_model),
                   info.exposes_accumulator ? " [exposes acc]" : "");
      }
    }
    for (const AbsentBackend& absent : absent_arm_backends()) {
      fmt::print("\n{}: absent from this build: {}\n", absent.prefix, absent.reason);
    }
    return kExitOk;
  };
}

RegisterVerb register_arms{{"arms", "List the arms (implementations) this build contains", 10, setup_arms}};

}  // namespace
}  // namespace qc::cli
