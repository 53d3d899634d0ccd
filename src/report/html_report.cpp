// The HTML report: one file, no network. Tables are written here; figures are Chart.js
// configurations (JSON) that a short inlined script hands to Chart.js, itself inlined from the
// Debian package. The script also records, in attributes of <body>, how many charts drew
// non-blank pixels and any JavaScript error, so a headless browser can check the report
// (tests/peer/test_report_browser.py).
#include "qconform/report.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <iterator>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <optional>
#include <vector>

#include "qconform/check.hpp"
#include "qconform/error.hpp"
#include "core/fileio.hpp"
#include "core/results_json.hpp"
#include "report/assets.hpp"
#include "report/html_page.hpp"

namespace qc {

using nlohmann::json;
using namespace html;  // the page builder and the tolerant accessors (html_page.hpp)

std::string html_escape(std::string_view text) {
  std::string out;
  out.reserve(text.size() + text.size() / 8);
  for (const char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string json_for_script(const json& value) {
  // `dump` with `ensure_ascii` leaves only ASCII, so U+2028/U+2029 are already \u escapes; the
  // three characters that can end or re-open markup inside <script> are escaped here.
  const std::string text = value.dump(-1, ' ', /*ensure_ascii=*/true, json::error_handler_t::replace);
  std::string out;
  out.reserve(text.size());
  for (const char c : text) {
    switch (c) {
      case '<': out += "\\u003c"; break;
      case '>': out += "\\u003e"; break;
      case '&': out += "\\u0026"; break;
      default: out += c;
    }
  }
  return out;
}

std::string find_chartjs() {
  if (const char* env = std::getenv("QCONFORM_CHARTJS"); env != nullptr && *env != '\0') return env;
  for (const char* p : {"/usr/share/javascript/chart.js/chart.umd.js", "/usr/share/javascript/chart.js/chart.min.js",
                        "/usr/share/javascript/chart.js/chart.js"}) {
    std::error_code ec;
    if (std::filesystem::is_regular_file(p, ec)) return p;
  }
  return "";
}

namespace {

// Validates the top level and the JSON type of each section.
void validate(const json& r) {
  QC_INPUT(r.is_object(), "results: expected a JSON object, found {}", r.type_name());
  QC_INPUT(r.contains("schema_version") && r.at("schema_version").is_number_integer() &&
               r.at("schema_version").get<int64_t>() == kSchemaVersion,
           "results field `schema_version`: expected {}, found {}", kSchemaVersion,
           r.contains("schema_version") ? r.at("schema_version").dump() : "nothing");
  const auto section = [&](const char* name, bool (json::*is)() const noexcept, const char* type) {
    if (r.contains(name) && !r.at(name).is_null()) {
      QC_INPUT((r.at(name).*is)(), "results field `{}`: expected {}, found {}", name, type, r.at(name).type_name());
    }
  };
  section("checks", &json::is_array, "an array of check results");
  section("arms", &json::is_array, "an array of arms");
  section("predictions", &json::is_object, "an object (qconform predict's JSON)");
  section("verify", &json::is_object, "an object (qconform verify's JSON)");
  section("transfer", &json::is_object, "an object (qconform transfer's JSON)");
  section("sweep", &json::is_object, "an object {x, series}");
  section("manifests", &json::is_object, "an object {files, join}");
  section("invariance", &json::is_object, "an object {mates, arms} (conform --invariance-mates)");
  // A `kind`, where present, must name the document it sits in; earlier releases' spellings are
  // accepted (a results file keeps its sections as the verbs wrote them).
  const auto kind = [&](const json& doc, const char* path, const char* name) {
    if (!doc.is_object() || !doc.contains("kind")) return;
    QC_INPUT(is_results_kind(doc.at("kind"), name), "results field `{}kind`: expected \"{}\", found {}", path,
             results_kind(name), printable_text(doc.at("kind").dump(), 60));
  };
  kind(r, "", "results");
  kind(sub(r, "predictions"), "predictions.", "predictions");
  kind(sub(r, "verify"), "verify.", "verify");
  kind(sub(r, "transfer"), "transfer.", "transfer");
  kind(sub(r, "generation"), "generation.", "transfer");
  if (const json& runs = sub(sub(r, "verify"), "runs"); !runs.is_null()) {
    QC_INPUT(runs.is_array(), "results field `verify.runs`: expected an array, found {}", runs.type_name());
  }
  if (const json& layers = sub(sub(r, "predictions"), "layers"); !layers.is_null()) {
    QC_INPUT(layers.is_array(), "results field `predictions.layers`: expected an array, found {}", layers.type_name());
  }
  if (const json& series = sub(sub(r, "sweep"), "series"); !series.is_null()) {
    QC_INPUT(series.is_array(), "results field `sweep.series`: expected an array, found {}", series.type_name());
  }
}

// ---- sections ------------------------------------------------------------------------------------

void headroom_section(Page& p, const json& results) {
  const json& layers = sub(sub(results, "predictions"), "layers");
  if (!layers.is_array() || layers.empty()) return;
  p.f("<section id=\"headroom\"><h2>{}: accumulator headroom against 2<sup>24</sup></h2>\n",
      html_escape(check_heading("C2")));
  p.raw("<p>Every |acc| &le; 2<sup>24</sup> converts to fp32 exactly: below the red line the accumulator has its "
        "alibi. Bars: the observed maximum per layer (log<sub>2</sub>); triangles: the data-independent bound "
        "127&middot;max<sub>n</sub>&Sigma;<sub>k</sub>|w|, a guarantee for every input.</p>\n");
  json labels = json::array(), observed = json::array(), bound = json::array(), line24 = json::array(),
       line31 = json::array(), colours = json::array();
  for (const json& l : layers) {
    labels.push_back(str(l, "name"));
    const auto acc = num(l, "max_abs_acc"), b = num(l, "data_independent_bound");
    observed.push_back(acc && *acc > 0 ? json(std::log2(*acc)) : json(0.0));
    bound.push_back(b && *b > 0 ? json(std::log2(*b)) : json(nullptr));
    line24.push_back(24);
    line31.push_back(31);
    const bool safe = sub(l, "safe").is_boolean() && sub(l, "safe").get<bool>();
    colours.push_back(safe ? "#009E73" : "#D55E00");
  }
  json config = {
      {"type", "bar"},
      {"data",
       {{"labels", labels},
        {"datasets",
         {{{"type", "bar"}, {"label", "observed max |acc| (green: safe, orange: unsafe)"}, {"data", observed},
           {"backgroundColor", colours}, {"order", 3}},
          {{"type", "line"}, {"label", "data-independent bound"}, {"data", bound}, {"showLine", false},
           {"pointStyle", "triangle"}, {"pointRadius", 4}, {"borderColor", "#444"}, {"backgroundColor", "#444"},
           {"order", 2}},
          {{"type", "line"}, {"label", "2^24: exact int -> fp32"}, {"data", line24}, {"borderColor", "#C00000"},
           {"borderDash", {6, 4}}, {"pointRadius", 0}, {"borderWidth", 2}, {"order", 1}},
          {{"type", "line"}, {"label", "2^31: INT32 limit"}, {"data", line31}, {"borderColor", "#888"},
           {"borderDash", {2, 3}}, {"pointRadius", 0}, {"borderWidth", 1}, {"order", 1}}}}}},
      {"options",
       {{"scales",
         {{"y",
           {{"min", 0},
            {"suggestedMax", 32},
            {"ticks", {{"stepSize", 4}}},
            {"title", {{"display", true}, {"text", "|acc| (log2 scale)"}}}}},
          {"x", {{"ticks", {{"autoSkip", true}, {"maxRotation", 60}}}}}}},
        {"plugins", {{"legend", {{"position", "bottom"}}}}}}}};
  p.chart("Per-layer max |acc| (log2) against 2^24, with the data-independent bound", config, {"y"});
  p.table_start("per-layer table");
  p.raw("<table><thead><tr><th>layer</th><th>M&times;N&times;K</th><th>max |acc|</th><th>headroom (bits)</th>"
        "<th>&gt;2<sup>24</sup></th><th>bound</th><th>predicted</th></tr></thead><tbody>\n");
  for (const json& l : layers) {
    const bool safe = sub(l, "safe").is_boolean() && sub(l, "safe").get<bool>();
    const bool proven = sub(l, "bound_proves_safe").is_boolean() && sub(l, "bound_proves_safe").get<bool>();
    p.f("<tr><td><code>{}</code></td><td>{}&times;{}&times;{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>"
        "<td>{}</td></tr>\n",
        html_escape(str(l, "name")), fmt_num(num(l, "m")), fmt_num(num(l, "n")), fmt_num(num(l, "k")),
        fmt_num(num(l, "max_abs_acc")),
        sub(l, "headroom_bits").is_null() ? "&infin;" : fmt_num(num(l, "headroom_bits")), fmt_num(num(l, "count_above_2p24")),
        fmt_num(num(l, "data_independent_bound")),
        safe ? (proven ? "<span class=\"verdict pass\">safe (proven for all inputs)</span>"
                       : "<span class=\"verdict pass\">safe</span>")
             : "<span class=\"verdict fail\">unsafe</span>");
  }
  p.table_section_end();
}

void differences_section(Page& p, const json& results) {
  const json& runs = sub(sub(results, "verify"), "runs");
  if (!runs.is_array() || runs.empty()) return;
  // Aggregate over M per (layer, scale regime); layers in order of first appearance.
  struct Cell {
    double diff = 0, total = 0, max_ulp = 0;
    bool any = false;
  };
  std::vector<std::string> layers, modes;
  std::map<std::pair<std::string, std::string>, Cell> cells;
  for (const json& r : runs) {
    const std::string layer = str(r, "layer"), mode = str(r, "scales");
    if (std::find(layers.begin(), layers.end(), layer) == layers.end()) layers.push_back(layer);
    if (std::find(modes.begin(), modes.end(), mode) == modes.end()) modes.push_back(mode);
    Cell& c = cells[{layer, mode}];
    c.diff += num(r, "bitwise_diff").value_or(0);
    c.total += num(r, "total").value_or(0);
    c.max_ulp = std::max(c.max_ulp, num(r, "max_ulp").value_or(0));
    c.any = true;
  }
  const auto ppm = [](const Cell& c) { return c.total > 0 ? 1e6 * c.diff / c.total : 0.0; };
  p.raw("<section id=\"differences\"><h2>Per-layer differences under real and power-of-two scales (C5, C6)</h2>\n"
        "<p>Bitwise difference rate (signed zeros count) and the largest ordered-ulp distance over finite pairs, "
        "arm A against arm B. Under power-of-two scales, layers predicted safe must show zero.</p>\n");
  json rate_sets = json::array(), ulp_sets = json::array();
  for (const std::string& mode : modes) {
    json rate = json::array(), ulp = json::array();
    for (const std::string& layer : layers) {
      const auto it = cells.find({layer, mode});
      rate.push_back(it == cells.end() ? json(nullptr) : json(ppm(it->second)));
      ulp.push_back(it == cells.end() ? json(nullptr) : json(it->second.max_ulp));
    }
    rate_sets.push_back({{"label", mode}, {"data", rate}, {"backgroundColor", mode_colour(mode)}});
    ulp_sets.push_back({{"label", mode}, {"data", ulp}, {"backgroundColor", mode_colour(mode)}});
  }
  const auto bar = [&](json sets, const char* y_title) {
    return json{{"type", "bar"},
                {"data", {{"labels", layers}, {"datasets", std::move(sets)}}},
                {"options",
                 {{"scales",
                   {{"y", {{"beginAtZero", true}, {"title", {{"display", true}, {"text", y_title}}}}},
                    {"x", {{"ticks", {{"autoSkip", true}, {"maxRotation", 60}}}}}}},
                  {"plugins", {{"legend", {{"position", "bottom"}}}}}}}};
  };
  p.chart("Per-layer difference rate (ppm of elements) by scale regime", bar(rate_sets, "differing elements (ppm)"));
  p.chart("Per-layer max ulp distance by scale regime", bar(ulp_sets, "max ulp (bf16, finite pairs)"));
  p.table_start("per-layer table");
  p.raw("<table><thead><tr><th>layer</th>");
  for (const std::string& mode : modes) p.f("<th>{} diff (ppm)</th><th>{} max ulp</th>", html_escape(mode), html_escape(mode));
  p.raw("</tr></thead><tbody>\n");
  for (const std::string& layer : layers) {
    p.f("<tr><td><code>{}</code></td>", html_escape(layer));
    for (const std::string& mode : modes) {
      const auto it = cells.find({layer, mode});
      if (it == cells.end()) {
        p.raw("<td>-</td><td>-</td>");
        continue;
      }
      p.f("<td class=\"{}\">{} ({:.0f} of {:.0f})</td><td>{:.0f}</td>", it->second.diff > 0 ? "nonzero" : "",
          fmt::format("{:.2f}", ppm(it->second)), it->second.diff, it->second.total, it->second.max_ulp);
    }
    p.raw("</tr>\n");
  }
  p.table_section_end();
}

// An FP8 verify (`verify.fp8`): the models each arm declared (the reference), the stage the verdict
// names, and per run the predicted set against the observed one and the outputs off their model.
void fp8_verify_section(Page& p, const json& results) {
  const json& verify = sub(results, "verify");
  const json& fp8 = sub(verify, "fp8");
  const json& runs = sub(verify, "runs");
  if (!fp8.is_object() || !runs.is_array()) return;
  p.raw("<section id=\"fp8-verify\"><h2>FP8: each arm against its declared accumulation model</h2>\n");
  const json& models = sub(fp8, "models");
  const auto model = [&](size_t i) {
    return models.is_array() && models.size() > i && models[i].is_string() ? models[i].get<std::string>() : "?";
  };
  p.f("<p>Reference: the declared models (A: <code>{}</code>, B: <code>{}</code>) on the layers' codes, then each "
      "arm's declared epilogue. {}</p>\n",
      html_escape(model(0)), html_escape(model(1)), html_escape(str(verify, "reference")));
  const std::string stage = str(fp8, "stage");
  const bool all_predicted = std::all_of(runs.begin(), runs.end(), [](const json& r) { return num(r, "predicted_diff").has_value(); });
  if (stage.empty() && !all_predicted) {
    p.raw("<p><span class=\"verdict not-applicable\">not every run was predicted</span> an arm declares no model, or "
          "its record refused it: those runs' differences were not predicted (nothing off a model was found where a "
          "model was declared)</p>\n");
  } else if (stage.empty()) {
    p.raw("<p><span class=\"verdict pass\">every arm on its declared model; predicted set == observed set</span></p>\n");
  } else {
    p.f("<p><span class=\"verdict fail\">the {} stage</span> {}</p>\n", html_escape(stage),
        html_escape(str(fp8, "stage_detail")));
  }
  const auto pair = [](const json& r, const char* key, size_t i) -> std::string {
    const json& v = sub(r, key);
    if (!v.is_array() || v.size() <= i) return "-";
    if (v[i].is_null()) return "-";
    if (v[i].is_string()) return v[i].get<std::string>();
    return v[i].get<int64_t>() < 0 ? "-" : std::to_string(v[i].get<int64_t>());
  };
  p.table_start("FP8 per-run table");
  p.raw("<table><thead><tr><th>layer</th><th>M</th><th>scales</th><th>observed</th><th>predicted</th>"
        "<th>predicted = observed</th><th>models' accumulators differ</th><th>off model A / B</th>"
        "<th>accumulator off A / B</th><th>unmodelled</th></tr></thead><tbody>\n");
  for (const json& r : runs) {
    const double predicted = num(r, "predicted_diff").value_or(-1);
    const double acc_diff = num(r, "model_acc_diff").value_or(-1);
    std::string unmodelled;
    for (size_t i = 0; i < 2; ++i) {
      const std::string why = pair(r, "unmodelled", i);
      if (why != "-") unmodelled += fmt::format("{}: {} ", i ? "B" : "A", why);
    }
    const bool equal = sub(r, "predicted_equals_observed").is_boolean() && sub(r, "predicted_equals_observed").get<bool>();
    p.f("<tr><td><code>{}</code></td><td>{:.0f}</td><td>{}</td><td>{:.0f}</td><td>{}</td><td>{}</td><td>{}</td>"
        "<td>{} / {}</td><td>{} / {}</td><td>{}</td></tr>\n",
        html_escape(str(r, "layer")), num(r, "m").value_or(0), html_escape(str(r, "scales")),
        num(r, "bitwise_diff").value_or(0), predicted < 0 ? "-" : fmt::format("{:.0f}", predicted),
        predicted < 0 ? "-" : (equal ? "yes" : "<span class=\"verdict fail\">NO</span>"),
        acc_diff < 0 ? "-" : fmt::format("{:.0f}", acc_diff), html_escape(pair(r, "formula_mismatch", 0)),
        html_escape(pair(r, "formula_mismatch", 1)), html_escape(pair(r, "acc_mismatch", 0)),
        html_escape(pair(r, "acc_mismatch", 1)), html_escape(unmodelled));
  }
  p.table_section_end();
}

void sweep_section(Page& p, const json& results) {
  const json& sweep = sub(results, "sweep");
  const json& series = sub(sweep, "series");
  if (!series.is_array() || series.empty()) return;
  std::string x = str(sweep, "x");
  if (x.empty()) x = "k";
  p.f("<section id=\"sweep\"><h2>Divergence versus {}</h2>\n<p>{}</p>\n", html_escape(x == "k" ? "K" : x),
      html_escape(str(sweep, "description")));
  json sets = json::array();
  size_t i = 0;
  for (const json& s : series) {
    json pts = json::array();
    if (const json& points = sub(s, "points"); points.is_array()) {
      for (const json& pt : points) {
        const auto xv = num(pt, x.c_str()), d = num(pt, "bitwise_diff"), t = num(pt, "total");
        if (!xv || *xv <= 0 || !d || !t || *t <= 0) continue;
        pts.push_back({{"x", std::log2(*xv)}, {"y", 1e6 * *d / *t}});
      }
    }
    const char* colour = kPalette[i++ % std::size(kPalette)];
    sets.push_back({{"label", str(s, "name")}, {"data", pts}, {"showLine", true}, {"borderColor", colour},
                    {"backgroundColor", colour}, {"pointRadius", 3}});
    // The differences the declared models predicted exactly (FP8 pairs), dashed beside the observed
    // ones: the two lines coincide where every difference is explained.
    json explained = json::array();
    if (const json& points = sub(s, "points"); points.is_array()) {
      for (const json& pt : points) {
        const auto xv = num(pt, x.c_str()), e = num(pt, "explained"), t = num(pt, "total");
        if (xv && *xv > 0 && e && t && *t > 0) explained.push_back({{"x", std::log2(*xv)}, {"y", 1e6 * *e / *t}});
      }
    }
    if (!explained.empty()) {
      sets.push_back({{"label", str(s, "name") + ": predicted by the declared models"}, {"data", explained},
                      {"showLine", true}, {"borderColor", colour}, {"backgroundColor", colour}, {"pointRadius", 2},
                      {"borderDash", {6, 4}}});
    }
  }
  json config = {{"type", "scatter"},
                 {"data", {{"datasets", sets}}},
                 {"options",
                  {{"scales",
                    {{"x", {{"title", {{"display", true}, {"text", x == "k" ? "K (reduction depth)" : x}}}}},
                     {"y", {{"beginAtZero", true}, {"title", {{"display", true}, {"text", "differing elements (ppm)"}}}}}}},
                   {"plugins", {{"legend", {{"position", "bottom"}}}}}}}};
  p.chart(fmt::format("Difference rate (ppm) versus {}", x == "k" ? "K" : x), config, {"x"});
  p.table_start("sweep table");
  p.f("<table><thead><tr><th>series</th><th>{}</th><th>differing</th><th>total</th><th>ppm</th><th>max ulp</th>"
      "<th>explained by the declared models</th></tr></thead><tbody>\n",
      html_escape(x));
  for (const json& s : series) {
    if (const json& points = sub(s, "points"); points.is_array()) {
      for (const json& pt : points) {
        const auto d = num(pt, "bitwise_diff"), t = num(pt, "total");
        const auto e = num(pt, "explained"), of = num(pt, "explained_of");
        const std::string explained =
            !e ? "-"
               : (of && *of > 0 ? fmt::format("{:.2f}% ({} of {})", 100.0 * *e / *of, fmt_num(e), fmt_num(of))
                                : fmt::format("{} (nothing differs)", fmt_num(e)));
        p.f("<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>\n",
            html_escape(str(s, "name")), fmt_num(num(pt, x.c_str())), fmt_num(d), fmt_num(t),
            d && t && *t > 0 ? fmt::format("{:.2f}", 1e6 * *d / *t) : "-", fmt_num(num(pt, "max_ulp")),
            html_escape(explained));
      }
    }
  }
  p.table_section_end();
}

void transfer_section(Page& p, const json& results) {
  const json& t = sub(results, "transfer");
  if (!t.is_object()) return;
  p.f("<section id=\"transfer\"><h2>{}</h2>\n", html_escape(check_heading("C7")));
  if (const json& seq = sub(t, "sequence"); seq.is_object()) {
    p.f("<p>Free-running generations: {} of {} prompts identical; mean tokens until the first divergence {}.</p>\n",
        fmt_num(num(seq, "identical")), fmt_num(num(seq, "prompts")), fmt_num(num(seq, "mean_tokens_until_divergence")));
  }
  const json& rp = sub(t, "replay");
  if (rp.is_object()) {
    const json& auc = sub(rp, "roc_auc");
    const json& ci = sub(auc, "ci");
    const auto ci_at = [&](size_t i) -> std::optional<double> {
      if (ci.is_array() && ci.size() > i && ci[i].is_number()) return ci[i].get<double>();
      return std::nullopt;
    };
    p.f("<p>Teacher-forced replay: {} flips in {} positions over {} prompts (rate {}). ROC-AUC of the reference "
        "margin {} [{}, {}]; average precision {}; held-out Brier skill {}.</p>\n",
        fmt_num(num(rp, "flips")), fmt_num(num(rp, "positions")), fmt_num(num(rp, "prompts")),
        fmt_num(num(rp, "flip_rate"), 5), fmt_num(num(auc, "value"), 3), fmt_num(ci_at(0), 3), fmt_num(ci_at(1), 3),
        fmt_num(num(sub(rp, "average_precision"), "value"), 3), fmt_num(num(sub(rp, "brier"), "skill"), 3));
    const json& bins = sub(sub(rp, "calibration"), "bins");
    if (bins.is_array() && !bins.empty()) {
      json p_pts = json::array(), r_pts = json::array(), lo_pts = json::array(), hi_pts = json::array(),
           iso_pts = json::array();
      for (const json& b : bins) {
        const auto x0 = num(b, "margin_min"), x1 = num(b, "margin_max");
        if (!x0 || !x1) continue;
        const double xc = 0.5 * (*x0 + *x1);
        const json& iv = sub(b, "p_interval");
        p_pts.push_back({{"x", xc}, {"y", num_or_null(num(b, "p_smoothed"))}});
        r_pts.push_back({{"x", xc}, {"y", num_or_null(num(b, "rate"))}});
        if (iv.is_array() && iv.size() == 2 && iv[0].is_number() && iv[1].is_number()) {
          lo_pts.push_back({{"x", xc}, {"y", iv[0]}});
          hi_pts.push_back({{"x", xc}, {"y", iv[1]}});
        }
      }
      if (const json& blocks = sub(sub(rp, "isotonic"), "blocks"); blocks.is_array()) {
        for (const json& b : blocks) {
          const auto lo = num(b, "margin_lo"), hi = num(b, "margin_hi"), pv = num(b, "p");
          if (!lo || !hi || !pv) continue;
          iso_pts.push_back({{"x", *lo}, {"y", *pv}});
          iso_pts.push_back({{"x", *hi}, {"y", *pv}});
        }
      }
      // Margins span orders of magnitude and flips crowd at the small end: a log axis when every
      // plotted margin is positive and the range is wide, else a linear one.
      double x_min = INFINITY, x_max = 0;
      for (const json* set : {&p_pts, &r_pts, &lo_pts, &hi_pts, &iso_pts}) {
        for (const json& pt : *set) {
          x_min = std::min(x_min, pt["x"].get<double>());
          x_max = std::max(x_max, pt["x"].get<double>());
        }
      }
      const bool log_x = x_min > 0 && x_max / x_min >= 50;
      json x_axis = {{"title", {{"display", true}, {"text", "logit margin of the reference arm (top-1 - top-2)"}}}};
      if (log_x) x_axis["type"] = "logarithmic";
      json config = {
          {"type", "scatter"},
          {"data",
           {{"datasets",
             {{{"label", "Beta(1,1) interval, upper"}, {"data", hi_pts}, {"showLine", true}, {"pointRadius", 0},
               {"borderColor", "rgba(0,114,178,0.3)"}, {"fill", false}, {"order", 4}},
              {{"label", "Beta(1,1) interval, lower"}, {"data", lo_pts}, {"showLine", true}, {"pointRadius", 0},
               {"borderColor", "rgba(0,114,178,0.3)"}, {"backgroundColor", "rgba(0,114,178,0.15)"}, {"fill", "-1"},
               {"order", 3}},
              {{"label", "calibrated flip probability (per bin)"}, {"data", p_pts}, {"showLine", true},
               {"borderColor", "#0072B2"}, {"backgroundColor", "#0072B2"}, {"pointRadius", 4}, {"order", 1}},
              {{"label", "observed flip rate"}, {"data", r_pts}, {"showLine", false}, {"pointStyle", "rect"},
               {"pointRadius", 4}, {"borderWidth", 2}, {"borderColor", "#D55E00"}, {"backgroundColor", "#FFFFFF"},
               {"order", 0}},
              {{"label", "isotonic (sensitivity)"}, {"data", iso_pts}, {"showLine", true}, {"pointRadius", 0},
               {"borderColor", "#009E73"}, {"borderDash", {5, 3}}, {"order", 2}}}}}},
          {"options",
           {{"scales",
             {{"x", x_axis},
              {"y", {{"min", 0}, {"title", {{"display", true}, {"text", "flip probability"}}}}}}},
            {"plugins", {{"legend", {{"position", "bottom"}}}}}}}};
      p.chart("Flip probability versus margin, with the calibration bins", config);
      p.table_start("calibration bins");
      p.raw("<table><thead><tr><th>margin range</th><th>support</th><th>flips</th><th>rate</th><th>p (smoothed)</th>"
            "<th>interval</th></tr></thead><tbody>\n");
      for (const json& b : bins) {
        const json& iv = sub(b, "p_interval");
        const auto iv_at = [&](size_t i) -> std::optional<double> {
          if (iv.is_array() && iv.size() > i && iv[i].is_number()) return iv[i].get<double>();
          return std::nullopt;
        };
        p.f("<tr><td>[{}, {}]</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>[{}, {}]</td></tr>\n",
            fmt_num(num(b, "margin_min"), 3), fmt_num(num(b, "margin_max"), 3), fmt_num(num(b, "support")),
            fmt_num(num(b, "flips")), fmt_num(num(b, "rate"), 4), fmt_num(num(b, "p_smoothed"), 4), fmt_num(iv_at(0), 4),
            fmt_num(iv_at(1), 4));
      }
      p.raw("</tbody></table>");
      p.table_end();
    }
  }
  p.raw("</section>\n");
}

// Chart.js inlined into a <script>: the only sequences that could end the element or switch
// the HTML parser into its escaped states are neutralised (neither occurs in the Debian build).
std::string inline_script(const std::string& code) {
  std::string out;
  out.reserve(code.size() + 16);
  for (size_t i = 0; i < code.size(); ++i) {
    out += code[i];
    if (code[i] != '<' || i + 1 >= code.size()) continue;
    const std::string_view rest = std::string_view(code).substr(i + 1, 7);
    const bool closing = rest.size() == 7 && rest[0] == '/' &&
                         std::equal(rest.begin() + 1, rest.end(), "script", [](char c, char d) {
                           return std::tolower(static_cast<unsigned char>(c)) == d;
                         });
    if (closing || rest.substr(0, 3) == "!--") out += '\\';
  }
  return out;
}

}  // namespace

// The page's sections, in order: the verdicts and figures first, the provenance tables (long) last.
// A check's own section is its row here, the function that draws it from the results JSON (each draws
// nothing when its part of the results is absent).
using ReportSection = void (*)(Page& p, const json& results);
constexpr ReportSection kSections[] = {
    verdict_section,      // every check's verdict (C0-C8)
    arms_section,         // the arms and what they declared
    headroom_section,     // C2
    differences_section,  // C5, C6
    fp8_verify_section,   // C4-C6 on an FP8 pair
    sweep_section,        // the FP8 depth sweep
    transfer_section,     // C7
    invariance_section,   // C8 (html_invariance.cpp)
    manifests_section,    // C0's manifests and their join
};

std::string render_report(const json& results, const ReportOptions& options) {
  validate(results);
  std::string chartjs_path, chartjs, charts_note;
  if (options.charts) {
    chartjs_path = options.chartjs_path.empty() ? find_chartjs() : options.chartjs_path;
    std::error_code ec;
    if (!chartjs_path.empty() && std::filesystem::is_regular_file(chartjs_path, ec)) {
      chartjs = read_file(chartjs_path);
    } else {
      charts_note = chartjs_path.empty()
                        ? "Charts were omitted: Chart.js was not found (install the Debian package libjs-chart.js, or "
                          "point QCONFORM_CHARTJS at chart.min.js). The tables below carry every number."
                        : fmt::format("Charts were omitted: Chart.js was not found at {} (QCONFORM_CHARTJS or the "
                                      "libjs-chart.js package). The tables below carry every number.",
                                      chartjs_path);
    }
  } else {
    charts_note = "Charts were turned off for this report; the tables below carry every number.";
  }
  Page page(!chartjs.empty());

  // Header: the overall outcome first.
  const json& checks = sub(results, "checks");
  std::vector<std::string> failed;
  size_t passed = 0;
  if (checks.is_array()) {
    for (const json& c : checks) {
      if (str(c, "verdict") == "fail") failed.push_back(str(c, "id"));
      passed += str(c, "verdict") == "pass";
    }
  }
  const bool unverified = (sub(results, "unverified").is_boolean() && sub(results, "unverified").get<bool>()) ||
                          (sub(sub(sub(results, "manifests"), "join"), "verified").is_boolean() &&
                           !sub(sub(sub(results, "manifests"), "join"), "verified").get<bool>());
  std::string title = str(results, "title");
  if (title.empty()) title = "qconform conformance report";
  page.f("<h1>{}</h1>\n<p class=\"muted\">created {} &middot; qconform {} &middot; results schema {}</p>\n",
         html_escape(title), html_escape(str(results, "created").empty() ? "-" : str(results, "created")),
         html_escape(str(results, "project_version").empty() ? "-" : str(results, "project_version")),
         kSchemaVersion);
  answer_banner(page, results);
  if (checks.is_array() && !checks.empty()) {
    if (failed.empty()) {
      page.f("<div class=\"banner pass\">No check failed ({} passed of {}; the others say what they could not "
             "decide).</div>\n",
             passed, checks.size());
    } else {
      std::vector<std::string> esc;
      for (const std::string& id : failed) esc.push_back(html_escape(id));
      page.f("<div class=\"banner fail\">{} check{} failed: {}.</div>\n", failed.size(), failed.size() == 1 ? "" : "s",
             fmt::join(esc, ", "));
    }
  }
  if (unverified) {
    page.raw("<div class=\"banner unverified\">UNVERIFIED: these results were produced with --allow-unverified; "
             "the identity contract (C0) did not verify that the runs differ only in the declared treatment.</div>\n");
  }
  if (!charts_note.empty()) page.f("<p class=\"note\" id=\"qc-charts-note\">{}</p>\n", html_escape(charts_note));
  page.raw("<p class=\"note\" id=\"qc-js-errors\"></p>\n");

  for (const ReportSection section : kSections) section(page, results);

  std::string html;
  html.reserve(page.text().size() + chartjs.size() + 16384);
  html += "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n"
          "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
          // No request may leave the file: scripts and styles inline only, images as data URLs.
          "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; script-src 'unsafe-inline'; "
          "style-src 'unsafe-inline'; img-src data:\">\n";
  html += fmt::format("<title>{}</title>\n<style>\n{}</style>\n</head>\n", html_escape(title), report_css());
  html += fmt::format("<body data-charts-expected=\"{}\" data-charts-status=\"{}\" data-js-errors=\"0\">\n<main>\n",
                      page.charts_json().size(), page.charts() ? "pending" : "omitted");
  html += page.text();
  html += fmt::format("<footer class=\"muted\"><p>Self-contained report written by qconform; {}.</p></footer>\n</main>\n",
                      page.charts() ? html_escape(fmt::format("charts by Chart.js inlined from {}", chartjs_path))
                                    : "no charts");
  if (page.charts()) {
    html += "<script type=\"application/json\" id=\"qc-chart-specs\">" + json_for_script(page.charts_json()) +
            "</script>\n";
    html += "<script>\n" + inline_script(chartjs) + "\n</script>\n";
    html += fmt::format("<script>\n{}</script>\n", report_js());
  }
  html += "</body></html>\n";
  return html;
}

}  // namespace qc
