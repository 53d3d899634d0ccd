// The registry of verify's per-layer checks (layer_checks.hpp).
#include "checks/layer_checks.hpp"

#include <fmt/format.h>

#include "qconform/error.hpp"

namespace qc {

const std::vector<LayerCheck>& layer_checks() {
  static const std::vector<LayerCheck> checks = {kC2Range, kC3SharedOperands, kC4Accumulator, kC5Pow2, kC6Tolerance};
  return checks;
}

const LayerCheck& layer_check(std::string_view id) {
  for (const LayerCheck& c : layer_checks()) {
    if (c.id == id) return c;
  }
  QC_FAIL("`{}` is not one of verify's per-layer checks ({})", id, check_id_range(/*per_layer_only=*/true));
}

StageFinding failed_in(const CheckResult& c, Stage stage) {
  return {stage, fmt::format("{} failed: {}", c.id, c.summary)};
}

nlohmann::json taken_json(const std::optional<int64_t>& v) { return v ? nlohmann::json(*v) : nlohmann::json(nullptr); }

std::optional<int64_t> taken_from_json(const nlohmann::json& v) {
  return v.is_null() || v.get<int64_t>() < 0 ? std::optional<int64_t>() : std::optional<int64_t>(v.get<int64_t>());
}

}  // namespace qc
