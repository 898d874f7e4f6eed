// Kernel, collective and point-to-point costs (costs.h).
#include "costs.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "qk/base/error.h"

namespace qk::sim {

namespace {

// The share of its rate alone that each of `ranks` ranks computing at once
// on a node gets: the cores split among them, and what they cost each other
// (shared caches and memory bandwidth; time slicing when they outnumber the
// cores). 1 on an accelerator.
double core_share(const Device& d, int64_t ranks) {
  if (d.cpu_cores <= 0) return 1.0;
  // Each rank as the calibration measured it: threads_per_rank threads.
  const double want = static_cast<double>(std::max(1, d.threads_per_rank) * std::max<int64_t>(1, ranks));
  const double cores = static_cast<double>(d.cpu_cores);
  if (want > cores) return cores / want * (ranks > 1 ? d.oversubscribed_efficiency : 1.0);
  return ranks > 1 ? d.shared_efficiency : 1.0;
}

}  // namespace

DeviceRates::DeviceRates(const Cluster& c, std::string dtype, int64_t ranks_on_node)
    : c_(c), dtype_(std::move(dtype)) {
  peak_ = c.device.peak_flops(dtype_);
  scale_ = core_share(c.device, ranks_on_node);
}

double DeviceRates::speed_with(int64_t computing_ranks) const {
  return core_share(c_.device, std::max<int64_t>(1, computing_ranks)) / scale_;
}

double DeviceRates::kernel(double seconds) const { return std::max(seconds, c_.device.kernel_floor_us * 1e-6); }

double DeviceRates::gemm_rate(double m, double n, double k, double batch) const {
  const GemmModel& g = c_.device.gemm;
  if (m <= 0 || n <= 0 || k <= 0 || batch <= 0) return peak_;
  // Measured: interpolate in log(FLOPs) between the samples of this dtype.
  std::vector<std::pair<double, double>> pts;
  for (const GemmSample& s : g.samples)
    if (s.dtype == dtype_)
      pts.emplace_back(std::log(2.0 * static_cast<double>(s.m) * static_cast<double>(s.n) * static_cast<double>(s.k)),
                       s.flops);
  if (!pts.empty()) {
    std::sort(pts.begin(), pts.end());
    // A CPU's batched GEMM is one GEMM call per matrix (qk's bmm), each at its own size's rate; a GPU's
    // is one kernel whose tiles fill the device together, at the whole batch's.
    const double x = std::log(2.0 * m * n * k * (c_.device.cpu_cores > 0 ? 1.0 : batch));
    if (x <= pts.front().first) return pts.front().second * scale_;
    if (x >= pts.back().first) return pts.back().second * scale_;
    for (size_t i = 1; i < pts.size(); ++i)
      if (x <= pts[i].first) {
        const double span = pts[i].first - pts[i - 1].first;
        const double w = span > 0 ? (x - pts[i - 1].first) / span : 1.0;
        return (pts[i - 1].second * (1 - w) + pts[i].second * w) * scale_;
      }
    return pts.back().second * scale_;
  }
  // Published: peak x efficiency x wave quantization (the last wave of tiles
  // leaves processors idle; partial tiles compute padding).
  double util = 1.0;
  if (g.units > 1) {
    const double tm = static_cast<double>(g.tile_m), tn = static_cast<double>(g.tile_n);
    const double tiles = batch * std::ceil(m / tm) * std::ceil(n / tn);
    const double waves = std::ceil(tiles / static_cast<double>(g.units));
    util = (batch * m * n) / (waves * static_cast<double>(g.units) * tm * tn);
  }
  return peak_ * g.efficiency * std::min(1.0, util) * scale_;
}

double DeviceRates::gemm(double m, double n, double k, double batch) const {
  if (m <= 0 || n <= 0 || k <= 0 || batch <= 0) return 0;
  return kernel(2.0 * m * n * k * batch / gemm_rate(m, n, k, batch));
}

double DeviceRates::flash_forward(double flops) const {
  return kernel(flops / (peak_ * c_.device.flash_forward_efficiency * scale_));
}

double DeviceRates::flash_backward(double flops) const {
  return kernel(flops / (peak_ * c_.device.flash_backward_efficiency * scale_));
}

double DeviceRates::stream(double bytes) const {
  const Device& d = c_.device;
  return kernel(bytes / (d.memory_bandwidth_gb_s * 1e9 * d.memory_efficiency * scale_));
}

double DeviceRates::stream(const std::string& key, std::initializer_list<double> pieces) const {
  const auto it = c_.device.stream_kernels.find(key);
  if (it == c_.device.stream_kernels.end()) {
    double s = 0;
    for (const double b : pieces)
      if (b > 0) s += stream(b);
    return s;
  }
  double bytes = 0;
  for (const double b : pieces) bytes += b;
  return kernel(bytes / (it->second.gb_s(bytes) * 1e9 * scale_));
}

double DeviceRates::stream_if_calibrated(const std::string& key, double bytes) const {
  if (bytes <= 0 || !c_.device.stream_kernels.contains(key)) return 0;
  return stream(key, {bytes});
}

GroupPlacement place_group(const Cluster& c, int64_t size, int64_t stride, int64_t world) {
  QK_CHECK(size >= 1 && stride >= 1, "place_group: size ", size, ", stride ", stride);
  GroupPlacement g;
  g.size = size;
  const int64_t node = std::min<int64_t>(c.gpus_per_node, std::max<int64_t>(world, 1));
  g.per_node = stride >= node ? 1 : std::min(size, std::max<int64_t>(1, node / stride));
  g.nodes = (size + g.per_node - 1) / g.per_node;
  g.groups_sharing_node = std::max<int64_t>(1, node / g.per_node);
  return g;
}

qccl::CollectiveLinks group_links(const Cluster& c, const GroupPlacement& g, const DeviceRates& rates) {
  qccl::CollectiveLinks l;
  l.intra = {c.intra.latency_us, c.intra.bandwidth_gb_s * c.intra.efficiency};
  l.inter = {c.network.nic.latency_us, c.node_network_gb_s() / static_cast<double>(g.groups_sharing_node)};
  // Reductions run on the device at streaming speed (three operand passes).
  l.reduce_gbps = c.device.memory_bandwidth_gb_s * c.device.memory_efficiency * rates.contention() / 3.0;
  l.hosts = static_cast<int>(g.nodes);
  l.ranks_per_host = static_cast<int>(g.per_node);
  return l;
}

double collective_seconds(const Cluster& c, qccl::Collective coll, const GroupPlacement& g, double bytes,
                          const DeviceRates& rates, std::string* algorithm) {
  if (g.size <= 1 || bytes <= 0) {
    if (algorithm) *algorithm = "none";
    return 0;
  }
  const qccl::CollectiveEstimate e = qccl::estimate_collective(coll, group_links(c, g, rates), bytes);
  if (algorithm) *algorithm = e.algorithm;
  return e.us * 1e-6;
}

double p2p_seconds(const Cluster& c, bool cross_node, double bytes) {
  if (bytes <= 0) return 0;
  if (!cross_node) return c.intra.latency_us * 1e-6 + bytes / (c.intra.bandwidth_gb_s * c.intra.efficiency * 1e9);
  const double share = c.node_network_gb_s() / static_cast<double>(c.gpus_per_node);
  return c.network.nic.latency_us * 1e-6 + bytes / (share * 1e9);
}

}  // namespace qk::sim
