// `plugin:<path.so>` (isolated in a worker process) and `plugin-inproc:<path.so>` (in this
// process, unprotected): arms loaded from a shared library through the C ABI of
// `include/qconform/arm_abi.h` (guide: docs/plugins.md).
//
// Test: `./build/tests/qconform_unit_tests --gtest_filter='PluginArm*'`
#pragma once

namespace qc {

// Registers the `plugin` and `plugin-inproc` backends: `plugin:<path>` runs the file at <path>
// (which must exist; the library search path is never used, so the file hashed is the file
// loaded) in a `qconform-plugin-host` worker process; `plugin-inproc:<path>` dlopen()s it here.
void register_plugin_arms();

// A fixed per-call time limit for isolated plugin arms created from now on, in seconds (> 0; 0
// goes back to the default): the CLI's `--arm-timeout`; loading the library in the worker has the
// same limit. Unset, $QCONFORM_ARM_TIMEOUT applies, else the default that follows the work
// (src/arms/plugin/plugin_limits.hpp, docs/plugins.md).
void set_plugin_call_timeout(double seconds);
// The fixed limit set by `set_plugin_call_timeout`, 0 when none is.
double plugin_call_timeout();

}  // namespace qc
