// Helpers of the verify tests (test_verify_fp8.cpp, test_block_verify.cpp): options that keep the
// reference on the host, and one check of a result by id.
#pragma once

#include <stdexcept>
#include <string>

#include "checks/verify.hpp"

namespace qc::test {

inline VerifyOptions cpu_options() {
  VerifyOptions o;
  o.reference = VerifyReference::cpu;
  return o;
}

inline const CheckResult& check(const VerifyResult& r, const std::string& id) {
  for (const CheckResult& c : r.checks) {
    if (c.id == id) return c;
  }
  throw std::runtime_error("no check " + id);
}

}  // namespace qc::test
