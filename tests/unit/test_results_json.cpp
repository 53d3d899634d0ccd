// The results envelope (src/core/results_json.hpp): one `schema_version`, one `kind` rule
// (`qconform-<name>`), old spellings accepted where documents are read back, and every writer
// that goes through it. Expected kinds are written out by hand from docs/results-schema.md.
// Run: ./build/tests/qconform_unit_tests --gtest_filter='ResultsJson*'
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "core/fileio.hpp"
#include "core/results_json.hpp"
#include "qconform/error.hpp"
#include "qconform/report.hpp"
#include "stats/transfer.hpp"
#include "input_error.hpp"

namespace qc {
namespace {

using nlohmann::json;

const std::string kTransferData = std::string(QC_SOURCE_DIR) + "/tests/data/transfer/";

using test::input_error;

TEST(ResultsJson, KindRule) {
  EXPECT_EQ(kSchemaVersion, 1);
  EXPECT_EQ(results_kind("verify"), "qconform-verify");
  EXPECT_EQ(results_kind("layer-result"), "qconform-layer-result");
  // Not names under the rule: a writer that tried would be a programming error, not bad input.
  for (const char* bad : {"", "Verify", "verify.json", "-verify", "verify-", "layer--result", "transfer_json"}) {
    EXPECT_THROW(results_kind(bad), Error) << bad;
  }
}

TEST(ResultsJson, Envelope) {
  const json j = results_envelope("boundary", {{"checked", true}});
  EXPECT_EQ(j, (json{{"schema_version", 1}, {"kind", "qconform-boundary"}, {"checked", true}}));
  EXPECT_EQ(results_envelope("sweep"), (json{{"schema_version", 1}, {"kind", "qconform-sweep"}}));
  // The envelope's two fields are its own: a writer may not pass them in.
  EXPECT_THROW(results_envelope("sweep", {{"kind", "qconform.sweep"}}), Error);
  EXPECT_THROW(results_envelope("sweep", {{"schema_version", 2}}), Error);
  EXPECT_THROW(results_envelope("sweep", json::array()), Error);
}

// dump_with_array's text is nlohmann's own dump(1) of the whole document, byte for byte: arrays of no,
// one and several elements, elements that are objects with nested arrays and objects (empty ones
// among them), scalars, strings with escapes and newlines, and keys before and after the array's.
TEST(ResultsJson, ArraySplicedFromItsElementsTextsIsTheDocumentsDump) {
  const std::vector<json> pool = {
      json{{"layer", "a\nb \"q\" \x01"}, {"hist", {{"0", 1}, {"17", 2}}}, {"first", json::array()},
           {"nested", {{"x", json::array({1, json::object(), json::array({2, 3})})}, {"e", json::object()}}}},
      json(3.25), json("plain"), json(nullptr), json::array({json::array(), json::object({{"k", -1}})}),
      json::object()};
  for (size_t count : {size_t{0}, size_t{1}, size_t{2}, pool.size()}) {
    const json elements_doc = json(std::vector<json>(pool.begin(), pool.begin() + static_cast<std::ptrdiff_t>(count)));
    for (const char* key : {"aaa", "runs", "zzz"}) {
      json doc = {{"kind", "qconform-verify"}, {"m", {{"deep", json::array({1, 2})}}}, {"schema_version", 1}};
      std::vector<std::string> texts;
      for (const json& e : elements_doc) texts.push_back(e.dump(1));
      json whole = doc;
      whole[key] = elements_doc;
      doc[key] = "replaced";
      EXPECT_EQ(dump_with_array(doc, key, texts), whole.dump(1)) << count << " elements under " << key;
    }
  }
  // A document that already holds the placeholder's text elsewhere is refused, not spliced twice.
  json clash = {{"a", "\x01qconform-array-placeholder\x02"}};
  EXPECT_THROW(dump_with_array(clash, "runs", {}), Error);
}

TEST(ResultsJson, OldSpellingsAcceptedForTheirDocumentOnly) {
  EXPECT_TRUE(is_results_kind("qconform-transfer", "transfer"));
  EXPECT_TRUE(is_results_kind("qconform.transfer", "transfer"));  // written before the rule
  EXPECT_FALSE(is_results_kind("qconform.transfer", "sweep"));
  EXPECT_FALSE(is_results_kind("qconform.sweep", "sweep"));  // never written: not an old spelling
  EXPECT_FALSE(is_results_kind("qconform-sweep", "transfer"));
  EXPECT_FALSE(is_results_kind(json(1), "transfer"));
  EXPECT_FALSE(is_results_kind(json(), "transfer"));
}

TEST(ResultsJson, CheckEnvelopeNamesFileFieldExpectedFound) {
  check_results_envelope(results_envelope("transfer"), "transfer", "t.json", "a transfer result");
  check_results_envelope(json{{"schema_version", 1}, {"kind", "qconform.transfer"}}, "transfer", "t.json", "x");
  std::string m = input_error([] { check_results_envelope(json::array(), "verify", "v.json", "a verify result"); });
  EXPECT_NE(m.find("v.json: expected a JSON object (a verify result), found array"), std::string::npos) << m;
  m = input_error([] { check_results_envelope(results_envelope("sweep"), "verify", "v.json", "x"); });
  EXPECT_NE(m.find("v.json: field `kind`: expected \"qconform-verify\", found \"qconform-sweep\""), std::string::npos)
      << m;
  m = input_error([] { check_results_envelope(json{{"kind", "qconform-verify"}}, "verify", "v.json", "x"); });
  EXPECT_NE(m.find("v.json: field `schema_version`: expected 1, found nothing"), std::string::npos) << m;
  m = input_error(
      [] { check_results_envelope(json{{"kind", "qconform-verify"}, {"schema_version", 2}}, "verify", "v.json", "x"); });
  EXPECT_NE(m.find("v.json: field `schema_version`: expected 1, found 2"), std::string::npos) << m;
}

// The one renamed kind: transfer's JSON is written under the rule, and a results file holding
// transfer JSON of an earlier release (kind `qconform.transfer`), read back from disk, still renders.
TEST(ResultsJson, TransferKindRenamedAndOldFileStillAccepted) {
  transfer::TransferOptions opt;
  opt.replay = false;
  const json t = transfer::to_json(transfer::analyze_transfer(transfer::read_transfer_jsonl(kTransferData + "gen_a.jsonl"),
                                                              transfer::read_transfer_jsonl(kTransferData + "gen_b.jsonl"),
                                                              opt));
  EXPECT_EQ(t.at("kind"), "qconform-transfer");
  EXPECT_EQ(t.at("schema_version"), 1);

  json old_transfer = t;
  old_transfer["kind"] = "qconform.transfer";
  const json old_results = {{"schema_version", 1},      {"kind", "qconform-results"},
                            {"transfer", old_transfer}, {"generation", old_transfer}};
  const std::filesystem::path file =
      std::filesystem::temp_directory_path() / fmt::format("qc_results_json_{}.json", ::getpid());
  write_file_atomic(file.string(), old_results.dump(1) + "\n");
  const json read_back = json::parse(read_file(file.string()));
  std::filesystem::remove(file);
  const ReportOptions no_charts{"", false};
  std::string html;
  EXPECT_NO_THROW(html = render_report(read_back, no_charts));
  json new_results = read_back;
  new_results["transfer"]["kind"] = new_results["generation"]["kind"] = "qconform-transfer";
  // The kind is not shown, so the old file renders exactly as the new one.
  EXPECT_EQ(html, render_report(new_results, no_charts));

  // A section whose kind names another document is refused, naming the field.
  json wrong = new_results;
  wrong["transfer"]["kind"] = "qconform-sweep";
  std::string m = input_error([&] { render_report(wrong, no_charts); });
  EXPECT_NE(m.find("results field `transfer.kind`: expected \"qconform-transfer\", found \"qconform-sweep\""),
            std::string::npos)
      << m;
  wrong = new_results;
  wrong["kind"] = "qconform-verify";
  m = input_error([&] { render_report(wrong, no_charts); });
  EXPECT_NE(m.find("results field `kind`: expected \"qconform-results\""), std::string::npos) << m;
}

}  // namespace
}  // namespace qc
