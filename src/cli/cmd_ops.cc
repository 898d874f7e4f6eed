// `qk ops`: the extension ops this process has, from QK_EXTENSIONS (loaded
// at start-up by the hook below) and --load; each with its schema, the
// devices it has kernels for and whether it has a backward.
#include <fmt/format.h>

#include <memory>
#include <string>
#include <vector>

#include "command.h"
#include "qk/plugin/registry.h"

namespace qk::cli {
namespace {

const StartupHook load_env_extensions([] { plugin::load_extensions_from_env(); });

void print_ops() {
  const std::vector<plugin::LoadedLibrary> libs = plugin::loaded_libraries();
  if (libs.empty()) {
    fmt::print("no extension ops loaded (set QK_EXTENSIONS=lib1.so:lib2.so or pass --load)\n");
    return;
  }
  for (const auto& lib : libs) {
    fmt::print("{} ({})\n", lib.ns, lib.path);
    for (const auto& name : lib.ops) {
      const plugin::OpDef& op = plugin::find_op(name);
      fmt::print("  {}::{}\n      kernels: {}; backward: {}\n", lib.ns, op.schema.str(),
                 op.kernel_devices(), op.backward ? "yes" : "no");
    }
  }
}

void setup_ops(CLI::App& app) {
  auto paths = std::make_shared<std::vector<std::string>>();
  app.add_option("--load", *paths, "Also load these extension libraries (after QK_EXTENSIONS)");
  app.callback([paths] {
    for (const auto& p : *paths) plugin::load_library(p);
    print_ops();
  });
}

}  // namespace

QK_REGISTER_COMMAND(ops, "List the extension ops loaded from QK_EXTENSIONS or --load", setup_ops);

}  // namespace qk::cli
