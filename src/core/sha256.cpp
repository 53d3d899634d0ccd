#include "core/sha256.hpp"

#include <fcntl.h>
#include <openssl/evp.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
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

std::string sha256_file(const std::string& path) {
  const int fd = open_input(path);
  Sha256 h;
  std::vector<std::byte> buffer(1 << 20);
  for (;;) {
    const ssize_t got = ::read(fd, buffer.data(), buffer.size());
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) {
      const int err = errno;
      ::close(fd);
      QC_FAIL_INPUT("{}: read failed while hashing: {}", path, std::strerror(err));
    }
    if (got == 0) break;
    h.update(std::span<const std::byte>(buffer.data(), static_cast<size_t>(got)));
  }
  ::close(fd);
  return "sha256:" + h.hex();
}

}  // namespace qc
