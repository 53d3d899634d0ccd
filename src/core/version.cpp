#include "core/version.hpp"

#include <fmt/format.h>

namespace qc {

std::string version() { return QC_VERSION; }

std::string build_flags() {
#if defined(__clang__)
  std::string compiler = fmt::format("clang {}.{}.{}", __clang_major__, __clang_minor__, __clang_patchlevel__);
#elif defined(__GNUC__)
  std::string compiler = fmt::format("gcc {}.{}.{}", __GNUC__, __GNUC_MINOR__, __GNUC_PATCHLEVEL__);
#else
  std::string compiler = "unknown compiler";
#endif
#if defined(__FAST_MATH__)
#error "qconform must not be built with -ffast-math: its host arithmetic claims bit-exactness"
#endif
  return compiler + " -ffp-contract=off -fno-fast-math";
}

}  // namespace qc
