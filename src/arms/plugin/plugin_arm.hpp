// `plugin:<path.so>`: an arm loaded from a shared library through the C ABI of
// `include/qconform/arm_abi.h` (guide: docs/plugins.md).
//
// Test: `./build/tests/qconform_unit_tests --gtest_filter='PluginArm*'`
#pragma once

namespace qc {

// Registers the `plugin` backend: `plugin:<path>` dlopen()s the file at <path> (which must
// exist; the library search path is never used, so the file hashed is the file loaded).
void register_plugin_arms();

}  // namespace qc
