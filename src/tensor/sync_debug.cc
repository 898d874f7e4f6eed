// The host-sync counter and QK_SYNC_DEBUG (qk/tensor/sync_debug.h).
#include "qk/tensor/sync_debug.h"

#include <atomic>
#include <string>

#include "qk/base/env.h"
#include "qk/base/error.h"
#include "qk/base/log.h"
#include "qk/tensor/backend.h"

namespace qk {

namespace {

QK_ENV_STRING(env_sync_debug, "QK_SYNC_DEBUG", "off",
              "Report implicit host syncs on a device (torch.cuda.set_sync_debug_mode): off, warn (log each), "
              "error (throw at each).");

SyncDebugMode parse_mode(const std::string& s) {
  if (s == "off" || s.empty()) return SyncDebugMode::off;
  if (s == "warn") return SyncDebugMode::warn;
  if (s == "error") return SyncDebugMode::error;
  QK_THROW(ValueError, "QK_SYNC_DEBUG=", s, ": expected off, warn or error");
}

std::atomic<int> mode_override{-1};  // -1: the environment's
std::atomic<int64_t> syncs{0};

}  // namespace

void set_sync_debug_mode(SyncDebugMode mode) { mode_override.store(static_cast<int>(mode)); }

SyncDebugMode sync_debug_mode() {
  const int m = mode_override.load();
  if (m >= 0) return static_cast<SyncDebugMode>(m);
  static const SyncDebugMode from_env = parse_mode(env_sync_debug.get());
  return from_env;
}

void note_host_sync(Device device, const char* what) {
  // A capture records device work without running it: nothing to wait for.
  QK_CHECK_DEVICE(!capturing(device), "host sync on ", device.str(), ": ", what,
                  " cannot be recorded in a graph (the recorded work has not run when the host would read it); "
                  "keep it out of the captured part, or run without graph capture");
  syncs.fetch_add(1, std::memory_order_relaxed);
  switch (sync_debug_mode()) {
    case SyncDebugMode::off: return;
    case SyncDebugMode::warn:
      QK_WARN("host sync on {}: {} (QK_SYNC_DEBUG=warn)", device.str(), what);
      return;
    case SyncDebugMode::error:
      QK_THROW(DeviceError, "host sync on ", device.str(), ": ", what,
               " (QK_SYNC_DEBUG=error refuses implicit syncs; set it to warn or off)");
  }
}

int64_t host_sync_count() { return syncs.load(std::memory_order_relaxed); }

}  // namespace qk
