// Direct all-reduce on shared buffers (qcclMemAlloc, transport/shared_mem.h):
// when every rank's send and receive buffers are shared allocations that the
// others can map, rank r reduces the r-th 1/n of the buffer straight from
// every rank's send buffer and stores the result straight into every rank's
// receive buffer. Each rank reads and writes S bytes once, against 5(n-1)/n S
// for the ring through the shared-memory rings, and there are no system calls.
//
//   if (direct_candidate(c, bytes, forced) && direct_all_reduce(call, send, recv, count, es)) done;
//   else ring(...);   // some rank's buffers are not shared: nothing was written
//
// Ranks learn whether all buffers are shared by exchanging a descriptor (two
// allocation references and flags) at the start of every candidate call; a
// completion exchange at the end tells each rank that the others have stopped
// reading its send buffer and writing its receive buffer. Each element is
// reduced by one rank, in rank order, so all ranks get the same bits.
#pragma once

#include <cstddef>

#include "engine.h"

namespace qccl {

// Whether this all-reduce exchanges descriptors: the same answer on every rank
// (it depends on the size, the environment and the hosts, not on the buffers).
bool direct_candidate(const qcclComm& c, size_t bytes, bool forced);

// Runs the exchange; when every rank's buffers are shared and mappable, the
// direct all-reduce (true). false: nothing was written, run another algorithm.
bool direct_all_reduce(Call& call, const char* send, char* recv, size_t count, size_t es);

}  // namespace qccl
