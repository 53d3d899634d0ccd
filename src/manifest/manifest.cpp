// Manifests and the join behind check C0. The join works on the manifest JSON rather than on the
// parsed struct, so that a manifest which does not parse (a malformed digest, a missing field,
// no kernel evidence) is still compared and every problem is reported under its field name:
// the contract fails closed, and it says exactly where.
#include "qconform/manifest.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <ctime>
#include <filesystem>
#include <set>

#include "arms/environment.hpp"
#include "qconform/error.hpp"
#include "core/limits.hpp"
#include "core/fileio.hpp"
#include "core/results_json.hpp"
#include "core/sha256.hpp"
#include "core/version.hpp"

extern char** environ;

namespace qc {

using nlohmann::json;

bool is_valid_digest(std::string_view d) { return is_digest(d); }

bool is_selection_variable(std::string_view name) {
  static constexpr std::string_view kPrefixes[] = {"QC_",    "VLLM_",   "SGLANG_", "CUDA_",   "CUBLAS_",
                                                   "CUBLASLT_", "TORCH_", "TRITON_", "DNNL_", "ONEDNN_",
                                                   "OMP_",   "MKL_",    "KMP_",    "GOMP_"};
  if (name == "NVIDIA_TF32_OVERRIDE") return true;
  return std::any_of(std::begin(kPrefixes), std::end(kPrefixes),
                     [&](std::string_view p) { return name.substr(0, p.size()) == p; });
}

std::map<std::string, std::string> selection_environment() {
  std::map<std::string, std::string> env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const std::string_view entry(*e);
    const size_t eq = entry.find('=');
    if (eq == std::string_view::npos) continue;
    const std::string_view name = entry.substr(0, eq);
    if (is_selection_variable(name)) env.emplace(std::string(name), std::string(entry.substr(eq + 1)));
  }
  return env;
}

std::string utc_now_iso8601() {
  const std::time_t t = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

namespace {

bool valid_role(std::string_view role) {
  return !role.empty() && std::all_of(role.begin(), role.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '.' || c == '-';
  });
}

bool known_kind(std::string_view kind) {
  return std::find(std::begin(kManifestKinds), std::end(kManifestKinds), kind) != std::end(kManifestKinds);
}

// JSON text of a value for messages, shortened so a huge config cannot flood a terminal.
std::string show(const json& v) {
  if (v.is_null()) return "(absent)";
  std::string s = v.dump();
  if (s.size() > 160) s = s.substr(0, 157) + "...";
  return s;
}

// ---- structural validation of one side --------------------------------------------------------

struct Problem {
  std::string field, status, note;
  json value;
  bool kernel_evidence = false;  // absent/empty kernel evidence: parseable, but join refuses it
};

// Every structural problem of one manifest JSON, in field order.
// A pair run (verify A,B; sweep A,B) records `arm` = "A,B", arm A's RunRecord in `treatment`
// and arm B's in `config.arm_b` (verify) or `config.arms.b` (sweep): then `treatment.arm` is A.
bool is_pair_label(const json& j, const std::string& treatment_arm, const std::string& arm) {
  if (!j.contains("config") || !j.at("config").is_object()) return false;
  const json& c = j.at("config");
  std::string second;
  if (c.contains("arm_b") && c.at("arm_b").is_object() && c.at("arm_b").contains("arm") &&
      c.at("arm_b").at("arm").is_string()) {
    second = c.at("arm_b").at("arm").get<std::string>();
  } else if (c.contains("arms") && c.at("arms").is_object() && c.at("arms").contains("b") &&
             c.at("arms").at("b").is_object() && c.at("arms").at("b").contains("arm") &&
             c.at("arms").at("b").at("arm").is_string()) {
    second = c.at("arms").at("b").at("arm").get<std::string>();
  }
  return !second.empty() && arm == treatment_arm + "," + second;
}

std::vector<Problem> validate(const json& j) {
  std::vector<Problem> out;
  if (!j.is_object()) {
    out.push_back({"(document)", "malformed", "expected a JSON object", j});
    return out;
  }
  const auto need = [&](const char* field, bool (json::*is)() const noexcept, const char* type) -> const json* {
    if (!j.contains(field)) {
      out.push_back({field, "missing", fmt::format("expected {}", type), nullptr});
      return nullptr;
    }
    const json& v = j.at(field);
    if (!(v.*is)()) {
      out.push_back({field, "malformed", fmt::format("expected {}", type), v});
      return nullptr;
    }
    return &v;
  };
  if (const json* f = need("format", &json::is_string, "the string \"qconform-manifest\"");
      f && f->get<std::string>() != kManifestFormat) {
    out.push_back({"format", "malformed", "expected \"qconform-manifest\"", *f});
  }
  if (const json* v = need("schema_version", &json::is_number_integer, "an integer");
      v && v->get<int64_t>() != kManifestSchemaVersion) {
    out.push_back({"schema_version", "malformed", fmt::format("expected {}", kManifestSchemaVersion), *v});
  }
  if (const json* k = need("kind", &json::is_string, "a string"); k && !known_kind(k->get<std::string>())) {
    out.push_back({"kind", "malformed", "expected one of capture, verify, generate, replay, sweep, conform", *k});
  }
  need("created", &json::is_string, "a string (UTC ISO 8601)");
  if (const json* v = need("project_version", &json::is_string, "a string"); v && v->get<std::string>().empty()) {
    out.push_back({"project_version", "malformed", "expected a non-empty version", *v});
  }
  if (const json* in = need("inputs", &json::is_object, "an object role -> {path, sha256}")) {
    for (const auto& [role, entry] : in->items()) {
      const std::string base = "inputs." + role;
      if (!valid_role(role)) out.push_back({base, "malformed", "role names match [a-z0-9_.-]+", role});
      if (!entry.is_object()) {
        out.push_back({base, "malformed", "expected an object {path, sha256}", entry});
        continue;
      }
      if (!entry.contains("path") || !entry.at("path").is_string()) {
        out.push_back({base + ".path", entry.contains("path") ? "malformed" : "missing", "expected a string",
                       entry.value("path", json())});
      }
      if (!entry.contains("sha256")) {
        out.push_back({base + ".sha256", "missing", "expected sha256:<64 lowercase hex>", nullptr});
      } else if (!entry.at("sha256").is_string() || !is_valid_digest(entry.at("sha256").get<std::string>())) {
        out.push_back({base + ".sha256", "malformed", "expected sha256:<64 lowercase hex>", entry.at("sha256")});
      }
    }
  }
  const json* arm = need("arm", &json::is_string, "a string (the arm label)");
  if (arm && arm->get<std::string>().empty()) out.push_back({"arm", "malformed", "expected a non-empty arm label", *arm});
  // Kernel evidence: the RunRecord the arm itself reported. Absence parses (old artifacts have
  // none) but is never accepted by the join.
  if (!j.contains("treatment") || j.at("treatment").is_null()) {
    out.push_back({"treatment.kernel", "no kernel evidence",
                   "the manifest carries no RunRecord from the arm that ran", nullptr, true});
  } else if (!j.at("treatment").is_object()) {
    out.push_back({"treatment", "malformed", "expected a RunRecord object", j.at("treatment")});
  } else {
    const json& t = j.at("treatment");
    for (const char* f : {"arm", "kernel", "epilogue", "device", "library", "build"}) {
      if (t.contains(f) && !t.at(f).is_string()) {
        out.push_back({fmt::format("treatment.{}", f), "malformed", "expected a string", t.at(f)});
      }
    }
    if (!t.contains("kernel") || !t.at("kernel").is_string() || t.at("kernel").get<std::string>().empty()) {
      out.push_back({"treatment.kernel", "no kernel evidence", "the RunRecord names no kernel",
                     t.value("kernel", json()), true});
    }
    if (!t.contains("arm") || !t.at("arm").is_string()) {
      out.push_back({"treatment.arm", "missing", "the RunRecord names no arm", t.value("arm", json())});
    } else if (arm && t.at("arm") != *arm && !is_pair_label(j, t.at("arm").get<std::string>(), arm->get<std::string>())) {
      out.push_back({"treatment.arm", "inconsistent",
                     fmt::format("the arm that ran reported label {} but the run asked for {}", t.at("arm").dump(),
                                 arm->dump()),
                     t.at("arm")});
    }
  }
  need("platform", &json::is_object, "an object");
  if (const json* env = need("selection_env", &json::is_object, "an object name -> value")) {
    for (const auto& [name, value] : env->items()) {
      if (!value.is_string()) out.push_back({"selection_env." + name, "malformed", "expected a string", value});
    }
  }
  need("config", &json::is_object, "an object");
  need("allow_unverified", &json::is_boolean, "a boolean");
  need("unverified_joins", &json::is_array, "an array of strings");
  return out;
}

// ---- flattening ----------------------------------------------------------------------------------

// Leaves of a JSON object by dotted path; arrays and empty objects are leaves.
void flatten(const json& v, const std::string& prefix, std::map<std::string, json>& out) {
  if (v.is_object() && !v.empty()) {
    for (const auto& [k, x] : v.items()) flatten(x, prefix.empty() ? k : prefix + "." + k, out);
  } else {
    out[prefix] = v;
  }
}

bool under(const std::string& field, const std::string& root) {
  return field == root || (field.size() > root.size() && field.compare(0, root.size(), root) == 0 &&
                           field[root.size()] == '.');
}

// Fields compared by neither equality nor treatment: when a run was made, and the flags about
// unverified inputs (handled as their own rule).
bool not_compared(const std::string& field) {
  return field == "created" || under(field, "allow_unverified") || under(field, "unverified_joins");
}

bool in_treatment(const std::string& field, const std::string& treatment) {
  // A run of an arm pair (verify, sweep) records arm A's evidence in `treatment` and arm B's in
  // `config.arm_b` (verify) or `config.arms` (sweep): both belong to the arm treatment.
  if (treatment == "arm") {
    return field == "arm" || under(field, "treatment") || under(field, "selection_env") ||
           under(field, "config.arm_b") || under(field, "config.arms");
  }
  return under(field, treatment);
}

// The paths of recorded input files: they may differ (the digest is the identity).
bool is_input_path(const std::string& field) {
  return field.rfind("inputs.", 0) == 0 && field.size() > 5 && field.compare(field.size() - 5, 5, ".path") == 0;
}

// `j[key]` when it is a string, else "".
std::string str_at(const json& j, const char* key) {
  return j.is_object() && j.contains(key) && j.at(key).is_string() ? j.at(key).get<std::string>() : std::string();
}

// The kernel evidence without its `arm` label.
json evidence_without_label(const json& t) {
  json e = t;
  if (e.is_object()) e.erase("arm");
  return e;
}

}  // namespace

// ---- Manifest <-> JSON ------------------------------------------------------------------------

json to_json(const Manifest& m) {
  json inputs = json::object();
  for (const auto& [role, in] : m.inputs) inputs[role] = {{"path", in.path}, {"sha256", in.sha256}};
  json treatment = nullptr;
  if (m.treatment) treatment = *m.treatment;
  return {{"format", kManifestFormat},
          {"schema_version", m.schema_version},
          {"kind", m.kind},
          {"created", m.created},
          {"project_version", m.project_version},
          {"inputs", inputs},
          {"arm", m.arm},
          {"treatment", treatment},
          {"platform", m.platform},
          {"selection_env", m.selection_env},
          {"config", m.config},
          {"allow_unverified", m.allow_unverified},
          {"unverified_joins", m.unverified_joins}};
}

Manifest manifest_from_json(const json& j, const std::string& file) {
  for (const Problem& p : validate(j)) {
    if (p.kernel_evidence) continue;  // representable (`treatment` empty); the join refuses it
    QC_FAIL_INPUT("{}: manifest field `{}`: {}: {}, found {}", file, p.field, p.status, p.note, show(p.value));
  }
  Manifest m;
  m.schema_version = j.at("schema_version").get<int>();
  m.kind = j.at("kind").get<std::string>();
  m.created = j.at("created").get<std::string>();
  m.project_version = j.at("project_version").get<std::string>();
  for (const auto& [role, e] : j.at("inputs").items()) {
    m.inputs[role] = {e.at("path").get<std::string>(), e.at("sha256").get<std::string>()};
  }
  m.arm = j.at("arm").get<std::string>();
  if (j.contains("treatment") && j.at("treatment").is_object()) {
    RunRecord r;
    const json& t = j.at("treatment");
    r.arm = t.at("arm").get<std::string>();
    r.kernel = t.value("kernel", "");
    r.epilogue = t.value("epilogue", "");
    r.device = t.value("device", "");
    r.library = t.value("library", "");
    r.build = t.value("build", "");
    r.extra = t.value("extra", json::object());
    m.treatment = std::move(r);
  }
  m.platform = j.at("platform");
  for (const auto& [name, value] : j.at("selection_env").items()) m.selection_env[name] = value.get<std::string>();
  m.config = j.at("config");
  m.allow_unverified = j.at("allow_unverified").get<bool>();
  for (const auto& s : j.at("unverified_joins")) {
    QC_INPUT(s.is_string(), "{}: manifest field `unverified_joins`: expected strings, found {}", file, show(s));
    m.unverified_joins.push_back(s.get<std::string>());
  }
  return m;
}

std::string manifest_text(const Manifest& m) { return to_json(m).dump(2) + "\n"; }

void write_manifest(const std::string& path, const Manifest& m) { write_file_atomic(path, manifest_text(m)); }

Manifest read_manifest(const std::string& path) {
  return manifest_from_json(parse_json(read_file(path), path), path);
}

void add_input(Manifest& m, const std::string& role, const std::string& path, const std::string& digest) {
  QC_INPUT(valid_role(role), "manifest input role `{}`: expected [a-z0-9_.-]+", role);
  std::error_code ec;
  QC_INPUT(!std::filesystem::is_directory(path, ec), "manifest input `{}`: {} is a directory; record its files one role each",
           role, path);
  const std::string abs = std::filesystem::absolute(path, ec).lexically_normal().string();
  m.inputs[role] = {ec ? path : abs, digest.empty() ? sha256_file(path) : digest};
}

Manifest make_manifest(std::string_view kind, std::string arm, std::optional<RunRecord> treatment,
                       const std::vector<std::pair<std::string, std::string>>& inputs, json config,
                       const std::map<std::string, std::string>& digests) {
  QC_INPUT(known_kind(kind), "manifest kind `{}`: expected one of capture, verify, generate, replay, sweep, conform",
           kind);
  QC_INPUT(config.is_object(), "manifest config: expected a JSON object, found {}", show(config));
  Manifest m;
  m.kind = std::string(kind);
  m.created = utc_now_iso8601();
  m.project_version = version();
  for (const auto& [role, path] : inputs) {
    const auto known = digests.find(path);
    add_input(m, role, path, known == digests.end() ? std::string() : known->second);
  }
  m.arm = std::move(arm);
  m.treatment = std::move(treatment);
  m.platform = environment_stamp();
  m.selection_env = selection_environment();
  m.config = std::move(config);
  return m;
}

// ---- join ----------------------------------------------------------------------------------------

bool JoinResult::verified() const {
  return std::none_of(fields.begin(), fields.end(), [](const FieldResult& f) { return f.violation; });
}

std::vector<const FieldResult*> JoinResult::violations() const {
  std::vector<const FieldResult*> v;
  for (const FieldResult& f : fields) {
    if (f.violation) v.push_back(&f);
  }
  return v;
}

namespace {

// The value at a dotted `path` of `j`, null when absent.
json sub(const json& j, const std::string& path) {
  const json* cur = &j;
  size_t pos = 0;
  while (true) {
    const size_t dot = path.find('.', pos);
    const std::string key = path.substr(pos, dot == std::string::npos ? std::string::npos : dot - pos);
    if (!cur->is_object() || !cur->contains(key)) return json();
    cur = &cur->at(key);
    if (dot == std::string::npos) return *cur;
    pos = dot + 1;
  }
}

// The kernel evidence of a run, without labels: arm A's (`treatment`), and for a pair run (verify,
// sweep) arm B's too, so that two pairs differing only in B are a real treatment.
json pair_evidence(const json& m) {
  json e = {{"a", evidence_without_label(sub(m, "treatment"))}};
  if (const json b2 = sub(m, "config.arm_b"); !b2.is_null()) {
    e["b"] = evidence_without_label(b2);
  } else if (const json b3 = sub(m, "config.arms.b"); !b3.is_null()) {
    e["b"] = evidence_without_label(b3);
  }
  return e;
}

// The join as it is built: its field results so far, and the fields already reported as
// violations (so that a malformed digest is not also a "mismatch").
struct Join {
  JoinResult r;
  std::set<std::string> flagged;

  void add(FieldResult f) {
    if (f.violation) flagged.insert(f.field);
    r.fields.push_back(std::move(f));
  }
  void structure(const json& a, const json& b);
  void field_by_field(const json& a, const json& b, const std::string& treatment);
  void treatment_differs(const json& a, const json& b, const std::string& treatment);
  void rehash_inputs(const json& a, const json& b);
};

void Join::structure(const json& a, const json& b) {
  // 1. Structure of each side: missing fields, malformed digests, absent kernel evidence,
  //    inconsistent labels, inputs that were themselves unverified.
  std::map<std::string, FieldResult> structural;
  const auto collect = [&](const json& j, bool side_a) {
    for (Problem& p : validate(j)) {
      FieldResult& f = structural[p.field + "\x1f" + p.status];
      f.field = p.field;
      f.status = p.status;
      f.violation = true;
      (side_a ? f.a : f.b) = p.value;
      const std::string who = side_a ? r.name_a : r.name_b;
      f.note += (f.note.empty() ? "" : "; ") + fmt::format("{}: {}", who, p.note);
    }
    if (j.is_object() && j.contains("allow_unverified") && j.at("allow_unverified").is_boolean() &&
        j.at("allow_unverified").get<bool>()) {
      FieldResult& f = structural[std::string("allow_unverified\x1funverified input")];
      f.field = "allow_unverified";
      f.status = "unverified input";
      f.violation = true;
      // The field's own value on both sides (false where it is not set), and what the unverified
      // side recorded of the join it went past.
      for (const auto& [side, value] : {std::pair{&f.a, &a}, std::pair{&f.b, &b}}) {
        const json& m = *value;
        *side = m.is_object() && m.contains("allow_unverified") ? m.at("allow_unverified") : json(nullptr);
      }
      const json joins = j.value("unverified_joins", json::array());
      f.note += (f.note.empty() ? "" : "; ") +
                fmt::format("{} was produced from data whose join did not verify ({})", side_a ? r.name_a : r.name_b,
                            joins.is_array() && !joins.empty()
                                ? fmt::format("unverified_joins: {}", show(joins))
                                : std::string("it records no failed join: made with --allow-unverified"));
    }
  };
  collect(a, true);
  collect(b, false);
  for (auto& [key, f] : structural) add(std::move(f));
}

void Join::field_by_field(const json& a, const json& b, const std::string& treatment) {
  // 2. Field by field: equal outside the treatment, anything inside it may differ.
  std::map<std::string, json> fa, fb;
  if (a.is_object()) flatten(a, "", fa);
  if (b.is_object()) flatten(b, "", fb);
  std::set<std::string> names;
  for (const auto& [k, v] : fa) names.insert(k);
  for (const auto& [k, v] : fb) names.insert(k);
  for (const std::string& field : names) {
    if (not_compared(field)) continue;
    const auto ia = fa.find(field), ib = fb.find(field);
    const json va = ia == fa.end() ? json() : ia->second;
    const json vb = ib == fb.end() ? json() : ib->second;
    const bool equal = ia != fa.end() && ib != fb.end() && va == vb;
    FieldResult f{field, "equal", va, vb, "", false};
    if (in_treatment(field, treatment)) {
      if (!equal) f.status = "differs (treatment)";
    } else if (is_input_path(field)) {
      if (!equal) {
        f.status = "differs (not compared)";
        f.note = "input paths may differ; the digest is the identity";
      }
    } else if (!equal) {
      if (flagged.count(field)) continue;
      f.violation = true;
      if (ia == fa.end() || ib == fb.end()) {
        f.status = "missing";
        f.note = fmt::format("present only in {}", ia == fa.end() ? r.name_b : r.name_a);
      } else {
        f.status = "mismatch";
        f.note = "outside the declared treatment, the runs must agree";
      }
    }
    add(std::move(f));
  }
}

void Join::treatment_differs(const json& a, const json& b, const std::string& treatment) {
  // 3. The treatment must actually differ, or there is nothing to compare.
  if (treatment == "arm") {
    const json la = sub(a, "arm"), lb = sub(b, "arm");
    const json ta = sub(a, "treatment"), tb = sub(b, "treatment");
    const bool evidence_a = !str_at(ta, "kernel").empty();
    const bool evidence_b = !str_at(tb, "kernel").empty();
    if (la == lb && (ta == tb || !evidence_a || !evidence_b)) {
      add({"arm", "treatment identical", la, lb, "both runs used the same arm: there is no treatment to compare", true});
    } else if (evidence_a && evidence_b && pair_evidence(a) == pair_evidence(b)) {
      add({"treatment.kernel", "treatment identical", str_at(ta, "kernel"), str_at(tb, "kernel"),
           fmt::format("the arm labels differ ({} vs {}) but the kernel evidence is identical: the declared treatment "
                       "did not reach the kernel",
                       la.dump(), lb.dump()),
           true});
    }
  } else {
    const json va = sub(a, treatment), vb = sub(b, treatment);
    if (va == vb) {
      add({treatment, "treatment identical", va, vb,
           va.is_null() ? "the treatment field is absent on both sides" : "the treatment field is equal on both sides",
           true});
    }
  }
}

void Join::rehash_inputs(const json& a, const json& b) {
  // 4. The files themselves: hash again what is on disk and compare with the recorded digest.
  {
    std::map<std::string, std::string> cache;
    const auto check_side = [&](const json& j, bool side_a) {
      if (!j.is_object() || !j.contains("inputs") || !j.at("inputs").is_object()) return;
      for (const auto& [role, e] : j.at("inputs").items()) {
        if (!e.is_object() || !e.contains("path") || !e.at("path").is_string()) continue;
        const std::string path = e.at("path").get<std::string>();
        const std::string recorded = str_at(e, "sha256");
        const std::string field = "inputs." + role + ".sha256";
        const std::string who = side_a ? r.name_a : r.name_b;
        FieldResult f{field, "rehashed", nullptr, nullptr, "", false};
        std::error_code ec;
        if (!std::filesystem::is_regular_file(path, ec)) {
          f.status = "not rehashed";
          f.note = fmt::format("{}: {} is not on this machine", who, path);
          add(std::move(f));
          continue;
        }
        auto it = cache.find(path);
        if (it == cache.end()) it = cache.emplace(path, sha256_file(path)).first;
        const json value = {{"path", path}, {"recorded", recorded}, {"on_disk", it->second}};
        (side_a ? f.a : f.b) = value;
        if (it->second != recorded) {
          f.status = "changed on disk";
          f.violation = true;
          f.note = fmt::format("{}: {} now hashes to {}, the manifest recorded {}", who, path, it->second,
                               recorded.empty() ? "(nothing)" : recorded);
        } else {
          f.note = fmt::format("{}: {} unchanged", who, path);
        }
        add(std::move(f));
      }
    };
    check_side(a, true);
    check_side(b, false);
  }
}

}  // namespace

JoinResult join_manifest_fields(const json& a, const json& b, const std::string& treatment, bool rehash,
                                std::string name_a, std::string name_b) {
  static const std::set<std::string> kTreatmentRoots = {"inputs", "config", "platform", "selection_env",
                                                        "project_version"};
  const std::string root = treatment.substr(0, treatment.find('.'));
  QC_INPUT(treatment == "arm" || kTreatmentRoots.count(root),
           "--treatment `{}`: expected `arm` or a field path under inputs, config, platform, selection_env or "
           "project_version (e.g. `config.scale_mode`)",
           treatment);

  Join join;
  JoinResult& r = join.r;
  r.treatment = treatment;
  r.name_a = std::move(name_a);
  r.name_b = std::move(name_b);
  join.structure(a, b);
  join.field_by_field(a, b, treatment);
  join.treatment_differs(a, b, treatment);
  if (rehash) join.rehash_inputs(a, b);

  // 5. What the treatment changed, for C0's summary (the verdict: src/checks/c0_identity.cpp).
  r.treatment_change =
      treatment == "arm" ? fmt::format("{} -> {}; kernel {} -> {}", str_at(a, "arm"), str_at(b, "arm"),
                                       str_at(sub(a, "treatment"), "kernel"), str_at(sub(b, "treatment"), "kernel"))
                         : "";
  return std::move(join.r);
}

json to_json(const JoinResult& r) {
  json fields = json::array();
  for (const FieldResult& f : r.fields) {
    fields.push_back(
        {{"field", f.field}, {"status", f.status}, {"a", f.a}, {"b", f.b}, {"note", f.note}, {"violation", f.violation}});
  }
  return results_envelope("join", {{"treatment", r.treatment},
                                   {"manifests", {r.name_a, r.name_b}},
                                   {"verified", r.verified()},
                                   {"violations", describe_violations(r)},
                                   {"fields", fields},
                                   {"check", r.c0}});
}

std::vector<std::string> describe_violations(const JoinResult& r) {
  std::vector<std::string> out;
  for (const FieldResult* f : r.violations()) {
    out.push_back(fmt::format("{}: {}: {}={} {}={}{}", f->field, f->status, r.name_a, show(f->a), r.name_b,
                              show(f->b), f->note.empty() ? "" : " (" + f->note + ")"));
  }
  return out;
}

void record_unverified(Manifest& m, const JoinResult& r) {
  if (r.verified()) return;
  m.allow_unverified = true;
  for (const std::string& v : describe_violations(r)) {
    m.unverified_joins.push_back(fmt::format("{} x {} (treatment {}): {}", r.name_a, r.name_b, r.treatment, v));
  }
}

}  // namespace qc
