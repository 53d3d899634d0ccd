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

std::string dump_with_array(nlohmann::json doc, const std::string& key, const std::vector<std::string>& elements) {
  QC_CHECK(doc.is_object(), "dump_with_array: expected an object, found {}", doc.type_name());
  // A placeholder no real document holds (control characters, escaped in the dump): should a string of
  // the document hold its quoted text too, the count below refuses rather than splice twice.
  const std::string placeholder = "\x01qconform-array-placeholder\x02";
  doc[key] = placeholder;
  const std::string text = doc.dump(1);
  const std::string quoted = nlohmann::json(placeholder).dump();
  const size_t at = text.find(quoted);
  QC_CHECK(at != std::string::npos && text.find(quoted, at + 1) == std::string::npos,
           "dump_with_array: the placeholder of `{}` is not found exactly once", key);
  // The array is the value of a top-level member: `[` on the member's line, its elements at depth 2,
  // its `]` at depth 1 (nlohmann's pretty printer with an indent of 1).
  std::string array;
  if (elements.empty()) {
    array = "[]";
  } else {
    size_t bytes = 4;
    for (const std::string& e : elements) bytes += e.size() + 4 + 2 * static_cast<size_t>(std::count(e.begin(), e.end(), '\n'));
    array.reserve(bytes);
    array += "[\n";
    for (size_t i = 0; i < elements.size(); ++i) {
      array += "  ";
      for (const char c : elements[i]) {
        array += c;
        if (c == '\n') array += "  ";
      }
      array += i + 1 < elements.size() ? ",\n" : "\n";
    }
    array += " ]";
  }
  std::string out;
  out.reserve(text.size() + array.size());
  out.append(text, 0, at).append(array).append(text, at + quoted.size(), std::string::npos);
  return out;
}

}  // namespace qc
