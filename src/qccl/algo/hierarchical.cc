// Hierarchical all-reduce; see hierarchical.h and Note [hierarchical reduction order].
#include "algo/hierarchical.h"

#include <algorithm>
#include <cstring>

#include "algo/cost_model.h"
#include "core/debug.h"
#include "core/reduce.h"
#include "engine.h"
#include "topo/comm_topo.h"

namespace qccl {

namespace {

// Part i of n over [0, count) elements: sizes differ by at most one.
struct Part {
  size_t off, len;
};
Part part(size_t count, int n, int i) {
  size_t base = count / n, rem = count % n, ui = static_cast<size_t>(i);
  return {ui * base + std::min(ui, rem), base + (ui < rem ? 1 : 0)};
}
int mod(int v, int n) { return ((v % n) + n) % n; }

// Byte range of block b (of L) and sub-block j (of H) of it.
struct Blocks {
  size_t count, es;
  int L, H;
  Part block(int b) const { return part(count, L, b); }
  Part sub(int b, int j) const {
    Part B = block(b), s = part(B.len, H, j);
    return {B.off + s.off, s.len};
  }
};

}  // namespace

bool hierarchical_usable(const qcclComm& c) { return c.topo && c.topo->plan.usable; }

void hierarchical_all_reduce(qcclComm& c, const void* send, void* recv, size_t count,
                             qcclDataType_t dt, qcclRedOp_t op) {
  const topo::CommTopo& t = *c.topo;
  size_t es = dtype_size(dt), bytes = count * es;
  Call call(c, "allreduce", MsgKind::kAllReduce, bytes, "hierarchical");
  call.dtype = dt;
  call.op = op;
  QCCL_INFO("COLL", "allreduce #{} count {} {} {} ({} bytes) nranks {} algo hierarchical ({} hosts "
            "x {} ranks, predicted {:.1f} us)",
            call.seq, count, dtype_name(dt), op_name(op), bytes, c.nranks, t.nhosts,
            t.host_ranks[0].size(), predict_us(c.cost, Coll::kAllReduce, Algo::kHierarchical, c.nranks, bytes));
  const char* in = static_cast<const char*>(send);
  char* out = static_cast<char*>(recv);
  int me = c.rank, host = t.host_of[me];
  const std::vector<int>& ring = t.plan.local_rings[host];
  const std::vector<int>& group = t.plan.groups[t.local_index[me]];
  Blocks bl{count, es, static_cast<int>(ring.size()), t.nhosts};
  int L = bl.L, H = bl.H;
  int p = static_cast<int>(std::find(ring.begin(), ring.end(), me) - ring.begin());
  int next = ring[mod(p + 1, L)], prev = ring[mod(p - 1, L)];
  // Ring slot s carries the block of the rank before it, so that the rank at
  // position p ends the reduce-scatter holding slot p+1: its own block.
  auto slot_block = [&](int s) { return t.local_index[ring[mod(s - 1, L)]]; };
  auto at = [&](const char* base, Part x) { return base + x.off * es; };
  auto atw = [&](char* base, Part x) { return base + x.off * es; };

  // 1. Reduce-scatter inside the host.
  if (L == 1 && in != out) std::memcpy(out, in, bytes);
  for (int k = 0; k < L - 1; ++k) {
    Part s = bl.block(slot_block(mod(p - k, L))), q = bl.block(slot_block(mod(p - k - 1, L)));
    Xfer xs[2] = {Xfer::send(next, at(k == 0 ? in : out, s), s.len * es),
                  Xfer::recv_reduce(prev, atw(out, q), at(in, q), q.len * es, true)};
    run(call, xs);
  }
  // 2. All-reduce of our block across hosts: ring reduce-scatter + all-gather.
  int b = t.local_index[me], hp = host;  // our place in the group is our host number
  int gnext = group[mod(hp + 1, H)], gprev = group[mod(hp - 1, H)];
  for (int k = 0; k < H - 1; ++k) {
    Part s = bl.sub(b, mod(hp - k, H)), q = bl.sub(b, mod(hp - k - 1, H));
    Xfer xs[2] = {Xfer::send(gnext, at(out, s), s.len * es),
                  Xfer::recv_reduce(gprev, atw(out, q), at(out, q), q.len * es, true)};
    run(call, xs);
  }
  Part own = bl.sub(b, mod(hp + 1, H));
  if (op == qcclAvg) finish_avg(atw(out, own), own.len, dt, c.nranks);
  for (int k = 0; k < H - 1; ++k) {
    Part s = bl.sub(b, mod(hp + 1 - k, H)), q = bl.sub(b, mod(hp - k, H));
    Xfer xs[2] = {Xfer::send(gnext, at(out, s), s.len * es), Xfer::recv(gprev, atw(out, q), q.len * es)};
    run(call, xs);
  }
  // 3. All-gather inside the host: position p starts with slot p+1.
  for (int k = 0; k < L - 1; ++k) {
    Part s = bl.block(slot_block(mod(p + 1 - k, L))), q = bl.block(slot_block(mod(p - k, L)));
    Xfer xs[2] = {Xfer::send(next, at(out, s), s.len * es), Xfer::recv(prev, atw(out, q), q.len * es)};
    run(call, xs);
  }
  finish(call);
}

std::vector<char> hierarchical_reference(const std::vector<std::vector<char>>& inputs, size_t count,
                                         qcclDataType_t dt, qcclRedOp_t op,
                                         const std::vector<std::vector<int>>& local_rings) {
  size_t es = dtype_size(dt);
  int H = static_cast<int>(local_rings.size()), L = static_cast<int>(local_rings[0].size());
  int n = H * L;
  Blocks bl{count, es, L, H};
  std::vector<char> result(count * es), acc(es), part_h(es);
  for (int b = 0; b < L; ++b)
    for (int j = 0; j < H; ++j) {
      Part sub = bl.sub(b, j);
      for (size_t e = sub.off; e < sub.off + sub.len; ++e) {
        for (int hk = 0; hk < H; ++hk) {
          int h = (j + hk) % H;
          // Local index b of host h is its b-th lowest rank.
          std::vector<int> sorted = local_rings[h];
          std::sort(sorted.begin(), sorted.end());
          const auto& R = local_rings[h];
          int p = static_cast<int>(std::find(R.begin(), R.end(), sorted[b]) - R.begin());
          for (int k = 0; k < L; ++k) {
            const char* x = inputs[R[(p + 1 + k) % L]].data() + e * es;
            if (k == 0) std::memcpy(part_h.data(), x, es);
            else reduce(part_h.data(), part_h.data(), x, 1, dt, op);
          }
          if (hk == 0) std::memcpy(acc.data(), part_h.data(), es);
          else reduce(acc.data(), acc.data(), part_h.data(), 1, dt, op);
        }
        if (op == qcclAvg) finish_avg(acc.data(), 1, dt, n);
        std::memcpy(result.data() + e * es, acc.data(), es);
      }
    }
  return result;
}

}  // namespace qccl
