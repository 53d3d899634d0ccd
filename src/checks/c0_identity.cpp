// C0, the identity contract (c0_identity.hpp).
#include "checks/c0_identity.hpp"

#include <fmt/format.h>

#include <utility>
#include <vector>

namespace qc {

CheckResult c0_identity(const JoinResult& r, const std::string& treatment_change) {
  using json = nlohmann::json;
  CheckResult c = make_check("C0", Verdict::not_applicable);
  const auto violations = r.violations();
  size_t equal = 0, rehashed = 0;
  json diffs = json::array();
  for (const FieldResult& f : r.fields) {
    equal += f.status == "equal";
    rehashed += f.status == "rehashed";
    if (f.status == "differs (treatment)") diffs.push_back({{"field", f.field}, {"a", f.a}, {"b", f.b}});
  }
  json viol = json::array();
  for (const FieldResult* f : violations) {
    viol.push_back({{"field", f->field}, {"status", f->status}, {"a", f->a}, {"b", f->b}, {"note", f->note}});
  }
  c.evidence = {{"treatment", r.treatment},
                {"manifests", {r.name_a, r.name_b}},
                {"fields_equal", equal},
                {"inputs_rehashed", rehashed},
                {"treatment_differences", diffs},
                {"violations", viol}};
  if (violations.empty()) {
    c.verdict = Verdict::pass;
    c.summary = fmt::format("the runs differ only in the declared treatment `{}`{}; {} fields equal, {} input "
                            "files re-hashed",
                            r.treatment, treatment_change.empty() ? "" : " (" + treatment_change + ")", equal,
                            rehashed);
  } else {
    c.verdict = Verdict::fail;
    std::vector<std::string> names;
    for (const FieldResult* f : violations) names.push_back(fmt::format("{} ({})", f->field, f->status));
    c.summary = fmt::format("{} violation{} of the identity contract: {}", violations.size(),
                            violations.size() == 1 ? "" : "s", fmt::join(names, ", "));
  }
  return c;
}

JoinResult join_manifest_json(const nlohmann::json& a, const nlohmann::json& b, const std::string& treatment,
                              bool rehash, std::string name_a, std::string name_b) {
  JoinResult r = join_manifest_fields(a, b, treatment, rehash, std::move(name_a), std::move(name_b));
  r.c0 = c0_identity(r, r.treatment_change);
  return r;
}

JoinResult join_manifests(const Manifest& a, const Manifest& b, const std::string& treatment, bool rehash) {
  return join_manifest_json(to_json(a), to_json(b), treatment, rehash);
}

}  // namespace qc
