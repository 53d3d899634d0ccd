// The error type carries kind, file, line and condition; messages are preserved verbatim.
#include <gtest/gtest.h>

#include "qconform/error.hpp"

TEST(Error, InputCheckCarriesMessageAndKind) {
  try {
    QC_INPUT(1 + 1 == 3, "file {}: field {}: expected {}, found {}", "ops.safetensors", "l0.a_q", "i8", "f32");
    FAIL() << "QC_INPUT did not throw";
  } catch (const qc::Error& e) {
    EXPECT_EQ(e.kind(), qc::ErrorKind::input);
    EXPECT_STREQ(e.what(), "file ops.safetensors: field l0.a_q: expected i8, found f32");
    EXPECT_STREQ(e.condition(), "1 + 1 == 3");
    EXPECT_GT(e.line(), 0);
  }
}

TEST(Error, InternalCheckNamesConditionAndLocation) {
  try {
    QC_CHECK(false, "broken invariant {}", 7);
    FAIL() << "QC_CHECK did not throw";
  } catch (const qc::Error& e) {
    EXPECT_EQ(e.kind(), qc::ErrorKind::internal);
    std::string what = e.what();
    EXPECT_NE(what.find("broken invariant 7"), std::string::npos) << what;
    EXPECT_NE(what.find("`false`"), std::string::npos) << what;
    EXPECT_NE(what.find("test_error.cpp"), std::string::npos) << what;
  }
}

TEST(Error, PassingChecksDoNotThrow) {
  EXPECT_NO_THROW(QC_CHECK(true, "never"));
  EXPECT_NO_THROW(QC_INPUT(2 > 1, "never"));
}
