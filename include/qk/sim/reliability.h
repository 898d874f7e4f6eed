// Goodput of a long run on N devices when nodes fail: at a thousand cards a
// failure every few hours is routine, and the checkpoint interval decides
// how much work each one costs. Young (1974) and Daly (2006): with a
// checkpoint of C seconds every tau seconds of work and a system mean time
// between failures M, each failure loses on average tau/2 of work plus the
// restart R, and every interval pays C; the interval that wastes least is
// tau = sqrt(2 C M) - C (Daly's first order, for C < M / 2).
//
//   qk::sim::ReliabilityInput in{.devices = 1024, .devices_per_node = 8, .node_mtbf_hours = 2000,
//                                .checkpoint_write_s = 60, .restart_s = 600};
//   qk::sim::Reliability r = qk::sim::reliability(in);
//   r.system_mtbf_s;  r.checkpoint_interval_s;  r.goodput;          // 15.6 h, 2.4 h, 0.96
#pragma once

#include <cstdint>

namespace qk::sim {

struct ReliabilityInput {
  int64_t devices = 1;
  int64_t devices_per_node = 8;
  double node_mtbf_hours = 0;      // mean time between failures of one node
  double checkpoint_write_s = 0;   // the run stops this long per checkpoint
  double restart_s = 0;            // from a failure to training again (detect, reschedule, load)
};

struct Reliability {
  double system_mtbf_s = 0;          // node MTBF / nodes
  double failures_per_day = 0;
  double checkpoint_interval_s = 0;  // work between checkpoints that maximises goodput
  double goodput = 0;                // useful fraction of wall time at that interval
};

// ValueError for non-positive MTBF or device counts, negative times.
Reliability reliability(const ReliabilityInput& in);
// The useful fraction of wall time with checkpoints every `interval_s` of
// work: interval / (interval + C) x (1 - (R + (interval + C) / 2) / M),
// floored at 0.
double goodput_at_interval(const ReliabilityInput& in, double interval_s);

}  // namespace qk::sim
