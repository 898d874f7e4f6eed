// Direct all-reduce: rank r reduces the r-th 1/n of the buffer straight
// from every rank's send buffer and stores the result straight into every
// rank's receive buffer. A peer's buffers are reached mapped where they are
// qcclMemAlloc allocations (plain loads and stores, no system calls), or else
// by single copy (transport/cma.h: process_vm_readv of the operands into a
// cache-sized piece, process_vm_writev of the results), which works on any
// memory, malloc'd included. Each rank reads and writes S bytes once, against
// 5(n-1)/n S for the ring through the shared-memory rings, in two rounds of
// messages instead of 2(n-1).
//
//   if (direct_candidate(c) && direct_all_reduce(call, send, recv, count, es, allow_cma)) done;
//   else ring(...);   // nothing was written
//
// Ranks exchange a descriptor (addresses, allocation references, flags) at
// the start of every call; a completion exchange at the end tells each rank
// that the others have stopped reading its send buffer and writing its
// receive buffer. Each element is reduced by one rank, in rank order, so all
// ranks get the same bits.
#pragma once

#include <cstddef>

#include "engine.h"

namespace qccl {

// Whether a direct all-reduce may run on this communicator (QCCL_DIRECT, all
// ranks on one host): the same answer on every rank.
bool direct_candidate(const qcclComm& c);

// Runs the exchange; then the direct all-reduce (true) when every rank's
// buffers are shared and mappable, or, with allow_cma, when every rank can
// single-copy to every other. false: nothing was written, run another algorithm.
bool direct_all_reduce(Call& call, const char* send, char* recv, size_t count, size_t es,
                       bool allow_cma);

}  // namespace qccl
