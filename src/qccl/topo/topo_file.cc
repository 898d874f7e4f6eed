// Reading and writing the topology file. The reader is strict: unknown keys,
// wrong JSON types and unknown enum values are errors naming the field, so a
// typo never silently becomes a default.
#include "topo/topo_file.h"

#include <fmt/format.h>

#include <cmath>
#include <initializer_list>
#include <map>
#include <nlohmann/json.hpp>

#include "qk/base/error.h"
#include "qk/base/file_io.h"

namespace qccl::topo {

namespace {
using json = nlohmann::json;

const char* json_type(const json& j) { return j.type_name(); }

void allow_keys(const json& obj, const std::string& where, std::initializer_list<const char*> keys) {
  for (auto it = obj.begin(); it != obj.end(); ++it) {
    bool ok = false;
    for (const char* k : keys) ok = ok || it.key() == k;
    if (ok) continue;
    std::string list;
    for (const char* k : keys) list += fmt::format("{}{}", list.empty() ? "" : ", ", k);
    QK_THROW(qk::ValueError, where, ": unknown key '", it.key(), "' (expected ", list, ")");
  }
}

std::string get_string(const json& obj, const char* key, const std::string& where, bool required) {
  auto it = obj.find(key);
  if (it == obj.end()) {
    QK_CHECK(!required, where, ": missing '", key, "'");
    return "";
  }
  QK_CHECK(it->is_string(), where, ".", key, ": expected a string, got ", json_type(*it));
  return it->get<std::string>();
}

double get_number(const json& obj, const char* key, const std::string& where, double def) {
  auto it = obj.find(key);
  if (it == obj.end()) return def;
  QK_CHECK(it->is_number(), where, ".", key, ": expected a number, got ", json_type(*it));
  double v = it->get<double>();
  QK_CHECK(std::isfinite(v), where, ".", key, ": expected a finite number");
  return v;
}

int get_int(const json& obj, const char* key, const std::string& where, int def) {
  auto it = obj.find(key);
  if (it == obj.end()) return def;
  QK_CHECK(it->is_number_integer(), where, ".", key, ": expected an integer, got ",
           it->is_number() ? it->dump() : json_type(*it));
  return it->get<int>();
}

const json& need_array(const json& obj, const char* key, const std::string& where, bool required,
                       const json& empty) {
  auto it = obj.find(key);
  if (it == obj.end()) {
    QK_CHECK(!required, where, ": missing '", key, "'");
    return empty;
  }
  QK_CHECK(it->is_array(), where, key[0] ? "." : "", key, ": expected an array, got ", json_type(*it));
  return *it;
}

NodeType parse_node_type(const std::string& s, const std::string& where) {
  for (NodeType t : {NodeType::kPackage, NodeType::kNuma, NodeType::kHostBridge,
                     NodeType::kPciSwitch, NodeType::kGpu, NodeType::kNic})
    if (s == node_type_name(t)) return t;
  QK_THROW(qk::ValueError, where, ": unknown node type '", s,
           "' (expected package, numa, host_bridge, pci_switch, gpu or nic)");
}

LinkType parse_link_type(const std::string& s, const std::string& where) {
  for (LinkType t : {LinkType::kNvLink, LinkType::kMtLink, LinkType::kPcie, LinkType::kHostBridge,
                     LinkType::kInterSocket, LinkType::kNetwork})
    if (s == link_type_name(t)) return t;
  QK_THROW(qk::ValueError, where, ": unknown link type '", s,
           "' (expected nvlink, mtlink, pcie, host_bridge, inter_socket or network)");
}

Link parse_link(const json& j, const std::string& where, bool network) {
  QK_CHECK(j.is_object(), where, ": expected an object, got ", json_type(j));
  allow_keys(j, where, {"a", "b", "type", "gbps", "count"});
  Link l;
  l.a = get_string(j, "a", where, true);
  l.b = get_string(j, "b", where, true);
  std::string type = get_string(j, "type", where, !network);
  l.type = type.empty() ? LinkType::kNetwork : parse_link_type(type, where + ".type");
  l.count = get_int(j, "count", where, 1);
  bool bonded = l.type == LinkType::kNvLink || l.type == LinkType::kMtLink;
  QK_CHECK(bonded || l.count == 1, where, ".count: only nvlink and mtlink links have a count");
  l.gbps = get_number(j, "gbps", where, default_link_gbps(l.type) * (bonded ? l.count : 1));
  return l;
}
}  // namespace

Topology parse_topology(const std::string& text, const std::string& origin) {
  try {
    json root;
    try {
      root = json::parse(text);
    } catch (const json::parse_error& e) {
      QK_THROW(qk::ValueError, "not valid JSON: ", e.what());
    }
    QK_CHECK(root.is_object(), "expected a JSON object at the top, got ", json_type(root));
    allow_keys(root, "top level", {"qccl_topology", "hosts", "network", "source"});
    int version = get_int(root, "qccl_topology", "top level", 1);
    QK_CHECK(version == 1, "qccl_topology: this qccl reads version 1, got ", version);
    Topology t;
    t.source = origin;
    const json empty = json::array();
    const json& hosts = need_array(root, "hosts", "top level", true, empty);
    for (size_t hi = 0; hi < hosts.size(); ++hi) {
      std::string hw = fmt::format("hosts[{}]", hi);
      const json& hj = hosts[hi];
      QK_CHECK(hj.is_object(), hw, ": expected an object, got ", json_type(hj));
      allow_keys(hj, hw, {"name", "nodes", "links"});
      Host h;
      h.name = get_string(hj, "name", hw, true);
      const json& nodes = need_array(hj, "nodes", hw, true, empty);
      std::map<NodeType, int> next_index;
      for (size_t ni = 0; ni < nodes.size(); ++ni) {
        std::string nw = fmt::format("{}.nodes[{}]", hw, ni);
        const json& nj = nodes[ni];
        QK_CHECK(nj.is_object(), nw, ": expected an object, got ", json_type(nj));
        allow_keys(nj, nw, {"id", "type", "index", "name", "pci", "cpus", "package"});
        Node nd;
        nd.id = get_string(nj, "id", nw, true);
        nd.type = parse_node_type(get_string(nj, "type", nw, true), nw + ".type");
        // Devices, NUMA nodes and packages are numbered in order of appearance unless told.
        bool numbered = nd.type != NodeType::kHostBridge && nd.type != NodeType::kPciSwitch;
        int& next = next_index[nd.type];
        nd.index = get_int(nj, "index", nw, numbered ? next : -1);
        if (numbered) next = std::max(next, nd.index) + 1;
        nd.name = get_string(nj, "name", nw, false);
        nd.pci = get_string(nj, "pci", nw, false);
        nd.cpus = get_string(nj, "cpus", nw, false);
        nd.package = get_string(nj, "package", nw, false);
        QK_CHECK(nd.package.empty() || nd.type == NodeType::kNuma, nw,
                 ".package: only numa nodes name a package");
        h.nodes.push_back(std::move(nd));
      }
      const json& links = need_array(hj, "links", hw, false, empty);
      for (size_t li = 0; li < links.size(); ++li)
        h.links.push_back(parse_link(links[li], fmt::format("{}.links[{}]", hw, li), false));
      t.hosts.push_back(std::move(h));
    }
    const json& net = need_array(root, "network", "top level", false, empty);
    for (size_t li = 0; li < net.size(); ++li)
      t.network.push_back(parse_link(net[li], fmt::format("network[{}]", li), true));
    validate(t);
    return t;
  } catch (const qk::ValueError& e) {
    QK_THROW(qk::ValueError, "topology file '", origin, "': ", e.message());
  }
}

Topology load_topology_file(const std::string& path) {
  std::string text;
  try {
    text = qk::read_file(path);
  } catch (const qk::Error& e) {
    QK_THROW(qk::ValueError, "topology file '", path, "' (QCCL_TOPO_FILE or --file): cannot read it: ",
             e.message());
  }
  return parse_topology(text, path);
}

std::string topology_to_json(const Topology& t) {
  auto link_json = [](const Link& l, bool network) {
    json j = {{"a", l.a}, {"b", l.b}};
    if (!network) j["type"] = link_type_name(l.type);
    j["gbps"] = l.gbps;
    if (l.count != 1) j["count"] = l.count;
    return j;
  };
  json root = {{"qccl_topology", 1}};
  if (!t.source.empty()) root["source"] = t.source;
  json hosts = json::array();
  for (const auto& h : t.hosts) {
    json nodes = json::array();
    for (const auto& nd : h.nodes) {
      json j = {{"id", nd.id}, {"type", node_type_name(nd.type)}};
      if (nd.index >= 0) j["index"] = nd.index;
      if (!nd.name.empty()) j["name"] = nd.name;
      if (!nd.pci.empty()) j["pci"] = nd.pci;
      if (!nd.cpus.empty()) j["cpus"] = nd.cpus;
      if (!nd.package.empty()) j["package"] = nd.package;
      nodes.push_back(j);
    }
    json links = json::array();
    for (const auto& l : h.links) links.push_back(link_json(l, false));
    hosts.push_back({{"name", h.name}, {"nodes", nodes}, {"links", links}});
  }
  root["hosts"] = hosts;
  if (!t.network.empty()) {
    json net = json::array();
    for (const auto& l : t.network) net.push_back(link_json(l, true));
    root["network"] = net;
  }
  return root.dump(2) + "\n";
}

void write_topology_file(const Topology& t, const std::string& path) {
  qk::atomic_write_file(path, topology_to_json(t));
}

}  // namespace qccl::topo
