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
// Tensors must be contiguous; an async call keeps them alive until the work
// completes, but the caller must not touch them before wait(). Device
// tensors: CUDA memory goes straight to qccl's NCCL backend (QCCL_BACKEND
// auto or nccl, qianka::qccl_nccl linked), after the kernels queued before
// the call on the current stream (a fence qccl's thread waits on, not the
// caller); memory of a device qccl cannot carry goes through host copies,
// written back by wait() on the caller's current stream.
//
// Sub-groups (Megatron's tensor-, data-, pipeline-parallel groups) are
// process groups of their own, made by a collective split of a parent; each
// has its own qccl communicator and progress thread, so one group's calls
// never queue behind or mix with another's:
//
//   auto tp = pg.split(/*color=*/pg.rank() / 2, /*key=*/pg.rank(), "tp");   // {0,1}, {2,3}
//   tp->all_reduce(partial);                        // ranks and peers count within tp
//   tp->global_ranks();                             // {2, 3} on ranks 2 and 3
//
// Point to point: the k-th send from a to b in a group matches the k-th
// receive on b from a (no tags: order is the match). Sends and receives that
// must overlap (an exchange, a ring shift) go in one batch, which runs them
// together as ncclGroupStart/End would:
//
//   pg.batch_isend_irecv({P2POp::send(mine, next), P2POp::recv(theirs, prev)})->wait();
//
// Rendezvous (see docs/dist.md): under `qk run` the launcher's store on
// MASTER_ADDR:MASTER_PORT; under mpirun/srun with MASTER_ADDR and MASTER_PORT
// set, rank 0 hosts the store there itself; else QCCL_COMM_ID=host:port
// (qccl's own bootstrap); a single process needs nothing. A rank that never
// arrives makes the others fail with a TimeoutError naming it.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
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
  // A device tensor qccl wrote through a host copy: copied back by wait().
  struct CopyBack {
    Tensor device, host;
  };
  Work(std::shared_ptr<qk::qccl::Work> w, std::vector<Tensor> keep, std::vector<CopyBack> back = {},
       std::shared_ptr<const std::string> fence_error = nullptr)
      : work_(std::move(w)), keep_(std::move(keep)), back_(std::move(back)), fence_error_(std::move(fence_error)) {}
  // qccl is done with the tensors (a staged result is copied back by wait()).
  bool is_completed() const { return work_->ready(); }
  // Blocks until done; throws TimeoutError / IoError naming the failed peer,
  // DeviceError when the device failed before qccl could read its tensors.
  void wait();

 private:
  std::shared_ptr<qk::qccl::Work> work_;
  std::vector<Tensor> keep_;  // alive until the progress thread is done with them
  std::vector<CopyBack> back_;
  std::shared_ptr<const std::string> fence_error_;  // set by qccl's thread before it completes work_
};
using WorkPtr = std::shared_ptr<Work>;

// One point-to-point transfer of a batch (batch_isend_irecv). peer: a rank
// of the group the batch runs on.
struct P2POp {
  enum Kind { kSend, kRecv };
  Kind kind = kSend;
  Tensor tensor;
  int peer = 0;
  static P2POp send(Tensor t, int peer) { return {kSend, std::move(t), peer}; }
  static P2POp recv(Tensor t, int peer) { return {kRecv, std::move(t), peer}; }
};

// What one group moved, for the per-group volume of a training step (the
// traffic benchmark: measured bytes next to the analytic formula). Take one
// snapshot before and one after, and subtract.
struct GroupTraffic {
  struct Op {
    uint64_t calls = 0;
    uint64_t bytes = 0;  // the call's size as nccl-tests counts it (see below)
  };
  // all_reduce/broadcast: the buffer; all_gather: the output; reduce_scatter:
  // the input; all_to_all(_v): the bytes this rank sends; send/recv: each
  // transfer of a batch counted as one call.
  Op all_reduce, broadcast, all_gather, reduce_scatter, all_to_all, send, recv;
  // Payload bytes qccl moved between this rank and its peers in this group
  // (qcclCommGetTraffic): what the algorithms really sent, e.g. 2(n-1)/n x
  // the buffer for a ring all-reduce. Splits and barriers on the group are
  // counted too; the set-up before the group existed is not.
  uint64_t wire_bytes_sent = 0, wire_bytes_received = 0;
  uint64_t wire_messages_sent = 0, wire_messages_received = 0;

  GroupTraffic operator-(const GroupTraffic& before) const;
};

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
  // The process's rank on its host (from the launcher; a sub-group keeps it).
  int local_rank() const { return local_rank_; }
  const std::string& name() const { return name_; }
  // The job-wide (default group) rank of each member, in group-rank order.
  const std::vector<int>& global_ranks() const { return global_ranks_; }
  qk::qccl::Communicator& comm() { return *comm_; }

  // ---- sub-groups (collective over this group) ----
  // Ranks passing the same color >= 0 form a group, ordered by key, then by
  // rank here (MPI_Comm_split, ncclCommSplit). A negative color takes part in
  // the split and gets nullptr. `name` shows in logs and qccl's errors.
  std::unique_ptr<ProcessGroup> split(int color, int key, const std::string& name);
  // torch.distributed.new_group: every rank passes the same list (ranks of
  // this group, distinct); members get the group in list order, others nullptr.
  std::unique_ptr<ProcessGroup> new_group(const std::vector<int>& ranks, const std::string& name);

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

  // ---- all-to-all ----
  // in and out hold size() equal blocks: block j of in goes to rank j and
  // arrives there as block rank() of out. Same dtype and numel.
  WorkPtr all_to_all_async(const Tensor& out, const Tensor& in);
  void all_to_all(const Tensor& out, const Tensor& in) { all_to_all_async(out, in)->wait(); }
  // Uneven blocks along dim 0, as torch's all_to_all_single: in_splits[j]
  // rows of in (in order) go to rank j; out_splits[j] rows of out come from
  // rank j. Each rank's out_splits[j] must equal rank j's in_splits[rank()];
  // rows have the same shape and dtype on both sides. Empty splits: equal.
  WorkPtr all_to_all_v_async(const Tensor& out, const Tensor& in, const std::vector<int64_t>& out_splits,
                             const std::vector<int64_t>& in_splits);
  void all_to_all_v(const Tensor& out, const Tensor& in, const std::vector<int64_t>& out_splits,
                    const std::vector<int64_t>& in_splits) {
    all_to_all_v_async(out, in, out_splits, in_splits)->wait();
  }

  // ---- point to point (peer: a rank of this group) ----
  // A send completes once the receiver has the bytes or qccl buffered them;
  // an exchange between two ranks must be one batch, or both may block.
  WorkPtr send_async(const Tensor& t, int peer);
  WorkPtr recv_async(const Tensor& t, int peer);  // into t: same numel and dtype as sent
  void send(const Tensor& t, int peer) { send_async(t, peer)->wait(); }
  void recv(const Tensor& t, int peer) { recv_async(t, peer)->wait(); }
  // The transfers run together (qcclGroupStart/End): any mix of sends and
  // receives, to any peers (this rank included: a send to self pairs with a
  // receive from self).
  WorkPtr batch_isend_irecv(const std::vector<P2POp>& ops);

  // ---- counters ----
  GroupTraffic traffic() const;

  // A zeroed 1-D tensor in memory the other ranks on this host can map
  // (qcclMemAlloc), so all-reduces on it go direct instead of through the
  // shared-memory rings (DDP's buckets). Plain memory if that fails.
  Tensor shared_zeros(int64_t numel, DType dtype);

 private:
  ProcessGroup() = default;
  void count(GroupTraffic::Op GroupTraffic::*op, uint64_t bytes, uint64_t calls = 1);
  int rank_ = 0, size_ = 1, local_rank_ = 0;
  std::string name_, transport_;
  std::vector<int> global_ranks_;
  mutable std::mutex traffic_mu_;
  GroupTraffic traffic_;           // the per-call counters (wire fields unused)
  qcclCommTraffic_t wire_base_{};  // qccl's counters when this group was made
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
