// The collectives, as algorithms over the engine's transfers (gloo style:
// each is a function that only moves and reduces; arguments are validated by
// the C API before they get here). All are blocking and throw on failure.
//
// Note [bit-identical results]: every algorithm either reduces each element
// along one fixed order and then copies the result to all ranks (ring,
// chain, hierarchical, direct), has both partners of an exchange compute
// op(lower rank's value, higher rank's value) (recursive doubling), or has
// every rank reduce all inputs in rank order (all pairs), so all ranks end
// with the same bits, including for floating point, +0/-0 and NaN payloads.
// The ring and chain orders follow the communicator's topology-aware ring (Note [ring order] in ring_order.h), rank 0's, which
// every rank takes at init; so a different ring (another QCCL_TOPO_FILE,
// other hosts) may change the last bits of an inexact float sum from one job
// to the next, never between the ranks of one.
#pragma once

#include <cstddef>
#include <span>

#include "algo/cost_model.h"
#include "comm.h"

namespace qccl {

void all_reduce(qcclComm& c, const void* send, void* recv, size_t count, qcclDataType_t dt,
                qcclRedOp_t op);
void broadcast(qcclComm& c, const void* send, void* recv, size_t count, qcclDataType_t dt, int root);
void reduce_to_root(qcclComm& c, const void* send, void* recv, size_t count, qcclDataType_t dt,
                    qcclRedOp_t op, int root);
void all_gather(qcclComm& c, const void* send, void* recv, size_t sendcount, qcclDataType_t dt);
void reduce_scatter(qcclComm& c, const void* send, void* recv, size_t recvcount, qcclDataType_t dt,
                    qcclRedOp_t op);
void all_to_all(qcclComm& c, const void* send, void* recv, size_t count, qcclDataType_t dt);

// qcclAllToAllv's blocks: per rank, counts and displacements in elements
// (the C API has checked them: blocks in range, no overlaps, own counts equal).
struct VBlocks {
  const size_t* send_counts;
  const size_t* send_displs;
  const size_t* recv_counts;
  const size_t* recv_displs;
};
void all_to_all_v(qcclComm& c, const void* send, void* recv, const VBlocks& v, qcclDataType_t dt);

struct P2POp {
  bool is_send;
  int peer;
  void* buf;
  size_t bytes;
};
// Runs the point-to-point operations together (a group), in order per peer.
void point_to_point(qcclComm& c, std::span<const P2POp> ops);

// choose() for this communicator's cost model and QCCL_ALGO, remembered per
// collective for the last size asked.
Algo choose_for(qcclComm& c, Coll coll, size_t bytes);

// A per-communicator scratch buffer of at least `bytes` (reused across calls).
char* scratch(qcclComm& c, size_t bytes);

}  // namespace qccl
