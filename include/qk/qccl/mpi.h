// qccl in an MPI job: detecting the launcher, and a communicator whose ranks
// are an MPI communicator's, with rank 0's qcclUniqueId given to the others
// by MPI_Bcast. Only where qianka was built with MPI (QK_HAVE_MPI; Debian's
// libopenmpi-dev, which scripts/setup.sh installs):
//
//   MPI_Init(&argc, &argv);
//   qcclComm_t comm = qk::qccl::init_from_mpi(MPI_COMM_WORLD);   // same ranks as MPI
//   qcclAllReduce(buf, buf, n, qcclFloat32, qcclSum, comm, NULL);
//   qcclCommDestroy(comm);
//   MPI_Finalize();
//
// With QCCL_BACKEND=mpi the collectives themselves then run on MPI too
// (docs/qccl.md).
#pragma once

#include <mpi.h>

#include "qccl.h"

namespace qk::qccl {

// True when a launcher started this process as an MPI rank: Open MPI's
// OMPI_COMM_WORLD_RANK/SIZE, PMI_RANK/SIZE (MPICH, Intel MPI) or Slurm's
// SLURM_PROCID/SLURM_NTASKS.
bool launched_by_mpi();

// Initialises MPI (MPI_THREAD_MULTIPLE, since the C++ layer calls from a
// progress thread) unless the program did; MPI_Finalize then runs at exit.
// Throws UsageError when this process is not an MPI rank (no launcher).
void ensure_mpi_initialized();

// Rank 0 of `comm` calls qcclGetUniqueId; MPI_Bcast gives the id to all.
qcclUniqueId unique_id_from_mpi(MPI_Comm comm);

// A qccl communicator over the ranks of `comm`, with the same rank numbers.
// Collective over `comm`. Throws qk exceptions (message from qcclGetLastError).
qcclComm_t init_from_mpi(MPI_Comm comm, const qcclConfig_t* config = nullptr);

}  // namespace qk::qccl
