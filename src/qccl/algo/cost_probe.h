// Measures the links of a new communicator for the cost model: a short
// ping-pong over each pair of neighbours on the communicator's ring (latency from small messages,
// bandwidth from trains of 1 MiB bulks after a warm-up train, a few ms in all,
// ~70 ms a pair on 1 gbit), then every rank agrees on the
// slowest figure per transport so all ranks choose the same algorithms.
// Figures set with QCCL_LAT_US / QCCL_BW_GBPS are kept; QCCL_COST_MODEL=static
// skips the measurement.
#pragma once

#include <vector>

#include "algo/cost_model.h"
#include "comm.h"

namespace qccl {

// Shared-memory bandwidth of the cost model where the host has more ranks
// than CPUs (c.oversubscribed) and the probe therefore skips shared memory:
// ranks take turns on the cores, so a step moves data well below memcpy
// speed (4 ranks on the 2-core VM: 512 KiB ring steps at ~0.9 GB/s, 2 MiB
// recursive-doubling steps at ~0.6 GB/s; 6 GB/s is the static figure with a
// core each). It puts the ring / recursive-doubling switch near 20 KiB there.
constexpr double kOversubscribedShmGbps = 1.0;

// A link's figures from ping round trips and bulk-train round trips
// (train_bytes out, replies back; train_us[0] is a warm-up, not counted), in
// microseconds.
LinkCost link_figures(std::vector<double> rtts_us, const std::vector<double>& train_us, size_t train_bytes);

// Collective over the communicator (every rank calls it once, at set-up).
// Sets c.cost from the measurement and the configured figures.
void measure_cost_model(qcclComm& c);

// Ranks of one host that the scheduler started on one CPU (forked ranks
// start where their parent ran) can stay there: a waiting rank yields its
// core to the very peer it waits for, and the pair runs at context-switch
// speed (2 ranks on the 2-core VM, unbound: 5 us per 8-byte all-reduce in
// 1 run of 3, 0.3 us bound). Collective at set-up: the ranks tell each
// other their CPU, and where local ranks share one while another CPU they
// may use is free, the later rank moves there: its CPU mask is set to that
// CPU, which moves it, and then given back, so nothing stays bound.
// Skipped with more local ranks than CPUs (nothing to spread to) and with
// QCCL_SPREAD=0.
void spread_local_ranks(qcclComm& c);

// Which CPU each rank should move to (-1: stay): ranks on the same host
// (host[i]) reporting the same CPU, all but the lowest, each to a CPU no
// rank of its host reports that its own mask (allowed[i]) allows.
std::vector<int> spread_plan(const std::vector<int>& cpu, const std::vector<uint64_t>& host,
                             const std::vector<std::vector<int>>& allowed);

}  // namespace qccl
