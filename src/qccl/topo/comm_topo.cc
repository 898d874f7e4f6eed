#include "topo/comm_topo.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "comm.h"
#include "core/debug.h"
#include "core/errors.h"
#include "engine.h"
#include "topo/detect.h"

namespace qccl::topo {

std::string CommTopo::format_ring() const {
  std::string s;
  for (size_t i = 0; i < ring.size(); ++i)
    s += fmt::format("{}{}", ring[i], ring.size() > 1 ? fmt::format(" -{}-> ", hop[i]) : "");
  if (ring.size() > 1) s += std::to_string(ring[0]);
  return s;
}

std::shared_ptr<const CommTopo> make_comm_topo(const std::vector<uint64_t>& host_hash,
                                               const Topology* topo, P2PLevel level) {
  auto t = std::make_shared<CommTopo>();
  int n = static_cast<int>(host_hash.size());
  std::map<uint64_t, int> host_num;
  for (int r = 0; r < n; ++r) {
    auto [it, fresh] = host_num.emplace(host_hash[r], static_cast<int>(t->host_ranks.size()));
    if (fresh) t->host_ranks.push_back({});
    t->host_of.push_back(it->second);
    t->local_index.push_back(static_cast<int>(t->host_ranks[it->second].size()));
    t->host_ranks[it->second].push_back(r);
  }
  t->nhosts = static_cast<int>(t->host_ranks.size());
  // Device of each rank where the topology knows enough GPUs: the topology's
  // host h when it describes every host, else its first host (a homogeneous cluster).
  Analysis an;
  std::vector<int> dev(n, -1);
  t->devices = "unknown (ranks in rank order)";
  if (topo && !topo->hosts.empty()) {
    an = analyze(*topo);
    bool per_host = static_cast<int>(topo->hosts.size()) == t->nhosts;
    for (int h = 0; h < t->nhosts; ++h) {
      int th = per_host ? h : 0;
      std::vector<int> gpus;
      for (int d : an.gpus())
        if (an.devices[d].host == th) gpus.push_back(d);
      if (gpus.size() < t->host_ranks[h].size()) continue;
      for (size_t j = 0; j < t->host_ranks[h].size(); ++j) dev[t->host_ranks[h][j]] = gpus[j];
      t->devices = fmt::format("{} (rank j of a host on its GPU j)", topo->source);
    }
  }
  std::vector<std::vector<int>> rings;
  for (int h = 0; h < t->nhosts; ++h) {
    const auto& ranks = t->host_ranks[h];
    std::vector<int> ring = ranks;
    if (dev[ranks[0]] >= 0) {
      std::vector<int> devs;
      for (int r : ranks) devs.push_back(dev[r]);
      ring.clear();
      for (int d : best_path(an, devs, level))
        ring.push_back(ranks[std::find(devs.begin(), devs.end(), d) - devs.begin()]);
    }
    rings.push_back(ring);
    t->ring.insert(t->ring.end(), ring.begin(), ring.end());
  }
  for (size_t i = 0; i < t->ring.size(); ++i) {
    int a = t->ring[i], b = t->ring[(i + 1) % t->ring.size()];
    if (dev[a] >= 0 && dev[b] >= 0 && an.devices[dev[a]].host != an.devices[dev[b]].host)
      t->hop.push_back("NET");
    else if (dev[a] >= 0 && dev[b] >= 0) {
      Hop hp = make_hop(an, dev[a], dev[b], level);
      t->hop.push_back(hp.label + " " + hp.via);
    } else {
      t->hop.push_back(t->host_of[a] == t->host_of[b] ? "SHM" : "NET");
    }
  }
  t->plan = plan_hierarchical(t->host_of, rings);
  return t;
}

namespace {

// The ring algorithms only work if every rank walks the same ring, but each
// rank computes it from its own settings and detection (QCCL_TOPO_FILE set on
// some ranks only, hosts that detect differently). Rank 0's ring is the
// communicator's: the others adopt it, with a warning where theirs differed.
void agree_on_ring(qcclComm& c, CommTopo& t) {
  int n = c.nranks;
  if (n < 2) return;
  std::vector<int32_t> ring(t.ring.begin(), t.ring.end());
  Call call(c, "ring-agree", MsgKind::kProbe, ring.size() * sizeof(int32_t), "p2p");
  std::vector<Xfer> xs;
  for (int p = c.rank == 0 ? 1 : 0; p < (c.rank == 0 ? n : 1); ++p) {
    xs.push_back(c.rank == 0 ? Xfer::send(p, ring.data(), ring.size() * sizeof(int32_t))
                             : Xfer::recv(p, ring.data(), ring.size() * sizeof(int32_t)));
    xs.back().seq = c.rank == 0 ? c.p2p_send_seq[p]++ : c.p2p_recv_seq[p]++;
  }
  run(call, xs);
  finish(call);
  if (std::equal(ring.begin(), ring.end(), t.ring.begin())) return;
  // Rank 0's ring must be a permutation that keeps each host's ranks together.
  std::vector<std::vector<int>> rings(t.nhosts);
  std::vector<bool> seen(n, false);
  int last_host = -1;
  for (int32_t r : ring) {
    if (r < 0 || r >= n || seen[r] || (t.host_of[r] != last_host && !rings[t.host_of[r]].empty()))
      QCCL_REMOTE_ERROR(c.peer_name(0), " sent a ring that is not a permutation of the ranks host by "
                        "host; ranks disagree about the hosts (mixed qccl builds?)");
    seen[r] = true;
    last_host = t.host_of[r];
    rings[last_host].push_back(r);
  }
  QCCL_WARN("INIT", "comm '{}' rank {}: this rank's ring {} differs from rank 0's; using rank 0's "
            "(QCCL_TOPO_FILE, QCCL_P2P_LEVEL or the detected devices differ between ranks)",
            c.name, c.rank, t.format_ring());
  t.ring.assign(ring.begin(), ring.end());
  for (int i = 0; i < n; ++i)
    t.hop[i] = t.host_of[t.ring[i]] == t.host_of[t.ring[(i + 1) % n]] ? "SHM" : "NET";
  t.plan = plan_hierarchical(t.host_of, rings);  // per host, in host order
  t.devices += " (ring: rank 0's)";
}

}  // namespace

void attach(qcclComm& c) {
  bool want_topo = !topo_file_setting().empty() || !topo_dump_file_setting().empty() ||
                   QCCL_INFO_ON("INIT");
  std::vector<uint64_t> hashes;
  for (const auto& p : c.peers) hashes.push_back(p.host_hash);
  bool several = std::any_of(hashes.begin(), hashes.end(), [&](uint64_t h) { return h != hashes[0]; });
  const Topology* topo = nullptr;
  if (want_topo || several) {
    if (!topo_file_setting().empty()) {
      topo = &current_topology();  // a bad file is an error at init, naming the field
    } else {
      try {
        topo = &current_topology();
      } catch (const std::exception& e) {
        QCCL_WARN("INIT", "comm '{}' rank {}: topology detection failed ({}); rings follow rank "
                  "order (QCCL_TOPO_FILE describes the machine instead)", c.name, c.rank, e.what());
      }
    }
  }
  // Devices order the ring only where a setting or several hosts asked for
  // them, never because INFO logs loaded the topology: a log level must not
  // change the reduction order.
  bool use_devices = !topo_file_setting().empty() || !topo_dump_file_setting().empty() || several;
  auto t = std::make_shared<CommTopo>(*make_comm_topo(hashes, use_devices ? topo : nullptr,
                                                      p2p_level_setting()));
  agree_on_ring(c, *t);
  c.topo = t;
  c.cost.hosts = t->plan.usable ? t->nhosts : 1;
  c.cost.ranks_per_host = t->plan.usable ? static_cast<int>(t->host_ranks[0].size()) : c.nranks;
  QCCL_INFO("INIT", "comm '{}' rank {}: {} host{}, devices {}; ring {}", c.name, c.rank, t->nhosts,
            t->nhosts == 1 ? "" : "s", t->devices, t->format_ring());
  if (t->nhosts > 1)
    QCCL_INFO("INIT", "comm '{}' rank {}: hierarchical all-reduce {}", c.name, c.rank,
              t->plan.usable ? fmt::format("available: {} hosts x {} ranks", t->nhosts,
                                           t->host_ranks[0].size())
                             : "not available: " + t->plan.why_not);
}

}  // namespace qccl::topo
