// Numbers for the peer-test drivers: every double printed with "%.17g" (round-trips exactly), a
// non-finite one as null, so that the Python peers compare full precision.
#pragma once

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

namespace qc_tools {

inline std::string num(double v) {
  if (!std::isfinite(v)) return "null";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

inline std::string nums(const std::vector<double>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + num(v[i]);
  return s + "]";
}

}  // namespace qc_tools
