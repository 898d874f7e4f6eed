#include "qk/base/error.h"

#include <gtest/gtest.h>

namespace {

TEST(Check, PassingCheckDoesNothing) { EXPECT_NO_THROW(QK_CHECK(1 + 1 == 2, "never")); }

TEST(Check, FailingCheckThrowsWithMessageAndLocation) {
  try {
    int got = 3;
    QK_CHECK(got == 2, "expected 2, got ", got);
    FAIL() << "no throw";
  } catch (const qk::ValueError& e) {
    EXPECT_EQ(e.message(), "expected 2, got 3");
    EXPECT_NE(std::string(e.what()).find("error_test.cc:"), std::string::npos) << e.what();
  }
}

TEST(Check, TypedChecksThrowTheirTypes) {
  EXPECT_THROW(QK_CHECK_TYPE(false, "x"), qk::TypeError);
  EXPECT_THROW(QK_CHECK_DEVICE(false, "x"), qk::DeviceError);
  EXPECT_THROW(QK_CHECK_INDEX(false, "x"), qk::IndexError);
  EXPECT_THROW(QK_INTERNAL_ASSERT(false), qk::InternalError);
  // All are qk::Error.
  EXPECT_THROW(QK_CHECK_TYPE(false, "x"), qk::Error);
}

TEST(Check, SyscallReportsErrno) {
  try {
    QK_SYSCALL(::close(-1));
    FAIL() << "no throw";
  } catch (const qk::IoError& e) {
    EXPECT_NE(e.message().find("errno 9"), std::string::npos) << e.message();
  }
}

}  // namespace
