// The topology file (QCCL_TOPO_FILE, `qk topo --file`): a JSON description of
// any machine in the model of topology.h, and the writer QCCL_TOPO_DUMP_FILE
// uses for what was detected, in the same schema (docs/topology.md).
//
//   Topology t = load_topology_file("tests/qccl/topo/mtlink_pairs_8.json");
//   write_topology_file(t, "/tmp/detected.json");
//
// Every mistake is a qk::ValueError naming the file and the field, e.g.
//   topology file 'x.json': hosts[0].links[3].type: unknown link type 'nvlnk'
//   (expected nvlink, mtlink, pcie, host_bridge, inter_socket or network)
#pragma once

#include <string>

#include "topo/topology.h"

namespace qccl::topo {

// Parses and validates; `origin` names the text in errors.
Topology parse_topology(const std::string& json_text, const std::string& origin);
Topology load_topology_file(const std::string& path);

std::string topology_to_json(const Topology& t);
// Writes atomically (a temporary file, then rename).
void write_topology_file(const Topology& t, const std::string& path);

}  // namespace qccl::topo
