#include "algo/cost_probe.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <limits>
#include <vector>

#include "algo/collectives.h"
#include "algo/ring_order.h"
#include "core/debug.h"
#include "engine.h"
#include "transport/cma.h"

namespace qccl {

namespace {

constexpr size_t kBulkBytes = 1 << 20;  // large enough to see bandwidth, on shm through CMA too
// Bulks go in trains of kTrain, the replies awaited at the end, so a gap
// between round trips (a descheduled peer) lets a token bucket refill its
// burst only once per train: tc tbf (burst 256kb, 1 gbit) passed lone 1 MiB
// bulks at up to 1.4x the link rate on the loaded 2-core VM.
constexpr int kTrain = 4;
// Trains: one untimed warm-up, then at least kMinTrains timed (link_figures()).
// Counts and budgets: set so the probe stays a few ms per communicator
// (docs/qccl.md, QCCL_COST_MODEL); their accuracy against larger ones was
// not measured.
constexpr int kMinPings = 8, kMaxPings = 32, kMinTrains = 1, kMaxTrains = 4;
constexpr double kPingBudgetUs = 500, kBulkBudgetUs = 2000;  // per pair: at most 3 pairs per rank

enum : uint64_t { kDone = 0, kPing = 1, kBulk = 2, kAddress = 3 };
// Single-copy timing: latency from small reads, bandwidth from the bulk in
// Tuning::cma_chunk pieces (best of kCmaReps).
constexpr int kCmaPings = 16, kCmaReps = 3;
// Ring steps timed with more ranks than CPUs (time_ring_steps): 8-byte steps, then half bulks.
constexpr int kStepPings = 32, kStepBulks = 8;

using Clock = std::chrono::steady_clock;
double us_since(Clock::time_point t) {
  return std::chrono::duration<double, std::micro>(Clock::now() - t).count();
}

void send_to(Call& call, int peer, const void* p, size_t n) {
  Xfer x[1] = {Xfer::send(peer, p, n)};
  x[0].seq = call.comm.p2p_send_seq[peer]++;
  run(call, x);
}
void recv_from(Call& call, int peer, void* p, size_t n) {
  Xfer x[1] = {Xfer::recv(peer, p, n)};
  x[0].seq = call.comm.p2p_recv_seq[peer]++;
  run(call, x);
}

// Single-copy figures of one pair: the peer's bulk buffer read into ours.
LinkCost cma_figures(Conn& conn, uint64_t addr, char* bulk, size_t chunk) {
  std::vector<double> lat;
  for (int i = 0; i < kCmaPings; ++i) {
    auto t = Clock::now();
    cma_read(conn, bulk, addr, 64);
    lat.push_back(us_since(t));
  }
  std::sort(lat.begin(), lat.end());
  double lat_us = lat[lat.size() / 4];
  chunk = std::min(chunk, kBulkBytes / 2);
  double best = std::numeric_limits<double>::infinity();
  size_t calls = 0;
  for (int rep = 0; rep < kCmaReps; ++rep) {
    auto t = Clock::now();
    calls = 0;
    // Read into the first chunk of our bulk over and over: it stays in cache,
    // as the direct all-reduce's pieces do.
    for (size_t o = 0; o + chunk <= kBulkBytes; o += chunk, ++calls) cma_read(conn, bulk, addr + o, chunk);
    best = std::min(best, us_since(t));
  }
  double copy_us = std::max(best - calls * lat_us, 0.5 * best);
  return LinkCost{lat_us, static_cast<double>(calls * chunk) / copy_us / 1e3};
}

// The initiator of a pair times round trips (time_link) and single-copy
// reads of the other side's bulk buffer (cma_out, where the pair has CMA).
LinkCost probe_link(Call& call, int peer, char* bulk, bool time_link, LinkCost* cma_out) {
  uint64_t cmd = kPing, reply = 0;
  std::vector<double> rtts;
  std::vector<double> train_us;
  auto start = Clock::now();
  while (time_link && rtts.size() < kMaxPings && (rtts.size() < kMinPings || us_since(start) < kPingBudgetUs)) {
    auto t = Clock::now();
    send_to(call, peer, &cmd, sizeof cmd);
    recv_from(call, peer, &reply, sizeof reply);
    rtts.push_back(us_since(t));
  }
  cmd = kBulk;
  start = Clock::now();
  while (time_link && train_us.size() < kMaxTrains &&
         (train_us.size() < 1 + kMinTrains || us_since(start) < kBulkBudgetUs)) {
    auto t = Clock::now();
    Xfer xs[2 * kTrain];
    for (int i = 0; i < kTrain; ++i) {
      xs[2 * i] = Xfer::send(peer, &cmd, sizeof cmd);
      xs[2 * i + 1] = Xfer::send(peer, bulk, kBulkBytes);
    }
    for (Xfer& x : xs) x.seq = call.comm.p2p_send_seq[peer]++;
    run(call, xs);
    for (int i = 0; i < kTrain; ++i) recv_from(call, peer, &reply, sizeof reply);
    train_us.push_back(us_since(t));
  }
  Conn& conn = *call.comm.conns[peer];
  if (cma_out && conn.cma()) {
    cmd = kAddress;
    uint64_t addr = 0;
    send_to(call, peer, &cmd, sizeof cmd);
    recv_from(call, peer, &addr, sizeof addr);
    *cma_out = cma_figures(conn, addr, bulk, call.comm.tuning.cma_chunk);
  }
  cmd = kDone;
  send_to(call, peer, &cmd, sizeof cmd);
  return time_link ? link_figures(rtts, train_us, kTrain * kBulkBytes) : LinkCost{};
}

// The other side answers until the initiator says it is done.
void answer_link(Call& call, int peer, char* bulk) {
  uint64_t reply = 1;
  while (true) {
    uint64_t cmd = ~0ull;
    recv_from(call, peer, &cmd, sizeof cmd);
    if (cmd == kDone) return;
    if (cmd == kAddress) {
      uint64_t addr = reinterpret_cast<uint64_t>(bulk);
      send_to(call, peer, &addr, sizeof addr);
      continue;
    }
    if (cmd == kBulk) recv_from(call, peer, bulk, kBulkBytes);
    else if (cmd != kPing)
      QCCL_REMOTE_ERROR(call.comm.peer_name(peer), " sent cost-probe command ", cmd,
                        " (expected 0 to 3); mixed qccl builds?");
    send_to(call, peer, &reply, sizeof reply);
  }
}

// With more ranks than CPUs a pair timed alone times the scheduler, not a
// collective's step; so every rank of the host times a ring step as the
// collectives run it, all at once: send to the next rank of the host and
// receive from the previous one: small messages (latency), then half bulks
// (bandwidth) after a warm-up one.
LinkCost time_ring_steps(Call& call, int prev, int next, char* bulk) {
  auto step = [&](const void* out, void* in, size_t bytes) {
    Xfer xs[2] = {Xfer::send(next, out, bytes), Xfer::recv(prev, in, bytes)};
    xs[0].seq = call.comm.p2p_send_seq[next]++;
    xs[1].seq = call.comm.p2p_recv_seq[prev]++;
    run(call, xs);
  };
  // Steps depend on each other around the ring as a collective's do, so
  // the mean is the step: one rank's head start shows in the next's wait.
  uint64_t out = 0, in = 0;
  auto t = Clock::now();
  for (int i = 0; i < kStepPings; ++i) step(&out, &in, sizeof out);
  const double lat = us_since(t) / kStepPings;
  const size_t half = kBulkBytes / 2;
  step(bulk, bulk + half, half);  // warm-up
  t = Clock::now();
  for (int i = 0; i < kStepBulks; ++i) step(bulk, bulk + half, half);
  const double bulk_us = us_since(t) / kStepBulks;
  const double transfer_us = std::max(bulk_us - lat, 0.5 * bulk_us);
  return LinkCost{lat, half / transfer_us / 1e3};
}

// Figures every rank contributes; the maximum over ranks is the slowest link.
struct Figures {
  double lat[2];     // shm, tcp; 0: not measured
  double neg_bw[2];  // minus GB/s, so the max is the slowest; -inf: not measured
  double in_use[2];  // 1 where some rank has a link of that transport
  double neg_reduce;  // minus the local reduction speed, GB/s
  double cma_lat;      // single copy, us per call; 0: not measured
  double neg_cma_bw;   // minus GB/s; -inf: not measured
  double no_cma;       // 1 where some rank cannot single-copy to some peer
  double validate_ns;  // checking a registration (Tuning): the slowest rank's, so all register alike
  double chain_chunk;  // Tuning::chain_chunk: the largest, so both ends of a chain cut alike
};

// Local reduction speed: float sums over the bulk buffer, best of three.
double reduce_gbps(char* buf) {
  size_t n = kBulkBytes / 2 / sizeof(float);
  double best = std::numeric_limits<double>::infinity();
  for (int i = 0; i < 3; ++i) {
    auto t = Clock::now();
    reduce(buf, buf, buf + kBulkBytes / 2, n, qcclFloat32, qcclSum);
    best = std::min(best, us_since(t));
  }
  return n * sizeof(float) / std::max(best, 1e-3) / 1e3;
}

// Every rank ends with the element-wise max over all ranks of v[0..n). With
// nothing to agree on, a barrier.
void agree_max(Call& call, double* v, size_t n) {
  std::vector<double> mine(v, v + n);
  std::vector<double> max = gather_and_answer(call, mine, n, [n](const std::vector<double>& all, int) {
    std::vector<double> m(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(n));
    for (size_t i = n; i < all.size(); ++i) m[i % n] = std::max(m[i % n], all[i]);
    return m;
  });
  std::copy(max.begin(), max.end(), v);
}

void agree(Call& call, Figures* f) {
  agree_max(call, reinterpret_cast<double*>(f), sizeof(Figures) / sizeof(double));
}

void barrier(Call& call) {
  double none = 0;
  agree_max(call, &none, 1);
}

}  // namespace

std::vector<double> gather_and_answer(Call& call, const std::vector<double>& mine, size_t reply_size,
                                      const Answer& answer) {
  qcclComm& c = call.comm;
  const size_t k = mine.size();
  std::vector<double> all(c.nranks * k);
  std::copy(mine.begin(), mine.end(), all.begin() + c.rank * k);
  if (c.rank != 0) {
    send_to(call, 0, mine.data(), k * sizeof(double));
    std::vector<double> reply(reply_size);
    recv_from(call, 0, reply.data(), reply.size() * sizeof(double));
    return reply;
  }
  std::vector<Xfer> xs;
  for (int p = 1; p < c.nranks; ++p) {
    xs.push_back(Xfer::recv(p, all.data() + p * k, k * sizeof(double)));
    xs.back().seq = c.p2p_recv_seq[p]++;
  }
  run(call, xs);
  std::vector<std::vector<double>> replies(c.nranks);
  for (int p = 0; p < c.nranks; ++p) {
    replies[p] = answer(all, p);
    QK_INTERNAL_ASSERT(replies[p].size() == reply_size, "answer of ", replies[p].size(), " values, not ", reply_size);
  }
  xs.clear();
  for (int p = 1; p < c.nranks; ++p) {
    xs.push_back(Xfer::send(p, replies[p].data(), replies[p].size() * sizeof(double)));
    xs.back().seq = c.p2p_send_seq[p]++;
  }
  run(call, xs);
  return replies[0];
}

LinkCost link_figures(std::vector<double> rtts_us, const std::vector<double>& train_us, size_t train_bytes) {
  QK_INTERNAL_ASSERT(!rtts_us.empty() && train_us.size() >= 2, "cost probe: too few samples");
  // Delays from other processes only add, so the lower quartile, not the
  // median (4 ranks on 2 cores under load: a median tcp ping of 2.4 ms where
  // the all-reduce steps showed well under 0.3 ms).
  std::sort(rtts_us.begin(), rtts_us.end());
  double rtt = rtts_us[rtts_us.size() / 4];
  // The first train is a warm-up: it drains a token bucket's burst (tc tbf
  // burst 256kb let the first 1 MiB through at 1.5x the 1 gbit rate) and
  // opens the TCP window; the best of the rest is the link's steady rate.
  double best = *std::min_element(train_us.begin() + 1, train_us.end());
  // A train's round trip is one latency each way plus the transfer.
  double transfer_us = std::max(best - rtt, 0.5 * best);
  return LinkCost{rtt / 2, train_bytes / transfer_us / 1e3};
}

void agree_chain_chunk(qcclComm& c) {
  if (c.nranks < 2) return;
  Call call(c, "agree-chain-chunk", MsgKind::kProbe, sizeof(double), "probe");
  double chunk = static_cast<double>(c.tuning.chain_chunk);
  agree_max(call, &chunk, 1);
  finish(call);
  c.tuning.chain_chunk = static_cast<size_t>(chunk);
}

void measure_cost_model(qcclComm& c) {
  int n = c.nranks, r = c.rank;
  if (n < 2) return;
  Call call(c, "cost-probe", MsgKind::kProbe, kBulkBytes, "probe");
  char* bulk = scratch(c, kBulkBytes);
  std::memset(bulk, 0, kBulkBytes);  // fault the pages in before timing
  Figures f{{0, 0}, {-1e300, -1e300}, {0, 0}, -reduce_gbps(bulk), 0, -1e300, 0,
             c.tuning.validate_ns, static_cast<double>(c.tuning.chain_chunk)};
  for (auto& conn : c.conns)
    if (conn) {
      f.in_use[std::string(conn->kind()) == "tcp" ? 1 : 0] = 1;
      if (!conn->cma()) f.no_cma = 1;
    }
  // Bulks time the shared-memory rings, not single copy (measured on its own).
  const size_t cma_min = c.tuning.cma_min_bytes;
  c.tuning.cma_min_bytes = SIZE_MAX;
  // Edges (i, i+1) of the ring the collectives run along (positions; Note
  // [ring order]) in at most three rounds, so each rank is in at most one
  // pair at a time: even i, odd i, then the wrap-around (n-1, 0).
  RingOrder ro = ring_order(c);
  for (int round = 0; round < 3; ++round) {
    // Rounds in turn: a pair's pings timed while another pair streams its
    // bulks share the CPUs and the link (2 hosts x 2 ranks on 2 cores: tcp
    // pings of 60-90 us alone, up to 825 us beside the other pair's bulks).
    if (round > 0 && n > 2) barrier(call);
    int init = -1, resp = -1;  // this rank's pair in this round, if any
    for (int i = 0; i < n; ++i) {
      int j = (i + 1) % n;
      bool in_round = round == 2 ? (i == n - 1 && n > 2) : (j != 0 && i % 2 == round);
      if (!in_round) continue;
      if (ro.rank_at(i) == r) init = ro.rank_at(j);
      if (ro.rank_at(j) == r) resp = ro.rank_at(i);
    }
    // With more ranks than CPUs a shared-memory ping-pong of one pair times
    // the scheduler (4 ranks on 2 cores: 6 us to 1.7 ms from one run to the
    // next), so such pairs (both sides know: one host) are timed below as
    // ring steps of all the host's ranks at once; single copy is timed by one
    // side alone and is measured here anyway.
    if (init >= 0) {
      bool shm = std::string(c.conns[init]->kind()) == "shm";
      bool time_link = !(c.oversubscribed && shm);
      LinkCost cma{};
      LinkCost l = probe_link(call, init, bulk, time_link, shm ? &cma : nullptr);
      int t = shm ? 0 : 1;
      if (time_link) {
        f.lat[t] = std::max(f.lat[t], l.lat_us);
        f.neg_bw[t] = std::max(f.neg_bw[t], -l.gbps);
        QCCL_TRACE("INIT", "cost probe rank {} -> {} via {}: {:.2f} us, {:.2f} GB/s", r, init,
                   c.conns[init]->kind(), l.lat_us, l.gbps);
      }
      if (cma.gbps > 0) {
        f.cma_lat = std::max(f.cma_lat, cma.lat_us);
        f.neg_cma_bw = std::max(f.neg_cma_bw, -cma.gbps);
        QCCL_TRACE("INIT", "cost probe rank {} -> {} single copy: {:.2f} us per call, {:.2f} GB/s", r,
                   init, cma.lat_us, cma.gbps);
      }
    } else if (resp >= 0) {
      answer_link(call, resp, bulk);
    }
  }
  // Every rank, oversubscribed host or not: no rank may still be in a pair
  // while the ring steps are timed, and all must call the barrier.
  if (n > 2) barrier(call);
  if (c.oversubscribed) {  // the same for every rank of a host
    // The host's ranks in ring order: each times the step to the next of them.
    std::vector<int> local;
    for (int i = 0; i < n; ++i) {
      int q = ro.rank_at(i);
      if (q == r || (c.conns[q] && std::string(c.conns[q]->kind()) == "shm")) local.push_back(q);
    }
    if (local.size() >= 2) {
      auto me = std::find(local.begin(), local.end(), r) - local.begin();
      const int k = static_cast<int>(local.size());
      int next = local[(me + 1) % k], prev = local[(me + k - 1) % k];
      LinkCost l = time_ring_steps(call, prev, next, bulk);
      f.lat[0] = std::max(f.lat[0], l.lat_us);
      f.neg_bw[0] = std::max(f.neg_bw[0], -l.gbps);
      QCCL_TRACE("INIT", "cost probe rank {}: ring step to {} with the host's {} ranks at once: {:.2f} us, {:.2f} GB/s",
                 r, next, k, l.lat_us, l.gbps);
    }
  }
  agree(call, &f);
  finish(call);
  c.tuning.cma_min_bytes = cma_min;
  c.tuning.validate_ns = f.validate_ns;
  c.tuning.chain_chunk = static_cast<size_t>(f.chain_chunk);
  // In place: other fields (the topology's host counts) stay.
  CostModel& m = c.cost;
  m.shm = static_link_cost("shm");
  m.tcp = static_link_cost("tcp");
  bool measured = false, configured = false;
  const char* kinds[2] = {"shm", "tcp"};
  LinkCost* links[2] = {&m.shm, &m.tcp};
  for (int t = 0; t < 2; ++t) {
    configured |= lat_configured(kinds[t]) || bw_configured(kinds[t]);
    if (f.lat[t] > 0 && !lat_configured(kinds[t])) {
      links[t]->lat_us = f.lat[t];
      measured = true;
    }
    if (f.neg_bw[t] > -1e300 && !bw_configured(kinds[t])) {
      links[t]->gbps = -f.neg_bw[t];
      measured = true;
    }
  }
  m.use_slowest(f.in_use[0] > 0, f.in_use[1] > 0);
  // Agreed too: the model may choose the direct all-reduce only where every
  // rank can single-copy to every other.
  m.cma_everywhere = f.no_cma == 0 && f.in_use[1] == 0;
  if (f.cma_lat > 0) {
    m.cma = LinkCost{f.cma_lat, -f.neg_cma_bw};
    measured = true;
  }
  m.reduce_gbps = configured_reduce_gbps() > 0 ? configured_reduce_gbps() : -f.neg_reduce;
  m.source = measured ? (configured ? "measured+configured" : "measured") : configured ? "configured" : "static";
}

}  // namespace qccl
