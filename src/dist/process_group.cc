// Process group: rendezvous from the launch environment, then tensor
// collectives as calls on qccl's asynchronous communicator.
#include "qk/dist/process_group.h"

#include <unistd.h>

#include <atomic>
#include <mutex>

#include "qccl.h"
#include "qk/base/env.h"
#include "qk/base/error.h"
#include "qk/base/log.h"
#include "qk/qccl/store.h"

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
  QK_CHECK_DEVICE(t.device().is_cpu(), what, ": expected a CPU tensor, got one on ", t.device().str(),
                  " (qccl moves host memory)");
  QK_CHECK(t.is_contiguous(), what, ": expected a contiguous tensor, got strides ", shape_str(t.strides()),
           " for shape ", shape_str(t.shape()), "; call .contiguous() first");
}

std::mutex g_mu;
std::unique_ptr<ProcessGroup> g_group;
std::atomic<int> g_inits{0};  // distinct store prefixes for groups made in one process

}  // namespace

void Work::wait() {
  work_->wait();
  keep_.clear();
}

std::unique_ptr<ProcessGroup> ProcessGroup::create(const LaunchEnv& e, const InitOptions& opts) {
  std::unique_ptr<ProcessGroup> pg(new ProcessGroup);
  pg->rank_ = e.rank;
  pg->size_ = e.world_size;
  pg->local_rank_ = e.local_rank;
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
  void* p = t.raw_data();
  t.bump_version();
  auto w = comm_->all_reduce_async(p, p, static_cast<size_t>(t.numel()), qccl_type(t.dtype(), "all_reduce"),
                                   qccl_op(op));
  return std::make_shared<Work>(std::move(w), std::vector<Tensor>{t});
}

WorkPtr ProcessGroup::broadcast_async(const Tensor& t, int root) {
  check_tensor(t, "broadcast");
  QK_CHECK(root >= 0 && root < size_, "broadcast: expected a root in [0, ", size_, "), got ", root);
  void* p = t.raw_data();
  t.bump_version();
  auto w = comm_->broadcast_async(p, p, static_cast<size_t>(t.numel()), qccl_type(t.dtype(), "broadcast"), root);
  return std::make_shared<Work>(std::move(w), std::vector<Tensor>{t});
}

WorkPtr ProcessGroup::all_gather_async(const Tensor& out, const Tensor& in) {
  check_tensor(out, "all_gather (output)");
  check_tensor(in, "all_gather (input)");
  QK_CHECK_TYPE(out.dtype() == in.dtype(), "all_gather: output is ", dtype_name(out.dtype()), ", input is ",
                dtype_name(in.dtype()));
  QK_CHECK(out.numel() == in.numel() * size_, "all_gather: expected an output of ", size_, " x ", in.numel(),
           " = ", in.numel() * size_, " elements, got ", out.numel());
  out.bump_version();
  auto w = comm_->all_gather_async(in.raw_data(), out.raw_data(), static_cast<size_t>(in.numel()),
                                   qccl_type(in.dtype(), "all_gather"));
  return std::make_shared<Work>(std::move(w), std::vector<Tensor>{out, in});
}

WorkPtr ProcessGroup::reduce_scatter_async(const Tensor& out, const Tensor& in, ReduceOp op) {
  check_tensor(out, "reduce_scatter (output)");
  check_tensor(in, "reduce_scatter (input)");
  QK_CHECK_TYPE(out.dtype() == in.dtype(), "reduce_scatter: output is ", dtype_name(out.dtype()),
                ", input is ", dtype_name(in.dtype()));
  QK_CHECK(in.numel() == out.numel() * size_, "reduce_scatter: expected an input of ", size_, " x ",
           out.numel(), " = ", out.numel() * size_, " elements, got ", in.numel());
  out.bump_version();
  auto w = comm_->reduce_scatter_async(in.raw_data(), out.raw_data(), static_cast<size_t>(out.numel()),
                                       qccl_type(in.dtype(), "reduce_scatter"), qccl_op(op));
  return std::make_shared<Work>(std::move(w), std::vector<Tensor>{out, in});
}

void ProcessGroup::barrier() { comm_->barrier(); }

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
