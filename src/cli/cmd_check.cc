// `qk check`: what this build can do and whether this machine runs it
// (the native counterpart of the seed's check_musa.py).
#include <fmt/format.h>
#include <sys/sysinfo.h>

#include <string>

#include "command.h"
#include "check_sections.h"
#include "qk/base/env.h"
#include "qk/base/host_info.h"
#include "qk/base/thread_pool.h"
#include "qk/base/version.h"

namespace qk::cli {
namespace {

std::string cpu_model() {
  std::string m = cpu_model_name();
  return m.empty() ? "unknown CPU" : m;
}

struct CheckOptions {
  bool env = false;
  int64_t size = 1024;
};

void run_check(const CheckOptions& o) {
  const std::string bar(56, '=');
  fmt::print("{}\nqianka environment check\n{}\n", bar, bar);
  fmt::print("qk version:      {} ({})\n", QK_VERSION_STRING, QK_GIT_REVISION);
  print_build_config();
  struct sysinfo si;
  sysinfo(&si);
  fmt::print("\nDevices\n");
  fmt::print("  cpu:           {} ({} threads in the pool)\n", cpu_model(), num_threads());
  fmt::print("    memory:      {:.1f} GB\n",
             static_cast<double>(si.totalram) * si.mem_unit / 1e9);
  print_accelerators();
  if (o.env) {
    fmt::print("\nSettings (environment variables)\n");
    for (const auto& v : env::registered()) {
      auto cur = env::get_raw(v.name);
      fmt::print("  {:<22} = {:<10} (default {}) {}\n", v.name, cur ? *cur : "", v.default_value,
                 v.help);
    }
  }
  run_self_tests(o.size);
  fmt::print("{}\n", bar);
}

void setup_check(CLI::App& app) {
  auto opts = std::make_shared<CheckOptions>();
  app.add_flag("--env", opts->env, "Also list every QK_/QCCL_ environment setting");
  app.add_option("--size", opts->size, "Matrix size for the matmul timing")
      ->check(CLI::Range(16, 8192))
      ->capture_default_str();
  app.callback([opts] { run_check(*opts); });
}

}  // namespace

QK_REGISTER_COMMAND(check, "Check the build, the devices and a tensor self-test", setup_check);

}  // namespace qk::cli
