#include "checks/verify_results.hpp"

#include <algorithm>

#include "core/results_json.hpp"

namespace qc {

nlohmann::json verify_results_json(const VerifyResult& result, const VerifyInputs& in) {
  nlohmann::json j = results_envelope("verify", to_json(result));
  j["operands"] = {{"path", in.operands_path}, {"sha256", in.operands_sha256}};
  j["predictions"] = {
      {"path", in.predictions_path}, {"sha256", in.predictions_sha256}, {"pinned", in.predictions_pinned}};
  return j;
}

void add_rank_seconds(VerifyResult& result, const std::vector<nlohmann::json>& rank_info) {
  for (const nlohmann::json& info : rank_info) {
    if (!info.contains("seconds")) continue;
    for (const auto& p : info["seconds"]) {
      const std::string phase = p.at(0).get<std::string>();
      const double sec = p.at(1).get<double>();
      auto it = std::find_if(result.seconds.begin(), result.seconds.end(), [&](const auto& x) { return x.first == phase; });
      if (it == result.seconds.end()) {
        result.seconds.emplace_back(phase, sec);
      } else {
        it->second += sec;
      }
    }
  }
}

}  // namespace qc
