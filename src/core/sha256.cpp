#include "core/sha256.hpp"

#include <fcntl.h>
#include <openssl/evp.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <future>
#include <vector>

#include "qconform/error.hpp"
#include "core/fileio.hpp"

namespace qc {

struct Sha256::Impl {
  EVP_MD_CTX* ctx = nullptr;
};

Sha256::Sha256() : impl_(std::make_unique<Impl>()) {
  impl_->ctx = EVP_MD_CTX_new();
  QC_CHECK(impl_->ctx != nullptr, "EVP_MD_CTX_new failed");
  QC_CHECK(EVP_DigestInit_ex(impl_->ctx, EVP_sha256(), nullptr) == 1, "EVP_DigestInit_ex(sha256) failed");
}

Sha256::~Sha256() { EVP_MD_CTX_free(impl_->ctx); }

void Sha256::update(std::span<const std::byte> bytes) {
  QC_CHECK(!finished_, "Sha256::update after hex()");
  if (bytes.empty()) return;
  QC_CHECK(EVP_DigestUpdate(impl_->ctx, bytes.data(), bytes.size()) == 1, "EVP_DigestUpdate failed");
}

void Sha256::update(std::string_view text) {
  update(std::span<const std::byte>(reinterpret_cast<const std::byte*>(text.data()), text.size()));
}

std::string Sha256::hex() {
  QC_CHECK(!finished_, "Sha256::hex called twice");
  finished_ = true;
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  QC_CHECK(EVP_DigestFinal_ex(impl_->ctx, digest, &length) == 1 && length == 32, "EVP_DigestFinal_ex failed");
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out(64, '0');
  for (unsigned int i = 0; i < 32; ++i) {
    out[2 * i] = kHex[digest[i] >> 4];
    out[2 * i + 1] = kHex[digest[i] & 0xF];
  }
  return out;
}

std::string sha256_hex(std::span<const std::byte> bytes) {
  Sha256 h;
  h.update(bytes);
  return h.hex();
}

std::string sha256_hex(std::string_view text) {
  Sha256 h;
  h.update(text);
  return h.hex();
}

std::string sha256_digest(std::span<const std::byte> bytes) { return "sha256:" + sha256_hex(bytes); }

namespace {

// Fills `buffer` from `fd` (short reads continued); the bytes read, 0 at the end. Input error naming
// `path` when a read fails.
size_t read_chunk(int fd, std::vector<std::byte>& buffer, const std::string& path) {
  size_t have = 0;
  while (have < buffer.size()) {
    const ssize_t got = ::read(fd, buffer.data() + have, buffer.size() - have);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) QC_FAIL_INPUT("{}: read failed while hashing: {}", path, std::strerror(errno));
    if (got == 0) break;
    have += static_cast<size_t>(got);
  }
  return have;
}

}  // namespace

// Two buffers: a task reads the next chunk while this thread hashes the one before, so that a large file
// (verify's operands) is hashed at the hash's own pace rather than the sum of reading and hashing.
std::string sha256_file(const std::string& path) {
  const int fd = open_input(path);
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  constexpr size_t kChunk = size_t{8} << 20;
  std::vector<std::byte> buffer[2] = {std::vector<std::byte>(kChunk), std::vector<std::byte>(kChunk)};
  Sha256 h;
  size_t got = read_chunk(fd, buffer[0], path);
  for (int cur = 0; got != 0; cur = 1 - cur) {
    std::future<size_t> next = std::async(std::launch::async, [&, other = 1 - cur] { return read_chunk(fd, buffer[other], path); });
    h.update(std::span<const std::byte>(buffer[cur].data(), got));
    got = next.get();
  }
  return "sha256:" + h.hex();
}

}  // namespace qc
