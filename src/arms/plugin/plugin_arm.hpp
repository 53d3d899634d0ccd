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

// The per-call time limit of isolated plugin arms created from now on, in seconds (> 0): the
// CLI's `--arm-timeout`. Unset, $QCONFORM_ARM_TIMEOUT applies, else 600 s. Loading the library
// in the worker has the same limit.
void set_plugin_call_timeout(double seconds);
// The limit an arm created now would get.
double plugin_call_timeout();

}  // namespace qc
