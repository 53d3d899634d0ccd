// A sample results JSON (docs/results-schema.md) built from the real library pieces, so the
// report can be rendered and checked without the `conform` pipeline: synthetic operands, C2
// predictions, `verify` of two CPU arms, a teacher-forced transfer on generated JSONL, a K sweep
// (hand-written points: shape only), and two manifests joined under the identity contract.
// `hostile` puts markup into user-controlled strings (layer name, arm description, a check
// summary) so tests can prove everything is escaped. Used by tests/unit/test_report.cpp and
// tests/tools/qc_render_report.cpp.
#pragma once

#include <nlohmann/json.hpp>

#include <cmath>
#include <filesystem>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "qconform/arm.hpp"
#include "checks/verify.hpp"
#include "qconform/manifest.hpp"
#include "core/operands_io.hpp"
#include "core/results_json.hpp"
#include "synth/synth.hpp"
#include "stats/transfer.hpp"
#include "core/version.hpp"

namespace qc::test {

inline constexpr const char* kHostileLayer = "<img src=x onerror=\"document.title='pwned'\">";
inline constexpr const char* kHostileText = "</script><script>document.title='pwned'</script>";

// Teacher-forced JSONL for two arms: the flip probability falls with the reference margin.
inline std::pair<std::string, std::string> sample_replay_jsonl(uint64_t seed, int prompts, int positions) {
  std::ostringstream a, b;
  uint64_t s = seed;
  const auto uniform = [&] { return static_cast<double>(splitmix64(s) >> 11) * 0x1.0p-53; };
  for (int p = 0; p < prompts; ++p) {
    for (int t = 0; t < positions; ++t) {
      const double margin = -std::log(1.0 - uniform()) * 1.5;  // exponential, mean 1.5
      const bool flip = uniform() < 0.6 * std::exp(-margin / 0.25);
      const int token = static_cast<int>(splitmix64(s) % 1000), top1 = static_cast<int>(splitmix64(s) % 1000);
      const int top2 = (top1 + 1) % 1000;
      const double l1 = 10.0 + uniform();
      a << nlohmann::json{{"prompt", p}, {"position", t}, {"token", token}, {"top1_id", top1}, {"top1_logit", l1},
                          {"top2_id", top2}, {"top2_logit", l1 - margin}}.dump()
        << "\n";
      b << nlohmann::json{{"prompt", p},
                          {"position", t},
                          {"token", token},
                          {"top1_id", flip ? top2 : top1},
                          {"top1_logit", l1 + 0.02},
                          {"top2_id", flip ? top1 : top2},
                          {"top2_logit", flip ? l1 + 0.01 : l1 - margin}}.dump()
        << "\n";
    }
  }
  return {a.str(), b.str()};
}

inline nlohmann::json build_sample_results(const std::string& workdir, const std::string& arm_b_label = "cpu:vllm-triton",
                                           bool hostile = false) {
  namespace fs = std::filesystem;
  fs::create_directories(workdir);
  SynthOptions so;
  so.shapes = "tiny";
  so.m = 64;
  so.seed = 7;
  std::vector<LayerOperands> layers = synth_operands(so);
  if (hostile) layers[0].name = kHostileLayer;
  const std::string ops_path = (fs::path(workdir) / "operands.safetensors").string();
  save_operands(ops_path, layers, {{"source", "report sample"}});
  const OperandSet set = load_operands(ops_path);

  const PredictionSet pred = predict(set.layers, set.path, set.sha256, 1);
  std::unique_ptr<Arm> a = make_arm("cpu:vllm-cutlass");
  std::unique_ptr<Arm> b = make_arm(arm_b_label);
  VerifyOptions vo;
  vo.threads = 1;
  const VerifyResult vr = verify_layers(*a, *b, set.layers, pred, vo);

  // Manifests of the two runs, each carrying the RunRecord its arm returned.
  const std::vector<std::pair<std::string, std::string>> inputs = {{"operands", ops_path}};
  const nlohmann::json config = {{"scales", {"real", "pow2-channel", "pow2-layer"}}, {"tolerance_ulps", 1}};
  Manifest ma = make_manifest("verify", vr.record_a.arm, vr.record_a, inputs, config);
  Manifest mb = make_manifest("verify", vr.record_b.arm, vr.record_b, inputs, config);
  const std::string pa = (fs::path(workdir) / "a.manifest.json").string();
  const std::string pb = (fs::path(workdir) / "b.manifest.json").string();
  write_manifest(pa, ma);
  write_manifest(pb, mb);
  JoinResult join = join_manifest_json(to_json(ma), to_json(mb), "arm", true, pa, pb);

  // Token transfer on generated records.
  const auto [ja, jb] = sample_replay_jsonl(11, 24, 80);
  std::istringstream sa(ja), sb(jb);
  transfer::TransferOptions to;
  to.replay = true;
  to.bootstrap = 200;
  const transfer::TransferResult tr =
      transfer::analyze_transfer(transfer::parse_transfer_jsonl(sa, "a.jsonl"), transfer::parse_transfer_jsonl(sb, "b.jsonl"), to);
  const nlohmann::json tj = transfer::to_json(tr);

  nlohmann::json checks = nlohmann::json::array();
  checks.push_back(join.c0);
  checks.push_back({{"id", "C1"},
                    {"title", "arithmetic preconditions"},
                    {"verdict", "outside-jurisdiction"},
                    {"summary", "sample: subnormal power-of-two scaling is outside the argument's jurisdiction"},
                    {"evidence", nlohmann::json::object()},
                    {"points_to", "the hardware, compiler flags (FTZ/DAZ, fast-math, contraction) or the arm's conversion"},
                    {"exclusions", {"subnormal range", "overflow to inf"}},
                    {"falsifiable", true}});
  for (const CheckResult& c : vr.checks) checks.push_back(c);
  checks.push_back({{"id", "C7"},
                    {"title", "token transfer"},
                    {"verdict", "not-applicable"},
                    {"summary", hostile ? std::string(kHostileText) : std::string("sample: flips concentrate at small margins")},
                    {"evidence", {{"flip_rate", tj["replay"]["flip_rate"]}, {"roc_auc", tj["replay"]["roc_auc"]["value"]}}},
                    {"points_to", "decision-boundary sensitivity of the model/workload"},
                    {"exclusions", {"greedy decoding", "the pinned prompts"}},
                    {"falsifiable", false}});

  nlohmann::json verify_json = to_json(vr);
  nlohmann::json arms = verify_json["arms"];
  if (hostile) arms[1]["description"] = kHostileText;

  // Sweep: the shape of the paper's Section VII (INT8 flat in K, fp32 accumulation of fp8
  // products growing with K). Hand-written sample points, not measurements.
  nlohmann::json int8 = nlohmann::json::array(), fp8 = nlohmann::json::array();
  for (int e = 9; e <= 15; ++e) {
    const int64_t k = int64_t{1} << e, total = 64 * 256;
    int8.push_back({{"k", k}, {"bitwise_diff", 40}, {"total", total}, {"max_ulp", 1}});
    fp8.push_back({{"k", k}, {"bitwise_diff", 40 + 90 * (e - 8)}, {"total", total}, {"max_ulp", 1 + (e - 9) / 2}});
  }
  nlohmann::json sweep = {{"x", "k"},
                          {"description", "sample points (not measured): INT8 stays flat in K, FP8 grows"},
                          {"series",
                           {{{"name", "INT8 W8A8 (sample)"}, {"points", int8}},
                            {{"name", "FP8 e4m3, fp32 accumulation (sample)"}, {"points", fp8}}}}};

  return results_envelope(
      "results",
      {{"title", "qconform report (sample)"},
       {"created", utc_now_iso8601()},
       {"project_version", version()},
       {"unverified", !join.verified()},
       {"checks", checks},
       {"arms", arms},
       {"predictions", to_json(pred)},
       {"verify", verify_json},
       {"transfer", tj},
       {"sweep", sweep},
       {"manifests",
        {{"files", {{{"path", pa}, {"manifest", to_json(ma)}}, {{"path", pb}, {"manifest", to_json(mb)}}}},
         {"join", to_json(join)}}}});
}

}  // namespace qc::test
