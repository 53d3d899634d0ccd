#include "qconform/check.hpp"

namespace qc {

std::string_view verdict_name(Verdict v) {
  switch (v) {
    case Verdict::pass: return "pass";
    case Verdict::fail: return "fail";
    case Verdict::not_applicable: return "not-applicable";
    case Verdict::outside_jurisdiction: return "outside-jurisdiction";
  }
  return "?";
}

void to_json(nlohmann::json& j, const CheckResult& r) {
  j = {{"id", r.id},           {"title", r.title},         {"verdict", verdict_name(r.verdict)},
       {"summary", r.summary}, {"evidence", r.evidence},   {"points_to", r.points_to},
       {"exclusions", r.exclusions}, {"falsifiable", r.falsifiable}};
}

Verdict combine(Verdict a, Verdict b) {
  if (a == Verdict::fail || b == Verdict::fail) return Verdict::fail;
  if (a == Verdict::pass || b == Verdict::pass) return Verdict::pass;
  return a;
}

}  // namespace qc
