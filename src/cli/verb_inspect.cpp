// `qconform inspect FILE`: what a safetensors or .npy file holds (tensors with dtype, shape, size
// and SHA-256 of their bytes; metadata), after the reader's full validation. A malformed file is
// an input error (exit 2) whose message names the file, the tensor and the broken rule.
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <optional>

#include "cli/cli.hpp"
#include "cli/paths.hpp"
#include "core/fileio.hpp"
#include "core/npy.hpp"
#include "core/safetensors.hpp"
#include "core/sha256.hpp"

namespace qc::cli {
namespace {

struct InspectOptions {
  std::string path;
  std::string json_path;
  std::string opaque;
};

VerbRunner setup_inspect(CLI::App& app) {
  auto opt = std::make_shared<InspectOptions>();
  app.add_option("file", opt->path, "a .safetensors or .npy file")->required();
  app.add_option("--json", opt->json_path, "also write the listing as JSON (full sha256 digests) to this file");
  app.add_option("--opaque", opt->opaque,
                 ".npy only: read opaque void types (`<V2`, `<V1`, how np.save writes ml_dtypes arrays) as this "
                 "dtype (bf16, e4m3, e5m2)");
  return [opt] {
    check_output_paths({{"FILE", opt->path}}, {{"--json", opt->json_path}});
    std::optional<DType> opaque;
    if (!opt->opaque.empty()) {
      opaque = dtype_from_name(opt->opaque);
      QC_INPUT(opaque.has_value(), "--opaque: expected a dtype name (bf16, e4m3, e5m2, ...), found `{}`", opt->opaque);
    }
    // The file is opened and mapped once: its digest, its format and its tensors all come from that
    // one mapping, so a file renamed or replaced meanwhile cannot mix two files' contents (and one
    // that shrinks is reported as such: docs/hostile-inputs.md).
    const auto mapping = std::make_shared<const MappedFile>(opt->path);
    const std::string file_digest = sha256_digest(mapping->bytes());
    const bool npy = is_npy(mapping->bytes());
    std::vector<std::pair<std::string, Tensor>> tensors;
    std::map<std::string, std::string> metadata;
    if (npy) {
      tensors.emplace_back("(array)", parse_npy(mapping->bytes(), opt->path, mapping, opaque));
    } else {
      SafetensorsFile f = parse_safetensors(mapping->bytes(), opt->path, mapping);
      tensors = std::move(f.tensors);
      metadata = std::move(f.metadata);
    }

    nlohmann::ordered_json j;
    j["file"] = opt->path;
    j["format"] = npy ? "npy" : "safetensors";
    j["sha256"] = file_digest;
    j["metadata"] = metadata;
    j["tensors"] = nlohmann::ordered_json::array();
    uint64_t total = 0;
    size_t name_width = 4;
    for (const auto& [name, t] : tensors) name_width = std::max(name_width, name.size());
    std::vector<std::string> lines;
    for (const auto& [name, t] : tensors) {
      const std::string digest = sha256_digest(t.contiguous().bytes());
      total += t.nbytes();
      lines.push_back(fmt::format("  {:<{}}  {:<5} {:<16} {:>12}  {}", name, name_width, dtype_name(t.dtype()),
                                  shape_string(t.shape()), t.nbytes(), digest.substr(0, 7 + 12)));
      j["tensors"].push_back({{"name", name},
                              {"dtype", std::string(dtype_name(t.dtype()))},
                              {"shape", t.shape()},
                              {"nbytes", t.nbytes()},
                              {"sha256", digest}});
    }

    fmt::print("{}: {}, {} tensor{}, {} bytes of tensor data\n", opt->path, npy ? ".npy" : "safetensors",
               tensors.size(), tensors.size() == 1 ? "" : "s", total);
    fmt::print("file {}\n", file_digest);
    if (!metadata.empty()) {
      fmt::print("metadata:\n");
      // JSON quoting keeps newlines and control characters in values visible and on one line.
      for (const auto& [k, v] : metadata) {
        fmt::print("  {}: {}\n", k, nlohmann::json(v).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
      }
    }
    fmt::print("tensors (file order):\n  {:<{}}  {:<5} {:<16} {:>12}  {}\n", "name", name_width, "dtype", "shape",
               "bytes", "sha256 (prefix)");
    for (const auto& line : lines) fmt::print("{}\n", line);
    if (!opt->json_path.empty()) write_file_atomic(opt->json_path, j.dump(2) + "\n");
    return kExitOk;
  };
}

RegisterVerb register_inspect{{"inspect", "List the tensors and metadata of a safetensors or .npy file (validates it)",
                               15, setup_inspect}};

}  // namespace
}  // namespace qc::cli
