#include "qconform/operands_io.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <set>

#include "qconform/error.hpp"
#include "qconform/safetensors.hpp"
#include "qconform/sha256.hpp"

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

// A per-row vector stored as [R] or [R,1].
int64_t vector_length(const SafetensorsFile& file, const std::string& key, const Tensor& t) {
  QC_INPUT(t.ndim() == 1 || t.dim(1) == 1, "{}: tensor `{}`: expected shape [R] or [R,1], found {}", file.path, key,
           shape_string(t.shape()));
  return t.dim(0);
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

OperandSet load_operands(const std::string& path, bool with_digest) {
  auto file = std::make_shared<SafetensorsFile>(read_safetensors(path));
  OperandSet set;
  set.path = path;
  set.metadata = file->metadata;
  if (with_digest) set.sha256 = sha256_file(path);

  std::set<std::string> prefixes;
  for (const auto& [key, tensor] : file->tensors) {
    bool known = false;
    for (std::string_view part : kParts) {
      if (ends_with(key, part)) {
        prefixes.insert(key.substr(0, key.size() - part.size()));
        known = true;
        break;
      }
    }
    QC_INPUT(known, "{}: tensor `{}`: expected a key ending in .a_q, .a_scale, .w_q, .w_scale or .bias", path, key);
  }
  QC_INPUT(!prefixes.empty(), "{}: no layers found (expected keys `<layer>.a_q`, `<layer>.w_q`, ...)", path);

  std::vector<std::string> order;
  if (auto it = set.metadata.find("layers"); it != set.metadata.end() && !it->second.empty()) {
    std::string_view rest = it->second;
    while (!rest.empty()) {
      const size_t comma = rest.find(',');
      order.emplace_back(rest.substr(0, comma));
      rest = comma == std::string_view::npos ? std::string_view{} : rest.substr(comma + 1);
    }
    const std::set<std::string> listed(order.begin(), order.end());
    QC_INPUT(listed == prefixes && listed.size() == order.size(),
             "{}: metadata `layers`: expected each layer of the file exactly once ({} layers), found {} names",
             path, prefixes.size(), order.size());
  } else {
    order.assign(prefixes.begin(), prefixes.end());
    std::sort(order.begin(), order.end(), natural_less);
  }

  for (const std::string& name : order) {
    const Tensor& a_q = expect(*file, name + ".a_q", DType::i8, 2, 2);
    const Tensor& w_q = expect(*file, name + ".w_q", DType::i8, 2, 2);
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
    QC_INPUT(vector_length(*file, name + ".a_scale", a_scale) == ops.m,
             "{}: layer `{}`, tensor `a_scale`: expected {} entries (rows of a_q), found shape {}", path, name, ops.m,
             shape_string(a_scale.shape()));
    QC_INPUT(vector_length(*file, name + ".w_scale", w_scale) == ops.n,
             "{}: layer `{}`, tensor `w_scale`: expected {} entries (rows of w_q), found shape {}", path, name, ops.n,
             shape_string(w_scale.shape()));
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
    set.layers.push_back(std::move(ops));
  }
  return set;
}

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
    tensors.emplace_back(ops.name + ".a_q", view(DType::i8, {ops.m, ops.k}, ops.a_q, ops));
    tensors.emplace_back(ops.name + ".a_scale", view(DType::f32, {ops.m}, ops.a_scale, ops));
    tensors.emplace_back(ops.name + ".w_q", view(DType::i8, {ops.n, ops.k}, ops.w_q, ops));
    tensors.emplace_back(ops.name + ".w_scale", view(DType::f32, {ops.n}, ops.w_scale, ops));
    if (ops.has_bias()) {
      tensors.emplace_back(ops.name + ".bias", view(DType::bf16, {ops.n}, ops.bias, ops));
    }
    order += (order.empty() ? "" : ",") + ops.name;
  }
  metadata["layers"] = order;
  write_safetensors(path, tensors, metadata);
}

}  // namespace qc
