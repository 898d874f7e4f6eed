// All-reduce: the bandwidth-optimal ring (reduce-scatter, then all-gather,
// along the topology-aware ring) for large messages, recursive doubling (in
// rank order) for small ones. See Note [bit-identical results] in
// collectives.h and Note [ring order] in ring_order.h.
#include <cstring>
#include <vector>

#include "algo/collectives.h"
#include "algo/cost_model.h"
#include "algo/direct.h"
#include "algo/hierarchical.h"
#include "algo/ring_order.h"
#include "core/debug.h"
#include "engine.h"

namespace qccl {

namespace {

// Along the communicator's ring, by position (Note [ring order]): segments
// belong to no rank, so segment s is simply the s-th piece of the buffer.
void ring(Call& call, const char* send, char* recv, size_t count, size_t es) {
  RingOrder ro = ring_order(call.comm);
  int n = ro.n, p = ro.pos, next = ro.next(), prev = ro.prev();
  auto off = [&](int seg) { return segment(count, n, seg).off * es; };
  auto len = [&](int seg) { return segment(count, n, seg).len * es; };
  auto mod = [n](int v) { return ((v % n) + n) % n; };
  // Reduce-scatter: after n-1 steps position p holds the full reduction of segment p+1.
  for (int k = 0; k < n - 1; ++k) {
    int s = mod(p - k), q = mod(p - k - 1);
    Xfer xs[2] = {Xfer::send(next, (k == 0 ? send : recv) + off(s), len(s)),
                  Xfer::recv_reduce(prev, recv + off(q), send + off(q), len(q), true)};
    run(call, xs);
  }
  int own = mod(p + 1);
  if (call.op == qcclAvg) finish_avg(recv + off(own), len(own) / es, call.dtype, n);
  // All-gather of the reduced segments.
  for (int k = 0; k < n - 1; ++k) {
    int s = mod(p + 1 - k), q = mod(p - k);
    Xfer xs[2] = {Xfer::send(next, recv + off(s), len(s)), Xfer::recv(prev, recv + off(q), len(q))};
    run(call, xs);
  }
}

void recursive_doubling(Call& call, const char* send, char* recv, size_t count, size_t es) {
  qcclComm& c = call.comm;
  int n = c.nranks, r = c.rank;
  size_t bytes = count * es;
  int p2 = 1, rounds = 0;
  while (p2 * 2 <= n) p2 *= 2, ++rounds;
  int extra = n - p2;
  if (r >= p2) {  // fold into a partner, then get the result back
    Xfer s[1] = {Xfer::send(r - p2, send, bytes)};
    run(call, s);
    Xfer g[1] = {Xfer::recv(r - p2, recv, bytes)};
    run(call, g);
    return;
  }
  // Each round reduces into the buffer the round does not send from, and the
  // rounds alternate between recv and scratch so that the last one lands in
  // recv: no copies in or out (two ranks: send from `send`, reduce into recv).
  char* other = scratch(c, bytes);
  auto dst_of = [&](int round) { return (rounds - 1 - round) % 2 == 0 ? recv : other; };
  const char* cur = send;
  if (r < extra) {
    char* to = dst_of(0) == recv ? other : recv;
    Xfer x[1] = {Xfer::recv_reduce(r + p2, to, send, bytes, false)};
    run(call, x);
    cur = to;
  } else if (send == recv && dst_of(0) == recv) {  // in place: round 0 must not overwrite what it sends
    std::memcpy(other, send, bytes);
    cur = other;
  }
  for (int round = 0, mask = 1; mask < p2; mask <<= 1, ++round) {
    int partner = r ^ mask;
    char* dst = dst_of(round);
    Xfer xs[2] = {Xfer::send(partner, cur, bytes),
                  Xfer::recv_reduce(partner, dst, cur, bytes, partner < r)};
    run(call, xs);
    cur = dst;
  }
  if (call.op == qcclAvg) finish_avg(recv, count, call.dtype, n);
  if (r < extra) {
    Xfer x[1] = {Xfer::send(r + p2, recv, bytes)};
    run(call, x);
  }
}

// Every rank sends its buffer to every other and reduces all n in rank
// order: one round of latency instead of log2(n), for tiny messages.
void all_pairs(Call& call, const char* send, char* recv, size_t count, size_t es) {
  qcclComm& c = call.comm;
  const int n = c.nranks, r = c.rank;
  const size_t bytes = count * es;
  char* slots = scratch(c, bytes * n);
  thread_local std::vector<Xfer> xs;
  xs.clear();
  for (int p = 0; p < n; ++p) {
    if (p == r) continue;
    xs.push_back(Xfer::send(p, send, bytes));
    xs.push_back(Xfer::recv(p, slots + p * bytes, bytes));
  }
  run(call, xs);
  // Our own input goes to its slot too: in place, recv is written before
  // the reduction reaches our rank.
  std::memcpy(slots + r * bytes, send, bytes);
  reduce(recv, slots, slots + bytes, count, call.dtype, call.op);
  for (int p = 2; p < n; ++p) reduce(recv, recv, slots + p * bytes, count, call.dtype, call.op);
  if (call.op == qcclAvg) finish_avg(recv, count, call.dtype, n);
}

}  // namespace

void all_reduce(qcclComm& c, const void* send, void* recv, size_t count, qcclDataType_t dt,
                qcclRedOp_t op) {
  size_t es = dtype_size(dt), bytes = count * es;
  Algo a = choose_for(c, Coll::kAllReduce, bytes);
  if (a == Algo::kHierarchical) {
    if (hierarchical_usable(c)) return hierarchical_all_reduce(c, send, recv, count, dt, op);
    a = choose(c.cost, "auto", Coll::kAllReduce, c.nranks, bytes);  // one host: flat
  }
  Call call(c, "allreduce", MsgKind::kAllReduce, bytes, algo_name(a));
  call.dtype = dt;
  call.op = op;
  QCCL_INFO("COLL", "allreduce #{} count {} {} {} ({} bytes) nranks {} algo {} (predicted {:.1f} us)",
            call.seq, count, dtype_name(dt), op_name(op), bytes, c.nranks, algo_name(a),
            predict_us(c.cost, Coll::kAllReduce, a, c.nranks, bytes));
  const uint64_t cma_before = c.direct_cma_calls;
  auto* s = static_cast<const char*>(send);
  auto* r = static_cast<char*>(recv);
  // Direct when forced or chosen (single copy between every pair makes any
  // buffers reachable), or, from Tuning::direct_min_bytes, in place of what
  // the model chose when every rank's buffers turn out to be shared; not
  // under another forced algorithm.
  bool chosen_direct = a == Algo::kDirect;
  bool forced = !(c.algo.empty() || c.algo == "auto");
  bool may_go_direct = chosen_direct || (!forced && bytes >= c.tuning.direct_min_bytes);
  if (c.nranks == 1) {
    if (s != r) std::memcpy(r, s, bytes);
  } else if (may_go_direct && direct_candidate(c) &&
             direct_all_reduce(call, s, r, count, es, /*allow_cma=*/chosen_direct)) {
    c.fr.set_algo(call.fr_slot, "direct");
    QCCL_INFO("COLL", "allreduce #{}: went direct{}", call.seq,
              c.direct_cma_calls > cma_before ? " (single copy to some peer)" : " (buffers shared on every rank)");
  } else if (a == Algo::kRecursiveDoubling) {
    recursive_doubling(call, s, r, count, es);
  } else if (a == Algo::kAllPairs) {
    all_pairs(call, s, r, count, es);
  } else {
    if (chosen_direct) c.fr.set_algo(call.fr_slot, "ring");  // no rank can reach the others' buffers
    ring(call, s, r, count, es);
  }
  finish(call);
}

Algo choose_for(qcclComm& c, Coll coll, size_t bytes) {
  qcclComm::AlgoChoice& last = c.last_choice[static_cast<int>(coll)];
  if (last.bytes != bytes) last = {bytes, choose(c.cost, c.algo, coll, c.nranks, bytes)};
  return last.algo;
}

char* scratch(qcclComm& c, size_t bytes) {
  if (c.scratch.size() < bytes) c.scratch.resize(bytes);
  return c.scratch.data();
}

}  // namespace qccl
