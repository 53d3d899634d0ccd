#include "arms/plugin/plugin_limits.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

namespace qc::plugin_limits {

double CallTimeLimit::for_call(double macs) const {
  if (fixed_ > 0) return fixed_;
  const double limit = slowest_per_mac_ == 0 ? std::max(kFirstCallSeconds, macs / kFirstCallMacsPerSecond)
                                             : std::max(kFloorSeconds, kMultiple * slowest_per_mac_ * macs);
  return std::min(limit, kMaxSeconds);
}

void CallTimeLimit::record(double seconds, double macs) {
  if (macs > 0 && seconds >= 0) slowest_per_mac_ = std::max(slowest_per_mac_, seconds / macs);
}

std::string CallTimeLimit::describe(double macs) const {
  if (fixed_ > 0) return fmt::format("set by {}", source_);
  if (slowest_per_mac_ == 0) {
    return fmt::format("the default of a first call: the larger of {} s and its {:.3g} multiply-adds at {:.0e} per "
                       "second; --arm-timeout SECONDS sets a fixed limit",
                       shown(kFirstCallSeconds), macs, kFirstCallMacsPerSecond);
  }
  return fmt::format("the default, which follows the work: the larger of {} s and {} x this arm's slowest time per "
                     "multiply-add so far ({:.3g} s) x this call's {:.3g} multiply-adds; --arm-timeout SECONDS sets a "
                     "fixed limit",
                     shown(kFloorSeconds), shown(kMultiple), slowest_per_mac_, macs);
}

std::string CallTimeLimit::shown(double seconds) { return fmt::format("{:.4g}", seconds); }

std::optional<uint64_t> first_difference(const char* a, const char* b, uint64_t bytes) {
  constexpr uint64_t kBlock = 1 << 16;  // memcmp finds a block, the byte loop the offset in it
  for (uint64_t at = 0; at < bytes; at += kBlock) {
    const uint64_t n = std::min(kBlock, bytes - at);
    if (std::memcmp(a + at, b + at, n) == 0) continue;
    for (uint64_t i = 0; i < n; ++i) {
      if (a[at + i] != b[at + i]) return at + i;
    }
  }
  return std::nullopt;
}

}  // namespace qc::plugin_limits
