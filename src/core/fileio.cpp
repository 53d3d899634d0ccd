#include "qconform/fileio.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "qconform/error.hpp"

namespace qc {

namespace {

std::string errno_text(int err) { return std::strerror(err); }

std::string directory_of(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

std::string basename_of(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// Files created by mkstemp are 0600; a finished output should carry the permissions any other
// newly created file would get.
mode_t default_file_mode() {
  const mode_t mask = ::umask(0);
  ::umask(mask);
  return 0666 & ~mask;
}

}  // namespace

std::string printable_text(std::string_view text, size_t max_bytes) {
  std::string out;
  size_t i = 0;
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(text[k]); };
  const auto cont = [&](size_t k, unsigned lo = 0x80, unsigned hi = 0xBF) {
    return k < text.size() && byte(k) >= lo && byte(k) <= hi;
  };
  while (i < text.size()) {
    if (out.size() >= max_bytes) {
      out += "...";
      break;
    }
    const unsigned c = byte(i);
    size_t len = 0;  // length of a valid UTF-8 sequence starting at i, 0 if none (RFC 3629 table)
    if (c >= 0x20 && c < 0x7F) {
      len = 1;
    } else if (c >= 0xC2 && c <= 0xDF) {
      len = cont(i + 1) ? 2 : 0;
    } else if (c == 0xE0) {
      len = cont(i + 1, 0xA0) && cont(i + 2) ? 3 : 0;
    } else if ((c >= 0xE1 && c <= 0xEC) || c == 0xEE || c == 0xEF) {
      len = cont(i + 1) && cont(i + 2) ? 3 : 0;
    } else if (c == 0xED) {
      len = cont(i + 1, 0x80, 0x9F) && cont(i + 2) ? 3 : 0;
    } else if (c == 0xF0) {
      len = cont(i + 1, 0x90) && cont(i + 2) && cont(i + 3) ? 4 : 0;
    } else if (c >= 0xF1 && c <= 0xF3) {
      len = cont(i + 1) && cont(i + 2) && cont(i + 3) ? 4 : 0;
    } else if (c == 0xF4) {
      len = cont(i + 1, 0x80, 0x8F) && cont(i + 2) && cont(i + 3) ? 4 : 0;
    }
    if (len == 0) {
      out += fmt::format("\\x{:02x}", c);
      ++i;
    } else {
      out.append(text.substr(i, len));
      i += len;
    }
  }
  return out;
}

std::string read_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  QC_INPUT(fd >= 0, "{}: cannot open for reading: {}", path, errno_text(errno));
  std::string content;
  char buffer[1 << 16];
  for (;;) {
    const ssize_t got = ::read(fd, buffer, sizeof buffer);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) {
      const int err = errno;
      ::close(fd);
      QC_FAIL_INPUT("{}: read failed: {}", path, errno_text(err));
    }
    if (got == 0) break;
    content.append(buffer, static_cast<size_t>(got));
  }
  ::close(fd);
  return content;
}

void write_file_atomic(const std::string& path, std::string_view content) {
  AtomicFileWriter writer(path);
  writer.write(content);
  writer.commit();
}

AtomicFileWriter::AtomicFileWriter(std::string path) : path_(std::move(path)) {
  QC_INPUT(!path_.empty() && path_.back() != '/', "`{}`: expected a file path for the output, found a directory name",
           path_);
  // The temporary file lives in the destination's directory so that the final rename never
  // crosses a file system; the leading dot keeps it out of globs.
  std::string pattern = directory_of(path_) + "/." + basename_of(path_) + ".qc-tmp-XXXXXX";
  fd_ = ::mkostemp(pattern.data(), O_CLOEXEC);
  QC_INPUT(fd_ >= 0, "{}: cannot create a temporary file in `{}` for the output: {}", path_, directory_of(path_),
           errno_text(errno));
  temp_path_ = std::move(pattern);
}

AtomicFileWriter::~AtomicFileWriter() {
  if (!committed_) discard();
}

void AtomicFileWriter::discard() noexcept {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  if (!temp_path_.empty()) ::unlink(temp_path_.c_str());
}

void AtomicFileWriter::write(std::span<const std::byte> bytes) {
  QC_CHECK(fd_ >= 0 && !committed_, "AtomicFileWriter::write on a closed writer for {}", path_);
  const std::byte* p = bytes.data();
  size_t left = bytes.size();
  while (left > 0) {
    const ssize_t put = ::write(fd_, p, left);
    if (put < 0 && errno == EINTR) continue;
    QC_INPUT(put > 0, "{}: write failed (temporary file `{}`): {}", path_, temp_path_,
             errno_text(put < 0 ? errno : EIO));
    p += put;
    left -= static_cast<size_t>(put);
  }
}

void AtomicFileWriter::write(std::string_view text) {
  write(std::span<const std::byte>(reinterpret_cast<const std::byte*>(text.data()), text.size()));
}

void AtomicFileWriter::commit() {
  QC_CHECK(fd_ >= 0 && !committed_, "AtomicFileWriter::commit twice for {}", path_);
  QC_INPUT(::fchmod(fd_, default_file_mode()) == 0, "{}: chmod of temporary file failed: {}", path_,
           errno_text(errno));
  QC_INPUT(::fsync(fd_) == 0, "{}: fsync failed: {}", path_, errno_text(errno));
  const int fd = fd_;
  fd_ = -1;
  QC_INPUT(::close(fd) == 0, "{}: close failed: {}", path_, errno_text(errno));
  QC_INPUT(::rename(temp_path_.c_str(), path_.c_str()) == 0, "{}: cannot rename `{}` into place: {}", path_,
           temp_path_, errno_text(errno));
  committed_ = true;
  // Make the rename itself durable; failure here cannot un-write the file, so it is not an error.
  const int dir = ::open(directory_of(path_).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir >= 0) {
    ::fsync(dir);
    ::close(dir);
  }
}

MappedFile::MappedFile(const std::string& path) : path_(path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  QC_INPUT(fd >= 0, "{}: cannot open for reading: {}", path, errno_text(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    QC_FAIL_INPUT("{}: cannot stat: {}", path, errno_text(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    QC_FAIL_INPUT("{}: expected a regular file, found another kind of file (directory, device or pipe)", path);
  }
  size_ = static_cast<size_t>(st.st_size);
  if (size_ > 0) {
    data_ = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (data_ == MAP_FAILED) {
      const int err = errno;
      data_ = nullptr;
      ::close(fd);
      QC_FAIL_INPUT("{}: mmap of {} bytes failed: {}", path, size_, errno_text(err));
    }
  }
  // The mapping stays valid after the descriptor is closed.
  ::close(fd);
}

MappedFile::~MappedFile() {
  if (data_ != nullptr) ::munmap(data_, size_);
}

MappedFile::MappedFile(MappedFile&& other) noexcept
    : path_(std::move(other.path_)), data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    if (data_ != nullptr) ::munmap(data_, size_);
    path_ = std::move(other.path_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

}  // namespace qc
