// The worker process of `plugin:` arms, seen from qconform: the shared memory (SharedBuffer), where
// each operand and output lies in it (Layout), and the process with its socket (Worker). The
// protocol is plugin_protocol.hpp; the worker itself host/plugin_host.cpp.
#pragma once

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "arms/plugin/plugin_protocol.hpp"
#include "arms/plugin/plugin_shared.hpp"
#include "qconform/arm.hpp"
#include "qconform/error.hpp"

extern char** environ;

namespace qc::plugin_detail {

// Where `qconform-plugin-host` is: $QCONFORM_PLUGIN_HOST, else beside the running executable
// (qconform and the host are built and installed side by side), else where this build put it.
std::string plugin_host_path();

// "SIGSEGV" for SIGSEGV, ...; "signal" for one not named.
const char* signal_name(int s);

using Clock = std::chrono::steady_clock;

enum class ReadStatus { ok, eof, timeout };

// One region of a memfd, mapped read-write in this process.
struct SharedBuffer {
  int fd = -1;
  char* base = nullptr;
  size_t size = 0;
  ~SharedBuffer() {
    if (base) munmap(base, size);
    if (fd >= 0) close(fd);
  }
  // Grows (never shrinks) to at least `want` bytes.
  void reserve(size_t want, const char* what) {
    if (want <= size) return;
    QC_CHECK(ftruncate(fd, static_cast<off_t>(want)) == 0, "isolated plugin arm: cannot grow the {} mapping to {} "
             "bytes: {}", what, want, std::strerror(errno));
    void* p = base ? mremap(base, size, want, MREMAP_MAYMOVE) : mmap(nullptr, want, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    QC_CHECK(p != MAP_FAILED, "isolated plugin arm: cannot map {} bytes for the {}: {}", want, what, std::strerror(errno));
    base = static_cast<char*>(p);
    size = want;
  }
};

inline size_t round_up(size_t x, size_t to) { return (x + to - 1) / to * to; }

// Where each operand and output lies in the two mappings for one call.
struct Layout {
  struct Piece {
    const char* name;
    uint64_t offset, bytes, element_size;
    int64_t cols;  // 0 for vectors
  };
  std::vector<Piece> inputs;  // a_q, a_scale, w_q, w_scale[, bias]
  uint64_t inputs_size = 0;
  uint64_t acc_written = 0, error = 0, y = 0, acc = 0, y_bytes = 0, acc_bytes = 0, outputs_size = 0;
  uint64_t guards[3] = {0, 0, 0};

  Layout(const LayerOperands& ops, size_t page) {
    const uint64_t m = static_cast<uint64_t>(ops.m), n = static_cast<uint64_t>(ops.n), k = static_cast<uint64_t>(ops.k);
    uint64_t at = 0;
    const auto add = [&](const char* name, uint64_t count, uint64_t size, int64_t cols) {
      inputs.push_back({name, at, count * size, size, cols});
      at = round_up(at + count * size, 64);
    };
    add("a_q", m * k, 1, ops.k);
    add("a_scale", m, 4, 0);
    add("w_q", n * k, 1, ops.k);
    add("w_scale", n, 4, 0);
    if (ops.has_bias()) add("bias", n, 2, 0);
    inputs_size = round_up(std::max<uint64_t>(at, 1), page);
    y_bytes = 2 * m * n;
    acc_bytes = 4 * m * n;
    acc_written = 0;
    place_outputs(page);
  }

  // An FP8 call: inputs the codes `a` [m,k] and `w` [n,k]; the output `d` [m,n] fp32 takes the
  // place of `y` (guarded the same way), no accumulator.
  // A block-scaled call: the scales (`a_scales`, `w_scales` fp32 values) follow the codes.
  Layout(int64_t m64, int64_t n64, int64_t k64, size_t page, size_t a_scales = 0, size_t w_scales = 0) {
    const uint64_t m = static_cast<uint64_t>(m64), n = static_cast<uint64_t>(n64), k = static_cast<uint64_t>(k64);
    inputs.push_back({"a", 0, m * k, 1, k64});
    inputs.push_back({"w", round_up(m * k, 64), n * k, 1, k64});
    uint64_t at = inputs[1].offset + n * k;
    if (a_scales > 0) {
      inputs.push_back({"a_scale", round_up(at, 64), 4 * a_scales, 4, 0});
      inputs.push_back({"w_scale", round_up(inputs[2].offset + 4 * a_scales, 64), 4 * w_scales, 4, 0});
      at = inputs[3].offset + 4 * w_scales;
    }
    inputs_size = round_up(std::max<uint64_t>(at, 1), page);
    y_bytes = 4 * m * n;
    acc_bytes = 0;
    place_outputs(page);
  }

  // Outputs: each buffer starts 64-byte aligned and ends less than 64 bytes before an
  // inaccessible page (`guards`), so a write past its end faults in the worker.
  void place_outputs(size_t page) {
    guards[0] = round_up(64 + kErrorBufferSize, page);
    error = guards[0] - kErrorBufferSize;
    const auto place = [&](uint64_t start, uint64_t bytes, uint64_t& offset, uint64_t& guard) {
      guard = start + round_up(std::max<uint64_t>(bytes, 1), page);
      offset = (guard - bytes) / 64 * 64;
    };
    place(guards[0] + page, y_bytes, y, guards[1]);
    place(guards[1] + page, acc_bytes, acc, guards[2]);
    outputs_size = guards[2] + page;
  }

  // "`w_q` at element [3,17]" for a byte offset into the inputs.
  std::string describe_input(uint64_t offset) const {
    for (const Piece& p : inputs) {
      if (offset >= p.offset && offset < p.offset + p.bytes) {
        const uint64_t e = (offset - p.offset) / p.element_size;
        if (p.cols > 0) return fmt::format("`{}` at element [{},{}]", p.name, e / p.cols, e % p.cols);
        return fmt::format("`{}` at element [{}]", p.name, e);
      }
    }
    return fmt::format("the padding after its operands (byte {} of the operand mapping)", offset);
  }
};

// One worker process and its three descriptors. Started by posix_spawn (fork+exec in one step,
// safe in a multi-threaded process: the child runs nothing of ours before exec).
class Worker {
 public:
  Worker(const std::string& host, const std::string& plugin_path) {
    // Members own their descriptors from here on, so nothing leaks when a step below throws.
    inputs_.fd = memfd_create("qconform-plugin-inputs", MFD_CLOEXEC);
    outputs_.fd = memfd_create("qconform-plugin-outputs", MFD_CLOEXEC);
    QC_CHECK(inputs_.fd >= 0 && outputs_.fd >= 0, "isolated plugin arm: memfd_create: {}", std::strerror(errno));
    int sv[2] = {-1, -1};
    QC_CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0, "isolated plugin arm: socketpair: {}",
             std::strerror(errno));
    sock_.fd = sv[0];
    const int child_sock = sv[1];
    // The worker's view of the inputs is a read-only open file description: a MAP_SHARED mapping
    // of it can never be made writable (mprotect fails with EACCES), whatever the plugin does.
    const int inputs_ro = open(fmt::format("/proc/self/fd/{}", inputs_.fd).c_str(), O_RDONLY | O_CLOEXEC);
    // Lift every child descriptor above the three target numbers first, so that the dup2s to
    // 3, 4, 5 cannot overwrite one another.
    const int fds[3] = {fcntl(child_sock, F_DUPFD_CLOEXEC, 10), inputs_ro < 0 ? -1 : fcntl(inputs_ro, F_DUPFD_CLOEXEC, 10),
                        fcntl(outputs_.fd, F_DUPFD_CLOEXEC, 10)};
    close(child_sock);
    if (inputs_ro >= 0) close(inputs_ro);
    const auto close_fds = [&] {
      for (int fd : fds) if (fd >= 0) close(fd);
    };
    if (fds[0] < 0 || fds[1] < 0 || fds[2] < 0) {
      const int e = errno;
      close_fds();
      QC_FAIL("isolated plugin arm: cannot prepare the worker's descriptors (a read-only reopening of the operand "
              "memfd through /proc/self/fd, then dups): {}", std::strerror(e));
    }
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, fds[0], proto::kSocketFd);
    posix_spawn_file_actions_adddup2(&fa, fds[1], proto::kInputsFd);
    posix_spawn_file_actions_adddup2(&fa, fds[2], proto::kOutputsFd);
    posix_spawn_file_actions_adddup2(&fa, STDERR_FILENO, STDOUT_FILENO);  // qconform's stdout is its summary
    posix_spawn_file_actions_addopen(&fa, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
    posix_spawnattr_t attr;
    posix_spawnattr_init(&attr);
    sigset_t none, defaults;
    sigemptyset(&none);
    sigemptyset(&defaults);
    for (int s : {SIGPIPE, SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGCHLD, SIGSEGV, SIGBUS, SIGABRT, SIGFPE, SIGXFSZ}) {
      sigaddset(&defaults, s);
    }
    posix_spawnattr_setsigmask(&attr, &none);
    posix_spawnattr_setsigdefault(&attr, &defaults);
    // Its own process group: a failed worker is killed together with any process the plugin
    // started (kill(-pid)). Terminal signals then do not reach it; it ends by itself when
    // qconform does (host/plugin_host.cpp, the watchdog).
    posix_spawnattr_setpgroup(&attr, 0);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETPGROUP);
    const std::string version = std::to_string(proto::kProtocolVersion), parent = std::to_string(getpid());
    char* argv[] = {const_cast<char*>(host.c_str()), const_cast<char*>(version.c_str()),
                    const_cast<char*>(plugin_path.c_str()), const_cast<char*>(parent.c_str()), nullptr};
    const int rc = posix_spawn(&pid_, host.c_str(), &fa, &attr, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&attr);
    close_fds();
    if (rc != 0) {
      pid_ = 0;
      QC_FAIL_INPUT("isolated plugin arm: cannot start the worker `{}`: {}", printable(host), std::strerror(rc));
    }
  }

  ~Worker() {
    sock_.reset();  // the worker reads end-of-file and leaves
    if (pid_ > 0) (void)reap(std::chrono::milliseconds(1000));
  }

  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  SharedBuffer& inputs() { return inputs_; }
  SharedBuffer& outputs() { return outputs_; }

  // Sends `size` bytes; false when the worker is gone.
  bool send(const void* data, size_t size) {
    const char* p = static_cast<const char*>(data);
    while (size > 0) {
      const ssize_t w = ::send(sock_.fd, p, size, MSG_NOSIGNAL);  // never SIGPIPE for a dead worker
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) return false;
      p += w;
      size -= static_cast<size_t>(w);
    }
    return true;
  }

  // Reads exactly `size` bytes before `deadline`.
  ReadStatus read(void* data, size_t size, Clock::time_point deadline) {
    char* p = static_cast<char*>(data);
    while (size > 0) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      if (left <= 0) return ReadStatus::timeout;
      // At most 100 ms per wait: between waits, a worker that died is noticed even when a
      // process the plugin forked still holds the socket open (no end-of-file would come).
      pollfd pfd{sock_.fd, POLLIN, 0};
      const int pr = poll(&pfd, 1, static_cast<int>(std::min<int64_t>(left, 100)));
      if (pr < 0 && errno == EINTR) continue;
      if (pr == 0) {
        if (pid_ > 0 && ended_unreaped()) return ReadStatus::eof;
        continue;  // the deadline check above decides
      }
      const ssize_t r = ::read(sock_.fd, p, size);
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) return ReadStatus::eof;
      p += r;
      size -= static_cast<size_t>(r);
    }
    return ReadStatus::ok;
  }

  // True once the worker has ended. It is not reaped (WNOWAIT): while its zombie holds the pid,
  // the process group it leads cannot be reused, so killing that group stays safe.
  bool ended_unreaped() const {
    siginfo_t info{};
    return waitid(P_PID, static_cast<id_t>(pid_), &info, WEXITED | WNOHANG | WNOWAIT) == 0 && info.si_pid == pid_;
  }

  // Waits up to `grace` for the worker to end, kills it if it has not, kills whatever it left
  // in its process group (processes the plugin started), reaps it; how it ended, in words.
  std::string reap(std::chrono::milliseconds grace) {
    if (pid_ <= 0) return "the worker process had already ended";
    const auto until = Clock::now() + grace;
    bool ended = ended_unreaped();
    while (!ended && Clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
      ended = ended_unreaped();
    }
    kill(-pid_, SIGKILL);
    int status = 0;
    pid_t r = 0;
    do r = waitpid(pid_, &status, 0); while (r < 0 && errno == EINTR);
    pid_ = 0;
    if (!ended) return "the worker process did not end by itself and was killed";
    if (r < 0) return fmt::format("the worker process ended (its status is unavailable: {})", std::strerror(errno));
    if (WIFEXITED(status)) {
      if (WEXITSTATUS(status) == proto::kExitHostProtocol) {
        return fmt::format("the worker process exited with status {}: qconform-plugin-host refused a request "
                           "(its message is above; a qconform bug, or a plugin that exited with this status)",
                           WEXITSTATUS(status));
      }
      return fmt::format("the worker process exited with status {} (the plugin called exit(), _exit() or "
                         "quick_exit(); a plugin must return from `run` instead)", WEXITSTATUS(status));
    }
    if (WIFSIGNALED(status)) {
      const int s = WTERMSIG(status);
      const char* hint = s == SIGABRT   ? " (abort(): a failed assert() or an uncaught C++ exception in the plugin?)"
                         : s == SIGKILL ? " (killed from outside qconform, e.g. by the out-of-memory killer)"
                                        : "";
      return fmt::format("the worker process was killed by {} ({}){}", signal_name(s), strsignal(s), hint);
    }
    return fmt::format("the worker process ended with wait status 0x{:x}", status);
  }

  // Kills the worker at once (a time limit ran out, or it broke the protocol).
  void kill_now() {
    if (pid_ > 0) kill(-pid_, SIGKILL);
    (void)reap(std::chrono::milliseconds(1000));
  }

 private:
  struct Fd {
    int fd = -1;
    ~Fd() { reset(); }
    void reset() {
      if (fd >= 0) close(fd);
      fd = -1;
    }
  };
  pid_t pid_ = 0;
  SharedBuffer inputs_, outputs_;
  Fd sock_;
};

}  // namespace qc::plugin_detail
