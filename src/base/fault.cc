#include "qk/base/fault.h"

#include <signal.h>
#include <unistd.h>

#include <cstdlib>
#include <map>
#include <mutex>
#include <optional>
#include <string>

#include "qk/base/error.h"
#include "qk/base/launch_vars.h"
#include "qk/base/log.h"

namespace qk::fault {

namespace {

struct Plan {
  bool armed = false;
  std::string site;
  int64_t n = 0;
};

QK_ENV_OPTIONAL_STRING(env_fault_kill, "QK_FAULT_KILL",
                       "Tests: SITE:RANK:N makes rank RANK SIGKILL itself at fault point SITE (its Nth "
                       "pass, or value N); comma-separated entries apply to successive qk run "
                       "attempts ('-': none). qk/base/fault.h.");

// This attempt's entry of QK_FAULT_KILL, if it names this rank.
Plan parse() {
  Plan p;
  const std::optional<std::string> spec = env_fault_kill.lookup();
  if (!spec) return p;
  const std::string& s = *spec;
  const int64_t attempt = env::launch::restart_count.lookup().value_or(0);
  size_t begin = 0;
  for (int64_t i = 0; i < attempt && begin != std::string::npos; ++i) {
    begin = s.find(',', begin);
    if (begin != std::string::npos) ++begin;
  }
  if (begin == std::string::npos) return p;
  const std::string entry = s.substr(begin, s.find(',', begin) - begin);
  if (entry.empty() || entry == "-") return p;
  const size_t c1 = entry.find(':'), c2 = entry.find(':', c1 == std::string::npos ? c1 : c1 + 1);
  QK_CHECK_AS(ValueError, c1 != std::string::npos && c2 != std::string::npos,
              "QK_FAULT_KILL entry '", entry, "': expected SITE:RANK:N (or '-')");
  char* end = nullptr;
  const int64_t rank = std::strtoll(entry.c_str() + c1 + 1, &end, 10);
  p.n = std::strtoll(entry.c_str() + c2 + 1, &end, 10);
  QK_CHECK_AS(ValueError, end && *end == '\0', "QK_FAULT_KILL entry '", entry, "': N must be an integer");
  p.site = entry.substr(0, c1);
  p.armed = rank == env::launch::rank.lookup().value_or(0);
  return p;
}

const Plan& plan() {
  static const Plan p = parse();
  return p;
}

[[noreturn]] void die(std::string_view site, int64_t v) {
  QK_WARN("QK_FAULT_KILL: killing this process (pid {}) at {} {}", ::getpid(), site, v);
  ::kill(::getpid(), SIGKILL);
  std::abort();  // not reached
}

}  // namespace

void point(std::string_view site, int64_t value) {
  const Plan& p = plan();
  if (p.armed && p.site == site && p.n == value) die(site, value);
}

void point(std::string_view site) {
  const Plan& p = plan();
  if (!p.armed || p.site != site) return;
  static std::mutex mu;
  static std::map<std::string, int64_t, std::less<>> count;
  int64_t n;
  {
    std::lock_guard<std::mutex> lk(mu);
    n = ++count[std::string(site)];
  }
  if (n == p.n) die(site, n);
}

}  // namespace qk::fault
