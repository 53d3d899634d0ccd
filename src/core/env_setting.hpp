// The pipeline's measurement settings read from the environment (QC_VERIFY_OVERLAP, QC_FP8_MODEL_TILE_N, ...:
// docs/gpu.md): one reading for all of them, so that they agree on what unset, empty and out-of-range mean.
#pragma once

#include <algorithm>
#include <cstdlib>
#include <optional>
#include <string>
#include <utility>

namespace qc {

// An integer setting of the environment, clamped to [lo, hi]; `otherwise` when it is unset or empty.
inline int env_int(const char* name, int otherwise, int lo, int hi) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::clamp(std::atoi(v), lo, hi) : otherwise;
}

// Sets or unsets an environment variable for the guard's lifetime and restores what it held (or its
// absence) after, on every way out (an ASSERT returning early): the GPU tests and the benchmark's A/B of
// a setting.
class ScopedEnv {
 public:
  explicit ScopedEnv(std::string name) : name_(std::move(name)) {
    if (const char* v = std::getenv(name_.c_str())) before_ = v;
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;
  void set(const char* value) const { setenv(name_.c_str(), value, 1); }
  void unset() const { unsetenv(name_.c_str()); }
  ~ScopedEnv() {
    if (before_) {
      set(before_->c_str());
    } else {
      unset();
    }
  }

 private:
  std::string name_;
  std::optional<std::string> before_;
};

}  // namespace qc
