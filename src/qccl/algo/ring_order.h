// The order of the flat ring that the ring algorithms (all-reduce, all-gather,
// reduce-scatter, the broadcast/reduce chains) and the cost probe run along:
// the communicator's topology-aware ring (CommTopo::ring: host by host, each
// host along its device-aware ring), or rank order when no topology is
// attached.
//
//   RingOrder ro = ring_order(comm);
//   Xfer xs[2] = {Xfer::send(ro.next(), ...), Xfer::recv(ro.prev(), ...)};
//   int r = ro.rank_at(ro.pos - k);   // the rank k places before us
//
// Note [ring order]: a ring algorithm works in ring positions, never in ranks:
// position p sends to position p+1 and receives from p-1. Data whose place
// does not depend on a rank (the segments of an all-reduce) is indexed by
// position; data that belongs to a rank (a block of all-gather or
// reduce-scatter) is indexed by that rank, rank_at(position). The segment (or
// block) that position P ends up owning is reduced along the ring starting
// after P: x[rank_at(P+1)] op x[rank_at(P+2)] op ... op x[rank_at(P)], a left
// fold (f16/bf16: each op in f32, rounded once), then copied to every rank.
// With rank order this is the order qccl always used; ring_reference()
// computes it serially for the tests.
#pragma once

#include <algorithm>
#include <cstddef>
#include <vector>

#include "qccl.h"

struct qcclComm;

namespace qccl {

struct RingOrder {
  const int* order = nullptr;  // nullptr: rank order
  int n = 1;
  int pos = 0;  // this rank's position
  int rank_at(int p) const {
    p = ((p % n) + n) % n;
    return order ? order[p] : p;
  }
  int next() const { return rank_at(pos + 1); }
  int prev() const { return rank_at(pos - 1); }
};

// The communicator's ring; rank order when it has no topology.
RingOrder ring_order(const qcclComm& c);

// Segment i of n over count elements: sizes differ by at most one element.
struct Segment {
  size_t off, len;  // in elements
};
inline Segment segment(size_t count, int n, int i) {
  size_t base = count / n, rem = count % n, ui = static_cast<size_t>(i);
  return {ui * base + std::min(ui, rem), base + (ui < rem ? 1 : 0)};
}

// The flat ring all-reduce's result of Note [ring order], serially: inputs[r]
// is rank r's buffer, ring the order (ranks); for tests.
std::vector<char> ring_reference(const std::vector<std::vector<char>>& inputs, size_t count,
                                 qcclDataType_t dt, qcclRedOp_t op, const std::vector<int>& ring);

}  // namespace qccl
