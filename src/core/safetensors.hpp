// safetensors files: a strict, zero-copy reader (memory map) and a writer whose output is
// byte-identical to the Python `safetensors` library's for the same tensors and metadata.
//
// Format (https://github.com/huggingface/safetensors): 8 bytes little-endian u64 `N`, then `N`
// bytes of UTF-8 JSON (the header), then the data section. The header maps each tensor name to
// `{"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]}` (offsets relative to the data
// section) and may hold `"__metadata__"`, a string → string map.
//
// Validation (every violation is a `qc::Error` of kind `input` naming the file, the tensor, what
// was expected and what was found), following the Rust reference implementation:
// - the file holds at least the 8-byte length; `N` ≤ 100,000,000 and 8 + `N` ≤ file size;
// - the header is valid UTF-8 JSON, a JSON object, without duplicate keys at any level;
// - each entry is an object with `dtype` (a name qconform supports), `shape` (array of
//   non-negative integers whose product × dtype size does not overflow) and `data_offsets`
//   (two non-negative integers, begin ≤ end); other fields are ignored, as the Rust library does;
// - `__metadata__` is null or an object whose values are all strings;
// - sorted by offsets, tensors tile the data section exactly: the first begins at 0, each begins
//   where the previous ended (no gap, no overlap), the last ends at the end of the file (no
//   trailing bytes), and end − begin = numel × dtype size.
// Tensors are zero-copy views of the mapping unless their data is not aligned to its element size
// (possible only in files not written by the reference library), in which case they are copied.
#pragma once

#include <cstddef>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/tensor.hpp"

namespace qc {

inline constexpr uint64_t kSafetensorsMaxHeader = 100'000'000;

struct SafetensorsFile {
  std::string path;                                      // or the name given to `parse_safetensors`
  std::map<std::string, std::string> metadata;           // `__metadata__`
  std::vector<std::pair<std::string, Tensor>> tensors;   // in file (data offset) order
  uint64_t header_size = 0;                              // `N`
  bool read_only_mapping = false;                        // tensors view a PROT_READ file mapping (read_safetensors)
  std::span<const std::byte> bytes;                      // the whole file, as parsed (the mapping's bytes)

  // The tensor called `name`; QC_INPUT error naming the file and the key when it is absent.
  const Tensor& at(std::string_view name) const;
  bool contains(std::string_view name) const;
  std::vector<std::string> names() const;
};

// Parses a whole safetensors file held in memory. Tensors view `bytes`, which `keep_alive` (may
// be null when the caller guarantees `bytes` outlives the result) keeps alive.
SafetensorsFile parse_safetensors(std::span<const std::byte> bytes, std::string_view name_for_errors,
                                  std::shared_ptr<const void> keep_alive = nullptr);

// Maps `path` and parses it; tensors keep the mapping alive.
SafetensorsFile read_safetensors(const std::string& path);

// The file bytes the Python library's `serialize` produces for these tensors: tensors sorted by
// descending dtype rank (the Rust `Dtype` declaration order, which groups large elements first)
// then by name, compact JSON with `__metadata__` first (omitted when empty; keys in sorted order),
// header padded with spaces to a multiple of 8 bytes. Non-contiguous tensors are written in C
// order. QC_INPUT on duplicate or reserved names and on names that are not valid UTF-8.
std::string serialize_safetensors(const std::vector<std::pair<std::string, Tensor>>& tensors,
                                  const std::map<std::string, std::string>& metadata = {});

// Writes `serialize_safetensors(tensors, metadata)` to `path` atomically (temporary file in the
// same directory, fsync, rename), streaming tensor bytes rather than building the file in memory.
void write_safetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace qc
