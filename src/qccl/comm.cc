// Communicator set-up: bootstrap, then one connection per peer over the
// transport each pair agrees on, then the cost model.
#include "qccl/comm.h"

#include <unistd.h>

#include <cstring>

#include "qccl/comm_init.h"
#include "qccl/core/debug.h"
#include "qccl/core/settings.h"
#include "qccl/transport/shm.h"
#include "qccl/transport/tcp.h"
#include "qk/base/timer.h"

void qcclComm::fail(qcclResult_t code, const std::string& msg) {
  {
    std::lock_guard<std::mutex> g(err_mu);
    if (async_error != qcclSuccess) return;
    async_error = code;
    async_msg = msg;
  }
  std::string reason = fmt::format("rank {} failed: {}", rank, msg);
  for (auto& c : conns)
    if (c) c->close(reason);
}

void qcclComm::check_usable() const {
  if (aborted.load()) QK_THROW(qccl::UsageError, "communicator '", name, "' was aborted");
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
constexpr uint16_t kPeerVersion = 1;
enum : uint16_t { kViaTcp = 1, kViaShm = 2 };

struct PeerHello {
  uint32_t magic;
  uint16_t version;
  uint16_t via;
  uint8_t token[16];
  int32_t from, to, nranks;
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

std::string check_peer_hello(const PeerHello& h, const qcclComm& c, const std::vector<bool>& have,
                             const std::vector<uint16_t>& via) {
  if (h.magic != kPeerMagic) return "not a qccl peer hello (bad magic)";
  if (h.version != kPeerVersion) return fmt::format("peer protocol version {} (mixed builds?)", h.version);
  if (std::memcmp(h.token, c.token.data(), 16) != 0) return "wrong job token";
  if (h.nranks != c.nranks || h.to != c.rank || h.from <= c.rank || h.from >= c.nranks)
    return fmt::format("claims to be rank {} of {} connecting to rank {}", h.from, h.nranks, h.to);
  if (have[h.from]) return fmt::format("rank {} connected twice", h.from);
  if (h.via != via[h.from])
    return fmt::format("rank {} wants transport {} but this rank chose {}: set QCCL_TRANSPORT the "
                       "same on every rank",
                       h.from, h.via == kViaShm ? "shm" : "tcp", via[h.from] == kViaShm ? "shm" : "tcp");
  return "";
}

void connect_mesh(qcclComm& c, Fd& listen, const std::string& forced, const Deadline& dl) {
  int n = c.nranks;
  std::vector<uint16_t> via(n, 0);
  for (int p = 0; p < n; ++p)
    if (p != c.rank) via[p] = choose_via(c, p, forced);
  std::vector<Fd> socks(n);
  // Connect to every lower rank, then accept every higher one: waits only
  // ever point to lower ranks, so the set-up cannot deadlock.
  for (int p = 0; p < c.rank; ++p) {
    SockAddr a;
    a.ip = c.peers[p].ip;
    a.port = c.peers[p].port;
    Fd fd = connect_to(a, dl, c.peer_name(p));
    PeerHello h{kPeerMagic, kPeerVersion, via[p], {}, c.rank, p, n};
    std::memcpy(h.token, c.token.data(), 16);
    send_all(fd.get(), &h, sizeof h, dl, c.peer_name(p));
    char ack = 0;
    recv_all(fd.get(), &ack, 1, dl, c.peer_name(p));
    QK_CHECK_AS(RemoteError, ack == 'k', c.peer_name(p),
                " refused our connection (see its log: token, rank or transport mismatch)");
    socks[p] = std::move(fd);
  }
  std::vector<bool> have(n, false);
  int want = n - 1 - c.rank;
  while (want > 0) {
    Fd fd = accept_until(listen.get(), dl);
    if (!fd) {
      std::string missing;
      for (int p = c.rank + 1; p < n; ++p)
        if (!have[p]) missing += fmt::format("{}{}", missing.empty() ? "" : ", ", c.peer_name(p));
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
    std::string why = check_peer_hello(h, c, have, via);
    if (!why.empty()) {
      QCCL_WARN("INIT", "rank {}: refused a connection: {}", c.rank, why);
      char nack = 'x';
      try { send_all(fd.get(), &nack, 1, Deadline(1.0), "refused peer"); } catch (...) {}
      continue;
    }
    char ack = 'k';
    send_all(fd.get(), &ack, 1, dl, c.peer_name(h.from));
    have[h.from] = true;
    socks[h.from] = std::move(fd);
    --want;
  }
  c.conns.resize(n);
  for (int p = 0; p < n; ++p) {
    if (p == c.rank) continue;
    if (via[p] == kViaShm)
      c.conns[p] = make_shm_conn(c.rank, p, c.peer_name(p), std::move(socks[p]), c.peers[p].pid,
                                 cma_enabled(), dl);
    else
      c.conns[p] = make_tcp_conn(p, c.peer_name(p), std::move(socks[p]));
    QCCL_INFO("NET", "comm '{}' rank {} -> {} via {}{}", c.name, c.rank, c.peer_name(p),
              c.conns[p]->kind(), c.conns[p]->cma() ? " (single-copy CMA for large messages)" : "");
  }
}

}  // namespace

std::unique_ptr<qcclComm> init_comm(int nranks, const qcclUniqueId& id, int rank,
                                    const qcclConfig_t* cfg) {
  QK_CHECK(nranks >= 1, "Expected nranks >= 1, got ", nranks);
  QK_CHECK(rank >= 0 && rank < nranks, "Expected rank in [0, ", nranks, "), got ", rank);
  qk::Timer timer;
  UniqueIdData uid = decode_unique_id(id);
  auto c = std::make_unique<qcclComm>(flight_recorder_entries());
  c->rank = rank;
  c->nranks = nranks;
  c->timeout_s = default_timeout_s();
  std::string transport = default_transport();
  c->algo = forced_algo();
  c->cma_min_bytes = cma_min_bytes();
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
  connect_mesh(*c, listen, transport, dl);
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
  c->cost = CostModel::for_transport(slowest);
  QCCL_INFO("INIT", "comm '{}' rank {} of {} ready in {:.1f} ms: {} peers via shm, {} via tcp; "
            "timeout {} s; cost model {} us + {} GB/s",
            c->name, rank, nranks, timer.millis(), n_shm, n_tcp, c->timeout_s, c->cost.alpha_us,
            c->cost.gbps);
  return c;
}

}  // namespace qccl
