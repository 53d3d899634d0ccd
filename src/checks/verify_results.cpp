#include "checks/verify_results.hpp"

#include <algorithm>

#include "core/results_json.hpp"

namespace qc {

namespace {

// The members verify's results add to `to_json(result)`: the envelope, `operands` and `predictions`.
nlohmann::json added_members(const VerifyInputs& in) {
  nlohmann::json j = results_envelope("verify");
  j["operands"] = {{"path", in.operands_path}, {"sha256", in.operands_sha256}};
  j["predictions"] = {
      {"path", in.predictions_path}, {"sha256", in.predictions_sha256}, {"pinned", in.predictions_pinned}};
  return j;
}

}  // namespace

nlohmann::json verify_results_json(const VerifyResult& result, const VerifyInputs& in) {
  nlohmann::json j = results_envelope("verify", to_json(result));
  nlohmann::json added = added_members(in);  // named: a range over a temporary's items() would dangle
  for (auto& [key, value] : added.items()) j[key] = std::move(value);
  return j;
}

std::string verify_results_text(const VerifyResult& result, const VerifyInputs& in, const nlohmann::json& extra) {
  nlohmann::json fields = added_members(in);
  for (const auto& [key, value] : extra.items()) fields[key] = value;
  return to_json_text(result, std::move(fields));
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
