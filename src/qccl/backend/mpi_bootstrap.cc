// Bootstrapping qccl from an MPI job: detecting the launcher, initialising
// MPI, and giving rank 0's unique id to every rank with MPI_Bcast.
#include <cstdlib>
#include <mutex>
#include <string>

#include "backend/mpi.h"
#include "core/debug.h"
#include "core/errors.h"
#include "qk/base/launch_vars.h"

namespace qk::qccl {

namespace {

void check_mpi(int rc, const char* call) {
  if (rc == MPI_SUCCESS) return;
  char msg[MPI_MAX_ERROR_STRING] = {0};
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  QK_THROW(qk::IoError, call, " failed: ", msg);
}

void finalize_at_exit() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

}  // namespace

bool launched_by_mpi() {
  namespace v = qk::env::launch;
  return (v::ompi_rank.lookup() && v::ompi_size.lookup()) || (v::pmi_rank.lookup() && v::pmi_size.lookup()) ||
         (v::slurm_rank.lookup() && v::slurm_size.lookup());
}

void ensure_mpi_initialized() {
  static std::mutex mu;
  std::lock_guard<std::mutex> g(mu);
  int inited = 0, finalized = 0;
  MPI_Initialized(&inited);
  MPI_Finalized(&finalized);
  QK_CHECK_AS(::qccl::UsageError, !finalized, "MPI was already finalised: create qccl's MPI "
              "communicators between MPI_Init and MPI_Finalize");
  int provided = 0;
  if (inited) {
    MPI_Query_thread(&provided);
  } else {
    QK_CHECK_AS(::qccl::UsageError, launched_by_mpi(),
                "qccl's MPI bootstrap and QCCL_BACKEND=mpi need MPI ranks, but this process was "
                "not started by mpirun or srun (no OMPI_COMM_WORLD_RANK, PMI_RANK or SLURM_PROCID); "
                "run it under mpirun, or unset QCCL_BACKEND");
    check_mpi(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided), "MPI_Init_thread");
    std::atexit(finalize_at_exit);
    QCCL_INFO("INIT", "MPI initialised by qccl (thread level {}); MPI_Finalize runs at exit", provided);
  }
  if (provided < MPI_THREAD_MULTIPLE)
    QCCL_INFO("INIT", "MPI thread level {} (< MPI_THREAD_MULTIPLE): call qccl's MPI communicators "
              "from one thread at a time", provided);
}

qcclUniqueId unique_id_from_mpi(MPI_Comm comm) {
  ensure_mpi_initialized();
  int rank = 0;
  check_mpi(MPI_Comm_rank(comm, &rank), "MPI_Comm_rank");
  // Rank 0 broadcasts even when it failed, so the others fail with it instead of waiting.
  struct {
    qcclUniqueId id;
    int32_t ok;
  } msg{};
  std::string why;
  if (rank == 0) {
    msg.ok = qcclGetUniqueId(&msg.id) == qcclSuccess;
    if (!msg.ok) why = qcclGetLastError(nullptr);
  }
  check_mpi(MPI_Bcast(&msg, sizeof msg, MPI_BYTE, 0, comm), "MPI_Bcast of the qccl unique id");
  QK_CHECK_AS(qk::IoError, msg.ok, "qcclGetUniqueId failed on MPI rank 0",
              rank == 0 ? ": " + why : std::string(" (see its log)"));
  qcclUniqueId id = msg.id;
  return id;
}

qcclComm_t init_from_mpi(MPI_Comm comm, const qcclConfig_t* config) {
  qcclUniqueId id = unique_id_from_mpi(comm);
  int rank = 0, size = 0;
  check_mpi(MPI_Comm_rank(comm, &rank), "MPI_Comm_rank");
  check_mpi(MPI_Comm_size(comm, &size), "MPI_Comm_size");
  qcclConfig_t cfg = QCCL_CONFIG_INITIALIZER;
  if (config) cfg = *config;
  qcclComm_t c = nullptr;
  qcclResult_t rc = qcclCommInitRankConfig(&c, size, id, rank, &cfg);
  if (rc != qcclSuccess)
    QK_THROW(qk::IoError, "qk::qccl::init_from_mpi on MPI rank ", rank, " of ", size, ": ",
             qcclGetErrorString(rc), ": ", qcclGetLastError(nullptr));
  return c;
}

}  // namespace qk::qccl
