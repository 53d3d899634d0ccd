// C2: exact per-layer range prediction, written before any comparison runs and pinned by SHA-256.
#include <fmt/format.h>

#include <cmath>

#include "qconform/error.hpp"
#include "qconform/layer_checks.hpp"

namespace qc {

namespace {

nlohmann::json headroom_json(double bits) { return std::isfinite(bits) ? nlohmann::json(bits) : nlohmann::json(); }

}  // namespace

LayerPrediction predict_layer(const LayerOperands& ops, int threads) {
  LayerPrediction p;
  p.name = ops.name;
  p.stats = exact_range_stats(ops.a_q.data(), ops.w_q.data(), {ops.m, ops.n, ops.k}, threads);
  p.safe = p.stats.max_abs_acc <= kFp32ExactIntLimit && p.stats.int32_overflow_count == 0;
  return p;
}

PredictionSet predict(const std::vector<LayerOperands>& layers, const std::string& operands_path,
                      const std::string& operands_sha256, int threads,
                      const std::function<void(size_t, size_t)>& progress) {
  PredictionSet set;
  set.operands_path = operands_path;
  set.operands_sha256 = operands_sha256;
  for (size_t i = 0; i < layers.size(); ++i) {
    set.layers.push_back(predict_layer(layers[i], threads));
    if (progress) progress(i + 1, layers.size());
  }
  return set;
}

PredictionSummary summarize(const PredictionSet& p) {
  PredictionSummary s;
  s.layers = p.layers.size();
  s.min_headroom_bits = INFINITY;
  for (const LayerPrediction& l : p.layers) {
    s.safe += l.safe;
    s.proven_safe_by_bound += l.stats.bound_proves_safe;
    s.min_headroom_bits = std::min(s.min_headroom_bits, l.stats.headroom_bits);
  }
  return s;
}

nlohmann::json to_json(const LayerPrediction& l) {
  const RangeStats& s = l.stats;
  return {{"name", l.name},
          {"m", s.shape.m},
          {"n", s.shape.n},
          {"k", s.shape.k},
          {"max_abs_acc", s.max_abs_acc},
          {"argmax", {s.argmax_m, s.argmax_n}},
          {"count_above_2p24", s.count_above_2p24},
          {"headroom_bits", headroom_json(s.headroom_bits)},
          {"int32_overflow_impossible", s.int32_overflow_impossible},
          {"int32_overflow_count", s.int32_overflow_count},
          {"data_independent_bound", s.data_independent_bound},
          {"bound_max_a", s.bound_max_a},
          {"bound_proves_safe", s.bound_proves_safe},
          {"safe", l.safe}};
}

LayerPrediction layer_prediction_from_json(const nlohmann::json& l) {
  LayerPrediction lp;
  lp.name = l.at("name").get<std::string>();
  RangeStats& s = lp.stats;
  s.shape = {l.at("m").get<int64_t>(), l.at("n").get<int64_t>(), l.at("k").get<int64_t>()};
  s.max_abs_acc = l.at("max_abs_acc").get<int64_t>();
  s.argmax_m = l.at("argmax").at(0).get<int64_t>();
  s.argmax_n = l.at("argmax").at(1).get<int64_t>();
  s.count_above_2p24 = l.at("count_above_2p24").get<int64_t>();
  s.headroom_bits = l.at("headroom_bits").is_null() ? INFINITY : l.at("headroom_bits").get<double>();
  s.int32_overflow_impossible = l.at("int32_overflow_impossible").get<bool>();
  s.int32_overflow_count = l.at("int32_overflow_count").get<int64_t>();
  s.data_independent_bound = l.at("data_independent_bound").get<int64_t>();
  s.bound_max_a = l.at("bound_max_a").get<int32_t>();
  s.bound_proves_safe = l.at("bound_proves_safe").get<bool>();
  lp.safe = l.at("safe").get<bool>();
  return lp;
}

nlohmann::json to_json(const PredictionSet& p) {
  nlohmann::json layers = nlohmann::json::array();
  for (const LayerPrediction& l : p.layers) layers.push_back(to_json(l));
  const PredictionSummary sum = summarize(p);
  return {{"schema_version", 1},
          {"kind", "qconform-predictions"},
          {"threshold", kFp32ExactIntLimit},
          {"operands", {{"path", p.operands_path}, {"sha256", p.operands_sha256}}},
          {"summary",
           {{"layers", sum.layers},
            {"safe", sum.safe},
            {"proven_safe_by_bound", sum.proven_safe_by_bound},
            {"min_headroom_bits", headroom_json(sum.min_headroom_bits)}}},
          {"layers", layers}};
}

PredictionSet prediction_set_from_json(const nlohmann::json& j, const std::string& file) {
  try {
    QC_INPUT(j.value("kind", "") == "qconform-predictions", "{}: field `kind`: expected \"qconform-predictions\", found {}",
             file, j.contains("kind") ? j["kind"].dump() : "nothing");
    QC_INPUT(j.value("schema_version", 0) == 1, "{}: field `schema_version`: expected 1, found {}", file,
             j.contains("schema_version") ? j["schema_version"].dump() : "nothing");
    PredictionSet p;
    p.operands_path = j.at("operands").at("path").get<std::string>();
    p.operands_sha256 = j.at("operands").at("sha256").get<std::string>();
    for (const auto& l : j.at("layers")) p.layers.push_back(layer_prediction_from_json(l));
    return p;
  } catch (const nlohmann::json::exception& e) {
    QC_FAIL_INPUT("{}: not a valid predictions file: {}", file, e.what());
  }
}

}  // namespace qc
