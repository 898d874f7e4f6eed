// Measures the links of a new communicator for the cost model: a short
// ping-pong over each pair of neighbours on the communicator's ring (latency from small messages,
// bandwidth from 1 MiB ones, a few ms in all), then every rank agrees on the
// slowest figure per transport so all ranks choose the same algorithms.
// Figures set with QCCL_LAT_US / QCCL_BW_GBPS are kept; QCCL_COST_MODEL=static
// skips the measurement.
#pragma once

#include "qccl/comm.h"

namespace qccl {

// Shared-memory bandwidth of the cost model where the host has more ranks
// than CPUs (c.oversubscribed) and the probe therefore skips shared memory:
// ranks take turns on the cores, so a step moves data well below memcpy
// speed (4 ranks on the 2-core VM: 512 KiB ring steps at ~0.9 GB/s, 2 MiB
// recursive-doubling steps at ~0.6 GB/s; 6 GB/s is the static figure with a
// core each). It puts the ring / recursive-doubling switch near 20 KiB there.
constexpr double kOversubscribedShmGbps = 1.0;

// Collective over the communicator (every rank calls it once, at set-up).
// Sets c.cost from the measurement and the configured figures.
void measure_cost_model(qcclComm& c);

}  // namespace qccl
