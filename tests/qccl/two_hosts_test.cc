// Two "hosts" on one machine: ranks 0-1 and 2-3 live in separate network
// namespaces joined by a veth pair, each pair with its own host name (UTS
// namespace), so they hash to different hosts exactly as two machines would.
// Within a host they must use shared memory, across hosts TCP over the veth
// (QCCL_SOCKET_IFNAME picks it); every collective is checked there. Where
// namespaces cannot be made (not root, no `ip`), the hosts are distinct
// loopback addresses (127.0.0.2, 127.0.0.3) told apart by QCCL_HOST_ID
// (QCCL_TEST_NO_NETNS=1 forces that fallback).
#include <gtest/gtest.h>
#include <arpa/inet.h>
#include <fcntl.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>

#include "every_collective.h"
#include "comm.h"

namespace qccl_test {
namespace {

bool sh(const std::string& cmd) { return std::system((cmd + " >/dev/null 2>&1").c_str()) == 0; }

// The two hosts: how a rank joins one, and the address rank 0's root listens on.
struct Hosts {
  bool netns = false;
  std::string ns[2], ifname[2], ip[2];
  std::string skip_reason;

  Hosts() {
    std::string tag = std::to_string(::getpid() % 100000);
    ns[0] = "qccl_a" + tag;
    ns[1] = "qccl_b" + tag;
    std::string va = "qa" + tag, vb = "qb" + tag;
    bool try_netns = std::getenv("QCCL_TEST_NO_NETNS") == nullptr;  // to test the fallback
    if (try_netns && ::geteuid() == 0 && sh("ip netns add " + ns[0]) && sh("ip netns add " + ns[1]) &&
        sh("ip link add " + va + " type veth peer name " + vb) &&
        sh("ip link set " + va + " netns " + ns[0]) && sh("ip link set " + vb + " netns " + ns[1]) &&
        sh("ip -n " + ns[0] + " addr add 10.77.0.1/24 dev " + va) &&
        sh("ip -n " + ns[1] + " addr add 10.77.0.2/24 dev " + vb) &&
        sh("ip -n " + ns[0] + " link set " + va + " up") && sh("ip -n " + ns[1] + " link set " + vb + " up") &&
        sh("ip -n " + ns[0] + " link set lo up") && sh("ip -n " + ns[1] + " link set lo up")) {
      netns = true;
      ifname[0] = va;
      ifname[1] = vb;
      ip[0] = "10.77.0.1";
      ip[1] = "10.77.0.2";
      return;
    }
    cleanup();
    ip[0] = ifname[0] = "127.0.0.2";
    ip[1] = ifname[1] = "127.0.0.3";
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    ::inet_pton(AF_INET, "127.0.0.3", &sa.sin_addr);
    if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0)
      skip_reason = "neither network namespaces (need root and iproute2's `ip`) nor binding "
                    "127.0.0.3 work here, so two hosts cannot be simulated";
    if (fd >= 0) ::close(fd);
  }
  ~Hosts() { cleanup(); }
  void cleanup() {
    sh("ip netns del " + ns[0]);
    sh("ip netns del " + ns[1]);
  }

  // In a forked rank: become host h.
  void enter(int h) const {
    if (netns) {
      int fd = ::open(("/var/run/netns/" + ns[h]).c_str(), O_RDONLY | O_CLOEXEC);
      REQUIRE(fd >= 0 && ::setns(fd, CLONE_NEWNET) == 0, "entering netns ", ns[h]);
      ::close(fd);
      std::string name = h == 0 ? "qccl-host-a" : "qccl-host-b";
      REQUIRE(::unshare(CLONE_NEWUTS) == 0 && ::sethostname(name.data(), name.size()) == 0,
              "giving host ", h, " its own host name");
    } else {
      ::setenv("QCCL_HOST_ID", h == 0 ? "host-a" : "host-b", 1);
    }
    ::setenv("QCCL_SOCKET_IFNAME", ifname[h].c_str(), 1);
  }

  // A port for rank 0's root on host 0 (in a fresh namespace anything is free).
  int root_port() const {
    if (netns) return 29500;
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    ::inet_pton(AF_INET, ip[0].c_str(), &sa.sin_addr);
    socklen_t len = sizeof sa;
    ::bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa);
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len);
    ::close(fd);
    return ntohs(sa.sin_port);
  }
};

TEST(TwoHosts, ShmWithinAHostTcpAcrossAndEveryCollectiveExact) {
  Hosts hosts;
  if (!hosts.skip_reason.empty()) GTEST_SKIP() << hosts.skip_reason;
  std::printf("[          ] two hosts via %s\n", hosts.netns ? "network namespaces + veth" : "loopback addresses");
  // Rank 0 starts the root inside host 0, where the others can reach it.
  std::string comm_id = hosts.ip[0] + ":" + std::to_string(hosts.root_port());
  ::setenv("QCCL_COMM_ID", comm_id.c_str(), 1);
  ::setenv("QCCL_COMM_TOKEN", "00112233445566778899aabbccddeeff", 1);
  Options o;
  o.timeout_s = 20;
  auto r = run_ranks(4, [&](const Rank& me) {
    int host = me.rank / 2;
    hosts.enter(host);
    qcclComm_t comm = me.init();
    for (int p = 0; p < me.nranks; ++p) {
      if (p == me.rank) continue;
      std::string kind = comm->conns[p]->kind(), want = p / 2 == host ? "shm" : "tcp";
      REQUIRE(kind == want, "rank ", me.rank, " reaches rank ", p, " via ", kind, ", expected ", want);
      REQUIRE(comm->peers[p].ip == comm->peers[(p / 2) * 2].ip, "rank ", p, " listens on another address than its host");
    }
    REQUIRE(comm->peers[0].ip != comm->peers[2].ip, "both hosts listen on one address");
    // Both transports are in use: the collectives pay the slower of the two.
    const auto& m = comm->cost;
    REQUIRE(m.alpha_us == std::max(m.shm.lat_us, m.tcp.lat_us) && m.gbps == std::min(m.shm.gbps, m.tcp.gbps),
            "cost model ", m.alpha_us, " us + ", m.gbps, " GB/s is not the slower of shm ", m.shm.lat_us,
            " us + ", m.shm.gbps, " GB/s and tcp ", m.tcp.lat_us, " us + ", m.tcp.gbps, " GB/s");
    check_every_collective(comm, me);
    REQUIRE_OK(qcclCommDestroy(comm));
  }, o);
  ::unsetenv("QCCL_COMM_ID");
  ::unsetenv("QCCL_COMM_TOKEN");
  EXPECT_TRUE(r.ok()) << r.summary();
}

}  // namespace
}  // namespace qccl_test
