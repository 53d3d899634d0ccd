#include "core/sha256.hpp"

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <fmt/format.h>
#include <openssl/evp.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <future>
#include <optional>
#include <thread>
#include <vector>

#include "qconform/error.hpp"
#include "core/fileio.hpp"
#include "core/parallel.hpp"

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

std::string Sha256::bytes() {
  QC_CHECK(!finished_, "Sha256: the digest taken twice");
  finished_ = true;
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  QC_CHECK(EVP_DigestFinal_ex(impl_->ctx, digest, &length) == 1 && length == 32, "EVP_DigestFinal_ex failed");
  return std::string(reinterpret_cast<const char*>(digest), 32);
}

std::string Sha256::hex() {
  static constexpr char kHex[] = "0123456789abcdef";
  const std::string raw = bytes();
  std::string out(64, '0');
  for (size_t i = 0; i < 32; ++i) {
    const auto b = static_cast<unsigned char>(raw[i]);
    out[2 * i] = kHex[b >> 4];
    out[2 * i + 1] = kHex[b & 0xF];
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

bool is_digest(std::string_view d, std::string_view prefix) {
  if (d.size() != prefix.size() + 64 || d.substr(0, prefix.size()) != prefix) return false;
  return std::all_of(d.begin() + static_cast<std::ptrdiff_t>(prefix.size()), d.end(),
                     [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

namespace {

// Reads up to `want` bytes of `fd` at `offset` into `buffer` (pread, so that threads may share the
// descriptor; short reads continued); the bytes read, fewer only at the end of the file. Input error naming
// `path` when a read fails.
size_t read_at(int fd, uint64_t offset, std::byte* buffer, size_t want, const std::string& path) {
  size_t have = 0;
  while (have < want) {
    const ssize_t got = ::pread(fd, buffer + have, want - have, static_cast<off_t>(offset + have));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) QC_FAIL_INPUT("{}: read failed while hashing: {}", path, std::strerror(errno));
    if (got == 0) break;
    have += static_cast<size_t>(got);
  }
  return have;
}

void append_u64_le(std::string& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}

}  // namespace

namespace {

// One SHA-256 per call on a context kept from call to call (a leaf of 4 KiB costs ~4% more than the same
// bytes hashed in one piece).
class LeafHasher {
 public:
  LeafHasher() : ctx_(EVP_MD_CTX_new()) { QC_CHECK(ctx_ != nullptr, "EVP_MD_CTX_new failed"); }
  ~LeafHasher() { EVP_MD_CTX_free(ctx_); }
  LeafHasher(const LeafHasher&) = delete;
  LeafHasher& operator=(const LeafHasher&) = delete;
  void operator()(const std::byte* bytes, size_t n, unsigned char* out) {
    unsigned int length = 0;
    QC_CHECK(EVP_DigestInit_ex(ctx_, EVP_sha256(), nullptr) == 1 && EVP_DigestUpdate(ctx_, bytes, n) == 1 &&
                 EVP_DigestFinal_ex(ctx_, out, &length) == 1 && length == 32,
             "SHA-256 of a tree leaf failed");
  }

 private:
  EVP_MD_CTX* ctx_;
};

}  // namespace

namespace {

// Two buffers: a task reads the next chunk while this thread hashes the one before, so that a large file
// (verify's operands) is hashed at the hash's own pace rather than the sum of reading and hashing. Returns
// "" when `stop` was set before the end.
std::string sha256_file_until(const std::string& path, const std::atomic<bool>* stop) {
  const int fd = open_input(path);
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  constexpr size_t kChunk = size_t{8} << 20;
  std::vector<std::byte> buffer[2] = {std::vector<std::byte>(kChunk), std::vector<std::byte>(kChunk)};
  Sha256 h;
  uint64_t offset = 0;
  size_t got = read_at(fd, offset, buffer[0].data(), kChunk, path);
  for (int cur = 0; got != 0; cur = 1 - cur) {
    if (stop != nullptr && stop->load(std::memory_order_relaxed)) return "";
    offset += got;
    std::future<size_t> next = std::async(std::launch::async, [&, other = 1 - cur, at = offset] {
      return read_at(fd, at, buffer[other].data(), kChunk, path);
    });
    h.update(std::span<const std::byte>(buffer[cur].data(), got));
    got = next.get();
  }
  return "sha256:" + h.hex();
}

}  // namespace

std::string sha256_file(const std::string& path) { return sha256_file_until(path, nullptr); }

std::string sha256_tree_file(const std::string& path, unsigned threads, const TreeLeaves* given) {
  uint64_t size = 0;
  const int fd = open_input(path, &size);
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  QC_INPUT(given == nullptr || given->file_size() == size,
           "{}: the file is {} bytes, but {} when its arrays were read for the device: it changed during the run", path,
           size, given ? given->file_size() : 0);
  const uint64_t leaves = std::max<uint64_t>(1, (size + kTreeDigestLeaf - 1) / kTreeDigestLeaf);
  std::string root("qconform sha256-tree v2", 23);
  root.push_back('\0');
  append_u64_le(root, kTreeDigestLeaf);
  append_u64_le(root, size);
  const size_t at = root.size();
  root.resize(at + static_cast<size_t>(leaves) * 32);
  unsigned char* digests = reinterpret_cast<unsigned char*>(root.data() + at);
  // The leaves in blocks of 8 MiB, on every core; in each block, every run of leaves nobody gave is read and
  // hashed (a block of given leaves alone is not read).
  constexpr uint64_t kBlockLeaves = (uint64_t{8} << 20) / kTreeDigestLeaf;
  const uint64_t blocks = (leaves + kBlockLeaves - 1) / kBlockLeaves;
  const unsigned cores = threads != 0 ? threads : static_cast<unsigned>(hardware_threads());  // a rank's share
  const size_t workers = static_cast<size_t>(std::min<uint64_t>(blocks, cores));
  std::vector<std::future<void>> tasks;
  for (size_t t = 0; t < workers; ++t) {
    tasks.push_back(std::async(std::launch::async, [&, t] {
      // Linux keeps a nice value per thread: this worker's alone is lowered (a failure leaves it as it was).
      ::setpriority(PRIO_PROCESS, static_cast<id_t>(::syscall(SYS_gettid)), 10);
      std::vector<std::byte> buffer(static_cast<size_t>(kBlockLeaves * kTreeDigestLeaf));
      LeafHasher hash;
      for (uint64_t b = t; b < blocks; b += workers) {
        const uint64_t end = std::min(leaves, (b + 1) * kBlockLeaves);
        for (uint64_t i = b * kBlockLeaves; i < end;) {
          if (const unsigned char* d = given ? given->given(i) : nullptr) {
            std::memcpy(digests + i * 32, d, 32);
            ++i;
            continue;
          }
          uint64_t run_end = i + 1;
          while (run_end < end && (given == nullptr || given->given(run_end) == nullptr)) ++run_end;
          const uint64_t from = i * kTreeDigestLeaf, to = std::min(size, run_end * kTreeDigestLeaf);
          const size_t got = read_at(fd, from, buffer.data(), static_cast<size_t>(to - from), path);
          QC_INPUT(got == to - from, "{}: the file became shorter while it was hashed (at byte {})", path, from + got);
          for (uint64_t j = i; j < run_end; ++j) {
            const uint64_t lo = (j - i) * kTreeDigestLeaf;
            hash(buffer.data() + lo, static_cast<size_t>(std::min<uint64_t>(kTreeDigestLeaf, got - std::min<uint64_t>(got, lo))),
                 digests + j * 32);
          }
          i = run_end;
        }
      }
    }));
  }
  for (auto& task : tasks) task.get();  // rethrows a read error
  return "sha256-tree:" + sha256_hex(std::string_view(root));
}

std::string digest_record_dir() {
  std::string dir;
  if (const char* set = std::getenv("QC_DIGEST_RECORD")) {
    dir = set;
    std::string lower;
    for (char c : dir) lower.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
    if (lower == "off" || lower == "0" || lower == "false" || lower == "no" || lower == "none") return "";
  } else if (const char* cache = std::getenv("XDG_CACHE_HOME"); cache != nullptr && cache[0] == '/') {
    dir = std::string(cache) + "/qconform/digests";
  } else if (const char* home = std::getenv("HOME"); home != nullptr && home[0] == '/') {
    dir = std::string(home) + "/.cache/qconform/digests";
  }
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  if (dir.empty()) return "";
  std::error_code ec;
  const std::filesystem::path absolute = std::filesystem::absolute(dir, ec);
  return ec ? "" : absolute.string();
}

namespace {

// The record's folder, opened (O_DIRECTORY | O_NOFOLLOW, made 0700 when missing) and checked through that
// descriptor: this user's, writable by nobody else. Every entry is then read and written relative to it
// (openat, renameat), so a folder swapped under the path after the check is never the one used. -1 when
// there is no record, or it cannot be made, or it is not this user's alone (its entries could be anybody's).
class RecordDir {
 public:
  RecordDir() {
    const std::string dir = digest_record_dir();
    if (dir.empty()) return;
    std::error_code ec;
    std::filesystem::create_directories(std::filesystem::path(dir).parent_path(), ec);
    if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) return;
    fd_ = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    struct stat st {};
    if (fd_ >= 0 && (::fstat(fd_, &st) != 0 || st.st_uid != ::geteuid() || (st.st_mode & (S_IWGRP | S_IWOTH)) != 0)) {
      ::close(fd_);
      fd_ = -1;
    }
  }
  ~RecordDir() {
    if (fd_ >= 0) ::close(fd_);
  }
  RecordDir(const RecordDir&) = delete;
  RecordDir& operator=(const RecordDir&) = delete;
  bool usable() const { return fd_ >= 0; }

  // The plain digest recorded under `name`, when the entry is a regular file of this user's, writable by
  // nobody else, holding exactly `sha256:<64 hex>\n`; anything else is not an entry (replaced on a miss).
  std::optional<std::string> read(const std::string& name) const {
    const int fd = ::openat(fd_, name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return std::nullopt;
    struct Closer {
      int fd;
      ~Closer() { ::close(fd); }
    } closer{fd};
    struct stat st {};
    constexpr size_t kSize = 72;  // "sha256:" + 64 hex + "\n"
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != ::geteuid() ||
        (st.st_mode & (S_IWGRP | S_IWOTH)) != 0 || st.st_size != static_cast<off_t>(kSize)) {
      return std::nullopt;
    }
    char text[kSize];
    if (::pread(fd, text, kSize, 0) != static_cast<ssize_t>(kSize) || text[kSize - 1] != '\n') return std::nullopt;
    std::string plain(text, kSize - 1);
    if (!is_digest(plain)) return std::nullopt;
    return plain;
  }

  // Writes `plain` under `name`: a temporary file of mode 0600 (whatever the umask) renamed into place; a
  // failure (a full or read-only disk) leaves no trace and costs the next run its speed, nothing more. Not
  // `AtomicFileWriter`, which names paths (this goes through the checked folder's descriptor) and gives the
  // umask's mode (an entry must be writable by nobody else to be believed).
  void write(const std::string& name, const std::string& plain) const {
    static std::atomic<unsigned> serial{0};
    const std::string temp = fmt::format(".{}.{}.{}.partial", name, ::getpid(), serial++);
    const int fd = ::openat(fd_, temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) return;
    const std::string text = plain + "\n";
    const bool ok = ::fchmod(fd, 0600) == 0 && ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
    if (::close(fd) != 0 || !ok || ::renameat(fd_, temp.c_str(), fd_, name.c_str()) != 0) ::unlinkat(fd_, temp.c_str(), 0);
  }

 private:
  int fd_ = -1;
};

// What identifies the file's bytes without reading them: unchanged across both digests, or the pair is not
// recorded.
struct FileStamp {
  dev_t dev = 0;
  ino_t ino = 0;
  off_t size = 0;
  timespec mtime{}, ctime{};
  bool ok = false;
  bool operator==(const FileStamp& o) const {
    return ok && o.ok && dev == o.dev && ino == o.ino && size == o.size && mtime.tv_sec == o.mtime.tv_sec &&
           mtime.tv_nsec == o.mtime.tv_nsec && ctime.tv_sec == o.ctime.tv_sec && ctime.tv_nsec == o.ctime.tv_nsec;
  }
};
FileStamp stamp_of(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return {};
  return {st.st_dev, st.st_ino, st.st_size, st.st_mtim, st.st_ctim, S_ISREG(st.st_mode)};
}

}  // namespace

bool digest_record_usable() { return RecordDir().usable(); }

std::function<FileDigests()> sha256_file_recorded_begun(const std::string& path, unsigned threads,
                                                        std::shared_ptr<const TreeLeaves> given) {
  auto record = std::make_shared<const RecordDir>();
  if (!record->usable()) {
    auto plain = std::make_shared<std::future<std::string>>(std::async(std::launch::async, [path] { return sha256_file(path); }));
    return [plain] { return FileDigests{plain->get(), "", false}; };
  }
  // The plain digest is read beside (one core, at nice +10) from now on, and abandoned if the record has it.
  struct Plain {
    std::atomic<bool> stop{false};
    std::future<std::string> read;
    ~Plain() {  // also when the tree throws, or nobody finishes: the task must not outlive `stop`
      if (read.valid()) {
        stop = true;
        read.wait();
      }
    }
  };
  auto plain = std::make_shared<Plain>();
  plain->read = std::async(std::launch::async, [path, p = plain.get()] {
    ::setpriority(PRIO_PROCESS, static_cast<id_t>(::syscall(SYS_gettid)), 10);  // as the tree's readers
    return sha256_file_until(path, &p->stop);
  });
  return [path, threads, given = std::move(given), record, plain, before = stamp_of(path)] {
    FileDigests d;
    d.sha256_tree = sha256_tree_file(path, threads, given.get());
    const std::string name = d.sha256_tree.substr(std::string_view("sha256-tree:").size());
    if (std::optional<std::string> recorded = record->read(name)) {
      d.sha256 = *recorded;
      d.from_record = true;
      return d;  // `plain` abandons the plain digest when the last copy of this function goes
    }
    d.sha256 = plain->read.get();
    // Recorded only when the bytes held still while both were read: the same stamp (size, inode, times) and
    // the same tree digest read again after the plain one, from the file alone (a write the times do not
    // show, through a shared mapping or within one clock tick, changes the bytes, and so the tree, unless it
    // was undone in between; leaves given by the device are not the file read now).
    if (before == stamp_of(path) && sha256_tree_file(path, threads) == d.sha256_tree) record->write(name, d.sha256);
    return d;
  };
}

FileDigests sha256_file_recorded(const std::string& path, unsigned threads) {
  return sha256_file_recorded_begun(path, threads, nullptr)();
}

}  // namespace qc
