// The message of the input error `f` throws; a test failure when it throws nothing or an error of
// another kind. Shared by the tests of bad input (hostile I/O, results envelopes).
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "qconform/error.hpp"

namespace qc::test {

template <class F>
std::string input_error(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::input) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "expected an input error, nothing was thrown";
  return "";
}

}  // namespace qc::test
