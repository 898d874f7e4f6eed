#include "qk/base/env.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

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

QK_ENV_OPTIONAL_INT(test_opt, "QK_TEST_ENV_OPT", "test variable without a default");

TEST(Env, OptionalVariablesAreReadAsTheyAreNow) {
  ::unsetenv("QK_TEST_ENV_OPT");
  EXPECT_FALSE(test_opt.lookup().has_value());
  ::setenv("QK_TEST_ENV_OPT", "", 1);
  EXPECT_FALSE(test_opt.lookup().has_value());  // empty is unset
  ::setenv("QK_TEST_ENV_OPT", "3", 1);
  EXPECT_EQ(test_opt.lookup(), 3);
  ::setenv("QK_TEST_ENV_OPT", "4", 1);
  EXPECT_EQ(test_opt.lookup(), 4);  // not cached
  ::setenv("QK_TEST_ENV_OPT", "x", 1);
  EXPECT_THROW(test_opt.lookup(), qk::ValueError);
  ::unsetenv("QK_TEST_ENV_OPT");
  std::string shown;
  for (const auto& v : qk::env::registered())
    if (std::string(v.name) == "QK_TEST_ENV_OPT") shown = v.default_value;
  EXPECT_EQ(shown, "unset");
}

// get_raw is for declared variables only: a raw read of anything else is a bug.
TEST(Env, RawReadsOfUndeclaredNamesAreRefused) {
  ::setenv("QK_TEST_ENV_INT", "5", 1);
  EXPECT_EQ(qk::env::get_raw("QK_TEST_ENV_INT"), "5");
  ::unsetenv("QK_TEST_ENV_INT");
  EXPECT_THROW(qk::env::get_raw("QK_TEST_ENV_NEVER_DECLARED"), qk::InternalError);
}

// The registry is the only reader: no getenv in the sources but its own.
TEST(Env, NoRawGetenvOutsideTheRegistry) {
  namespace fs = std::filesystem;
  std::vector<std::string> offenders;
  for (const char* dir : {"/src", "/include"})
    for (const auto& f : fs::recursive_directory_iterator(std::string(QK_SOURCE_DIR) + dir)) {
      const std::string path = f.path().string();
      if (!f.is_regular_file() || path.ends_with("/src/base/env.cc")) continue;
      if (!path.ends_with(".cc") && !path.ends_with(".h")) continue;
      std::ifstream in(path);
      std::stringstream text;
      text << in.rdbuf();
      if (text.str().find("getenv(") != std::string::npos) offenders.push_back(path);
    }
  EXPECT_TRUE(offenders.empty()) << "raw getenv in " << ::testing::PrintToString(offenders)
                                 << "; declare the variable with QK_ENV_* (qk/base/env.h)";
}

}  // namespace
