// Subcommands of `qk` register themselves; main() only parses and dispatches.
//
//   // in src/cli/cmd_topo.cc:
//   static void setup_topo(CLI::App& app) {
//     auto* opts = ...; app.add_flag("-m,--matrix", ...);
//     app.callback([opts] { run_topo(*opts); });   // throw qk::Error on failure
//   }
//   QK_REGISTER_COMMAND(topo, "Show the device topology", setup_topo);
//
// A callback that throws qk::Error makes `qk` print "qk <cmd>: error: ..."
// and exit 1; a callback may also call qk::cli::exit_with(code).
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <string>
#include <vector>

namespace qk::cli {

struct Command {
  std::string name;
  std::string summary;
  std::function<void(CLI::App&)> setup;
};

std::vector<Command>& commands();

// Run by main() before it parses the command line, where a qk::Error is
// reported as any command's (cmd_ops.cc loads QK_EXTENSIONS here).
std::vector<std::function<void()>>& startup_hooks();
struct StartupHook {
  explicit StartupHook(std::function<void()> hook) { startup_hooks().push_back(std::move(hook)); }
};

struct Registrar {
  Registrar(std::string name, std::string summary, std::function<void(CLI::App&)> setup) {
    commands().push_back({std::move(name), std::move(summary), std::move(setup)});
  }
};

// Ends the command with this exit status (after the callback returns).
class ExitCode : public std::exception {
 public:
  explicit ExitCode(int code) : code_(code) {}
  int code() const { return code_; }
  const char* what() const noexcept override { return "exit"; }

 private:
  int code_;
};
[[noreturn]] inline void exit_with(int code) { throw ExitCode(code); }

}  // namespace qk::cli

#define QK_REGISTER_COMMAND(name, summary, setup) \
  static ::qk::cli::Registrar qk_cli_registrar_##name(#name, summary, setup)
