// C4, accumulator equality (c4_accumulator.hpp).
#include "checks/c4_accumulator.hpp"

#include <fmt/format.h>

namespace qc {

CheckResult c4_accumulator(const std::vector<LayerRun>& runs) {
  CheckResult c4 = make_check("C4", Verdict::not_applicable);
  int64_t c4_runs = 0, c4_mismatch = 0;
  std::vector<std::string> c4_first;
  int64_t c4_excluded = 0;
  for (const LayerRun& r : runs) {
    if (r.int32_overflow) {
      ++c4_excluded;
      continue;
    }
    for (int64_t mm : {r.acc_mismatch_a, r.acc_mismatch_b}) {
      if (mm < 0) continue;
      ++c4_runs;
      c4_mismatch += mm;
    }
    for (const std::string& s : r.acc_first_mismatch) {
      if (c4_first.size() < 10) c4_first.push_back(s);
    }
  }
  if (c4_runs) c4.verdict = c4_mismatch ? Verdict::fail : Verdict::pass;
  c4.summary = c4_runs ? fmt::format("{} exposed accumulators compared with the exact INT64 reference: {} elements differ",
                                     c4_runs, c4_mismatch)
                       : "neither arm exposes its accumulator";
  c4.evidence = {{"compared", c4_runs}, {"mismatched_elements", c4_mismatch}, {"first", c4_first},
                 {"excluded_runs_int32_overflow", c4_excluded}};
  return c4;
}

}  // namespace qc
