// C7, token transfer (c7_transfer.hpp).
#include "checks/c7_transfer.hpp"

#include <fmt/format.h>

#include <string>

#include "qconform/error.hpp"

namespace qc {

CheckResult c7_transfer(const transfer::TransferResult& replay, const transfer::TransferResult& generation,
                        double max_flip_rate) {
  QC_CHECK(replay.replay && generation.sequence, "C7: expected a replay analysis and a sequence analysis");
  // No tolerance: the flips are measured and reported, nothing is decided (not a pass).
  CheckResult c7 = make_check("C7", max_flip_rate >= 0 ? Verdict::pass : Verdict::reported);
  const auto& rr = *replay.replay;
  const auto& sr = *generation.sequence;
  const std::string auc = rr.n_flips == 0 || rr.n_flips == rr.n_positions
                              ? std::string("margin AUC undefined (one class only)")
                              : fmt::format("margin AUC {:.3f} [{:.3f}, {:.3f}]", rr.auc, rr.auc_ci.lo, rr.auc_ci.hi);
  c7.summary = fmt::format("teacher-forced flips {} of {} positions ({:.2f}%), {}; {} of {} free-running sequences "
                           "identical",
                           rr.n_flips, rr.n_positions, 100.0 * rr.flip_rate, auc, sr.n_identical, sr.n_prompts);
  if (max_flip_rate < 0) {
    c7.summary = "reported (no tolerance set: --max-flip-rate): " + c7.summary;
  } else if (rr.flip_rate > max_flip_rate) {
    c7.verdict = Verdict::fail;
    c7.summary += fmt::format(" — above the tolerance {:.4f}", max_flip_rate);
  } else {
    c7.summary += fmt::format(" — within the tolerance {:.4f}", max_flip_rate);
  }
  c7.evidence = {{"replay", transfer::to_json(replay)},
                 {"generate", transfer::to_json(generation)},
                 {"max_flip_rate", max_flip_rate >= 0 ? nlohmann::json(max_flip_rate) : nlohmann::json(nullptr)}};
  return c7;
}

}  // namespace qc
