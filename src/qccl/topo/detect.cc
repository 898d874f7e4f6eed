// Detection. hwloc shows a PCIe switch as an upstream bridge with one
// downstream bridge per port; nvidia-smi counts the whole switch as one
// "PCIe bridge" (PIX), so each tree of PCI-to-PCI bridges below a host bridge
// becomes one pci_switch node here. Cascaded switches therefore read PIX
// rather than PXB; a topology file can describe them exactly.
#include "topo/detect.h"

#include <fmt/format.h>
#include <unistd.h>

#include <map>
#include <mutex>

#include "core/debug.h"
#include "topo/nvml.h"
#include "topo/topo_file.h"
#include "qk/base/env.h"
#include "qk/base/error.h"

#ifdef QK_HAVE_HWLOC
#include <hwloc.h>
#endif

namespace qccl::topo {

namespace {
QK_ENV_STRING(env_topo_file, "QCCL_TOPO_FILE", "",
              "Topology file (JSON, docs/topology.md) used instead of detection.");
QK_ENV_STRING(env_topo_dump, "QCCL_TOPO_DUMP_FILE", "",
              "Write the detected topology (JSON, same schema as QCCL_TOPO_FILE) here.");

std::string host_name() {
  char name[256] = {0};
  ::gethostname(name, sizeof name - 1);
  return name[0] ? name : "localhost";
}

#ifdef QK_HAVE_HWLOC
bool is_gpu(const hwloc_obj_t o) {
  unsigned cls = o->attr->pcidev.class_id, vendor = o->attr->pcidev.vendor_id;
  if (cls == 0x0302) return true;  // 3D controller: compute GPUs
  // VGA controllers of GPU vendors (NVIDIA, AMD, Moore Threads), not a VM's virtual display.
  return cls == 0x0300 && (vendor == 0x10de || vendor == 0x1002 || vendor == 0x1ed5);
}
bool is_nic(const hwloc_obj_t o) { return (o->attr->pcidev.class_id >> 8) == 0x02; }

std::string bus_id(const hwloc_obj_t o) {
  return fmt::format("{:04x}:{:02x}:{:02x}.{:x}", o->attr->pcidev.domain, o->attr->pcidev.bus,
                     o->attr->pcidev.dev, o->attr->pcidev.func);
}

std::string list(hwloc_const_bitmap_t b) {
  char* s = nullptr;
  hwloc_bitmap_list_asprintf(&s, b);
  std::string r = s ? s : "";
  std::free(s);
  return r;
}

// Name of a NIC: its InfiniBand/RoCE device, else its network interface.
std::string nic_name(const hwloc_obj_t pci) {
  std::string net, ofed;
  for (hwloc_obj_t c = pci->io_first_child; c; c = c->next_sibling) {
    if (c->type != HWLOC_OBJ_OS_DEVICE || !c->name) continue;
    if (c->attr->osdev.type == HWLOC_OBJ_OSDEV_OPENFABRICS && ofed.empty()) ofed = c->name;
    if (c->attr->osdev.type == HWLOC_OBJ_OSDEV_NETWORK && net.empty()) net = c->name;
  }
  return !ofed.empty() ? ofed : net;
}

struct Walker {
  hwloc_topology_t t;
  Host& host;
  int n_hb = 0, n_sw = 0, n_gpu = 0, n_nic = 0;

  std::string numa_of(hwloc_obj_t o) {
    hwloc_obj_t a = hwloc_get_non_io_ancestor_obj(t, o);
    int idx = a && a->nodeset ? hwloc_bitmap_first(a->nodeset) : -1;
    return fmt::format("numa{}", idx < 0 ? 0 : idx);
  }
  static double speed(float gbps, LinkType type) {
    return gbps > 0 ? gbps : default_link_gbps(type);
  }
  // `up`: the node this object hangs from ("" above the host bridges);
  // `in_switch`: the switch node that absorbs PCI-to-PCI bridges below it.
  void walk(hwloc_obj_t o, const std::string& up, const std::string& in_switch) {
    std::string here = up, sw = in_switch;
    if (o->type == HWLOC_OBJ_BRIDGE) {
      if (o->attr->bridge.upstream_type == HWLOC_OBJ_BRIDGE_HOST) {
        here = fmt::format("hb{}", n_hb++);
        host.nodes.push_back({here, NodeType::kHostBridge, -1, "", "", "", ""});
        host.links.push_back({numa_of(o), here, LinkType::kHostBridge,
                              default_link_gbps(LinkType::kHostBridge), 1});
        sw.clear();
      } else if (sw.empty()) {
        here = sw = fmt::format("sw{}", n_sw++);
        Node nd{here, NodeType::kPciSwitch, -1, "", bus_id_of_bridge(o), "", ""};
        host.nodes.push_back(nd);
        host.links.push_back({up, here, LinkType::kPcie,
                              speed(o->attr->bridge.upstream.pci.linkspeed, LinkType::kPcie), 1});
      }
    } else if (o->type == HWLOC_OBJ_PCI_DEVICE && (is_gpu(o) || is_nic(o)) && !up.empty()) {
      bool gpu = is_gpu(o);
      int idx = gpu ? n_gpu++ : n_nic++;
      Node nd;
      nd.id = fmt::format("{}{}", gpu ? "gpu" : "nic", idx);
      nd.type = gpu ? NodeType::kGpu : NodeType::kNic;
      nd.index = idx;
      nd.name = gpu ? (o->name ? o->name : fmt::format("{:04x}:{:04x}", o->attr->pcidev.vendor_id,
                                                       o->attr->pcidev.device_id))
                    : nic_name(o);
      nd.pci = bus_id(o);
      host.nodes.push_back(nd);
      host.links.push_back({up, nd.id, LinkType::kPcie,
                            speed(o->attr->pcidev.linkspeed, LinkType::kPcie), 1});
    }
    for (hwloc_obj_t c = o->io_first_child; c; c = c->next_sibling) walk(c, here, sw);
    for (hwloc_obj_t c = o->first_child; c; c = c->next_sibling) walk(c, here, sw);
  }
  static std::string bus_id_of_bridge(hwloc_obj_t o) {
    if (o->attr->bridge.upstream_type != HWLOC_OBJ_BRIDGE_PCI) return "";
    return bus_id(o);
  }
};

void detect_hwloc(Host& h) {
  hwloc_topology_t t;
  QK_CHECK_AS(qk::IoError, hwloc_topology_init(&t) == 0, "hwloc_topology_init failed");
  hwloc_topology_set_io_types_filter(t, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
  if (hwloc_topology_load(t) != 0) {
    hwloc_topology_destroy(t);
    QK_THROW(qk::IoError, "hwloc_topology_load failed; set QCCL_TOPO_FILE to describe this machine");
  }
  int np = hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_PACKAGE);
  for (int i = 0; i < np; ++i) {
    hwloc_obj_t p = hwloc_get_obj_by_type(t, HWLOC_OBJ_PACKAGE, i);
    h.nodes.push_back({fmt::format("pkg{}", i), NodeType::kPackage, static_cast<int>(p->os_index),
                       "", "", list(p->cpuset), ""});
  }
  for (int i = 0; i < np; ++i)
    for (int j = i + 1; j < np; ++j)
      h.links.push_back({fmt::format("pkg{}", i), fmt::format("pkg{}", j), LinkType::kInterSocket,
                         default_link_gbps(LinkType::kInterSocket), 1});
  int nn = hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_NUMANODE);
  for (int i = 0; i < nn; ++i) {
    hwloc_obj_t n = hwloc_get_obj_by_type(t, HWLOC_OBJ_NUMANODE, i);
    hwloc_obj_t p = hwloc_get_ancestor_obj_by_type(t, HWLOC_OBJ_PACKAGE, n);
    Node nd{fmt::format("numa{}", n->os_index), NodeType::kNuma, static_cast<int>(n->os_index), "",
            "", list(n->cpuset), p ? fmt::format("pkg{}", p->logical_index) : ""};
    h.nodes.push_back(nd);
  }
  Walker w{t, h};
  w.walk(hwloc_get_root_obj(t), "", "");
  hwloc_topology_destroy(t);
}
#endif

// Renumbers GPUs as NVML does and adds NVLinks (direct, or through NVSwitches:
// then each pair of GPUs gets the smaller of their switch link counts).
void apply_nvml(Host& h, const NvmlInfo& nv) {
  std::map<std::string, Node*> by_bus;
  for (auto& nd : h.nodes)
    if (nd.type == NodeType::kGpu) by_bus[nd.pci] = &nd;
  std::map<std::string, std::string> id_of;  // bus -> node id
  for (const auto& g : nv.gpus) {
    auto it = by_bus.find(g.pci);
    if (it == by_bus.end()) continue;
    it->second->index = 1000 + g.index;  // avoid clashes while renumbering
    if (!g.name.empty()) it->second->name = g.name;
    id_of[g.pci] = it->second->id;
  }
  for (auto& nd : h.nodes)
    if (nd.type == NodeType::kGpu && nd.index >= 1000) nd.index -= 1000;
  std::map<std::pair<std::string, std::string>, int> direct;
  std::map<std::string, int> to_switch;
  for (const auto& g : nv.gpus) {
    if (!id_of.count(g.pci)) continue;
    for (const auto& far : g.nvlink) {
      auto it = id_of.find(far);
      if (it == id_of.end()) ++to_switch[g.pci];
      else if (g.pci < far) ++direct[{id_of[g.pci], it->second}];
    }
  }
  for (const auto& [pair, n] : direct)
    h.links.push_back({pair.first, pair.second, LinkType::kNvLink,
                       n * default_link_gbps(LinkType::kNvLink), n});
  for (auto a = to_switch.begin(); a != to_switch.end(); ++a)
    for (auto b = std::next(a); b != to_switch.end(); ++b) {
      int n = std::min(a->second, b->second);
      h.links.push_back({id_of[a->first], id_of[b->first], LinkType::kNvLink,
                         n * default_link_gbps(LinkType::kNvLink), n});
    }
}
}  // namespace

Topology detect_topology() {
  Topology t;
  Host h;
  h.name = host_name();
#ifdef QK_HAVE_HWLOC
  detect_hwloc(h);
  t.source = "hwloc";
#else
  long ncpu = ::sysconf(_SC_NPROCESSORS_ONLN);
  h.nodes.push_back({"pkg0", NodeType::kPackage, 0, "", "", "", ""});
  h.nodes.push_back({"numa0", NodeType::kNuma, 0, "", "", fmt::format("0-{}", ncpu - 1), "pkg0"});
  t.source = "sysconf (built without hwloc)";
#endif
  NvmlInfo nv = query_nvml();
  if (nv.available) {
    apply_nvml(h, nv);
    t.source += "+nvml";
  } else {
    QCCL_INFO("INIT", "topology: NVML not used: {}", nv.why);
  }
  t.hosts.push_back(std::move(h));
  validate(t);
  return t;
}

std::string topo_file_setting() { return env_topo_file.reload(); }
std::string topo_dump_file_setting() { return env_topo_dump.reload(); }

const Topology& current_topology() {
  static std::once_flag once;
  static Topology topo;
  std::call_once(once, [] {
    std::string file = topo_file_setting();
    topo = file.empty() ? detect_topology() : load_topology_file(file);
    std::string dump = topo_dump_file_setting();
    if (!dump.empty()) write_topology_file(topo, dump);
  });
  return topo;
}

}  // namespace qccl::topo
