// The paths a verb reads and writes, checked before any work (`qc::check_output_paths`): an output
// may never be an input, another output, or anything but a regular file. Each verb lists every
// input and every output it will touch, default-derived ones included (`<output>.manifest.json`).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "qconform/arm.hpp"
#include "qconform/error.hpp"
#include "core/fileio.hpp"
#include "model/model.hpp"
#include "core/shard_index.hpp"

namespace qc::cli {

// The file an arm label loads, as an input (`qc::arm_file_of`, the registry's one label parser: every
// backend registered with `variant_is_file`, `plugin:` and `plugin-inproc:` today); none for built-in arms.
inline void add_arm_inputs(std::vector<PathUse>& inputs, const std::string& option, const std::string& label) {
  if (const std::string file = arm_file_of(label); !file.empty()) inputs.push_back({option, file});
}

// A model given by path: the llama2.c file, or an HF directory's config and weight files.
inline void add_model_inputs(std::vector<PathUse>& inputs, const std::string& option, const std::string& model) {
  if (model.empty()) return;
  inputs.push_back({option, model});
  try {
    for (const auto& [role, file] : model_files(model)) inputs.push_back({option + " (" + role + ")", file});
  } catch (const Error&) {
    // An unreadable model is reported, with its own message, when it is loaded.
  }
}

// An operand set: the file, or a sharded set's index and every shard it names.
inline void add_operand_inputs(std::vector<PathUse>& inputs, const std::string& option, const std::string& path) {
  if (path.empty()) return;
  inputs.push_back({option, path});
  if (path.size() < 11 || path.compare(path.size() - 11, 11, ".index.json") != 0) return;
  try {
    const ShardIndex ix = read_shard_index_file(path);
    for (const std::string& shard : ix.shards) inputs.push_back({option + " (shard)", ix.dir + "/" + shard});
  } catch (const Error&) {
    // A malformed index is reported, with its own message, when the set is opened.
  }
}

// `--arm A --json F` verbs (boundary, identify): the arm's file and F checked, then the arm made.
inline std::unique_ptr<Arm> checked_arm(const std::string& label, const std::string& json) {
  std::vector<PathUse> paths_in;
  add_arm_inputs(paths_in, "--arm", label);
  check_output_paths(paths_in, {{"--json", json}});
  return make_arm(label);
}

// The manifest path `write_run_manifest` will use.
inline std::string manifest_path(const std::string& explicit_path, const std::string& primary_output) {
  return !explicit_path.empty() ? explicit_path : primary_output.empty() ? std::string() : primary_output + ".manifest.json";
}

}  // namespace qc::cli
