// Drives the statistics library for the Python peer tests (tests/peer/test_stats_peer.py).
// Reads a JSON array of requests from stdin, prints a JSON array of results, one per request,
// every number with "%.17g" (NaN as null), so that the peers compare full-precision values.
// Requests: {"op": "roc_auc" | "average_precision", "y": [0|1...], "score": [...], "w": [...]?}
//           {"op": "isotonic", "x": [...], "y": [...], "w": [...]?}      -> {"fitted": [...]}
//           {"op": "brier", "y": [0|1...], "p": [...], "w": [...]?}      -> {"value": v}
//           {"op": "bins", "x": [...], "initial_bins": B, "min_support": m} -> {"edges", "support"}
// A request the library refuses gives {"error": "<message>"}.
#include <cmath>
#include <cstdio>
#include <iostream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "full_precision_json.hpp"
#include "qconform/error.hpp"
#include "stats/stats.hpp"

namespace {

using qc_tools::num;
using qc_tools::nums;

template <class T>
std::vector<T> get(const nlohmann::json& req, const char* key) {
  if (!req.contains(key)) return {};
  return req.at(key).get<std::vector<T>>();
}

std::string handle(const nlohmann::json& req) {
  namespace st = qc::stats;
  const std::string op = req.at("op").get<std::string>();
  if (op == "roc_auc" || op == "average_precision") {
    auto y = get<int>(req, "y");
    auto score = get<double>(req, "score");
    auto w = get<double>(req, "w");
    double v = op == "roc_auc" ? st::roc_auc(y, score, w) : st::average_precision(y, score, w);
    return "{\"value\":" + num(v) + "}";
  }
  if (op == "isotonic") {
    auto fitted = st::isotonic_decreasing(get<double>(req, "x"), get<double>(req, "y"), get<double>(req, "w"));
    return "{\"fitted\":" + nums(fitted) + "}";
  }
  if (op == "brier") {
    return "{\"value\":" + num(st::brier_score(get<int>(req, "y"), get<double>(req, "p"), get<double>(req, "w"))) + "}";
  }
  if (op == "bins") {
    auto bins = st::quantile_bins_merged(get<double>(req, "x"), req.at("initial_bins").get<std::size_t>(),
                                         req.at("min_support").get<std::size_t>());
    std::vector<double> support(bins.support.begin(), bins.support.end());
    return "{\"edges\":" + nums(bins.edges) + ",\"support\":" + nums(support) + "}";
  }
  return "{\"error\":" + nlohmann::json("unknown op " + op).dump() + "}";
}

}  // namespace

int main() {
  std::string text((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
  nlohmann::json requests = nlohmann::json::parse(text);
  std::string out = "[";
  for (std::size_t i = 0; i < requests.size(); ++i) {
    std::string r;
    try {
      r = handle(requests[i]);
    } catch (const qc::Error& e) {
      r = "{\"error\":" + nlohmann::json(std::string(e.what())).dump() + "}";
    }
    if (i) out += ",\n";
    out += r;
  }
  std::printf("%s]\n", out.c_str());
  return 0;
}
