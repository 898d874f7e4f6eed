// Topology-aware rings, the hierarchical plan and `qk topo -m` on the three
// fixture machines, against golden files (QK_UPDATE_GOLDEN=1 rewrites them),
// plus the properties the golden files must have, checked directly.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>

#include "common/run_command.h"
#include "algo/cost_model.h"
#include "topo/comm_topo.h"
#include "topo/matrix.h"
#include "topo/ring.h"
#include "topo/topo_file.h"
#include "qk/base/error.h"

namespace {

using namespace qccl::topo;

const std::string kDir = std::string(QK_SOURCE_DIR) + "/tests/qccl/topo/";
const std::string kQk = std::string(QK_BINARY_DIR) + "/src/cli/qk";

std::string slurp(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

void expect_golden(const std::string& got, const std::string& name) {
  std::string path = kDir + name;
  const char* upd = std::getenv("QK_UPDATE_GOLDEN");
  if (upd && std::string(upd) == "1") {
    std::ofstream(path) << got;
    return;
  }
  EXPECT_EQ(got, slurp(path)) << "golden file " << path
                              << " differs (QK_UPDATE_GOLDEN=1 rewrites it after a deliberate change)";
}

struct Box {
  Topology t;
  Analysis a;
  explicit Box(const std::string& file) : t(load_topology_file(kDir + file)), a(analyze(t)) {
    t.source = file;  // golden files do not depend on the checkout's path
  }
  Ring ring(P2PLevel l = PathClass::kSys) const { return best_ring(a, a.gpus(), l); }
  std::string plan(P2PLevel l = PathClass::kSys) const {
    std::vector<int> g = a.gpus();
    return format_plan(plan_for_topology(a, l),
                       [&](int x, int y) { return make_hop(a, g[x], g[y], l).label; });
  }
};

std::map<std::string, int> hop_counts(const Ring& r) {
  std::map<std::string, int> m;
  for (const auto& h : r.hops) ++m[h.label];
  return m;
}

bool adjacent(const Ring& r, int x, int y) {
  size_t n = r.order.size();
  for (size_t i = 0; i < n; ++i)
    if ((r.order[i] == x && r.order[(i + 1) % n] == y) || (r.order[i] == y && r.order[(i + 1) % n] == x))
      return true;
  return false;
}

TEST(TopoRing, MtLinkPairsAreAdjacent) {
  Box b("mtlink_pairs_8.json");
  EXPECT_EQ(b.a.path[0][4].label(), "MTL4");
  EXPECT_EQ(b.a.path[0][1].label(), "PIX");
  EXPECT_EQ(b.a.path[0][2].label(), "PHB");
  EXPECT_EQ(b.a.path[0][5].label(), "SYS");
  Ring r = b.ring();
  for (int i = 0; i < 4; ++i) EXPECT_TRUE(adjacent(r, i, i + 4)) << format_ring(b.a, r);
  auto c = hop_counts(r);
  EXPECT_EQ(c["MTL4"], 4);
  EXPECT_EQ(c["SYS"], 0) << "the pairs cross the sockets, so no PCIe hop needs to";
  expect_golden(format_ring(b.a, r), "mtlink_pairs_8.ring.txt");
  expect_golden(b.plan(), "mtlink_pairs_8.plan.txt");
  expect_golden(format_matrix(b.t, b.a), "mtlink_pairs_8.matrix.txt");
}

TEST(TopoRing, P2PLevelPixStagesMtLinkHopsThroughTheHost) {
  Box b("mtlink_pairs_8.json");
  // With peer-to-peer limited to NVL/MTL the pairs still go direct...
  Ring nvl = b.ring(parse_p2p_level("MTL"));
  for (const auto& h : nvl.hops) EXPECT_EQ(h.via, h.label == "MTL4" ? "p2p" : "shm");
  // ...with LOC nothing does, and every hop is a host-staged copy.
  Ring loc = b.ring(parse_p2p_level("loc"));
  for (const auto& h : loc.hops) EXPECT_EQ(h.via, "shm");
  EXPECT_THROW(parse_p2p_level("FAST"), qk::ValueError);
}

TEST(TopoRing, TwoSocketBoxCrossesSocketsTwice) {
  Box b("pcie_2socket_8.json");
  EXPECT_EQ(b.a.path[0][1].label(), "PIX");
  EXPECT_EQ(b.a.path[1][2].label(), "PXB");
  EXPECT_EQ(b.a.path[5][6].label(), "NODE");
  EXPECT_EQ(b.a.path[3][4].label(), "SYS");
  Ring r = b.ring();
  auto c = hop_counts(r);
  EXPECT_EQ(c["SYS"], 2) << format_ring(b.a, r);
  EXPECT_EQ(c["PIX"], 4);
  expect_golden(format_ring(b.a, r), "pcie_2socket_8.ring.txt");
  expect_golden(b.plan(), "pcie_2socket_8.plan.txt");
  expect_golden(format_matrix(b.t, b.a), "pcie_2socket_8.matrix.txt");
}

TEST(TopoRing, TwoHostsCrossTheNetworkTwice) {
  Box b("two_hosts_8.json");
  EXPECT_EQ(b.a.path[0][8].label(), "NET");
  EXPECT_DOUBLE_EQ(b.a.path[0][8].gbps, 12.5);
  Ring r = b.ring();
  auto c = hop_counts(r);
  EXPECT_EQ(c["NET"], 2) << format_ring(b.a, r);
  EXPECT_EQ(c["MTL2"], 8);
  HierPlan p = plan_for_topology(b.a, PathClass::kSys);
  ASSERT_TRUE(p.usable) << p.why_not;
  ASSERT_EQ(p.groups.size(), 8u);
  for (int i = 0; i < 8; ++i) EXPECT_EQ(p.groups[i], (std::vector<int>{i, i + 8}));
  expect_golden(format_ring(b.a, r), "two_hosts_8.ring.txt");
  expect_golden(b.plan(), "two_hosts_8.plan.txt");
  expect_golden(format_matrix(b.t, b.a), "two_hosts_8.matrix.txt");
}

TEST(TopoRing, MatrixJsonHasEveryDevice) {
  Box b("two_hosts_8.json");
  std::string j = matrix_json(b.t, b.a);
  EXPECT_NE(j.find("\"label\": \"GPU15\""), std::string::npos);
  EXPECT_NE(j.find("\"NET\""), std::string::npos);
  EXPECT_NE(j.find("\"cpu_affinity\": \"0-63\""), std::string::npos);
}

TEST(TopoRing, PlanNeedsSeveralHostsWithEqualCounts) {
  EXPECT_FALSE(plan_hierarchical({0, 0}, {{0, 1}}).usable);
  HierPlan uneven = plan_hierarchical({0, 0, 1}, {{0, 1}, {2}});
  EXPECT_FALSE(uneven.usable);
  EXPECT_NE(uneven.why_not.find("different numbers of ranks"), std::string::npos);
  HierPlan ok = plan_hierarchical({0, 1, 0, 1}, {{0, 2}, {1, 3}});
  ASSERT_TRUE(ok.usable);
  EXPECT_EQ(ok.groups, (std::vector<std::vector<int>>{{0, 1}, {2, 3}}));
}

TEST(TopoRing, CommTopoMapsRanksToTheFilesGpus) {
  Topology t = load_topology_file(kDir + "mtlink_pairs_8.json");
  auto ct = make_comm_topo(std::vector<uint64_t>(8, 7), &t, PathClass::kSys);
  EXPECT_EQ(ct->nhosts, 1);
  EXPECT_FALSE(ct->plan.usable);
  // The host's ring follows the MT-Link pairs.
  EXPECT_EQ(ct->format_ring(),
            "0 -MTL4 p2p-> 4 -PIX p2p-> 5 -MTL4 p2p-> 1 -PHB p2p-> 2 -MTL4 p2p-> 6 -PIX p2p-> 7 "
            "-MTL4 p2p-> 3 -PHB p2p-> 0");
  // No topology: rank order, hops named by transport.
  auto plain = make_comm_topo({1, 1, 2, 2}, nullptr, PathClass::kSys);
  EXPECT_EQ(plain->format_ring(), "0 -SHM-> 1 -NET-> 2 -SHM-> 3 -NET-> 0");
  EXPECT_TRUE(plain->plan.usable);
}

TEST(TopoRing, CostModelPicksHierarchicalOnlyAcrossHosts) {
  qccl::CostModel m = qccl::CostModel::for_transport("tcp");
  size_t big = 64 << 20;
  EXPECT_NE(qccl::choose(m, "auto", qccl::Coll::kAllReduce, 4, big), qccl::Algo::kHierarchical);
  m.hosts = 2;
  m.ranks_per_host = 2;
  EXPECT_EQ(qccl::choose(m, "auto", qccl::Coll::kAllReduce, 4, big), qccl::Algo::kHierarchical);
  EXPECT_LT(qccl::predict_us(m, qccl::Coll::kAllReduce, qccl::Algo::kHierarchical, 4, big),
            qccl::predict_us(m, qccl::Coll::kAllReduce, qccl::Algo::kRing, 4, big));
  qccl::Algo a;
  EXPECT_TRUE(qccl::parse_algo("hierarchical", &a));
  EXPECT_EQ(a, qccl::Algo::kHierarchical);
}

// `qk topo` end to end.
struct QkRun {
  int code = -1;
  std::string out;
};
QkRun qk(const std::string& args, const std::string& env = "") {
  auto r = qk::test::run_command(env + " timeout 60 '" + kQk + "' " + args);
  return {r.exit_code, r.output};
}

class TopoCli : public ::testing::Test {
 protected:
  void SetUp() override {
    struct stat st;
    if (::stat(kQk.c_str(), &st) != 0) GTEST_SKIP() << kQk << " is not built (target qk)";
  }
};

TEST_F(TopoCli, MatrixFromAFileMatchesTheGoldenFile) {
  for (const char* name : {"mtlink_pairs_8", "pcie_2socket_8", "two_hosts_8"}) {
    // Run from the fixture directory so the source name is the bare file name.
    QkRun r = qk(std::string("topo -m --file ") + kDir + name + ".json");
    ASSERT_EQ(r.code, 0) << r.out;
    std::string want = slurp(kDir + name + ".matrix.txt");
    // Only the source (the path given) differs from the golden file.
    std::string got = r.out;
    std::string path = kDir + name + ".json", bare = std::string(name) + ".json";
    for (size_t pos; (pos = got.find(path)) != std::string::npos;) got.replace(pos, path.size(), bare);
    EXPECT_EQ(got, want) << name;
  }
}

TEST_F(TopoCli, DetectsThisMachine) {
  QkRun r = qk("topo -m");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("(hwloc"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("NUMA node"), std::string::npos) << r.out;
  QkRun j = qk("topo --json");
  ASSERT_EQ(j.code, 0) << j.out;
  EXPECT_EQ(j.out.rfind("{", 0), 0u) << j.out;
  // QCCL_TOPO_DUMP_FILE writes what was detected, in the file schema.
  std::string dump = ::testing::TempDir() + "qk_topo_detected.json";
  std::remove(dump.c_str());
  QkRun d = qk("topo -m", "QCCL_TOPO_DUMP_FILE=" + dump);
  ASSERT_EQ(d.code, 0) << d.out;
  Topology back = load_topology_file(dump);
  ASSERT_EQ(back.hosts.size(), 1u);
  std::string m = format_matrix(back, analyze(back));
  EXPECT_EQ(m.substr(m.find('\n')), r.out.substr(r.out.find('\n')))
      << "the dumped topology must show the same matrix as detection";
}

TEST_F(TopoCli, BadFileIsAClearError) {
  std::string path = ::testing::TempDir() + "qk_topo_bad.json";
  std::ofstream(path) << R"({"hosts": [{"name": "h", "nodes": [], "links": [{"a": "x", "b": "y", "type": "warp"}]}]})";
  QkRun r = qk("topo -m --file " + path);
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("hosts[0].links[0].type: unknown link type 'warp'"), std::string::npos) << r.out;
}

}  // namespace
