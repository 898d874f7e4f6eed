// Process group: rendezvous from the launch environment, then tensor
// collectives as calls on qccl's asynchronous communicator.
#include "qk/dist/process_group.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <mutex>

#include "buffer_route.h"
#include "qccl.h"
#include "qk/base/env.h"
#include "qk/base/error.h"
#include "qk/base/log.h"
#include "qk/qccl/store.h"
#include "qk/tensor/backend.h"

namespace qk::dist {
namespace {

QK_ENV_DOUBLE(env_timeout, "QK_DIST_TIMEOUT_S", 300.0,
              "Deadline of qk::dist rendezvous and collectives in seconds.");

qcclDataType_t qccl_type(DType t, const char* what) {
  switch (t) {
    case DType::f32: return qcclFloat32;
    case DType::f64: return qcclFloat64;
    case DType::f16: return qcclFloat16;
    case DType::bf16: return qcclBfloat16;
    case DType::i32: return qcclInt32;
    case DType::i64: return qcclInt64;
    case DType::u8: return qcclUint8;
    case DType::boolean: return qcclUint8;
  }
  QK_THROW(TypeError, what, ": dtype ", dtype_name(t), " has no qccl type");
}

qcclRedOp_t qccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return qcclSum;
    case ReduceOp::prod: return qcclProd;
    case ReduceOp::max: return qcclMax;
    case ReduceOp::min: return qcclMin;
    case ReduceOp::avg: return qcclAvg;
  }
  return qcclSum;
}

void check_tensor(const Tensor& t, const char* what) {
  QK_CHECK(t.defined(), what, ": the tensor is undefined");
  QK_CHECK(t.is_contiguous(), what, ": expected a contiguous tensor, got strides ", shape_str(t.strides()),
           " for shape ", shape_str(t.shape()), "; call .contiguous() first");
}

std::mutex g_mu;
std::unique_ptr<ProcessGroup> g_group;
std::atomic<int> g_inits{0};  // distinct store prefixes for groups made in one process

}  // namespace

void Work::wait() {
  if (fence_error_ && work_->result() != qcclSuccess && !fence_error_->empty())
    QK_THROW(DeviceError, *fence_error_);
  work_->wait();
  for (const CopyBack& c : back_)
    if (c.device.nbytes() > 0)
      backend(c.device.device().type).copy(c.device.raw_data(), c.device.device(), c.host.raw_data(), kCPU,
                                           c.device.nbytes());
  back_.clear();
  keep_.clear();
}

namespace {
// The tensors of one call share a device (one fence, one stream).
void check_same_device(const Tensor& a, const Tensor& b, const char* what) {
  QK_CHECK_DEVICE(a.device() == b.device(), what, ": tensors on ", a.device().str(), " and ", b.device().str(),
                  "; put every tensor of one call on one device");
}
}  // namespace

std::unique_ptr<ProcessGroup> ProcessGroup::create(const LaunchEnv& e, const InitOptions& opts) {
  std::unique_ptr<ProcessGroup> pg(new ProcessGroup);
  pg->rank_ = e.rank;
  pg->size_ = e.world_size;
  pg->local_rank_ = e.local_rank;
  pg->transport_ = opts.transport;
  qk::qccl::CommOptions co;
  co.timeout_s = opts.timeout_s > 0 ? opts.timeout_s : env_timeout.get();
  co.name = opts.name;
  co.transport = opts.transport;
  if (!e.master_addr.empty() && e.master_port > 0) {
    if (!e.under_qk_run && e.rank == 0) {
      // mpirun/srun: nobody hosts a store, so rank 0 does (as torch's env:// init).
      pg->server_ = std::make_unique<qk::qccl::StoreServer>(static_cast<uint16_t>(e.master_port), e.store_token);
    }
    pg->store_ = std::make_unique<qk::qccl::Store>(e.master_addr, static_cast<uint16_t>(e.master_port),
                                                   e.store_token, co.timeout_s);
    // A fresh prefix per restart and per group, so stale keys of an earlier
    // attempt are never read.
    std::string prefix = "pg/" + std::to_string(e.restart_count) + "/" + opts.name + "/" +
                         std::to_string(g_inits.fetch_add(1));
    try {
      pg->comm_ = qk::qccl::init_from_store(*pg->store_, e.world_size, e.rank, co, prefix);
    } catch (const std::exception&) {
      if (pg->server_) pg->server_->drain(co.timeout_s);  // let the others hear why, not a closed socket
      throw;
    }
  } else if (env::get_raw("QCCL_COMM_ID")) {
    qcclUniqueId id;
    QK_CHECK_AS(IoError, qcclGetUniqueId(&id) == qcclSuccess, "qk::dist::init: ", qcclGetLastError(nullptr));
    pg->comm_ = qk::qccl::Communicator::init(e.world_size, id, e.rank, co);
  } else {
    QK_CHECK(e.world_size == 1, "qk::dist::init: rank ", e.rank, " of ", e.world_size, " (from ", e.source,
             " variables) has no way to meet the other ranks: set MASTER_ADDR and MASTER_PORT (rank 0 "
             "hosts a store there), or QCCL_COMM_ID=host:port, or start the job with `qk run`");
    qcclUniqueId id;
    QK_CHECK_AS(IoError, qcclGetUniqueId(&id) == qcclSuccess, "qk::dist::init: ", qcclGetLastError(nullptr));
    pg->comm_ = qk::qccl::Communicator::init(1, id, 0, co);
  }
  pg->name_ = opts.name;
  pg->global_ranks_.resize(e.world_size);
  for (int r = 0; r < e.world_size; ++r) pg->global_ranks_[r] = r;
  QK_CHECK_AS(IoError, qcclCommGetTraffic(pg->comm_->handle(), &pg->wire_base_) == qcclSuccess,
              "qk::dist::init: ", qcclGetLastError(nullptr));
  return pg;
}

// Rank 0's store may go with it: every rank fetched the unique id before
// the communicator could form.
ProcessGroup::~ProcessGroup() {
  comm_.reset();  // finishes queued work first
  store_.reset();
  server_.reset();
}

Tensor ProcessGroup::shared_zeros(int64_t numel, DType dtype) {
  QK_CHECK(numel >= 0, "shared_zeros: expected numel >= 0, got ", numel);
  size_t bytes = static_cast<size_t>(numel) * dtype_size(dtype);
  void* p = nullptr;
  if (size_ > 1 && bytes > 0 && qcclMemAlloc(&p, bytes) == qcclSuccess)  // memfd pages start zeroed
    return from_blob(p, {numel}, dtype, [](void* q) { qcclMemFree(q); });
  return zeros({numel}, TensorOptions(dtype));
}

WorkPtr ProcessGroup::all_reduce_async(const Tensor& t, ReduceOp op) {
  check_tensor(t, "all_reduce");
  const qcclDataType_t dt = qccl_type(t.dtype(), "all_reduce");
  BufferRoute route(comm_->handle());
  void* p = route.reach(t, true, true);
  t.bump_version();
  count(&GroupTraffic::all_reduce, t.nbytes());
  const size_t n = static_cast<size_t>(t.numel());
  const qcclRedOp_t o = qccl_op(op);
  return route.submit(*comm_, [=](qcclComm_t c) { return qcclAllReduce(p, p, n, dt, o, c, nullptr); });
}

WorkPtr ProcessGroup::broadcast_async(const Tensor& t, int root) {
  check_tensor(t, "broadcast");
  QK_CHECK(root >= 0 && root < size_, "broadcast: expected a root in [0, ", size_, "), got ", root);
  const qcclDataType_t dt = qccl_type(t.dtype(), "broadcast");
  BufferRoute route(comm_->handle());
  void* p = route.reach(t, rank_ == root, rank_ != root);
  t.bump_version();
  count(&GroupTraffic::broadcast, t.nbytes());
  const size_t n = static_cast<size_t>(t.numel());
  return route.submit(*comm_, [=](qcclComm_t c) { return qcclBroadcast(p, p, n, dt, root, c, nullptr); });
}

WorkPtr ProcessGroup::all_gather_async(const Tensor& out, const Tensor& in) {
  check_tensor(out, "all_gather (output)");
  check_tensor(in, "all_gather (input)");
  QK_CHECK_TYPE(out.dtype() == in.dtype(), "all_gather: output is ", dtype_name(out.dtype()), ", input is ",
                dtype_name(in.dtype()));
  QK_CHECK(out.numel() == in.numel() * size_, "all_gather: expected an output of ", size_, " x ", in.numel(),
           " = ", in.numel() * size_, " elements, got ", out.numel());
  check_same_device(out, in, "all_gather");
  const qcclDataType_t dt = qccl_type(in.dtype(), "all_gather");
  BufferRoute route(comm_->handle());
  const void* src = route.reach(in, true, false);
  void* dst = route.reach(out, false, true);
  out.bump_version();
  count(&GroupTraffic::all_gather, out.nbytes());
  const size_t n = static_cast<size_t>(in.numel());
  return route.submit(*comm_, [=](qcclComm_t c) { return qcclAllGather(src, dst, n, dt, c, nullptr); });
}

WorkPtr ProcessGroup::reduce_scatter_async(const Tensor& out, const Tensor& in, ReduceOp op) {
  check_tensor(out, "reduce_scatter (output)");
  check_tensor(in, "reduce_scatter (input)");
  QK_CHECK_TYPE(out.dtype() == in.dtype(), "reduce_scatter: output is ", dtype_name(out.dtype()),
                ", input is ", dtype_name(in.dtype()));
  QK_CHECK(in.numel() == out.numel() * size_, "reduce_scatter: expected an input of ", size_, " x ",
           out.numel(), " = ", out.numel() * size_, " elements, got ", in.numel());
  check_same_device(out, in, "reduce_scatter");
  const qcclDataType_t dt = qccl_type(in.dtype(), "reduce_scatter");
  BufferRoute route(comm_->handle());
  const void* src = route.reach(in, true, false);
  void* dst = route.reach(out, false, true);
  out.bump_version();
  count(&GroupTraffic::reduce_scatter, in.nbytes());
  const size_t n = static_cast<size_t>(out.numel());
  const qcclRedOp_t o = qccl_op(op);
  return route.submit(*comm_, [=](qcclComm_t c) { return qcclReduceScatter(src, dst, n, dt, o, c, nullptr); });
}

void ProcessGroup::barrier() { comm_->barrier(); }

// ---- sub-groups ----

std::unique_ptr<ProcessGroup> ProcessGroup::split(int color, int key, const std::string& name) {
  if (color < 0) color = -1;
  // Every rank learns every (color, key), so each member can name the
  // group's global ranks; qcclCommSplit orders members the same way.
  const int32_t mine[2] = {color, key};
  std::vector<int32_t> all(2 * static_cast<size_t>(size_));
  comm_->all_gather_async(mine, all.data(), 2, qcclInt32)->wait();
  std::vector<int> members;
  if (color >= 0)
    for (int r = 0; r < size_; ++r)
      if (all[2 * r] == color) members.push_back(r);
  std::stable_sort(members.begin(), members.end(), [&](int a, int b) { return all[2 * a + 1] < all[2 * b + 1]; });

  qk::qccl::CommOptions co;
  co.name = name;
  co.transport = transport_;
  std::unique_ptr<qk::qccl::Communicator> comm = comm_->split(color, key, co);
  if (!comm) return nullptr;
  std::unique_ptr<ProcessGroup> pg(new ProcessGroup);
  pg->rank_ = comm->rank();
  pg->size_ = comm->size();
  QK_CHECK_AS(InternalError, pg->size_ == static_cast<int>(members.size()) && members[pg->rank_] == rank_,
              "ProcessGroup::split '", name, "': qccl formed a group of ", pg->size_, " with this rank at ",
              pg->rank_, ", the colors say ", members.size());
  pg->local_rank_ = local_rank_;
  pg->name_ = name;
  pg->transport_ = transport_;
  for (int m : members) pg->global_ranks_.push_back(global_ranks_[m]);
  pg->comm_ = std::move(comm);
  QK_CHECK_AS(IoError, qcclCommGetTraffic(pg->comm_->handle(), &pg->wire_base_) == qcclSuccess,
              "ProcessGroup::split: ", qcclGetLastError(nullptr));
  return pg;
}

std::unique_ptr<ProcessGroup> ProcessGroup::new_group(const std::vector<int>& ranks, const std::string& name) {
  std::vector<char> seen(size_, 0);
  int key = -1;
  for (size_t i = 0; i < ranks.size(); ++i) {
    const int r = ranks[i];
    QK_CHECK(r >= 0 && r < size_, "new_group '", name, "': rank ", r, " is not in [0, ", size_, ")");
    QK_CHECK(!seen[r], "new_group '", name, "': rank ", r, " is listed twice");
    seen[r] = 1;
    if (r == rank_) key = static_cast<int>(i);
  }
  return split(key >= 0 ? 0 : -1, key, name);
}

// ---- all-to-all ----

WorkPtr ProcessGroup::all_to_all_async(const Tensor& out, const Tensor& in) {
  check_tensor(out, "all_to_all (output)");
  check_tensor(in, "all_to_all (input)");
  QK_CHECK_TYPE(out.dtype() == in.dtype(), "all_to_all: output is ", dtype_name(out.dtype()), ", input is ",
                dtype_name(in.dtype()));
  QK_CHECK(out.numel() == in.numel() && in.numel() % size_ == 0, "all_to_all: expected input and output of the "
           "same size, a multiple of the group size ", size_, "; got ", in.numel(), " and ", out.numel());
  check_same_device(out, in, "all_to_all");
  const qcclDataType_t dt = qccl_type(in.dtype(), "all_to_all");
  BufferRoute route(comm_->handle());
  const void* src = route.reach(in, true, false);
  void* dst = route.reach(out, false, true);
  out.bump_version();
  count(&GroupTraffic::all_to_all, in.nbytes());
  const size_t n = static_cast<size_t>(in.numel() / size_);
  return route.submit(*comm_, [=](qcclComm_t c) { return qcclAllToAll(src, dst, n, dt, c, nullptr); });
}

namespace {

// Rows of a tensor split along dim 0: offsets (in elements) and counts.
std::vector<size_t> row_offsets(const std::vector<int64_t>& splits, int64_t rows, int64_t row_numel,
                                const char* which) {
  std::vector<size_t> off(splits.size() + 1, 0);
  for (size_t j = 0; j < splits.size(); ++j) {
    QK_CHECK(splits[j] >= 0, "all_to_all_v: ", which, "_splits[", j, "] is negative (", splits[j], ")");
    off[j + 1] = off[j] + static_cast<size_t>(splits[j]);
  }
  QK_CHECK(static_cast<int64_t>(off.back()) == rows, "all_to_all_v: ", which, "_splits add up to ", off.back(),
           " rows, the ", which, "put has ", rows);
  for (auto& o : off) o *= static_cast<size_t>(row_numel);
  return off;
}

std::vector<int64_t> equal_splits(const Tensor& t, int n, const char* which) {
  QK_CHECK(t.size(0) % n == 0, "all_to_all_v: no ", which, "_splits given and the ", which, "put's ",
           t.size(0), " rows do not split evenly over ", n, " ranks");
  return std::vector<int64_t>(n, t.size(0) / n);
}

int64_t row_numel(const Tensor& t) {
  int64_t k = 1;
  for (int64_t d = 1; d < t.dim(); ++d) k *= t.size(d);
  return k;
}

}  // namespace

WorkPtr ProcessGroup::all_to_all_v_async(const Tensor& out, const Tensor& in, const std::vector<int64_t>& out_splits,
                                         const std::vector<int64_t>& in_splits) {
  check_tensor(out, "all_to_all_v (output)");
  check_tensor(in, "all_to_all_v (input)");
  QK_CHECK_TYPE(out.dtype() == in.dtype(), "all_to_all_v: output is ", dtype_name(out.dtype()), ", input is ",
                dtype_name(in.dtype()));
  QK_CHECK(in.dim() >= 1 && out.dim() >= 1 && row_numel(in) == row_numel(out), "all_to_all_v: expected input and "
           "output with the same row shape (all dims but the first), got ", shape_str(in.shape()), " and ",
           shape_str(out.shape()));
  QK_CHECK((in_splits.empty() || in_splits.size() == static_cast<size_t>(size_)) &&
               (out_splits.empty() || out_splits.size() == static_cast<size_t>(size_)),
           "all_to_all_v: expected one split per rank (", size_, "), got ", in_splits.size(), " input and ",
           out_splits.size(), " output splits");
  const std::vector<int64_t> ins = in_splits.empty() ? equal_splits(in, size_, "in") : in_splits;
  const std::vector<int64_t> outs = out_splits.empty() ? equal_splits(out, size_, "out") : out_splits;
  const int64_t k = row_numel(in);
  const std::vector<size_t> in_off = row_offsets(ins, in.size(0), k, "in");
  const std::vector<size_t> out_off = row_offsets(outs, out.size(0), k, "out");
  check_same_device(out, in, "all_to_all_v");
  QK_CHECK(ins[rank_] == outs[rank_], "all_to_all_v: this rank (", rank_, ") sends itself ", ins[rank_],
           " rows but expects ", outs[rank_]);
  out.bump_version();
  count(&GroupTraffic::all_to_all, in.nbytes());
  // Element counts and offsets per rank. qccl checks the counts between
  // peers on the data's way: splits that do not match across ranks fail on
  // its size check instead of waiting out the deadline.
  const size_t n = static_cast<size_t>(size_);
  std::vector<size_t> send_counts(n), send_displs(in_off.begin(), in_off.end() - 1);
  std::vector<size_t> recv_counts(n), recv_displs(out_off.begin(), out_off.end() - 1);
  for (size_t j = 0; j < n; ++j) {
    send_counts[j] = in_off[j + 1] - in_off[j];
    recv_counts[j] = out_off[j + 1] - out_off[j];
  }
  const qcclDataType_t dt = qccl_type(in.dtype(), "all_to_all_v");
  BufferRoute route(comm_->handle());
  const void* src = route.reach(in, true, false);
  void* dst = route.reach(out, false, true);
  return route.submit(*comm_, [=, sc = std::move(send_counts), sd = std::move(send_displs),
                               rc = std::move(recv_counts), rd = std::move(recv_displs)](qcclComm_t c) {
    return qcclAllToAllv(src, sc.data(), sd.data(), dst, rc.data(), rd.data(), dt, c, nullptr);
  });
}

// ---- point to point ----

WorkPtr ProcessGroup::send_async(const Tensor& t, int peer) {
  QK_CHECK(peer != rank_, "send: rank ", rank_, " sends to itself; pair it with a receive in batch_isend_irecv");
  return batch_isend_irecv({P2POp::send(t, peer)});
}

WorkPtr ProcessGroup::recv_async(const Tensor& t, int peer) {
  QK_CHECK(peer != rank_, "recv: rank ", rank_, " receives from itself; pair it with a send in batch_isend_irecv");
  return batch_isend_irecv({P2POp::recv(t, peer)});
}

WorkPtr ProcessGroup::batch_isend_irecv(const std::vector<P2POp>& ops) {
  struct Raw {
    bool is_send;
    void* buf;
    size_t bytes;
    int peer;
  };
  std::vector<Raw> raw;
  for (const P2POp& op : ops) {
    const bool is_send = op.kind == P2POp::kSend;
    check_tensor(op.tensor, is_send ? "send" : "recv");
    QK_CHECK(op.peer >= 0 && op.peer < size_, is_send ? "send" : "recv", ": expected a peer in [0, ", size_,
             ") of group '", name_, "', got ", op.peer);
    check_same_device(op.tensor, ops.front().tensor, "batch_isend_irecv");
  }
  BufferRoute route(comm_->handle());
  for (const P2POp& op : ops) {
    const bool is_send = op.kind == P2POp::kSend;
    void* buf = route.reach(op.tensor, is_send, !is_send);
    if (!is_send) op.tensor.bump_version();
    count(is_send ? &GroupTraffic::send : &GroupTraffic::recv, op.tensor.nbytes());
    raw.push_back({is_send, buf, op.tensor.nbytes(), op.peer});
  }
  return route.submit(*comm_, [raw = std::move(raw)](qcclComm_t c) {
    qcclResult_t rc = qcclGroupStart();
    for (size_t i = 0; i < raw.size() && rc == qcclSuccess; ++i)
      rc = raw[i].is_send ? qcclSend(raw[i].buf, raw[i].bytes, qcclUint8, raw[i].peer, c, nullptr)
                          : qcclRecv(raw[i].buf, raw[i].bytes, qcclUint8, raw[i].peer, c, nullptr);
    const qcclResult_t end = qcclGroupEnd();
    return rc != qcclSuccess ? rc : end;
  });
}

// ---- counters ----

void ProcessGroup::count(GroupTraffic::Op GroupTraffic::*op, uint64_t bytes, uint64_t calls) {
  std::lock_guard<std::mutex> g(traffic_mu_);
  (traffic_.*op).calls += calls;
  (traffic_.*op).bytes += bytes;
}

GroupTraffic ProcessGroup::traffic() const {
  GroupTraffic t;
  {
    std::lock_guard<std::mutex> g(traffic_mu_);
    t = traffic_;
  }
  qcclCommTraffic_t now{};
  QK_CHECK_AS(IoError, qcclCommGetTraffic(comm_->handle(), &now) == qcclSuccess, "ProcessGroup::traffic: ",
              qcclGetLastError(nullptr));
  t.wire_bytes_sent = now.bytesSent - wire_base_.bytesSent;
  t.wire_bytes_received = now.bytesReceived - wire_base_.bytesReceived;
  t.wire_messages_sent = now.messagesSent - wire_base_.messagesSent;
  t.wire_messages_received = now.messagesReceived - wire_base_.messagesReceived;
  return t;
}

GroupTraffic GroupTraffic::operator-(const GroupTraffic& b) const {
  GroupTraffic d;
  for (Op GroupTraffic::*op : {&GroupTraffic::all_reduce, &GroupTraffic::broadcast, &GroupTraffic::all_gather,
                               &GroupTraffic::reduce_scatter, &GroupTraffic::all_to_all, &GroupTraffic::send,
                               &GroupTraffic::recv}) {
    (d.*op).calls = (this->*op).calls - (b.*op).calls;
    (d.*op).bytes = (this->*op).bytes - (b.*op).bytes;
  }
  d.wire_bytes_sent = wire_bytes_sent - b.wire_bytes_sent;
  d.wire_bytes_received = wire_bytes_received - b.wire_bytes_received;
  d.wire_messages_sent = wire_messages_sent - b.wire_messages_sent;
  d.wire_messages_received = wire_messages_received - b.wire_messages_received;
  return d;
}

void init(const InitOptions& opts) {
  std::lock_guard<std::mutex> g(g_mu);
  QK_CHECK(!g_group, "qk::dist::init called twice; call qk::dist::destroy() first");
  LaunchEnv e = launch_env();
  g_group = ProcessGroup::create(e, opts);
  // Under `qk run` the launcher prefixes every line already.
  if (e.world_size > 1 && !e.under_qk_run && logging::prefix().empty())
    logging::set_prefix("[rank " + std::to_string(e.rank) + "] ");
}

bool is_initialized() {
  std::lock_guard<std::mutex> g(g_mu);
  return g_group != nullptr;
}

ProcessGroup& group() {
  std::lock_guard<std::mutex> g(g_mu);
  QK_CHECK(g_group, "qk::dist: no process group; call qk::dist::init() first");
  return *g_group;
}

void destroy() {
  std::lock_guard<std::mutex> g(g_mu);
  g_group.reset();
}

int rank() {
  std::lock_guard<std::mutex> g(g_mu);
  return g_group ? g_group->rank() : 0;
}

int world_size() {
  std::lock_guard<std::mutex> g(g_mu);
  return g_group ? g_group->size() : 1;
}

}  // namespace qk::dist
