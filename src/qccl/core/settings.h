// The settings shared by several qccl files, each environment variable
// declared once (settings.cc). Per-communicator config overrides them.
#pragma once

#include <string>

namespace qccl {

double default_timeout_s();           // QCCL_TIMEOUT_S
std::string default_transport();      // QCCL_TRANSPORT: auto|shm|tcp
std::string forced_algo();            // QCCL_ALGO: auto or a name in algorithms() (cost_model.h)
int flight_recorder_entries();        // QCCL_FR_ENTRIES
std::string flight_recorder_dir();    // QCCL_FR_DUMP_DIR
bool cma_enabled();                   // QCCL_CMA (read when a communicator is created)

}  // namespace qccl
