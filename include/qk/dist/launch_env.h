// Where this process sits in a distributed job, read from the environment
// that started it: `qk run` (RANK, WORLD_SIZE, LOCAL_RANK, ...), Open MPI's
// mpirun (OMPI_COMM_WORLD_*), a PMI launcher such as MPICH's or srun --mpi
// (PMI_RANK, PMI_SIZE), or Slurm's srun (SLURM_PROCID, SLURM_NTASKS,
// SLURM_LOCALID), or any other launcher that sets QK_RANK and QK_WORLD_SIZE.
// The first that is set, in the order RANK, OMPI, QK_RANK, PMI, SLURM,
// wins; none: one process.
//
//   auto e = qk::dist::launch_env();
//   if (e.rank == 0) ...;   // e.source says which variables were read
#pragma once

#include <cstdint>
#include <string>

#include "qccl.h"

namespace qk::dist {

struct LaunchEnv {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  std::string master_addr;   // MASTER_ADDR (empty: not set)
  int master_port = 0;       // MASTER_PORT (0: not set)
  std::string store_token;   // QK_STORE_TOKEN
  bool under_qk_run = false; // QK_RUN=1: the launcher hosts the store
  int restart_count = 0;     // QK_RESTART_COUNT
  std::string source;        // "qk run", "RANK", "OMPI", "QK_RANK", "PMI", "SLURM" or "none"
};

// Reads (and checks) the variables now; throws ValueError naming a bad one.
LaunchEnv launch_env();

// For programs that make their own qccl communicator (`qk perf`): a
// qcclUniqueId shared by the ranks of `e` through the store at
// MASTER_ADDR:MASTER_PORT (rank 0 hosts one there, for the rest of the
// process, unless under `qk run`). Every rank calls it with the same prefix;
// a rank that never arrives gives a TimeoutError naming it.
qcclUniqueId rendezvous_unique_id(const LaunchEnv& e, const std::string& prefix, double timeout_s);

}  // namespace qk::dist
