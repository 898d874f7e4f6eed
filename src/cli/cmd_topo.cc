// `qk topo`: the device topology as nvidia-smi / musa-smi `topo -m` show it
// (link matrix, CPU and NUMA affinity, legend), the ring qccl would build on
// it and the hierarchical all-reduce plan; from detection (hwloc, NVML where
// an NVIDIA driver is present) or from a topology file (docs/topology.md).
#include <fmt/format.h>

#include <memory>
#include <string>

#include "cli/command.h"
#include "qccl/topo/detect.h"
#include "qccl/topo/matrix.h"
#include "qccl/topo/ring.h"
#include "qccl/topo/topo_file.h"

namespace qk::cli {
namespace {

struct TopoOptions {
  bool matrix = false, ring = false, plan = false, json = false;
  std::string file, dump, p2p_level;
};

void run_topo(const TopoOptions& o) {
  using namespace qccl::topo;
  std::string file = o.file.empty() ? topo_file_setting() : o.file;
  Topology t = file.empty() ? detect_topology() : load_topology_file(file);
  std::string dump = o.dump.empty() ? topo_dump_file_setting() : o.dump;
  if (!dump.empty()) write_topology_file(t, dump);
  P2PLevel level = o.p2p_level.empty() ? p2p_level_setting() : parse_p2p_level(o.p2p_level, "--p2p-level");
  Analysis a = analyze(t);
  bool matrix = o.matrix || (!o.ring && !o.plan);
  if (o.json) {
    fmt::print("{}", matrix_json(t, a));
    return;
  }
  std::string out;
  if (matrix) out += format_matrix(t, a);
  if (o.ring) out += (out.empty() ? "" : "\n") + format_ring(a, best_ring(a, a.gpus(), level));
  if (o.plan) {
    std::vector<int> gpus = a.gpus();
    auto label = [&](int x, int y) { return make_hop(a, gpus[x], gpus[y], level).label; };
    std::string p = format_plan(plan_for_topology(a, level), label);
    out += (out.empty() ? "" : "\n") + std::string("ranks: rank r on ") +
           (gpus.empty() ? "no GPU\n" : "GPU r (" + a.devices[gpus[0]].label + ".." +
                                            a.devices[gpus.back()].label + ")\n") + p;
  }
  if (!dump.empty()) out += fmt::format("\nWrote the topology to {}\n", dump);
  fmt::print("{}", out);
}

void setup_topo(CLI::App& app) {
  auto o = std::make_shared<TopoOptions>();
  app.add_flag("-m,--matrix", o->matrix, "Device link matrix with CPU/NUMA affinity (the default)");
  app.add_flag("--ring", o->ring, "The ring qccl builds over the GPUs, hop by hop");
  app.add_flag("--plan", o->plan, "The hierarchical all-reduce plan (rank r on GPU r)");
  app.add_flag("--json", o->json, "The matrix as JSON, for scripts");
  app.add_option("--file", o->file, "Topology file (JSON) instead of detection (default: QCCL_TOPO_FILE)");
  app.add_option("--dump", o->dump, "Write the topology to this file (default: QCCL_TOPO_DUMP_FILE)");
  app.add_option("--p2p-level", o->p2p_level,
                 "Farthest path peer-to-peer may use: LOC, NVL/MTL, PIX, PXB, PHB, NODE, SYS "
                 "(default: QCCL_P2P_LEVEL)");
  app.callback([o] { run_topo(*o); });
}

}  // namespace

QK_REGISTER_COMMAND(topo, "Show the device topology (topo -m), qccl's ring and hierarchical plan", setup_topo);

}  // namespace qk::cli
