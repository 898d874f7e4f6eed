// The NCCL backend: device buffers through NCCL on the current CUDA device.
//
// Chosen with QCCL_BACKEND=nccl, or (QCCL_BACKEND=auto, the default) for the
// first call whose buffers are device memory (cudaPointerGetAttributes). The
// qccl communicator is set up as always; rank 0 then creates an ncclUniqueId
// and qccl's own broadcast gives it to the others, so NCCL needs no launcher
// of its own. The NCCL communicator is non-blocking and every call waits for
// its stream with qccl's deadline: a stalled peer aborts the NCCL communicator
// and the call returns qcclTimeout instead of hanging, as qccl promises.
// Built into its own library (qianka::qccl_nccl) when CUDA and NCCL are found.
#include <cuda_runtime.h>
#include <nccl.h>

#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "backend/backend.h"
#include "comm.h"
#include "core/debug.h"
#include "core/errors.h"
#include "core/reduce.h"

namespace qccl {

namespace {

// ---- errors -----------------------------------------------------------------
[[noreturn]] void throw_nccl(ncclResult_t r, const char* call, const qcclComm& c, ncclComm_t nc) {
  const char* detail = nc ? ncclGetLastError(nc) : "";
  std::string what = fmt::format("{} on comm '{}' rank {} (NCCL backend) failed: {}{}{}", call,
                                 c.name, c.rank, ncclGetErrorString(r), detail && *detail ? ": " : "",
                                 detail ? detail : "");
  switch (r) {
    case ncclInvalidArgument: QK_THROW(qk::ValueError, what);
    case ncclInvalidUsage: QK_THROW(UsageError, what);
    case ncclRemoteError: QK_THROW(RemoteError, what);
    case ncclInternalError: QK_THROW(qk::InternalError, what);
    default: QK_THROW(qk::IoError, what);  // system and CUDA errors
  }
}

void check_cuda(cudaError_t e, const char* call, const qcclComm& c) {
  if (e == cudaSuccess) return;
  QK_THROW(qk::IoError, call, " on comm '", c.name, "' rank ", c.rank, " (NCCL backend) failed: ",
           cudaGetErrorName(e), ": ", cudaGetErrorString(e));
}

ncclDataType_t nccl_type(qcclDataType_t t) {
  switch (t) {
    case qcclInt8: return ncclInt8;
    case qcclUint8: return ncclUint8;
    case qcclInt32: return ncclInt32;
    case qcclUint32: return ncclUint32;
    case qcclInt64: return ncclInt64;
    case qcclUint64: return ncclUint64;
    case qcclFloat16: return ncclFloat16;
    case qcclBfloat16: return ncclBfloat16;
    case qcclFloat32: return ncclFloat32;
    case qcclFloat64: return ncclFloat64;
    default:
      QK_THROW(qk::ValueError, "NCCL has no ", dtype_name(t), " type; use int32 (or the native "
               "backend for host buffers)");
  }
}

ncclRedOp_t nccl_op(qcclRedOp_t op) {
  switch (op) {
    case qcclSum: return ncclSum;
    case qcclProd: return ncclProd;
    case qcclMax: return ncclMax;
    case qcclMin: return ncclMin;
    default: return ncclAvg;
  }
}

// ---- the backend ------------------------------------------------------------
class NcclBackend final : public Backend {
 public:
  NcclBackend(qcclComm& c, ncclComm_t nc, cudaStream_t s) : c_(c), nc_(nc), stream_(s) {}
  ~NcclBackend() override {
    if (nc_) ncclCommDestroy(nc_);
    if (scratch_) cudaFree(scratch_);
    if (stream_) cudaStreamDestroy(stream_);
  }
  const char* name() const override { return "nccl"; }

  void all_reduce(const void* s, void* r, size_t n, qcclDataType_t t, qcclRedOp_t op, void* st) override {
    run("ncclAllReduce", st, [&](cudaStream_t q) {
      return ncclAllReduce(s, r, n, nccl_type(t), nccl_op(op), nc_, q);
    });
  }
  void broadcast(const void* s, void* r, size_t n, qcclDataType_t t, int root, void* st) override {
    run("ncclBroadcast", st, [&](cudaStream_t q) {
      return ncclBroadcast(s, r, n, nccl_type(t), root, nc_, q);
    });
  }
  void reduce(const void* s, void* r, size_t n, qcclDataType_t t, qcclRedOp_t op, int root,
              void* st) override {
    run("ncclReduce", st, [&](cudaStream_t q) {
      return ncclReduce(s, r, n, nccl_type(t), nccl_op(op), root, nc_, q);
    });
  }
  void all_gather(const void* s, void* r, size_t n, qcclDataType_t t, void* st) override {
    run("ncclAllGather", st, [&](cudaStream_t q) {
      return ncclAllGather(s, r, n, nccl_type(t), nc_, q);
    });
  }
  void reduce_scatter(const void* s, void* r, size_t n, qcclDataType_t t, qcclRedOp_t op,
                      void* st) override {
    run("ncclReduceScatter", st, [&](cudaStream_t q) {
      return ncclReduceScatter(s, r, n, nccl_type(t), nccl_op(op), nc_, q);
    });
  }
  void all_to_all(const void* s, void* r, size_t n, qcclDataType_t t, void* st) override {
    run("ncclAlltoAll", st, [&](cudaStream_t q) {
      const void* src = s;
      if (s == r && n) {  // NCCL documents no in-place all-to-all: send from a copy
        size_t bytes = n * dtype_size(t) * c_.nranks;
        src = device_scratch(bytes);
        check_cuda(cudaMemcpyAsync(const_cast<void*>(src), s, bytes, cudaMemcpyDeviceToDevice, q),
                   "cudaMemcpyAsync", c_);
      }
      return ncclAlltoAll(src, r, n, nccl_type(t), nc_, q);
    });
  }
  // Grouped ncclSend/ncclRecv in pairwise order, after the counts were
  // checked over qccl's own connections: NCCL would wait on a receive whose
  // count differs from the send until the deadline aborts it.
  void all_to_all_v(const void* s, void* r, const VBlocks& v, qcclDataType_t t, void* st) override {
    const int n = c_.nranks, me = c_.rank;
    std::vector<uint64_t> mine(2 * n), all(2 * n * n);
    for (int j = 0; j < n; ++j) {
      mine[j] = v.send_counts[j];
      mine[n + j] = v.recv_counts[j];
    }
    qccl::all_gather(c_, mine.data(), all.data(), 2 * n, qcclUint64);
    check_all_to_all_v_counts(c_, all, 2 * n);
    const size_t es = dtype_size(t);
    const ncclDataType_t nt = nccl_type(t);
    // Empty blocks are left out (as torch's NCCL all-to-all does): the counts
    // are known to match, so both sides leave out the same ones.
    run("ncclSend/ncclRecv (alltoallv)", st, [&](cudaStream_t q) {
      ncclResult_t rc = ncclGroupStart();
      for (int k = 0; k < n && rc == ncclSuccess; ++k) {
        const int to = (me + k) % n, from = (me - k + n) % n;
        if (v.send_counts[to])
          rc = ncclSend(static_cast<const char*>(s) + v.send_displs[to] * es, v.send_counts[to], nt, to,
                        nc_, q);
        if (rc == ncclSuccess && v.recv_counts[from])
          rc = ncclRecv(static_cast<char*>(r) + v.recv_displs[from] * es, v.recv_counts[from], nt, from,
                        nc_, q);
      }
      ncclResult_t e = ncclGroupEnd();
      return rc != ncclSuccess ? rc : e;
    });
  }
  void point_to_point(std::span<const P2POp> ops, void* st) override {
    run("ncclSend/ncclRecv", st, [&](cudaStream_t q) {
      ncclResult_t r = ncclGroupStart();
      for (const P2POp& op : ops) {
        if (r != ncclSuccess) break;
        r = op.is_send ? ncclSend(op.buf, op.bytes, ncclUint8, op.peer, nc_, q)
                       : ncclRecv(op.buf, op.bytes, ncclUint8, op.peer, nc_, q);
      }
      ncclResult_t e = ncclGroupEnd();
      return r != ncclSuccess ? r : e;
    });
  }

 private:
  // Enqueues on the caller's stream (or ours) and waits for it with qccl's
  // deadline and abort flag: qccl calls return when their buffers are ready.
  template <typename F>
  void run(const char* call, void* user_stream, F&& enqueue) {
    QK_CHECK_AS(UsageError, nc_, "comm '", c_.name, "' rank ", c_.rank,
                ": its NCCL communicator was aborted by an earlier error");
    cudaStream_t q = user_stream ? static_cast<cudaStream_t>(user_stream) : stream_;
    ncclResult_t r = enqueue(q);
    if (r != ncclSuccess && r != ncclInProgress) throw_nccl(r, call, c_, nc_);
    Deadline dl(c_.timeout_s);
    for (int spins = 0;; ++spins) {
      ncclResult_t ar = ncclSuccess;
      ncclCommGetAsyncError(nc_, &ar);
      if (ar != ncclSuccess && ar != ncclInProgress) abort_with(ar, call);
      if (ar == ncclSuccess) {
        cudaError_t e = cudaStreamQuery(q);
        if (e == cudaSuccess) return;
        if (e != cudaErrorNotReady) check_cuda(e, call, c_);
      }
      if (c_.aborted.load()) {  // qcclCommAbort: qcclInvalidUsage, as on the native engine
        ncclCommAbort(nc_);
        nc_ = nullptr;
        QK_THROW(UsageError, call, " on comm '", c_.name, "' rank ", c_.rank,
                 " was interrupted: the communicator was aborted (qcclCommAbort)");
      }
      if (dl.expired()) {
        ncclCommAbort(nc_);
        nc_ = nullptr;
        QK_THROW(qk::TimeoutError, call, " on comm '", c_.name, "' rank ", c_.rank, " timed out after ",
                 dl.total_seconds(), " s (NCCL backend; a peer is stalled or dead; QCCL_TIMEOUT_S "
                 "/ config.timeoutS sets the deadline)");
      }
      if (spins > 1000) std::this_thread::yield();
    }
  }
  [[noreturn]] void abort_with(ncclResult_t r, const char* call) {
    std::string detail = ncclGetLastError(nc_);
    ncclCommAbort(nc_);
    nc_ = nullptr;
    QK_THROW(RemoteError, call, " on comm '", c_.name, "' rank ", c_.rank, " (NCCL backend): ",
             ncclGetErrorString(r), detail.empty() ? "" : ": ", detail);
  }
  void* device_scratch(size_t bytes) {
    if (scratch_bytes_ < bytes) {
      if (scratch_) cudaFree(scratch_);
      scratch_ = nullptr;
      scratch_bytes_ = 0;
      check_cuda(cudaMalloc(&scratch_, bytes), "cudaMalloc", c_);
      scratch_bytes_ = bytes;
    }
    return scratch_;
  }

  qcclComm& c_;
  ncclComm_t nc_;
  cudaStream_t stream_;
  void* scratch_ = nullptr;
  size_t scratch_bytes_ = 0;
};

bool cuda_usable() {
  static const bool ok = [] {
    int n = 0;
    bool found = cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
    cudaGetLastError();  // clears the error of a machine without a driver or device
    return found;
  }();
  return ok;
}

bool is_device_pointer(const void* p) {
  if (!cuda_usable()) return false;
  cudaPointerAttributes a{};
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
}

// Collective over c: rank 0's ncclUniqueId travels over qccl's own broadcast.
std::unique_ptr<Backend> make_nccl_backend(qcclComm& c) {
  QK_CHECK_AS(UsageError, cuda_usable(), "comm '", c.name, "' rank ", c.rank,
              ": the NCCL backend needs a CUDA device, and cudaGetDeviceCount found none");
  int dev = -1;
  check_cuda(cudaGetDevice(&dev), "cudaGetDevice", c);
  struct {
    ncclUniqueId id;
    int32_t ok;
  } msg{};
  std::string why;
  if (c.rank == 0) {
    ncclResult_t r = ncclGetUniqueId(&msg.id);
    msg.ok = r == ncclSuccess;
    if (!msg.ok) why = ncclGetErrorString(r);
  }
  qccl::broadcast(c, &msg, &msg, sizeof msg, qcclUint8, 0);  // rank 0 sends even when it failed
  QK_CHECK_AS(qk::IoError, msg.ok, "ncclGetUniqueId failed on rank 0",
              c.rank == 0 ? ": " + why : std::string(" (see its log)"));
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = 0;  // so that init and calls can be waited for with a deadline
  cfg.commName = c.name.c_str();
  ncclComm_t nc = nullptr;
  ncclResult_t r = ncclCommInitRankConfig(&nc, c.nranks, msg.id, c.rank, &cfg);
  if (r != ncclSuccess && r != ncclInProgress) throw_nccl(r, "ncclCommInitRankConfig", c, nc);
  Deadline dl(c.timeout_s);
  for (;;) {
    ncclResult_t ar = ncclInProgress;
    ncclCommGetAsyncError(nc, &ar);
    if (ar == ncclSuccess) break;
    if (ar != ncclInProgress || dl.expired()) {
      std::string detail = ncclGetLastError(nc);
      ncclCommAbort(nc);
      if (ar == ncclInProgress)
        QK_THROW(qk::TimeoutError, "ncclCommInitRankConfig on comm '", c.name, "' rank ", c.rank,
                 " timed out after ", dl.total_seconds(), " s");
      QK_THROW(RemoteError, "ncclCommInitRankConfig on comm '", c.name, "' rank ", c.rank,
               " failed: ", ncclGetErrorString(ar), detail.empty() ? "" : ": ", detail);
    }
    std::this_thread::yield();
  }
  cudaStream_t s = nullptr;
  cudaError_t e = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  if (e != cudaSuccess) {
    ncclCommDestroy(nc);
    check_cuda(e, "cudaStreamCreateWithFlags", c);
  }
  int version = 0;
  ncclGetVersion(&version);
  QCCL_INFO("INIT", "comm '{}' rank {}: NCCL {} communicator on CUDA device {}", c.name, c.rank,
            version, dev);
  return std::make_unique<NcclBackend>(c, nc, s);
}

// Registered at start-up; the library is linked whole (src/qccl/CMakeLists.txt).
const bool registered = [] {
  register_backend({"nccl", make_nccl_backend, is_device_pointer});
  return true;
}();

}  // namespace

}  // namespace qccl
