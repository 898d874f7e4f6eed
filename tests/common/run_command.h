// Runs a shell command line and captures what it printed (stdout and stderr
// together) and how it ended; the CLI tests' way of running `qk`.
#pragma once

#include <sys/wait.h>

#include <cstdio>
#include <string>

namespace qk::test {

struct RunResult {
  int exit_code = -1;  // 128 + signal when killed
  std::string output;
};

inline RunResult run_command(const std::string& command_line) {
  RunResult r;
  FILE* p = ::popen((command_line + " 2>&1").c_str(), "r");
  if (!p) return r;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) r.output.append(buf, n);
  int status = ::pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return r;
}

}  // namespace qk::test
