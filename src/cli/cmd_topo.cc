// `qk topo`: the device topology as nvidia-smi / musa-smi `topo -m` show it
// (link matrix, CPU and NUMA affinity, legend), the ring qccl would build on
// it and the hierarchical all-reduce plan; from detection (hwloc, NVML where
// an NVIDIA driver is present) or from a topology file (docs/topology.md).
#include <fmt/format.h>

#include <memory>
#include <string>

#include "command.h"
#include "qk/qccl/topology.h"

namespace qk::cli {
namespace {

void setup_topo(CLI::App& app) {
  auto o = std::make_shared<qccl::TopologyReport>();
  app.add_flag("-m,--matrix", o->matrix, "Device link matrix with CPU/NUMA affinity (the default)");
  app.add_flag("--ring", o->ring, "The ring qccl builds over the GPUs, hop by hop");
  app.add_flag("--plan", o->plan, "The hierarchical all-reduce plan (rank r on GPU r)");
  app.add_flag("--json", o->json, "The matrix as JSON, for scripts");
  app.add_option("--file", o->file, "Topology file (JSON) instead of detection (default: QCCL_TOPO_FILE)");
  app.add_option("--dump", o->dump, "Write the topology to this file (default: QCCL_TOPO_DUMP_FILE)");
  app.add_option("--p2p-level", o->p2p_level,
                 "Farthest path peer-to-peer may use: LOC, NVL/MTL, PIX, PXB, PHB, NODE, SYS "
                 "(default: QCCL_P2P_LEVEL)");
  app.callback([o] { fmt::print("{}", qccl::topology_report(*o)); });
}

}  // namespace

QK_REGISTER_COMMAND(topo, "Show the device topology (topo -m), qccl's ring and hierarchical plan", setup_topo);

}  // namespace qk::cli
