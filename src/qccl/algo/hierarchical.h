// Hierarchical all-reduce for ranks on several hosts, on the engine's
// transfers over the communicator's own connections:
//   1. inside each host, a ring reduce-scatter along the host's ring, which
//      leaves the rank with local index i holding block i (1/L of the data)
//      reduced over its host;
//   2. the ranks with local index i, one per host, all-reduce block i with a
//      ring across hosts (reduce-scatter, then all-gather);
//   3. inside each host, a ring all-gather of the blocks.
// Only 1/L of the data crosses the network from each rank, and each stage
// runs on the links it is best for (shared memory, then TCP). Selected with
// QCCL_ALGO=hierarchical, or by the cost model when ranks span several hosts
// with the same number of ranks each; otherwise the flat algorithms run.
//
// Note [hierarchical reduction order]: every element is reduced exactly once,
// along a fixed order, and the result is copied to every rank, so all ranks
// get the same bits (Note [bit-identical results] in collectives.h). For an
// element of block b, sub-block j (block b split in H parts):
//   partial(h) = x[R_h[p+1]] op x[R_h[p+2]] op ... op x[R_h[p]]   (left fold)
// over host h's ring R_h, starting after the position p of local index b, and
//   result = partial(H_j) op partial(H_j+1) op ... op partial(H_j-1)
// over hosts starting at host j (f16/bf16: each op in f32, rounded once;
// avg: the sum, divided by nranks once at the end). This is not the flat
// ring's order, so for inexact float data the two differ in the last bits,
// as NCCL's ring and tree do. For exact data (integers, min/max, or values
// whose sums are exact, as the tests and `qk perf -c 1` use) both equal the
// serial reference bit for bit. hierarchical_reference() computes this order
// serially; the tests compare the algorithm with it on random floats.
#pragma once

#include <cstddef>
#include <vector>

#include "qccl.h"
#include "comm.h"

namespace qccl {

// True when the communicator's plan allows it (several hosts, equal counts).
bool hierarchical_usable(const qcclComm& c);

void hierarchical_all_reduce(qcclComm& c, const void* send, void* recv, size_t count,
                             qcclDataType_t dt, qcclRedOp_t op);

// The result of Note [hierarchical reduction order], serially: inputs[r] is
// rank r's buffer, local_rings[h] host h's ring (ranks), hosts ordered as in
// the plan and each host's local indices ascending by rank.
std::vector<char> hierarchical_reference(const std::vector<std::vector<char>>& inputs, size_t count,
                                         qcclDataType_t dt, qcclRedOp_t op,
                                         const std::vector<std::vector<int>>& local_rings);

}  // namespace qccl
