// The report's stylesheet and chart driver, embedded at build time from src/report/assets/
// (report.css, report.js) by cmake/embed_assets.cmake into <build>/generated/report/assets.cpp.
// Edit the asset files; the build regenerates the embedding when they change.
#pragma once

#include <string_view>

namespace qc {

// The bytes of src/report/assets/report.css, exactly.
std::string_view report_css();
// The bytes of src/report/assets/report.js, exactly: builds each chart from its JSON spec, marks
// every canvas that drew non-blank pixels, and records the outcome on <body>
// (`data-charts-status`, `data-charts-rendered`, `data-js-errors`) and in the title, for people
// and for the headless browser test alike.
std::string_view report_js();

}  // namespace qc
