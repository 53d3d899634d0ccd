// Tests of the `onednn:s8s8` arm: oneDNN's own s32 accumulator against the model of the kernel
// oneDNN reports it ran (exact; exact to 2^24 and fp32-rounded above; int16 pair saturation), on
// random, all-extreme and adversarial operands up to K = 32768 and on ragged shapes, for every ISA
// up to this machine's own (ONEDNN_MAX_CPU_ISA in child processes); the output against the
// declared epilogue; the run identity (docs/plugins.md, "The oneDNN arm").
//
// Run: ./build/tests/qconform_unit_tests --gtest_filter='OnednnArm*'
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <unistd.h>
#include <vector>

#include "int8_layer.hpp"
#include "qconform/accumulation.hpp"
#include "qconform/arm.hpp"
#include "qconform/epilogue.hpp"
#include "qconform/error.hpp"
#include "qconform/operands.hpp"

#ifdef QC_WITH_ONEDNN
#include "arms/onednn/onednn_arm.hpp"
#endif

namespace qc {
namespace {

using test::int8_layer;
using test::uniform_int8;

#ifndef QC_WITH_ONEDNN
// Without oneDNN the arm is absent, and asking for it names the reason the configure found.
TEST(OnednnArm, AbsentArmNamesTheReason) {
  const auto& absent = absent_arm_backends();
  const auto it = std::find_if(absent.begin(), absent.end(), [](const AbsentBackend& a) { return a.prefix == "onednn"; });
  ASSERT_NE(it, absent.end()) << "a build without oneDNN must list the onednn backend as absent";
  EXPECT_FALSE(it->reason.empty());
  try {
    (void)make_arm("onednn:s8s8");
    ADD_FAILURE() << "onednn:s8s8 was made in a build without oneDNN";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::input);
    EXPECT_NE(std::string(e.what()).find(it->reason), std::string::npos) << e.what();
  }
  std::printf("SKIPPED the oneDNN arm tests: this build has no oneDNN (%s)\n", it->reason.c_str());
}
#else

TEST(OnednnArm, PresentArmIsNotListedAbsent) {
  for (const AbsentBackend& a : absent_arm_backends()) EXPECT_NE(a.prefix, "onednn") << a.reason;
}

// The independent reference: int64 triple loop, no SIMD, no blocking.
std::vector<int64_t> ref_acc(const std::vector<int8_t>& a, const std::vector<int8_t>& w, int64_t m, int64_t n,
                             int64_t k) {
  std::vector<int64_t> acc(static_cast<size_t>(m * n), 0);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      int64_t s = 0;
      for (int64_t kk = 0; kk < k; ++kk) s += int64_t{a[i * k + kk]} * int64_t{w[j * k + kk]};
      acc[i * n + j] = s;
    }
  }
  return acc;
}

// One operand pattern: fills a [m,k] and w [n,k].
struct Pattern {
  std::string id;
  std::function<int8_t(std::mt19937&, int64_t row, int64_t col)> a, w;
};

int8_t extreme(std::mt19937& r) { return (r() & 1) ? int8_t{127} : int8_t{-128}; }

std::vector<Pattern> patterns() {
  using R = std::mt19937&;
  return {
      {"random", [](R r, int64_t, int64_t) { return uniform_int8(r); }, [](R r, int64_t, int64_t) { return uniform_int8(r); }},
      {"all-m128xm128", [](R, int64_t, int64_t) { return int8_t{-128}; }, [](R, int64_t, int64_t) { return int8_t{-128}; }},
      {"all-127x127", [](R, int64_t, int64_t) { return int8_t{127}; }, [](R, int64_t, int64_t) { return int8_t{127}; }},
      {"all-m128x127", [](R, int64_t, int64_t) { return int8_t{-128}; }, [](R, int64_t, int64_t) { return int8_t{127}; }},
      {"all-127xm128", [](R, int64_t, int64_t) { return int8_t{127}; }, [](R, int64_t, int64_t) { return int8_t{-128}; }},
      {"extreme-mix", [](R r, int64_t, int64_t) { return extreme(r); }, [](R r, int64_t, int64_t) { return extreme(r); }},
      // Adversarial for a u8-shifted (a+128) x s8 kernel: a=127 becomes 255, and 255*127 + 255*127
      // overflows int16; alternating w signs make each pair cancel in exact arithmetic.
      {"pair-saturating", [](R, int64_t, int64_t) { return int8_t{127}; },
       [](R, int64_t, int64_t col) { return (col % 4 < 2) ? int8_t{127} : int8_t{-128}; }},
      {"alternating-sign", [](R, int64_t, int64_t col) { return (col & 1) ? int8_t{-128} : int8_t{127}; },
       [](R, int64_t row, int64_t col) { return ((col + row) & 1) ? int8_t{-128} : int8_t{127}; }},
  };
}

struct Operands {
  std::vector<int8_t> a, w;
};
Operands fill(const Pattern& p, int64_t m, int64_t n, int64_t k, uint32_t seed) {
  std::mt19937 r(seed);
  Operands o{std::vector<int8_t>(static_cast<size_t>(m * k)), std::vector<int8_t>(static_cast<size_t>(n * k))};
  for (int64_t i = 0; i < m; ++i)
    for (int64_t kk = 0; kk < k; ++kk) o.a[i * k + kk] = p.a(r, i, kk);
  for (int64_t j = 0; j < n; ++j)
    for (int64_t kk = 0; kk < k; ++kk) o.w[j * k + kk] = p.w(r, j, kk);
  return o;
}

// The expectation comes from the kernel oneDNN reports it ran (`impl`, effective `isa`), never
// from this machine's CPU: `onednn_accumulation` names that kernel's model, and every element
// must equal the model's value. A kernel nobody has measured is a failure that names it.
OnednnAccumulation model_of(const OnednnMatmul& mm) {
  const OnednnAccumulation model = onednn_accumulation(mm.impl, mm.isa);
  EXPECT_NE(model, OnednnAccumulation::unmodelled)
      << "oneDNN ran `" << mm.impl << "` on isa " << mm.isa
      << ", a combination without a measured model: measure it (docs/plugins.md) and add it to "
         "onednn_accumulation";
  return model;
}

// Runs in the children of OnednnArmIsa.EveryIsaUpToThisMachinesFollowsItsModel only: there the ISA
// cap and oneDNN's thread count (which decides how `gemm:jit` splits K) are fixed before oneDNN
// starts, whatever this machine has.
#define QC_ONLY_IN_ISA_CHILD()                                                                            \
  if (std::getenv("QC_ONEDNN_ISA_CHILD") == nullptr)                                                      \
  GTEST_SKIP() << "SKIPPED here: runs in the children of OnednnArmIsa.EveryIsaUpToThisMachinesFollowsItsModel " \
                  "(ISA cap and OMP_NUM_THREADS=2 set before oneDNN starts)"

TEST(OnednnArm, AccumulatorFollowsTheModelOfTheKernelItRan) {
  QC_ONLY_IN_ISA_CHILD();
  struct Shape {
    int64_t m, n, k;
  };
  const Shape shapes[] = {{1, 1, 1},   {3, 5, 7},      {17, 33, 65},  {1, 64, 4096}, {64, 48, 1001},
                          {2, 16, 8191}, {8, 8, 32768}, {5, 3, 32767}, {33, 17, 1000}};
  int64_t cases = 0, differ_total = 0, above_total = 0;
  std::string ran;
  for (const Pattern& p : patterns()) {
    for (const Shape& s : shapes) {
      const Operands o = fill(p, s.m, s.n, s.k, static_cast<uint32_t>(s.m * 7 + s.n * 13 + s.k));
      const OnednnMatmul mm = onednn_s8s8_matmul(o.a.data(), o.w.data(), s.m, s.n, s.k);
      const OnednnAccumulation model = model_of(mm);
      if (model == OnednnAccumulation::unmodelled) return;
      // The pair-saturating kernel may split K into two blocks (pairs restart at the split); oneDNN
      // does not report where, so the first split that explains every element is searched (a
      // failure is then reported against the unsplit model). The split follows oneDNN's threads,
      // which is why these tests run in children with OMP_NUM_THREADS=2.
      const auto explains_row0 = [&](int64_t split) {
        for (int64_t j = 0; j < s.n; ++j) {
          if (onednn_model_dot(model, o.a.data(), &o.w[j * s.k], s.k, split) != mm.acc[j]) return false;
        }
        return true;
      };
      const auto explains_all = [&](int64_t split) {
        for (int64_t i = 0; i < s.m; ++i) {
          for (int64_t j = 0; j < s.n; ++j) {
            if (onednn_model_dot(model, &o.a[i * s.k], &o.w[j * s.k], s.k, split) != mm.acc[i * s.n + j]) return false;
          }
        }
        return true;
      };
      int64_t k_split = 0;
      if (model == OnednnAccumulation::int16_pair_saturation && !explains_row0(0)) {
        for (int64_t split = 1; split < s.k; split += 2) {
          if (explains_row0(split) && explains_all(split)) {
            k_split = split;
            break;
          }
        }
        std::printf("  %s m=%lld n=%lld k=%lld [%s on %s]: K split at %lld\n", p.id.c_str(), (long long)s.m,
                    (long long)s.n, (long long)s.k, mm.impl.c_str(), mm.isa.c_str(), (long long)k_split);
      }
      ran = fmt::format("{} on {} ({})", mm.impl, mm.isa, to_string(model));
      const std::string id =
          fmt::format("{} m={} n={} k={} impl={} isa={} k_split={}", p.id, s.m, s.n, s.k, mm.impl, mm.isa, k_split);
      const std::vector<int64_t> exact = ref_acc(o.a, o.w, s.m, s.n, s.k);
      int64_t bad = 0, differ = 0, above = 0;
      for (int64_t i = 0; i < s.m; ++i) {
        for (int64_t j = 0; j < s.n; ++j) {
          const size_t e = static_cast<size_t>(i * s.n + j);
          const int32_t want = onednn_model_dot(model, &o.a[i * s.k], &o.w[j * s.k], s.k, k_split);
          above += exact[e] > kFp32ExactIntLimit || exact[e] < -kFp32ExactIntLimit;
          differ += int64_t{mm.acc[e]} != exact[e];
          if (mm.acc[e] != want && bad++ < 5) {
            ADD_FAILURE() << id << ": acc[" << i << "," << j << "] oneDNN=" << mm.acc[e] << " (0x" << std::hex
                          << static_cast<uint32_t>(mm.acc[e]) << std::dec << ") model=" << want << " (0x" << std::hex
                          << static_cast<uint32_t>(want) << std::dec << ") exact=" << exact[e];
          }
        }
      }
      EXPECT_EQ(bad, 0) << id;
      // Below 2^24 the exact and fp32 models coincide: no freedom at all there.
      if (above == 0 && model != OnednnAccumulation::int16_pair_saturation) {
        EXPECT_EQ(differ, 0) << id;
      }
      differ_total += differ;
      above_total += above;
      ++cases;
    }
  }
  EXPECT_GT(cases, 0);
  std::printf("oneDNN ran %s: %lld cases, %lld elements above 2^24, %lld differ from exact, all as the model says\n",
              ran.c_str(), (long long)cases, (long long)above_total, (long long)differ_total);
}

// Accumulators above 2^24 with every residue, ties included: each element equals the model of the
// kernel that ran (for `brg:avx512_core_vnni`, int32(float(exact)) with ties to even, which must
// then differ from exact somewhere; for exact kernels, exact everywhere).
TEST(OnednnArm, AccumulatorAbove2p24FollowsTheModelTiesIncluded) {
  QC_ONLY_IN_ISA_CHILD();
  const int64_t m = 64, n = 64, k = 8191;
  std::mt19937 r(1);
  std::vector<int8_t> a(static_cast<size_t>(m * k)), w(static_cast<size_t>(n * k));
  for (auto& x : a) x = static_cast<int8_t>(127 - static_cast<int>(r() % 3));
  for (int64_t j = 0; j < n; ++j) {
    for (int64_t kk = 0; kk < k; ++kk) {
      const int mag = 100 + static_cast<int>(r() % 28);
      w[j * k + kk] = static_cast<int8_t>((j & 1) ? mag : -mag);
    }
  }
  const OnednnMatmul mm = onednn_s8s8_matmul(a.data(), w.data(), m, n, k);
  const OnednnAccumulation model = model_of(mm);
  if (model == OnednnAccumulation::unmodelled) return;
  const std::vector<int64_t> exact = ref_acc(a, w, m, n, k);
  int64_t differ = 0, ties = 0, bad = 0;
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      const size_t e = static_cast<size_t>(i * n + j);
      ASSERT_GT(std::llabs(exact[e]), kFp32ExactIntLimit) << "the operands must put every element above 2^24";
      const int64_t ulp = int64_t{1} << (std::bit_width(static_cast<uint64_t>(std::llabs(exact[e]))) - 24);
      ties += (std::llabs(exact[e]) % ulp) == ulp / 2;
      differ += int64_t{mm.acc[e]} != exact[e];
      const int32_t want = onednn_model_dot(model, &a[i * k], &w[j * k], k);
      if (mm.acc[e] != want && bad++ < 5) {
        ADD_FAILURE() << mm.impl << " on " << mm.isa << ": acc[" << i << "," << j << "] oneDNN=" << mm.acc[e]
                      << " model (" << to_string(model) << ")=" << want << " exact=" << exact[e];
      }
    }
  }
  EXPECT_EQ(bad, 0);
  EXPECT_GT(ties, 0) << "no tie case was exercised";
  if (model == OnednnAccumulation::fp32_above_2p24) {
    EXPECT_GT(differ, 0) << "every element is above 2^24, so fp32 rounding must show somewhere";
  }
  if (model == OnednnAccumulation::exact) {
    EXPECT_EQ(differ, 0);
  }
  std::printf("m=%lld n=%lld k=%lld [%s on %s, model: %s]: %lld of %lld accumulators differ from exact, %lld ties, "
              "all equal the model\n", (long long)m, (long long)n, (long long)k, mm.impl.c_str(), mm.isa.c_str(),
              std::string(to_string(model)).c_str(), (long long)differ, (long long)exact.size(), (long long)ties);
}

// The arm's output must be the declared formula applied to the arm's own accumulator (and, with
// VNNI, the exact one), bit for bit.
TEST(OnednnArm, OutputIsDeclaredEpilogueOfItsAccumulator) {
  struct Case {
    std::string label, epilogue;
    bool bias;
  };
  const Case cases[] = {{"onednn:s8s8", "vllm-cutlass", false},
                        {"onednn:s8s8-vllm-triton", "vllm-triton", true},
                        {"onednn:s8s8-sglang-sm90", "sglang-sm90", false},
                        {"onednn:s8s8-exact", "exact", true}};
  for (const Case& c : cases) {
    const LayerOperands ops = int8_layer(19, 37, 300, c.bias, 11);
    auto arm = make_arm(c.label);
    const ArmInfo info = arm->info();
    EXPECT_EQ(info.epilogue, c.epilogue);
    EXPECT_TRUE(info.exposes_accumulator);
    const ArmOutput out = arm->run(ops);
    ASSERT_TRUE(out.acc.has_value()) << c.label;
    std::vector<uint16_t> want(out.y.size());
    apply_epilogue(epilogue(c.epilogue), out.acc->data(), ops.a_scale.data(), ops.w_scale.data(),
                   c.bias ? ops.bias.data() : nullptr, ops.m, ops.n, want.data());
    int64_t bad = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      if (out.y[i] != want[i] && bad++ < 5) {
        ADD_FAILURE() << c.label << ": y[" << i / ops.n << "," << i % ops.n << "] arm=0x" << std::hex << out.y[i]
                      << " formula=0x" << want[i];
      }
    }
    EXPECT_EQ(bad, 0) << c.label;
    EXPECT_EQ(out.record.arm, c.label);
    EXPECT_EQ(out.record.epilogue, c.epilogue);
  }
}

TEST(OnednnArm, RunRecordNamesWhatOneDnnRan) {
  const LayerOperands ops = int8_layer(4, 8, 64, false, 3);
  const ArmOutput out = make_arm("onednn:s8s8")->run(ops);
  const OnednnMatmul mm = onednn_s8s8_matmul(ops.a_q.data(), ops.w_q.data(), ops.m, ops.n, ops.k);
  EXPECT_FALSE(mm.impl.empty());
  EXPECT_NE(out.record.kernel.find(mm.impl), std::string::npos) << out.record.kernel;
  EXPECT_NE(out.record.kernel.find(mm.isa), std::string::npos) << out.record.kernel;
  EXPECT_EQ(out.record.library.rfind("oneDNN ", 0), 0u) << out.record.library;
  EXPECT_EQ(out.record.device, cpu_description());
  EXPECT_FALSE(out.record.build.empty());
  EXPECT_EQ(out.record.extra.at("onednn_impl").get<std::string>(), mm.impl);
  std::printf("onednn:s8s8 ran: kernel=\"%s\" library=\"%s\"\n", out.record.kernel.c_str(),
              out.record.library.c_str());
}

TEST(OnednnArm, BadLabelsAreInputErrors) {
  for (const char* label : {"onednn:s8u8", "onednn:s8s8-no-such-epilogue", "onednn:"}) {
    try {
      (void)make_arm(label);
      ADD_FAILURE() << label << " was accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::input) << label << ": " << e.what();
    }
  }
  // Every listed variant can be made.
  for (const std::string& label : list_arms()) {
    if (label.rfind("onednn:", 0) == 0) {
      EXPECT_NO_THROW((void)make_arm(label)) << label;
    }
  }
}

// ---- Every ISA up to this machine's own, through ONEDNN_MAX_CPU_ISA. ----
//
// oneDNN fixes its ISA at the first primitive, so each capped run happens in a child process: this
// binary re-executed with ONEDNN_MAX_CPU_ISA set and a filter selecting the two model tests above
// (`ALL` first: the machine's own kernel).
// A cap above the machine's own ISA changes nothing (oneDNN keeps what the CPU has), so caps that
// give an effective ISA already seen are reported and not run twice.
std::string run_child(const std::string& cmd) {
  FILE* pipe = popen(cmd.c_str(), "r");
  if (pipe == nullptr) return "popen failed";
  std::string output;
  char buf[4096];
  while (fgets(buf, sizeof buf, pipe)) output += buf;
  const int status = pclose(pipe);
  return fmt::format("{}exit status {}\n", output, status);
}

TEST(OnednnArmIsa, EveryIsaUpToThisMachinesFollowsItsModel) {
#if !defined(__x86_64__)
  GTEST_SKIP() << "SKIPPED: the ONEDNN_MAX_CPU_ISA caps probed here are x86 ISAs";
#endif
  if (std::getenv("QC_ONEDNN_ISA_CHILD") != nullptr) GTEST_SKIP() << "SKIPPED: already a capped child";
  char self[4096] = {};
  const ssize_t len = readlink("/proc/self/exe", self, sizeof(self) - 1);
  ASSERT_GT(len, 0);
  std::vector<std::string> seen;
  int ran = 0;
  for (const char* cap : {"ALL", "AVX512_CORE_AMX", "AVX512_CORE_BF16", "AVX512_CORE_VNNI", "AVX2_VNNI", "AVX512_CORE",
                          "AVX2", "AVX", "SSE41"}) {
    const std::string cmd = fmt::format(
        "ONEDNN_MAX_CPU_ISA={} OMP_NUM_THREADS=2 QC_ONEDNN_ISA_CHILD=1 '{}' "
        "--gtest_filter='OnednnArm.AccumulatorFollowsTheModelOfTheKernelItRan:"
        "OnednnArm.AccumulatorAbove2p24FollowsTheModelTiesIncluded' 2>&1",
        cap, self);
    const std::string output = run_child(cmd);
    // The kernel line the child printed names impl and isa; it tells whether this cap is new.
    const auto at = output.find("oneDNN ran ");
    const std::string kernel = at == std::string::npos ? "?" : output.substr(at + 11, output.find(" (", at) - at - 11);
    const bool passed = output.find("[  PASSED  ] 2 tests") != std::string::npos;
    if (std::find(seen.begin(), seen.end(), kernel) != seen.end()) {
      std::printf("ONEDNN_MAX_CPU_ISA=%-16s -> %s (already checked)\n", cap, kernel.c_str());
      EXPECT_TRUE(passed) << output;
      continue;
    }
    seen.push_back(kernel);
    ++ran;
    std::printf("ONEDNN_MAX_CPU_ISA=%-16s -> %s\n%s", cap, kernel.c_str(), output.c_str());
    EXPECT_TRUE(passed) << "child run under ONEDNN_MAX_CPU_ISA=" << cap << " failed:\n" << output;
  }
  // At least the machine's own kernel and one capped below it (every x86-64 CPU oneDNN runs on has
  // SSE4.1, so some cap always lowers the ISA).
  EXPECT_GE(ran, 2) << "the ISA caps did not change oneDNN's kernel";
}

#endif  // QC_WITH_ONEDNN

}  // namespace
}  // namespace qc
