// The report's CSS and JavaScript are embedded at build time (cmake/embed_assets.cmake): the
// embedded bytes must be the asset files' bytes, and the report must carry them verbatim.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <string>

#include "core/fileio.hpp"
#include "qconform/report.hpp"
#include "report/assets.hpp"

namespace qc {
namespace {

std::string asset(const char* name) { return read_file(std::string(QC_SOURCE_DIR) + "/src/report/assets/" + name); }

// The first index where two byte strings differ, with both bytes, so a stale embedding names itself.
std::string first_difference(std::string_view a, std::string_view b) {
  size_t i = 0;
  while (i < a.size() && i < b.size() && a[i] == b[i]) ++i;
  if (i == a.size() && i == b.size()) return "identical";
  const auto at = [&](std::string_view s) {
    return i < s.size() ? fmt::format("0x{:02x}", static_cast<unsigned char>(s[i])) : std::string("end");
  };
  return fmt::format("first difference at byte {}: embedded {}, file {} (sizes {} and {})", i, at(a), at(b), a.size(),
                     b.size());
}

TEST(ReportAssets, EmbeddedBytesEqualTheFiles) {
  const std::string css = asset("report.css"), js = asset("report.js");
  ASSERT_FALSE(css.empty());
  ASSERT_FALSE(js.empty());
  EXPECT_TRUE(report_css() == css) << "report.css: " << first_difference(report_css(), css);
  EXPECT_TRUE(report_js() == js) << "report.js: " << first_difference(report_js(), js);
}

TEST(ReportAssets, ReportCarriesThemVerbatim) {
  // A results object with nothing but its version: tables only, no charts, so no script.
  const std::string tables = render_report(nlohmann::json{{"schema_version", 1}}, ReportOptions{"", false});
  EXPECT_NE(tables.find("<style>\n" + asset("report.css") + "</style>\n"), std::string::npos);
  EXPECT_EQ(tables.find("<script>"), std::string::npos);
}

}  // namespace
}  // namespace qc
