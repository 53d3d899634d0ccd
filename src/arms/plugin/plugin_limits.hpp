// What an isolated plugin arm's calls may take, and the comparison of its buffers after `run`
// (docs/plugins.md, "Time limits" and "After run returns").
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace qc::plugin_limits {

// The default limits, which follow the work. Loading the library (and a first call, which may pay
// for a JIT compilation or a device context) has no earlier call to go by: 120 s, a first call at
// least the time of its multiply-adds at 1e7 per second (a scalar loop is 100 times faster). A
// later call may take 50 times this arm's slowest time per multiply-add so far, times its own
// multiply-adds, and never less than 10 s: a plugin that hangs after its first call is killed in
// seconds, not after a fixed 600 s, while a large layer after small ones still gets its time.
inline constexpr double kLoadSeconds = 120;
inline constexpr double kFirstCallSeconds = 120;
inline constexpr double kFirstCallMacsPerSecond = 1e7;
inline constexpr double kFloorSeconds = 10;
inline constexpr double kMultiple = 50;
inline constexpr double kMaxSeconds = 7 * 24 * 3600;  // a fixed limit, and every default, at most a week

class CallTimeLimit {
 public:
  CallTimeLimit() = default;
  // A fixed limit (seconds > 0) set by `source` (`--arm-timeout`, `QCONFORM_ARM_TIMEOUT`).
  CallTimeLimit(double seconds, std::string source) : fixed_(seconds), source_(std::move(source)) {}

  double for_load() const { return fixed_ > 0 ? fixed_ : kLoadSeconds; }
  double for_call(double macs) const;
  // A call of `macs` multiply-adds that returned after `seconds`.
  void record(double seconds, double macs);
  // How the limit of a call of `macs` multiply-adds was set, for the message that it ran out.
  std::string describe(double macs) const;
  std::string describe_load() const {
    return fixed_ > 0 ? "set by " + source_ : "the default for loading; --arm-timeout SECONDS sets a fixed limit";
  }
  // A limit in seconds as messages print it: "2", "1.5", "10".
  static std::string shown(double seconds);

 private:
  double fixed_ = 0;
  std::string source_;
  double slowest_per_mac_ = 0;  // seconds per multiply-add, the slowest call so far (0: none yet)
};

// The offset of the first byte where `a` and `b` differ within `bytes`, or none.
std::optional<uint64_t> first_difference(const char* a, const char* b, uint64_t bytes);

}  // namespace qc::plugin_limits
