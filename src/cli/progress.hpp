// A one-line progress bar on stderr, drawn only when stderr is a terminal.
#pragma once

#include <chrono>
#include <cstdio>
#include <functional>
#include <string>

#include "cli/cli.hpp"

namespace qc::cli {

class Progress {
 public:
  explicit Progress(std::string label) : label_(std::move(label)), enabled_(stderr_is_terminal()) {}
  ~Progress() { finish(); }

  void update(size_t done, size_t total, const std::string& item = "") {
    if (!enabled_ || total == 0) return;
    const auto now = std::chrono::steady_clock::now();
    if (done != total && now - last_ < std::chrono::milliseconds(100)) return;
    last_ = now;
    constexpr int kWidth = 30;
    const int filled = static_cast<int>(kWidth * done / total);
    std::fprintf(stderr, "\r\033[K%s [%.*s%*s] %zu/%zu %s", label_.c_str(), filled,
                 "##############################", kWidth - filled, "", done, total, item.substr(0, 50).c_str());
    std::fflush(stderr);
    drawn_ = true;
  }

  // `update` as a callback (orchestrate's LayerProgress), for as long as this bar lives.
  std::function<void(size_t, size_t, const std::string&)> updater() {
    return [this](size_t done, size_t total, const std::string& item) { update(done, total, item); };
  }

  void finish() {
    if (drawn_) std::fprintf(stderr, "\r\033[K");
    drawn_ = false;
  }

 private:
  std::string label_;
  bool enabled_;
  bool drawn_ = false;
  std::chrono::steady_clock::time_point last_{};
};

}  // namespace qc::cli
