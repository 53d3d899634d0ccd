// The checks and procedures: `predict`, `verify`, `boundary`, `identify`, `transfer`; each returns its
// JSON result document as a dict (`transfer`: with its summary text beside it).
#include "ext_common.hpp"

#include "qconform/arm.hpp"
#include "qconform/error.hpp"
#include "checks/c1_boundary.hpp"
#include "checks/identify.hpp"
#include "checks/verify.hpp"
#include "checks/verify_results.hpp"
#include "core/sha256.hpp"
#include "stats/transfer.hpp"

using namespace nb::literals;

namespace qc::py {

// The checks and procedures.
void bind_checks(nb::module_& m) {
  // ---- checks ----
  m.def(
      "predict",
      [](nb::handle operands, int threads) {
        const OperandsIn in = operands_in(operands);
        nlohmann::json j;
        without_gil([&] {
          qc::PredictionSet p = qc::predict(in.layers, in.path, in.sha256, threads);
          // A file's tree digest as well, as `qconform predict` records it (docs/formats.md "Tree digest").
          if (in.from_file) p.operands_sha256_tree = qc::sha256_tree_file(in.path);
          j = qc::to_json(p);
        });
        return json_to_py(j);
      },
      "operands"_a, "threads"_a = 0);
  m.def(
      "verify",
      [](qc::Arm& a, qc::Arm& b, nb::handle operands, const std::vector<std::string>& scales,
         const std::vector<int64_t>& m_sweep, int64_t tolerance_ulps, size_t max_listed, double near_zero_fraction,
         int threads, const std::string& reference) {
        const OperandsIn in = operands_in(operands);
        qc::VerifyOptions o;
        o.reference = qc::verify_reference_from_name(reference);
        o.modes.clear();
        QC_INPUT(!scales.empty(), "scales: expected at least one of real, pow2-channel, pow2-layer");
        for (const std::string& s : scales) o.modes.push_back(qc::scale_mode_from_name(s, "scales"));
        o.language = qc::UserLanguage::python;  // messages and advice name Python arguments, not CLI flags
        for (int64_t mm : m_sweep) QC_INPUT(mm > 0, "m_sweep: expected positive row counts, found {}", mm);
        o.m_sweep = m_sweep;
        QC_INPUT(tolerance_ulps >= 0, "tolerance_ulps: expected >= 0, found {}", tolerance_ulps);
        o.tolerance_ulps = tolerance_ulps;
        o.compare.max_listed = max_listed;
        o.compare.near_zero_fraction = near_zero_fraction;
        o.threads = threads;
        nlohmann::json j;
        without_gil([&] {
          const qc::PredictionSet p = qc::predict(in.layers, in.path, in.sha256, threads);
          // The document `qconform verify --json` writes; the predictions are computed here, never pinned.
          j = qc::verify_results_json(qc::verify_layers(a, b, in.layers, p, o), {in.path, in.sha256, "", "", false});
        });
        return json_to_py(j);
      },
      "arm_a"_a, "arm_b"_a, "operands"_a, "scales"_a, "m_sweep"_a, "tolerance_ulps"_a, "max_listed"_a,
      "near_zero_fraction"_a, "threads"_a, "reference"_a);
  m.def(
      "boundary",
      [](qc::Arm& arm, int64_t max_k, bool overflow_probe) {
        qc::BoundaryOptions o;
        QC_INPUT(max_k >= 512, "max_k: expected >= 512 (the accumulation sweep starts at K = 512), found {}", max_k);
        o.max_k = max_k;
        o.overflow_probe = overflow_probe;
        nlohmann::json j;
        without_gil([&] { j = qc::to_json(qc::run_boundary(arm, o)); });
        return json_to_py(j);
      },
      "arm"_a, "max_k"_a = 32768, "overflow_probe"_a = true);
  m.def(
      "identify",
      [](qc::Arm& arm, uint64_t seed) {
        qc::IdentifyOptions o;
        o.seed = seed;
        nlohmann::json j;
        std::string text;
        without_gil([&] {
          const qc::IdentifyResult r = qc::identify(arm, o);
          j = qc::to_json(r);
          text = qc::describe(r, "python");
        });
        j["printout"] = text;
        return json_to_py(j);
      },
      "arm"_a, "seed"_a = qc::IdentifyOptions{}.seed);
  m.def(
      "transfer",
      [](const std::string& a_path, const std::string& b_path, bool replay, uint64_t seed, size_t bootstrap,
         size_t min_bin_support, size_t bins, size_t folds, double ci_level) {
        qc::transfer::TransferOptions o;
        o.replay = replay;
        o.seed = seed;
        o.bootstrap = bootstrap;
        o.min_bin_support = min_bin_support;
        o.initial_bins = bins;
        o.folds = folds;
        o.ci_level = ci_level;
        QC_INPUT(min_bin_support > 0 && bins > 0 && folds > 0,
                 "min_bin_support, bins and folds: expected positive integers, found {}, {}, {}", min_bin_support, bins,
                 folds);
        QC_INPUT(ci_level >= 0.5 && ci_level < 1.0, "ci_level: expected a level in [0.5, 1), found {}", ci_level);
        nlohmann::json j;
        std::string summary;
        without_gil([&] {
          const auto a = qc::transfer::read_transfer_jsonl(a_path);
          const auto b = qc::transfer::read_transfer_jsonl(b_path);
          const auto r = qc::transfer::analyze_transfer(a, b, o);
          j = qc::transfer::to_json(r);
          summary = qc::transfer::summary(r);
        });
        nb::object d = json_to_py(j);
        return nb::make_tuple(d, summary);
      },
      "a_jsonl"_a, "b_jsonl"_a, "replay"_a, "seed"_a, "bootstrap"_a, "min_bin_support"_a, "bins"_a, "folds"_a,
      "ci_level"_a);
}

}  // namespace qc::py
