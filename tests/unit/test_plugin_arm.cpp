// Tests of the `plugin:<path.so>` arm and its C ABI (include/qconform/arm_abi.h): the example
// plugin (examples/plugin/example_arm.c, scalar C GEMM + `vllm-triton`) against the exact
// accumulator and the `vllm-triton` formula bit for bit, the run identity (the .so's sha256),
// and every validation path on deliberately broken plugins compiled here at test time.
//
// Run: ./build/tests/qconform_unit_tests --gtest_filter='PluginArm*'
#include <gtest/gtest.h>

#include <fmt/format.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "qconform/arm.hpp"
#include "qconform/epilogue.hpp"
#include "qconform/error.hpp"
#include "qconform/operands.hpp"
#include "qconform/sha256.hpp"

namespace qc {
namespace {

namespace fs = std::filesystem;

fs::path scratch_dir() {
  static const fs::path dir = [] {
    fs::path d = fs::temp_directory_path() / fmt::format("qc_plugin_test_{}", getpid());
    fs::create_directories(d);
    return d;
  }();
  return dir;
}

// Compiles C source into a shared library with the system C compiler; "" when none is usable.
std::string compile_plugin(const std::string& name, const std::string& source_path) {
  const fs::path out = scratch_dir() / fmt::format("lib{}.so", name);
  const std::string cmd =
      fmt::format("cc -std=c99 -O2 -fPIC -shared -ffp-contract=off -fno-fast-math -I'{}/include' '{}' -o '{}' 2>&1",
                  QC_SOURCE_DIR, source_path, out.string());
  return std::system(cmd.c_str()) == 0 ? out.string() : std::string();
}

std::string compile_plugin_source(const std::string& name, const std::string& code) {
  const fs::path src = scratch_dir() / fmt::format("{}.c", name);
  std::ofstream(src) << code;
  return compile_plugin(name, src.string());
}

// The example plugin: the one CMake built (examples/plugin/CMakeLists.txt), else compiled here.
std::string example_plugin() {
  static const std::string path = [] {
    const fs::path built = fs::path(QC_BINARY_DIR) / "examples/plugin/libqconform_example_arm.so";
    if (fs::exists(built)) return built.string();
    return compile_plugin("qconform_example_arm", std::string(QC_SOURCE_DIR) + "/examples/plugin/example_arm.c");
  }();
  return path;
}

#define REQUIRE_PLUGIN(path)                                                                            \
  do {                                                                                                  \
    if ((path).empty()) GTEST_SKIP() << "SKIPPED: no plugin library (not built and no `cc` to build it)"; \
  } while (0)

int8_t uniform(std::mt19937& r) { return static_cast<int8_t>(static_cast<int>(r() & 0xFF) - 128); }

LayerOperands layer(int64_t m, int64_t n, int64_t k, bool bias, uint32_t seed, int fill = 0) {
  std::mt19937 r(seed);
  OperandStorage st;
  st.a_q.resize(static_cast<size_t>(m * k));
  st.w_q.resize(static_cast<size_t>(n * k));
  for (auto& x : st.a_q) x = fill == 0 ? uniform(r) : static_cast<int8_t>(fill);
  for (auto& x : st.w_q) x = fill == 0 ? uniform(r) : static_cast<int8_t>(fill);
  std::uniform_real_distribution<float> sa(1e-4f, 3e-2f), sw(1e-4f, 3e-3f), b(-4.0f, 4.0f);
  for (int64_t i = 0; i < m; ++i) st.a_scale.push_back(sa(r));
  for (int64_t j = 0; j < n; ++j) st.w_scale.push_back(sw(r));
  if (bias) {
    for (int64_t j = 0; j < n; ++j) {
      const float v = b(r);
      uint32_t u;
      std::memcpy(&u, &v, 4);
      st.bias.push_back(static_cast<uint16_t>(u >> 16));
    }
  }
  return make_operands("test.layer", m, n, k, std::move(st), fmt::format("test seed={}", seed));
}

// Independent reference accumulator: int64 triple loop.
std::vector<int64_t> ref_acc(const LayerOperands& o) {
  std::vector<int64_t> acc(static_cast<size_t>(o.m * o.n), 0);
  for (int64_t i = 0; i < o.m; ++i)
    for (int64_t j = 0; j < o.n; ++j) {
      int64_t s = 0;
      for (int64_t kk = 0; kk < o.k; ++kk) s += int64_t{o.a_q[i * o.k + kk]} * int64_t{o.w_q[j * o.k + kk]};
      acc[i * o.n + j] = s;
    }
  return acc;
}

int64_t count_y_mismatches(const std::string& id, const std::vector<uint16_t>& got, const std::vector<uint16_t>& want,
                           int64_t n) {
  int64_t bad = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    if (got[i] != want[i] && bad++ < 5) {
      ADD_FAILURE() << id << ": y[" << i / n << "," << i % n << "] plugin=0x" << std::hex << got[i]
                    << " expected=0x" << want[i] << std::dec;
    }
  }
  return bad;
}

TEST(PluginArm, ExampleEqualsVllmTritonAndExactAccumulator) {
  const std::string so = example_plugin();
  REQUIRE_PLUGIN(so);
  auto arm = make_arm("plugin:" + so);
  const ArmInfo info = arm->info();
  EXPECT_EQ(info.epilogue, "vllm-triton");
  EXPECT_TRUE(info.exposes_accumulator);
  struct Case {
    int64_t m, n, k;
    bool bias;
    int fill;  // 0: random codes; else every code equals `fill`
  };
  const Case cases[] = {{1, 1, 1, false, 0},    {7, 13, 31, true, 0},    {33, 65, 1000, false, 0},
                        {16, 40, 513, true, 0}, {2, 3, 32768, false, -128}, {3, 2, 32767, true, 127}};
  // The `cpu:vllm-triton` arm, when this build has it, must agree too.
  std::unique_ptr<Arm> cpu;
  try {
    cpu = make_arm("cpu:vllm-triton");
  } catch (const Error&) {
  }
  for (const Case& c : cases) {
    const LayerOperands ops = layer(c.m, c.n, c.k, c.bias, static_cast<uint32_t>(c.m + c.n + c.k), c.fill);
    const std::string id = fmt::format("m={} n={} k={} bias={} fill={}", c.m, c.n, c.k, c.bias, c.fill);
    const ArmOutput out = arm->run(ops);
    ASSERT_TRUE(out.acc.has_value()) << id;
    const std::vector<int64_t> exact = ref_acc(ops);
    int64_t acc_bad = 0;
    for (size_t i = 0; i < exact.size(); ++i) {
      if (int64_t{(*out.acc)[i]} != exact[i] && acc_bad++ < 5) {
        ADD_FAILURE() << id << ": acc[" << i / c.n << "," << i % c.n << "] plugin=" << (*out.acc)[i]
                      << " exact=" << exact[i];
      }
    }
    EXPECT_EQ(acc_bad, 0) << id;
    std::vector<uint16_t> want(exact.size());
    apply_epilogue(epilogue("vllm-triton"), exact.data(), ops.a_scale.data(), ops.w_scale.data(),
                   c.bias ? ops.bias.data() : nullptr, ops.m, ops.n, want.data());
    EXPECT_EQ(count_y_mismatches(id + " vs apply_epilogue(vllm-triton)", out.y, want, c.n), 0);
    if (cpu) {
      const ArmOutput ref = cpu->run(ops);
      EXPECT_EQ(count_y_mismatches(id + " vs cpu:vllm-triton", out.y, ref.y, c.n), 0);
    }
  }
}

// Operands where the multiplication order provably matters: each diagonal element (t,t) has an
// accumulator and scales for which `vllm-triton` ((acc·sa)·sw) and `vllm-cutlass` (sa·(acc·sw))
// give different bf16 results, found by search with the two formula objects. A plugin that used
// the other order would fail here, whereas random operands differ in only a few elements per
// million.
TEST(PluginArm, ExampleFollowsTritonOrderWhereOrdersDiffer) {
  const std::string so = example_plugin();
  REQUIRE_PLUGIN(so);
  const int64_t t_count = 16;
  const Epilogue& triton = epilogue("vllm-triton");
  const Epilogue& cutlass = epilogue("vllm-cutlass");
  std::mt19937 r(2024);
  std::uniform_real_distribution<float> sa_d(1e-4f, 3e-2f), sw_d(1e-4f, 3e-3f);
  OperandStorage st;
  st.a_q.assign(static_cast<size_t>(t_count), 0);
  st.w_q.assign(static_cast<size_t>(t_count), 0);
  st.a_scale.assign(static_cast<size_t>(t_count), 0.0f);
  st.w_scale.assign(static_cast<size_t>(t_count), 0.0f);
  for (int64_t t = 0; t < t_count; ++t) {
    for (int64_t tries = 0;; ++tries) {
      ASSERT_LT(tries, 100'000'000) << "no discriminating case found";
      const int8_t a = uniform(r), w = uniform(r);
      const float sa = sa_d(r), sw = sw_d(r);
      const int64_t acc = int64_t{a} * w;
      if (triton.apply(acc, sa, sw, std::nullopt, t_count, t_count) !=
          cutlass.apply(acc, sa, sw, std::nullopt, t_count, t_count)) {
        st.a_q[t] = a;
        st.w_q[t] = w;
        st.a_scale[t] = sa;
        st.w_scale[t] = sw;
        break;
      }
    }
  }
  const LayerOperands ops = make_operands("discriminating", t_count, t_count, 1, std::move(st), "test search");
  const ArmOutput out = make_arm("plugin:" + so)->run(ops);
  for (int64_t t = 0; t < t_count; ++t) {
    const int64_t acc = int64_t{ops.a_q[t]} * ops.w_q[t];
    const uint16_t want = triton.apply(acc, ops.a_scale[t], ops.w_scale[t], std::nullopt, t_count, t_count);
    EXPECT_EQ(out.y[t * t_count + t], want)
        << "element (" << t << "," << t << ") acc=" << acc << " sa=" << ops.a_scale[t] << " sw=" << ops.w_scale[t]
        << std::hex << ": plugin 0x" << out.y[t * t_count + t] << ", vllm-triton 0x" << want << ", vllm-cutlass 0x"
        << cutlass.apply(acc, ops.a_scale[t], ops.w_scale[t], std::nullopt, t_count, t_count);
  }
}

TEST(PluginArm, RunRecordCarriesPluginNameAndFileDigest) {
  const std::string so = example_plugin();
  REQUIRE_PLUGIN(so);
  const ArmOutput out = make_arm("plugin:" + so)->run(layer(2, 3, 4, false, 1));
  const std::string digest = sha256_file(fs::canonical(so).string());
  EXPECT_EQ(out.record.arm, "plugin:" + so);
  EXPECT_EQ(out.record.kernel, "example_arm: scalar C int8 GEMM (int32 acc) + vllm-triton epilogue, v1");
  EXPECT_EQ(out.record.epilogue, "vllm-triton");
  EXPECT_NE(out.record.library.find(digest), std::string::npos) << out.record.library;
  EXPECT_NE(out.record.library.find(fs::canonical(so).string()), std::string::npos) << out.record.library;
  EXPECT_EQ(out.record.extra.at("plugin_sha256").get<std::string>(), digest);
  EXPECT_EQ(out.record.device, cpu_description());
}

// A plugin source whose descriptor is built from the given initializer fields.
std::string plugin_source(const std::string& descriptor_fields, const std::string& run_body,
                          bool export_entry = true) {
  return fmt::format(R"(#include "qconform/arm_abi.h"
#include <stdio.h>
static int bad_run(void* ctx, const qc_arm_args_v1* args) {{
  (void)ctx;
  {}
}}
static const qc_arm_v1 kArm = {{ {} }};
{}
)",
                     run_body, descriptor_fields,
                     export_entry ? "QC_ARM_EXPORT const qc_arm_v1* qc_arm_v1_entry(void) { return &kArm; }"
                                  : "QC_ARM_EXPORT int some_other_symbol(void) { return kArm.abi_version; }");
}

const char* kFillRun = R"(for (int64_t i = 0; i < args->m * args->n; ++i) args->y[i] = 0;
  return 0;)";

// Expects `make_arm(label)` (and, when `run` is true, running the arm) to throw an input error
// whose message contains every one of `needles`.
void expect_input_error(const std::string& label, const std::vector<std::string>& needles, bool run = false) {
  try {
    auto arm = make_arm(label);
    if (run) (void)arm->run(layer(2, 3, 4, false, 1));
    ADD_FAILURE() << label << ": no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::input) << e.what();
    for (const std::string& needle : needles) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << "message lacks `" << needle << "`: " << e.what();
    }
  }
}

TEST(PluginArm, MissingFileIsInputError) {
  const std::string missing = (scratch_dir() / "no_such_plugin.so").string();
  expect_input_error("plugin:" + missing, {missing, "not found"});
  expect_input_error("plugin:", {"path"});
}

TEST(PluginArm, BrokenPluginsAreRejectedNamingPathAndField) {
  struct Bad {
    std::string id, source;
    std::vector<std::string> needles;
    bool at_run = false;
  };
  const std::string ok_fields = "QC_ARM_ABI_VERSION, sizeof(qc_arm_v1), \"bad\", NULL, 0, bad_run, NULL";
  const std::vector<Bad> bads = {
      {"no_symbol", plugin_source(ok_fields, kFillRun, /*export_entry=*/false), {"qc_arm_v1_entry", "not found"}},
      {"wrong_version", plugin_source("2u, sizeof(qc_arm_v1), \"bad\", NULL, 0, bad_run, NULL", kFillRun),
       {"abi_version", "expected 1", "found 2"}},
      {"short_struct", plugin_source("QC_ARM_ABI_VERSION, 16, \"bad\", NULL, 0, bad_run, NULL", kFillRun),
       {"struct_size", "found 16"}},
      {"null_run", plugin_source("QC_ARM_ABI_VERSION, sizeof(qc_arm_v1), \"bad\", NULL, 0, NULL, NULL", kFillRun),
       {"field `run`", "NULL"}},
      {"null_name", plugin_source("QC_ARM_ABI_VERSION, sizeof(qc_arm_v1), NULL, NULL, 0, bad_run, NULL", kFillRun),
       {"field `name`"}},
      {"unknown_epilogue",
       plugin_source("QC_ARM_ABI_VERSION, sizeof(qc_arm_v1), \"bad\", \"no-such-formula\", 0, bad_run, NULL", kFillRun),
       {"field `epilogue`", "no-such-formula"}},
      {"unknown_flags", plugin_source("QC_ARM_ABI_VERSION, sizeof(qc_arm_v1), \"bad\", NULL, 0x80, bad_run, NULL", kFillRun),
       {"field `flags`"}},
      {"run_fails",
       plugin_source(ok_fields, "snprintf(args->error, args->error_size, \"deliberate failure %d\", 42);\n  return 7;"),
       {"deliberate failure 42", "code 7", "bad"}, true},
      {"acc_not_written",
       plugin_source("QC_ARM_ABI_VERSION, sizeof(qc_arm_v1), \"bad\", NULL, QC_ARM_FLAG_WRITES_ACC, bad_run, NULL",
                     kFillRun),
       {"acc_written"}, true},
  };
  for (const Bad& b : bads) {
    const std::string so = compile_plugin_source("bad_" + b.id, b.source);
    REQUIRE_PLUGIN(so);
    SCOPED_TRACE(b.id);
    std::vector<std::string> needles = b.needles;
    needles.push_back(fs::canonical(so).string());  // every message names the .so
    expect_input_error("plugin:" + so, needles, b.at_run);
  }
}

// A plugin that writes nothing leaves NaN (the unwritten marker), never a plausible value.
TEST(PluginArm, UnwrittenOutputsAreNaN) {
  const std::string so = compile_plugin_source(
      "writes_nothing",
      plugin_source("QC_ARM_ABI_VERSION, sizeof(qc_arm_v1), \"lazy\", NULL, 0, bad_run, NULL", "(void)args; return 0;"));
  REQUIRE_PLUGIN(so);
  const ArmOutput out = make_arm("plugin:" + so)->run(layer(2, 3, 4, false, 1));
  EXPECT_FALSE(out.acc.has_value());
  for (uint16_t y : out.y) EXPECT_TRUE((y & 0x7FFF) > 0x7F80) << std::hex << y;
}

}  // namespace
}  // namespace qc
