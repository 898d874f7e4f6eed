// Broadcast and reduce: a binomial tree for small messages (log2(n) steps, in
// rank order relative to the root), a pipelined chain for large ones (every
// link busy, chunk by chunk, along the topology-aware ring from the root).
#include <cstring>

#include "algo/collectives.h"
#include "algo/cost_model.h"
#include "algo/ring_order.h"
#include "core/debug.h"
#include "engine.h"

namespace qccl {

namespace {

int position_of(const RingOrder& ro, int rank) {
  for (int p = 0; p < ro.n; ++p)
    if (ro.rank_at(p) == rank) return p;
  QK_INTERNAL_ASSERT(false, "rank ", rank, " is not on the ring");
  return 0;
}

int pow2_at_least(int n) {
  int p = 1;
  while (p < n) p *= 2;
  return p;
}

void bcast_tree(Call& call, const char* send, char* recv, size_t bytes, int root) {
  qcclComm& c = call.comm;
  int n = c.nranks, rel = (c.rank - root + n) % n;
  auto rank_of = [&](int rl) { return (rl + root) % n; };
  const char* src = recv;
  int mask;
  if (rel == 0) {
    src = send;
    mask = pow2_at_least(n) / 2;
  } else {
    int low = rel & -rel;
    Xfer x[1] = {Xfer::recv(rank_of(rel - low), recv, bytes)};
    run(call, x);
    mask = low / 2;
  }
  std::vector<Xfer> xs;
  for (; mask > 0; mask /= 2)
    if (rel + mask < n) xs.push_back(Xfer::send(rank_of(rel + mask), src, bytes));
  run(call, xs);
}

void bcast_chain(Call& call, const char* send, char* recv, size_t bytes, int root) {
  qcclComm& c = call.comm;
  // Along the ring from the root (Note [ring order]).
  RingOrder ro = ring_order(c);
  int n = c.nranks, rel = (ro.pos - position_of(ro, root) + n) % n;
  int prev = ro.prev(), next = ro.next();
  const char* src = rel == 0 ? send : recv;
  const size_t kChainChunk = c.tuning.chain_chunk;  // agreed at init: every rank cuts alike
  size_t chunks = (bytes + kChainChunk - 1) / kChainChunk;
  if (chunks == 0) chunks = 1;  // zero bytes still travel as one (empty) message
  auto chunk_len = [&](size_t i) { return std::min(kChainChunk, bytes - i * kChainChunk); };
  for (size_t i = 0; i <= chunks; ++i) {
    Xfer xs[2];
    int m = 0;
    if (rel > 0 && i < chunks) xs[m++] = Xfer::recv(prev, recv + i * kChainChunk, chunk_len(i));
    if (rel < n - 1 && i > 0) xs[m++] = Xfer::send(next, src + (i - 1) * kChainChunk, chunk_len(i - 1));
    run(call, std::span<Xfer>(xs, m));
  }
}

void reduce_tree(Call& call, const char* send, char* recv, size_t bytes, int root) {
  qcclComm& c = call.comm;
  int n = c.nranks, rel = (c.rank - root + n) % n;
  auto rank_of = [&](int rl) { return (rl + root) % n; };
  // The accumulator: the root's output, else scratch (a leaf sends its input directly).
  char* acc = rel == 0 ? recv : nullptr;
  const char* cur = send;
  for (int mask = 1; mask < n; mask *= 2) {
    if (rel & mask) {
      Xfer x[1] = {Xfer::send(rank_of(rel - mask), cur, bytes)};
      run(call, x);
      return;
    }
    if (rel + mask >= n) continue;
    if (!acc) acc = scratch(c, bytes);
    // op(lower rank's partial, higher rank's partial): a fixed order.
    Xfer x[1] = {Xfer::recv_reduce(rank_of(rel + mask), acc, cur, bytes, false)};
    run(call, x);
    cur = acc;
  }
  // Only the root gets here.
  if (cur != recv) std::memcpy(recv, cur, bytes);
}

void reduce_chain(Call& call, const char* send, char* recv, size_t bytes, int root) {
  qcclComm& c = call.comm;
  // Along the ring from the root (Note [ring order]): data flows from rel n-1
  // down to rel 0 (the root), so each element is reduced along one fixed order.
  RingOrder ro = ring_order(c);
  int n = c.nranks, rel = (ro.pos - position_of(ro, root) + n) % n;
  int up = ro.next(), down = ro.prev();
  bool has_up = rel < n - 1, has_down = rel > 0;
  const size_t kChainChunk = c.tuning.chain_chunk;  // agreed at init: every rank cuts alike
  size_t chunks = (bytes + kChainChunk - 1) / kChainChunk;
  if (chunks == 0) chunks = 1;
  auto chunk_len = [&](size_t i) { return std::min(kChainChunk, bytes - i * kChainChunk); };
  char* tmp = has_up && has_down ? scratch(c, 2 * kChainChunk) : nullptr;
  auto out = [&](size_t i) -> char* {
    return rel == 0 ? recv + i * kChainChunk : tmp + (i % 2) * kChainChunk;
  };
  for (size_t i = 0; i <= chunks; ++i) {
    Xfer xs[2];
    int m = 0;
    if (has_up && i < chunks)
      xs[m++] = Xfer::recv_reduce(up, out(i), send + i * kChainChunk, chunk_len(i), false);
    if (has_down && i > 0) {
      const char* src = has_up ? out(i - 1) : send + (i - 1) * kChainChunk;
      xs[m++] = Xfer::send(down, src, chunk_len(i - 1));
    }
    run(call, std::span<Xfer>(xs, m));
  }
  if (rel == 0 && !has_up && send != recv) std::memcpy(recv, send, bytes);
}

}  // namespace

void broadcast(qcclComm& c, const void* send, void* recv, size_t count, qcclDataType_t dt, int root) {
  size_t bytes = count * dtype_size(dt);
  Algo a = choose_for(c, Coll::kBroadcast, bytes);
  Call call(c, "broadcast", MsgKind::kBroadcast, bytes, algo_name(a), root);
  call.dtype = dt;
  QCCL_INFO("COLL", "broadcast #{} count {} {} root {} nranks {} algo {}", call.seq, count,
            dtype_name(dt), root, c.nranks, algo_name(a));
  auto* s = static_cast<const char*>(send);
  auto* r = static_cast<char*>(recv);
  if (c.rank == root && s != r && bytes) std::memcpy(r, s, bytes);
  if (c.nranks > 1) {
    if (a == Algo::kTree) bcast_tree(call, s, r, bytes, root);
    else bcast_chain(call, s, r, bytes, root);
  }
  finish(call);
}

void reduce_to_root(qcclComm& c, const void* send, void* recv, size_t count, qcclDataType_t dt,
                    qcclRedOp_t op, int root) {
  size_t bytes = count * dtype_size(dt);
  Algo a = choose_for(c, Coll::kReduce, bytes);
  Call call(c, "reduce", MsgKind::kReduce, bytes, algo_name(a), root);
  call.dtype = dt;
  call.op = op;
  QCCL_INFO("COLL", "reduce #{} count {} {} {} root {} nranks {} algo {}", call.seq, count,
            dtype_name(dt), op_name(op), root, c.nranks, algo_name(a));
  auto* s = static_cast<const char*>(send);
  auto* r = static_cast<char*>(recv);
  if (c.nranks == 1) {
    if (s != r && bytes) std::memcpy(r, s, bytes);
  } else if (a == Algo::kTree) {
    reduce_tree(call, s, r, bytes, root);
  } else {
    reduce_chain(call, s, r, bytes, root);
  }
  if (c.rank == root && op == qcclAvg) finish_avg(r, count, dt, c.nranks);
  finish(call);
}

}  // namespace qccl
