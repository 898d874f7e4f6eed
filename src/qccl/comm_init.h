// Creating a communicator (bootstrap + connections); used by the C API.
#pragma once

#include <memory>

#include "comm.h"

namespace qccl {

// Blocks until every rank joined and connected, or throws (deadline, refusal).
std::unique_ptr<qcclComm> init_comm(int nranks, const qcclUniqueId& id, int rank,
                                    const qcclConfig_t* cfg);

// Puts c.tuning's four measured sizes (algo/tuning.h) to use: the cost
// model's chain, the shared-memory connections' slice, and forgets the cached
// algorithm choices. Every rank must set the same chain chunk.
void use_tuned_sizes(qcclComm& c);

}  // namespace qccl
