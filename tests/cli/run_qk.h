// Runs the `qk` binary built by this tree and captures what it printed.
#pragma once

#include <string>
#include <vector>

#include "common/run_command.h"

namespace qk::test {

inline RunResult run_qk(const std::string& args, const std::string& env = "") {
  return run_command(env + (env.empty() ? "" : " ") + "'" QK_BIN "' " + args);
}

// argv as single-quoted shell words, each after a space: run_qk("pretrain-gpt" + shell_words(args)).
inline std::string shell_words(const std::vector<std::string>& argv) {
  std::string s;
  for (const auto& a : argv) s += " '" + a + "'";
  return s;
}

}  // namespace qk::test
