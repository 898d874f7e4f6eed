// Backends: the engine that moves a communicator's data.
//
// qccl always sets a communicator up itself (bootstrap, one connection per
// peer); the backend then runs its collectives and point-to-point calls:
//
//   native  qccl's own engine and algorithms (the default, host memory)
//   mpi     Open MPI on a communicator with the same ranks (QCCL_BACKEND=mpi;
//           built when MPI is found, see backend/mpi.h)
//   nccl    NCCL on the current CUDA device (QCCL_BACKEND=nccl, or chosen
//           for device memory when the program links qianka::qccl_nccl)
//
// The C API validates arguments, then calls
//   backend_for(c, send, recv).all_reduce(send, recv, count, dt, op, stream);
// A backend gets arguments already checked, in NCCL's in-place conventions,
// and throws qk exceptions (api.cc maps them to result codes).
#pragma once

#include <cstddef>
#include <memory>
#include <span>

#include "qccl.h"
#include "algo/collectives.h"

namespace qccl {

class Backend {
 public:
  virtual ~Backend() = default;
  virtual const char* name() const = 0;
  // `stream` is the caller's qcclStream_t (NULL for host backends); every call
  // still returns only when its buffers are ready.
  virtual void all_reduce(const void* send, void* recv, size_t count, qcclDataType_t dt,
                          qcclRedOp_t op, void* stream) = 0;
  virtual void broadcast(const void* send, void* recv, size_t count, qcclDataType_t dt, int root,
                         void* stream) = 0;
  virtual void reduce(const void* send, void* recv, size_t count, qcclDataType_t dt,
                      qcclRedOp_t op, int root, void* stream) = 0;
  virtual void all_gather(const void* send, void* recv, size_t sendcount, qcclDataType_t dt,
                          void* stream) = 0;
  virtual void reduce_scatter(const void* send, void* recv, size_t recvcount, qcclDataType_t dt,
                              qcclRedOp_t op, void* stream) = 0;
  virtual void all_to_all(const void* send, void* recv, size_t count, qcclDataType_t dt,
                          void* stream) = 0;
  virtual void all_to_all_v(const void* send, void* recv, const VBlocks& v, qcclDataType_t dt,
                            void* stream) = 0;
  // One group's point-to-point operations, run together, in order per peer.
  virtual void point_to_point(std::span<const P2POp> ops, void* stream) = 0;
};

// For backends whose engine cannot tell that ranks disagree on the counts of
// an all-to-all-v (MPI under-fills or truncates, NCCL waits): `all` holds,
// for each rank in turn, `stride` values starting with its n send counts and
// then its n receive counts (gathered by the caller). Throws RemoteError
// naming the first pair that disagrees; every rank sees the same pairs, so
// all of them fail together.
void check_all_to_all_v_counts(const qcclComm& c, std::span<const uint64_t> all, size_t stride);

// A backend that a library adds at static-initialisation time (the NCCL one
// lives in its own library so that programs without it never load CUDA).
struct BackendKind {
  const char* name;
  // Creates the backend for `c`; collective: every rank of `c` calls it together.
  std::unique_ptr<Backend> (*make)(qcclComm& c);
  // For device-memory backends: true when `p` is memory this backend must
  // carry (the native engine cannot read it). nullptr for host backends.
  bool (*owns_pointer)(const void* p);
};
void register_backend(const BackendKind& kind);

// Gives `c` its backend from QCCL_BACKEND (auto|native|mpi|nccl); the last
// step of creating a communicator, collective over its ranks.
void attach_backend(qcclComm& c);

// The backend that carries these buffers: the communicator's own, or (under
// QCCL_BACKEND=auto) a registered device-memory backend when a buffer is
// device memory, created on first use (collectively: all ranks pass device
// buffers to the same call). Under a device backend chosen by name
// (QCCL_BACKEND=nccl), host buffers go to the native engine.
Backend& backend_for(qcclComm& c, const void* a, const void* b);

// qccl's own engine (algo/), as a backend.
std::unique_ptr<Backend> make_native_backend(qcclComm& c);

}  // namespace qccl
