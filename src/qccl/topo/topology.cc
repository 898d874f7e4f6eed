// Validation of the model and the path analysis: for each pair of devices,
// which links the data crosses (the class `qk topo -m` prints) and the
// bottleneck bandwidth. Classes follow nvidia-smi: NV#/MTL# for a direct
// bonded link, then the PCI tree: PIX (at most one switch), PXB (several
// switches), PHB (through the host bridge), NODE (between host bridges of one
// NUMA node), SYS (across NUMA nodes), and NET across hosts.
#include "topo/topology.h"

#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <limits>
#include <map>
#include <numeric>

#include "qk/base/error.h"

namespace qccl::topo {

namespace {
constexpr double kInf = std::numeric_limits<double>::infinity();

bool is_pci(NodeType t) {
  return t == NodeType::kHostBridge || t == NodeType::kPciSwitch || t == NodeType::kGpu ||
         t == NodeType::kNic;
}
bool is_device(NodeType t) { return t == NodeType::kGpu || t == NodeType::kNic; }
bool in_pci_tree(LinkType t) { return t == LinkType::kPcie || t == LinkType::kHostBridge; }

std::map<std::string, int> id_index(const Host& h) {
  std::map<std::string, int> m;
  for (size_t i = 0; i < h.nodes.size(); ++i) m[h.nodes[i].id] = static_cast<int>(i);
  return m;
}

// Splits "host/node" of a network link end.
bool split_end(const std::string& s, std::string* host, std::string* node) {
  auto p = s.find('/');
  if (p == std::string::npos || p == 0 || p + 1 == s.size()) return false;
  *host = s.substr(0, p);
  *node = s.substr(p + 1);
  return true;
}

int find_host(const Topology& t, const std::string& name) {
  for (size_t i = 0; i < t.hosts.size(); ++i)
    if (t.hosts[i].name == name) return static_cast<int>(i);
  return -1;
}

// The PCI tree of one host, rooted at its NUMA nodes.
struct Tree {
  std::vector<int> parent;      // -1 at a root (a NUMA node) or for an unattached node
  std::vector<int> depth;
  std::vector<int> root;        // the NUMA node above, -1 if none
  std::vector<double> up_gbps;  // bandwidth of the link to the parent
};

Tree build_tree(const Host& h) {
  size_t n = h.nodes.size();
  auto ids = id_index(h);
  std::vector<std::vector<std::pair<int, double>>> adj(n);
  for (const auto& l : h.links) {
    if (!in_pci_tree(l.type)) continue;
    int a = ids.at(l.a), b = ids.at(l.b);
    adj[a].push_back({b, l.gbps});
    adj[b].push_back({a, l.gbps});
  }
  Tree t;
  t.parent.assign(n, -1);
  t.depth.assign(n, 0);
  t.root.assign(n, -1);
  t.up_gbps.assign(n, kInf);
  for (size_t r = 0; r < n; ++r) {
    if (h.nodes[r].type != NodeType::kNuma) continue;
    std::vector<int> stack{static_cast<int>(r)};
    t.root[r] = static_cast<int>(r);
    while (!stack.empty()) {
      int u = stack.back();
      stack.pop_back();
      for (auto [v, bw] : adj[u]) {
        if (t.root[v] != -1) continue;
        t.root[v] = static_cast<int>(r);
        t.parent[v] = u;
        t.depth[v] = t.depth[u] + 1;
        t.up_gbps[v] = bw;
        stack.push_back(v);
      }
    }
  }
  return t;
}

// Bottleneck bandwidth between two NUMA nodes over inter-socket links (a NUMA
// node belongs to its package with no limit in between).
double socket_gbps(const Host& h, int numa_a, int numa_b) {
  if (numa_a == numa_b) return kInf;
  auto ids = id_index(h);
  size_t n = h.nodes.size();
  std::vector<std::vector<std::pair<int, double>>> adj(n);
  auto add = [&](int a, int b, double bw) {
    adj[a].push_back({b, bw});
    adj[b].push_back({a, bw});
  };
  for (size_t i = 0; i < n; ++i)
    if (h.nodes[i].type == NodeType::kNuma && !h.nodes[i].package.empty())
      add(static_cast<int>(i), ids.at(h.nodes[i].package), kInf);
  for (const auto& l : h.links)
    if (l.type == LinkType::kInterSocket) add(ids.at(l.a), ids.at(l.b), l.gbps);
  // Widest path (maximin) by repeated relaxation: the graphs are tiny.
  std::vector<double> best(n, 0);
  best[numa_a] = kInf;
  for (size_t it = 0; it < n; ++it)
    for (size_t u = 0; u < n; ++u)
      for (auto [v, bw] : adj[u]) best[v] = std::max(best[v], std::min(best[u], bw));
  return best[numa_b] > 0 ? best[numa_b] : default_link_gbps(LinkType::kInterSocket);
}

// Bottleneck bandwidth from a node up to its NUMA node.
double up_gbps(const Tree& t, int x) {
  double bw = kInf;
  for (; t.parent[x] != -1; x = t.parent[x]) bw = std::min(bw, t.up_gbps[x]);
  return bw;
}

double sys_gbps(const Host& h, const Tree& t, int u, int v) {
  if (t.root[u] == -1 || t.root[v] == -1) return default_link_gbps(LinkType::kInterSocket);
  return socket_gbps(h, t.root[u], t.root[v]);
}

Path tree_path(const Host& h, const Tree& t, int u, int v);

// Path between two distinct nodes of one host.
Path host_path(const Host& h, const Tree& t, int u, int v) {
  Path p = tree_path(h, t, u, v);
  // A copy through host memory goes up to the CPU from both ends.
  p.staged_cls = std::max(p.cls, PathClass::kPhb);
  p.staged_gbps = std::min({up_gbps(t, u), up_gbps(t, v), sys_gbps(h, t, u, v)});
  int links = 0;
  double nv_gbps = 0;
  bool mt = false;
  auto ids = id_index(h);
  for (const auto& l : h.links) {
    if (l.type != LinkType::kNvLink && l.type != LinkType::kMtLink) continue;
    int a = ids.at(l.a), b = ids.at(l.b);
    if ((a == u && b == v) || (a == v && b == u)) {
      links += l.count;
      nv_gbps += l.gbps;
      mt = mt || l.type == LinkType::kMtLink;
    }
  }
  if (links > 0) {
    p.cls = PathClass::kNvl;
    p.links = links;
    p.gbps = nv_gbps;
    p.mtlink = mt;
  }
  return p;
}

// Path through the PCI tree (and the inter-socket link), ignoring NVLinks.
Path tree_path(const Host& h, const Tree& t, int u, int v) {
  Path p;
  if (t.root[u] == -1 || t.root[v] == -1 || t.root[u] != t.root[v]) {
    p.cls = PathClass::kSys;
    p.gbps = std::min({up_gbps(t, u), up_gbps(t, v), sys_gbps(h, t, u, v)});
    return p;
  }
  // Climb to the lowest common ancestor, noting what the path crosses.
  int a = u, b = v, switches = 0;
  bool bridge = false;
  double bw = kInf;
  auto step = [&](int& x) {
    bw = std::min(bw, t.up_gbps[x]);
    x = t.parent[x];
  };
  while (t.depth[a] > t.depth[b]) step(a);
  while (t.depth[b] > t.depth[a]) step(b);
  while (a != b) {
    step(a);
    step(b);
  }
  int lca = a;
  for (int x : {u, v})
    for (int y = t.parent[x]; y != -1 && y != lca; y = t.parent[y]) {
      if (h.nodes[y].type == NodeType::kPciSwitch) ++switches;
      if (h.nodes[y].type == NodeType::kHostBridge) bridge = true;
    }
  NodeType lt = h.nodes[lca].type;
  if (lt == NodeType::kPciSwitch) ++switches;
  if (lt == NodeType::kNuma) p.cls = PathClass::kNode;
  else if (lt == NodeType::kHostBridge || bridge) p.cls = PathClass::kPhb;
  else p.cls = switches <= 1 ? PathClass::kPix : PathClass::kPxb;
  p.gbps = bw;
  return p;
}
}  // namespace

const char* node_type_name(NodeType t) {
  switch (t) {
    case NodeType::kPackage: return "package";
    case NodeType::kNuma: return "numa";
    case NodeType::kHostBridge: return "host_bridge";
    case NodeType::kPciSwitch: return "pci_switch";
    case NodeType::kGpu: return "gpu";
    case NodeType::kNic: return "nic";
  }
  return "?";
}

const char* link_type_name(LinkType t) {
  switch (t) {
    case LinkType::kNvLink: return "nvlink";
    case LinkType::kMtLink: return "mtlink";
    case LinkType::kPcie: return "pcie";
    case LinkType::kHostBridge: return "host_bridge";
    case LinkType::kInterSocket: return "inter_socket";
    case LinkType::kNetwork: return "network";
  }
  return "?";
}

double default_link_gbps(LinkType t) {
  switch (t) {
    case LinkType::kNvLink: return 25;        // per link, NVLink 3 direction
    case LinkType::kMtLink: return 25;        // per link, MT-Link
    case LinkType::kPcie: return 24;          // Gen4 x16, usable
    case LinkType::kHostBridge: return 1000;  // on-die: not the bottleneck
    case LinkType::kInterSocket: return 40;   // UPI / Infinity Fabric class
    case LinkType::kNetwork: return 12.5;     // 100 Gb/s
  }
  return 1;
}

const char* path_class_name(PathClass c) {
  switch (c) {
    case PathClass::kSelf: return "X";
    case PathClass::kNvl: return "NVL";
    case PathClass::kPix: return "PIX";
    case PathClass::kPxb: return "PXB";
    case PathClass::kPhb: return "PHB";
    case PathClass::kNode: return "NODE";
    case PathClass::kSys: return "SYS";
    case PathClass::kNet: return "NET";
    case PathClass::kNone: return "-";
  }
  return "?";
}

std::string Path::label() const {
  if (cls == PathClass::kNvl) return fmt::format("{}{}", mtlink ? "MTL" : "NV", links);
  return path_class_name(cls);
}

namespace {

// A host's nodes: ids unique and free of '/', GPU/NIC/NUMA indices unique,
// NUMA nodes' packages real. Returns id -> node index.
std::map<std::string, int> validate_nodes(const Host& h, const std::string& hw) {
  std::map<std::string, int> ids;
  std::map<std::pair<int, int>, int> indices;  // (type, index) -> node
  for (size_t ni = 0; ni < h.nodes.size(); ++ni) {
    const Node& nd = h.nodes[ni];
    std::string nw = fmt::format("{}.nodes[{}]", hw, ni);
    QK_CHECK(!nd.id.empty(), nw, ".id: expected a non-empty id");
    QK_CHECK(nd.id.find('/') == std::string::npos, nw, ".id: '", nd.id, "' may not contain '/'");
    auto [it, fresh] = ids.emplace(nd.id, static_cast<int>(ni));
    QK_CHECK(fresh, nw, ".id: '", nd.id, "' is also ", hw, ".nodes[", it->second, "] (ids must be unique in a host)");
    if (nd.type == NodeType::kGpu || nd.type == NodeType::kNic || nd.type == NodeType::kNuma) {
      QK_CHECK(nd.index >= 0, nw, ".index: expected an index >= 0 for ", node_type_name(nd.type),
               " '", nd.id, "', got ", nd.index);
      auto [jt, fresh_i] = indices.emplace(std::make_pair(static_cast<int>(nd.type), nd.index),
                                           static_cast<int>(ni));
      QK_CHECK(fresh_i, nw, ".index: ", node_type_name(nd.type), " index ", nd.index,
               " is also used by '", h.nodes[jt->second].id, "'");
    }
  }
  for (size_t ni = 0; ni < h.nodes.size(); ++ni) {
    const Node& nd = h.nodes[ni];
    if (nd.type != NodeType::kNuma || nd.package.empty()) continue;
    auto it = ids.find(nd.package);
    QK_CHECK(it != ids.end(), hw, ".nodes[", ni, "].package: no node '", nd.package, "' in host '",
             h.name, "'");
    QK_CHECK(h.nodes[it->second].type == NodeType::kPackage, hw, ".nodes[", ni, "].package: '",
             nd.package, "' is a ", node_type_name(h.nodes[it->second].type), ", not a package");
  }
  return ids;
}

// A host's links: ends exist, types fit, the PCI links form trees (union-find),
// each hanging off exactly one NUMA node, and every device is in one.
void validate_links(const Host& h, const std::string& hw, const std::map<std::string, int>& ids) {
  std::vector<int> uf(h.nodes.size());
  std::iota(uf.begin(), uf.end(), 0);
  std::function<int(int)> find = [&](int x) { return uf[x] == x ? x : uf[x] = find(uf[x]); };
  for (size_t li = 0; li < h.links.size(); ++li) {
    const Link& l = h.links[li];
    std::string lw = fmt::format("{}.links[{}]", hw, li);
    QK_CHECK(l.type != LinkType::kNetwork, lw, ".type: 'network' links join hosts; put them in "
             "the top-level 'network' list as {\"a\": \"host/nic\", \"b\": \"host/nic\"}");
    auto ia = ids.find(l.a), ib = ids.find(l.b);
    QK_CHECK(ia != ids.end(), lw, ".a: no node '", l.a, "' in host '", h.name, "'");
    QK_CHECK(ib != ids.end(), lw, ".b: no node '", l.b, "' in host '", h.name, "'");
    QK_CHECK(l.a != l.b, lw, ": links '", l.a, "' to itself");
    QK_CHECK(l.count >= 1, lw, ".count: expected >= 1 bonded links, got ", l.count);
    QK_CHECK(l.gbps > 0, lw, ".gbps: expected a bandwidth > 0 GB/s, got ", l.gbps);
    NodeType ta = h.nodes[ia->second].type, tb = h.nodes[ib->second].type;
    auto both = [&](auto pred) { return pred(ta) && pred(tb); };
    switch (l.type) {
      case LinkType::kNvLink:
      case LinkType::kMtLink:
        QK_CHECK(ta == NodeType::kGpu && tb == NodeType::kGpu, lw, ".type: a ",
                 link_type_name(l.type), " link joins two GPUs, not a ", node_type_name(ta),
                 " and a ", node_type_name(tb));
        break;
      case LinkType::kPcie:
        QK_CHECK(both(is_pci), lw, ".type: a pcie link joins host bridges, PCI switches, GPUs "
                 "and NICs, not a ", node_type_name(ta), " and a ", node_type_name(tb));
        break;
      case LinkType::kHostBridge:
        QK_CHECK((ta == NodeType::kNuma) != (tb == NodeType::kNuma) &&
                     (is_pci(ta) || is_pci(tb)),
                 lw, ".type: a host_bridge link joins a NUMA node to a host bridge (or a device "
                 "on the root complex), not a ", node_type_name(ta), " and a ", node_type_name(tb));
        break;
      case LinkType::kInterSocket:
        QK_CHECK(both([](NodeType x) { return x == NodeType::kPackage || x == NodeType::kNuma; }),
                 lw, ".type: an inter_socket link joins packages or NUMA nodes, not a ",
                 node_type_name(ta), " and a ", node_type_name(tb));
        break;
      case LinkType::kNetwork: break;
    }
    if (!in_pci_tree(l.type)) continue;
    int ra = find(ia->second), rb = find(ib->second);
    QK_CHECK(ra != rb, lw, ": the ", link_type_name(l.type), " link ", l.a, " - ", l.b,
             " closes a cycle: both are already connected through PCI links; the PCI "
             "hierarchy must be a tree");
    uf[ra] = rb;
  }
  // Each PCI tree hangs off exactly one NUMA node; every device is in one.
  std::map<int, int> numa_of_tree;
  for (size_t ni = 0; ni < h.nodes.size(); ++ni) {
    if (h.nodes[ni].type != NodeType::kNuma) continue;
    auto [it, fresh] = numa_of_tree.emplace(find(static_cast<int>(ni)), static_cast<int>(ni));
    QK_CHECK(fresh, hw, ": NUMA nodes '", h.nodes[it->second].id, "' and '", h.nodes[ni].id,
             "' are joined through PCI links; each PCI tree hangs off one NUMA node");
  }
  for (size_t ni = 0; ni < h.nodes.size(); ++ni) {
    const Node& nd = h.nodes[ni];
    if (!is_device(nd.type)) continue;
    QK_CHECK(numa_of_tree.count(find(static_cast<int>(ni))), hw, ".nodes[", ni, "]: ",
             node_type_name(nd.type), " '", nd.id, "' is not connected to any NUMA node through "
             "pcie/host_bridge links");
  }
}

// Network links join NICs of two hosts; every pair of hosts with GPUs is joined.
void validate_network(const Topology& t) {
  size_t nh = t.hosts.size();
  std::vector<std::vector<bool>> joined(nh, std::vector<bool>(nh, false));
  for (size_t li = 0; li < t.network.size(); ++li) {
    const Link& l = t.network[li];
    std::string lw = fmt::format("network[{}]", li);
    QK_CHECK(l.type == LinkType::kNetwork, lw, ".type: expected 'network', got '",
             link_type_name(l.type), "'");
    QK_CHECK(l.gbps > 0, lw, ".gbps: expected a bandwidth > 0 GB/s, got ", l.gbps);
    int hosts[2];
    const std::string* ends[2] = {&l.a, &l.b};
    for (int e = 0; e < 2; ++e) {
      const char* f = e ? ".b" : ".a";
      std::string hn, nn;
      QK_CHECK(split_end(*ends[e], &hn, &nn), lw, f, ": expected \"host/nic\", got '", *ends[e], "'");
      hosts[e] = find_host(t, hn);
      QK_CHECK(hosts[e] >= 0, lw, f, ": no host '", hn, "'");
      const Host& h = t.hosts[hosts[e]];
      auto it = std::find_if(h.nodes.begin(), h.nodes.end(), [&](const Node& x) { return x.id == nn; });
      QK_CHECK(it != h.nodes.end(), lw, f, ": no node '", nn, "' in host '", hn, "'");
      QK_CHECK(it->type == NodeType::kNic, lw, f, ": '", *ends[e], "' is a ", node_type_name(it->type),
               "; network links join NICs");
    }
    QK_CHECK(hosts[0] != hosts[1], lw, ": both ends are on host '", t.hosts[hosts[0]].name,
             "'; a network link joins two hosts");
    joined[hosts[0]][hosts[1]] = joined[hosts[1]][hosts[0]] = true;
  }
  auto has_gpu = [&](size_t hi) {
    for (const auto& nd : t.hosts[hi].nodes)
      if (nd.type == NodeType::kGpu) return true;
    return false;
  };
  for (size_t a = 0; a < nh; ++a)
    for (size_t b = a + 1; b < nh; ++b)
      QK_CHECK(!has_gpu(a) || !has_gpu(b) || joined[a][b], "network: hosts '", t.hosts[a].name,
               "' and '", t.hosts[b].name, "' both have GPUs but no network link joins their NICs");
}

}  // namespace

void validate(const Topology& t) {
  QK_CHECK(!t.hosts.empty(), "hosts: expected at least one host");
  for (size_t hi = 0; hi < t.hosts.size(); ++hi) {
    const Host& h = t.hosts[hi];
    const std::string hw = fmt::format("hosts[{}]", hi);
    QK_CHECK(!h.name.empty(), hw, ".name: expected a non-empty host name");
    QK_CHECK(h.name.find('/') == std::string::npos, hw, ".name: '", h.name,
             "' may not contain '/' (network links name nodes as host/node)");
    for (size_t hj = 0; hj < hi; ++hj)
      QK_CHECK(t.hosts[hj].name != h.name, hw, ".name: host '", h.name, "' is also hosts[", hj, "]");
    validate_links(h, hw, validate_nodes(h, hw));
  }
  validate_network(t);
}

std::vector<int> Analysis::gpus() const {
  std::vector<int> v;
  for (size_t i = 0; i < devices.size(); ++i)
    if (devices[i].type == NodeType::kGpu) v.push_back(static_cast<int>(i));
  return v;
}

std::vector<int> Analysis::nics() const {
  std::vector<int> v;
  for (size_t i = 0; i < devices.size(); ++i)
    if (devices[i].type == NodeType::kNic) v.push_back(static_cast<int>(i));
  return v;
}

Analysis analyze(const Topology& t) {
  validate(t);
  Analysis an;
  std::vector<Tree> trees;
  for (const auto& h : t.hosts) trees.push_back(build_tree(h));
  bool multi = t.hosts.size() > 1;
  for (NodeType want : {NodeType::kGpu, NodeType::kNic}) {
    int global = 0;
    for (size_t hi = 0; hi < t.hosts.size(); ++hi) {
      const Host& h = t.hosts[hi];
      std::vector<int> idx;
      for (size_t ni = 0; ni < h.nodes.size(); ++ni)
        if (h.nodes[ni].type == want) idx.push_back(static_cast<int>(ni));
      std::sort(idx.begin(), idx.end(), [&](int a, int b) { return h.nodes[a].index < h.nodes[b].index; });
      for (int ni : idx) {
        Device d;
        d.host = static_cast<int>(hi);
        d.node = ni;
        d.type = want;
        int num = multi ? global : h.nodes[ni].index;
        d.label = fmt::format("{}{}", want == NodeType::kGpu ? "GPU" : "NIC", num);
        ++global;
        d.name = h.nodes[ni].name;
        const Tree& tr = trees[hi];
        if (tr.root[ni] != -1) {
          d.numa = h.nodes[tr.root[ni]].index;
          d.cpus = h.nodes[tr.root[ni]].cpus;
        }
        d.cpu_gbps = kInf;
        for (int x = ni; tr.parent[x] != -1; x = tr.parent[x]) d.cpu_gbps = std::min(d.cpu_gbps, tr.up_gbps[x]);
        an.devices.push_back(d);
      }
    }
  }
  size_t n = an.devices.size();
  an.path.assign(n, std::vector<Path>(n));
  for (size_t i = 0; i < n; ++i)
    for (size_t j = 0; j < n; ++j) {
      const Device &a = an.devices[i], &b = an.devices[j];
      if (i == j) {
        an.path[i][j].cls = PathClass::kSelf;
        an.path[i][j].gbps = kInf;
      } else if (a.host == b.host) {
        an.path[i][j] = host_path(t.hosts[a.host], trees[a.host], a.node, b.node);
      }
    }
  // Across hosts: the best NIC route on each side and the network link between.
  for (size_t i = 0; i < n; ++i)
    for (size_t j = 0; j < n; ++j) {
      const Device &a = an.devices[i], &b = an.devices[j];
      if (a.host == b.host) continue;
      Path p;
      p.cls = PathClass::kNet;
      for (const auto& l : t.network) {
        std::string ha, na, hb, nb;
        split_end(l.a, &ha, &na);
        split_end(l.b, &hb, &nb);
        int xa = find_host(t, ha), xb = find_host(t, hb);
        if (!((xa == a.host && xb == b.host) || (xa == b.host && xb == a.host))) continue;
        if (xa != a.host) {
          std::swap(na, nb);
        }
        auto dev_gbps = [&](const Device& d, const std::string& nic_id) {
          const Host& h = t.hosts[d.host];
          int nic = id_index(h).at(nic_id);
          return nic == d.node ? kInf : host_path(h, trees[d.host], d.node, nic).gbps;
        };
        double bw = std::min({dev_gbps(a, na), l.gbps, dev_gbps(b, nb)});
        p.gbps = std::max(p.gbps, bw);
      }
      an.path[i][j] = p;
    }
  return an;
}

}  // namespace qccl::topo
