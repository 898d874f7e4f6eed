// `qk`: the one command-line tool of qianka. Subcommands live in cmd_*.cc.
#include <algorithm>
#include <cstdio>

#include "command.h"
#include "qk/base/error.h"
#include "qk/base/heap_policy.h"
#include "qk/base/log.h"
#include "qk/base/version.h"

namespace qk::cli {
std::vector<Command>& commands() {
  static std::vector<Command> c;
  return c;
}
std::vector<std::function<void()>>& startup_hooks() {
  static std::vector<std::function<void()>> h;
  return h;
}
}  // namespace qk::cli

int main(int argc, char** argv) {
  // Whole lines as they are printed, also into a pipe (qk run, tee, CI
  // logs): a worker killed with SIGKILL loses no buffered output.
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  // Freed heap memory reused, not mapped and faulted in again every step (heap_policy.h).
  qk::keep_freed_heap_memory();
  using namespace qk::cli;
  CLI::App app{"qk: qianka, a C++ stack for training models on GPU clusters"};
  app.name("qk");
  app.require_subcommand(0, 1);
  app.set_version_flag("-V,--version",
                       std::string("qk ") + QK_VERSION_STRING + " (" + QK_GIT_REVISION + ")");
  app.footer("Run 'qk help <command>' or 'qk <command> --help' for a command's options.");

  auto& cmds = commands();
  std::sort(cmds.begin(), cmds.end(), [](const Command& a, const Command& b) { return a.name < b.name; });
  for (auto& c : cmds) {
    CLI::App* sub = app.add_subcommand(c.name, c.summary);
    c.setup(*sub);
  }

  // `qk help [cmd]`
  std::string help_topic;
  CLI::App* help = app.add_subcommand("help", "Show help for qk or one of its commands");
  help->add_option("command", help_topic, "The command to describe");
  help->callback([&] {
    if (help_topic.empty()) {
      // app.help() would describe the selected subcommand (`help` itself).
      std::fputs(app.get_formatter()->make_help(&app, "qk", CLI::AppFormatMode::Normal).c_str(),
                 stdout);
      return;
    }
    CLI::App* target = nullptr;
    try {
      target = app.get_subcommand(help_topic);
    } catch (const CLI::OptionNotFound&) {
    }
    if (target == nullptr || target == help) {
      std::fprintf(stderr, "qk help: unknown command '%s'; run 'qk help' for the list\n",
                   help_topic.c_str());
      throw ExitCode(2);
    }
    std::fputs(target->help().c_str(), stdout);
  });

  try {
    for (const auto& hook : startup_hooks()) hook();
    app.parse(argc, argv);
    if (app.get_subcommands().empty()) {
      std::fputs(app.help().c_str(), stdout);
      return 0;
    }
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const ExitCode& e) {
    return e.code();
  } catch (const qk::Error& e) {
    std::string cmd = app.get_subcommands().empty() ? "" : " " + app.get_subcommands()[0]->get_name();
    std::fprintf(stderr, "qk%s: error: %s\n", cmd.c_str(), e.message().c_str());
    QK_DEBUG("error raised at {}:{}", e.file(), e.line());
    // Its own exit code: `qk run` ends the job rather than restart it into the same refusal.
    return dynamic_cast<const qk::WorldSizeError*>(&e) ? qk::kExitWorldSizeRefused : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "qk: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
