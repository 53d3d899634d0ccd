// Tests of the `plugin:<path.so>` arm (isolated in a worker process), `plugin-inproc:<path.so>`
// and their C ABI (include/qconform/arm_abi.h): the example plugin (examples/plugin/example_arm.c,
// scalar C GEMM + `vllm-triton`) against the exact accumulator and the `vllm-triton` formula bit
// for bit, both modes bit-identical, the run identity (the .so's sha256), every validation path
// on deliberately broken plugins compiled here at test time, and every fault of
// tests/hostile/plugins/misbehave.c (crash, abort, exit, hang, writes into the inputs, overruns)
// reported as that arm's failure while this process carries on.
//
// Run: ./build/tests/qconform_unit_tests --gtest_filter='PluginArm*'
#include <gtest/gtest.h>

#include <fmt/format.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "accum/fp8_model.hpp"
#include "synth/synth.hpp"
#include "arms/plugin/plugin_arm.hpp"
#include "qconform/arm.hpp"
#include "qconform/epilogue.hpp"
#include "qconform/error.hpp"
#include "qconform/numerics.hpp"
#include "qconform/operands.hpp"
#include "core/sha256.hpp"
#include "c_plugin.hpp"
#include "int8_layer.hpp"
#include "temp_dir.hpp"

namespace qc {
namespace {

using test::int8_layer;
using test::uniform_int8;

namespace fs = std::filesystem;

// The compiled plugins of this process, removed when it exits.
fs::path scratch_dir() {
  static const test::TempDir dir("plugin-arm");
  return dir.path();
}

std::string plugin_path(const std::string& name) { return (scratch_dir() / fmt::format("lib{}.so", name)).string(); }

// tests/hostile/plugins/misbehave.c with one BEHAVE_* macro, misbehaving from call `at_call` on.
std::string misbehave_plugin(const std::string& behave, int at_call = 1) {
  return test::compile_c_plugin({.source = "tests/hostile/plugins/misbehave.c",
                                 .out = plugin_path(fmt::format("misbehave_{}_{}", behave, at_call)),
                                 .flags = fmt::format("-std=gnu99 -DBEHAVE_{} -DAT_CALL={}", behave, at_call),
                                 .example_headers = true});
}

std::string compile_plugin_source(const std::string& name, const std::string& code) {
  const fs::path src = scratch_dir() / fmt::format("{}.c", name);
  std::ofstream(src) << code;
  return test::compile_c_plugin({.source = src.string(), .out = plugin_path(name)});
}

// The example plugin: the one CMake built (examples/plugin/CMakeLists.txt), else compiled here.
std::string example_plugin() {
  static const std::string path = [] {
    const fs::path built = fs::path(QC_BINARY_DIR) / "examples/plugin/libqconform_example_arm.so";
    if (fs::exists(built)) return built.string();
    return test::compile_c_plugin({.source = "examples/plugin/example_arm.c", .out = plugin_path("qconform_example_arm")});
  }();
  return path;
}

#define REQUIRE_PLUGIN(path)                                                                            \
  do {                                                                                                  \
    if ((path).empty()) GTEST_SKIP() << "SKIPPED: no plugin library (not built and no `cc` to build it)"; \
  } while (0)


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
    const LayerOperands ops = int8_layer(c.m, c.n, c.k, c.bias, static_cast<uint32_t>(c.m + c.n + c.k), c.fill);
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
      const int8_t a = uniform_int8(r), w = uniform_int8(r);
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
  const ArmOutput out = make_arm("plugin:" + so)->run(int8_layer(2, 3, 4, false, 1));
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
    if (run) (void)arm->run(int8_layer(2, 3, 4, false, 1));
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
    std::vector<std::string> needles = b.needles;
    needles.push_back(fs::canonical(so).string());  // every message names the .so
    // The same validation and messages whether the library is read by the worker or here.
    for (const char* prefix : {"plugin:", "plugin-inproc:"}) {
      SCOPED_TRACE(b.id + " " + prefix);
      expect_input_error(prefix + so, needles, b.at_run);
    }
  }
}

// An FP8 plugin (the appended `accumulation_model` field and `args->d`): a C kernel of the
// `sequential` model (its own e4m3 decoding, an fp32 sum in k order) declares "sequential"; through
// both modes it equals qconform's evaluation of that model bit for bit (and differs from the Hopper
// chain model, so the comparison can fail), runs layers through the FP8 epilogue, and refuses
// nothing an FP8 arm takes. A plugin built with the first qc_arm_v1 (struct_size QC_ARM_V1_MIN_SIZE)
// still loads, as an INT8 arm; a bad model name or an FP8 plugin declaring an epilogue is refused.
const char* kFp8PluginSource = R"(#include "qconform/arm_abi.h"
#include <stdio.h>
static float pow2(int e) { float v = 1.0f; for (; e > 0; --e) v *= 2.0f; for (; e < 0; ++e) v *= 0.5f; return v; }
static float e4m3(uint8_t c) {
  const int e = (c >> 3) & 15, m = c & 7;
  const float v = e ? (float)(8 + m) * pow2(e - 10) : (float)m * pow2(-9);
  return (c & 0x80) ? -v : v;
}
static int run(void* ctx, const qc_arm_args_v1* args) {
  (void)ctx;
  if (args->d == NULL) { snprintf(args->error, args->error_size, "an FP8 plugin got an INT8 call"); return 3; }
  const uint8_t* a = (const uint8_t*)args->a_q;
  const uint8_t* w = (const uint8_t*)args->w_q;
  for (int64_t i = 0; i < args->m; ++i)
    for (int64_t j = 0; j < args->n; ++j) {
      float s = 0.0f;
      for (int64_t k = 0; k < args->k; ++k) s = s + e4m3(a[i * args->k + k]) * e4m3(w[j * args->k + k]);
      args->d[i * args->n + j] = s;
    }
  return 0;
}
static const qc_arm_v1 kArm = {QC_ARM_ABI_VERSION, sizeof(qc_arm_v1), "c-fp8-sequential", NULL, 0, run, NULL, MODEL};
QC_ARM_EXPORT const qc_arm_v1* qc_arm_v1_entry(void) { return &kArm; }
)";

std::string fp8_plugin(const std::string& id, const std::string& model_literal) {
  const fs::path src = scratch_dir() / "fp8_plugin.c";
  std::ofstream(src) << kFp8PluginSource;
  return test::compile_c_plugin(
      {.source = src.string(), .out = plugin_path("fp8_" + id), .flags = fmt::format("-DMODEL='{}'", model_literal)});
}

TEST(PluginArm, Fp8PluginDeclaresItsModelAndEqualsIt) {
  const std::string so = fp8_plugin("sequential", "\"sequential\"");
  REQUIRE_PLUGIN(so);
  std::mt19937_64 rng(514);
  std::normal_distribution<float> nd(0.0f, 2.0f);
  const int64_t m = 5, n = 9, k = 700;
  std::vector<uint8_t> a(static_cast<size_t>(m * k)), w(static_cast<size_t>(n * k));
  for (auto& c : a) c = f32_to_e4m3fn(nd(rng), true);
  for (auto& c : w) c = f32_to_e4m3fn(nd(rng), true);
  const Fp8Gemm g{a.data(), Fp8Format::e4m3, w.data(), Fp8Format::e4m3, {m, n, k}};
  std::vector<float> want(static_cast<size_t>(m * n)), chain(want.size());
  fp8_model_evaluate(fp8_accumulation_model("sequential").model, g, want.data());
  fp8_model_evaluate(fp8_accumulation_model("hopper-fp8-chain").model, g, chain.data());
  EXPECT_NE(std::memcmp(want.data(), chain.data(), want.size() * sizeof(float)), 0) << "the models must differ here";
  // An INT8 layer whose codes are e4m3 values (|q| <= 16): run() goes through the FP8 call.
  LayerOperands lay = int8_layer(3, 4, 64, false, 9, 0);
  OperandStorage st;
  std::mt19937 r(3);
  for (int64_t i = 0; i < 3 * 64; ++i) st.a_q.push_back(static_cast<int8_t>(static_cast<int>(r() % 33) - 16));
  for (int64_t i = 0; i < 4 * 64; ++i) st.w_q.push_back(static_cast<int8_t>(static_cast<int>(r() % 33) - 16));
  st.a_scale = std::vector<float>(lay.a_scale.begin(), lay.a_scale.end());
  st.w_scale = std::vector<float>(lay.w_scale.begin(), lay.w_scale.end());
  lay = make_operands("fp8.layer", 3, 4, 64, std::move(st), "test");
  const ArmOutput ref = make_arm("cpu:fp8-sequential")->run(lay);
  for (const char* prefix : {"plugin:", "plugin-inproc:"}) {
    SCOPED_TRACE(prefix);
    auto arm = make_arm(prefix + so);
    const ArmInfo info = arm->info();
    EXPECT_EQ(info.accumulation_model, "sequential");
    EXPECT_EQ(info.epilogue, fp8_epilogue().name);
    EXPECT_FALSE(info.exposes_accumulator);
    nlohmann::json rec;
    const std::vector<float> got = arm->fp8_accumulate(a.data(), w.data(), m, n, k, rec);
    ASSERT_EQ(got.size(), want.size());
    int64_t bad = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      uint32_t x, y;
      std::memcpy(&x, &got[i], 4);
      std::memcpy(&y, &want[i], 4);
      if (x != y && bad++ < 3) {
        ADD_FAILURE() << fmt::format("d[{},{}]: plugin {} ({:#010x}), model sequential {} ({:#010x})", i / n, i % n,
                                     got[i], x, want[i], y);
      }
    }
    EXPECT_EQ(bad, 0);
    EXPECT_EQ(rec.at("accumulation_model"), "sequential");
    EXPECT_EQ(rec.at("kernel"), "c-fp8-sequential");
    const ArmOutput out = arm->run(lay);
    EXPECT_EQ(count_y_mismatches(prefix, out.y, ref.y, 4), 0);
    EXPECT_EQ(out.record.extra.at("accumulation_model"), "sequential");
    EXPECT_FALSE(out.acc.has_value());
  }
}

TEST(PluginArm, Fp8DeclarationsAreCheckedAndOldDescriptorsStillLoad) {
  const std::string bad_model = fp8_plugin("badmodel", "\"hopper-fp9\"");
  REQUIRE_PLUGIN(bad_model);
  for (const char* prefix : {"plugin:", "plugin-inproc:"}) {
    SCOPED_TRACE(prefix);
    expect_input_error(prefix + bad_model, {"field `accumulation_model`", "hopper-fp9", fs::canonical(bad_model).string()});
  }
  // The first qc_arm_v1 (no accumulation_model field: struct_size stops before it) is an INT8 arm.
  const std::string old = compile_plugin_source(
      "old_descriptor", plugin_source("QC_ARM_ABI_VERSION, QC_ARM_V1_MIN_SIZE, \"old\", NULL, 0, bad_run, NULL", kFillRun));
  REQUIRE_PLUGIN(old);
  const std::string epi = compile_plugin_source(
      "fp8_with_epilogue",
      plugin_source("QC_ARM_ABI_VERSION, sizeof(qc_arm_v1), \"e\", \"vllm-triton\", 0, bad_run, NULL, \"exact\"", kFillRun));
  REQUIRE_PLUGIN(epi);
  for (const char* prefix : {"plugin:", "plugin-inproc:"}) {
    SCOPED_TRACE(prefix);
    auto arm = make_arm(prefix + old);
    EXPECT_EQ(arm->info().accumulation_model, "");
    EXPECT_EQ(arm->run(int8_layer(2, 3, 4, false, 1)).y.size(), 6u);
    nlohmann::json rec;
    const uint8_t one = 0x38;
    try {
      (void)arm->fp8_accumulate(&one, &one, 1, 1, 1, rec);
      ADD_FAILURE() << "an INT8 plugin took an FP8 call";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("not an FP8 arm"), std::string::npos) << e.what();
    }
    expect_input_error(prefix + epi, {"field `epilogue`", "expected NULL for an FP8 plugin"});
  }
}

// The flags of an FP8 plugin that declares nothing (QC_ARM_FLAG_FP8_KERNEL, QC_ARM_FLAG_FP8_GEMM):
// an FP8 arm without a model, its epilogue (when declared) a formula over d, no INT32 accumulator;
// a kernel without the GEMM flag refuses `fp8_accumulate` in the words of its ABI.
TEST(PluginArm, UndeclaredFp8FlagsAreCheckedAndMakeAnFp8Arm) {
  const std::string kernel = compile_plugin_source(
      "fp8_kernel_flag",
      plugin_source("QC_ARM_ABI_VERSION, sizeof(qc_arm_v1), \"k\", \"bf16(rn32(sa * rn32(d * sw)))\", "
                    "QC_ARM_FLAG_FP8_KERNEL, bad_run, NULL, NULL",
                    kFillRun));
  const std::string int_formula = compile_plugin_source(
      "fp8_kernel_int_formula",
      plugin_source("QC_ARM_ABI_VERSION, sizeof(qc_arm_v1), \"k\", \"vllm-cutlass\", QC_ARM_FLAG_FP8_KERNEL, bad_run, "
                    "NULL, NULL",
                    kFillRun));
  const std::string with_acc = compile_plugin_source(
      "fp8_gemm_acc", plugin_source("QC_ARM_ABI_VERSION, sizeof(qc_arm_v1), \"k\", NULL, "
                                    "QC_ARM_FLAG_FP8_GEMM | QC_ARM_FLAG_WRITES_ACC, bad_run, NULL, NULL",
                                    kFillRun));
  REQUIRE_PLUGIN(kernel);
  REQUIRE_PLUGIN(int_formula);
  REQUIRE_PLUGIN(with_acc);
  for (const char* prefix : {"plugin:", "plugin-inproc:"}) {
    SCOPED_TRACE(prefix);
    auto arm = make_arm(prefix + kernel);
    const ArmInfo info = arm->info();
    EXPECT_TRUE(info.fp8());
    EXPECT_EQ(info.element, ElementType::e4m3);
    EXPECT_EQ(info.accumulation_model, "");
    EXPECT_FALSE(info.offers_unscaled());
    EXPECT_EQ(info.epilogue, "bf16(rn32(sa * rn32(d * sw)))");
    EXPECT_EQ(arm->run(int8_layer(2, 3, 4, false, 1, /*fill=*/3)).y.size(), 6u);  // INT8 codes 3 re-encoded to e4m3
    nlohmann::json rec;
    const uint8_t one = 0x38;
    EXPECT_THROW((void)arm->fp8_accumulate(&one, &one, 1, 1, 1, rec), Error);
    expect_input_error(prefix + int_formula, {"field `epilogue`", "a formula over an integer accumulator"});
    expect_input_error(prefix + with_acc, {"field `flags`", "QC_ARM_FLAG_WRITES_ACC on an FP8 plugin"});
  }
}

// A block-scaled FP8 plugin (ABI revision 3: the block fields of both structs): a C kernel of
// block-triton+exact (per K block the exact sum in double, rounded once to float, then
// fmaf(c * sa, sb, d)) declares that model and the 128-wide block; through both modes its D equals
// qconform's block model bit for bit, its outputs are RNE(D), and a layer of another block is refused.
const char* kBlockPluginSource = R"(#include "qconform/arm_abi.h"
#include <math.h>
#include <stdio.h>
static double e4m3(uint8_t c) {
  const int e = (c >> 3) & 15, m = c & 7;
  const double v = e ? ldexp(8 + m, e - 10) : ldexp(m, -9);
  return (c & 0x80) ? -v : v;
}
static int run(void* ctx, const qc_arm_args_v1* args) {
  (void)ctx;
  if (args->d == NULL || args->block_k <= 0) { snprintf(args->error, args->error_size, "not a block call"); return 3; }
  const uint8_t* a = (const uint8_t*)args->a_q;
  const uint8_t* w = (const uint8_t*)args->w_q;
  for (int64_t i = 0; i < args->m; ++i)
    for (int64_t j = 0; j < args->n; ++j) {
      float d = 0.0f;
      for (int64_t k0 = 0, b = 0; k0 < args->k; k0 += args->block_k, ++b) {
        double s = 0.0;
        for (int64_t k = k0; k < k0 + args->block_k && k < args->k; ++k) s += e4m3(a[i * args->k + k]) * e4m3(w[j * args->k + k]);
        const float c = (float)s;
        const float sa = args->a_scale[i * args->a_scale_cols + (args->a_scale_cols > 1 ? b : 0)];
        const float sb = args->w_scale[(j / args->w_block_rows) * args->w_scale_cols + (args->w_scale_cols > 1 ? b : 0)];
        const float x = c * sa;
        d = fmaf(x, sb, d);
      }
      args->d[i * args->n + j] = d;
    }
  return 0;
}
static const qc_arm_v1 kArm = {QC_ARM_ABI_VERSION, sizeof(qc_arm_v1), "c-block-triton-exact", NULL, 0, run, NULL,
                               "block-triton+exact", 128, 0};
QC_ARM_EXPORT const qc_arm_v1* qc_arm_v1_entry(void) { return &kArm; }
)";

TEST(PluginArm, BlockScaledPluginTakesBlockScalesAndEqualsItsModel) {
  const fs::path src = scratch_dir() / "block_plugin.c";
  std::ofstream(src) << kBlockPluginSource;
  const std::string so = test::compile_c_plugin(
      {.source = src.string(), .out = plugin_path("block_triton_exact"), .flags = "-ffp-contract=off"});
  REQUIRE_PLUGIN(so);
  SynthOptions o;
  o.shapes = "6x40x300";  // a partial K block (300 = 2*128 + 44)
  o.element = "e4m3";
  o.act_scale = "per-token-group:128";
  o.weight_scale = "per-block:16x128";
  const LayerOperands lay = synth_operands(o).at(0);
  const ArmOutput ref = make_arm("cpu:fp8-block-triton+exact")->run(lay);
  SynthOptions other = o;
  other.act_scale = "per-token-group:64";
  other.weight_scale = "per-block:16x64";
  const LayerOperands lay64 = synth_operands(other).at(0);
  for (const char* prefix : {"plugin:", "plugin-inproc:"}) {
    SCOPED_TRACE(prefix);
    auto arm = make_arm(prefix + so);
    const ArmInfo info = arm->info();
    EXPECT_EQ(info.accumulation_model, "block-triton+exact");
    EXPECT_EQ(info.block_k, 128);
    EXPECT_EQ(info.epilogue, "");
    const ArmOutput out = arm->run(lay);
    ASSERT_TRUE(out.d.has_value());
    ASSERT_EQ(out.d->size(), ref.d->size());
    int64_t bad = 0;
    for (size_t i = 0; i < out.d->size(); ++i) {
      if (f32_bits((*out.d)[i]) != f32_bits((*ref.d)[i]) && bad++ < 3) {
        ADD_FAILURE() << fmt::format("d[{}]: plugin {} ({:#010x}), model {} ({:#010x})", i, (*out.d)[i],
                                     f32_bits((*out.d)[i]), (*ref.d)[i], f32_bits((*ref.d)[i]));
      }
    }
    EXPECT_EQ(bad, 0);
    EXPECT_EQ(out.y, ref.y);
    EXPECT_EQ(out.record.extra.at("scales"), "per-token-group:128 x per-block:16x128");
    try {
      (void)arm->run(lay64);
      ADD_FAILURE() << "a 64-wide K block was taken";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("takes K blocks of 128 products"), std::string::npos) << e.what();
    }
  }
}

// A plugin that writes nothing leaves NaN (the unwritten marker), never a plausible value.
TEST(PluginArm, UnwrittenOutputsAreNaN) {
  const std::string so = compile_plugin_source(
      "writes_nothing",
      plugin_source("QC_ARM_ABI_VERSION, sizeof(qc_arm_v1), \"lazy\", NULL, 0, bad_run, NULL", "(void)args; return 0;"));
  REQUIRE_PLUGIN(so);
  const ArmOutput out = make_arm("plugin:" + so)->run(int8_layer(2, 3, 4, false, 1));
  EXPECT_FALSE(out.acc.has_value());
  for (uint16_t y : out.y) EXPECT_TRUE((y & 0x7FFF) > 0x7F80) << std::hex << y;
}

// ---- isolation ----------------------------------------------------------------------------------

// Isolated and in-process runs of the same library give the same bytes: the worker receives the
// operands' exact bytes and its outputs are copied back unchanged.
TEST(PluginArm, IsolatedAndInProcessAreBitIdentical) {
  const std::string so = example_plugin();
  REQUIRE_PLUGIN(so);
  auto isolated = make_arm("plugin:" + so);
  auto inproc = make_arm("plugin-inproc:" + so);
  EXPECT_NE(isolated->info().description.find("isolated"), std::string::npos) << isolated->info().description;
  EXPECT_NE(inproc->info().description.find("unprotected"), std::string::npos) << inproc->info().description;
  struct Case {
    int64_t m, n, k;
    bool bias;
    int fill;
  };
  // Shapes that grow, shrink and grow again, so the worker re-maps and re-places its guard pages.
  const Case cases[] = {{1, 1, 1, false, 0},   {64, 96, 1024, true, 0}, {3, 5, 7, true, 0},
                        {2, 3, 32768, false, -128}, {128, 64, 512, false, 0}, {7, 13, 31, true, 127}};
  for (const Case& c : cases) {
    const LayerOperands ops = int8_layer(c.m, c.n, c.k, c.bias, static_cast<uint32_t>(7 * c.m + c.n + c.k), c.fill);
    const std::string id = fmt::format("m={} n={} k={} bias={} fill={}", c.m, c.n, c.k, c.bias, c.fill);
    const ArmOutput a = isolated->run(ops);
    const ArmOutput b = inproc->run(ops);
    EXPECT_EQ(count_y_mismatches(id + " isolated vs in-process", a.y, b.y, c.n), 0);
    ASSERT_TRUE(a.acc.has_value() && b.acc.has_value()) << id;
    int64_t acc_bad = 0;
    for (size_t i = 0; i < b.acc->size(); ++i) {
      if ((*a.acc)[i] != (*b.acc)[i] && acc_bad++ < 5) {
        ADD_FAILURE() << id << ": acc[" << i / c.n << "," << i % c.n << "] isolated=" << (*a.acc)[i]
                      << " in-process=" << (*b.acc)[i];
      }
    }
    EXPECT_EQ(acc_bad, 0) << id;
    EXPECT_EQ(a.record.kernel, b.record.kernel);
    EXPECT_EQ(a.record.extra.at("plugin_sha256"), b.record.extra.at("plugin_sha256"));
    EXPECT_EQ(a.record.extra.at("isolation"), "process");
    EXPECT_EQ(b.record.extra.at("isolation"), "none");
  }
}

// Sets the per-call limit for arms created in this scope, and restores the previous one.
class ScopedTimeout {
 public:
  explicit ScopedTimeout(double seconds) : before_(plugin_call_timeout()) { set_plugin_call_timeout(seconds); }
  ~ScopedTimeout() { set_plugin_call_timeout(before_); }

 private:
  double before_;
};

// Runs `what`, expects an arm failure whose message has every needle and no raw control byte.
void expect_arm_failure(const std::string& id, const std::function<void()>& what, const std::vector<std::string>& needles) {
  try {
    what();
    ADD_FAILURE() << id << ": no error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_EQ(e.kind(), ErrorKind::arm_failure) << id << ": " << msg;
    for (const std::string& needle : needles) {
      EXPECT_NE(msg.find(needle), std::string::npos) << id << ": message lacks `" << needle << "`: " << msg;
    }
    for (char c : msg) EXPECT_FALSE(static_cast<unsigned char>(c) < 0x20) << id << ": raw control byte in " << msg;
  }
}

// Every way a plugin can end or damage the process that runs it becomes that arm's failure,
// naming the arm and the layer; this process is unaffected, and a healthy arm runs after each.
TEST(PluginArm, IsolatedFaultsAreTheArmsFailureNamingArmAndLayer) {
  const std::string good = example_plugin();
  REQUIRE_PLUGIN(good);
  struct Case {
    std::string behave;
    std::vector<std::string> needles;
  };
  const std::vector<Case> cases = {
      {"SEGV", {"killed by SIGSEGV", "invalid memory access"}},
      {"ABORT", {"killed by SIGABRT", "abort()"}},
      {"FPE", {"killed by SIGFPE"}},
      {"STACK", {"SIGSEGV"}},
      {"EXIT0", {"exited with status 0", "must return from `run`"}},
      {"WRITE_INPUT", {"C3 (shared operands) violated", "read-only input `w_q` at element [1,2]"}},
      {"MPROTECT", {"C3 (shared operands) violated", "read-only input `a_scale` at element [0]"}},
      {"OVERRUN", {"wrote past the end of its output `y`"}},
  };
  // 8 x 16 outputs: 256 bytes of `y`, so an overrun of m*n elements runs far into the guard page.
  const LayerOperands ops = int8_layer(8, 16, 32, true, 11);
  const ArmOutput want = make_arm("plugin-inproc:" + good)->run(ops);
  for (const Case& c : cases) {
    const std::string so = misbehave_plugin(c.behave);
    REQUIRE_PLUGIN(so);
    std::vector<std::string> needles = c.needles;
    needles.push_back("arm `plugin:" + so + "`");
    needles.push_back("on layer `test.layer` (m=8 n=16 k=32)");
    auto arm = make_arm("plugin:" + so);
    expect_arm_failure(c.behave, [&] { (void)arm->run(ops); }, needles);
    // The arm starts a new worker for its next call (which fails the same way, the count of
    // calls being per process), and an arm of a healthy library is unaffected.
    expect_arm_failure(c.behave + " again", [&] { (void)arm->run(ops); }, needles);
    EXPECT_EQ(count_y_mismatches(c.behave + ": healthy arm afterwards", make_arm("plugin:" + good)->run(ops).y, want.y,
                                 ops.n), 0);
  }
}

// A plugin that fails only on its second call: the failure names that call's layer, and the
// next call runs in a fresh worker and is correct again.
TEST(PluginArm, IsolatedArmRecoversAfterAFailedCall) {
  const std::string so = misbehave_plugin("SEGV", /*at_call=*/2);
  const std::string good = example_plugin();
  REQUIRE_PLUGIN(so);
  REQUIRE_PLUGIN(good);
  auto arm = make_arm("plugin:" + so);
  auto ref = make_arm("plugin-inproc:" + good);
  LayerOperands first = int8_layer(4, 6, 8, false, 1), second = int8_layer(5, 7, 9, false, 2), third = int8_layer(6, 8, 10, true, 3);
  first.name = "blk.0.q";
  second.name = "blk.0.k";
  third.name = "blk.0.v";
  EXPECT_EQ(count_y_mismatches("first call", arm->run(first).y, ref->run(first).y, first.n), 0);
  expect_arm_failure("second call", [&] { (void)arm->run(second); }, {"on layer `blk.0.k`", "SIGSEGV"});
  EXPECT_EQ(count_y_mismatches("third call", arm->run(third).y, ref->run(third).y, third.n), 0);
}

// A plugin that forks a long-lived child (which keeps the worker's socket open) and exits: the
// worker's end is noticed at once, not at the time limit, and the child is killed with it.
TEST(PluginArm, IsolatedWorkerEndIsNoticedAndItsChildrenKilled) {
  const std::string so = misbehave_plugin("FORK_EXIT");
  REQUIRE_PLUGIN(so);
  const std::string pidfile = (scratch_dir() / "fork_exit.pid").string();
  setenv("QC_MISBEHAVE_PIDFILE", pidfile.c_str(), 1);
  ScopedTimeout limit(60);
  auto arm = make_arm("plugin:" + so);
  const auto start = std::chrono::steady_clock::now();
  expect_arm_failure("FORK_EXIT", [&] { (void)arm->run(int8_layer(2, 3, 4, false, 1)); }, {"exited with status 0"});
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  unsetenv("QC_MISBEHAVE_PIDFILE");
  EXPECT_LT(took, 20.0) << "the worker's end was not noticed before the time limit";
  long child = 0;
  std::ifstream(pidfile) >> child;
  ASSERT_GT(child, 0) << "the plugin did not record its child's pid in " << pidfile;
  // Killed with the worker's process group: gone, or a zombie until init reaps it.
  std::string state = "gone";
  for (int i = 0; i < 200; ++i) {
    std::ifstream stat(fmt::format("/proc/{}/stat", child));
    std::string line;
    if (!std::getline(stat, line)) break;
    state = line.substr(line.rfind(')') + 2, 1);
    if (state == "Z") break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE(state == "gone" || state == "Z") << "the plugin's child " << child << " is still running (state " << state << ")";
}

TEST(PluginArm, IsolatedCallsHaveATimeLimit) {
  for (const std::string behave : {"SLEEP", "SPIN"}) {
    const std::string so = misbehave_plugin(behave);
    REQUIRE_PLUGIN(so);
    // 2 s: the limit covers starting the worker too, which a loaded machine or a sanitizer slows.
    ScopedTimeout limit(2);
    auto arm = make_arm("plugin:" + so);
    const auto start = std::chrono::steady_clock::now();
    expect_arm_failure(behave, [&] { (void)arm->run(int8_layer(2, 3, 4, false, 1)); },
                       {"within the per-call time limit of 2 s", "--arm-timeout", "on layer `test.layer`"});
    const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_LT(took, 30.0) << behave << ": the limit was not enforced promptly";
  }
}

TEST(PluginArm, IsolatedLoadFailuresAreTheArmsFailure) {
  const std::string crash = misbehave_plugin("CTOR_CRASH");
  const std::string hang = misbehave_plugin("CTOR_HANG");
  REQUIRE_PLUGIN(crash);
  REQUIRE_PLUGIN(hang);
  expect_arm_failure("CTOR_CRASH", [&] { (void)make_arm("plugin:" + crash); },
                     {"arm `plugin:" + crash + "` failed while loading", "SIGSEGV"});
  ScopedTimeout limit(2);
  expect_arm_failure("CTOR_HANG", [&] { (void)make_arm("plugin:" + hang); },
                     {"failed while loading", "did not finish loading within the time limit of 2 s"});
}

// Text from the plugin reaches the terminal only escaped: a kernel name with control characters
// is refused (shown escaped), and an unterminated error message of control bytes is cut and escaped.
TEST(PluginArm, ControlCharactersFromThePluginAreEscaped) {
  const std::string name = misbehave_plugin("CONTROL_NAME");
  const std::string refuse = misbehave_plugin("REFUSE");
  const std::string huge = misbehave_plugin("HUGE_NAME");
  REQUIRE_PLUGIN(name);
  REQUIRE_PLUGIN(refuse);
  REQUIRE_PLUGIN(huge);
  for (const char* prefix : {"plugin:", "plugin-inproc:"}) {
    SCOPED_TRACE(prefix);
    expect_input_error(prefix + huge, {"field `name`", "expected at most 1024 bytes", "found at least 65536"});
    expect_input_error(prefix + name, {"field `name`", "expected printable characters", "misbehave\\x1b[2J\\x1b[31m red \\x07\\x0d"});
    try {
      (void)make_arm(prefix + refuse)->run(int8_layer(2, 3, 4, false, 1));
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_EQ(e.kind(), ErrorKind::input) << msg;
      EXPECT_NE(msg.find("code 5"), std::string::npos) << msg;
      EXPECT_NE(msg.find("\\x01\\x02\\x03"), std::string::npos) << msg;
      for (char c : msg) EXPECT_FALSE(static_cast<unsigned char>(c) < 0x20) << "raw control byte in " << msg;
    }
  }
}

TEST(Printable, EscapesControlsAndKeepsText) {
  EXPECT_EQ(printable("plain/path_1.so"), "plain/path_1.so");
  EXPECT_EQ(printable("a\x1b[31mb"), "a\\x1b[31mb");
  EXPECT_EQ(printable("tab\there\nnl\x7f"), "tab\\x09here\\x0anl\\x7f");
  EXPECT_EQ(printable("back\\slash"), "back\\\\slash");
  EXPECT_EQ(printable("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"), "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80");
  EXPECT_EQ(printable("c1 \xc2\x9b csi"), "c1 \\xc2\\x9b csi");                  // U+009B (CSI) is a control
  EXPECT_EQ(printable("raw \x9b csi"), "raw \\x9b csi");                         // a stray continuation byte
  EXPECT_EQ(printable("overlong \xc0\xaf \xe0\x80\xaf"), "overlong \\xc0\\xaf \\xe0\\x80\\xaf");
  EXPECT_EQ(printable("surrogate \xed\xa0\x80"), "surrogate \\xed\\xa0\\x80");
  EXPECT_EQ(printable("cut \xe2\x82"), "cut \\xe2\\x82");
  EXPECT_EQ(printable(std::string_view("nul\0x", 5)), "nul\\x00x");
}

// The CLI: an arm that crashes is exit 1 with the arm and layer on stderr, and nothing on stdout
// that reads as a verdict; `--arm-timeout` reaches the arm.
TEST(PluginArm, CliReportsArmFailureWithExitOneAndNoVerdict) {
  const fs::path qc = fs::path(QC_BINARY_DIR) / "qconform";
  if (!fs::exists(qc)) GTEST_SKIP() << "SKIPPED: " << qc << " is not built (cmake --build build --target qconform)";
  const std::string exit0 = misbehave_plugin("EXIT0", /*at_call=*/3);
  const std::string sleeper = misbehave_plugin("SLEEP");
  REQUIRE_PLUGIN(exit0);
  REQUIRE_PLUGIN(sleeper);
  const fs::path dir = scratch_dir() / "cli";
  fs::create_directories(dir);
  const std::string ops = (dir / "ops.safetensors").string();
  ASSERT_EQ(std::system(fmt::format("'{}' synth --out '{}' --shapes tiny --m 4 >/dev/null 2>&1",
                                    qc.string(), ops).c_str()), 0)
      << "qconform synth failed";
  const auto run = [&](const std::string& args, std::string& out, std::string& err) {
    const std::string o = (dir / "stdout").string(), e = (dir / "stderr").string();
    const int st = std::system(fmt::format("'{}' {} >'{}' 2>'{}'", qc.string(), args, o, e).c_str());
    std::ifstream fo(o), fe(e);
    out.assign(std::istreambuf_iterator<char>(fo), {});
    err.assign(std::istreambuf_iterator<char>(fe), {});
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  };
  std::string out, err;
  EXPECT_EQ(run(fmt::format("verify '{}' --arms cpu:vllm-triton,plugin:{}", ops, exit0), out, err), 1) << out << err;
  EXPECT_NE(err.find("qconform: arm failed: arm `plugin:" + exit0 + "`"), std::string::npos) << err;
  EXPECT_NE(err.find("exited with status 0"), std::string::npos) << err;
  EXPECT_NE(err.find("on layer `"), std::string::npos) << err;
  EXPECT_EQ(out.find("pass"), std::string::npos) << "a verdict was printed: " << out;
  EXPECT_EQ(run(fmt::format("boundary --arm plugin:{} --arm-timeout 2.5", sleeper), out, err), 1) << out << err;
  EXPECT_NE(err.find("time limit of 2.5 s"), std::string::npos) << err;
  EXPECT_EQ(out.find("C1 pass"), std::string::npos) << out;
}

}  // namespace
}  // namespace qc
