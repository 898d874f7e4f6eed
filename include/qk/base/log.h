// One logger for all of qianka, qccl included: one level, one subsystem
// filter, one writer.
//
//   QK_INFO("loaded {} images from {}", n, dir);
//   QK_DEBUG_SUB("COLL", "ring step {} of {}", i, n);
//
// Level: QK_LOG_LEVEL (trace|debug|info|warn|error|off, default info).
// QK_DEBUG=1, and QCCL_DEBUG (else NCCL_DEBUG) in NCCL's words, can only make
// it more verbose: VERSION (qccl prints its version at init), WARN (shown at
// the default level anyway), INFO (= debug), TRACE (= trace).
// Subsystems: QK_LOG_SUBSYS, else QCCL_DEBUG_SUBSYS, else NCCL_DEBUG_SUBSYS,
// in NCCL's syntax: a comma-separated list (INIT, COLL, P2P, SHM, NET, GRAPH,
// TUNING, ENV, ALLOC, CALL, ...), ALL, or '^' before the list for every
// subsystem but those. It filters debug and trace lines that name a
// subsystem; info and above always show.
// The level is checked before any formatting, so a disabled line costs one
// load and one compare. In multi-process runs set_prefix("[rank 3] ") puts
// the rank on every line.
#pragma once

#include <fmt/format.h>

#include <atomic>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

// "logging", not "log": qk::log is the elementwise logarithm (qk/autograd/functions.h).
namespace qk::logging {

enum class Level : int { trace = 0, debug = 1, info = 2, warn = 3, error = 4, off = 5 };

namespace detail {
extern std::atomic<int> g_level;
bool subsys_enabled(std::string_view subsys);
}  // namespace detail

inline bool enabled(Level lvl) {
  return static_cast<int>(lvl) >= detail::g_level.load(std::memory_order_relaxed);
}
inline bool enabled(Level lvl, std::string_view subsys) {
  return enabled(lvl) && (lvl >= Level::info || detail::subsys_enabled(subsys));
}

Level level();
void set_level(Level lvl);
// Parses "trace".."off" (case-insensitive); throws ValueError on anything else.
Level parse_level(std::string_view s);
const char* level_name(Level lvl);

// NCCL_DEBUG's value (case-insensitive): the level it asks for (nullopt:
// none beyond the default) and whether it asks for the version line.
// NONE is qccl's own: it asks for nothing. Throws ValueError on other values.
struct NcclDebug {
  std::optional<Level> level;
  bool version = false;
};
NcclDebug parse_nccl_debug(std::string_view s);

// Which subsystems' debug and trace lines show (NCCL_DEBUG_SUBSYS syntax).
struct SubsysFilter {
  bool negate = false;             // '^': every subsystem but `names`
  std::vector<std::string> names;  // upper case; empty and not negated: all
  bool allows(std::string_view subsys) const;
};
// "" and "ALL": all; "INIT,COLL"; "^INIT,COLL"; names are case-insensitive.
SubsysFilter parse_subsys(std::string_view spec);

// Re-reads QK_LOG_LEVEL, QK_DEBUG, QK_LOG_SUBSYS, QCCL_DEBUG(_SUBSYS) and
// NCCL_DEBUG(_SUBSYS) (done once at start-up; tests call it after setenv).
// A value that does not parse is reported on stderr and ignored.
void reload_from_env();
// QCCL_DEBUG / NCCL_DEBUG = VERSION.
bool version_requested();

// Text put before every line, e.g. "[rank 1] ". Empty by default.
void set_prefix(std::string prefix);
const std::string& prefix();
// Writes one line to stderr (one write call, so lines from threads never interleave).
void write(Level lvl, std::string_view subsys, std::string_view msg);

}  // namespace qk::logging

#define QK_LOG_SUB(lvl, subsys, ...)                                                  \
  do {                                                                                \
    if (::qk::logging::enabled(lvl, subsys))                                          \
      ::qk::logging::write(lvl, subsys, ::fmt::format(__VA_ARGS__));                  \
  } while (0)
#define QK_LOG(lvl, ...) QK_LOG_SUB(lvl, "", __VA_ARGS__)

#define QK_TRACE(...) QK_LOG(::qk::logging::Level::trace, __VA_ARGS__)
#define QK_DEBUG(...) QK_LOG(::qk::logging::Level::debug, __VA_ARGS__)
#define QK_INFO(...) QK_LOG(::qk::logging::Level::info, __VA_ARGS__)
#define QK_WARN(...) QK_LOG(::qk::logging::Level::warn, __VA_ARGS__)
#define QK_ERROR(...) QK_LOG(::qk::logging::Level::error, __VA_ARGS__)
#define QK_DEBUG_SUB(subsys, ...) QK_LOG_SUB(::qk::logging::Level::debug, subsys, __VA_ARGS__)
#define QK_TRACE_SUB(subsys, ...) QK_LOG_SUB(::qk::logging::Level::trace, subsys, __VA_ARGS__)
