#include "core/safetensors.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstring>
#include <set>

#include "qconform/error.hpp"
#include "core/limits.hpp"
#include "core/fileio.hpp"  // MappedFile, AtomicFileWriter, printable_text

namespace qc {

namespace {

using nlohmann::json;

// The Rust library's `Dtype` declaration order (safetensors 0.8: BOOL, F4, F6_E2M3, F6_E3M2, U8,
// I8, F8_E5M2, F8_E4M3, F8_E8M0, F8_E4M3FNUZ, F8_E5M2FNUZ, I16, U16, F16, BF16, I32, U32, F32,
// C64, F64, I64, U64). Its writer sorts tensors by this rank, descending, so that every tensor
// stays aligned to its element size once the header is padded to 8 bytes.
int rust_dtype_rank(DType dtype) {
  switch (dtype) {
    case DType::boolean: return 0;
    case DType::u8: return 4;
    case DType::i8: return 5;
    case DType::e5m2: return 6;
    case DType::e4m3: return 7;
    case DType::i16: return 11;
    case DType::u16: return 12;
    case DType::f16: return 13;
    case DType::bf16: return 14;
    case DType::i32: return 15;
    case DType::u32: return 16;
    case DType::f32: return 17;
    case DType::f64: return 19;
    case DType::i64: return 20;
    case DType::u64: return 21;
  }
  QC_FAIL("unknown DType {}", static_cast<int>(dtype));
}

// Names the reference library accepts that qconform does not read (sub-byte and exotic types).
bool is_foreign_safetensors_dtype(std::string_view name) {
  static constexpr std::string_view kForeign[] = {"F4",          "F6_E2M3",     "F6_E3M2", "F8_E8M0",
                                                  "F8_E4M3FNUZ", "F8_E5M2FNUZ", "C64"};
  return std::find(std::begin(kForeign), std::end(kForeign), name) != std::end(kForeign);
}

std::string supported_safetensors_names() {
  std::vector<std::string_view> names;
  for (DType d : kAllDTypes) names.push_back(dtype_safetensors_name(d));
  return fmt::format("{}", fmt::join(names, ", "));
}

// A short rendering of a JSON value for error messages.
std::string found(const json& value) {
  std::string text = value.dump(-1, ' ', false, json::error_handler_t::replace);
  if (text.size() > 60) text = text.substr(0, 57) + "...";
  return fmt::format("{} `{}`", value.type_name(), text);
}

// Parses the header, rejecting duplicate keys in any object (nlohmann keeps the last silently;
// the Rust library fails on them through its offset checks or its map types).
json parse_header_json(std::string_view text, std::string_view file) {
  std::vector<std::set<std::string>> open_objects;
  std::string duplicate;
  auto callback = [&](int /*depth*/, json::parse_event_t event, json& parsed) {
    switch (event) {
      case json::parse_event_t::object_start: open_objects.emplace_back(); break;
      case json::parse_event_t::object_end:
        if (!open_objects.empty()) open_objects.pop_back();
        break;
      case json::parse_event_t::key:
        if (!open_objects.empty() && !open_objects.back().insert(parsed.get<std::string>()).second &&
            duplicate.empty()) {
          duplicate = parsed.get<std::string>();
        }
        break;
      default: break;
    }
    return true;
  };
  // nlohmann's lexer reads a NUL byte as the end of input, so `{}\0garbage` would pass; valid JSON
  // never holds a raw NUL (control characters inside strings must be escaped).
  const size_t nul = text.find('\0');
  QC_INPUT(nul == std::string_view::npos,
           "{}: header ({} bytes): expected valid UTF-8 JSON, found a NUL byte at header offset {}", file, text.size(),
           nul);
  check_json_depth(text, fmt::format("{}: header", file));
  json header;
  try {
    header = json::parse(text.begin(), text.end(), callback, /*allow_exceptions=*/true, /*ignore_comments=*/false);
  } catch (const json::exception& e) {
    QC_FAIL_INPUT("{}: header ({} bytes): expected valid UTF-8 JSON, found a parse error: {}", file, text.size(),
                  printable_text(e.what()));
  }
  QC_INPUT(duplicate.empty(), "{}: header: expected unique keys, found key `{}` more than once", file,
           printable_text(duplicate));
  return header;
}

uint64_t read_u64_le(const std::byte* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<uint64_t>(p[i]);
  return v;
}

struct Entry {
  std::string name;
  std::string shown;  // `name` safe to print
  DType dtype;
  std::vector<int64_t> shape;
  uint64_t begin, end;
  uint64_t nbytes;
};

Entry parse_entry(std::string_view file, const std::string& name, const json& value) {
  QC_INPUT(value.is_object(), "{}: tensor `{}`: expected an object with dtype, shape and data_offsets, found {}", file,
           printable_text(name), found(value));
  Entry entry;
  entry.name = name;
  entry.shown = printable_text(name);

  const auto dtype_it = value.find("dtype");
  QC_INPUT(dtype_it != value.end(), "{}: tensor `{}`: field `dtype`: expected a dtype name, found no such field", file,
           entry.shown);
  QC_INPUT(dtype_it->is_string(), "{}: tensor `{}`: field `dtype`: expected a string, found {}", file, entry.shown,
           found(*dtype_it));
  const std::string& dtype_name_text = dtype_it->get_ref<const std::string&>();
  const auto dtype = dtype_from_safetensors(dtype_name_text);
  if (!dtype) {
    QC_FAIL_INPUT("{}: tensor `{}`: field `dtype`: expected one of {}, found `{}`{}", file, entry.shown,
                  supported_safetensors_names(), printable_text(dtype_name_text),
                  is_foreign_safetensors_dtype(dtype_name_text) ? " (a safetensors dtype qconform does not support)"
                                                                : "");
  }
  entry.dtype = *dtype;

  const auto shape_it = value.find("shape");
  QC_INPUT(shape_it != value.end(), "{}: tensor `{}`: field `shape`: expected an array of sizes, found no such field",
           file, entry.shown);
  QC_INPUT(shape_it->is_array(), "{}: tensor `{}`: field `shape`: expected an array of non-negative integers, found {}",
           file, entry.shown, found(*shape_it));
  for (size_t i = 0; i < shape_it->size(); ++i) {
    const json& d = (*shape_it)[i];
    QC_INPUT(d.is_number_unsigned() && d.get<uint64_t>() <= static_cast<uint64_t>(INT64_MAX),
             "{}: tensor `{}`: field `shape`[{}]: expected a non-negative integer, found {}", file, entry.shown, i, found(d));
    entry.shape.push_back(static_cast<int64_t>(d.get<uint64_t>()));
  }
  const auto numel = checked_numel(entry.shape, dtype_size(entry.dtype));
  QC_INPUT(numel.has_value(), "{}: tensor `{}`: field `shape`: expected a size whose byte count fits in 63 bits, found {} of {}",
           file, entry.shown, shape_string(entry.shape), dtype_safetensors_name(entry.dtype));
  entry.nbytes = static_cast<uint64_t>(*numel) * dtype_size(entry.dtype);

  const auto offsets_it = value.find("data_offsets");
  QC_INPUT(offsets_it != value.end(),
           "{}: tensor `{}`: field `data_offsets`: expected [begin, end], found no such field", file, entry.shown);
  QC_INPUT(offsets_it->is_array() && offsets_it->size() == 2 && (*offsets_it)[0].is_number_unsigned() &&
               (*offsets_it)[1].is_number_unsigned(),
           "{}: tensor `{}`: field `data_offsets`: expected [begin, end] with two non-negative integers, found {}",
           file, entry.shown, found(*offsets_it));
  entry.begin = (*offsets_it)[0].get<uint64_t>();
  entry.end = (*offsets_it)[1].get<uint64_t>();
  QC_INPUT(entry.begin <= entry.end, "{}: tensor `{}`: field `data_offsets`: expected begin <= end, found [{}, {}]",
           file, entry.shown, entry.begin, entry.end);
  return entry;
}

}  // namespace

const Tensor& SafetensorsFile::at(std::string_view name) const {
  for (const auto& [key, tensor] : tensors) {
    if (key == name) return tensor;
  }
  QC_FAIL_INPUT("{}: expected a tensor named `{}`, found none ({} tensors in the file)", path, name, tensors.size());
}

bool SafetensorsFile::contains(std::string_view name) const {
  return std::any_of(tensors.begin(), tensors.end(), [&](const auto& kv) { return kv.first == name; });
}

std::vector<std::string> SafetensorsFile::names() const {
  std::vector<std::string> out;
  out.reserve(tensors.size());
  for (const auto& kv : tensors) out.push_back(kv.first);
  return out;
}

SafetensorsFile parse_safetensors(std::span<const std::byte> bytes, std::string_view file,
                                  std::shared_ptr<const void> keep_alive) {
  QC_INPUT(bytes.size() >= 8,
           "{}: expected at least 8 bytes (the little-endian header length), found a file of {} bytes", file,
           bytes.size());
  const uint64_t header_size = read_u64_le(bytes.data());
  QC_INPUT(header_size <= kSafetensorsMaxHeader,
           "{}: header length: expected at most {} bytes, found {} (is this a safetensors file?)", file,
           kSafetensorsMaxHeader, header_size);
  QC_INPUT(header_size <= bytes.size() - 8,
           "{}: header length: expected at most the {} bytes that follow the length field, found {} (truncated file?)",
           file, bytes.size() - 8, header_size);

  const std::string_view text(reinterpret_cast<const char*>(bytes.data() + 8), header_size);
  const json header = parse_header_json(text, file);
  QC_INPUT(header.is_object(), "{}: header: expected a JSON object, found {}", file, found(header));

  SafetensorsFile out;
  out.path = std::string(file);
  out.header_size = header_size;
  out.bytes = bytes;
  std::vector<Entry> entries;
  for (const auto& [key, value] : header.items()) {
    if (key == "__metadata__") {
      if (value.is_null()) continue;
      QC_INPUT(value.is_object(), "{}: `__metadata__`: expected an object of strings, found {}", file, found(value));
      for (const auto& [mkey, mvalue] : value.items()) {
        QC_INPUT(mvalue.is_string(), "{}: `__metadata__`, key `{}`: expected a string value, found {}", file, printable_text(mkey),
                 found(mvalue));
        out.metadata.emplace(mkey, mvalue.get<std::string>());
      }
      continue;
    }
    entries.push_back(parse_entry(file, key, value));
  }

  // Tensors tile the data section exactly, in offset order (ties, only possible between empty
  // tensors, by name so that the order is deterministic).
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    if (a.begin != b.begin) return a.begin < b.begin;
    if (a.end != b.end) return a.end < b.end;
    return a.name < b.name;
  });
  const uint64_t data_size = bytes.size() - 8 - header_size;
  const std::byte* data = bytes.data() + 8 + header_size;
  uint64_t expected_begin = 0;
  const Entry* previous = nullptr;
  for (const Entry& e : entries) {
    QC_INPUT(e.end <= data_size,
             "{}: tensor `{}`: field `data_offsets`: expected offsets inside the data section of {} bytes, found [{}, "
             "{}]",
             file, e.shown, data_size, e.begin, e.end);
    QC_INPUT(e.begin >= expected_begin,
             "{}: tensor `{}`: field `data_offsets`: expected to begin at or after {} where tensor `{}` ends, found "
             "[{}, {}] (overlapping tensors)",
             file, e.shown, expected_begin, previous ? previous->shown : "", e.begin, e.end);
    QC_INPUT(e.begin == expected_begin,
             "{}: tensor `{}`: field `data_offsets`: expected to begin at {} ({}), found [{}, {}]: a gap of {} "
             "unclaimed bytes, which the safetensors format does not allow",
             file, e.shown, expected_begin,
             previous ? fmt::format("where tensor `{}` ends", previous->shown) : std::string("the data section start"),
             e.begin, e.end, e.begin - expected_begin);
    QC_INPUT(e.end - e.begin == e.nbytes,
             "{}: tensor `{}`: expected data_offsets to span shape {} × {} bytes = {} bytes of {}, found [{}, {}] = "
             "{} bytes",
             file, e.shown, shape_string(e.shape), dtype_size(e.dtype), e.nbytes, dtype_safetensors_name(e.dtype),
             e.begin, e.end, e.end - e.begin);
    expected_begin = e.end;
    previous = &e;
  }
  QC_INPUT(expected_begin == data_size,
           "{}: data section: expected the tensors to cover all {} bytes, found {} trailing bytes after {}", file,
           data_size, data_size - expected_begin,
           previous ? fmt::format("tensor `{}`", previous->shown) : std::string("the header (no tensors)"));

  out.tensors.reserve(entries.size());
  for (Entry& e : entries) {
    const std::byte* p = data + e.begin;
    const size_t align = std::min<size_t>(dtype_size(e.dtype), 8);
    Tensor t = reinterpret_cast<uintptr_t>(p) % align == 0
                   ? Tensor::borrow(e.dtype, std::move(e.shape), p, keep_alive)
                   : Tensor::from_bytes(e.dtype, std::move(e.shape), std::span<const std::byte>(p, e.nbytes));
    out.tensors.emplace_back(std::move(e.name), std::move(t));
  }
  return out;
}

SafetensorsFile read_safetensors(const std::string& path) {
  auto mapping = std::make_shared<const MappedFile>(path);
  const std::span<const std::byte> bytes = mapping->bytes();
  SafetensorsFile file = parse_safetensors(bytes, path, std::move(mapping));
  file.read_only_mapping = true;
  return file;
}

namespace {

struct Prepared {
  std::string header;  // 8-byte length + padded JSON
  std::vector<const std::pair<std::string, Tensor>*> order;
};

std::string json_string(const std::string& s, std::string_view what) {
  try {
    return json(s).dump();
  } catch (const json::exception&) {
    QC_FAIL_INPUT("safetensors writer: {} `{}`: expected valid UTF-8, found invalid bytes", what, s);
  }
}

Prepared prepare(const std::vector<std::pair<std::string, Tensor>>& tensors,
                 const std::map<std::string, std::string>& metadata) {
  Prepared p;
  std::set<std::string_view> seen;
  for (const auto& kv : tensors) {
    QC_INPUT(kv.first != "__metadata__", "safetensors writer: tensor name `__metadata__` is reserved for metadata");
    QC_INPUT(seen.insert(kv.first).second, "safetensors writer: expected unique tensor names, found `{}` twice",
             kv.first);
    p.order.push_back(&kv);
  }
  std::sort(p.order.begin(), p.order.end(), [](const auto* a, const auto* b) {
    const int ra = rust_dtype_rank(a->second.dtype()), rb = rust_dtype_rank(b->second.dtype());
    if (ra != rb) return ra > rb;
    return a->first < b->first;  // bytewise, as Rust's `str::cmp`
  });

  std::string j = "{";
  if (!metadata.empty()) {
    j += "\"__metadata__\":{";
    bool first = true;
    for (const auto& [k, v] : metadata) {
      if (!first) j += ',';
      first = false;
      j += json_string(k, "metadata key");
      j += ':';
      j += json_string(v, "metadata value");
    }
    j += '}';
  }
  uint64_t offset = 0;
  for (const auto* kv : p.order) {
    if (j.size() > 1) j += ',';
    const Tensor& t = kv->second;
    const uint64_t n = t.nbytes();
    j += fmt::format("{}:{{\"dtype\":\"{}\",\"shape\":[{}],\"data_offsets\":[{},{}]}}",
                     json_string(kv->first, "tensor name"), dtype_safetensors_name(t.dtype()),
                     fmt::join(t.shape(), ","), offset, offset + n);
    offset += n;
  }
  j += '}';
  // Pad with spaces so the data section starts 8-byte aligned (what the reference writer does).
  j.append((8 - j.size() % 8) % 8, ' ');

  p.header.resize(8);
  const uint64_t n = j.size();
  for (int i = 0; i < 8; ++i) p.header[i] = static_cast<char>((n >> (8 * i)) & 0xFF);
  p.header += j;
  return p;
}

}  // namespace

std::string serialize_safetensors(const std::vector<std::pair<std::string, Tensor>>& tensors,
                                  const std::map<std::string, std::string>& metadata) {
  Prepared p = prepare(tensors, metadata);
  std::string out = std::move(p.header);
  for (const auto* kv : p.order) {
    const Tensor c = kv->second.contiguous();
    const auto b = c.bytes();
    out.append(reinterpret_cast<const char*>(b.data()), b.size());
  }
  return out;
}

void write_safetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  Prepared p = prepare(tensors, metadata);
  AtomicFileWriter writer(path);
  writer.write(std::string_view(p.header));
  for (const auto* kv : p.order) {
    const Tensor c = kv->second.contiguous();
    writer.write(c.bytes());
  }
  writer.commit();
}

}  // namespace qc
