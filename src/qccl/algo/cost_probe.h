// Measures the links of a new communicator for the cost model: a short
// ping-pong over each pair of ring neighbours (latency from small messages,
// bandwidth from 1 MiB ones, a few ms in all), then every rank agrees on the
// slowest figure per transport so all ranks choose the same algorithms.
// Figures set with QCCL_LAT_US / QCCL_BW_GBPS are kept; QCCL_COST_MODEL=static
// skips the measurement.
#pragma once

#include "qccl/comm.h"

namespace qccl {

// Collective over the communicator (every rank calls it once, at set-up).
// Sets c.cost from the measurement and the configured figures.
void measure_cost_model(qcclComm& c);

}  // namespace qccl
