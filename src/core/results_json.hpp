// The envelope of every results document qconform writes (`--json` of verify, boundary, sweep,
// predict, mutants, transfer, selfcheck; conform's results.json; join's result; the per-layer
// files of `verify --resume`): `{"schema_version": kSchemaVersion, "kind": "qconform-<name>"}`,
// then the document's own fields. The rule and the list of kinds: docs/results-schema.md.
//
// One place for the version and the naming rule, so that no writer spells them itself and every
// reader accepts the same old spellings.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <string_view>
#include <vector>

namespace qc {

// The schema version of every results document. (Manifests are a format of their own,
// `format: "qconform-manifest"`, versioned by `kManifestSchemaVersion` in qconform/manifest.hpp.)
inline constexpr int kSchemaVersion = 1;

// The kind rule: `qconform-` followed by the document's name in lowercase words joined by `-`
// ("verify", "layer-result"). `results_kind("verify")` is "qconform-verify".
std::string results_kind(std::string_view name);

// `{"schema_version": kSchemaVersion, "kind": results_kind(name)}` plus the document's own
// `fields` (a JSON object that names neither of the two).
nlohmann::json results_envelope(std::string_view name, nlohmann::json fields = nlohmann::json::object());

// True when `kind` is the document `name`'s kind: the current spelling, or an older one that
// earlier releases wrote ("qconform.transfer" before the rule; docs/results-schema.md lists them).
bool is_results_kind(const nlohmann::json& kind, std::string_view name);

// Checks a document read back from `file`: a JSON object whose `kind` is `name`'s (old spellings
// accepted) and whose `schema_version` is `kSchemaVersion`. `what` names the expected document in
// the message ("a predictions file from `qconform predict`"). Throws qc::Error (input) naming the
// file, the field, what was expected and what was found.
void check_results_envelope(const nlohmann::json& doc, std::string_view name, const std::string& file,
                            std::string_view what);

// `doc.dump(1)` with `doc[key]` (a member of the top-level object) the array whose elements' own
// `dump(1)` texts are `elements`, in order: the same bytes, without the array's element trees ever being
// one document (a 196-layer FP8 verify's runs are ~8 MB of text; their texts are made on every core).
// `doc[key]` is replaced; the elements are re-indented by the array's depth (a JSON text holds no raw
// newline inside a string, so every newline in an element's text is one of its own lines).
std::string dump_with_array(nlohmann::json doc, const std::string& key, const std::vector<std::string>& elements);

}  // namespace qc
