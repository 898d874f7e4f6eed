// A test whose reference tool is missing (python3-torch, numpy, node and the
// npm tokenizers, spm_encode, mpirun, clang, oneDNN, libsentencepiece: all
// installed by scripts/setup.sh) skips and says why; in CI (CI=true) it
// FAILS instead, since there a missing tool is a missing install step and a
// green run must not hide it. The shell-script tests do the same through
// tests/common/reference_tool.sh.
//
//   if (!have_numpy()) QK_MISSING_REFERENCE_TOOL("python3 with numpy (Debian: python3-numpy)");
#pragma once

#include <gtest/gtest.h>

#include <cctype>
#include <cstdlib>
#include <string>

namespace qk::test {

// CI=true (GitHub, GitLab and most CI systems set it; so may a person), 1 or yes.
inline bool in_ci() {
  const char* v = std::getenv("CI");
  if (v == nullptr) return false;
  std::string s;
  for (const char* p = v; *p; ++p) s.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(*p))));
  return s == "true" || s == "1" || s == "yes";
}

}  // namespace qk::test

// Ends the test: a skip naming `what`, or under CI a failure. `what` is a
// std::string (or a string literal) saying what is missing and how to get it.
#define QK_MISSING_REFERENCE_TOOL(what)                                                       \
  do {                                                                                        \
    if (::qk::test::in_ci()) {                                                                \
      GTEST_FAIL() << "reference tool missing under CI=true (scripts/setup.sh should have "  \
                      "installed it): "                                                       \
                   << (what);                                                                 \
    } else {                                                                                  \
      GTEST_SKIP() << (what);                                                                 \
    }                                                                                         \
  } while (0)
