// All-gather and reduce-scatter on the topology-aware ring, all-to-all (equal
// and variable counts) as a pairwise exchange, and grouped point-to-point.
#include <cstring>
#include <vector>

#include "algo/collectives.h"
#include "algo/cost_model.h"
#include "algo/ring_order.h"
#include "core/debug.h"
#include "engine.h"

namespace qccl {

void all_gather(qcclComm& c, const void* send, void* recv, size_t sendcount, qcclDataType_t dt) {
  size_t blk = sendcount * dtype_size(dt);
  int n = c.nranks, r = c.rank;
  Call call(c, "allgather", MsgKind::kAllGather, blk * n, "ring");
  call.dtype = dt;
  QCCL_INFO("COLL", "allgather #{} sendcount {} {} nranks {} algo ring", call.seq, sendcount,
            dtype_name(dt), n);
  auto* out = static_cast<char*>(recv);
  if (static_cast<const char*>(send) != out + r * blk && blk)
    std::memmove(out + r * blk, send, blk);
  // Along the ring (Note [ring order]): step k passes on the block of the rank
  // k places before us and receives the one k+1 places before; blocks sit at
  // their rank's place in the output.
  RingOrder ro = ring_order(c);
  for (int k = 0; k < n - 1; ++k) {
    int s = ro.rank_at(ro.pos - k), q = ro.rank_at(ro.pos - k - 1);
    Xfer xs[2] = {Xfer::send(ro.next(), out + s * blk, blk), Xfer::recv(ro.prev(), out + q * blk, blk)};
    run(call, xs);
  }
  finish(call);
}

void reduce_scatter(qcclComm& c, const void* send, void* recv, size_t recvcount, qcclDataType_t dt,
                    qcclRedOp_t op) {
  size_t blk = recvcount * dtype_size(dt);
  int n = c.nranks;
  Call call(c, "reducescatter", MsgKind::kReduceScatter, blk * n, "ring");
  call.dtype = dt;
  call.op = op;
  QCCL_INFO("COLL", "reducescatter #{} recvcount {} {} {} nranks {} algo ring", call.seq, recvcount,
            dtype_name(dt), op_name(op), n);
  auto* in = static_cast<const char*>(send);
  auto* out = static_cast<char*>(recv);
  if (n == 1) {
    if (in != out && blk) std::memmove(out, in, blk);
  } else {
    // Along the ring (Note [ring order]): step k sends the partial of the block
    // of the rank k+1 places before us and folds our input of the block of
    // the rank k+2 places before into the partial arriving from prev; the
    // last step lands our own block (the rank n places before) in recv.
    // Blocks are indexed by their rank.
    RingOrder ro = ring_order(c);
    char* tmp = scratch(c, 2 * blk);
    for (int k = 0; k < n - 1; ++k) {
      int s = ro.rank_at(ro.pos - 1 - k), q = ro.rank_at(ro.pos - 2 - k);
      const char* src = k == 0 ? in + s * blk : tmp + ((k - 1) % 2) * blk;
      char* dst = k == n - 2 ? out : tmp + (k % 2) * blk;
      Xfer xs[2] = {Xfer::send(ro.next(), src, blk),
                    Xfer::recv_reduce(ro.prev(), dst, in + q * blk, blk, true)};
      run(call, xs);
    }
  }
  if (op == qcclAvg) finish_avg(out, recvcount, dt, n);
  finish(call);
}

void all_to_all(qcclComm& c, const void* send, void* recv, size_t count, qcclDataType_t dt) {
  size_t blk = count * dtype_size(dt);
  int n = c.nranks, r = c.rank;
  Call call(c, "alltoall", MsgKind::kAllToAll, blk * n, "pairwise");
  call.dtype = dt;
  QCCL_INFO("COLL", "alltoall #{} count {} {} nranks {} algo pairwise", call.seq, count,
            dtype_name(dt), n);
  const char* in = static_cast<const char*>(send);
  char* out = static_cast<char*>(recv);
  if (in == out && n > 1) {  // in place: keep a copy of what we send
    char* copy = scratch(c, blk * n);
    std::memcpy(copy, in, blk * n);
    in = copy;
  }
  if (in + r * blk != out + r * blk && blk) std::memcpy(out + r * blk, in + r * blk, blk);
  std::vector<Xfer> xs;
  for (int s = 1; s < n; ++s) {
    int to = (r + s) % n, from = (r - s + n) % n;
    xs.push_back(Xfer::send(to, in + to * blk, blk));
    xs.push_back(Xfer::recv(from, out + from * blk, blk));
  }
  run(call, xs);
  finish(call);
}

void all_to_all_v(qcclComm& c, const void* send, void* recv, const VBlocks& v, qcclDataType_t dt) {
  const size_t es = dtype_size(dt);
  const int n = c.nranks, r = c.rank;
  size_t sent = 0;
  for (int j = 0; j < n; ++j) sent += v.send_counts[j] * es;
  Call call(c, "alltoallv", MsgKind::kAllToAllv, sent, "pairwise");
  call.dtype = dt;
  QCCL_INFO("COLL", "alltoallv #{} sends {} {} in all, nranks {} algo pairwise", call.seq, sent / es,
            dtype_name(dt), n);
  // An empty block may sit in a NULL buffer: no offset is applied to it.
  auto send_blk = [&](int j) {
    return v.send_counts[j] ? static_cast<const char*>(send) + v.send_displs[j] * es : nullptr;
  };
  auto recv_blk = [&](int j) {
    return v.recv_counts[j] ? static_cast<char*>(recv) + v.recv_displs[j] * es : nullptr;
  };
  if (v.send_counts[r]) std::memcpy(recv_blk(r), send_blk(r), v.send_counts[r] * es);
  // Pairwise order: step s sends to rank r+s and receives from rank r-s; all
  // steps are in flight together, as in all_to_all (the engine moves whichever
  // peer is ready). Every pair exchanges a message, empty ones too, so counts
  // that differ between peers fail the receiver's size check (engine.h)
  // instead of leaving it waiting for a message that never comes.
  thread_local std::vector<Xfer> xs;
  xs.clear();
  for (int s = 1; s < n; ++s) {
    const int to = (r + s) % n, from = (r - s + n) % n;
    xs.push_back(Xfer::send(to, send_blk(to), v.send_counts[to] * es));
    xs.push_back(Xfer::recv(from, recv_blk(from), v.recv_counts[from] * es));
  }
  run(call, xs);
  finish(call);
}

void point_to_point(qcclComm& c, std::span<const P2POp> ops) {
  size_t bytes = 0;
  for (const auto& o : ops) bytes += o.bytes;
  Call call(c, ops.size() == 1 ? (ops[0].is_send ? "send" : "recv") : "p2p-group", MsgKind::kP2P,
            bytes, "p2p", ops.size() == 1 ? ops[0].peer : -1);
  std::vector<Xfer> xs;
  std::vector<const P2POp*> self_sends, self_recvs;
  for (const auto& o : ops) {
    if (o.peer == c.rank) {
      (o.is_send ? self_sends : self_recvs).push_back(&o);
      continue;
    }
    Xfer x = o.is_send ? Xfer::send(o.peer, o.buf, o.bytes) : Xfer::recv(o.peer, o.buf, o.bytes);
    x.seq = o.is_send ? c.p2p_send_seq[o.peer]++ : c.p2p_recv_seq[o.peer]++;
    QCCL_TRACE("P2P", "{} {} bytes {} rank {} (#{})", o.is_send ? "send" : "recv", o.bytes,
               o.is_send ? "to" : "from", o.peer, x.seq);
    xs.push_back(x);
  }
  QK_CHECK_AS(UsageError, self_sends.size() == self_recvs.size(), "a group has ",
              self_sends.size(), " sends to this rank itself but ", self_recvs.size(),
              " receives from itself; they must pair up");
  for (size_t i = 0; i < self_sends.size(); ++i) {
    QK_CHECK(self_sends[i]->bytes == self_recvs[i]->bytes, "self send of ", self_sends[i]->bytes,
             " bytes paired with a self receive of ", self_recvs[i]->bytes, " bytes");
    if (self_sends[i]->bytes) std::memmove(self_recvs[i]->buf, self_sends[i]->buf, self_sends[i]->bytes);
  }
  run(call, xs);
  finish(call);
}

}  // namespace qccl
