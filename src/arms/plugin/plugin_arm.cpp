// `plugin:<path.so>` and `plugin-inproc:<path.so>`: arms loaded from a shared library through the
// versioned C ABI of `include/qconform/arm_abi.h`.
//
// `plugin:` (the default) runs the library in a worker process, `qconform-plugin-host`
// (host/plugin_host.cpp, protocol in plugin_protocol.hpp): the operands travel in a memfd the
// worker can only map read-only, the outputs in a second one whose buffers end at inaccessible
// pages, and every call has a time limit. A crash, abort, hang, exit() or a write into the inputs
// ends the worker, never qconform, and becomes a qc::Error of kind `arm_failure` (the CLI exits 1)
// naming the arm and the layer; a write into the inputs is named a C3 violation with the element
// it hit. `plugin-inproc:` calls the library in qconform's own process: faster, unprotected.
//
// Both modes validate the library's descriptor with the same code and messages (QC_INPUT, exit 2,
// naming the .so path and the field), and produce bit-identical outputs: the plugin receives the
// same bytes either way.
#include "arms/plugin/plugin_arm.hpp"

#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <memory>
#include <string>

#include "arms/plugin/plugin_limits.hpp"
#include "arms/plugin/plugin_shared.hpp"
#include "qconform/arm.hpp"
#include "qconform/error.hpp"

namespace qc {

namespace {

using plugin_limits::CallTimeLimit;
constexpr double kMaxTimeoutSeconds = plugin_limits::kMaxSeconds;

std::atomic<double> g_timeout_override{0};  // 0: not set by set_plugin_call_timeout

double timeout_from_text(std::string_view what, std::string_view text) {
  const std::string s(text);
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(s.c_str(), &end);
  QC_INPUT(!s.empty() && end == s.c_str() + s.size() && errno == 0 && std::isfinite(v) && v > 0 &&
               v <= kMaxTimeoutSeconds,
           "{}: expected a number of seconds > 0 and <= {} (one week), found `{}`", what, kMaxTimeoutSeconds,
           printable(s));
  return v;
}

// The limit of an arm made now: fixed by set_plugin_call_timeout (--arm-timeout) or
// $QCONFORM_ARM_TIMEOUT, else the default that follows the work (plugin_limits.hpp).
CallTimeLimit call_time_limit() {
  if (const double set = g_timeout_override.load(); set > 0) return CallTimeLimit(set, "--arm-timeout");
  if (const char* env = std::getenv("QCONFORM_ARM_TIMEOUT"); env != nullptr && env[0] != '\0') {
    return CallTimeLimit(timeout_from_text("environment variable QCONFORM_ARM_TIMEOUT", env), "QCONFORM_ARM_TIMEOUT");
  }
  return CallTimeLimit();
}

}  // namespace

void set_plugin_call_timeout(double seconds) {
  QC_INPUT(seconds == 0 || (std::isfinite(seconds) && seconds > 0 && seconds <= kMaxTimeoutSeconds),
           "--arm-timeout: expected a number of seconds > 0 and <= {} (one week), found {}", kMaxTimeoutSeconds, seconds);
  g_timeout_override.store(seconds);
}

double plugin_call_timeout() { return g_timeout_override.load(); }

void register_plugin_arms() {
  register_arm_backend(ArmBackend{
      .prefix = "plugin",
      .help = "an arm loaded from a shared library through the C ABI of include/qconform/arm_abi.h, run in a worker "
              "process (a crash, hang, exit or write into its inputs is the arm's failure, not qconform's): "
              "plugin:<path.so> (see docs/plugins.md)",
      .variants = [] { return std::vector<std::string>{}; },
      .make = [](std::string_view variant) -> std::unique_ptr<Arm> {
        return plugin_detail::make_isolated_plugin_arm(variant, call_time_limit());
      },
      .variant_is_file = true,
      .fp8_families = {},
  });
  register_arm_backend(ArmBackend{
      .prefix = "plugin-inproc",
      .help = "the same plugin called inside qconform's own process: faster, UNPROTECTED (a crash or exit() ends "
              "qconform, a hang has no time limit): plugin-inproc:<path.so>",
      .variants = [] { return std::vector<std::string>{}; },
      .make = [](std::string_view variant) -> std::unique_ptr<Arm> {
        return plugin_detail::make_inproc_plugin_arm(variant);
      },
      .variant_is_file = true,
      .fp8_families = {},
  });
}

}  // namespace qc