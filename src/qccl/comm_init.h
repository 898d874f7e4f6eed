// Creating a communicator (bootstrap + connections); used by the C API.
#pragma once

#include <memory>

#include "comm.h"

namespace qccl {

// Blocks until every rank joined and connected, or throws (deadline, refusal).
std::unique_ptr<qcclComm> init_comm(int nranks, const qcclUniqueId& id, int rank,
                                    const qcclConfig_t* cfg);

}  // namespace qccl
