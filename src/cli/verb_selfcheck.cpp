// `qconform selfcheck`: a fast (well under 5 s) check of the numerics this machine and build
// give qconform, with real counts: every bf16/fp16/fp8 pattern round-trips, the 2^24 boundary of
// int32 -> fp32 on this CPU, fp32 -> bf16 against the independent fp64 reference, and the FPU
// state (MXCSR: FTZ, DAZ, rounding mode). Exit 0 when all pass, 1 when any fails.
#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "cli/cli.hpp"
#include "core/fileio.hpp"
#include "core/results_json.hpp"
#include "core/numerics_ref.hpp"
#include "qconform/numerics.hpp"

namespace qc::cli {
namespace {

struct Line {
  std::string name;
  bool pass;
  uint64_t checked;
  uint64_t failed;
  std::string detail;
};

// Every pattern of the 16-bit format `name` decoded to fp32 and encoded again: itself, but a NaN
// comes back quiet (`quiet_bit` set).
Line round_trips_16(const std::string& name, float (*decode)(uint16_t), uint16_t (*encode)(float),
                    bool (*is_nan)(uint16_t), uint16_t quiet_bit) {
  uint64_t failed = 0;
  std::string first;
  for (uint32_t b = 0; b < 65536; ++b) {
    const uint16_t in = static_cast<uint16_t>(b);
    const uint16_t want = is_nan(in) ? static_cast<uint16_t>(in | quiet_bit) : in;
    const uint16_t got = encode(decode(in));
    if (got != want && failed++ == 0) first = fmt::format("first: 0x{:04x} -> 0x{:04x}", in, got);
  }
  return {name + " round-trip, all 65536 patterns (NaN stays NaN, quiet)", failed == 0, 65536, failed, first};
}

Line fp8_round_trips() {
  uint64_t failed = 0;
  std::string first;
  for (uint32_t b = 0; b < 256; ++b) {
    const uint8_t in = static_cast<uint8_t>(b);
    const float e4 = e4m3fn_to_f32(in), e5 = e5m2_to_f32(in);
    const uint8_t want4 = f32_is_nan(e4) ? static_cast<uint8_t>((in & 0x80) | 0x7F) : in;
    const uint8_t want5 = f32_is_nan(e5) ? static_cast<uint8_t>((in & 0x80) | 0x7E) : in;
    if (f32_to_e4m3fn(e4, /*saturate=*/false) != want4 && failed++ == 0) first = fmt::format("first: e4m3 0x{:02x}", in);
    if (f32_to_e5m2(e5, /*saturate=*/false) != want5 && failed++ == 0) first = fmt::format("first: e5m2 0x{:02x}", in);
  }
  return {"e4m3fn and e5m2 decode/re-encode, all 2 x 256 patterns", failed == 0, 512, failed, first};
}

// The conversions go through `volatile` so the CPU's `cvtsi2ss`, not the compiler, does them.
Line int_boundary() {
  struct Fact {
    int32_t v;
    int64_t expect;
  };
  constexpr int32_t p = 1 << 24;
  const Fact facts[] = {{p - 1, p - 1},     {-(p - 1), -(p - 1)}, {p, p},           {-p, -p},
                        {p + 1, p},         {-(p + 1), -p},       {p + 2, p + 2},   {-(p + 2), -(p + 2)}};
  uint64_t failed = 0;
  std::string detail = "±(2^24-1), ±2^24 exact; ±(2^24+1) rounds to ±2^24; ±(2^24+2) exact";
  for (const Fact& f : facts) {
    volatile int32_t v = f.v;
    const float x = i32_to_f32(v);
    if (static_cast<int64_t>(x) != f.expect) {
      ++failed;
      detail = fmt::format("{} -> {} (expected {})", f.v, x, f.expect);
    }
  }
  return {"int32 -> fp32 at the 2^24 boundary on this CPU", failed == 0, 8, failed, detail};
}

// 2^24 fp32 patterns (every 256th, low byte rotating: all exponents, signs, NaNs) plus every bf16
// tie class (low half 0x7FFF/0x8000/0x8001 under every upper half) against `qc::ref`.
Line bf16_against_reference() {
  uint64_t checked = 0, failed = 0;
  std::string first;
  auto check = [&](uint32_t u) {
    ++checked;
    const float x = f32_from_bits(u);
    const uint16_t got = f32_to_bf16(x), want = ref::f32_to_bf16(x);
    if (got != want && failed++ == 0) first = fmt::format("first: 0x{:08x} -> 0x{:04x}, reference 0x{:04x}", u, got, want);
  };
  for (uint64_t i = 0; i < (uint64_t{1} << 32); i += 256) check(static_cast<uint32_t>(i | ((i >> 8) & 255u)));
  for (uint32_t hi = 0; hi < 65536; ++hi) {
    for (uint32_t lo : {0x7FFFu, 0x8000u, 0x8001u}) check((hi << 16) | lo);
  }
  return {"fp32 -> bf16 RNE vs the independent fp64 reference (sample + all ties)", failed == 0, checked, failed, first};
}

Line fpu_state() {
#if defined(__x86_64__)
  const uint32_t csr = _mm_getcsr();
  const bool ftz = (csr & 0x8000u) != 0, daz = (csr & 0x0040u) != 0;
  const uint32_t rc = (csr >> 13) & 3u;
  static const char* const kRc[] = {"nearest", "down", "up", "toward-zero"};
  // Functional check too: a subnormal must survive a multiplication by one and be produced by
  // halving the smallest normal.
  volatile float tiny = 0x1p-149f, one = 1.0f, min_normal = 0x1p-126f, half = 0.5f;
  const bool subnormals_work = tiny * one == 0x1p-149f && min_normal * half == 0x1p-127f;
  const bool pass = !ftz && !daz && rc == 0 && subnormals_work;
  return {"FPU state (MXCSR): FTZ off, DAZ off, rounding to nearest", pass, 1, pass ? 0u : 1u,
          fmt::format("MXCSR=0x{:04x} FTZ={} DAZ={} RC={} subnormal arithmetic {}", csr, ftz ? "on" : "off",
                      daz ? "on" : "off", kRc[rc], subnormals_work ? "works" : "FLUSHED")};
#else
  volatile float tiny = 0x1p-149f, one = 1.0f;
  const bool pass = tiny * one == 0x1p-149f;
  return {"FPU state: subnormal arithmetic (MXCSR not available on this CPU)", pass, 1, pass ? 0u : 1u, ""};
#endif
}

VerbRunner setup_selfcheck(CLI::App& app) {
  auto json_path = std::make_shared<std::string>();
  app.add_option("--json", *json_path, "Also write the results as JSON to this file");
  return [json_path] {
    check_output_paths({}, {{"--json", *json_path}});
    const auto start = std::chrono::steady_clock::now();
    std::vector<Line> lines;
    lines.push_back(fpu_state());
    lines.push_back(int_boundary());
    lines.push_back(round_trips_16("bf16", bf16_to_f32, f32_to_bf16, bf16_is_nan, 0x0040));
    lines.push_back(round_trips_16("fp16", f16_to_f32, f32_to_f16,
                                   [](uint16_t b) { return classify_f16(b) == FpClass::nan; }, 0x0200));
    lines.push_back(fp8_round_trips());
    lines.push_back(bf16_against_reference());
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    bool all = true;
    fmt::print("qconform selfcheck: numerics on this machine and build ({})\n", QC_CXX_FLAGS);
    for (const Line& l : lines) {
      all = all && l.pass;
      fmt::print("  {}  {:<72} {:>10} checked, {} failed{}{}\n", l.pass ? "PASS" : "FAIL", l.name, l.checked, l.failed,
                 l.detail.empty() ? "" : "\n        ", l.detail);
    }
    fmt::print("{} ({:.2f} s)\n", all ? "all numerics checks passed" : "NUMERICS CHECK FAILED", seconds);
    if (!json_path->empty()) {
      nlohmann::json j = results_envelope("selfcheck");
      j["verb"] = "selfcheck";
      j["pass"] = all;
      j["seconds"] = seconds;
      for (const Line& l : lines) {
        j["checks"].push_back({{"name", l.name}, {"pass", l.pass}, {"checked", l.checked}, {"failed", l.failed},
                               {"detail", l.detail}});
      }
      write_file_atomic(*json_path, j.dump(2) + "\n");
    }
    return all ? kExitOk : kExitCheckFailed;
  };
}

RegisterVerb register_selfcheck{
    {"selfcheck", "Check this machine's numerics: conversions, the 2^24 boundary, FTZ/DAZ (fast)", 5, setup_selfcheck}};

}  // namespace
}  // namespace qc::cli
