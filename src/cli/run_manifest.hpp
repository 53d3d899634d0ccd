// `--manifest FILE` for every verb that produces an artefact: the C0 identity record of the run
// (input digests, project version, arm label and the kernel evidence the arm reported, platform,
// selection environment, configuration). Default: `<primary output>.manifest.json`.
#pragma once

#include <CLI/CLI.hpp>

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <filesystem>

#include "cli/paths.hpp"
#include "qconform/manifest.hpp"
#include "model/model.hpp"
#include "core/version.hpp"

namespace qc::cli {

inline void add_manifest_option(CLI::App& app, std::string& path) {
  app.add_option("--manifest", path, "write the run's manifest (C0 identity record) here; default: <output>.manifest.json");
}

// The manifest's path and text when `explicit_path` or `primary_output` is set (an empty path when
// none), for a caller that writes it together with its primary output (`write_files_atomic`).
inline std::pair<std::string, std::string> run_manifest_file(const std::string& explicit_path,
                                                             const std::string& primary_output, std::string_view kind,
                                                             std::string arm, std::optional<RunRecord> record,
                                                             const std::vector<std::pair<std::string, std::string>>& inputs,
                                                             nlohmann::json config,
                                                             const std::map<std::string, std::string>& digests = {}) {
  const std::string path = manifest_path(explicit_path, primary_output);
  if (path.empty()) return {};
  const Manifest m = make_manifest(kind, std::move(arm), std::move(record), inputs, std::move(config), digests);
  return {path, manifest_text(m)};
}

// Writes the manifest when `explicit_path` or `primary_output` is set; returns its path ("" when none).
inline std::string write_run_manifest(const std::string& explicit_path, const std::string& primary_output,
                                      std::string_view kind, std::string arm, std::optional<RunRecord> record,
                                      const std::vector<std::pair<std::string, std::string>>& inputs,
                                      nlohmann::json config, const std::map<std::string, std::string>& digests = {}) {
  auto [path, text] = run_manifest_file(explicit_path, primary_output, kind, std::move(arm), std::move(record), inputs,
                                        std::move(config), digests);
  if (!path.empty()) write_file_atomic(path, text);
  return path;
}

// A model's files as manifest inputs: a llama2.c file, or an HF directory's config and weights
// (the index and every shard of a sharded checkpoint).
inline std::vector<std::pair<std::string, std::string>> model_inputs(const std::string& model,
                                                                     const std::string& tokenizer) {
  std::vector<std::pair<std::string, std::string>> in = model_files(model);
  if (!tokenizer.empty()) in.emplace_back("tokenizer", tokenizer);
  return in;
}

// The treatment evidence of an fp32 (unquantized) run: qconform's own reference linear layers.
inline RunRecord fp32_record() {
  RunRecord r;
  r.arm = "fp32";
  r.kernel = "qconform fp32_linear (products summed in double, rounded to fp32 once)";
  r.device = cpu_description();
  r.library = "qconform " + version();
  r.build = build_flags();
  return r;
}

}  // namespace qc::cli
