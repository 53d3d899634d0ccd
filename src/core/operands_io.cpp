#include "core/operands_io.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <exception>
#include <filesystem>
#include <future>
#include <iterator>
#include <mutex>
#include <semaphore>
#include <set>
#include <thread>
#include <tuple>
#include <utility>

#include <nlohmann/json.hpp>

#include "qconform/error.hpp"
#include "core/fileio.hpp"
#include "core/parallel.hpp"
#include "core/safetensors.hpp"
#include "core/sha256.hpp"
#include "core/shard_index.hpp"

namespace qc {

namespace {

constexpr std::string_view kParts[] = {".a_q", ".a_scale", ".w_q", ".w_scale", ".bias"};

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() > suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

const Tensor& expect(const SafetensorsFile& file, const std::string& key, DType dtype, int64_t min_rank,
                     int64_t max_rank) {
  QC_INPUT(file.contains(key), "{}: tensor `{}` is missing (every layer needs a_q, a_scale, w_q, w_scale)",
           file.path, key);
  const Tensor& t = file.at(key);
  QC_INPUT(t.dtype() == dtype, "{}: tensor `{}`: expected dtype {}, found {}", file.path, key,
           dtype_safetensors_name(dtype), dtype_safetensors_name(t.dtype()));
  QC_INPUT(t.ndim() >= min_rank && t.ndim() <= max_rank, "{}: tensor `{}`: expected rank {}{}, found shape {}",
           file.path, key, min_rank, min_rank == max_rank ? "" : fmt::format("..{}", max_rank),
           shape_string(t.shape()));
  QC_INPUT(t.is_contiguous(), "{}: tensor `{}` is not contiguous", file.path, key);
  return t;
}

// An operand's codes: int8, or OCP FP8 (F8_E4M3, F8_E5M2) for an FP8 layer.
ElementType code_type(const SafetensorsFile& file, const std::string& key) {
  QC_INPUT(file.contains(key), "{}: tensor `{}` is missing (every layer needs a_q, a_scale, w_q, w_scale)", file.path,
           key);
  const DType d = file.at(key).dtype();
  QC_INPUT(d == DType::i8 || d == DType::e4m3 || d == DType::e5m2,
           "{}: tensor `{}`: expected dtype I8, F8_E4M3 or F8_E5M2, found {}", file.path, key, dtype_safetensors_name(d));
  return d == DType::i8 ? ElementType::int8 : d == DType::e4m3 ? ElementType::e4m3 : ElementType::e5m2;
}

DType code_dtype(ElementType t) {
  return t == ElementType::int8 ? DType::i8 : t == ElementType::e4m3 ? DType::e4m3 : DType::e5m2;
}

// The scale layouts of every layer of an operand file, from its metadata (docs/formats.md):
// `act_scale` ("per-token", "per-tensor", "per-token-group:<g>"), `weight_scale` ("per-channel",
// "per-tensor", "per-block:<rows>x<cols>") and `scale_fmt` ("ue8m0": every scale a power of two; "fp32"
// or absent: any finite positive fp32). Absent keys: per-token x per-channel, the format's first layout.
struct FileScaling {
  ScaleLayout a = ScaleLayout::per_token(), w = ScaleLayout::per_channel();
};

constexpr const char* kActScaleKey = "act_scale";
constexpr const char* kWeightScaleKey = "weight_scale";
constexpr const char* kScaleFmtKey = "scale_fmt";

FileScaling file_scaling(const std::map<std::string, std::string>& metadata, const std::string& path) {
  FileScaling f;
  if (const auto it = metadata.find(kActScaleKey); it != metadata.end()) {
    f.a = parse_scale_layout(it->second, /*weights=*/false, fmt::format("{}: metadata `{}`", path, kActScaleKey));
  }
  if (const auto it = metadata.find(kWeightScaleKey); it != metadata.end()) {
    f.w = parse_scale_layout(it->second, /*weights=*/true, fmt::format("{}: metadata `{}`", path, kWeightScaleKey));
  }
  if (const auto it = metadata.find(kScaleFmtKey); it != metadata.end()) {
    QC_INPUT(it->second == "ue8m0" || it->second == "fp32",
             "{}: metadata `{}`: expected \"ue8m0\" (every scale a power of two) or \"fp32\", found \"{}\"", path,
             kScaleFmtKey, it->second);
    f.a.ue8m0 = f.w.ue8m0 = it->second == "ue8m0";
  }
  return f;
}

// A scale tensor in `layout`: a per-row vector [R] or [R,1], or, k-blocked, the matrix [rows, cols].
void expect_scale_shape(const SafetensorsFile& file, const std::string& layer, const char* part, const Tensor& t,
                        const ScaleLayout& layout, int64_t operand_rows, int64_t k, const char* rows_of) {
  const int64_t rows = layout.scale_rows(operand_rows), cols = layout.scale_cols(k);
  if (layout.k_blocked()) {
    QC_INPUT(t.ndim() == 2 && t.dim(0) == rows && t.dim(1) == cols,
             "{}: layer `{}`, tensor `{}`: expected shape [{}, {}] ({} scales: ceil({}/{}) {} by ceil({}/{}) along K), "
             "found {}",
             file.path, layer, part, rows, cols, layout.spec(), operand_rows, layout.block_rows, rows_of, k,
             layout.block_k, shape_string(t.shape()));
    return;
  }
  QC_INPUT((t.ndim() == 1 || t.dim(1) == 1) && t.dim(0) == rows,
           "{}: layer `{}`, tensor `{}`: expected shape [{}] or [{}, 1] ({} scales, one per row of {}), found {}{}",
           file.path, layer, part, rows, rows, layout.spec(), rows_of, shape_string(t.shape()),
           t.ndim() == 2 && t.dim(1) > 1 ? fmt::format("; a scale per K group or block needs the file's metadata `{}` "
                                                       "to say so (e.g. per-token-group:128, per-block:128x128)",
                                                       part == std::string_view("a_scale") ? kActScaleKey : kWeightScaleKey)
                                         : std::string());
}

}  // namespace

bool natural_less(const std::string& a, const std::string& b) {
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    if (std::isdigit(static_cast<unsigned char>(a[i])) && std::isdigit(static_cast<unsigned char>(b[j]))) {
      size_t i_end = i, j_end = j;
      while (i_end < a.size() && std::isdigit(static_cast<unsigned char>(a[i_end]))) ++i_end;
      while (j_end < b.size() && std::isdigit(static_cast<unsigned char>(b[j_end]))) ++j_end;
      const std::string_view na = std::string_view(a).substr(i, i_end - i);
      const std::string_view nb = std::string_view(b).substr(j, j_end - j);
      const auto strip = [](std::string_view s) {
        while (s.size() > 1 && s[0] == '0') s.remove_prefix(1);
        return s;
      };
      const std::string_view sa = strip(na), sb = strip(nb);
      if (sa.size() != sb.size()) return sa.size() < sb.size();
      if (sa != sb) return sa < sb;
      i = i_end;
      j = j_end;
    } else {
      if (a[i] != b[j]) return a[i] < b[j];
      ++i;
      ++j;
    }
  }
  return a.size() - i < b.size() - j;
}

namespace {

// The layer names of `keys` (each `<layer>.<part>`), in the order of the metadata `layers` when
// it is set, else in natural order.
std::vector<std::string> layer_order(const std::vector<std::string>& keys, const std::map<std::string, std::string>& metadata,
                                     const std::string& path) {
  std::set<std::string> prefixes;
  for (const std::string& key : keys) {
    bool known = false;
    for (std::string_view part : kParts) {
      if (ends_with(key, part)) {
        prefixes.insert(key.substr(0, key.size() - part.size()));
        known = true;
        break;
      }
    }
    const bool bare_part = std::find(std::begin(kParts), std::end(kParts), key) != std::end(kParts);
    QC_INPUT(!bare_part, "{}: tensor `{}`: expected a key `<layer>{}` with a non-empty layer name, found none before "
             "the part", path, printable_text(key), key);
    QC_INPUT(known, "{}: tensor `{}`: expected a key ending in .a_q, .a_scale, .w_q, .w_scale or .bias", path,
             printable_text(key));
  }
  QC_INPUT(!prefixes.empty(), "{}: no layers found (expected keys `<layer>.a_q`, `<layer>.w_q`, ...)", path);

  std::vector<std::string> order;
  if (auto it = metadata.find("layers"); it != metadata.end() && !it->second.empty()) {
    const std::string& text = it->second;
    for (size_t start = 0, position = 1;; ++position) {
      const size_t comma = text.find(',', start);
      order.push_back(text.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
      QC_INPUT(!order.back().empty(),
               "{}: metadata `layers`: expected comma-separated non-empty layer names, found an empty name at "
               "position {} of `{}`", path, position, printable_text(text));
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
    std::set<std::string> listed;
    for (const std::string& name : order) {
      QC_INPUT(listed.insert(name).second, "{}: metadata `layers`: expected each layer of the file exactly once, found "
               "`{}` listed twice", path, printable_text(name));
    }
    std::vector<std::string> missing, extra;
    std::set_difference(prefixes.begin(), prefixes.end(), listed.begin(), listed.end(), std::back_inserter(missing));
    std::set_difference(listed.begin(), listed.end(), prefixes.begin(), prefixes.end(), std::back_inserter(extra));
    const auto names = [](const std::vector<std::string>& v) {
      std::string out;
      for (size_t i = 0; i < v.size() && i < 8; ++i) out += (i ? ", `" : "`") + printable_text(v[i]) + "`";
      return v.size() > 8 ? fmt::format("{} and {} more", out, v.size() - 8) : out;
    };
    QC_INPUT(missing.empty() && extra.empty(),
             "{}: metadata `layers`: expected each layer of the file exactly once ({} layers), found {} names{}{}", path,
             prefixes.size(), order.size(), missing.empty() ? "" : "; not listed: " + names(missing),
             extra.empty() ? "" : "; listed but not in the file: " + names(extra));
  } else {
    order.assign(prefixes.begin(), prefixes.end());
    std::sort(order.begin(), order.end(), natural_less);
  }
  return order;
}

// Layer `name` of `file`, validated; its views keep `file` (and so its mapping) alive.
LayerOperands layer_of(const std::shared_ptr<SafetensorsFile>& file, const std::string& name, const std::string& path,
                       const FileScaling& scaling) {
  const ElementType a_type = code_type(*file, name + ".a_q"), w_type = code_type(*file, name + ".w_q");
  const Tensor& a_q = expect(*file, name + ".a_q", code_dtype(a_type), 2, 2);
  const Tensor& w_q = expect(*file, name + ".w_q", code_dtype(w_type), 2, 2);
  const Tensor& a_scale = expect(*file, name + ".a_scale", DType::f32, 1, 2);
  const Tensor& w_scale = expect(*file, name + ".w_scale", DType::f32, 1, 2);
  LayerOperands ops;
  ops.name = name;
  ops.source = path;
  ops.m = a_q.dim(0);
  ops.k = a_q.dim(1);
  ops.n = w_q.dim(0);
  QC_INPUT(w_q.dim(1) == ops.k, "{}: layer `{}`: a_q is {} but w_q is {}: expected the same K (columns)", path, name,
           shape_string(a_q.shape()), shape_string(w_q.shape()));
  expect_scale_shape(*file, name, "a_scale", a_scale, scaling.a, ops.m, ops.k, "rows of a_q");
  expect_scale_shape(*file, name, "w_scale", w_scale, scaling.w, ops.n, ops.k, "rows of w_q");
  ops.a_scaling = scaling.a;
  ops.w_scaling = scaling.w;
  ops.a_type = a_type;
  ops.w_type = w_type;
  ops.a_q = a_q.span<int8_t>();
  ops.w_q = w_q.span<int8_t>();
  ops.a_scale = a_scale.span<float>();
  ops.w_scale = w_scale.span<float>();
  if (file->contains(name + ".bias")) {
    const Tensor& bias = expect(*file, name + ".bias", DType::bf16, 1, 1);
    QC_INPUT(bias.dim(0) == ops.n, "{}: layer `{}`, tensor `bias`: expected {} entries, found {}", path, name, ops.n,
             bias.dim(0));
    ops.bias = bias.span<uint16_t>();
  }
  ops.keepalive = file;
  ops.validate();
  if (file->read_only_mapping) {  // the codes lie in the file's read-only mapping: checked once, here
    ops.checked_a = {ops.a_q.data(), ops.a_q.data() + ops.a_q.size(), ops.a_type};
    ops.checked_w = {ops.w_q.data(), ops.w_q.data() + ops.w_q.size(), ops.w_type};
  }
  return ops;
}

// A layer maps its shard; the shard's digest is checked against the index the first time it is
// mapped in this process (so each rank checks the shards it reads, once). With `digest_beside` the
// digest is read on a thread of its own, at most one shard per core at a time, while the layer is
// used; `await_sha256` waits for every shard begun and fails on the first that differs from the index.
// With `device_leaves` every mapping of a shard is registered with the shard's tree leaves, and the shards'
// digests are read in `await_sha256`, all at once, from the leaves the device gave and the rest of each file.
void attach_shard_loader(OperandSet& set, const std::string& path, const std::string& dir, std::vector<std::string> order,
                         std::shared_ptr<std::vector<std::string>> shard_of,
                         std::shared_ptr<std::map<std::string, std::string>> digests, FileScaling scaling,
                         bool digest_beside, bool device_leaves) {
  struct Checked {
    std::mutex mutex;
    std::set<std::string> shards;
    std::map<std::string, std::shared_ptr<TreeLeaves>> leaves;  // device_leaves: by shard
    std::vector<std::tuple<std::string, std::string, std::shared_future<std::string>>> pending;  // shard, layer, digest
    // A shard's mapping (and with device leaves its registration) while a layer of it lives: the next
    // layer of the same shard takes it instead of mapping and parsing the shard again (~1 ms a layer of a
    // 5 GB shard, on the run loop's thread).
    struct Mapped {
      std::weak_ptr<SafetensorsFile> file;
      std::weak_ptr<const void> registration;
    };
    std::map<std::string, Mapped> mapped;
  };
  auto checked = std::make_shared<Checked>();
  // Apart from `checked`, which holds the digests' futures: their tasks must not hold it.
  // One shard per core; with the digest record, a quarter as many shards at once (fewer when the set has
  // fewer), their tree digests sharing the cores (a first run's plain digests one core more each).
  const unsigned cores = static_cast<unsigned>(hardware_threads());  // this rank's share of them
  const bool by_tree = digest_record_usable();
  const unsigned shards = static_cast<unsigned>(std::max<size_t>(1, digests->size()));
  const unsigned at_once = by_tree ? std::clamp(cores / 4, 1u, shards) : cores;
  const unsigned tree_threads = std::max(1u, cores / at_once);  // the cores shared by the shards read at once
  auto readers = std::make_shared<std::counting_semaphore<>>(at_once);
  const auto check = [path, digests](const std::string& shard, const std::string& layer, const std::string& found) {
    QC_INPUT(found == digests->at(shard),
             "{}: shard `{}` (layer `{}`): expected {} (field `shards.{}` of the index), found {}: the shard changed "
             "after the index was written",
             path, shard, layer, digests->at(shard), shard, found);
  };
  set.loader = [order = std::move(order), shard_of, checked, readers, tree_threads, scaling, dir, check, digest_beside,
                device_leaves](size_t i) {
    const std::string& shard = shard_of->at(i);
    const std::string shard_path = (std::filesystem::path(dir) / shard).string();
    // Mapped after the digest is begun or checked (a changed shard is named as such, before its parse), but
    // before, with device leaves, whose size it gives.
    std::shared_ptr<SafetensorsFile> file;
    std::shared_ptr<const void> registration;
    {
      std::lock_guard lock(checked->mutex);
      const auto it = checked->mapped.find(shard);
      if (it != checked->mapped.end()) file = it->second.file.lock(), registration = it->second.registration.lock();
      if (device_leaves && !registration) file = nullptr;  // a mapping is registered once: both, or a new one
    }
    const bool reused = file != nullptr;
    const auto map = [&] { return std::make_shared<SafetensorsFile>(read_safetensors(shard_path)); };
    if (device_leaves && !file) file = map();
    std::shared_ptr<TreeLeaves> leaves;
    {
      std::lock_guard lock(checked->mutex);
      if (device_leaves) {
        std::shared_ptr<TreeLeaves>& l = checked->leaves[shard];
        if (!l) l = std::make_shared<TreeLeaves>(file->bytes.size());
        QC_INPUT(l->file_size() == file->bytes.size(),
                 "{}: shard `{}` (layer `{}`): {} bytes, but {} when a layer of it was mapped before: the shard changed "
                 "during the run",
                 shard_path, shard, order[i], file->bytes.size(), l->file_size());
        leaves = l;
      }
      if (!checked->shards.count(shard)) {
        if (device_leaves) {  // read when awaited
          // Both digests then (a set's shards are many, and `predict` has filled the record for them).
          auto read = [tree_threads, shard_path, leaves] {
            return sha256_file_recorded_begun(shard_path, tree_threads, leaves)().sha256;
          };
          checked->pending.emplace_back(shard, order[i], std::async(std::launch::deferred, std::move(read)).share());
        } else if (digest_beside) {
          auto read = [readers, tree_threads, shard_path] {
            readers->acquire();
            struct Release {
              std::counting_semaphore<>& s;
              ~Release() { s.release(); }
            } release{*readers};
            return sha256_file_recorded(shard_path, tree_threads).sha256;
          };
          checked->pending.emplace_back(shard, order[i], std::async(std::launch::async, std::move(read)).share());
        } else {
          check(shard, order[i], sha256_file_recorded(shard_path).sha256);
        }
        checked->shards.insert(shard);
      }
    }
    if (!file) file = map();
    LayerOperands ops = layer_of(file, order[i], shard_path, scaling);
    // The registration holds the mapping; the layer's views hold the registration.
    if (leaves) {
      if (!registration) registration = register_mapped_leaves(file->bytes.data(), file->bytes.size(), leaves, file);
      ops.keepalive = registration;
    }
    if (!reused) {
      std::lock_guard lock(checked->mutex);
      checked->mapped[shard] = {file, registration};
    }
    return ops;
  };
  if (digest_beside) {
    set.await_shards = [checked, check] {
      std::lock_guard lock(checked->mutex);
      // Deferred digests (device leaves) run here, the shards at once, each on a thread of its own.
      std::vector<std::future<void>> reads;
      for (auto& pending : checked->pending) {
        reads.push_back(std::async(std::launch::async, [&digest = std::get<2>(pending)] { digest.wait(); }));
      }
      for (auto& r : reads) r.get();
      for (auto& [shard, layer, digest] : checked->pending) check(shard, layer, digest.get());
      checked->pending.clear();
    };
  }
}

// A sharded set: the index, validated against every shard's header; layers are mapped on demand.
OperandSet open_sharded(const std::string& path, bool with_digest, bool digest_beside, bool device_leaves) {
  const ShardIndex ix = read_shard_index_file(path);
  const nlohmann::json& j = ix.json;
  QC_INPUT(j.contains("metadata") && j["metadata"].is_object() && j["metadata"].value("format", "") == "qconform-operands",
           "{}: field `metadata.format`: expected \"qconform-operands\" (an operand index written by --shard-size), found {}",
           path, j.contains("metadata") && j["metadata"].is_object() && j["metadata"].contains("format")
                     ? j["metadata"]["format"].dump() : "nothing");
  QC_INPUT(j.contains("shards") && j["shards"].is_object(),
           "{}: field `shards`: expected an object mapping every shard file to its digest \"sha256:<hex>\", found {}",
           path, j.contains("shards") ? j["shards"].dump().substr(0, 80) : "nothing");
  auto digests = std::make_shared<std::map<std::string, std::string>>();
  for (const auto& [shard, digest] : j["shards"].items()) {
    QC_INPUT(ix.shards.count(shard), "{}: field `shards.{}`: expected only shards that `weight_map` names, found this one too",
             path, shard);
    QC_INPUT(digest.is_string() && digest.get<std::string>().size() == 71 && digest.get<std::string>().rfind("sha256:", 0) == 0,
             "{}: field `shards.{}`: expected \"sha256:<64 hex>\", found {}", path, shard, digest.dump());
    (*digests)[shard] = digest.get<std::string>();
  }
  for (const std::string& shard : ix.shards) {
    QC_INPUT(digests->count(shard), "{}: field `shards`: expected the digest of shard `{}`, found none", path, shard);
  }

  OperandSet set;
  set.path = path;
  for (const auto& [key, value] : j["metadata"].items()) {
    if (value.is_string()) set.metadata[key] = value.get<std::string>();
  }
  if (with_digest) set.sha256 = sha256_file(path);
  std::vector<std::string> keys;
  for (const auto& [tensor, shard] : ix.weight_map) keys.push_back(tensor);
  std::vector<std::string> order = layer_order(keys, set.metadata, path);

  // Every layer in one shard, and every shard holding exactly the tensors the index maps to it.
  auto shard_of = std::make_shared<std::vector<std::string>>();
  std::map<std::string, std::vector<size_t>> layers_of_shard;
  for (size_t i = 0; i < order.size(); ++i) {
    const std::string& shard = ix.weight_map.at(order[i] + ".a_q");
    for (std::string_view part : kParts) {
      const auto it = ix.weight_map.find(order[i] + std::string(part));
      QC_INPUT(it == ix.weight_map.end() || it->second == shard,
               "{}: layer `{}`: expected all its tensors in one shard, found `{}` in {} and `{}` in {}", path, order[i],
               order[i] + ".a_q", shard, it->first, it->second);
    }
    shard_of->push_back(shard);
    layers_of_shard[shard].push_back(i);
  }
  set.headers.resize(order.size());
  const FileScaling scaling = file_scaling(set.metadata, path);
  for (const std::string& shard : ix.shards) {
    const std::string shard_path = (std::filesystem::path(ix.dir) / shard).string();
    auto file = std::make_shared<SafetensorsFile>(read_safetensors(shard_path));  // the header only is read
    for (const auto& [tensor, t] : file->tensors) {
      const auto it = ix.weight_map.find(tensor);
      QC_INPUT(it != ix.weight_map.end() && it->second == shard, "{}: tensor `{}`: the index maps it to {}, found it in {}",
               path, tensor, it == ix.weight_map.end() ? std::string("nothing") : it->second, shard);
    }
    for (size_t i : layers_of_shard[shard]) {
      const LayerOperands ops = layer_of(file, order[i], shard_path, scaling);
      set.headers[i] = {ops.name, ops.m, ops.n, ops.k, shard};
    }
  }  // the shard is unmapped here

  attach_shard_loader(set, path, ix.dir, std::move(order), std::move(shard_of), std::move(digests), scaling, digest_beside,
                      device_leaves);
  return set;
}

}  // namespace

bool is_index_path(const std::string& path) { return ends_with(path, ".json"); }

LayerOperands OperandSet::load(size_t i) const {
  QC_CHECK(i < size(), "OperandSet::load: layer {} of {}", i, size());
  return layers.empty() ? loader(i) : layers[i];
}

void OperandSet::await_sha256() {
  if (pending_sha256.valid()) {
    const FileDigests& d = pending_sha256.get();
    sha256 = d.sha256, sha256_tree = d.sha256_tree, sha256_from_record = d.from_record;
  }
  pending_sha256 = {};
  if (await_shards) std::exchange(await_shards, nullptr)();
}

namespace {
OperandSet load_file(const std::string& path, bool with_digest, bool digest_beside, bool device_leaves);
}  // namespace

OperandSet open_operands(const std::string& path, bool with_digest, bool digest_beside, bool device_leaves) {
  device_leaves = device_leaves && digest_beside;
  return is_index_path(path) ? open_sharded(path, with_digest, digest_beside, device_leaves)
                             : load_file(path, with_digest, digest_beside, device_leaves);
}

OperandSet load_operands(const std::string& path, bool with_digest) {
  if (!is_index_path(path)) return load_file(path, with_digest, false, false);
  OperandSet set = open_sharded(path, with_digest, /*digest_beside=*/false, /*device_leaves=*/false);
  std::vector<LayerOperands> layers;
  for (size_t i = 0; i < set.size(); ++i) layers.push_back(set.load(i));
  set.layers = std::move(layers);
  return set;
}

namespace {

OperandSet load_file(const std::string& path, bool with_digest, bool digest_beside, bool device_leaves) {
  auto file = std::make_shared<SafetensorsFile>(read_safetensors(path));
  OperandSet set;
  set.path = path;
  set.metadata = file->metadata;
  if (device_leaves) {
    set.tree_leaves = std::make_shared<TreeLeaves>(file->bytes.size());
    set.tree_leaves_registration = register_mapped_leaves(file->bytes.data(), file->bytes.size(), set.tree_leaves, file);
  }
  // The digest is read from the file on its own thread while the layers are checked here (for FP8
  // codes a scan of every byte); with device leaves, its tree when it is awaited, once the device has given
  // the leaves.
  std::future<FileDigests> digest;
  if (device_leaves && with_digest) {  // the plain digest begun beside now (a first run's), the tree when awaited
    digest = std::async(std::launch::deferred, sha256_file_recorded_begun(path, 0, set.tree_leaves));
  } else if (with_digest) {
    digest = std::async(std::launch::async, [path] { return sha256_file_recorded(path); });
  }
  std::vector<std::string> keys;
  for (const auto& [key, tensor] : file->tensors) keys.push_back(key);
  const FileScaling scaling = file_scaling(set.metadata, path);
  // The layers are checked on every core (an FP8 file's codes are scanned here, every byte); a file with
  // several bad layers names the first in layer order, whichever thread found it first.
  const std::vector<std::string> order = layer_order(keys, set.metadata, path);
  set.layers.resize(order.size());
  std::vector<std::exception_ptr> failed(order.size());
  parallel_for(static_cast<int64_t>(order.size()), 0, [&](int64_t i) {
    try {
      set.layers[static_cast<size_t>(i)] = layer_of(file, order[static_cast<size_t>(i)], path, scaling);
    } catch (...) {
      failed[static_cast<size_t>(i)] = std::current_exception();
    }
  });
  for (const std::exception_ptr& e : failed) {
    if (e) std::rethrow_exception(e);
  }
  for (const LayerOperands& ops : set.layers) set.headers.push_back({ops.name, ops.m, ops.n, ops.k, {}});
  if (digest.valid()) set.pending_sha256 = digest.share();
  if (!digest_beside) set.await_sha256();
  return set;
}

}  // namespace

namespace {
// The metadata that records the layers' scale layouts (`file_scaling` reads it back): one layout per
// operand for the whole file, so every layer must share it (`check_same_scaling`); the keys are written
// only for a layout other than the default per-token x per-channel fp32 (files of those stay byte for
// byte as before), and a key the caller's metadata names already must agree with the layers.
void check_same_scaling(const std::string& path, const LayerOperands& first, const LayerOperands& l) {
  QC_INPUT(l.a_scaling == first.a_scaling && l.w_scaling == first.w_scaling,
           "{}: layer `{}` has {} scales but layer `{}` has {}: expected one scale layout for every layer of an operand "
           "file (its metadata act_scale, weight_scale, scale_fmt)",
           path, l.name, l.scaling_description(), first.name, first.scaling_description());
}

void record_scaling(const std::string& path, const ScaleLayout& a, const ScaleLayout& w,
                    std::map<std::string, std::string>& metadata) {
  const FileScaling defaults;
  const bool ue8m0 = a.ue8m0 && w.ue8m0;
  const struct {
    const char* key;
    std::string value;
    bool non_default;
  } keys[] = {{kActScaleKey, a.spec(), a.spec() != defaults.a.spec()},
              {kWeightScaleKey, w.spec(), w.spec() != defaults.w.spec()},
              {kScaleFmtKey, ue8m0 ? "ue8m0" : "fp32", ue8m0}};
  for (const auto& k : keys) {
    const auto it = metadata.find(k.key);
    QC_CHECK(it == metadata.end() || it->second == k.value, "save_operands {}: metadata `{}` = \"{}\" but the layers' scales are {}",
             path, k.key, it == metadata.end() ? std::string() : it->second, k.value);
    if (k.non_default) metadata[k.key] = k.value;
  }
}

// A scale tensor's shape in the file: [R] per row, or the [rows, cols] matrix of a k-blocked layout.
std::vector<int64_t> scale_shape(const ScaleLayout& l, int64_t rows, int64_t k) {
  if (!l.k_blocked()) return {rows};
  return {l.scale_rows(rows), l.scale_cols(k)};
}
}  // namespace

void save_operands(const std::string& path, const std::vector<LayerOperands>& layers,
                   std::map<std::string, std::string> metadata) {
  std::vector<std::pair<std::string, Tensor>> tensors;
  std::string order;
  // Borrowed views (no copy): `ops.keepalive` keeps the bytes alive until the file is written.
  const auto view = [](DType dtype, std::vector<int64_t> shape, auto span, const LayerOperands& ops) {
    return Tensor::borrow(dtype, std::move(shape), reinterpret_cast<const std::byte*>(span.data()), ops.keepalive);
  };
  for (const LayerOperands& ops : layers) {
    ops.validate();
    QC_INPUT(ops.name.find(',') == std::string::npos && !ops.name.empty(),
             "{}: layer name `{}`: expected a non-empty name without commas (the metadata `layers` lists names "
             "separated by commas)", path, ops.name);
    tensors.emplace_back(ops.name + ".a_q", view(code_dtype(ops.a_type), {ops.m, ops.k}, ops.a_q, ops));
    tensors.emplace_back(ops.name + ".a_scale", view(DType::f32, scale_shape(ops.a_scaling, ops.m, ops.k), ops.a_scale, ops));
    tensors.emplace_back(ops.name + ".w_q", view(code_dtype(ops.w_type), {ops.n, ops.k}, ops.w_q, ops));
    tensors.emplace_back(ops.name + ".w_scale", view(DType::f32, scale_shape(ops.w_scaling, ops.n, ops.k), ops.w_scale, ops));
    if (ops.has_bias()) {
      tensors.emplace_back(ops.name + ".bias", view(DType::bf16, {ops.n}, ops.bias, ops));
    }
    order += (order.empty() ? "" : ",") + ops.name;
  }
  metadata["layers"] = order;
  if (!layers.empty()) {
    for (const LayerOperands& l : layers) check_same_scaling(path, layers.front(), l);
    record_scaling(path, layers.front().a_scaling, layers.front().w_scaling, metadata);
  }
  write_safetensors(path, tensors, metadata);
}

int64_t operand_bytes(const LayerOperands& ops) {
  return ops.m * ops.k + 4 * static_cast<int64_t>(ops.a_scale.size()) + ops.n * ops.k +
         4 * static_cast<int64_t>(ops.w_scale.size()) + (ops.has_bias() ? 2 * ops.n : 0);
}

ShardedOperandWriter::ShardedOperandWriter(std::string index_path, std::map<std::string, std::string> metadata,
                                           int64_t shard_bytes)
    : index_path_(std::move(index_path)), metadata_(std::move(metadata)), shard_bytes_(shard_bytes) {
  QC_INPUT(ends_with(index_path_, ".index.json"),
           "{}: expected the name of a sharded operand set to end in .index.json (its shards are written beside it)",
           index_path_);
  QC_INPUT(shard_bytes_ > 0, "--shard-size: expected a positive size, found {}", shard_bytes_);
  stem_ = std::filesystem::path(index_path_).filename().string();
  stem_.resize(stem_.size() - std::string_view(".index.json").size());
}

void ShardedOperandWriter::add(LayerOperands layer) {
  QC_INPUT(!finished_, "{}: a layer added after the index was written", index_path_);
  // The index's metadata records the set's scale layout (every shard's too): the first layer sets it.
  if (!first_layer_) {
    record_scaling(index_path_, layer.a_scaling, layer.w_scaling, metadata_);
    first_layer_.emplace();
    first_layer_->name = layer.name;
    first_layer_->a_scaling = layer.a_scaling;
    first_layer_->w_scaling = layer.w_scaling;
  }
  check_same_scaling(index_path_, *first_layer_, layer);
  const int64_t bytes = operand_bytes(layer);
  if (!pending_.empty() && pending_bytes_ + bytes > shard_bytes_) flush();
  pending_bytes_ += bytes;
  pending_.push_back(std::move(layer));
}

void ShardedOperandWriter::flush() {
  if (pending_.empty()) return;
  const std::string shard = fmt::format("{}-{:05}.safetensors", stem_, shards_.size() + 1);
  const std::filesystem::path dir = std::filesystem::path(index_path_).parent_path();
  const std::string shard_path = (dir / shard).string();
  std::map<std::string, std::string> metadata = metadata_;
  metadata["index"] = std::filesystem::path(index_path_).filename().string();
  save_operands(shard_path, pending_, metadata);
  shards_.emplace_back(shard, sha256_file(shard_path));
  for (const LayerOperands& l : pending_) {
    for (std::string_view part : kParts) {
      if (part == ".bias" && !l.has_bias()) continue;
      weight_map_[l.name + std::string(part)] = shard;
    }
    order_ += (order_.empty() ? "" : ",") + l.name;
    total_bytes_ += operand_bytes(l);
  }
  pending_.clear();
  pending_bytes_ = 0;
}

std::string ShardedOperandWriter::finish() {
  flush();
  QC_INPUT(!shards_.empty(), "{}: no layers to write", index_path_);
  nlohmann::json metadata = nlohmann::json::object();
  for (const auto& [k, v] : metadata_) metadata[k] = v;
  metadata["format"] = "qconform-operands";
  metadata["layers"] = order_;
  metadata["total_size"] = total_bytes_;
  nlohmann::json shards = nlohmann::json::object();
  for (const auto& [name, digest] : shards_) shards[name] = digest;
  const nlohmann::json index = {{"metadata", metadata}, {"weight_map", weight_map_}, {"shards", shards}};
  write_file_atomic(index_path_, index.dump(1) + "\n");  // last: the set exists once its index does
  finished_ = true;
  return index_path_;
}

}  // namespace qc
