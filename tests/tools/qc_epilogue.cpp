// Test tool for tests/peer/test_epilogue_peer.py: evaluates every epilogue on cases read from
// stdin, one per line: `acc sa_bits sw_bits bias_bits M N` (acc decimal int64, scale bits as
// 8 hex digits of the fp32 pattern, bias as 4 hex digits of the bf16 pattern or `-` for none).
// Prints one line per case: the bf16 bits (4 hex digits) of each epilogue in `all_epilogues()`
// order, `-` where the formula refuses a bias. `--names` prints the order.
#include <cstdio>
#include <cstring>
#include <iostream>
#include <optional>
#include <string>

#include "qconform/epilogue.hpp"
#include "qconform/error.hpp"
#include "qconform/numerics.hpp"

int main(int argc, char** argv) {
  if (argc > 1 && std::strcmp(argv[1], "--names") == 0) {
    for (const auto& e : qc::all_epilogues()) std::printf("%.*s\n", static_cast<int>(e.name.size()), e.name.data());
    return 0;
  }
  std::string acc_s, sa_s, sw_s, bias_s;
  long long m = 0, n = 0;
  std::string out;
  while (std::cin >> acc_s >> sa_s >> sw_s >> bias_s >> m >> n) {
    const int64_t acc = std::stoll(acc_s);
    const float sa = qc::f32_from_bits(static_cast<uint32_t>(std::stoul(sa_s, nullptr, 16)));
    const float sw = qc::f32_from_bits(static_cast<uint32_t>(std::stoul(sw_s, nullptr, 16)));
    std::optional<uint16_t> bias;
    if (bias_s != "-") bias = static_cast<uint16_t>(std::stoul(bias_s, nullptr, 16));
    out.clear();
    for (const auto& e : qc::all_epilogues()) {
      if (!out.empty()) out += ' ';
      if (bias && !e.accepts_bias()) {
        out += '-';
        continue;
      }
      char buf[8];
      std::snprintf(buf, sizeof buf, "%04x", e.apply(acc, sa, sw, bias, m, n));
      out += buf;
    }
    out += '\n';
    std::fputs(out.c_str(), stdout);
  }
  return 0;
}
