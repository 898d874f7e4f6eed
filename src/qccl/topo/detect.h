// Topology detection on this host: hwloc for packages, NUMA nodes and the PCI
// tree (host bridges, switches, GPUs, NICs), then NVML, where an NVIDIA driver
// is present, for GPU numbering, names and NVLinks.
//
//   Topology t = detect_topology();          // one host: this one
//   Topology t = current_topology();         // QCCL_TOPO_FILE if set, else detected
#pragma once

#include <string>

#include "topo/topology.h"

namespace qccl::topo {

Topology detect_topology();

// QCCL_TOPO_FILE when set (errors name the file and field), else detection.
// Writes QCCL_TOPO_DUMP_FILE when set. Computed once per process.
const Topology& current_topology();

// The settings, declared once in detect.cc.
std::string topo_file_setting();       // QCCL_TOPO_FILE
std::string topo_dump_file_setting();  // QCCL_TOPO_DUMP_FILE

}  // namespace qccl::topo
