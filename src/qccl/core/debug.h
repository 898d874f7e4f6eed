// qccl's lines, through qianka's one logger (qk/base/log.h), in NCCL's
// vocabulary: QCCL_WARN is a warn line, QCCL_INFO a debug line and
// QCCL_TRACE a trace line, each naming its NCCL subsystem (INIT, COLL, P2P,
// SHM, NET, ...). So QCCL_DEBUG=INFO (or NCCL_DEBUG=INFO, or
// QK_LOG_LEVEL=debug) shows the INFO lines, and QCCL_DEBUG_SUBSYS=COLL (or
// NCCL_DEBUG_SUBSYS, QK_LOG_SUBSYS) limits them to collectives.
//
//   QCCL_INFO("INIT", "rank {} -> peer {} via {}", rank, peer, transport);
//
// The level is checked before any formatting.
#pragma once

#include <fmt/format.h>

#include "qk/base/log.h"

namespace qccl {

// With QCCL_DEBUG=VERSION (or NCCL_DEBUG=VERSION): one line naming qccl's
// version, the first time a communicator is created in this process.
void log_version_once();

}  // namespace qccl

#define QCCL_WARN(SUBSYS, ...) QK_LOG_SUB(::qk::logging::Level::warn, SUBSYS, __VA_ARGS__)
#define QCCL_INFO(SUBSYS, ...) QK_LOG_SUB(::qk::logging::Level::debug, SUBSYS, __VA_ARGS__)
#define QCCL_TRACE(SUBSYS, ...) QK_LOG_SUB(::qk::logging::Level::trace, SUBSYS, __VA_ARGS__)
// Whether QCCL_INFO lines of SUBSYS are shown (for work done only to log it).
#define QCCL_INFO_ON(SUBSYS) ::qk::logging::enabled(::qk::logging::Level::debug, SUBSYS)
