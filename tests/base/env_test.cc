#include "qk/base/env.h"

#include <gtest/gtest.h>

#include <cstdlib>

#include "qk/base/error.h"

namespace {

QK_ENV_INT(test_int, "QK_TEST_ENV_INT", 7, "test variable");
QK_ENV_BOOL(test_bool, "QK_TEST_ENV_BOOL", false, "test variable");

TEST(Env, DefaultWhenUnset) {
  ::unsetenv("QK_TEST_ENV_INT");
  EXPECT_EQ(test_int.reload(), 7);
}

TEST(Env, ParsesValues) {
  ::setenv("QK_TEST_ENV_INT", "42", 1);
  EXPECT_EQ(test_int.reload(), 42);
  ::setenv("QK_TEST_ENV_BOOL", "yes", 1);
  EXPECT_TRUE(test_bool.reload());
  ::unsetenv("QK_TEST_ENV_INT");
  ::unsetenv("QK_TEST_ENV_BOOL");
}

TEST(Env, BadValueNamesTheVariable) {
  ::setenv("QK_TEST_ENV_INT", "12abc", 1);
  try {
    test_int.reload();
    FAIL() << "no throw";
  } catch (const qk::ValueError& e) {
    EXPECT_NE(e.message().find("QK_TEST_ENV_INT"), std::string::npos);
  }
  ::setenv("QK_TEST_ENV_BOOL", "maybe", 1);
  EXPECT_THROW(test_bool.reload(), qk::ValueError);
  ::unsetenv("QK_TEST_ENV_INT");
  ::unsetenv("QK_TEST_ENV_BOOL");
}

TEST(Env, RegistryListsDeclaredVariables) {
  bool found = false;
  for (const auto& v : qk::env::registered())
    if (std::string(v.name) == "QK_TEST_ENV_INT") found = v.default_value == "7";
  EXPECT_TRUE(found);
}

}  // namespace
