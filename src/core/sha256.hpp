// SHA-256 through OpenSSL EVP. Manifests write every digest as `sha256:<64 lowercase hex>`.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "core/tree_leaves.hpp"

namespace qc {

// Incremental hashing, for data that arrives in pieces.
class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;

  void update(std::span<const std::byte> bytes);
  void update(std::string_view text);
  // The 64 lowercase hex digits (no prefix). The object cannot be updated afterwards.
  std::string hex();
  // The 32 bytes of the digest, instead of `hex` (one or the other, once).
  std::string bytes();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  bool finished_ = false;
};

// 64 lowercase hex digits, no prefix.
std::string sha256_hex(std::span<const std::byte> bytes);
std::string sha256_hex(std::string_view text);

// `sha256:<64 hex>`, the form manifests record.
std::string sha256_digest(std::span<const std::byte> bytes);

// Whether `d` is `<prefix><64 lowercase hex>`: `sha256:` for a plain digest, `sha256-tree:` for a tree digest.
bool is_digest(std::string_view d, std::string_view prefix = "sha256:");

// `sha256:<64 hex>` of a file's content, streamed in 8 MiB pieces (files of any size).
std::string sha256_file(const std::string& path);

// The tree digest of a file (docs/formats.md, "Tree digest"): SHA-256 of each 4 KiB leaf, computed on every
// core, then one SHA-256 over a fixed header, the leaf size, the file size and the leaves' digests.
// It is not the file's SHA-256 (which cannot be split); predictions record both, so that verify can take
// the plain one from them once the tree digest shows it has the same bytes. `sha256-tree:<64 hex>`.
// `threads` (0: every core) read the leaves at a lower priority than the process's other threads (nice +10),
// so that beside a verification they take the cores it leaves idle. The leaves in `given` (verify's device
// pipeline hashed them) are taken from it and not read; input error when it was made for another size.
std::string sha256_tree_file(const std::string& path, unsigned threads = 0, const TreeLeaves* given = nullptr);
// A file's plain SHA-256 by way of its tree digest and the digest record (docs/formats.md, "Digest record"):
// the tree digest is read on every core; when the record holds it, the plain SHA-256 recorded beside it is
// this file's (equal tree digests, equal bytes) and the file is read once, at the tree's pace. Otherwise the
// plain digest is read at the same time and the pair is recorded, unless the file changed meanwhile. With
// no record (`digest_record_dir()` empty) this is `sha256_file` alone.
struct FileDigests {
  std::string sha256;        // sha256:<64 hex>
  std::string sha256_tree;   // sha256-tree:<64 hex>; empty when there is no record
  bool from_record = false;  // `sha256` is the record's, not read now
};
FileDigests sha256_file_recorded(const std::string& path, unsigned threads = 0);  // `threads`: the tree's
// The same in two parts: the plain digest begins reading now, beside whatever follows; the function returned
// reads the tree digest, taking the leaves `given` has by then (verify's device pipeline gives them as it
// uploads), and finishes. Dropped uncalled, it abandons the plain read (with no record, it waits for it).
std::function<FileDigests()> sha256_file_recorded_begun(const std::string& path, unsigned threads,
                                                        std::shared_ptr<const TreeLeaves> given);
// The record's folder, absolute: QC_DIGEST_RECORD when set (`off`, `0`, `false`, `no`, `none` in any case, or
// empty: no record), else $XDG_CACHE_HOME/qconform/digests, else $HOME/.cache/qconform/digests; "" when none.
std::string digest_record_dir();
// Whether the record is there to use (its folder made when missing, this user's alone).
bool digest_record_usable();

}  // namespace qc
