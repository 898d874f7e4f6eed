// The topology as text, for `qk topo` (qk/qccl/topology.h).
#include <fmt/format.h>

#include <string>
#include <vector>

#include "qk/qccl/topology.h"
#include "topo/detect.h"
#include "topo/matrix.h"
#include "topo/ring.h"
#include "topo/topo_file.h"

namespace qk::qccl {

std::string topology_report(const TopologyReport& o) {
  using namespace ::qccl::topo;
  std::string file = o.file.empty() ? topo_file_setting() : o.file;
  Topology t = file.empty() ? detect_topology() : load_topology_file(file);
  std::string dump = o.dump.empty() ? topo_dump_file_setting() : o.dump;
  if (!dump.empty()) write_topology_file(t, dump);
  P2PLevel level = o.p2p_level.empty() ? p2p_level_setting() : parse_p2p_level(o.p2p_level, "--p2p-level");
  Analysis a = analyze(t);
  if (o.json) return matrix_json(t, a);
  bool matrix = o.matrix || (!o.ring && !o.plan);
  std::string out;
  auto section = [&out](const std::string& text) {
    if (!out.empty()) out += '\n';
    out += text;
  };
  if (matrix) section(format_matrix(t, a));
  if (o.ring) section(format_ring(a, best_ring(a, a.gpus(), level)));
  if (o.plan) {
    std::vector<int> gpus = a.gpus();
    auto label = [&](int x, int y) { return make_hop(a, gpus[x], gpus[y], level).label; };
    std::string ranks = gpus.empty() ? std::string("no GPU")
                                     : fmt::format("GPU r ({}..{})", a.devices[gpus[0]].label,
                                                   a.devices[gpus.back()].label);
    section(fmt::format("ranks: rank r on {}\n{}", ranks, format_plan(plan_for_topology(a, level), label)));
  }
  if (!dump.empty()) out += fmt::format("\nWrote the topology to {}\n", dump);
  return out;
}

}  // namespace qk::qccl
