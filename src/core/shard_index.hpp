// The index of a sharded safetensors set, as Hugging Face writes it for large checkpoints
// (`model.safetensors.index.json`) and qconform for large operand sets (`OPS.index.json`,
// docs/formats.md): a JSON object whose `weight_map` maps every tensor name to the shard file (a
// file name in the index's directory) that holds it.
#pragma once

#include <nlohmann/json.hpp>

#include <map>
#include <set>
#include <string>

namespace qc {

struct ShardIndex {
  std::string path;                               // the index file
  std::string dir;                                // its directory: shard names are relative to it
  std::map<std::string, std::string> weight_map;  // tensor -> shard file name
  std::set<std::string> shards;                   // sorted: the identity does not depend on the index's order
  nlohmann::json json;                            // the whole index (fields beyond `weight_map`)
};

// Strict: the index is a JSON object with a non-empty `weight_map` of plain file names (no path
// separators, not `.` or `..`), each an existing file beside the index; input errors name the
// index, the field, what was expected and what was found.
ShardIndex read_shard_index_file(const std::string& index_path);

}  // namespace qc
