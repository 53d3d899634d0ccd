#include "core/shard_index.hpp"

#include <filesystem>

#include "qconform/error.hpp"
#include "core/limits.hpp"
#include "core/fileio.hpp"

namespace qc {

namespace fs = std::filesystem;

ShardIndex read_shard_index_file(const std::string& index_path) {
  ShardIndex ix;
  ix.path = index_path;
  const fs::path parent = fs::path(index_path).parent_path();
  ix.dir = parent.empty() ? fs::path(".").string() : parent.string();
  ix.json = parse_json(read_file(ix.path), ix.path);
  const nlohmann::json& j = ix.json;
  QC_INPUT(j.is_object() && j.contains("weight_map") && j["weight_map"].is_object() && !j["weight_map"].empty(),
           "{}: field `weight_map`: expected an object mapping tensor names to shard files, found {}", ix.path,
           j.is_object() && j.contains("weight_map") ? j["weight_map"].dump().substr(0, 80) : "none");
  for (const auto& [tensor, shard] : j["weight_map"].items()) {
    QC_INPUT(shard.is_string(), "{}: field `weight_map.{}`: expected a shard file name, found {}", ix.path, tensor,
             shard.dump());
    const std::string name = shard.get<std::string>();
    QC_INPUT(!name.empty() && name != "." && name != ".." && name.find('/') == std::string::npos &&
                 name.find('\\') == std::string::npos,
             "{}: field `weight_map.{}`: expected a file name in {}, found `{}`", ix.path, tensor, ix.dir, name);
    ix.weight_map.emplace(tensor, name);
    ix.shards.insert(name);
  }
  for (const std::string& shard : ix.shards) {
    QC_INPUT(fs::exists(fs::path(ix.dir) / shard), "{}: shard `{}`: expected the file {}, found none", ix.path, shard,
             (fs::path(ix.dir) / shard).string());
  }
  return ix;
}

}  // namespace qc
