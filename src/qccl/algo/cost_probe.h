// Measures the links of a new communicator for the cost model: a short
// ping-pong over each pair of neighbours on the communicator's ring (latency from small messages,
// bandwidth from trains of 1 MiB bulks after a warm-up train, a few ms in all,
// ~70 ms a pair on 1 gbit), then every rank agrees on the
// slowest figure per transport so all ranks choose the same algorithms.
// Figures set with QCCL_LAT_US / QCCL_BW_GBPS are kept; QCCL_COST_MODEL=static
// skips the measurement.
#pragma once

#include <functional>
#include <vector>

#include "algo/cost_model.h"
#include "comm.h"
#include "engine.h"

namespace qccl {

// A link's figures from ping round trips and bulk-train round trips
// (train_bytes out, replies back; train_us[0] is a warm-up, not counted), in
// microseconds.
LinkCost link_figures(std::vector<double> rtts_us, const std::vector<double>& train_us, size_t train_bytes);

// Collective over the communicator (every rank calls it once, at set-up).
// Sets c.cost from the measurement and the configured figures.
void measure_cost_model(qcclComm& c);

// Set-up collective where the cost model is not measured (QCCL_COST_MODEL=
// static): every rank takes the largest Tuning::chain_chunk (measure_cost_model
// agrees it with its figures).
void agree_chain_chunk(qcclComm& c);

// Set-up collective: rank 0 hears every rank's `mine` (all the same length),
// then sends each rank r the reply_size values answer(all, r) computes for
// it; every rank returns its own. What rank 0 sends is only what each rank
// needs (a max, a CPU), not everyone's figures: at a thousand ranks that is
// the difference between kilobytes and megabytes.
using Answer = std::function<std::vector<double>(const std::vector<double>& all, int rank)>;
std::vector<double> gather_and_answer(Call& call, const std::vector<double>& mine, size_t reply_size,
                                      const Answer& answer);

}  // namespace qccl
