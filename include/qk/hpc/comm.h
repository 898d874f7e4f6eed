// A thin, checked handle over an MPI communicator for the HPC benchmarks.
//
//   qk::hpc::MpiSession mpi(&argc, &argv);     // MPI_Init_thread, or nothing if already up
//   qk::hpc::Comm world = qk::hpc::Comm::world();
//   qk::hpc::Comm row = world.split(/*color=*/myrow, /*key=*/mycol);
//   double s = row.allreduce_sum(local);
//
// Every MPI call goes through QK_MPI_CHECK, which turns an error code into a
// qk::Error naming the call. A program started without mpirun is a singleton
// MPI job of one rank (Open MPI supports that), so `qk hpl` needs no launcher.
// HPL and HPCG only use what is declared here, so a different transport could
// replace MPI without touching the algorithms.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace qk::hpc {

// Throws qk::Error("MPI call `what` failed: <MPI error string>").
void mpi_fail(int code, const char* what, const char* file, int line);
#define QK_MPI_CHECK(call)                                               \
  do {                                                                   \
    int qk_mpi_rc_ = (call);                                             \
    if (qk_mpi_rc_ != MPI_SUCCESS) ::qk::hpc::mpi_fail(qk_mpi_rc_, #call, __FILE__, __LINE__); \
  } while (0)

// Initializes MPI once per process (MPI_THREAD_FUNNELED) and finalizes it on
// destruction if it did the initialization. Safe to create more than once.
class MpiSession {
 public:
  MpiSession(int* argc = nullptr, char*** argv = nullptr);
  ~MpiSession();
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;

 private:
  bool owns_ = false;
};

class Comm {
 public:
  Comm() = default;
  // Wraps (does not own) an existing communicator.
  explicit Comm(MPI_Comm c, bool owned = false);
  ~Comm();
  Comm(Comm&& o) noexcept;
  Comm& operator=(Comm&& o) noexcept;
  Comm(const Comm&) = delete;
  Comm& operator=(const Comm&) = delete;

  static Comm world();

  int rank() const { return rank_; }
  int size() const { return size_; }
  MPI_Comm raw() const { return comm_; }
  // Ranks of one color form a new communicator, ordered by key.
  Comm split(int color, int key) const;
  // Ranks on the same node (MPI_COMM_TYPE_SHARED).
  Comm split_node() const;

  void barrier() const;
  void bcast(void* buf, size_t bytes, int root) const;
  double allreduce_sum(double v) const;
  double allreduce_max(double v) const;
  int64_t allreduce_max(int64_t v) const;
  int64_t allreduce_min(int64_t v) const;
  void allreduce_sum(double* inout, size_t n) const;
  void allreduce_max(double* inout, size_t n) const;
  void send(const void* buf, size_t bytes, int dest, int tag) const;
  void recv(void* buf, size_t bytes, int src, int tag) const;
  MPI_Request isend(const void* buf, size_t bytes, int dest, int tag) const;
  MPI_Request irecv(void* buf, size_t bytes, int src, int tag) const;
  static void wait(MPI_Request* req);
  // Exchanges with one peer: sends `sbuf`, receives into `rbuf`.
  void sendrecv(const void* sbuf, size_t sbytes, int dest, void* rbuf, size_t rbytes, int src,
                int tag) const;

 private:
  MPI_Comm comm_ = MPI_COMM_NULL;
  bool owned_ = false;
  int rank_ = 0;
  int size_ = 1;
};

// The node-local rank count, for choosing threads per rank.
int ranks_on_this_node(const Comm& world);

}  // namespace qk::hpc
