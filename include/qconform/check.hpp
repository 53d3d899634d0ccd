// The result of one conformance check (C0–C7): a verdict a kernel engineer can act on.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <string_view>
#include <vector>

namespace qc {

enum class Verdict { pass, fail, not_applicable, outside_jurisdiction };
std::string_view verdict_name(Verdict v);

struct CheckResult {
  std::string id;      // "C4"
  std::string title;   // "accumulator equality"
  Verdict verdict = Verdict::not_applicable;
  std::string summary;            // one line of evidence for the table
  nlohmann::json evidence = nlohmann::json::object();  // counts, first offending coordinates, bit patterns
  std::string points_to;          // what a violation points to first
  std::vector<std::string> exclusions;
  bool falsifiable = true;        // C1–C5; C6 and C7 are tolerance-based
};

// A check with its id, title and initial verdict; the rest is filled in as evidence accumulates.
inline CheckResult make_check(std::string id, std::string title, Verdict verdict) {
  CheckResult c;
  c.id = std::move(id);
  c.title = std::move(title);
  c.verdict = verdict;
  return c;
}

void to_json(nlohmann::json& j, const CheckResult& r);

// Combines per-layer verdicts: any fail -> fail; else any pass -> pass; else the first verdict.
Verdict combine(Verdict a, Verdict b);

}  // namespace qc
