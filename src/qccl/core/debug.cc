#include "core/debug.h"

#include <atomic>
#include <cctype>
#include <mutex>
#include <string>
#include <vector>

#include "qk/base/env.h"

namespace qccl {

namespace {
QK_ENV_STRING(env_debug, "QCCL_DEBUG", "WARN",
              "qccl log level: NONE, WARN, INFO or TRACE (INFO shows transports and algorithms).");
QK_ENV_STRING(env_subsys, "QCCL_DEBUG_SUBSYS", "ALL",
              "qccl subsystems to log at INFO/TRACE: INIT, COLL, NET, P2P or ALL (comma-separated).");

std::string upper(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

struct State {
  std::atomic<int> level{static_cast<int>(qk::logging::Level::warn)};
  std::mutex mu;
  std::vector<std::string> subsys;
  bool all = true;
};
State& state() {
  static State* s = [] {
    auto* st = new State;
    return st;
  }();
  return *s;
}

void load(State& s, const std::string& lvl_raw, const std::string& sub_raw) {
  std::string lvl = upper(lvl_raw);
  qk::logging::Level l = qk::logging::Level::warn;
  if (lvl == "INFO") l = qk::logging::Level::info;
  else if (lvl == "TRACE") l = qk::logging::Level::trace;
  else if (lvl == "NONE" || lvl == "OFF") l = qk::logging::Level::off;
  else if (lvl == "WARN" || lvl == "VERSION" || lvl.empty()) l = qk::logging::Level::warn;
  else
    qk::logging::write(qk::logging::Level::warn, "INIT",
                   fmt::format("QCCL_DEBUG={} is not NONE, WARN, INFO or TRACE; using WARN", lvl_raw));
  std::lock_guard<std::mutex> g(s.mu);
  s.subsys.clear();
  s.all = false;
  std::string sub = upper(sub_raw);
  size_t start = 0;
  while (start <= sub.size()) {
    size_t end = sub.find(',', start);
    if (end == std::string::npos) end = sub.size();
    std::string item = sub.substr(start, end - start);
    if (item == "ALL" || (item.empty() && sub.empty())) s.all = true;
    else if (!item.empty()) s.subsys.push_back(item);
    start = end + 1;
  }
  s.level.store(static_cast<int>(l));
}

std::once_flag g_once;
}  // namespace

void log_reload() {
  std::call_once(g_once, [] {});
  load(state(), env_debug.reload(), env_subsys.reload());
}

bool log_on(qk::logging::Level lvl, const char* subsys) {
  State& s = state();
  std::call_once(g_once, [&] { load(s, env_debug.get(), env_subsys.get()); });
  if (static_cast<int>(lvl) < s.level.load(std::memory_order_relaxed)) return false;
  if (lvl >= qk::logging::Level::warn || s.all) return true;
  std::lock_guard<std::mutex> g(s.mu);
  for (const auto& w : s.subsys)
    if (w == subsys) return true;
  return false;
}

}  // namespace qccl
