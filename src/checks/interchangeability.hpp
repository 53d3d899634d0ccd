// The interchangeability answer: the one decision a kernel team acts on, made from the checks of a
// verify or conform run (docs/checks.md, "The interchangeability answer"):
//   identical    bit-identical in every regime that ran (and, in conform, at the token level);
//   explained    outputs differ, every difference predicted exactly by declared (or identified)
//                formulas or accumulation models and localized to the stage that made it;
//   unexplained  no check failed, but some difference was predicted by nothing;
//   different    a check failed: the stage it names.
// The decision is written once, in `decide_interchangeability`, over `InterchangeabilityFacts`, plain
// values that verify (`facts_from_verify`) and conform gather from their checks.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "qconform/check.hpp"

namespace qc {

enum class Interchangeability { identical, explained, unexplained, different };
std::string_view interchangeability_name(Interchangeability a);
// What the answer licenses a team to do, in one sentence (the JSON's `licenses`, the report's banner).
std::string_view interchangeability_licenses(Interchangeability a);

// Whose words a message speaks: the CLI's flags (`--arms`, `qconform identify --arm L`) or the
// Python API's argument names (`arm_b`, `qconform.identify(arm_b)`).
enum class UserLanguage { cli, python };

struct InterchangeabilityFacts {
  // Failed checks in the order of the procedure, each with the stage its failure names.
  struct Failure {
    std::string check;   // "C4"
    std::string stage;   // "accumulation"
    std::string detail;  // what the check's failure points to, or its summary
  };
  std::vector<Failure> failures;
  int64_t runs = 0;       // (layer, M, scale regime) runs compared
  int64_t elements = 0;   // elements compared over those runs
  int64_t differing = 0;  // elements at which A and B differ, bitwise, over every run
  int64_t max_ulp = 0;    // the largest distance among them (finite pairs)
  // Differences no declared model or formula predicted: the runs, their elements, and why (one line
  // per cause, "no formula declared for B (plugin:x.so)").
  int64_t unpredicted_runs = 0, unpredicted_differing = 0;
  std::vector<std::string> unpredicted_why;
  // Unpredicted differences beyond the tolerance that no check decided (runs whose arm's record
  // refused its declared model: C6 lists them, passing and failing neither); -1: none such.
  int64_t undecided_beyond_tolerance = -1;
  int64_t tolerance_ulps = 1;
  bool tolerance_applies = true;      // false for FP8 pairs, whose models predict every value
  std::string predicted_by;           // "the declared formulas", "the declared accumulation models"
  std::string difference_stage;       // where the predicted differences come from ("epilogue stage ...")
  // Token level (conform, where the model ran).
  bool tokens_measured = false;
  int64_t flips = 0, positions = 0, sequences = 0, identical_sequences = 0;
  bool pow2_end_to_end_identical = true;  // INT8 pairs: the power-of-two generations' records
  // What to do about unpredicted differences, in the user's language ("" when nothing can be done).
  std::string advice;
};

struct InterchangeabilityAnswer {
  Interchangeability answer = Interchangeability::unexplained;
  std::string reason;                                  // one sentence: why this answer
  std::string advice;                                  // what to do next ("" for identical/explained)
  nlohmann::json evidence = nlohmann::json::object();  // the facts the decision read
};

InterchangeabilityAnswer decide_interchangeability(const InterchangeabilityFacts& facts);
// {answer, reason, licenses, evidence, advice (null when none)}.
nlohmann::json to_json(const InterchangeabilityAnswer& a);
// "interchangeability: explained — <reason>" and, when there is advice, a second line "  next: ...".
std::string describe(const InterchangeabilityAnswer& a);

struct VerifyResult;
// The facts of a verify run: its checks C2-C6, every run's comparison and predictions, and the
// arms' declarations; `language` phrases the advice.
InterchangeabilityFacts facts_from_verify(const VerifyResult& r, UserLanguage language);
// A failed check of verify as the answer names it: on an FP8 pair the stage verify localized and its
// sentence, else the check's own stage and what it points to (without a leading "<id> failed: ").
InterchangeabilityFacts::Failure verify_failure(const CheckResult& c, const VerifyResult& r);

}  // namespace qc
