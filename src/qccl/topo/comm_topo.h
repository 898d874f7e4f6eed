// What a communicator knows about where its ranks are: which host each is on
// (by the bootstrap's host hash, so QCCL_HOST_ID simulates hosts), each host's
// ring (topology-aware where the host's GPUs are known: rank j of a host is
// its j-th GPU, as with one process per local device), the flat ring over all
// ranks with the link class of each hop (logged at QCCL_DEBUG=INFO) and the
// hierarchical plan (hierarchical.h).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "topo/ring.h"
#include "topo/topology.h"

struct qcclComm;

namespace qccl::topo {

struct CommTopo {
  int nhosts = 1;
  std::vector<int> host_of;                   // per rank: host number, hosts ordered by lowest rank
  std::vector<int> local_index;               // per rank: place among its host's ranks (ascending)
  std::vector<std::vector<int>> host_ranks;   // per host: its ranks, ascending
  HierPlan plan;                              // per-host rings and cross-host groups
  std::vector<int> ring;                      // every rank: host by host, each along its ring
  std::vector<std::string> hop;               // ring[i] -> ring[i+1]: "MTL4 p2p", "SHM", "NET", ...
  std::string devices;                        // where device knowledge came from, for logs
  std::string format_ring() const;            // "0 -MTL4 p2p-> 1 -... -> 0"
};

// host_hash[r] of every rank; `topo` may be null (no device knowledge).
std::shared_ptr<const CommTopo> make_comm_topo(const std::vector<uint64_t>& host_hash,
                                               const Topology* topo, P2PLevel level);

// Builds the communicator's CommTopo from its peers and the topology
// (QCCL_TOPO_FILE, else detection when it is needed: several hosts, INFO logs
// or QCCL_TOPO_DUMP_FILE), tells the cost model about the hosts, logs the ring.
void attach(qcclComm& c);

}  // namespace qccl::topo
