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
              "doubling), pairs (all pairs), direct (all-reduce between qcclMemAlloc buffers), "
              "hierarchical (across hosts), tree or chain (broadcast and reduce); a forced algorithm "
              "that does not implement a collective leaves that one to the cost model.");
QK_ENV_INT(env_fr_entries, "QCCL_FR_ENTRIES", 64,
           "Operations kept per communicator by the flight recorder.");
QK_ENV_STRING(env_fr_dir, "QCCL_FR_DUMP_DIR", "",
              "Directory the flight recorder writes qccl_fr_<comm>_rank<r>.txt to on error.");
QK_ENV_BOOL(env_cma, "QCCL_CMA", true,
            "Single-copy shared-memory receives with process_vm_readv for large messages.");
// 256 KiB: not measured against other thresholds.
QK_ENV_INT(env_cma_min, "QCCL_CMA_MIN_BYTES", 256 << 10,
           "Messages at least this large use single-copy CMA on shared memory.");
QK_ENV_DOUBLE(env_spin_us, "QCCL_SPIN_US", 0.0,
              "Microseconds a waiting rank spins before it starts yielding its core (default 0).");
}  // namespace

double default_timeout_s() { return env_timeout.get(); }
std::string default_transport() { return env_transport.get(); }
std::string forced_algo() { return env_algo.get(); }
int flight_recorder_entries() { return static_cast<int>(env_fr_entries.get()); }
std::string flight_recorder_dir() { return env_fr_dir.reload(); }  // read when used: only on errors
bool cma_enabled() { return env_cma.reload(); }
size_t cma_min_bytes() {
  int64_t v = env_cma_min.reload();
  QK_CHECK(v >= 0, "QCCL_CMA_MIN_BYTES: expected a byte count >= 0, got ", v);
  return static_cast<size_t>(v);
}

}  // namespace qccl

namespace qccl {
double spin_us() {
  // 0 by default: sched_yield returns at once when nothing else wants the
  // core, so yielding costs little on an idle host, while a pure spin holds
  // the core from the very peer we wait for on a loaded one (2 ranks on the
  // loaded 2-core VM: 0.9 us per 8-byte all-reduce with 0, 56-258 us with 50;
  // docs/benchmarks.md, "Waiting policy").
  double v = env_spin_us.reload();
  QK_CHECK(v >= 0, "QCCL_SPIN_US: expected microseconds >= 0, got ", v);
  return v;
}
}  // namespace qccl
