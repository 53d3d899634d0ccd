#include "core/results_json.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <utility>

#include "core/fileio.hpp"
#include "qconform/error.hpp"

namespace qc {

namespace {

constexpr std::string_view kKindPrefix = "qconform-";

// Spellings that earlier releases wrote, mapped to the document's name. Readers accept them; no
// writer produces them.
constexpr std::array<std::pair<std::string_view, std::string_view>, 1> kOldKinds = {{
    {"qconform.transfer", "transfer"},
}};

bool is_name(std::string_view name) {
  // Lowercase words joined by single `-`: no leading, trailing or doubled `-`.
  if (name.empty() || name.front() == '-' || name.back() == '-' || name.find("--") != std::string_view::npos) return false;
  return std::all_of(name.begin(), name.end(), [](char c) { return (c >= 'a' && c <= 'z') || c == '-'; });
}

}  // namespace

std::string results_kind(std::string_view name) {
  QC_CHECK(is_name(name), "results_kind: `{}` is not a document name (lowercase words joined by `-`)", name);
  return std::string(kKindPrefix) + std::string(name);
}

nlohmann::json results_envelope(std::string_view name, nlohmann::json fields) {
  QC_CHECK(fields.is_object() && !fields.contains("schema_version") && !fields.contains("kind"),
           "results_envelope(\"{}\"): the fields must be an object without `schema_version` and `kind`, found {}", name,
           printable_text(fields.dump(), 120));
  fields["schema_version"] = kSchemaVersion;
  fields["kind"] = results_kind(name);
  return fields;
}

bool is_results_kind(const nlohmann::json& kind, std::string_view name) {
  if (!kind.is_string()) return false;
  const std::string& k = kind.get_ref<const std::string&>();
  if (k == results_kind(name)) return true;
  return std::any_of(kOldKinds.begin(), kOldKinds.end(),
                     [&](const auto& old) { return old.first == k && old.second == name; });
}

void check_results_envelope(const nlohmann::json& doc, std::string_view name, const std::string& file,
                            std::string_view what) {
  QC_INPUT(doc.is_object(), "{}: expected a JSON object ({}), found {}", file, what, doc.type_name());
  QC_INPUT(is_results_kind(doc.value("kind", nlohmann::json()), name), "{}: field `kind`: expected \"{}\", found {}",
           file, results_kind(name), doc.contains("kind") ? printable_text(doc["kind"].dump(), 60) : "nothing");
  QC_INPUT(doc.value("schema_version", nlohmann::json()) == kSchemaVersion,
           "{}: field `schema_version`: expected {}, found {}", file, kSchemaVersion,
           doc.contains("schema_version") ? printable_text(doc["schema_version"].dump(), 60) : "nothing");
}

}  // namespace qc
