// OMP_WAIT_POLICY=PASSIVE for every program that links qianka and loads an
// OpenMP runtime (oneDNN's libgomp), with nothing to call.
//
// Why: by default libgomp's idle threads spin after each parallel region and
// take the cores from qianka's own thread pool; a SimpleCNN training step at
// 2 threads measured 18-28% faster with passive waits, and single-image
// inference went from hundreds of ms to under 1 ms
// (docs/cifar10_training.md). libgomp reads OMP_WAIT_POLICY once, in its
// constructor, and has no call to change it later.
//
// Why a re-exec from .preinit_array: the dynamic loader runs libgomp's
// constructor before any constructor of the program, so only the
// executable's .preinit_array runs earlier; but there glibc has not yet set
// up `environ` (getenv finds nothing, and a setenv is discarded before
// libgomp looks). The one way to hand libgomp the policy is to start the
// program again with it in the environment. At this point no constructor has
// run, no thread or file exists, so the re-exec loses nothing; it costs one
// exec at start-up. It is skipped when the user set OMP_WAIT_POLICY, when no
// OpenMP runtime is loaded, for setuid programs, and with QK_OMP_REEXEC=0
// (for a debugger or valgrind, which would not follow it); when the exec
// fails (no /proc) the program runs on with libgomp's default.
//
// qk_base's link options (src/base/CMakeLists.txt) keep this object in every
// executable that links qk_base; a shared library may not carry
// .preinit_array, so a host that embeds qianka in one (a Python module) sets
// OMP_WAIT_POLICY=PASSIVE itself.
#include <sys/auxv.h>
#include <unistd.h>

#include <alloca.h>
#include <cstring>

#include "qk/base/env.h"

// Non-null exactly when an OpenMP runtime was loaded with the program.
extern "C" int omp_get_max_threads() __attribute__((weak));

namespace qk {
namespace {

// Registered for `qk check --env` and the docs; read below from the raw
// environment block, since the registry (getenv) cannot see it yet.
QK_ENV_STRING(omp_wait_policy, "OMP_WAIT_POLICY", "PASSIVE",
              "OpenMP (oneDNN) threads sleep between parallel regions instead of spinning; "
              "qianka programs start with PASSIVE unless you set a policy (ACTIVE: spin)");
QK_ENV_BOOL(omp_reexec, "QK_OMP_REEXEC", true,
            "0: do not re-execute at start-up to give OpenMP the passive wait policy "
            "(for gdb or valgrind)");

bool has_prefix(const char* s, const char* prefix) { return std::strncmp(s, prefix, std::strlen(prefix)) == 0; }
bool is_off(const char* v) {
  for (const char* off : {"0", "false", "off", "no"})
    if (std::strcmp(v, off) == 0) return true;
  return false;
}

void reexec_with_passive_wait(int, char** argv, char** envp) {
  if (omp_get_max_threads == nullptr || envp == nullptr || argv == nullptr) return;
  if (::getauxval(AT_SECURE) != 0) return;
  size_t n = 0;
  for (; envp[n] != nullptr; ++n) {
    if (has_prefix(envp[n], "OMP_WAIT_POLICY=")) return;
    if (has_prefix(envp[n], "QK_OMP_REEXEC=") && is_off(envp[n] + std::strlen("QK_OMP_REEXEC="))) return;
  }
  char** env = static_cast<char**>(alloca((n + 2) * sizeof(char*)));
  std::memcpy(env, envp, n * sizeof(char*));
  env[n] = const_cast<char*>("OMP_WAIT_POLICY=PASSIVE");
  env[n + 1] = nullptr;
  ::execve("/proc/self/exe", argv, env);
}

}  // namespace
}  // namespace qk

#if defined(__ELF__)
// The symbol qk_base's link option (--undefined=qk_openmp_preinit) names.
extern "C" {
[[gnu::used, gnu::section(".preinit_array")]] void (*qk_openmp_preinit)(int, char**, char**) =
    qk::reexec_with_passive_wait;
}
#endif
