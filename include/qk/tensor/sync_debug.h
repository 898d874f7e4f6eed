// Host stalls on a device, counted and, on request, reported: the host
// waiting for a device's work to finish (a copy to the host to read a value,
// an index check reading its error flag) costs the overlap of host and
// device, so a steady-state training step should make as few as it can.
// As torch.cuda.set_sync_debug_mode:
//
//   qk::set_sync_debug_mode(qk::SyncDebugMode::warn);   // or QK_SYNC_DEBUG=warn
//   ... every implicit sync logs a warning naming what waited ...
//   int64_t n = qk::host_sync_count();                   // all devices, since the start
//
// Backends call note_host_sync where the host blocks on a device
// implicitly; an explicit synchronize() (qk::synchronize, cuda::synchronize)
// is what the caller asked for and is not reported.
#pragma once

#include <cstdint>

#include "qk/tensor/device.h"

namespace qk {

enum class SyncDebugMode { off, warn, error };

// The mode starts as QK_SYNC_DEBUG says (off, warn, error).
void set_sync_debug_mode(SyncDebugMode mode);
SyncDebugMode sync_debug_mode();

// Counts an implicit host sync on `device` (`what` names it, e.g. "copy to
// the host"); under warn logs it, under error throws qk::DeviceError naming
// it. Thread-safe.
void note_host_sync(Device device, const char* what);
int64_t host_sync_count();

}  // namespace qk
