// qccl on MPI: bootstrapping from an MPI job, and the MPI backend
// (QCCL_BACKEND=mpi) that runs every collective through Open MPI. Built only
// when CMake finds MPI (QK_HAVE_MPI); the rest of qccl never needs it.
//
// Bootstrap: under mpirun/srun, rank 0 of an MPI communicator creates the
// qcclUniqueId and MPI_Bcast gives it to the others:
//
//   MPI_Init(&argc, &argv);
//   qcclComm_t comm = qccl::init_from_mpi(MPI_COMM_WORLD);   // same ranks as MPI
//   qcclAllReduce(buf, buf, n, qcclFloat32, qcclSum, comm, NULL);
//   qcclCommDestroy(comm);
//   MPI_Finalize();
//
// Backend: with QCCL_BACKEND=mpi every communicator (including those from
// qcclCommSplit) also gets an MPI communicator over the same ranks in the
// same order (MPI_Comm_create_group on MPI_COMM_WORLD), and its calls become
// MPI_Allreduce, MPI_Bcast, MPI_Reduce, MPI_Allgather,
// MPI_Reduce_scatter_block, MPI_Alltoall and MPI_Isend/MPI_Irecv. f16 and
// bf16 reduce with user-defined MPI ops (in f32, as the native engine); avg is
// a sum, then a division. MPI errors become qccl result codes. The calls are
// MPI's blocking ones, so a dead peer is MPI's to handle (mpirun ends the
// job); qccl's deadlines do not apply to them.
#pragma once

#include <mpi.h>

#include <memory>

#include "qccl.h"
#include "qccl/backend/backend.h"

namespace qccl {

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

// The backend of QCCL_BACKEND=mpi (backend.cc's table); collective over `c`.
std::unique_ptr<Backend> make_mpi_backend(qcclComm& c);

}  // namespace qccl
