// A test hook: holds the process at a named point of its run until a test releases it, so that a
// fault (a truncated input, a signal, a second process) is injected at a known point, never after
// a guessed delay (docs/hostile-inputs.md, "Holding a run at a known point").
//
// Enabled only by the environment variable QCONFORM_TEST_HOLD=POINT[@TEXT]:FIFO, which a user
// never sets. The first time this process reaches POINT (with TEXT contained in the path the point
// names, when given), it
//   1. opens FIFO for writing (waiting for the test to open it for reading) and writes one line
//      "POINT PID PATH\n": the test now knows the process is held there;
//   2. opens FIFO for reading (waiting for the test to open it for writing) and reads to its end:
//      the test's close releases the process.
// Every other point, and every later arrival at POINT, passes at once. A signal that arrives while
// the process is held acts as it would at that point of the run (the CLI's handlers run).
//
// Header-only and free of the rest of qconform (POSIX calls only, no exceptions): the plugin
// worker (`qconform-plugin-host`) holds at its points with the same code.
//
// Points: `mapped` (MappedFile, after the mapping is made; path: the file), `write` (the atomic
// writer, after the first bytes reached the temporary file; path: the destination), `locked`
// (after an output lock is taken; path: the locked target), `plugin-run` (the plugin worker, before
// it calls `run`), `plugin-returned` (the plugin worker, after `run` returned and its outputs were
// summed, before the grace period).
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string_view>

namespace qc {

inline void test_hold(std::string_view point, std::string_view path = {}) {
  static std::atomic<bool> fired{false};
  const char* spec = std::getenv("QCONFORM_TEST_HOLD");
  if (spec == nullptr || spec[0] == '\0' || fired.load()) return;
  const char* colon = std::strchr(spec, ':');
  if (colon == nullptr || colon[1] == '\0') return;
  const std::string_view head(spec, static_cast<size_t>(colon - spec));
  const size_t at = head.find('@');
  const std::string_view name = head.substr(0, at);
  const std::string_view text = at == std::string_view::npos ? std::string_view{} : head.substr(at + 1);
  if (name != point || (!text.empty() && path.find(text) == std::string_view::npos)) return;
  if (fired.exchange(true)) return;
  const char* fifo = colon + 1;
  int fd = -1;
  do fd = ::open(fifo, O_WRONLY | O_CLOEXEC); while (fd < 0 && errno == EINTR);
  if (fd >= 0) {
    char line[512];
    const int n = std::snprintf(line, sizeof line, "%.*s %d %.*s\n", static_cast<int>(point.size()), point.data(),
                                static_cast<int>(::getpid()), static_cast<int>(std::min<size_t>(path.size(), 400)),
                                path.data());
    if (n > 0) (void)!::write(fd, line, static_cast<size_t>(std::min<int>(n, static_cast<int>(sizeof line) - 1)));
    ::close(fd);
  }
  do fd = ::open(fifo, O_RDONLY | O_CLOEXEC); while (fd < 0 && errno == EINTR);
  if (fd >= 0) {
    char buffer[64];
    for (;;) {
      const ssize_t got = ::read(fd, buffer, sizeof buffer);
      if (got > 0 || (got < 0 && errno == EINTR)) continue;
      break;
    }
    ::close(fd);
  }
}

}  // namespace qc
