// SHA-256 through OpenSSL EVP. Manifests write every digest as `sha256:<64 lowercase hex>`.
#pragma once

#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <string_view>

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

// `sha256:<64 hex>` of a file's content, streamed in 1 MiB pieces (files of any size).
std::string sha256_file(const std::string& path);

}  // namespace qc
