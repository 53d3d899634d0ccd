#include "checks/verify_results.hpp"

#include "core/results_json.hpp"

namespace qc {

nlohmann::json verify_results_json(const VerifyResult& result, const VerifyInputs& in) {
  nlohmann::json j = results_envelope("verify", to_json(result));
  j["operands"] = {{"path", in.operands_path}, {"sha256", in.operands_sha256}};
  j["predictions"] = {
      {"path", in.predictions_path}, {"sha256", in.predictions_sha256}, {"pinned", in.predictions_pinned}};
  return j;
}

}  // namespace qc
