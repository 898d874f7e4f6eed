// Topology files: the fixtures load and round-trip through the dump writer;
// malformed files give an error naming the file and the field, never a crash.
#include <gtest/gtest.h>

#include <string>

#include "topo/topo_file.h"
#include "qk/base/error.h"
#include "qk/base/file_io.h"

namespace {

using namespace qccl::topo;

const std::string kDir = std::string(QK_SOURCE_DIR) + "/tests/qccl/topo/";

// The error message parse_topology gives for `text` ("" if it parses).
std::string error_of(const std::string& text) {
  try {
    parse_topology(text, "bad.json");
  } catch (const qk::ValueError& e) {
    return e.message();
  }
  return "";
}

// A valid one-host file with two GPUs under one switch; tests break one part.
std::string box(const std::string& extra_nodes = "", const std::string& extra_links = "",
                const std::string& network = "") {
  return R"({"qccl_topology": 1, "hosts": [{"name": "h0", "nodes": [
      {"id": "numa0", "type": "numa", "cpus": "0-7"},
      {"id": "hb0", "type": "host_bridge"},
      {"id": "sw0", "type": "pci_switch"},
      {"id": "gpu0", "type": "gpu"},
      {"id": "gpu1", "type": "gpu"})" + extra_nodes + R"(],
    "links": [
      {"a": "numa0", "b": "hb0", "type": "host_bridge"},
      {"a": "hb0", "b": "sw0", "type": "pcie"},
      {"a": "sw0", "b": "gpu0", "type": "pcie"},
      {"a": "sw0", "b": "gpu1", "type": "pcie"})" + extra_links + R"(]}])" + network + "}";
}

TEST(TopoFile, FixturesLoadAndValidate) {
  for (const char* f : {"mtlink_pairs_8.json", "pcie_2socket_8.json", "two_hosts_8.json"}) {
    Topology t = load_topology_file(kDir + f);
    EXPECT_FALSE(t.hosts.empty()) << f;
    EXPECT_EQ(t.source, kDir + f);
  }
  Topology two = load_topology_file(kDir + "two_hosts_8.json");
  ASSERT_EQ(two.hosts.size(), 2u);
  EXPECT_EQ(two.network.size(), 1u);
}

TEST(TopoFile, DefaultsFillIndexAndBandwidth) {
  Topology t = parse_topology(box("", R"(, {"a": "gpu0", "b": "gpu1", "type": "mtlink", "count": 4})"), "x");
  const Host& h = t.hosts[0];
  EXPECT_EQ(h.nodes[3].index, 0);
  EXPECT_EQ(h.nodes[4].index, 1);
  EXPECT_DOUBLE_EQ(h.links[1].gbps, default_link_gbps(LinkType::kPcie));
  EXPECT_EQ(h.links[4].count, 4);
  EXPECT_DOUBLE_EQ(h.links[4].gbps, 4 * default_link_gbps(LinkType::kMtLink));
}

TEST(TopoFile, DumpRoundTrips) {
  for (const char* f : {"mtlink_pairs_8.json", "pcie_2socket_8.json", "two_hosts_8.json"}) {
    Topology t = load_topology_file(kDir + f);
    std::string once = topology_to_json(t);
    Topology back = parse_topology(once, t.source);
    EXPECT_EQ(topology_to_json(back), once) << f;
  }
}

TEST(TopoFile, WriteThenLoad) {
  Topology t = load_topology_file(kDir + "two_hosts_8.json");
  std::string path = ::testing::TempDir() + "qccl_topo_dump.json";
  write_topology_file(t, path);
  Topology back = load_topology_file(path);
  EXPECT_EQ(back.source, path);  // a file read names itself as the source
  back.source = t.source;
  EXPECT_EQ(topology_to_json(back), topology_to_json(t));
}

TEST(TopoFile, BadJsonSaysWhere) {
  std::string e = error_of("{\"hosts\": [");
  EXPECT_NE(e.find("topology file 'bad.json': not valid JSON"), std::string::npos) << e;
  EXPECT_NE(e.find("line 1"), std::string::npos) << e;
  e = error_of("[1, 2]");
  EXPECT_NE(e.find("expected a JSON object at the top, got array"), std::string::npos) << e;
}

TEST(TopoFile, UnknownLinkTypeNamesTheField) {
  std::string e = error_of(box("", R"(, {"a": "gpu0", "b": "gpu1", "type": "nvlnk"})"));
  EXPECT_NE(e.find("hosts[0].links[4].type: unknown link type 'nvlnk' (expected nvlink, mtlink"),
            std::string::npos) << e;
}

TEST(TopoFile, UnknownNodeTypeAndKey) {
  std::string e = error_of(box(R"(, {"id": "x", "type": "fpga"})"));
  EXPECT_NE(e.find("hosts[0].nodes[5].type: unknown node type 'fpga'"), std::string::npos) << e;
  e = error_of(box(R"(, {"id": "x", "type": "gpu", "indx": 3})"));
  EXPECT_NE(e.find("hosts[0].nodes[5]: unknown key 'indx'"), std::string::npos) << e;
}

TEST(TopoFile, MissingDeviceInALink) {
  std::string e = error_of(box("", R"(, {"a": "gpu0", "b": "gpu9", "type": "mtlink"})"));
  EXPECT_NE(e.find("hosts[0].links[4].b: no node 'gpu9' in host 'h0'"), std::string::npos) << e;
}

TEST(TopoFile, CycleInThePciTree) {
  std::string e = error_of(box("", R"(, {"a": "gpu1", "b": "hb0", "type": "pcie"})"));
  EXPECT_NE(e.find("hosts[0].links[4]: the pcie link gpu1 - hb0 closes a cycle"), std::string::npos) << e;
}

TEST(TopoFile, WrongJsonTypesAndValues) {
  std::string e = error_of(box("", R"(, {"a": "gpu0", "b": "gpu1", "type": "mtlink", "gbps": "fast"})"));
  EXPECT_NE(e.find("hosts[0].links[4].gbps: expected a number, got string"), std::string::npos) << e;
  e = error_of(box("", R"(, {"a": "gpu0", "b": "gpu1", "type": "mtlink", "count": 0})"));
  EXPECT_NE(e.find("hosts[0].links[4].count: expected >= 1"), std::string::npos) << e;
  e = error_of(box("", R"(, {"a": "gpu0", "b": "gpu0", "type": "mtlink"})"));
  EXPECT_NE(e.find("hosts[0].links[4]: links 'gpu0' to itself"), std::string::npos) << e;
  e = error_of(R"({"hosts": {"name": "x"}})");
  EXPECT_NE(e.find("hosts: expected an array, got object"), std::string::npos) << e;
  e = error_of(R"({"hosts": []})");
  EXPECT_NE(e.find("hosts: expected at least one host"), std::string::npos) << e;
}

TEST(TopoFile, LinkTypeMustFitItsEnds) {
  std::string e = error_of(box("", R"(, {"a": "gpu0", "b": "sw0", "type": "mtlink"})"));
  EXPECT_NE(e.find("hosts[0].links[4].type: a mtlink link joins two GPUs, not a gpu and a pci_switch"),
            std::string::npos) << e;
  e = error_of(box("", R"(, {"a": "gpu0", "b": "gpu1", "type": "network"})"));
  EXPECT_NE(e.find("hosts[0].links[4].type: 'network' links join hosts"), std::string::npos) << e;
}

TEST(TopoFile, DuplicateIdsAndDetachedDevices) {
  std::string e = error_of(box(R"(, {"id": "gpu1", "type": "gpu"})"));
  EXPECT_NE(e.find("hosts[0].nodes[5].id: 'gpu1' is also hosts[0].nodes[4]"), std::string::npos) << e;
  e = error_of(box(R"(, {"id": "gpu2", "type": "gpu"})"));
  EXPECT_NE(e.find("hosts[0].nodes[5]: gpu 'gpu2' is not connected to any NUMA node"), std::string::npos) << e;
}

TEST(TopoFile, NetworkLinksAreChecked) {
  std::string e = error_of(box("", "", R"(, "network": [{"a": "h0/gpu0", "b": "h1/nic0"}])"));
  EXPECT_NE(e.find("network[0].a: 'h0/gpu0' is a gpu; network links join NICs"), std::string::npos) << e;
  e = error_of(box("", "", R"(, "network": [{"a": "h0gpu0", "b": "h1/nic0"}])"));
  EXPECT_NE(e.find("network[0].a: expected \"host/nic\", got 'h0gpu0'"), std::string::npos) << e;
  // Two hosts with GPUs and nothing joining them.
  std::string two = R"({"hosts": [)";
  for (int h = 0; h < 2; ++h)
    two += std::string(h ? "," : "") + R"({"name": "n)" + std::to_string(h) + R"(", "nodes": [
        {"id": "numa0", "type": "numa"}, {"id": "g", "type": "gpu"}],
        "links": [{"a": "numa0", "b": "g", "type": "host_bridge"}]})";
  two += "]}";
  e = error_of(two);
  EXPECT_NE(e.find("network: hosts 'n0' and 'n1' both have GPUs but no network link joins their NICs"),
            std::string::npos) << e;
}

TEST(TopoFile, MissingFileSaysSo) {
  try {
    load_topology_file("/nonexistent/topo.json");
    FAIL() << "expected an error";
  } catch (const qk::ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("topology file '/nonexistent/topo.json'"), std::string::npos);
  }
}

}  // namespace
