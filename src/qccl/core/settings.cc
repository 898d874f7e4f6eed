#include "core/settings.h"

#include "qk/base/env.h"
#include "qk/base/error.h"

namespace qccl {

namespace {
QK_ENV_DOUBLE(env_timeout, "QCCL_TIMEOUT_S", 300.0,
              "Deadline in seconds of every qccl wait (init, collectives, p2p).");
QK_ENV_STRING(env_transport, "QCCL_TRANSPORT", "auto",
              "Transport between ranks: auto (shm on one host, tcp across), shm or tcp.");
QK_ENV_STRING(env_algo, "QCCL_ALGO", "auto",
              "Collective algorithm: auto (the cost model's choice per call), ring, rd (recursive "
              "doubling), pairs (all pairs), direct (all-reduce straight between the ranks' buffers: "
              "mapped where they are qcclMemAlloc ones, else by single copy), "
              "hierarchical (across hosts), tree or chain (broadcast and reduce); a forced algorithm "
              "that does not implement a collective leaves that one to the cost model.");
QK_ENV_INT(env_fr_entries, "QCCL_FR_ENTRIES", 64,
           "Operations kept per communicator by the flight recorder.");
QK_ENV_STRING(env_fr_dir, "QCCL_FR_DUMP_DIR", "",
              "Directory the flight recorder writes qccl_fr_<comm>_rank<r>.txt to on error.");
QK_ENV_BOOL(env_cma, "QCCL_CMA", true,
            "Single copy between the ranks of one host (process_vm_readv / process_vm_writev): large "
            "messages and the direct all-reduce on any buffers.");
}  // namespace

double default_timeout_s() { return env_timeout.get(); }
std::string default_transport() { return env_transport.get(); }
std::string forced_algo() { return env_algo.get(); }
int flight_recorder_entries() { return static_cast<int>(env_fr_entries.get()); }
std::string flight_recorder_dir() { return env_fr_dir.reload(); }  // read when used: only on errors
bool cma_enabled() { return env_cma.reload(); }
}  // namespace qccl

