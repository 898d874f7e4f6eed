// The cost pieces of a simulated step: what one kernel takes on the
// cluster's device, and what one collective or point-to-point transfer takes
// between the ranks of a group, by qccl's cost model over the cluster's
// links. Each piece is tested against hand-computed values (tests/sim).
#pragma once

#include <initializer_list>
#include <string>

#include "qk/qccl/cost_model.h"
#include "qk/sim/cluster.h"

namespace qk::sim {

// The device's rates in one dtype, for `ranks_on_node` ranks sharing a node
// (on a CPU device they share its cores).
class DeviceRates {
 public:
  DeviceRates(const Cluster& c, std::string dtype, int64_t ranks_on_node);

  const std::string& dtype() const { return dtype_; }
  double peak_flops() const { return peak_; }
  // Seconds for C[m, n] = A[m, k] B[k, n] (2mnk FLOPs), or `batch` of them
  // in one kernel (a batched GEMM: its tiles fill the processors together;
  // on a CPU device one GEMM per matrix, each at its own size's rate).
  double gemm(double m, double n, double k, double batch = 1) const;
  // The FLOP/s such a GEMM reaches.
  double gemm_rate(double m, double n, double k, double batch = 1) const;
  // Fused attention of `flops` in forward / backward.
  double flash_forward(double flops) const;
  double flash_backward(double flops) const;
  // A streaming kernel that reads and writes `bytes` in all.
  double stream(double bytes) const;
  // A streaming piece of kind `key` ("layer_norm.forward": stream_kinds.h):
  // at its calibrated rate for that many bytes when the device has one, else
  // the sum of stream(piece) over the pieces the model counts for it.
  double stream(const std::string& key, std::initializer_list<double> pieces) const;
  // The same where the device has calibrated `key`; 0 where it has not (work the published stacks fuse
  // into other kernels: stream_kinds.h says which).
  double stream_if_calibrated(const std::string& key, double bytes) const;
  // Seconds of one kernel that would take `seconds` alone (the device's floor).
  double kernel(double seconds) const;
  double contention() const { return scale_; }
  // How much faster than these rates a rank computes while only
  // `computing_ranks` of the node's ranks compute (the others wait on a
  // pipeline hand-over): 1 on an accelerator; on a CPU host whose ranks
  // outnumber its cores, a waiting rank gives its core to the others.
  double speed_with(int64_t computing_ranks) const;

 private:
  const Cluster& c_;
  std::string dtype_;
  double peak_ = 0;
  double scale_ = 1;  // the share of the device a rank gets (CPU cores shared by more ranks than they hold)
};

// Where a group's ranks lie: `size` ranks `stride` apart in the rank order,
// nodes of gpus_per_node consecutive ranks. Every group of the same kind
// runs at the same time, so those on one node share its network.
struct GroupPlacement {
  int64_t size = 1;
  int64_t per_node = 1;             // of this group's ranks on one node
  int64_t nodes = 1;                // the group spans
  int64_t groups_sharing_node = 1;  // groups of this kind with ranks on one node
};
GroupPlacement place_group(const Cluster& c, int64_t size, int64_t stride, int64_t world);

// The links qccl's model sees for such a group: the intra-node link at its
// efficiency, the node's network divided among the groups sharing it.
qccl::CollectiveLinks group_links(const Cluster& c, const GroupPlacement& g, const DeviceRates& rates);

// Seconds for one collective of `bytes` per rank (qccl's chosen algorithm; its
// name into *algorithm when given).
double collective_seconds(const Cluster& c, qccl::Collective coll, const GroupPlacement& g, double bytes,
                          const DeviceRates& rates, std::string* algorithm = nullptr);

// Seconds for one point-to-point transfer of `bytes` between adjacent
// pipeline stages: over the network (each rank of a node sending at once,
// sharing the node's NICs) when they are on different nodes, else the
// intra-node link.
double p2p_seconds(const Cluster& c, bool cross_node, double bytes);

}  // namespace qk::sim
