// The report: one self-contained HTML file, viewable with no network, from the results JSON
// (layout and every field: docs/results-schema.md, `schema_version` 1).
//
// The verdict table (check, verdict, evidence, points-to, exclusions), the arms with the kernel
// identity each one reported, the identity contract, and figures: per-layer accumulator
// headroom against 2^24 with the data-independent bound, per-layer difference rate and max ulp
// under real and power-of-two scales, divergence versus K (sweep section), flip probability
// versus margin with the calibration bins (transfer section). Charts are drawn by Chart.js,
// inlined from the Debian package `libjs-chart.js`; without it the report has tables only and
// says so. Every string from the results (layer names, kernel names, notes) is escaped.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <string_view>

namespace qc {

struct ReportOptions {
  // Chart.js to inline; empty: `find_chartjs()`. A path that does not exist means no charts.
  std::string chartjs_path;
  bool charts = true;  // false: tables only (the note says charts were turned off)
};

// `$QCONFORM_CHARTJS` when set (even to a missing file: then charts are omitted), else the first
// of /usr/share/javascript/chart.js/chart.umd.js, chart.min.js, chart.js that exists; "" if none.
std::string find_chartjs();

// Renders the report. Throws `qc::Error` (input) when `results` is not a results object of
// schema version 1, a section has the wrong JSON type, or a `kind` names another document (the
// spellings of earlier releases are accepted), naming the field.
std::string render_report(const nlohmann::json& results, const ReportOptions& options = {});

// `&`, `<`, `>`, `"`, `'` as character references: safe in element content and quoted attributes.
std::string html_escape(std::string_view text);
// JSON text safe inside a <script> element: `<`, `>`, `&`, U+2028 and U+2029 as \u escapes.
std::string json_for_script(const nlohmann::json& value);

}  // namespace qc
