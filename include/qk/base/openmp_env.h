// oneDNN runs its kernels on an OpenMP team; by default libgomp's idle
// threads spin after each region and take the cores from qianka's own pool
// (a SimpleCNN step at 2 threads measured 18-28% faster with passive waits).
// libgomp reads OMP_WAIT_POLICY once, when it is loaded, so a program that
// wants passive waiting sets it and re-executes itself, before anything else:
//
//   int main(int argc, char** argv) { qk::reexec_with_passive_openmp(argv); ... }
//
// A policy the user set is kept; QK_OMP_REEXEC=0 disables the re-exec.
#pragma once

#include <unistd.h>

#include <cstdlib>

#include "qk/base/env.h"

namespace qk {

namespace openmp_env_detail {
QK_ENV_OPTIONAL_STRING(env_wait_policy, "OMP_WAIT_POLICY",
                       "OpenMP's (libgomp): ACTIVE or PASSIVE; unset, qk sets PASSIVE and re-executes "
                       "itself (qk/base/openmp_env.h).");
QK_ENV_OPTIONAL_STRING(env_reexec, "QK_OMP_REEXEC",
                       "0: qk keeps libgomp's default wait policy instead of re-executing itself with "
                       "OMP_WAIT_POLICY=PASSIVE.");
}  // namespace openmp_env_detail

inline void reexec_with_passive_openmp(char** argv) {
  using namespace openmp_env_detail;
  if (env_wait_policy.lookup()) return;
  if (env_reexec.lookup() == "0") return;
  ::setenv("OMP_WAIT_POLICY", "PASSIVE", 1);
  ::execv("/proc/self/exe", argv);
  // execv failed (no /proc?): carry on with the default policy.
}

}  // namespace qk
