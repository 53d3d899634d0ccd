// Registration functions of the built-in arm backends, called once by the registry.
// Explicit calls (not static initializers) because the library is static: the linker would drop
// a self-registering object file that nothing references.
#pragma once

namespace qc::detail {
void register_builtin_arm_backends();
}  // namespace qc::detail
