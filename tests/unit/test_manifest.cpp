// The identity contract (C0): manifests and the join. A clean pair of runs passes; every kind of
// tampering the issue names (one byte of an operand file, one field of a manifest, dropped
// kernel evidence, swapped arm labels, a malformed digest) is refused, naming the field.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <unistd.h>

#include "input_error.hpp"
#include "qconform/arm.hpp"
#include "qconform/error.hpp"
#include "core/fileio.hpp"
#include "qconform/manifest.hpp"
#include "synth/synth.hpp"

namespace qc {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

class ManifestTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           fmt::format("qc_manifest_{}_{}", ::getpid(), ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    // Input files with fixed content.
    for (const auto& [role, content] : std::vector<std::pair<std::string, std::string>>{
             {"operands", std::string(4096, '\x11') + "operands"},
             {"model", "model weights"},
             {"tokenizer", "tokenizer"},
             {"quantization_config", R"({"format":"int-quantized"})"},
             {"prompts", "prompt one\nprompt two\n"}}) {
      const std::string path = (dir_ / (role + ".bin")).string();
      write_file_atomic(path, content);
      inputs_.emplace_back(role, path);
    }
    // Kernel evidence from arms that actually ran on the same operands.
    SynthOptions so;
    so.shapes = "8x16x64";
    so.seed = 3;
    const std::vector<LayerOperands> layers = synth_operands(so);
    record_a_ = make_arm("cpu:vllm-cutlass")->run(layers[0]).record;
    record_b_ = make_arm("cpu:vllm-triton")->run(layers[0]).record;
    config_ = {{"scale_mode", "real"}, {"decoding", {{"temperature", 0}, {"greedy", true}}}, {"seed", 7}};
  }
  void TearDown() override { fs::remove_all(dir_); }

  Manifest manifest_a() const { return make_manifest("verify", record_a_.arm, record_a_, inputs_, config_); }
  Manifest manifest_b() const { return make_manifest("verify", record_b_.arm, record_b_, inputs_, config_); }

  // The violations, as "field: status" strings, for readable failures.
  static std::vector<std::string> violations(const JoinResult& r) {
    std::vector<std::string> v;
    for (const FieldResult* f : r.violations()) v.push_back(f->field + ": " + f->status);
    return v;
  }
  static ::testing::AssertionResult refused_naming(const JoinResult& r, const std::string& field,
                                                   const std::string& status) {
    const auto v = violations(r);
    if (r.verified()) return ::testing::AssertionFailure() << "the join verified; expected " << field << ": " << status;
    if (r.c0.verdict != Verdict::fail) return ::testing::AssertionFailure() << "C0 verdict is not fail";
    if (r.c0.summary.find(field) == std::string::npos) {
      return ::testing::AssertionFailure() << "C0 summary does not name " << field << ": " << r.c0.summary;
    }
    for (const std::string& s : v) {
      if (s == field + ": " + status) return ::testing::AssertionSuccess();
    }
    std::string all;
    for (const std::string& s : v) all += "\n  " + s;
    return ::testing::AssertionFailure() << "no violation " << field << ": " << status << "; violations:" << all;
  }

  fs::path dir_;
  std::vector<std::pair<std::string, std::string>> inputs_;
  RunRecord record_a_, record_b_;
  json config_;
};

TEST_F(ManifestTest, DigestFormat) {
  EXPECT_TRUE(is_valid_digest("sha256:" + std::string(64, 'a')));
  EXPECT_TRUE(is_valid_digest("sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"));
  EXPECT_FALSE(is_valid_digest("sha256:" + std::string(63, 'a')));
  EXPECT_FALSE(is_valid_digest("sha256:" + std::string(65, 'a')));
  EXPECT_FALSE(is_valid_digest("sha256:" + std::string(64, 'A')));  // uppercase
  EXPECT_FALSE(is_valid_digest("sha256:" + std::string(63, 'a') + "g"));
  EXPECT_FALSE(is_valid_digest(std::string(64, 'a')));  // no prefix
  EXPECT_FALSE(is_valid_digest("SHA256:" + std::string(64, 'a')));
  EXPECT_FALSE(is_valid_digest("sha1:" + std::string(64, 'a')));
}

TEST_F(ManifestTest, MakeRecordsEverything) {
  const Manifest m = manifest_a();
  EXPECT_EQ(m.kind, "verify");
  EXPECT_EQ(m.inputs.size(), 5u);
  for (const auto& [role, path] : inputs_) {
    ASSERT_TRUE(m.inputs.count(role)) << role;
    EXPECT_TRUE(fs::path(m.inputs.at(role).path).is_absolute()) << m.inputs.at(role).path;
    EXPECT_TRUE(is_valid_digest(m.inputs.at(role).sha256)) << m.inputs.at(role).sha256;
  }
  // The digest of the known content "model weights", computed by `sha256sum` independently:
  // printf 'model weights' | sha256sum
  EXPECT_EQ(m.inputs.at("model").sha256, "sha256:a2d42c4aa884e21216cbb8da4c7ba2fcf9b6033b2331666e666145c24caf7a38");
  ASSERT_TRUE(m.treatment.has_value());
  EXPECT_EQ(m.treatment->arm, "cpu:vllm-cutlass");
  EXPECT_FALSE(m.treatment->kernel.empty());
  EXPECT_TRUE(m.platform.contains("cpu")) << m.platform.dump();
  EXPECT_EQ(m.created.size(), 20u) << m.created;  // 2025-01-31T12:34:56Z
  EXPECT_EQ(m.created.back(), 'Z');
  EXPECT_THROW(make_manifest("frobnicate", "x", record_a_, {}), Error);
  EXPECT_THROW(make_manifest("verify", "x", record_a_, {{"Bad Role", inputs_[0].second}}), Error);
  EXPECT_THROW(make_manifest("verify", "x", record_a_, {{"model", dir_.string()}}), Error);  // a directory
}

TEST_F(ManifestTest, SelectionEnvironmentRecordsKernelSelectors) {
  ::setenv("VLLM_DISABLED_KERNELS", "CutlassScaledMMLinearKernel", 1);
  ::setenv("QC_TEST_SELECTOR", "on", 1);
  ::setenv("UNRELATED_VARIABLE_FOR_TEST", "x", 1);
  const auto env = selection_environment();
  ::unsetenv("VLLM_DISABLED_KERNELS");
  ::unsetenv("QC_TEST_SELECTOR");
  ::unsetenv("UNRELATED_VARIABLE_FOR_TEST");
  ASSERT_TRUE(env.count("VLLM_DISABLED_KERNELS"));
  EXPECT_EQ(env.at("VLLM_DISABLED_KERNELS"), "CutlassScaledMMLinearKernel");
  EXPECT_TRUE(env.count("QC_TEST_SELECTOR"));
  EXPECT_FALSE(env.count("UNRELATED_VARIABLE_FOR_TEST"));
  for (const char* name : {"CUDA_VISIBLE_DEVICES", "CUBLASLT_LOG_LEVEL", "OMP_NUM_THREADS", "DNNL_MAX_CPU_ISA",
                           "NVIDIA_TF32_OVERRIDE", "TRITON_CACHE_DIR"}) {
    EXPECT_TRUE(is_selection_variable(name)) << name;
  }
  for (const char* name : {"PATH", "HOME", "QCONFORM_CHARTJS", "XQC_"}) EXPECT_FALSE(is_selection_variable(name)) << name;
}

TEST_F(ManifestTest, WriteReadRoundTrip) {
  Manifest m = manifest_a();
  m.selection_env["VLLM_DISABLED_KERNELS"] = "TritonScaledMMLinearKernel";
  const std::string path = (dir_ / "m.json").string();
  write_manifest(path, m);
  const Manifest back = read_manifest(path);
  EXPECT_EQ(to_json(back), to_json(m));
  // A manifest without kernel evidence still parses (old artifacts), and says so.
  m.treatment.reset();
  write_manifest(path, m);
  EXPECT_FALSE(read_manifest(path).treatment.has_value());
}

TEST_F(ManifestTest, ReadIsStrictAndNamesTheField) {
  const std::string path = (dir_ / "m.json").string();
  const auto expect_error = [&](json j, const std::string& field) {
    SCOPED_TRACE("a manifest with a bad `" + field + "`");
    write_file_atomic(path, j.dump());
    const std::string msg = test::input_error([&] { read_manifest(path); });
    EXPECT_NE(msg.find("`" + field + "`"), std::string::npos) << msg;
    EXPECT_NE(msg.find(path), std::string::npos) << msg;
  };
  const json good = to_json(manifest_a());
  json j = good;
  j["inputs"]["model"]["sha256"] = "sha256:" + std::string(64, 'A');
  expect_error(j, "inputs.model.sha256");
  j = good;
  j["inputs"]["prompts"]["sha256"] = "d41d8cd98f00b204e9800998ecf8427e";  // an MD5, no prefix
  expect_error(j, "inputs.prompts.sha256");
  j = good;
  j.erase("project_version");
  expect_error(j, "project_version");
  j = good;
  j["kind"] = "train";
  expect_error(j, "kind");
  j = good;
  j["schema_version"] = 2;
  expect_error(j, "schema_version");
  j = good;
  j["treatment"]["arm"] = "cpu:something-else";
  expect_error(j, "treatment.arm");
  write_file_atomic(path, "{ not json");
  EXPECT_THROW(read_manifest(path), Error);
}

TEST_F(ManifestTest, CleanPairPasses) {
  const JoinResult r = join_manifests(manifest_a(), manifest_b(), "arm", /*rehash=*/true);
  EXPECT_TRUE(r.verified()) << fmt::format("{}", fmt::join(describe_violations(r), "\n"));
  EXPECT_EQ(r.c0.verdict, Verdict::pass);
  EXPECT_EQ(r.c0.id, "C0");
  EXPECT_EQ(r.c0.points_to, "provenance, not arithmetic");
  // The declared differences are reported: the label and the kernel.
  std::set<std::string> differing;
  size_t rehashed = 0;
  for (const FieldResult& f : r.fields) {
    if (f.status == "differs (treatment)") differing.insert(f.field);
    rehashed += f.status == "rehashed";
  }
  EXPECT_TRUE(differing.count("arm"));
  EXPECT_TRUE(differing.count("treatment.kernel"));
  EXPECT_EQ(rehashed, 10u);  // five files on each side
  EXPECT_EQ(to_json(r)["verified"], true);
}

TEST_F(ManifestTest, OperandByteChangedOnDiskIsRefused) {
  const Manifest a = manifest_a(), b = manifest_b();
  // One byte of the operand file changes after both runs recorded its digest.
  const std::string path = a.inputs.at("operands").path;
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(100);
    f.put('\x12');
  }
  const JoinResult r = join_manifests(a, b, "arm", /*rehash=*/true);
  EXPECT_TRUE(refused_naming(r, "inputs.operands.sha256", "changed on disk"));
  bool names_path = false;
  for (const FieldResult* f : r.violations()) names_path |= f->note.find(path) != std::string::npos;
  EXPECT_TRUE(names_path);
  // Without re-hashing the recorded digests still agree: that is exactly why re-hashing is on.
  EXPECT_TRUE(join_manifests(a, b, "arm", /*rehash=*/false).verified());
  // A second run made after the change recorded a different digest: a plain mismatch.
  const JoinResult r2 = join_manifests(a, manifest_b(), "arm", /*rehash=*/false);
  EXPECT_TRUE(refused_naming(r2, "inputs.operands.sha256", "mismatch"));
}

TEST_F(ManifestTest, OneManifestFieldChangedIsRefused) {
  const json a = to_json(manifest_a()), b0 = to_json(manifest_b());
  struct Case {
    std::string field;  // dotted path
    json value;
  };
  const std::string other = "sha256:" + std::string(64, '0');
  for (const Case& c : std::vector<Case>{{"inputs.model.sha256", other},
                                         {"inputs.prompts.sha256", other},
                                         {"inputs.tokenizer.sha256", other},
                                         {"inputs.quantization_config.sha256", other},
                                         {"project_version", "v0.0.0-tampered"},
                                         {"config.decoding.temperature", 0.7},
                                         {"config.seed", 8},
                                         {"platform.cpu", "another CPU"},
                                         {"kind", "replay"}}) {
    json b = b0;
    json::json_pointer ptr("/" + [&] {
      std::string s = c.field;
      std::replace(s.begin(), s.end(), '.', '/');
      return s;
    }());
    b[ptr] = c.value;
    const JoinResult r = join_manifest_json(a, b, "arm", /*rehash=*/false);
    EXPECT_TRUE(refused_naming(r, c.field, "mismatch")) << c.field;
    // Both values are named.
    const auto lines = describe_violations(r);
    bool both = false;
    for (const std::string& l : lines) both |= l.find(c.value.dump()) != std::string::npos && l.find(c.field) == 0;
    EXPECT_TRUE(both) << c.field << ": " << fmt::format("{}", fmt::join(lines, "\n"));
  }
  // A field present on one side only.
  json b = b0;
  b["config"]["extra_knob"] = 1;
  EXPECT_TRUE(refused_naming(join_manifest_json(a, b, "arm", false), "config.extra_knob", "missing"));
  b = b0;
  b.erase("config");
  EXPECT_TRUE(refused_naming(join_manifest_json(a, b, "arm", false), "config", "missing"));
  b = b0;
  b["inputs"].erase("tokenizer");
  EXPECT_TRUE(refused_naming(join_manifest_json(a, b, "arm", false), "inputs.tokenizer.sha256", "missing"));
}

TEST_F(ManifestTest, MissingKernelEvidenceIsRefused) {
  const json a = to_json(manifest_a()), b0 = to_json(manifest_b());
  json b = b0;
  b["treatment"] = nullptr;
  EXPECT_TRUE(refused_naming(join_manifest_json(a, b, "arm", false), "treatment.kernel", "no kernel evidence"));
  b = b0;
  b.erase("treatment");
  EXPECT_TRUE(refused_naming(join_manifest_json(a, b, "arm", false), "treatment.kernel", "no kernel evidence"));
  b = b0;
  b["treatment"]["kernel"] = "";
  EXPECT_TRUE(refused_naming(join_manifest_json(a, b, "arm", false), "treatment.kernel", "no kernel evidence"));
  // Through the struct as well.
  Manifest mb = manifest_b();
  mb.treatment.reset();
  EXPECT_TRUE(refused_naming(join_manifests(manifest_a(), mb, "arm", false), "treatment.kernel", "no kernel evidence"));
  // And it is refused under a non-arm treatment too.
  Manifest ma2 = manifest_a(), mb2 = manifest_a();
  mb2.config["scale_mode"] = "pow2-channel";
  mb2.treatment->kernel.clear();
  EXPECT_TRUE(refused_naming(join_manifests(ma2, mb2, "config.scale_mode", false), "treatment.kernel",
                             "no kernel evidence"));
}

TEST_F(ManifestTest, IdenticalTreatmentIsRefused) {
  const json a = to_json(manifest_a());
  // The same arm on both sides: nothing to compare.
  EXPECT_TRUE(refused_naming(join_manifest_json(a, a, "arm", false), "arm", "treatment identical"));
  // Label swapped so both sides claim the same arm, while B's kernel evidence says otherwise.
  json b = to_json(manifest_b());
  b["arm"] = a["arm"];
  const JoinResult r = join_manifest_json(a, b, "arm", false);
  EXPECT_TRUE(refused_naming(r, "treatment.arm", "inconsistent"));
  // Labels differ but the kernel that ran is the same: the treatment never reached the kernel.
  b = a;
  b["arm"] = "cpu:vllm-triton";
  b["treatment"]["arm"] = "cpu:vllm-triton";
  EXPECT_TRUE(refused_naming(join_manifest_json(a, b, "arm", false), "treatment.kernel", "treatment identical"));
  // A non-arm treatment that is equal on both sides.
  EXPECT_TRUE(refused_naming(join_manifests(manifest_a(), manifest_a(), "config.scale_mode", false), "config.scale_mode",
                             "treatment identical"));
}

TEST_F(ManifestTest, MalformedDigestIsRefused) {
  const json a = to_json(manifest_a()), b0 = to_json(manifest_b());
  for (const std::string& bad : std::vector<std::string>{"sha256:" + std::string(64, 'F'), "sha256:abc", std::string(64, '0'),
                                "sha256:" + std::string(63, '0') + " "}) {
    json b = b0;
    b["inputs"]["operands"]["sha256"] = bad;
    const JoinResult r = join_manifest_json(a, b, "arm", false);
    EXPECT_TRUE(refused_naming(r, "inputs.operands.sha256", "malformed")) << bad;
    // Reported once, as malformed, not again as a mismatch.
    size_t n = 0;
    for (const FieldResult* f : r.violations()) n += f->field == "inputs.operands.sha256";
    EXPECT_EQ(n, 1u) << bad;
  }
  json b = b0;
  b["inputs"]["model"]["sha256"] = 42;
  EXPECT_TRUE(refused_naming(join_manifest_json(a, b, "arm", false), "inputs.model.sha256", "malformed"));
}

TEST_F(ManifestTest, OtherTreatmentsAndUnverifiedContagion) {
  // The same arm under two scale modes: the declared treatment is the config field.
  Manifest a = manifest_a(), b = manifest_a();
  b.config["scale_mode"] = "pow2-channel";
  const JoinResult ok = join_manifests(a, b, "config.scale_mode", true);
  EXPECT_TRUE(ok.verified()) << fmt::format("{}", fmt::join(describe_violations(ok), "\n"));
  // Under that treatment the arm must not change.
  Manifest c = manifest_b();
  c.config["scale_mode"] = "pow2-channel";
  EXPECT_TRUE(refused_naming(join_manifests(a, c, "config.scale_mode", false), "treatment.kernel", "mismatch"));
  // Unknown treatment roots are a usage error.
  EXPECT_THROW(join_manifests(a, b, "created", false), Error);
  EXPECT_THROW(join_manifests(a, b, "treatment", false), Error);

  // An input produced under --allow-unverified taints the join that consumes it.
  Manifest bad_b = manifest_b();
  bad_b.inputs["model"].sha256 = "sha256:" + std::string(64, '1');
  const JoinResult failed = join_manifests(manifest_a(), bad_b, "arm", false);
  ASSERT_FALSE(failed.verified());
  Manifest downstream_a = manifest_a(), downstream_b = manifest_b();
  record_unverified(downstream_a, failed);
  record_unverified(downstream_b, failed);
  EXPECT_TRUE(downstream_a.allow_unverified);
  ASSERT_FALSE(downstream_a.unverified_joins.empty());
  EXPECT_NE(downstream_a.unverified_joins[0].find("inputs.model.sha256"), std::string::npos);
  EXPECT_TRUE(refused_naming(join_manifests(downstream_a, downstream_b, "arm", false), "allow_unverified",
                             "unverified input"));
  // record_unverified on a verified join changes nothing.
  Manifest clean = manifest_a();
  record_unverified(clean, ok);
  EXPECT_FALSE(clean.allow_unverified);
}

TEST_F(ManifestTest, InputPathsMayDifferDigestsMayNot) {
  // The same content at another path: still the same input.
  const std::string copy = (dir_ / "model-copy.bin").string();
  fs::copy_file(inputs_[1].second, copy);
  Manifest a = manifest_a(), b = manifest_b();
  add_input(b, "model", copy);
  const JoinResult r = join_manifests(a, b, "arm", true);
  EXPECT_TRUE(r.verified()) << fmt::format("{}", fmt::join(describe_violations(r), "\n"));
  bool path_noted = false;
  for (const FieldResult& f : r.fields) path_noted |= f.field == "inputs.model.path" && f.status == "differs (not compared)";
  EXPECT_TRUE(path_noted);
  // A file that is not on this machine is reported, not failed.
  Manifest far = manifest_b();
  far.inputs["model"].path = "/nonexistent/model.bin";
  Manifest near = manifest_a();
  near.inputs["model"].path = "/nonexistent/model.bin";
  const JoinResult r2 = join_manifests(near, far, "arm", true);
  EXPECT_TRUE(r2.verified());
  size_t not_rehashed = 0;
  for (const FieldResult& f : r2.fields) not_rehashed += f.status == "not rehashed";
  EXPECT_EQ(not_rehashed, 2u);
}

}  // namespace
}  // namespace qc
