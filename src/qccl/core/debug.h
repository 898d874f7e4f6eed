// qccl's logging: QCCL_DEBUG=WARN|INFO|TRACE and QCCL_DEBUG_SUBSYS=INIT,COLL,NET,P2P
// (comma-separated; ALL by default), written through the base logger so the
// rank prefix and time stamps are shared with the rest of qianka.
//
//   QCCL_INFO("INIT", "rank {} -> peer {} via {}", rank, peer, transport);
//
// The level is checked before any formatting. WARN lines are shown unless
// QCCL_DEBUG=NONE; INFO and TRACE lines only when asked for.
#pragma once

#include <fmt/format.h>

#include "qk/base/log.h"

namespace qccl {

bool log_on(qk::logging::Level lvl, const char* subsys);
// Re-reads QCCL_DEBUG / QCCL_DEBUG_SUBSYS (tests).
void log_reload();

}  // namespace qccl

#define QCCL_LOG(LVL, SUBSYS, ...)                                                     \
  do {                                                                                 \
    if (::qccl::log_on(::qk::logging::Level::LVL, SUBSYS))                                 \
      ::qk::logging::write(::qk::logging::Level::LVL, SUBSYS, ::fmt::format(__VA_ARGS__));     \
  } while (0)
#define QCCL_WARN(SUBSYS, ...) QCCL_LOG(warn, SUBSYS, __VA_ARGS__)
#define QCCL_INFO(SUBSYS, ...) QCCL_LOG(info, SUBSYS, __VA_ARGS__)
#define QCCL_TRACE(SUBSYS, ...) QCCL_LOG(trace, SUBSYS, __VA_ARGS__)
