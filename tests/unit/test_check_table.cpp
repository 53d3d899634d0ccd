// The check table (include/qconform/check.hpp): every CheckResult is built from its row, and the
// Markdown section of docs/checks.md is generated from it (ctest docs_checks_table compares them).
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "synth/synth.hpp"
#include "checks/verify.hpp"
#include "qconform/arm.hpp"
#include "qconform/check.hpp"
#include "qconform/error.hpp"

namespace qc {
namespace {

TEST(CheckTable, HoldsC0ToC8InOrderWithEveryField) {
  const std::vector<CheckSpec>& table = check_table();
  ASSERT_EQ(table.size(), 9u);
  for (size_t i = 0; i < table.size(); ++i) {
    const CheckSpec& s = table[i];
    EXPECT_EQ(s.id, "C" + std::to_string(i));
    EXPECT_FALSE(s.title.empty()) << s.id;
    EXPECT_FALSE(s.proves.empty()) << s.id;
    EXPECT_FALSE(s.points_to.empty()) << s.id;
    // The design: C0–C5 have falsifiable outcomes, C6 and C7 are tolerance-based; C8 (invariance) is falsifiable.
    EXPECT_EQ(s.falsifiable, i <= 5 || i == 8) << s.id;
    EXPECT_EQ(&check_spec(s.id), &s) << s.id;
  }
}

TEST(CheckTable, MakeCheckFillsTheRowAndRefusesAnUnknownId) {
  for (const CheckSpec& s : check_table()) {
    const CheckResult c = make_check(s.id, Verdict::fail);
    EXPECT_EQ(c.id, s.id);
    EXPECT_EQ(c.title, s.title);
    EXPECT_EQ(c.points_to, s.points_to);
    EXPECT_EQ(c.exclusions, s.exclusions);
    EXPECT_EQ(c.falsifiable, s.falsifiable);
    EXPECT_EQ(c.verdict, Verdict::fail);
    EXPECT_TRUE(c.summary.empty());
  }
  EXPECT_THROW(make_check("C9", Verdict::pass), Error);
  EXPECT_THROW(make_check("c4", Verdict::pass), Error);
}

TEST(CheckTable, MarkdownHasOneRowPerCheckAndEscapesPipes) {
  const std::string md = check_table_markdown();
  std::vector<std::string> lines;
  for (size_t at = 0; at < md.size();) {
    const size_t nl = md.find('\n', at);
    ASSERT_NE(nl, std::string::npos) << "the section ends with a newline";
    lines.push_back(md.substr(at, nl - at));
    at = nl + 1;
  }
  ASSERT_EQ(lines.size(), 2 + check_table().size()) << md;
  for (size_t i = 0; i < lines.size(); ++i) {
    // Six cell borders per line: a `|` inside a cell (C2's `|acc|`) must be escaped.
    int borders = 0;
    for (size_t k = 0; k < lines[i].size(); ++k) borders += lines[i][k] == '|' && (k == 0 || lines[i][k - 1] != '\\');
    EXPECT_EQ(borders, 6) << lines[i];
    if (i >= 2) {
      const CheckSpec& s = check_table()[i - 2];
      EXPECT_EQ(lines[i].rfind("| " + s.id + " " + s.title + " |", 0), 0u) << lines[i];
    }
  }
  EXPECT_NE(md.find("\\|acc\\|"), std::string::npos) << md;
}

// What verify reports carries the words of the table (C6's points_to names a predicted INT32
// overflow instead when one explains the differences; not the case here).
TEST(CheckTable, VerifyResultsCarryTheirRows) {
  SynthOptions o;
  o.shapes = "tiny";
  o.m = 16;
  o.seed = 11;
  const auto layers = synth_operands(o);
  const PredictionSet p = predict(layers, "mem", "sha256:none");
  auto a = make_arm("cpu:vllm-cutlass"), b = make_arm("mutant:bf16-truncate");
  const VerifyResult r = verify_layers(*a, *b, layers, p, VerifyOptions{});
  ASSERT_EQ(r.checks.size(), 5u);
  for (size_t i = 0; i < r.checks.size(); ++i) {
    const CheckResult& c = r.checks[i];
    const CheckSpec& s = check_spec("C" + std::to_string(i + 2));
    EXPECT_EQ(c.id, s.id);
    EXPECT_EQ(c.title, s.title);
    EXPECT_EQ(c.points_to, s.points_to) << c.id;
    EXPECT_EQ(c.exclusions, s.exclusions) << c.id;
    EXPECT_EQ(c.falsifiable, s.falsifiable) << c.id;
  }
  // The mutant makes C5 fail: the words a user acts on come from the table.
  EXPECT_EQ(r.checks[3].verdict, Verdict::fail) << r.checks[3].summary;
}

}  // namespace
}  // namespace qc
