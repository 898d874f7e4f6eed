// fuzz_scratch_dir(): one folder per process under /tmp, removed at exit.
#include <unistd.h>

#include <cstdlib>
#include <filesystem>

#include "fuzz_target.h"
#include "qk/base/file_io.h"
#include "qk/base/log.h"

namespace {
std::string g_dir;
void remove_dir() {
  std::error_code ec;
  std::filesystem::remove_all(g_dir, ec);
}
}  // namespace

std::string fuzz_scratch_dir(const char* target) {
  if (g_dir.empty()) {
    g_dir = std::string("/tmp/qk_fuzz.") + target + "." + std::to_string(::getpid());
    qk::make_dirs(g_dir);
    std::atexit(remove_dir);
    qk::logging::set_level(qk::logging::Level::off);
  }
  return g_dir;
}
