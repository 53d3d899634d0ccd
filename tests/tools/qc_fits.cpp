// Drives the depth-sweep fits for the Python peer test (tests/peer/test_fits_peer.py).
// Reads one JSON object from stdin: {"k": [...], "count": [...], "total": [...],
// "per_seed": [{"count": [...], "total": [...]}, ...]?, "confidence": 0.95?}
// and prints one JSON object: every model's native params, training and held-out deviance, the
// winner, the α jackknife, the chi-square test and Clopper–Pearson bounds per row and overall,
// every number with "%.17g" (non-finite as null) so that the peer compares full precision.
#include <cmath>
#include <cstdio>
#include <iostream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "full_precision_json.hpp"
#include "qconform/error.hpp"
#include "stats/fits.hpp"

namespace {

using qc_tools::num;
using qc_tools::nums;

std::string interval(const qc::stats::BinomialInterval& b) {
  return "{\"lower\":" + num(b.lower) + ",\"upper\":" + num(b.upper) + "}";
}

}  // namespace

int main() {
  namespace st = qc::stats;
  try {
    const std::string text((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
    const nlohmann::json in = nlohmann::json::parse(text);
    st::BinomialSeries s;
    s.k = in.at("k").get<std::vector<double>>();
    s.count = in.at("count").get<std::vector<int64_t>>();
    s.total = in.at("total").get<std::vector<int64_t>>();
    std::vector<st::BinomialSeries> seeds;
    if (in.contains("per_seed")) {
      for (const auto& j : in.at("per_seed")) {
        st::BinomialSeries x;
        x.k = s.k;
        x.count = j.at("count").get<std::vector<int64_t>>();
        x.total = j.at("total").get<std::vector<int64_t>>();
        seeds.push_back(x);
      }
    }
    const double confidence = in.value("confidence", 0.95);
    const st::FitReport r = st::fit_all(s, seeds);
    std::string out = "{\"models\":{";
    for (size_t i = 0; i < r.models.size(); ++i) {
      const st::ModelFit& m = r.models[i];
      out += (i ? ",\"" : "\"") + std::string(st::fit_model_name(m.model)) + "\":{\"params\":" + nums(m.params) +
             ",\"deviance\":" + num(m.deviance) + ",\"heldout\":" + num(m.heldout_deviance) +
             ",\"heldout_rows\":" + nums(m.heldout_rows) + ",\"converged\":" + (m.converged ? "true" : "false") + "}";
    }
    out += "},\"winner\":\"" + r.winner + "\"";
    for (const auto& [name, jk] : {std::pair{"power_alpha_jackknife", r.power_alpha},
                                   std::pair{"saturation_alpha_jackknife", r.saturation_alpha}}) {
      if (!jk) continue;
      out += ",\"" + std::string(name) + "\":{\"leave_one_out\":" + nums(jk->leave_one_out) +
             ",\"mean\":" + num(jk->mean) + ",\"se\":" + num(jk->se) + "}";
    }
    const st::ChiSquareTest chi = st::chi_square_constant_rate(s);
    out += ",\"chi_square\":{\"statistic\":" + num(chi.statistic) + ",\"df\":" + std::to_string(chi.df) +
           ",\"p_value\":" + num(chi.p_value) + "}";
    out += ",\"clopper_pearson\":[";
    int64_t sx = 0, sn = 0;
    for (size_t i = 0; i < s.size(); ++i) {
      out += (i ? "," : "") + interval(st::clopper_pearson(s.count[i], s.total[i], confidence));
      sx += s.count[i];
      sn += s.total[i];
    }
    out += "],\"clopper_pearson_overall\":" + interval(st::clopper_pearson(sx, sn, confidence)) + "}\n";
    std::fputs(out.c_str(), stdout);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "qc_fits: %s\n", e.what());
    return 2;
  }
}
