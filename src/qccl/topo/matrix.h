// The device link matrix of `qk topo -m`, as nvidia-smi / musa-smi print it:
// one row and column per GPU and NIC, the class of the path between them, and
// each device's CPU and NUMA affinity; then the legend. Also as JSON.
//
//   fmt::print("{}", format_matrix(t, analyze(t)));
#pragma once

#include <string>

#include "topo/topology.h"

namespace qccl::topo {

// "Topology of <host> (<source>): 2 packages, 2 NUMA nodes (...), 8 GPUs, 2 NICs"
std::string format_summary(const Topology& t, const Analysis& a);
// Summary, matrix (or "no GPU devices found"), legend, NIC legend.
std::string format_matrix(const Topology& t, const Analysis& a);
// The same information for scripts (pretty-printed JSON, one trailing newline).
std::string matrix_json(const Topology& t, const Analysis& a);

}  // namespace qccl::topo
