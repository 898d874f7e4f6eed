// Runs the `qk` binary built by this tree and captures what it printed.
#pragma once

#include <cstdio>
#include <string>
#include <sys/wait.h>

namespace qk::test {

struct RunResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr together
};

inline RunResult run_qk(const std::string& args, const std::string& env = "") {
  std::string cmd = env + (env.empty() ? "" : " ") + "'" QK_BIN "' " + args + " 2>&1";
  RunResult r;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return r;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) r.output.append(buf, n);
  int status = ::pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return r;
}

}  // namespace qk::test
