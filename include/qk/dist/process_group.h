// Tensor collectives between the processes of a job, over qccl.
//
//   qk::dist::init();                               // reads RANK/WORLD_SIZE/MASTER_* (qk run),
//                                                   // OMPI_*, PMI_* or SLURM_*; meets the others
//   auto& pg = qk::dist::group();
//   pg.all_reduce(grad);                            // in place, sum
//   auto w = pg.all_reduce_async(bucket, qk::dist::ReduceOp::avg);
//   ... backward goes on ...
//   w->wait();                                      // throws qk::Error naming the failed peer
//
// Collectives run in submission order on qccl's progress thread, one at a
// time, so every rank must issue the same collectives in the same order.
// Tensors must be contiguous and on the CPU; an async call keeps them alive
// until the work completes, but the caller must not touch them before wait().
//
// Rendezvous (see docs/dist.md): under `qk run` the launcher's store on
// MASTER_ADDR:MASTER_PORT; under mpirun/srun with MASTER_ADDR and MASTER_PORT
// set, rank 0 hosts the store there itself; else QCCL_COMM_ID=host:port
// (qccl's own bootstrap); a single process needs nothing. A rank that never
// arrives makes the others fail with a TimeoutError naming it.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "qk/dist/launch_env.h"
#include "qk/qccl/communicator.h"
#include "qk/tensor/tensor.h"

namespace qk::qccl {
class Store;
class StoreServer;
}  // namespace qk::qccl

namespace qk::dist {

enum class ReduceOp { sum, prod, max, min, avg };

// The handle of an asynchronous collective.
class Work {
 public:
  Work(std::shared_ptr<qk::qccl::Work> w, std::vector<Tensor> keep)
      : work_(std::move(w)), keep_(std::move(keep)) {}
  bool is_completed() const { return work_->ready(); }
  // Blocks until done; throws TimeoutError / IoError naming the failed peer.
  void wait();

 private:
  std::shared_ptr<qk::qccl::Work> work_;
  std::vector<Tensor> keep_;  // alive until the progress thread is done with them
};
using WorkPtr = std::shared_ptr<Work>;

struct InitOptions {
  double timeout_s = 0;   // every wait, rendezvous included (0: QK_DIST_TIMEOUT_S)
  std::string transport;  // "", "auto", "shm" or "tcp"
  std::string name = "pg";
  InitOptions& timeout(double s) { timeout_s = s; return *this; }
  InitOptions& via(std::string t) { transport = std::move(t); return *this; }
};

class ProcessGroup {
 public:
  // Joins the job described by `env` (blocking, bounded by the timeout).
  static std::unique_ptr<ProcessGroup> create(const LaunchEnv& env, const InitOptions& opts = {});
  ~ProcessGroup();

  int rank() const { return rank_; }
  int size() const { return size_; }
  int local_rank() const { return local_rank_; }
  qk::qccl::Communicator& comm() { return *comm_; }

  WorkPtr all_reduce_async(const Tensor& t, ReduceOp op = ReduceOp::sum);
  WorkPtr broadcast_async(const Tensor& t, int root);
  // out holds size() x in.numel() elements: rank r's input at offset r * in.numel().
  WorkPtr all_gather_async(const Tensor& out, const Tensor& in);
  // in holds size() x out.numel() elements; out gets the reduction of block rank().
  WorkPtr reduce_scatter_async(const Tensor& out, const Tensor& in, ReduceOp op = ReduceOp::sum);

  void all_reduce(const Tensor& t, ReduceOp op = ReduceOp::sum) { all_reduce_async(t, op)->wait(); }
  void broadcast(const Tensor& t, int root) { broadcast_async(t, root)->wait(); }
  void all_gather(const Tensor& out, const Tensor& in) { all_gather_async(out, in)->wait(); }
  void reduce_scatter(const Tensor& out, const Tensor& in, ReduceOp op = ReduceOp::sum) {
    reduce_scatter_async(out, in, op)->wait();
  }
  void barrier();

  // A zeroed 1-D tensor in memory the other ranks on this host can map
  // (qcclMemAlloc), so all-reduces on it go direct instead of through the
  // shared-memory rings (DDP's buckets). Plain memory if that fails.
  Tensor shared_zeros(int64_t numel, DType dtype);

 private:
  ProcessGroup() = default;
  int rank_ = 0, size_ = 1, local_rank_ = 0;
  std::unique_ptr<qk::qccl::StoreServer> server_;  // rank 0 without qk run
  std::unique_ptr<qk::qccl::Store> store_;
  std::unique_ptr<qk::qccl::Communicator> comm_;
};

// The default group, as torch.distributed: init() once per process.
void init(const InitOptions& opts = {});
bool is_initialized();
ProcessGroup& group();  // throws UsageError-like ValueError before init()
void destroy();
int rank();        // 0 before init()
int world_size();  // 1 before init()

}  // namespace qk::dist
