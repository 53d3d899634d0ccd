// `qconform join M1 M2 --treatment arm`: check C0, the identity contract. Verifies field by field
// that two runs differ only in the declared treatment and fails closed (exit 1, naming every
// offending field with both values) otherwise. `--allow-unverified` lets an analysis proceed
// (exit 0) but records `"unverified": true` and the violations in the JSON output.
#include <fmt/format.h>

#include "cli/cli.hpp"
#include "cli/paths.hpp"
#include "qconform/error.hpp"
#include "core/limits.hpp"
#include "core/fileio.hpp"
#include "qconform/manifest.hpp"

namespace qc::cli {
namespace {

nlohmann::json read_json(const std::string& path) {
  return parse_json(read_file(path), path);
}

VerbRunner setup_join(CLI::App& app) {
  auto m1 = std::make_shared<std::string>();
  auto m2 = std::make_shared<std::string>();
  auto treatment = std::make_shared<std::string>("arm");
  auto allow = std::make_shared<bool>(false);
  auto rehash = std::make_shared<bool>(true);
  auto json_out = std::make_shared<std::string>();
  auto verbose = std::make_shared<bool>(false);
  app.add_option("manifest_a", *m1, "first run's manifest (JSON)")->required();
  app.add_option("manifest_b", *m2, "second run's manifest (JSON)")->required();
  app.add_option("--treatment", *treatment,
                 "the declared difference: `arm` (label, kernel evidence, selection environment) or a field path "
                 "such as `config.scale_mode`")
      ->capture_default_str();
  app.add_flag("--allow-unverified", *allow,
               "report violations but let the analysis proceed (exit 0); recorded as \"unverified\": true");
  app.add_flag("--rehash,!--no-rehash", *rehash,
               "hash the recorded input files again where they exist on disk (default on)");
  app.add_option("--json", *json_out, "write the per-field results as JSON (atomically)");
  app.add_flag("--verbose", *verbose, "print every compared field, not only the violations");
  return [=] {
    check_output_paths({{"MANIFEST_A", *m1}, {"MANIFEST_B", *m2}}, {{"--json", *json_out}});
    const JoinResult r = join_manifest_json(read_json(*m1), read_json(*m2), *treatment, *rehash, *m1, *m2);
    const std::vector<std::string> violations = describe_violations(r);
    if (*verbose) {
      for (const FieldResult& f : r.fields) {
        fmt::print("{:<48} {:<24} {}\n", f.field, f.status, f.note);
      }
      fmt::print("\n");
    }
    for (const FieldResult& f : r.fields) {
      if (f.status == "differs (treatment)") fmt::print("treatment  {}: {} -> {}\n", f.field, f.a.dump(), f.b.dump());
    }
    for (const std::string& v : violations) fmt::print("VIOLATION  {}\n", v);
    const bool unverified = !r.verified();
    fmt::print("{} {:<22} {:<8} {}\n", r.c0.id, r.c0.title, verdict_name(r.c0.verdict), r.c0.summary);
    if (unverified && *allow) {
      fmt::print("--allow-unverified: the analysis proceeds on unverified data; every output records it\n");
    }
    if (!json_out->empty()) {
      nlohmann::json j = to_json(r);
      j["allow_unverified"] = *allow;
      j["unverified"] = unverified;
      j["rehash"] = *rehash;
      write_file_atomic(*json_out, j.dump(1) + "\n");
    }
    return unverified && !*allow ? kExitCheckFailed : kExitOk;
  };
}

RegisterVerb register_join{{"join", "C0: verify that two runs' manifests differ only in the declared treatment", 150,
                            setup_join}};

}  // namespace
}  // namespace qc::cli
