// Project version and build identity, for manifests and environment stamps.
#pragma once

#include <string>

namespace qc {

// `git describe` at configure time, else the project version.
std::string version();
// Compiler, its version and the numeric flags every bit-exact host file is built with.
std::string build_flags();

}  // namespace qc
