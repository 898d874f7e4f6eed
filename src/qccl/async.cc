#include <utility>

#include "comm.h"
#include "qk/base/error.h"
#include "qk/qccl/communicator.h"

namespace qk::qccl {

bool Work::ready() const {
  std::lock_guard<std::mutex> g(mu_);
  return done_;
}

qcclResult_t Work::result() const {
  std::unique_lock<std::mutex> g(mu_);
  cv_.wait(g, [&] { return done_; });
  return rc_;
}

const std::string& Work::error() const {
  std::unique_lock<std::mutex> g(mu_);
  cv_.wait(g, [&] { return done_; });
  return msg_;
}

void Work::wait() const {
  qcclResult_t rc = result();
  if (rc == qcclSuccess) return;
  std::string m = std::string(qcclGetErrorString(rc)) + ": " + msg_;
  if (rc == qcclTimeout) QK_THROW(qk::TimeoutError, m);
  if (rc == qcclInvalidArgument) QK_THROW(qk::ValueError, m);
  QK_THROW(qk::IoError, m);
}

void Work::complete(qcclResult_t rc, std::string msg) {
  {
    std::lock_guard<std::mutex> g(mu_);
    done_ = true;
    rc_ = rc;
    msg_ = std::move(msg);
  }
  cv_.notify_all();
}

std::unique_ptr<Communicator> Communicator::init(int nranks, const qcclUniqueId& id, int rank,
                                                 const CommOptions& opts) {
  std::unique_ptr<Communicator> c(new Communicator);
  qcclConfig_t cfg = QCCL_CONFIG_INITIALIZER;
  cfg.timeoutS = opts.timeout_s;
  cfg.commName = opts.name.c_str();
  cfg.transport = opts.transport.empty() ? nullptr : opts.transport.c_str();
  qcclResult_t rc = qcclCommInitRankConfig(&c->comm_, nranks, id, rank, &cfg);
  if (rc == qcclTimeout) QK_THROW(qk::TimeoutError, "qccl init: ", qcclGetLastError(nullptr));
  QK_CHECK_AS(qk::IoError, rc == qcclSuccess, "qccl init (rank ", rank, " of ", nranks, "): ",
              qcclGetErrorString(rc), ": ", qcclGetLastError(nullptr));
  c->rank_ = rank;
  c->size_ = nranks;
  c->thread_ = std::thread([p = c.get()] { p->loop(); });
  return c;
}

std::unique_ptr<Communicator> Communicator::adopt(qcclComm_t comm) {
  std::unique_ptr<Communicator> c(new Communicator);
  c->comm_ = comm;
  QK_CHECK_AS(qk::IoError, qcclCommUserRank(comm, &c->rank_) == qcclSuccess &&
                               qcclCommCount(comm, &c->size_) == qcclSuccess,
              "qccl: ", qcclGetLastError(nullptr));
  c->thread_ = std::thread([p = c.get()] { p->loop(); });
  return c;
}

std::unique_ptr<Communicator> Communicator::split(int color, int key, const CommOptions& opts) {
  qcclComm_t made = nullptr;
  const std::string name = opts.name;
  const std::string transport = opts.transport;
  const double timeout_s = opts.timeout_s;
  submit([&](qcclComm_t c) {
    qcclConfig_t cfg = QCCL_CONFIG_INITIALIZER;
    cfg.timeoutS = timeout_s;
    cfg.commName = name.c_str();
    cfg.transport = transport.empty() ? nullptr : transport.c_str();
    return qcclCommSplit(c, color < 0 ? QCCL_SPLIT_NOCOLOR : color, key, &made, &cfg);
  })->wait();  // the closure's references stay valid: we wait for it here
  if (made == nullptr) return nullptr;
  return adopt(made);
}

Communicator::~Communicator() {
  {
    std::lock_guard<std::mutex> g(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  if (comm_) qcclCommDestroy(comm_);
}

void Communicator::loop() {
  while (true) {
    std::pair<std::function<qcclResult_t(qcclComm_t)>, std::shared_ptr<Work>> item;
    {
      std::unique_lock<std::mutex> g(mu_);
      cv_.wait(g, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;
      item = std::move(queue_.front());
      queue_.pop_front();
      if (aborted_) {
        g.unlock();
        item.second->complete(qcclInvalidUsage, "the communicator was aborted");
        continue;
      }
    }
    qcclResult_t rc = item.first(comm_);
    item.second->complete(rc, rc == qcclSuccess ? "" : qcclGetLastError(comm_));
  }
}

std::shared_ptr<Work> Communicator::submit(std::function<qcclResult_t(qcclComm_t)> call) {
  auto w = std::make_shared<Work>();
  {
    std::lock_guard<std::mutex> g(mu_);
    if (aborted_) {
      w->complete(qcclInvalidUsage, "the communicator was aborted");
      return w;
    }
    queue_.emplace_back(std::move(call), w);
  }
  cv_.notify_one();
  return w;
}

std::shared_ptr<Work> Communicator::all_reduce_async(const void* s, void* r, size_t n,
                                                     qcclDataType_t dt, qcclRedOp_t op) {
  return submit([=](qcclComm_t c) { return qcclAllReduce(s, r, n, dt, op, c, nullptr); });
}
std::shared_ptr<Work> Communicator::broadcast_async(const void* s, void* r, size_t n,
                                                    qcclDataType_t dt, int root) {
  return submit([=](qcclComm_t c) { return qcclBroadcast(s, r, n, dt, root, c, nullptr); });
}
std::shared_ptr<Work> Communicator::all_gather_async(const void* s, void* r, size_t n,
                                                     qcclDataType_t dt) {
  return submit([=](qcclComm_t c) { return qcclAllGather(s, r, n, dt, c, nullptr); });
}
std::shared_ptr<Work> Communicator::reduce_scatter_async(const void* s, void* r, size_t n,
                                                         qcclDataType_t dt, qcclRedOp_t op) {
  return submit([=](qcclComm_t c) { return qcclReduceScatter(s, r, n, dt, op, c, nullptr); });
}

std::shared_ptr<Work> Communicator::all_to_all_v_async(const void* s, std::vector<size_t> sc,
                                                       std::vector<size_t> sd, void* r,
                                                       std::vector<size_t> rc,
                                                       std::vector<size_t> rd, qcclDataType_t dt) {
  const size_t n = static_cast<size_t>(size_);
  QK_CHECK(sc.size() == n && sd.size() == n && rc.size() == n && rd.size() == n,
           "all_to_all_v_async: expected ", n, " send counts, send displacements, receive counts "
           "and receive displacements (one per rank), got ", sc.size(), ", ", sd.size(), ", ",
           rc.size(), " and ", rd.size());
  return submit([=, sc = std::move(sc), sd = std::move(sd), rc = std::move(rc),
                 rd = std::move(rd)](qcclComm_t c) {
    return qcclAllToAllv(s, sc.data(), sd.data(), r, rc.data(), rd.data(), dt, c, nullptr);
  });
}

void Communicator::barrier() {
  submit([](qcclComm_t c) {
    static const char one = 1;
    char out = 0;
    return qcclAllReduce(&one, &out, 1, qcclInt8, qcclMax, c, nullptr);
  })->wait();
}

void Communicator::abort() {
  {
    std::lock_guard<std::mutex> g(mu_);
    if (aborted_) return;
    aborted_ = true;
    stop_ = true;
  }
  // Flag first so the call in progress fails within milliseconds and queued
  // ones fail at once; free the communicator only after the thread has left.
  comm_->aborted.store(true);
  comm_->fail(qcclInvalidUsage, "aborted by Communicator::abort");
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  qcclCommAbort(comm_);
  comm_ = nullptr;
}

}  // namespace qk::qccl
