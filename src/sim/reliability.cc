// Young/Daly goodput (qk/sim/reliability.h).
#include "qk/sim/reliability.h"

#include <algorithm>
#include <cmath>

#include "qk/base/error.h"

namespace qk::sim {

namespace {

double system_mtbf_s(const ReliabilityInput& in) {
  QK_CHECK(in.devices >= 1 && in.devices_per_node >= 1, "reliability: devices (", in.devices,
           ") and devices per node (", in.devices_per_node, ") must be >= 1");
  QK_CHECK(in.node_mtbf_hours > 0, "--node-mtbf-hours must be > 0, got ", in.node_mtbf_hours);
  QK_CHECK(in.checkpoint_write_s >= 0 && in.restart_s >= 0, "--checkpoint-write-s and --restart-s must be >= 0");
  const double nodes = std::ceil(static_cast<double>(in.devices) / static_cast<double>(in.devices_per_node));
  return in.node_mtbf_hours * 3600.0 / nodes;
}

}  // namespace

double goodput_at_interval(const ReliabilityInput& in, double interval_s) {
  const double M = system_mtbf_s(in), C = in.checkpoint_write_s, R = in.restart_s;
  QK_CHECK(interval_s > 0, "the checkpoint interval must be > 0, got ", interval_s);
  const double g = interval_s / (interval_s + C) * (1.0 - (R + (interval_s + C) / 2.0) / M);
  return std::max(0.0, g);
}

Reliability reliability(const ReliabilityInput& in) {
  Reliability r;
  r.system_mtbf_s = system_mtbf_s(in);
  r.failures_per_day = 86400.0 / r.system_mtbf_s;
  const double C = in.checkpoint_write_s, M = r.system_mtbf_s;
  // Daly (2006), first order; Young's sqrt(2CM) when the checkpoint is free
  // of cost next to M. A free checkpoint: as often as we like (the limit is 0).
  double tau = C > 0 ? std::sqrt(2.0 * C * M) - C : 0.0;
  if (C >= M / 2) tau = M;  // Daly: past this the first-order formula no longer holds
  r.checkpoint_interval_s = std::max(tau, 1e-9);
  r.goodput = goodput_at_interval(in, r.checkpoint_interval_s);
  return r;
}

}  // namespace qk::sim
