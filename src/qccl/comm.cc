// Communicator set-up: bootstrap, then one connection per peer over the
// transport each pair agrees on, then the cost model.
#include "comm.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "backend/backend.h"
#include "comm_init.h"
#include "algo/cost_probe.h"
#include "algo/placement.h"
#include "core/debug.h"
#include "core/settings.h"
#include "topo/comm_topo.h"
#include "transport/shm.h"
#include "transport/tcp.h"
#include "qk/base/timer.h"

qcclComm::qcclComm(int fr_entries) : fr(fr_entries) {}
qcclComm::~qcclComm() = default;  // here, where qccl::Backend is complete

void qcclComm::fail(qcclResult_t code, const std::string& msg) {
  {
    std::lock_guard<std::mutex> g(err_mu);
    if (async_error != qcclSuccess) return;
    async_error = code;
    async_msg = msg;
    broken.store(true, std::memory_order_release);
  }
  std::string reason = fmt::format("rank {} failed: {}", rank, msg);
  for (auto& c : conns)
    if (c) c->close(reason);
}

void qcclComm::check_usable() const {
  if (aborted.load()) QK_THROW(qccl::UsageError, "communicator '", name, "' was aborted");
  if (!broken.load(std::memory_order_acquire)) return;  // every call asks: no lock on the fast path
  std::lock_guard<std::mutex> g(const_cast<std::mutex&>(err_mu));
  if (async_error != qcclSuccess)
    QK_THROW(qccl::UsageError, "communicator '", name, "' rank ", rank,
             " is broken by an earlier error (", qcclGetErrorString(async_error), "): ", async_msg,
             "; destroy it and create a new one");
}

std::string qcclComm::peer_name(int r) const {
  if (r < 0 || r >= static_cast<int>(peers.size())) return "rank " + std::to_string(r);
  return fmt::format("rank {} (pid {} on {})", r, peers[r].pid, peers[r].host);
}

namespace qccl {

namespace {

constexpr uint32_t kPeerMagic = 0x51435048;  // "QCPH"
constexpr uint16_t kPeerVersion = 2;
enum : uint16_t { kViaTcp = 1, kViaShm = 2 };

// Sent on every socket a rank opens to a lower rank; a TCP peer gets
// QCCL_NSOCKS of them, numbered by `stream`.
struct PeerHello {
  uint32_t magic;
  uint16_t version;
  uint16_t via;
  uint8_t token[16];
  int32_t from, to, nranks;
  uint16_t stream, nsocks;
};

uint16_t choose_via(const qcclComm& c, int peer, const std::string& forced) {
  bool same_host = c.peers[peer].host_hash == c.peers[c.rank].host_hash;
  if (forced == "tcp") return kViaTcp;
  if (forced == "shm") {
    QK_CHECK(same_host, "transport shm was forced (QCCL_TRANSPORT or config) but ",
             c.peer_name(peer), " is on another host; use auto or tcp");
    return kViaShm;
  }
  QK_CHECK(forced == "auto" || forced.empty(), "Expected transport auto, shm or tcp, got '", forced,
           "' (QCCL_TRANSPORT or config.transport)");
  return same_host ? kViaShm : kViaTcp;
}

int sockets_for(uint16_t via, int nsocks) { return via == kViaTcp ? nsocks : 1; }

std::string check_peer_hello(const PeerHello& h, const qcclComm& c,
                             const std::vector<std::vector<Fd>>& socks,
                             const std::vector<uint16_t>& via, int nsocks) {
  if (h.magic != kPeerMagic) return "not a qccl peer hello (bad magic)";
  if (h.version != kPeerVersion) return fmt::format("peer protocol version {} (mixed builds?)", h.version);
  if (std::memcmp(h.token, c.token.data(), 16) != 0) return "wrong job token";
  if (h.nranks != c.nranks || h.to != c.rank || h.from <= c.rank || h.from >= c.nranks)
    return fmt::format("claims to be rank {} of {} connecting to rank {}", h.from, h.nranks, h.to);
  if (h.via != via[h.from])
    return fmt::format("rank {} wants transport {} but this rank chose {}: set QCCL_TRANSPORT the "
                       "same on every rank",
                       h.from, h.via == kViaShm ? "shm" : "tcp", via[h.from] == kViaShm ? "shm" : "tcp");
  int want = sockets_for(via[h.from], nsocks);
  if (h.nsocks != want)
    return fmt::format("rank {} opens {} sockets per peer, this rank {}: set QCCL_NSOCKS the same "
                       "on every rank",
                       h.from, h.nsocks, want);
  if (h.stream >= want || socks[h.from][h.stream])
    return fmt::format("rank {} sent socket {} of {} twice or out of range", h.from, h.stream, want);
  return "";
}

void connect_mesh(qcclComm& c, Fd& listen, const std::string& forced, int nsocks, const Deadline& dl) {
  int n = c.nranks;
  std::vector<uint16_t> via(n, 0);
  for (int p = 0; p < n; ++p)
    if (p != c.rank) via[p] = choose_via(c, p, forced);
  std::vector<std::vector<Fd>> socks(n);
  for (int p = 0; p < n; ++p)
    if (p != c.rank) socks[p].resize(sockets_for(via[p], nsocks));
  // Connect to every lower rank, then accept every higher one: waits only
  // ever point to lower ranks, so the set-up cannot deadlock.
  for (int p = 0; p < c.rank; ++p) {
    SockAddr a;
    a.ip = c.peers[p].ip;
    a.port = c.peers[p].port;
    for (size_t s = 0; s < socks[p].size(); ++s) {
      Fd fd = connect_to(a, dl, c.peer_name(p));
      PeerHello h{kPeerMagic, kPeerVersion, via[p], {}, c.rank, p, n, static_cast<uint16_t>(s),
                  static_cast<uint16_t>(socks[p].size())};
      std::memcpy(h.token, c.token.data(), 16);
      send_all(fd.get(), &h, sizeof h, dl, c.peer_name(p));
      char ack = 0;
      recv_all(fd.get(), &ack, 1, dl, c.peer_name(p));
      QK_CHECK_AS(RemoteError, ack == 'k', c.peer_name(p),
                  " refused our connection (see its log: token, rank, transport or QCCL_NSOCKS mismatch)");
      socks[p][s] = std::move(fd);
    }
  }
  int want = 0;
  for (int p = c.rank + 1; p < n; ++p) want += static_cast<int>(socks[p].size());
  while (want > 0) {
    Fd fd = accept_until(listen.get(), dl);
    if (!fd) {
      std::string missing;
      for (int p = c.rank + 1; p < n; ++p)
        if (std::any_of(socks[p].begin(), socks[p].end(), [](const Fd& f) { return !f; }))
          missing += fmt::format("{}{}", missing.empty() ? "" : ", ", c.peer_name(p));
      QK_THROW(qk::TimeoutError, "rank ", c.rank, " timed out after ", dl.total_seconds(),
               " s waiting for ", missing, " to connect");
    }
    PeerHello h{};
    try {
      recv_all(fd.get(), &h, sizeof h, Deadline(std::min(5.0, std::max(0.1, dl.remaining_seconds()))),
               "a connecting process");
    } catch (const std::exception& e) {
      QCCL_WARN("INIT", "rank {}: refused a connection: {}", c.rank, e.what());
      continue;
    }
    std::string why = check_peer_hello(h, c, socks, via, nsocks);
    if (!why.empty()) {
      QCCL_WARN("INIT", "rank {}: refused a connection: {}", c.rank, why);
      char nack = 'x';
      try { send_all(fd.get(), &nack, 1, Deadline(1.0), "refused peer"); } catch (...) {}
      continue;
    }
    char ack = 'k';
    send_all(fd.get(), &ack, 1, dl, c.peer_name(h.from));
    socks[h.from][h.stream] = std::move(fd);
    --want;
  }
  c.conns.resize(n);
  for (int p = 0; p < n; ++p) {
    if (p == c.rank) continue;
    if (via[p] == kViaShm)
      c.conns[p] = make_shm_conn(c.rank, p, c.peer_name(p), std::move(socks[p][0]), c.peers[p].pid,
                                 cma_enabled(), dl);
    else
      c.conns[p] = make_tcp_conn(p, c.peer_name(p), std::move(socks[p]));
    QCCL_INFO("NET", "comm '{}' rank {} -> {} via {}{}{}", c.name, c.rank, c.peer_name(p),
              c.conns[p]->kind(),
              c.conns[p]->cma() ? std::string(" (single-copy CMA for large messages)")
              : c.conns[p]->nsocks() > 1 ? fmt::format(" ({} sockets)", c.conns[p]->nsocks())
                                         : std::string(),
              c.conns[p]->maps_peer_memory() ? " (qcclMemAlloc buffers mapped directly)" : "");
  }
}

}  // namespace

void use_tuned_sizes(qcclComm& c) {
  c.cost.chain_chunk = c.tuning.chain_chunk;
  for (auto& conn : c.conns)
    if (conn) conn->set_publish_slice(c.tuning.shm_slice);
  for (auto& last : c.last_choice) last = qcclComm::AlgoChoice{};
}

std::unique_ptr<qcclComm> init_comm(int nranks, const qcclUniqueId& id, int rank,
                                    const qcclConfig_t* cfg) {
  QK_CHECK(nranks >= 1, "Expected nranks >= 1, got ", nranks);
  QK_CHECK(rank >= 0 && rank < nranks, "Expected rank in [0, ", nranks, "), got ", rank);
  qk::Timer timer;
  log_version_once();
  UniqueIdData uid = decode_unique_id(id);
  auto c = std::make_unique<qcclComm>(flight_recorder_entries());
  c->rank = rank;
  c->nranks = nranks;
  c->timeout_s = default_timeout_s();
  std::string transport = default_transport();
  c->algo = forced_algo();
  if (cfg) {
    QK_CHECK(cfg->magic == QCCL_CONFIG_MAGIC && cfg->size == sizeof(qcclConfig_t),
             "qcclConfig_t was not initialised with QCCL_CONFIG_INITIALIZER (bad magic or size)");
    if (cfg->timeoutS > 0) c->timeout_s = cfg->timeoutS;
    if (cfg->commName) c->name = cfg->commName;
    if (cfg->transport) transport = cfg->transport;
    if (cfg->algo) c->algo = cfg->algo;
  }
  Algo unused;
  parse_algo(c->algo, &unused);  // rejects a bad name now, not at the first collective
  QK_CHECK(c->timeout_s > 0, "Expected a positive timeout, got ", c->timeout_s);
  c->token = uid.token;
  c->p2p_send_seq.assign(nranks, 0);
  c->p2p_recv_seq.assign(nranks, 0);
  c->msgs_sent.assign(nranks, 0);
  c->msgs_received.assign(nranks, 0);
  Deadline dl(c->timeout_s);
  if (id_needs_root(id) && rank == 0) start_root(uid.root, uid.token, c->timeout_s);

  PeerInfo me;
  me.pid = static_cast<int32_t>(::getpid());
  me.host_hash = host_hash();
  ::gethostname(me.host, sizeof me.host - 1);
  SockAddr bound;
  Fd listen = listen_on(local_address(), &bound);
  me.ip = bound.ip;
  me.port = bound.port;
  c->peers = join(uid, rank, nranks, me, dl);
  connect_mesh(*c, listen, transport, tcp_nsocks(), dl);
  std::string slowest = "shm";
  int n_shm = 0, n_tcp = 0;
  for (auto& conn : c->conns) {
    if (!conn) continue;
    if (std::string(conn->kind()) == "tcp") {
      slowest = "tcp";
      ++n_tcp;
    } else {
      ++n_shm;
    }
  }
  int local = static_cast<int>(std::count_if(c->peers.begin(), c->peers.end(), [&](const PeerInfo& p) {
    return p.host_hash == c->peers[rank].host_hash;
  }));
  long cpus = ::sysconf(_SC_NPROCESSORS_ONLN);  // the same for every rank of a host, unlike affinity
  c->oversubscribed = cpus > 0 && local > cpus;
  c->cost = CostModel::for_transport(slowest);
  c->cost.use_slowest(n_shm > 0, n_tcp > 0);
  topo::attach(*c);  // hosts, topology-aware rings, hierarchical plan
  // Before anything is timed. The ranks' masks can allow fewer CPUs than
  // sysconf counts (a cpuset, a taskset): then they are oversubscribed too.
  if (place_local_ranks(*c)) c->oversubscribed = true;
  const CacheSizes caches = cache_sizes();
  c->tuning = machine_tuning(caches, local);
  apply_tuned_sizes(c->tuning, local);
  c->cost.cma_chunk = c->tuning.cma_chunk;
  c->cost.llc_bytes = caches.llc;
  c->cost.host_ranks = local;
  // Both agree the chain chunk (the largest): the ends of a chain must cut alike.
  if (cost_model_measured()) measure_cost_model(*c);  // along that ring
  else agree_chain_chunk(*c);
  use_tuned_sizes(*c);
  derive_thresholds(c->tuning, c->cost, nranks, c->oversubscribed, shm_ring_bytes());
  const CostModel& m = c->cost;
  QCCL_INFO("INIT", "comm '{}' rank {} of {} ready in {:.1f} ms: {} peers via shm, {} via tcp; "
            "timeout {} s; cost model ({}) shm {:.2f} us + {:.2f} GB/s, tcp {:.2f} us + {:.2f} GB/s; "
            "collectives pay {:.2f} us + {:.2f} GB/s per step, reduce {:.2f} GB/s, single copy {}; {}{}",
            c->name, rank, nranks, timer.millis(), n_shm, n_tcp, c->timeout_s, m.source, m.shm.lat_us,
            m.shm.gbps, m.tcp.lat_us, m.tcp.gbps, m.alpha_us, m.gbps, m.reduce_gbps,
            m.cma_everywhere ? fmt::format("{:.2f} us + {:.2f} GB/s between every pair", m.cma.lat_us, m.cma.gbps)
                             : std::string("not between every pair"),
            c->tuning.describe(),
            c->oversubscribed
                ? fmt::format("; {} ranks on this host, more than the CPUs they may use ({} online): waits "
                              "yield at once, shm timed as ring steps of all of them at once",
                              local, cpus)
                : "");
  attach_backend(*c);  // QCCL_BACKEND: the engine of its calls
  return c;
}

}  // namespace qccl
