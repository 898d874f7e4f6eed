#include "topo/matrix.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

namespace qccl::topo {

namespace {
int count_type(const Host& h, NodeType t) {
  return static_cast<int>(std::count_if(h.nodes.begin(), h.nodes.end(),
                                        [&](const Node& n) { return n.type == t; }));
}
std::string plural(int n, const char* one, const char* many) {
  return fmt::format("{} {}", n, n == 1 ? one : many);
}
std::string or_na(const std::string& s) { return s.empty() ? "N/A" : s; }

const char* kLegend =
    "Legend:\n"
    "\n"
    "  X    = Self\n"
    "  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)\n"
    "  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host Bridges within a NUMA node\n"
    "  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)\n"
    "  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)\n"
    "  PIX  = Connection traversing at most a single PCIe bridge\n"
    "  NV#  = Connection traversing a bonded set of # NVLinks\n"
    "  MTL# = Connection traversing a bonded set of # MT-Links\n"
    "  NET  = Connection traversing the network between hosts\n";
}  // namespace

std::string format_summary(const Topology& t, const Analysis& a) {
  std::string s;
  for (size_t hi = 0; hi < t.hosts.size(); ++hi) {
    const Host& h = t.hosts[hi];
    std::string numa;
    for (const auto& n : h.nodes)
      if (n.type == NodeType::kNuma)
        numa += fmt::format("{}{}: CPUs {}", numa.empty() ? "" : ", ", n.index, or_na(n.cpus));
    int gpus = 0, nics = 0;
    for (const auto& d : a.devices)
      if (d.host == static_cast<int>(hi)) (d.type == NodeType::kGpu ? gpus : nics)++;
    s += fmt::format("Host {} ({}): {}, {}{}, {}, {}\n", h.name, t.source,
                     plural(count_type(h, NodeType::kPackage), "CPU package", "CPU packages"),
                     plural(count_type(h, NodeType::kNuma), "NUMA node", "NUMA nodes"),
                     numa.empty() ? "" : " (" + numa + ")",
                     gpus ? plural(gpus, "GPU", "GPUs") : "no GPU devices found",
                     plural(nics, "NIC", "NICs"));
  }
  return s;
}

std::string format_matrix(const Topology& t, const Analysis& a) {
  std::string s = format_summary(t, a) + "\n";
  size_t n = a.devices.size();
  bool multi = t.hosts.size() > 1;
  if (n == 0) return s + "No GPU or NIC devices to show.\n";
  // Cells, then column widths.
  std::vector<std::string> head{""};
  for (const auto& d : a.devices) head.push_back(d.label);
  head.push_back("CPU Affinity");
  head.push_back("NUMA Affinity");
  if (multi) head.push_back("Host");
  std::vector<std::vector<std::string>> rows;
  for (size_t i = 0; i < n; ++i) {
    const Device& d = a.devices[i];
    std::vector<std::string> r{d.label};
    for (size_t j = 0; j < n; ++j) r.push_back(a.path[i][j].label());
    r.push_back(or_na(d.cpus));
    r.push_back(d.numa < 0 ? "N/A" : std::to_string(d.numa));
    if (multi) r.push_back(t.hosts[d.host].name);
    rows.push_back(r);
  }
  std::vector<size_t> w(head.size());
  for (size_t c = 0; c < head.size(); ++c) {
    w[c] = head[c].size();
    for (const auto& r : rows) w[c] = std::max(w[c], r[c].size());
  }
  auto line = [&](const std::vector<std::string>& cells) {
    std::string l;
    for (size_t c = 0; c < cells.size(); ++c) l += fmt::format("{:<{}}  ", cells[c], w[c]);
    while (!l.empty() && l.back() == ' ') l.pop_back();
    return l + "\n";
  };
  s += line(head);
  for (const auto& r : rows) s += line(r);
  s += "\n";
  s += kLegend;
  std::string nic_legend;
  for (const auto& d : a.devices)
    if (d.type == NodeType::kNic)
      nic_legend += fmt::format("  {}: {}{}\n", d.label, or_na(d.name),
                                multi ? " on " + t.hosts[d.host].name : "");
  if (!nic_legend.empty()) s += "\nNIC Legend:\n\n" + nic_legend;
  return s;
}

std::string matrix_json(const Topology& t, const Analysis& a) {
  using json = nlohmann::json;
  json hosts = json::array();
  for (const auto& h : t.hosts) {
    json numa = json::array();
    for (const auto& n : h.nodes)
      if (n.type == NodeType::kNuma) numa.push_back({{"index", n.index}, {"cpus", n.cpus}});
    hosts.push_back({{"name", h.name}, {"packages", count_type(h, NodeType::kPackage)},
                     {"numa_nodes", numa}, {"gpus", count_type(h, NodeType::kGpu)},
                     {"nics", count_type(h, NodeType::kNic)}});
  }
  json devs = json::array(), classes = json::array(), bw = json::array();
  for (size_t i = 0; i < a.devices.size(); ++i) {
    const Device& d = a.devices[i];
    const Node& nd = t.hosts[d.host].nodes[d.node];
    devs.push_back({{"label", d.label}, {"type", node_type_name(d.type)}, {"host", t.hosts[d.host].name},
                    {"id", nd.id}, {"name", nd.name}, {"pci", nd.pci}, {"cpu_affinity", d.cpus},
                    {"numa_affinity", d.numa < 0 ? json(nullptr) : json(d.numa)}});
    json crow = json::array(), brow = json::array();
    for (size_t j = 0; j < a.devices.size(); ++j) {
      crow.push_back(a.path[i][j].label());
      double g = a.path[i][j].gbps;
      brow.push_back(std::isfinite(g) ? json(g) : json(nullptr));
    }
    classes.push_back(crow);
    bw.push_back(brow);
  }
  json root = {{"source", t.source}, {"hosts", hosts}, {"devices", devs}, {"matrix", classes},
               {"bandwidth_gbps", bw}};
  return root.dump(2) + "\n";
}

}  // namespace qccl::topo
