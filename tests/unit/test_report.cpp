// The HTML report: escaping of every user-controlled string, the sections and figures that the
// results call for, the tables-only fallback without Chart.js, and strict schema errors. The
// browser-side checks (no console errors, every figure drawn) are in
// tests/peer/test_report_browser.py.
#include <gtest/gtest.h>

#include <cctype>
#include <filesystem>
#include <regex>

#include "../tools/report_sample.hpp"
#include "input_error.hpp"
#include "checks/identify.hpp"
#include "qconform/arm.hpp"
#include "qconform/check.hpp"
#include "qconform/error.hpp"
#include "qconform/report.hpp"

namespace qc {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

size_t count(const std::string& text, const std::string& needle) {
  size_t n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

class ReportTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new fs::path(fs::temp_directory_path() / fmt::format("qc_report_{}", ::getpid()));
    results_ = new json(test::build_sample_results(dir_->string(), "mutant:extra-bf16-rounding", /*hostile=*/true));
  }
  static void TearDownTestSuite() {
    fs::remove_all(*dir_);
    delete results_;
    delete dir_;
  }
  static fs::path* dir_;
  static json* results_;
};
fs::path* ReportTest::dir_ = nullptr;
json* ReportTest::results_ = nullptr;

TEST(ReportEscape, HtmlEscape) {
  // Expected strings written out by hand from the HTML character references.
  EXPECT_EQ(html_escape("<a href=\"x\">Tom & Jerry's</a>"),
            "&lt;a href=&quot;x&quot;&gt;Tom &amp; Jerry&#39;s&lt;/a&gt;");
  EXPECT_EQ(html_escape("model.layers.0.q_proj"), "model.layers.0.q_proj");
  EXPECT_EQ(html_escape(""), "");
  EXPECT_EQ(html_escape("\xc3\xa9"), "\xc3\xa9");  // UTF-8 passes through
}

TEST(ReportEscape, JsonForScript) {
  const json v = {{"name", "</script><script>alert(1)</script>"}, {"amp", "a&b"}, {"ls", "\xe2\x80\xa8"}, {"x", 1.5}};
  const std::string s = json_for_script(v);
  EXPECT_EQ(s.find('<'), std::string::npos) << s;
  EXPECT_EQ(s.find('>'), std::string::npos) << s;
  EXPECT_EQ(s.find('&'), std::string::npos) << s;
  EXPECT_EQ(s.find("\xe2\x80\xa8"), std::string::npos) << s;
  EXPECT_EQ(json::parse(s), v);  // still the same JSON
}

TEST_F(ReportTest, HostileStringsAreEscaped) {
  ReportOptions o;
  o.chartjs_path = "/nonexistent/chart.js";
  for (const bool charts : {false, true}) {
    if (charts) o.chartjs_path = find_chartjs();
    if (charts && o.chartjs_path.empty()) continue;
    const std::string html = render_report(*results_, o);
    EXPECT_EQ(html.find(test::kHostileLayer), std::string::npos) << "raw layer name in the page (charts=" << charts << ")";
    EXPECT_EQ(html.find(test::kHostileText), std::string::npos) << "raw summary in the page (charts=" << charts << ")";
    EXPECT_NE(html.find(html_escape(test::kHostileLayer)), std::string::npos);
    EXPECT_NE(html.find(html_escape(test::kHostileText)), std::string::npos);
    // The only <script> elements are ours: specs (JSON), Chart.js and the driver.
    EXPECT_EQ(count(html, "<script"), charts ? 3u : 0u);
    EXPECT_EQ(count(html, "</script>"), charts ? 3u : 0u);
  }
}

TEST_F(ReportTest, SectionsAndFigures) {
  const std::string chartjs = find_chartjs();
  if (chartjs.empty()) GTEST_SKIP() << "SKIPPED: Chart.js not installed (Debian package libjs-chart.js)";
  ReportOptions o;
  o.chartjs_path = chartjs;
  const std::string html = render_report(*results_, o);
  // One self-contained file: no external reference of any kind.
  EXPECT_FALSE(std::regex_search(html, std::regex(R"((src|href)\s*=\s*["']?(https?:)?//)"))) << "external reference";
  EXPECT_EQ(count(html, "<link"), 0u);
  // Figures: headroom, difference rate, max ulp, sweep, transfer.
  EXPECT_EQ(count(html, "<canvas id=\"qc-chart-"), 5u);
  EXPECT_NE(html.find("data-charts-expected=\"5\""), std::string::npos);
  EXPECT_NE(html.find("Chart.js v"), std::string::npos) << "Chart.js not inlined";
  // Every check appears in the verdict table with its verdict's colour class.
  for (const json& c : (*results_)["checks"]) {
    const std::string id = c["id"].get<std::string>(), verdict = c["verdict"].get<std::string>();
    EXPECT_NE(html.find(fmt::format("<b>{}</b>", id)), std::string::npos) << id;
    EXPECT_NE(html.find(fmt::format("<tr class=\"row-{}\"><td><b>{}</b>", verdict, id)), std::string::npos) << id;
  }
  // The mutant arm fails somewhere, and the banner says which checks.
  EXPECT_NE(html.find("banner fail"), std::string::npos);
  // The arms and the kernel each reported.
  for (const json& a : (*results_)["arms"]) {
    EXPECT_NE(html.find(html_escape(a["record"]["kernel"].get<std::string>())), std::string::npos);
  }
  for (const char* id : {"id=\"verdicts\"", "id=\"arms\"", "id=\"identity\"", "id=\"headroom\"", "id=\"differences\"",
                         "id=\"sweep\"", "id=\"transfer\""}) {
    EXPECT_NE(html.find(id), std::string::npos) << id;
  }
}

// The check sections are headed by the check table's titles (the words of `qconform checks`, the
// JSON and docs/checks.md), not by text of their own.
TEST_F(ReportTest, CheckSectionHeadingsComeFromTheCheckTable) {
  ReportOptions o;
  o.charts = false;
  const std::string html = render_report(*results_, o);
  for (const char* id : {"C0", "C2", "C7"}) {
    std::string title = check_spec(id).title;
    ASSERT_FALSE(title.empty()) << id;
    title[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(title[0])));
    EXPECT_NE(html.find(fmt::format("<h2>{} ({})", title, id)), std::string::npos)
        << id << ": no heading `" << title << " (" << id << ")` in the report";
  }
}

TEST_F(ReportTest, TablesOnlyWithoutChartJs) {
  ReportOptions o;
  o.chartjs_path = (*dir_ / "no-such-chart.js").string();
  const std::string html = render_report(*results_, o);
  EXPECT_NE(html.find("Charts were omitted: Chart.js was not found"), std::string::npos);
  EXPECT_EQ(count(html, "<canvas"), 0u);
  EXPECT_EQ(count(html, "<script"), 0u);
  EXPECT_NE(html.find("data-charts-status=\"omitted\""), std::string::npos);
  // The numbers are all still there: one headroom row per predicted layer.
  const size_t layers = (*results_)["predictions"]["layers"].size();
  const size_t start = html.find("id=\"headroom\""), end = html.find("</section>", start);
  ASSERT_NE(start, std::string::npos);
  EXPECT_EQ(count(html.substr(start, end - start), "<tr><td><code>"), layers);
  // The environment override is honoured.
  ::setenv("QCONFORM_CHARTJS", o.chartjs_path.c_str(), 1);
  EXPECT_EQ(find_chartjs(), o.chartjs_path);
  EXPECT_NE(render_report(*results_).find("Charts were omitted"), std::string::npos);
  ::unsetenv("QCONFORM_CHARTJS");
}

TEST_F(ReportTest, MinimalAndUnverified) {
  // Only the schema version: a valid, empty report.
  const std::string empty = render_report(json{{"schema_version", 1}});
  EXPECT_NE(empty.find("No checks in these results"), std::string::npos);
  // An unverified join is shouted at the top.
  json r = {{"schema_version", 1}, {"unverified", true}, {"checks", json::array()}};
  EXPECT_NE(render_report(r).find("UNVERIFIED"), std::string::npos);
  r["unverified"] = false;
  EXPECT_EQ(render_report(r).find("UNVERIFIED"), std::string::npos);
}

TEST_F(ReportTest, SchemaErrorsNameTheField) {
  const auto expect_error = [](const json& r, const std::string& field) {
    SCOPED_TRACE("results with a bad `" + field + "`");
    const std::string msg = test::input_error([&] { render_report(r); });
    EXPECT_NE(msg.find("`" + field + "`"), std::string::npos) << msg;
  };
  expect_error(json{{"checks", json::array()}}, "schema_version");
  expect_error(json{{"schema_version", 2}}, "schema_version");
  expect_error(json{{"schema_version", "1"}}, "schema_version");
  expect_error(json{{"schema_version", 1}, {"checks", json::object()}}, "checks");
  expect_error(json{{"schema_version", 1}, {"verify", json::array()}}, "verify");
  expect_error(json{{"schema_version", 1}, {"verify", {{"runs", 3}}}}, "verify.runs");
  expect_error(json{{"schema_version", 1}, {"sweep", {{"series", "x"}}}}, "sweep.series");
  EXPECT_THROW(render_report(json::array()), Error);
}

TEST_F(ReportTest, ArmsShowTheirFormulaDeclaredIdentifiedOrNone) {
  json r = *results_;
  ASSERT_TRUE(r["verify"]["arms"].is_array() && r["verify"]["arms"].size() == 2);
  json arms = r["verify"]["arms"];
  // Arm B as conform records an arm it identified: the summary of a real identify run.
  auto triton = make_arm("cpu:vllm-triton");
  const IdentifyResult id = identify(*triton);
  ASSERT_EQ(id.verdict, "identified") << describe(id);
  arms[1]["formula"] = identify_summary(id);
  arms[0]["formula"] = {{"source", "declared"}, {"declared", "vllm-cutlass"}, {"formula", "bf16(rn32(sa * rn32(f32(acc) * sw)))"}};
  r["arms"] = arms;
  const std::string html = render_report(r);
  const size_t at = html.find("<section id=\"arms\">");
  ASSERT_NE(at, std::string::npos);
  const std::string section = html.substr(at, html.find("</section>", at) - at);
  EXPECT_NE(section.find("<th>formula</th>"), std::string::npos);
  EXPECT_NE(section.find(html_escape(id.formula)), std::string::npos) << section;
  EXPECT_NE(section.find(fmt::format("{} probes", id.probes.size())), std::string::npos) << section;
  EXPECT_NE(section.find(fmt::format("held-out {}/{} explained", id.matching, id.outputs)), std::string::npos) << section;
  EXPECT_NE(section.find("declared for C1&ndash;C6 as <code>vllm-triton</code>"), std::string::npos) << section;
  EXPECT_NE(section.find("declared: <code>vllm-cutlass</code>"), std::string::npos) << section;

  // An ambiguous identification: the classes and the operand that would separate them, and that
  // conform went on undeclared; an arm with no formula at all says so.
  arms[1]["formula"] = {{"source", "identify"},
                        {"verdict", "ambiguous"},
                        {"probes", 7},
                        {"heldout", {{"outputs", 100}, {"matching", 100}}},
                        {"reason", "2 classes agree <on every probe>"},
                        {"survivors", {"bf16(rn32(sa * rn32(f32(acc) * sw)))", "bf16(rn32(sa * rn32(f32_rz(acc) * sw)))"}},
                        {"separation", {{{"summary", "would separate: acc=16777219 gives 0x3c00 vs 0x3bff"}}}}};
  arms[0]["formula"] = {{"source", "none"}, {"reason", "declares no formula; not identified (--no-identify)"}};
  r["arms"] = arms;
  const std::string html2 = render_report(r);
  EXPECT_NE(html2.find("ambiguous</span>"), std::string::npos);
  EXPECT_NE(html2.find("2 classes agree &lt;on every probe&gt;"), std::string::npos);
  EXPECT_NE(html2.find("<code>bf16(rn32(sa * rn32(f32_rz(acc) * sw)))</code>"), std::string::npos);
  EXPECT_NE(html2.find("would separate: acc=16777219 gives 0x3c00 vs 0x3bff"), std::string::npos);
  EXPECT_NE(html2.find("without a declared formula for this arm"), std::string::npos);
  EXPECT_NE(html2.find("none: declares no formula; not identified (--no-identify)"), std::string::npos);
}

}  // namespace
}  // namespace qc
