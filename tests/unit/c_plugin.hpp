// Test plugins compiled at test time with the system C compiler, with the flags of a bit-exact
// plugin build (C99, -ffp-contract=off, no fast-math). Shared by the plugin, identify and
// interchangeability tests; a test whose plugin does not compile says SKIPPED.
#pragma once

#include <fmt/format.h>

#include <cstdlib>
#include <filesystem>
#include <string>

namespace qc::test {

struct CPlugin {
  std::string source;            // the C file: relative to the source tree, or absolute
  std::string out;               // the shared library to write
  std::string flags = "";        // more compiler flags (-D..., -std=gnu99)
  bool example_headers = false;  // -I examples/plugin: the example plugin's helpers
  bool libm = false;             // link libm
};

// `p.out`, or "" when no C compiler is usable or the source does not compile.
inline std::string compile_c_plugin(const CPlugin& p) {
  const std::string root = QC_SOURCE_DIR;
  const std::string cmd =
      fmt::format("cc -std=c99 -O2 -fPIC -shared -ffp-contract=off -fno-fast-math -I'{0}/include'{1} {2} '{3}' -o '{4}'{5} 2>&1",
                  root, p.example_headers ? fmt::format(" -I'{}/examples/plugin'", root) : "", p.flags,
                  (std::filesystem::path(root) / p.source).string(), p.out, p.libm ? " -lm" : "");
  return std::system(cmd.c_str()) == 0 ? p.out : std::string();
}

}  // namespace qc::test
