// The MPI backend (QCCL_BACKEND=mpi) that runs every collective through
// Open MPI. Built only when CMake finds MPI (QK_HAVE_MPI); the rest of qccl
// never needs it. Bootstrapping from an MPI job is public: qk/qccl/mpi.h.
//
// Every communicator (including those from qcclCommSplit) also gets an MPI
// communicator over the same ranks in the same order (MPI_Comm_create_group
// on MPI_COMM_WORLD), and its calls become MPI_Allreduce, MPI_Bcast,
// MPI_Reduce, MPI_Allgather, MPI_Reduce_scatter_block, MPI_Alltoall and
// MPI_Isend/MPI_Irecv. f16 and bf16 reduce with user-defined MPI ops (in f32,
// as the native engine); avg is a sum, then a division. MPI errors become
// qccl result codes. The calls are MPI's blocking ones, so a dead peer is
// MPI's to handle (mpirun ends the job); qccl's deadlines do not apply to them.
#pragma once

#include <mpi.h>

#include <memory>

#include "qccl.h"
#include "backend/backend.h"
#include "qk/qccl/mpi.h"

namespace qccl {

// The backend of QCCL_BACKEND=mpi (backend.cc's table); collective over `c`.
std::unique_ptr<Backend> make_mpi_backend(qcclComm& c);

}  // namespace qccl
