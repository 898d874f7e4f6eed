// Topology-aware rings and the hierarchical all-reduce plan.
//
// A ring's speed is its slowest hop, so the search maximises the slowest
// hop's bandwidth, then makes as few hops as possible that slow, then the same
// for the next slowest class, and so on (hops of equal bandwidth rank by class:
// MTL/NV before PIX before ... SYS before NET). On a box with MT-Link pairs the
// pairs end up adjacent; a two-socket box crosses the sockets twice; two hosts
// cross the network twice.
//
//   Analysis a = analyze(load_topology_file("box.json"));
//   Ring r = best_ring(a, a.gpus(), p2p_level_setting());
//   fmt::print("{}", format_ring(a, r));
//
// QCCL_P2P_LEVEL (LOC, NVL or MTL, PIX, PXB, PHB, NODE, SYS; as NCCL_P2P_LEVEL
// and the seed's MCCL_P2P_LEVEL) limits the paths peer-to-peer copies may use;
// a hop beyond it is staged through host memory ("shm") at the bandwidth of
// the PCI path up to the CPU, and the ring search sees that bandwidth.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "topo/topology.h"

namespace qccl::topo {

// The most distant path class peer-to-peer may use; kSelf stands for LOC (none).
using P2PLevel = PathClass;
// Parses "LOC", "NVL", "MTL", "PIX", "PXB", "PHB", "NODE", "SYS" (any case);
// throws qk::ValueError naming `what` (the variable or flag) otherwise.
P2PLevel parse_p2p_level(const std::string& s, const char* what = "QCCL_P2P_LEVEL");
P2PLevel p2p_level_setting();  // QCCL_P2P_LEVEL, SYS when unset
bool p2p_allowed(PathClass c, P2PLevel level);

struct Hop {
  int from = 0, to = 0;  // device indices
  std::string label;     // the path class: "MTL4", "PIX", "SYS", "NET"
  PathClass cls = PathClass::kNone;  // class the data takes (staged: at least PHB)
  std::string via;       // "p2p", "shm" (staged through host memory) or "net"
  double gbps = 0;
};
Hop make_hop(const Analysis& a, int from, int to, P2PLevel level);

struct Ring {
  std::vector<int> order;  // device indices; starts at the smallest
  std::vector<Hop> hops;   // order[i] -> order[i+1], the last one closing the ring
  double min_gbps() const;
};

// The best ring through `members` (device indices of `a`).
Ring best_ring(const Analysis& a, const std::vector<int>& members, P2PLevel level);
// The best open path through `members` (a host's part of a hierarchical ring).
std::vector<int> best_path(const Analysis& a, const std::vector<int>& members, P2PLevel level);

// "ring GPU0 GPU1 ... (slowest hop 24 GB/s)" then one line per hop.
std::string format_ring(const Analysis& a, const Ring& r);

// The hierarchical all-reduce of ranks spread over hosts: each host reduce-
// scatters along its local ring, the ranks with the same local index (one per
// host) all-reduce their block across hosts, each host all-gathers along its
// ring. Usable when there are several hosts with the same number of ranks.
struct HierPlan {
  bool usable = false;
  std::string why_not;                         // when not usable
  std::vector<std::vector<int>> local_rings;   // per host (host order): ranks in ring order
  std::vector<std::vector<int>> groups;        // per local index i: the i-th lowest rank of each host
};
// host_of[r]: host number of rank r (0..H-1, numbered by lowest rank);
// local_rings[h]: host h's ranks in ring order.
HierPlan plan_hierarchical(const std::vector<int>& host_of,
                           const std::vector<std::vector<int>>& local_rings);
// The plan for a topology: rank r is its r-th GPU (host by host), each host's
// ring is best_path over its GPUs.
HierPlan plan_for_topology(const Analysis& a, P2PLevel level);
// Text of the plan; `label(a, b)` names the link rank a -> b uses ("" if unknown).
std::string format_plan(const HierPlan& p, const std::function<std::string(int, int)>& label);

}  // namespace qccl::topo
