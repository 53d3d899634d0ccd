// C2: exact per-layer range prediction, written before any comparison runs and pinned by SHA-256.
#include <fmt/format.h>

#include <cmath>
#include <type_traits>

#include "qconform/error.hpp"
#include "core/fileio.hpp"
#include "core/results_json.hpp"
#include "core/sha256.hpp"
#include "checks/verify.hpp"

namespace qc {

namespace {

nlohmann::json headroom_json(double bits) { return std::isfinite(bits) ? nlohmann::json(bits) : nlohmann::json(); }

}  // namespace

LayerPrediction predict_layer(const LayerOperands& ops, int threads) {
  LayerPrediction p;
  p.name = ops.name;
  if (ops.fp8()) {
    // No INT32 accumulator to bound: C2 does not apply to an FP8 layer (verify reports it so), and its
    // codes read as int8 would give meaningless statistics. The name and shape still pair the
    // prediction with its layer; `safe` stays false.
    p.stats.shape = {ops.m, ops.n, ops.k};
    return p;
  }
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
  nlohmann::json operands = {{"path", p.operands_path}, {"sha256", p.operands_sha256}};
  if (!p.operands_sha256_tree.empty()) operands["sha256_tree"] = p.operands_sha256_tree;
  return results_envelope("predictions",
                          {{"threshold", kFp32ExactIntLimit},
                           {"operands", operands},
                           {"summary",
                            {{"layers", sum.layers},
                             {"safe", sum.safe},
                             {"proven_safe_by_bound", sum.proven_safe_by_bound},
                             {"min_headroom_bits", headroom_json(sum.min_headroom_bits)}}},
                           {"layers", layers}});
}

namespace {

// Field access that names the field's path, what was expected and what was found.
struct FieldReader {
  const std::string& file;

  const nlohmann::json& at(const nlohmann::json& obj, const std::string& path, std::string_view key) const {
    const std::string full = path.empty() ? std::string(key) : path + "." + std::string(key);
    QC_INPUT(obj.is_object(), "{}: field `{}`: expected an object holding `{}`, found {}", file,
             path.empty() ? "(top level)" : path, key, obj.type_name());
    const auto it = obj.find(key);
    QC_INPUT(it != obj.end(), "{}: field `{}`: expected it to be present, found no such field", file, full);
    return *it;
  }

  template <class T>
  T get(const nlohmann::json& obj, const std::string& path, std::string_view key, const char* expected) const {
    const nlohmann::json& v = at(obj, path, key);
    const std::string full = path.empty() ? std::string(key) : path + "." + std::string(key);
    const bool ok = std::is_same_v<T, bool>          ? v.is_boolean()
                    : std::is_same_v<T, std::string> ? v.is_string()
                    : std::is_integral_v<T>          ? v.is_number_integer()
                                                     : v.is_number();
    QC_INPUT(ok, "{}: field `{}`: expected {}, found {} {}", file, full, expected, v.type_name(),
             printable_text(v.dump(), 60));
    return v.get<T>();
  }
};

}  // namespace

PredictionSet prediction_set_from_json(const nlohmann::json& j, const std::string& file) {
  const FieldReader r{file};
  check_results_envelope(j, "predictions", file, "a predictions file from `qconform predict`");
  PredictionSet p;
  const nlohmann::json& operands = r.at(j, "", "operands");
  p.operands_path = r.get<std::string>(operands, "operands", "path", "a string");
  p.operands_sha256 = r.get<std::string>(operands, "operands", "sha256", "a string (sha256:<hex>)");
  if (operands.is_object() && operands.contains("sha256_tree")) {
    p.operands_sha256_tree = r.get<std::string>(operands, "operands", "sha256_tree", "a string (sha256-tree:<hex>)");
    QC_INPUT(is_digest(p.operands_sha256_tree, "sha256-tree:"),
             "{}: field `operands.sha256_tree`: expected sha256-tree:<64 lowercase hex>, found {}", file,
             printable_text(p.operands_sha256_tree, 90));
    // verify reports this plain digest once the tree digest matches: it must be one.
    QC_INPUT(is_digest(p.operands_sha256),
             "{}: field `operands.sha256`: expected sha256:<64 lowercase hex> (the plain digest beside the tree digest), "
             "found {}",
             file, printable_text(p.operands_sha256, 90));
  }
  const nlohmann::json& layers = r.at(j, "", "layers");
  QC_INPUT(layers.is_array(), "{}: field `layers`: expected an array of per-layer predictions, found {}", file,
           layers.type_name());
  for (size_t i = 0; i < layers.size(); ++i) {
    const nlohmann::json& l = layers[i];
    const std::string at = fmt::format("layers[{}]", i);
    LayerPrediction lp;
    lp.name = r.get<std::string>(l, at, "name", "a string");
    RangeStats& s = lp.stats;
    s.shape = {r.get<int64_t>(l, at, "m", "an integer"), r.get<int64_t>(l, at, "n", "an integer"),
               r.get<int64_t>(l, at, "k", "an integer")};
    s.max_abs_acc = r.get<int64_t>(l, at, "max_abs_acc", "an integer");
    const nlohmann::json& argmax = r.at(l, at, "argmax");
    QC_INPUT(argmax.is_array() && argmax.size() == 2 && argmax[0].is_number_integer() && argmax[1].is_number_integer(),
             "{}: field `{}.argmax`: expected [row, column] (two integers), found {}", file, at,
             printable_text(argmax.dump(), 60));
    s.argmax_m = argmax[0].get<int64_t>();
    s.argmax_n = argmax[1].get<int64_t>();
    s.count_above_2p24 = r.get<int64_t>(l, at, "count_above_2p24", "an integer");
    const nlohmann::json& headroom = r.at(l, at, "headroom_bits");
    QC_INPUT(headroom.is_null() || headroom.is_number(), "{}: field `{}.headroom_bits`: expected a number or null, found {}",
             file, at, printable_text(headroom.dump(), 60));
    s.headroom_bits = headroom.is_null() ? INFINITY : headroom.get<double>();
    s.int32_overflow_impossible = r.get<bool>(l, at, "int32_overflow_impossible", "a boolean");
    s.int32_overflow_count = r.get<int64_t>(l, at, "int32_overflow_count", "an integer");
    s.data_independent_bound = r.get<int64_t>(l, at, "data_independent_bound", "an integer");
    s.bound_max_a = r.get<int32_t>(l, at, "bound_max_a", "an integer");
    s.bound_proves_safe = r.get<bool>(l, at, "bound_proves_safe", "a boolean");
    lp.safe = r.get<bool>(l, at, "safe", "a boolean");
    p.layers.push_back(std::move(lp));
  }
  return p;
}

}  // namespace qc
