// The flat ring's order; see ring_order.h and Note [ring order].
#include "algo/ring_order.h"

#include <algorithm>
#include <cstring>

#include "comm.h"
#include "core/reduce.h"
#include "topo/comm_topo.h"
#include "qk/base/error.h"

namespace qccl {

RingOrder ring_order(const qcclComm& c) {
  RingOrder ro;
  ro.n = c.nranks;
  ro.pos = c.rank;
  if (!c.topo) return ro;
  const std::vector<int>& ring = c.topo->ring;
  QK_INTERNAL_ASSERT(static_cast<int>(ring.size()) == c.nranks, "ring of ", ring.size(),
                     " ranks on a communicator of ", c.nranks);
  auto it = std::find(ring.begin(), ring.end(), c.rank);
  QK_INTERNAL_ASSERT(it != ring.end(), "rank ", c.rank, " is not on the ring");
  ro.order = ring.data();
  ro.pos = static_cast<int>(it - ring.begin());
  return ro;
}

std::vector<char> ring_reference(const std::vector<std::vector<char>>& inputs, size_t count,
                                 qcclDataType_t dt, qcclRedOp_t op, const std::vector<int>& ring) {
  size_t es = dtype_size(dt);
  int n = static_cast<int>(ring.size());
  RingOrder ro{ring.data(), n, 0};
  std::vector<char> result(count * es);
  for (int s = 0; s < n; ++s) {
    // Segment s ends at position s-1, so its fold starts at position s.
    Segment seg = segment(count, n, s);
    char* acc = result.data() + seg.off * es;
    std::memcpy(acc, inputs[ro.rank_at(s)].data() + seg.off * es, seg.len * es);
    for (int k = 1; k < n; ++k)
      reduce(acc, acc, inputs[ro.rank_at(s + k)].data() + seg.off * es, seg.len, dt, op);
    if (op == qcclAvg) finish_avg(acc, seg.len, dt, n);
  }
  return result;
}

}  // namespace qccl
