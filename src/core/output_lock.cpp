#include "core/output_lock.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <mutex>
#include <vector>

#include <fmt/format.h>

#include "core/fileio.hpp"
#include "core/test_hold.hpp"
#include "qconform/error.hpp"

namespace qc {

namespace {

struct HeldLock {
  int fd;
  std::string path;
  dev_t dev;
  ino_t ino;
};

// The locks this process holds; its destructor (a normal exit) removes the lock files while they
// are still locked, so that a process waiting for them never takes a file that is gone.
struct Registry {
  std::mutex mutex;
  std::string owner;  // empty: locks are off
  std::vector<HeldLock> held;
  ~Registry() { release(); }
  void release() {
    const std::lock_guard<std::mutex> lock(mutex);
    for (const HeldLock& h : held) {
      ::unlink(h.path.c_str());
      ::close(h.fd);
    }
    held.clear();
  }
};

Registry& registry() {
  static Registry r;
  return r;
}

std::string lock_path_of(const std::string& path) {
  std::string p = path;
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  const size_t slash = p.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : p.substr(0, slash);
  const std::string name = slash == std::string::npos ? p : p.substr(slash + 1);
  return (dir == "/" ? "" : dir) + "/." + name + ".qc-lock";
}

// What the holder wrote into the lock file: "PID qconform VERB".
std::string holder_of(int fd) {
  char buffer[256] = {};
  const ssize_t got = ::pread(fd, buffer, sizeof buffer - 1, 0);
  std::string text = got > 0 ? std::string(buffer, static_cast<size_t>(got)) : std::string();
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  const size_t space = text.find(' ');
  if (text.empty() || space == std::string::npos) return "a process that has not recorded itself yet";
  return fmt::format("pid {} ({})", printable_text(text.substr(0, space)), printable_text(text.substr(space + 1)));
}

}  // namespace

void enable_output_locks(std::string owner) {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  r.owner = std::move(owner);
}

void lock_output(const std::string& option, const std::string& path) {
  Registry& r = registry();
  std::lock_guard guard(r.mutex);
  if (r.owner.empty() || path.empty()) return;
  const std::string lock_path = lock_path_of(path);
  for (int attempt = 0; attempt < 20; ++attempt) {
    const int fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0666);
    if (fd < 0) return;  // no directory, or not writable: the writer itself names the problem
    struct stat st {};
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
      ::close(fd);
      return;
    }
    for (const HeldLock& h : r.held) {
      if (h.dev == st.st_dev && h.ino == st.st_ino) {
        ::close(fd);
        return;  // held by this process already
      }
    }
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
      const int err = errno;
      if (err != EWOULDBLOCK) {  // a file system without flock: nothing to take
        ::close(fd);
        return;
      }
      const std::string holder = holder_of(fd);
      ::close(fd);
      QC_FAIL_INPUT("{} `{}`: another qconform process is writing it: {} holds its lock `{}`; wait for that run to "
                    "end, or choose another output",
                    option, printable_text(path), holder, printable_text(lock_path));
    }
    // The holder before us may have removed the file between our open and our lock: then we hold
    // a file nobody else will open; take the one now at the path instead.
    struct stat now {};
    if (::stat(lock_path.c_str(), &now) != 0 || now.st_dev != st.st_dev || now.st_ino != st.st_ino) {
      ::close(fd);
      continue;
    }
    const std::string me = fmt::format("{} {}\n", ::getpid(), r.owner);
    if (::ftruncate(fd, 0) == 0) (void)!::pwrite(fd, me.data(), me.size(), 0);
    r.held.push_back({fd, lock_path, st.st_dev, st.st_ino});
    test_hold("locked", path);  // a test starts a second writer here (docs/hostile-inputs.md)
    return;
  }
}

void release_output_locks() { registry().release(); }

}  // namespace qc
