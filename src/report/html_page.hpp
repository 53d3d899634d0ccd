// The HTML report's page builder and the tolerant accessors every section reads the results with
// (a missing field shows as "-", never aborts the report), shared by html_report.cpp (the figures
// and the page) and html_sections.cpp (the answer, the verdicts and the provenance tables).
// Internal to src/report/.
#pragma once

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "qconform/report.hpp"

namespace qc::html {

using nlohmann::json;

// ---- tolerant accessors: a missing sub-field shows as "-", never aborts the report ----------

inline std::string str(const json& j, const char* key) {
  if (!j.is_object() || !j.contains(key)) return "";
  const json& v = j.at(key);
  if (v.is_string()) return v.get<std::string>();
  if (v.is_null()) return "";
  return v.dump();
}

inline std::optional<double> num(const json& j, const char* key) {
  if (!j.is_object() || !j.contains(key) || !j.at(key).is_number()) return std::nullopt;
  return j.at(key).get<double>();
}

inline const json& sub(const json& j, const char* key) {
  static const json kNull;
  return j.is_object() && j.contains(key) ? j.at(key) : kNull;
}

inline std::string fmt_num(std::optional<double> v, int precision = 2) {
  if (!v) return "-";
  if (std::isfinite(*v) && *v == std::floor(*v) && std::fabs(*v) < 1e15) return fmt::format("{:.0f}", *v);
  return fmt::format("{:.{}f}", *v, precision);
}

inline json num_or_null(std::optional<double> v) { return v && std::isfinite(*v) ? json(*v) : json(nullptr); }

inline std::string verdict_class(const std::string& v) {
  if (v == "pass" || v == "fail" || v == "not-applicable" || v == "outside-jurisdiction" || v == "reported") return v;
  return "unknown";
}

inline std::string badge(const std::string& verdict) {
  return fmt::format("<span class=\"verdict {}\">{}</span>", verdict_class(verdict), html_escape(verdict));
}

inline std::string pre_json(const json& v, size_t limit = 20000) {
  std::string s = v.dump(1, ' ', false, json::error_handler_t::replace);
  if (s.size() > limit) s = s.substr(0, limit) + fmt::format("\n... ({} more characters in results.json)", s.size() - limit);
  return "<pre>" + html_escape(s) + "</pre>";
}

// Colours (colour-blind safe, Okabe–Ito) for the scale regimes and series.
inline constexpr const char* kPalette[] = {"#0072B2", "#E69F00", "#009E73", "#CC79A7",
                                           "#56B4E9", "#D55E00", "#F0E442", "#000000"};

inline std::string mode_colour(const std::string& mode) {
  if (mode == "real") return kPalette[0];
  if (mode == "pow2-channel") return kPalette[1];
  if (mode == "pow2-layer") return kPalette[2];
  return kPalette[3];
}

class Page {
 public:
  explicit Page(bool charts) : charts_(charts) {}

  void raw(std::string_view s) { out_ += s; }
  template <typename... Args>
  void f(fmt::format_string<Args...> format, Args&&... args) {
    out_ += fmt::format(format, std::forward<Args>(args)...);
  }

  // A figure: a canvas that the script fills from `config`. `log2_axes` get "2^k" tick labels.
  void chart(const std::string& caption, json config, std::vector<std::string> log2_axes = {}, int height = 360) {
    if (!charts_) return;
    const std::string id = fmt::format("qc-chart-{}", charts_json_.size());
    config["options"]["animation"] = false;
    config["options"]["responsive"] = true;
    config["options"]["maintainAspectRatio"] = false;
    charts_json_.push_back({{"id", id}, {"config", std::move(config)}, {"log2_axes", log2_axes}});
    f("<figure><div class=\"chart-box\" style=\"height:{}px\"><canvas id=\"{}\" role=\"img\" aria-label=\"{}\">"
      "</canvas></div><figcaption>{}</figcaption></figure>\n",
      height, id, html_escape(caption), html_escape(caption));
  }
  // A table that sits under a chart: collapsed when the chart is there, open when it is not.
  void table_start(const std::string& label) {
    f("<details class=\"data\"{}><summary>{}</summary>\n", charts_ ? "" : " open", html_escape(label));
  }
  void table_end() { raw("</details>\n"); }
  // The end of a section whose last part is a table_start table (its tbody open).
  void table_section_end() {
    raw("</tbody></table>");
    table_end();
    raw("</section>\n");
  }

  bool charts() const { return charts_; }
  const json& charts_json() const { return charts_json_; }
  std::string& text() { return out_; }

 private:
  bool charts_;
  std::string out_;
  json charts_json_ = json::array();
};


// ---- sections of html_sections.cpp ---------------------------------------------------------------

// A section heading for a check: its title from the check table (`qconform checks`).
std::string check_heading(std::string_view id);
// The interchangeability answer and the prompts' warning: the banner above everything else.
void answer_banner(Page& p, const json& results);
void verdict_section(Page& p, const json& results);
void arms_section(Page& p, const json& results);
void manifests_section(Page& p, const json& results);
// C8 (html_invariance.cpp): `results.invariance` of conform --invariance-mates; nothing when absent.
void invariance_section(Page& p, const json& results);

}  // namespace qc::html
