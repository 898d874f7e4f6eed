// The machine's device topology as qccl sees it, as text: the link matrix
// with CPU and NUMA affinity (as `nvidia-smi topo -m`), the ring qccl builds
// over the GPUs and the hierarchical all-reduce plan. From detection (hwloc,
// NVML where an NVIDIA driver is present) or a topology file
// (docs/topology.md). `qk topo` prints it.
//
//   qk::qccl::TopologyReport what;
//   what.ring = true;                                  // the matrix, then the ring
//   what.matrix = true;
//   std::fputs(qk::qccl::topology_report(what).c_str(), stdout);
#pragma once

#include <string>

namespace qk::qccl {

struct TopologyReport {
  bool matrix = false;    // the link matrix (also when nothing else is asked for)
  bool ring = false;      // the ring over the GPUs, hop by hop
  bool plan = false;      // the hierarchical all-reduce plan (rank r on GPU r)
  bool json = false;      // only the matrix, as JSON
  std::string file;       // a topology file instead of detection ("": QCCL_TOPO_FILE)
  std::string dump;       // also write the topology to this file ("": QCCL_TOPO_DUMP_FILE)
  std::string p2p_level;  // farthest peer-to-peer path: LOC, NVL, PIX, ... ("": QCCL_P2P_LEVEL)
};

// Throws qk::ValueError for a bad file or level, IoError when a file cannot be read or written.
std::string topology_report(const TopologyReport& what);

}  // namespace qk::qccl
