// The variables launchers set in each process they start, declared once (in
// the registry of qk/base/env.h) for every layer that reads them, so
// `qk check --env` lists them and they are read the same way everywhere:
//
//   if (auto r = qk::env::launch::rank.lookup()) ...   // RANK, or nullopt
//
// torchrun and `qk run`: RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
// MASTER_ADDR, MASTER_PORT; `qk run` also QK_RUN, QK_RESTART_COUNT and
// QK_STORE_TOKEN. Open MPI: OMPI_COMM_WORLD_*; MPICH/Intel MPI (PMI): PMI_*,
// MPI_LOCALRANKID, MPI_LOCALNRANKS; Slurm: SLURM_*. Any other launcher (a
// script): QK_RANK, QK_WORLD_SIZE.
#pragma once

#include "qk/base/env.h"

namespace qk::env::launch {

QK_ENV_OPTIONAL_INT(rank, "RANK", "This process's rank in the job (torchrun, qk run).");
QK_ENV_OPTIONAL_INT(world_size, "WORLD_SIZE", "Processes in the job (torchrun, qk run).");
QK_ENV_OPTIONAL_INT(local_rank, "LOCAL_RANK", "This process's rank on its host (torchrun, qk run).");
QK_ENV_OPTIONAL_INT(local_world_size, "LOCAL_WORLD_SIZE", "Processes on this host (torchrun, qk run).");
QK_ENV_OPTIONAL_STRING(master_addr, "MASTER_ADDR",
                       "Host of the rendezvous store (rank 0 hosts one there unless qk run does).");
QK_ENV_OPTIONAL_INT(master_port, "MASTER_PORT", "Port of the rendezvous store, 1..65535.");
QK_ENV_OPTIONAL_STRING(run, "QK_RUN", "1 in the workers `qk run` starts (its agent hosts the store).");
QK_ENV_OPTIONAL_INT(restart_count, "QK_RESTART_COUNT",
                    "How many times `qk run` has restarted the group (0 on the first attempt).");
QK_ENV_OPTIONAL_STRING(store_token, "QK_STORE_TOKEN",
                       "Shared secret of the rendezvous store; set the same on every node for "
                       "multi-node `qk run` (one node: a random one per job).");
QK_ENV_OPTIONAL_INT(ompi_rank, "OMPI_COMM_WORLD_RANK", "Rank under Open MPI's mpirun.");
QK_ENV_OPTIONAL_INT(ompi_size, "OMPI_COMM_WORLD_SIZE", "Job size under Open MPI's mpirun.");
QK_ENV_OPTIONAL_INT(ompi_local_rank, "OMPI_COMM_WORLD_LOCAL_RANK", "Rank on this host under Open MPI.");
QK_ENV_OPTIONAL_INT(ompi_local_size, "OMPI_COMM_WORLD_LOCAL_SIZE", "Processes on this host under Open MPI.");
QK_ENV_OPTIONAL_INT(pmi_rank, "PMI_RANK", "Rank under a PMI launcher (MPICH, Intel MPI).");
QK_ENV_OPTIONAL_INT(pmi_size, "PMI_SIZE", "Job size under a PMI launcher (MPICH, Intel MPI).");
QK_ENV_OPTIONAL_INT(pmi_local_rank, "MPI_LOCALRANKID", "Rank on this host (MPICH, Intel MPI).");
QK_ENV_OPTIONAL_INT(pmi_local_size, "MPI_LOCALNRANKS", "Processes on this host (MPICH, Intel MPI).");
QK_ENV_OPTIONAL_INT(slurm_rank, "SLURM_PROCID", "Rank under srun.");
QK_ENV_OPTIONAL_INT(slurm_size, "SLURM_NTASKS", "Job size under srun.");
QK_ENV_OPTIONAL_INT(slurm_local_rank, "SLURM_LOCALID", "Rank on this host under srun.");
QK_ENV_OPTIONAL_INT(qk_rank, "QK_RANK",
                    "This process's rank, with QK_WORLD_SIZE, for launchers that set neither RANK nor MPI's "
                    "variables.");
QK_ENV_OPTIONAL_INT(qk_world_size, "QK_WORLD_SIZE", "Processes in the job, with QK_RANK.");

}  // namespace qk::env::launch
