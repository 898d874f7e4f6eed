// C++ layer over qccl: a communicator that owns a progress thread, so a
// collective can run while the caller keeps computing (DDP overlaps gradient
// all-reduce with the backward pass this way).
//
//   qcclUniqueId id = ...;                        // from qcclGetUniqueId on one rank
//   auto comm = qk::qccl::Communicator::init(nranks, id, rank);
//   auto work = comm->all_reduce_async(grad, grad, n, qcclFloat32, qcclSum);
//   ... compute ...
//   work->wait();                                 // throws qk::Error naming the failed peer
//
// Calls run on the progress thread in submission order, one at a time, so
// every rank must submit the same collectives in the same order (as with
// NCCL streams). Buffers must stay valid until wait() returns.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "qccl.h"

namespace qk::qccl {

// The handle of one asynchronous call.
class Work {
 public:
  bool ready() const;
  // Blocks until the call finished; throws TimeoutError for qcclTimeout,
  // ValueError for bad arguments, IoError for any other failure.
  void wait() const;
  qcclResult_t result() const;  // blocks like wait() but returns the code
  const std::string& error() const;

 private:
  friend class Communicator;
  void complete(qcclResult_t rc, std::string msg);
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  bool done_ = false;
  qcclResult_t rc_ = qcclSuccess;
  std::string msg_;
};

struct CommOptions {
  double timeout_s = 0;       // 0: QCCL_TIMEOUT_S
  std::string name = "qccl";
  std::string transport;      // "", "auto", "shm" or "tcp"
  CommOptions& timeout(double s) { timeout_s = s; return *this; }
  CommOptions& comm_name(std::string n) { name = std::move(n); return *this; }
  CommOptions& via(std::string t) { transport = std::move(t); return *this; }
};

class Communicator {
 public:
  // Joins the job (blocking, bounded by the timeout); throws qk::Error on failure.
  static std::unique_ptr<Communicator> init(int nranks, const qcclUniqueId& id, int rank,
                                            const CommOptions& opts = {});
  // Collective over this communicator, queued behind its earlier calls:
  // ranks passing the same color >= 0 form a new communicator, ordered by key
  // (then by rank), as qcclCommSplit; a negative color takes part and gets
  // nullptr. The new one has its own progress thread, so its calls never
  // queue behind this one's. opts.timeout_s 0: this communicator's deadline.
  std::unique_ptr<Communicator> split(int color, int key, const CommOptions& opts = {});
  ~Communicator();  // finishes queued work, then destroys the communicator
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  qcclComm_t handle() const { return comm_; }

  std::shared_ptr<Work> all_reduce_async(const void* send, void* recv, size_t count,
                                         qcclDataType_t dt, qcclRedOp_t op);
  std::shared_ptr<Work> broadcast_async(const void* send, void* recv, size_t count,
                                        qcclDataType_t dt, int root);
  std::shared_ptr<Work> all_gather_async(const void* send, void* recv, size_t sendcount,
                                         qcclDataType_t dt);
  std::shared_ptr<Work> reduce_scatter_async(const void* send, void* recv, size_t recvcount,
                                             qcclDataType_t dt, qcclRedOp_t op);
  // qcclAllToAllv; the count and displacement arrays (one per rank, in
  // elements) are copied, the buffers must stay valid until wait().
  std::shared_ptr<Work> all_to_all_v_async(const void* send, std::vector<size_t> sendcounts,
                                           std::vector<size_t> sdispls, void* recv,
                                           std::vector<size_t> recvcounts,
                                           std::vector<size_t> rdispls, qcclDataType_t dt);
  // Runs any qccl call (taking this communicator) on the progress thread.
  std::shared_ptr<Work> submit(std::function<qcclResult_t(qcclComm_t)> call);

  // Blocking forms: submit and wait.
  void all_reduce(const void* send, void* recv, size_t count, qcclDataType_t dt, qcclRedOp_t op) {
    all_reduce_async(send, recv, count, dt, op)->wait();
  }
  void barrier();
  // Unblocks the call in progress (it fails), fails queued calls, frees the communicator.
  void abort();

 private:
  Communicator() = default;
  // Takes ownership of `comm` and starts its progress thread.
  static std::unique_ptr<Communicator> adopt(qcclComm_t comm);
  void loop();

  qcclComm_t comm_ = nullptr;
  int rank_ = 0, size_ = 1;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::pair<std::function<qcclResult_t(qcclComm_t)>, std::shared_ptr<Work>>> queue_;
  bool stop_ = false;
  bool aborted_ = false;
  std::thread thread_;
};

}  // namespace qk::qccl
