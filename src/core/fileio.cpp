#include "core/fileio.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <dirent.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cctype>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <tuple>
#include <utility>

#include <fmt/format.h>

#include "core/output_lock.hpp"
#include "core/test_hold.hpp"
#include "qconform/error.hpp"

namespace qc {

namespace {

std::string errno_text(int err) { return std::strerror(err); }

// ---------------------------------------------------------------------------------------------
// Registries read by signal handlers. A handler may only call async-signal-safe functions, so
// the registries are fixed arrays of slots in static storage: a slot is claimed with a lock-free
// compare-exchange (0 free -> 1 being filled), filled, then published (2 live); a handler only
// reads live slots. A full registry is not an error: the file simply is not cleaned up by a signal.

constexpr int kSlots = 64;
constexpr size_t kSlotPath = 4096;

struct TempSlot {
  std::atomic<int> state{0};
  char path[kSlotPath];
};

struct MapSlot {
  std::atomic<int> state{0};
  uintptr_t begin;
  size_t size;
  int fd;  // the mapped file, open while it is mapped (`find_mapped_source`)
  // Bumped as a mapping is published and as it is released: a reader outside a signal handler takes the
  // values only if it reads the same generation before and after them (`find_mapped_source`).
  std::atomic<uint64_t> generation{0};
  char path[kSlotPath];
};

TempSlot g_temp_slots[kSlots];
TempSlot g_dir_slots[kSlots];
MapSlot g_map_slots[kSlots];
static_assert(std::atomic<int>::is_always_lock_free, "signal handlers read the slot states");

template <class Slot>
int claim_slot(Slot* slots, const std::string& path) {
  if (path.size() >= kSlotPath) return -1;
  for (int i = 0; i < kSlots; ++i) {
    int expected = 0;
    if (slots[i].state.compare_exchange_strong(expected, 1)) {
      std::memcpy(slots[i].path, path.c_str(), path.size() + 1);
      return i;
    }
  }
  return -1;
}

// Removes a registered temporary directory and the files directly in it, with system calls only
// (getdents64, unlinkat, rmdir are async-signal-safe; opendir/readdir are not).
void remove_directory_signal_safe(const char* path) {
  const int fd = ::open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd >= 0) {
    alignas(8) char buffer[4096];
    for (;;) {
      const long got = ::syscall(SYS_getdents64, fd, buffer, sizeof buffer);
      if (got <= 0) break;
      for (long off = 0; off < got;) {
        struct Dirent64 {
          uint64_t ino;
          int64_t off;
          unsigned short reclen;
          unsigned char type;
          char name[1];
        };
        const auto* d = reinterpret_cast<const Dirent64*>(buffer + off);
        const bool dot = d->name[0] == '.' && (d->name[1] == '\0' || (d->name[1] == '.' && d->name[2] == '\0'));
        if (!dot) ::unlinkat(fd, d->name, 0);
        off += d->reclen;
      }
    }
    ::close(fd);
  }
  ::rmdir(path);
}

void remove_temporary_files_signal_safe() {
  for (TempSlot& slot : g_temp_slots) {
    if (slot.state.load(std::memory_order_acquire) == 2) ::unlink(slot.path);
  }
  for (TempSlot& slot : g_dir_slots) {
    if (slot.state.load(std::memory_order_acquire) == 2) remove_directory_signal_safe(slot.path);
  }
}

void write_signal_safe(const char* text) {
  size_t n = std::strlen(text);
  while (n > 0) {
    const ssize_t put = ::write(STDERR_FILENO, text, n);
    if (put <= 0) return;
    text += put;
    n -= static_cast<size_t>(put);
  }
}

void write_number_signal_safe(uint64_t v) {
  char digits[24];
  int i = 23;
  digits[i] = '\0';
  do {
    digits[--i] = static_cast<char>('0' + v % 10);
    v /= 10;
  } while (v != 0 && i > 0);
  write_signal_safe(digits + i);
}

extern "C" void qc_on_terminate_signal(int sig) {
  const int saved = errno;
  remove_temporary_files_signal_safe();
  errno = saved;
  // SA_RESETHAND restored the default action and SA_NODEFER leaves the signal unblocked: the
  // process dies of `sig` here, and its parent sees which signal it was.
  ::raise(sig);
}

std::atomic<bool> g_sigbus_reported{false};

extern "C" void qc_on_sigbus(int sig, siginfo_t* info, void* /*context*/) {
  const uintptr_t addr = reinterpret_cast<uintptr_t>(info->si_addr);
  for (MapSlot& slot : g_map_slots) {
    if (slot.state.load(std::memory_order_acquire) != 2) continue;
    if (addr < slot.begin || addr - slot.begin >= slot.size) continue;
    // Several threads may fault on the same shrunken file at once: the first reports and exits,
    // the others wait for the exit (the handler stays installed, so none dies of SIGBUS meanwhile).
    if (g_sigbus_reported.exchange(true)) {
      for (;;) ::pause();
    }
    write_signal_safe("qconform: error: ");
    write_signal_safe(slot.path);
    write_signal_safe(": the file changed while it was being read (a read at byte offset ");
    write_number_signal_safe(addr - slot.begin);
    write_signal_safe(" of the ");
    write_number_signal_safe(slot.size);
    write_signal_safe(" bytes mapped faulted: the file is now shorter); no result was written. Rerun on a file that "
                      "no other process modifies.\n");
    remove_temporary_files_signal_safe();
    ::_exit(2);
  }
  remove_temporary_files_signal_safe();
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

std::string file_kind(mode_t mode) {
  if (S_ISDIR(mode)) return "directory";
  if (S_ISFIFO(mode)) return "FIFO (named pipe)";
  if (S_ISSOCK(mode)) return "socket";
  if (S_ISCHR(mode)) return "character device";
  if (S_ISBLK(mode)) return "block device";
  if (S_ISLNK(mode)) return "symbolic link";
  return "regular file";
}

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
// Read once (umask can only be read by setting it: two threads doing that at once could leave the process
// with umask 0).
mode_t default_file_mode() {
  static const mode_t mode = [] {
    const mode_t mask = ::umask(0);
    ::umask(mask);
    return static_cast<mode_t>(0666 & ~mask);
  }();
  return mode;
}

// Eight hex digits naming this host and pid namespace: a pid means a process only there.
std::string host_tag() {
  static const std::string tag = [] {
    char host[256] = {};
    ::gethostname(host, sizeof host - 1);
    char ns[128] = {};
    const ssize_t n = ::readlink("/proc/self/ns/pid", ns, sizeof ns - 1);
    uint32_t h = 2166136261u;  // FNV-1a
    for (const char* part : {static_cast<const char*>(host), "|", n > 0 ? static_cast<const char*>(ns) : ""}) {
      for (const char* c = part; *c != '\0'; ++c) h = (h ^ static_cast<unsigned char>(*c)) * 16777619u;
    }
    return fmt::format("{:08x}", h);
  }();
  return tag;
}

// The pid of a temporary name of qconform's form written on this host, or 0.
pid_t orphan_candidate_pid(std::string_view name) {
  constexpr std::string_view kMark = ".qc-tmp-";
  const size_t at = name.rfind(kMark);
  if (name.empty() || name[0] != '.' || at == std::string_view::npos || at < 2) return 0;
  std::string_view rest = name.substr(at + kMark.size());  // <pid>-<host>-<random>
  const size_t dash = rest.find('-');
  if (dash == 0 || dash == std::string_view::npos || dash > 10) return 0;
  uint64_t pid = 0;
  for (char c : rest.substr(0, dash)) {
    if (c < '0' || c > '9') return 0;
    pid = pid * 10 + static_cast<uint64_t>(c - '0');
  }
  rest.remove_prefix(dash + 1);
  if (rest.size() != 8 + 1 + 6 || rest.substr(0, 8) != host_tag() || rest[8] != '-') return 0;
  for (char c : rest.substr(9)) {
    if (!std::isalnum(static_cast<unsigned char>(c))) return 0;
  }
  return pid > 0 && pid <= static_cast<uint64_t>(INT32_MAX) ? static_cast<pid_t>(pid) : 0;
}

}  // namespace

std::string printable_text(std::string_view text, size_t max_bytes) {
  // One escaping rule for every name qconform prints: `qc::printable` (error.hpp). This adds the
  // cut to `max_bytes`, at a token boundary (never inside an `\xNN` escape or a UTF-8 sequence).
  const std::string escaped = printable(text);
  if (escaped.size() <= max_bytes) return escaped;
  size_t cut = 0;
  while (cut < escaped.size()) {
    const auto c = static_cast<unsigned char>(escaped[cut]);
    const size_t len = c == '\\' ? (cut + 1 < escaped.size() && escaped[cut + 1] == 'x' ? 4 : 2)
                       : c < 0x80 ? 1
                       : c >= 0xF0 ? 4
                       : c >= 0xE0 ? 3
                                   : 2;
    if (cut + len > max_bytes) break;
    cut += len;
  }
  return escaped.substr(0, cut) + "...";
}

int open_input(const std::string& path, uint64_t* size) {
  QC_INPUT(!path.empty(), "expected an input file path, found an empty one");
  // O_NONBLOCK: opening a FIFO for reading otherwise waits for a writer, forever. O_NOCTTY: a
  // terminal given as an input must not become the controlling terminal.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  QC_INPUT(fd >= 0, "{}: cannot open for reading: {}", printable_text(path), errno_text(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    QC_FAIL_INPUT("{}: cannot stat: {}", printable_text(path), errno_text(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    QC_FAIL_INPUT("{}: expected a regular file, found a {}: refusing to read it", printable_text(path),
                  file_kind(st.st_mode));
  }
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags < 0 || ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0) {
    const int err = errno;
    ::close(fd);
    QC_FAIL_INPUT("{}: cannot clear O_NONBLOCK: {}", printable_text(path), errno_text(err));
  }
  if (size != nullptr) *size = static_cast<uint64_t>(st.st_size);
  return fd;
}

std::string read_file(const std::string& path) {
  const int fd = open_input(path);
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

std::string temporary_path_for(const std::string& destination) {
  static std::atomic<uint64_t> counter{0};
  uint64_t state = (static_cast<uint64_t>(::getpid()) << 32) ^ counter.fetch_add(1) ^
                   static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  std::string name = fmt::format("{}/.{}.qc-tmp-{}-{}-", directory_of(destination), basename_of(destination), ::getpid(),
                                 host_tag());
  for (int i = 0; i < 6; ++i) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    name += "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"[(state >> 33) % 62];
  }
  return name;
}

void remove_orphaned_temporaries(const std::string& directory) {
  // Once per directory and process. The path is part of the key: a directory removed and another made
  // elsewhere may get the same inode number (a long-lived process, the Python binding, a test binary), and
  // must still be swept.
  static std::mutex mutex;
  static std::set<std::tuple<dev_t, ino_t, std::string>> swept;
  struct stat d {};
  if (::stat(directory.c_str(), &d) != 0 || !S_ISDIR(d.st_mode)) return;
  {
    std::lock_guard lock(mutex);
    if (!swept.insert({d.st_dev, d.st_ino, directory}).second) return;
  }
  DIR* dir = ::opendir(directory.c_str());
  if (dir == nullptr) return;
  std::vector<std::pair<std::string, pid_t>> found;
  while (const dirent* e = ::readdir(dir)) {
    if (const pid_t pid = orphan_candidate_pid(e->d_name); pid > 0 && pid != ::getpid()) found.emplace_back(e->d_name, pid);
  }
  ::closedir(dir);
  for (const auto& [name, pid] : found) {
    // Alive, or the pid now names another process (EPERM): not an orphan we may remove.
    if (::kill(pid, 0) == 0 || errno != ESRCH) continue;
    const std::string path = directory + "/" + name;
    struct stat st {};
    if (::lstat(path.c_str(), &st) != 0) continue;
    bool removed = false;
    const bool is_dir = S_ISDIR(st.st_mode);
    if (S_ISREG(st.st_mode)) {
      removed = ::unlink(path.c_str()) == 0;
    } else if (is_dir) {
      remove_directory_signal_safe(path.c_str());  // its files, then the directory (a subdirectory keeps it)
      removed = ::access(path.c_str(), F_OK) != 0;
    }
    if (removed) {
      std::fprintf(stderr, "qconform: removed `%s`, a temporary %s left by qconform process %d, which is no longer "
                           "running (it was killed before it could clean up)\n",
                   printable_text(path).c_str(), is_dir ? "directory" : "file", static_cast<int>(pid));
    }
  }
}

namespace {

// Makes a rename in `directory` durable; failure here cannot un-write the file, so it is not an error.
void sync_directory(const std::string& directory) {
  const int dir = ::open(directory.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir >= 0) {
    ::fsync(dir);
    ::close(dir);
  }
}

}  // namespace

void write_file_atomic(const std::string& path, std::string_view content) {
  AtomicFileWriter writer(path);
  writer.write(content);
  writer.commit();
}

void write_files_atomic(const std::vector<std::pair<std::string, std::string>>& path_and_content) {
  std::vector<std::unique_ptr<AtomicFileWriter>> writers;
  for (const auto& [path, content] : path_and_content) {
    writers.push_back(std::make_unique<AtomicFileWriter>(path));
    writers.back()->write(content);
  }
  {
    std::vector<std::future<void>> synced;
    for (size_t i = 1; i < writers.size(); ++i) {
      synced.push_back(std::async(std::launch::async, [w = writers[i].get()] { w->sync(); }));
    }
    if (!writers.empty()) writers[0]->sync();
    for (std::future<void>& f : synced) f.get();  // the first failure is thrown; the writers discard all
  }
  std::set<std::string> directories;
  for (const std::unique_ptr<AtomicFileWriter>& w : writers) {
    w->commit(/*sync_directory_too=*/false);
    directories.insert(directory_of(w->path()));
  }
  for (const std::string& d : directories) sync_directory(d);
}

AtomicFileWriter::AtomicFileWriter(std::string path) : path_(std::move(path)) {
  QC_INPUT(!path_.empty() && path_.back() != '/', "`{}`: expected a file path for the output, found a directory name",
           path_);
  // The temporary file lives in the destination's directory so that the final rename never
  // crosses a file system; the leading dot keeps it out of globs; its name carries this process's
  // pid, so that a later run can tell a leftover of a killed run from a live one.
  // The name is registered for the signal handlers *before* the file is created (O_CREAT|O_EXCL,
  // so the name is ours alone): a signal at any moment finds every temporary file registered, in
  // whichever thread it is delivered. Unlinking a registered name not created yet is harmless.
  remove_orphaned_temporaries(directory_of(path_));
  int err = 0;
  for (int attempt = 0; attempt < 100 && fd_ < 0; ++attempt) {
    std::string name = temporary_path_for(path_);
    const int slot = claim_slot(g_temp_slots, name);
    if (slot >= 0) g_temp_slots[slot].state.store(2, std::memory_order_release);
    fd_ = ::open(name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    err = errno;
    if (fd_ >= 0) {
      temp_path_ = std::move(name);
      slot_ = slot;
    } else if (slot >= 0) {
      g_temp_slots[slot].state.store(0, std::memory_order_release);
    }
    if (fd_ < 0 && err != EEXIST) break;
  }
  QC_INPUT(fd_ >= 0, "{}: cannot create a temporary file in `{}` for the output: {}", path_, directory_of(path_),
           errno_text(err));
}

AtomicFileWriter::~AtomicFileWriter() {
  if (!committed_) discard();
}

void AtomicFileWriter::discard() noexcept {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  if (!temp_path_.empty()) ::unlink(temp_path_.c_str());
  if (slot_ >= 0) g_temp_slots[slot_].state.store(0, std::memory_order_release);
  slot_ = -1;
}

void AtomicFileWriter::write(std::span<const std::byte> bytes) {
  QC_CHECK(fd_ >= 0 && !committed_, "AtomicFileWriter::write on a closed writer for {}", path_);
  const std::byte* p = bytes.data();
  size_t left = bytes.size();
  while (left > 0) {
    const ssize_t put = ::write(fd_, p, left);
    if (put < 0 && errno == EINTR) continue;
    if (put <= 0) {
      const int err = put < 0 ? errno : EIO;
      discard();  // a failed output leaves nothing behind, even before the destructor runs
      QC_FAIL_INPUT("{}: write failed (temporary file removed): {}{}", path_, errno_text(err),
                    err == EFBIG ? " (the file size limit, `ulimit -f`, was reached)"
                    : err == ENOSPC ? " (the file system is full)"
                                    : "");
    }
    p += put;
    left -= static_cast<size_t>(put);
  }
  if (!wrote_) {
    wrote_ = true;
    test_hold("write", path_);  // a test may stop or kill the run here, mid-write (docs/hostile-inputs.md)
  }
}

void AtomicFileWriter::write(std::string_view text) {
  write(std::span<const std::byte>(reinterpret_cast<const std::byte*>(text.data()), text.size()));
}

void AtomicFileWriter::sync() {
  QC_CHECK(fd_ >= 0 && !committed_, "AtomicFileWriter::sync after commit for {}", path_);
  QC_INPUT(::fchmod(fd_, default_file_mode()) == 0, "{}: chmod of temporary file failed: {}", path_,
           errno_text(errno));
  QC_INPUT(::fsync(fd_) == 0, "{}: fsync failed: {}", path_, errno_text(errno));
  synced_ = true;
}

void AtomicFileWriter::commit(bool sync_directory_too) {
  QC_CHECK(fd_ >= 0 && !committed_, "AtomicFileWriter::commit twice for {}", path_);
  if (!synced_) sync();
  const int fd = fd_;
  fd_ = -1;
  QC_INPUT(::close(fd) == 0, "{}: close failed: {}", path_, errno_text(errno));
  QC_INPUT(::rename(temp_path_.c_str(), path_.c_str()) == 0, "{}: cannot rename `{}` into place: {}", path_,
           temp_path_, errno_text(errno));
  committed_ = true;
  if (slot_ >= 0) g_temp_slots[slot_].state.store(0, std::memory_order_release);
  slot_ = -1;
  if (sync_directory_too) sync_directory(directory_of(path_));
}

MappedFile::MappedFile(const std::string& path) : path_(path) {
  uint64_t size = 0;
  fd_ = open_input(path, &size);
  size_ = static_cast<size_t>(size);
  if (size_ > 0) {
    data_ = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd_, 0);
    if (data_ == MAP_FAILED) {
      const int err = errno;
      data_ = nullptr;
      ::close(fd_);
      fd_ = -1;
      QC_FAIL_INPUT("{}: mmap of {} bytes failed: {}", printable_text(path), size_, errno_text(err));
    }
    slot_ = claim_slot(g_map_slots, printable_text(path, 1024));
    if (slot_ >= 0) {
      g_map_slots[slot_].begin = reinterpret_cast<uintptr_t>(data_);
      g_map_slots[slot_].size = size_;
      g_map_slots[slot_].fd = fd_;
      g_map_slots[slot_].generation.fetch_add(1, std::memory_order_release);
      g_map_slots[slot_].state.store(2, std::memory_order_release);
    }
  }
  test_hold("mapped", path_);  // a test may truncate the file here (docs/hostile-inputs.md)
}

void MappedFile::check_unchanged() const {
  if (fd_ < 0) return;
  struct stat st {};
  QC_INPUT(::fstat(fd_, &st) == 0, "{}: cannot stat: {}", printable_text(path_), errno_text(errno));
  QC_INPUT(static_cast<uint64_t>(st.st_size) == size_,
           "{}: the file changed while it was being read: expected {} bytes (its size when it was opened), found {}; "
           "rerun on a file that no other process modifies",
           printable_text(path_), size_, static_cast<uint64_t>(st.st_size));
}

void MappedFile::release() noexcept {
  if (slot_ >= 0) {
    g_map_slots[slot_].generation.fetch_add(1, std::memory_order_acq_rel);
    g_map_slots[slot_].state.store(0, std::memory_order_release);
  }
  slot_ = -1;
  if (data_ != nullptr) ::munmap(data_, size_);
  data_ = nullptr;
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

MappedFile::~MappedFile() { release(); }

std::optional<MappedSource> find_mapped_source(const void* p, size_t bytes) {
  const uintptr_t at = reinterpret_cast<uintptr_t>(p);
  for (const MapSlot& slot : g_map_slots) {
    const uint64_t generation = slot.generation.load(std::memory_order_acquire);
    if (slot.state.load(std::memory_order_acquire) != 2) continue;
    const uintptr_t begin = slot.begin;
    const size_t size = slot.size;
    const int fd = slot.fd;
    // Released, or released and taken again, while the values were read: not this slot's values.
    if (slot.state.load(std::memory_order_acquire) != 2 || slot.generation.load(std::memory_order_acquire) != generation) {
      continue;
    }
    if (at >= begin && at - begin <= size && bytes <= size - (at - begin)) return MappedSource{fd, static_cast<uint64_t>(at - begin)};
  }
  return std::nullopt;
}

MappedFile::MappedFile(MappedFile&& other) noexcept
    : path_(std::move(other.path_)),
      data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      fd_(std::exchange(other.fd_, -1)),
      slot_(std::exchange(other.slot_, -1)) {}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    release();
    path_ = std::move(other.path_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    fd_ = std::exchange(other.fd_, -1);
    slot_ = std::exchange(other.slot_, -1);
  }
  return *this;
}

// ---------------------------------------------------------------------------------------------
// Output paths

namespace {

// What an output path will name: an existing file's device and inode, or, for a path that does not
// exist yet, its parent directory's device and inode plus the final name.
struct Identity {
  bool exists = false;
  dev_t dev = 0;
  ino_t ino = 0;
  mode_t mode = 0;
  std::string name;  // only when !exists
};

std::optional<Identity> identify(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) return Identity{true, st.st_dev, st.st_ino, st.st_mode, {}};
  if (errno != ENOENT) return std::nullopt;
  std::string parent = directory_of(path);
  std::string name = basename_of(path);
  if (::stat(parent.c_str(), &st) != 0) return std::nullopt;  // the writer reports the missing directory
  return Identity{false, st.st_dev, st.st_ino, st.st_mode, std::move(name)};
}

bool same(const Identity& a, const Identity& b) {
  return a.exists == b.exists && a.dev == b.dev && a.ino == b.ino && a.name == b.name;
}

std::string shown(const PathUse& p) { return fmt::format("{} `{}`", p.option, printable_text(p.path)); }

}  // namespace

void check_output_paths(const std::vector<PathUse>& inputs, const std::vector<PathUse>& outputs) {
  std::vector<std::pair<const PathUse*, Identity>> seen_inputs, seen_outputs;
  for (const PathUse& in : inputs) {
    if (in.path.empty()) continue;
    if (auto id = identify(in.path); id && id->exists) seen_inputs.emplace_back(&in, *id);
  }
  for (const PathUse& out : outputs) {
    if (out.path.empty()) continue;
    const std::optional<Identity> id = identify(out.path);
    if (!id) continue;  // unreachable parent: the writer names the problem
    QC_INPUT(!id->exists || S_ISREG(id->mode),
             "{}: expected a regular file or a new path for the output, found a {}: refusing to replace it",
             shown(out), file_kind(id->mode));
    for (const auto& [in, in_id] : seen_inputs) {
      QC_INPUT(!same(*id, in_id), "{} is the same file as the input {}: refusing to overwrite an input", shown(out),
               shown(*in));
    }
    for (const auto& [other, other_id] : seen_outputs) {
      QC_INPUT(!same(*id, other_id), "{} is the same file as the output {}: two outputs would overwrite each other",
               shown(out), shown(*other));
    }
    seen_outputs.emplace_back(&out, *id);
  }
  // Every output checked: now no other process may write one of them while this run does.
  for (const PathUse& out : outputs) lock_output(out.option, out.path);
}

void check_inputs_outside_directory(const std::vector<PathUse>& inputs, const PathUse& dir) {
  if (dir.path.empty()) return;
  struct stat d {};
  if (::stat(dir.path.c_str(), &d) != 0 || !S_ISDIR(d.st_mode)) return;  // a new directory holds no input yet
  for (const PathUse& in : inputs) {
    if (in.path.empty()) continue;
    struct stat st {}, parent {};
    if (::stat(in.path.c_str(), &st) != 0) continue;
    const bool is_dir = st.st_dev == d.st_dev && st.st_ino == d.st_ino;
    const bool inside = ::stat(directory_of(in.path).c_str(), &parent) == 0 && parent.st_dev == d.st_dev &&
                        parent.st_ino == d.st_ino;
    QC_INPUT(!is_dir && !inside,
             "the input {} {} the output directory {}, whose files this verb writes: refusing to risk overwriting an "
             "input (choose another output directory)",
             shown(in), is_dir ? "is" : "lies in", shown(dir));
  }
}

void install_cli_signal_handlers() {
  struct sigaction term {};
  term.sa_handler = qc_on_terminate_signal;
  sigemptyset(&term.sa_mask);
  term.sa_flags = SA_RESETHAND | SA_NODEFER;
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) {
    struct sigaction old {};
    // A signal the parent ignores (`nohup`) stays ignored.
    if (::sigaction(sig, nullptr, &old) == 0 && old.sa_handler == SIG_IGN) continue;
    ::sigaction(sig, &term, nullptr);
  }
  ::signal(SIGXFSZ, SIG_IGN);
  struct sigaction bus {};
  bus.sa_sigaction = qc_on_sigbus;
  sigemptyset(&bus.sa_mask);
  bus.sa_flags = SA_SIGINFO;  // no SA_RESETHAND: concurrent faults in other threads must reach the handler too
  ::sigaction(SIGBUS, &bus, nullptr);
}

int register_temporary_directory(const std::string& path) {
  const int slot = claim_slot(g_dir_slots, path);
  if (slot >= 0) g_dir_slots[slot].state.store(2, std::memory_order_release);
  return slot;
}

void unregister_temporary_directory(int handle) {
  if (handle >= 0 && handle < kSlots) g_dir_slots[handle].state.store(0, std::memory_order_release);
}

std::vector<std::string> live_temporary_files() {
  std::vector<std::string> out;
  for (const TempSlot& slot : g_temp_slots) {
    if (slot.state.load(std::memory_order_acquire) == 2) out.emplace_back(slot.path);
  }
  return out;
}

}  // namespace qc
