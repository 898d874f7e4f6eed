// Runs the `qk` binary built by this tree and captures what it printed.
#pragma once

#include <string>

#include "common/run_command.h"

namespace qk::test {

inline RunResult run_qk(const std::string& args, const std::string& env = "") {
  return run_command(env + (env.empty() ? "" : " ") + "'" QK_BIN "' " + args);
}

}  // namespace qk::test
