// The C API: validates arguments, queues calls inside a group, runs them, and
// turns exceptions into qcclResult_t with a message for qcclGetLastError.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <functional>
#include <optional>
#include <type_traits>
#include <thread>
#include <vector>

#include "qccl.h"
#include "algo/collectives.h"
#include "backend/backend.h"
#include "comm_init.h"
#include "core/debug.h"
#include "core/errors.h"
#include "core/reduce.h"
#include "core/settings.h"
#include "transport/shared_mem.h"

namespace qccl {
namespace {

thread_local std::string t_last_error;

struct GroupItem {
  qcclComm* comm;
  bool p2p;
  P2POp op;
  std::function<void()> coll;
  void* stream = nullptr;  // the p2p call's, for device backends
};
thread_local int t_group_depth = 0;
thread_local std::vector<GroupItem> t_group;

qcclComm* checked(qcclComm_t c) {
  QK_CHECK(c != nullptr, "Expected a communicator from qcclCommInitRank, got NULL");
  QK_CHECK(c->magic == qcclComm::kMagic,
           "Expected a communicator from qcclCommInitRank, got an invalid or destroyed handle");
  return c;
}

void check_buffers(const void* send, const void* recv, size_t count, const char* what) {
  if (count == 0) return;
  QK_CHECK(send != nullptr, what, ": sendbuff is NULL with count ", count);
  QK_CHECK(recv != nullptr, what, ": recvbuff is NULL with count ", count);
}

void check_type_op(int dt, int op, const char* what) {
  QK_CHECK(dtype_valid(dt), what, ": expected a qcclDataType_t in [0, ", int(qcclNumTypes),
           "), got ", dt);
  QK_CHECK(op_valid(op), what, ": expected a qcclRedOp_t in [0, ", int(qcclNumOps), "), got ", op);
}

void check_root(const qcclComm* c, int root, const char* what) {
  QK_CHECK(root >= 0 && root < c->nranks, what, ": expected root in [0, ", c->nranks, "), got ",
           root);
}

// qcclAllToAllv's arrays, checked and copied (a call queued in a group runs
// after the caller's arrays may be gone): counts and displacements in range,
// buffers present where blocks are not empty, no overlap between the send
// and the receive span nor between receive blocks, this rank's own counts
// equal. Counts between peers are checked where the data meets them.
struct VArgs {
  std::vector<size_t> a;  // send counts, send displs, recv counts, recv displs; n each
  VBlocks blocks() const {
    const size_t n = a.size() / 4;
    return {a.data(), a.data() + n, a.data() + 2 * n, a.data() + 3 * n};
  }
};

// The byte range [lo, hi) the non-empty blocks of one side span (lo == hi: none).
struct ByteSpan {
  uintptr_t lo = UINTPTR_MAX, hi = 0;
  bool empty() const { return lo >= hi; }
};

ByteSpan check_side(const void* buf, const size_t* counts, const size_t* displs, int n, size_t es,
                    const char* side) {
  QK_CHECK(counts != nullptr, "qcclAllToAllv: ", side, "counts is NULL; expected one count per rank (",
           n, ")");
  QK_CHECK(displs != nullptr, "qcclAllToAllv: ", side[0], "displs is NULL; expected one displacement "
           "per rank (", n, ")");
  ByteSpan span;
  const uintptr_t base = reinterpret_cast<uintptr_t>(buf);
  for (int j = 0; j < n; ++j) {
    if (counts[j] == 0) continue;
    QK_CHECK(buf != nullptr, "qcclAllToAllv: ", side, "buff is NULL but ", side, "counts[", j, "] is ",
             counts[j]);
    const size_t end = displs[j] + counts[j];
    QK_CHECK(end >= displs[j] && end <= (UINTPTR_MAX - base) / es, "qcclAllToAllv: ", side,
             " block ", j, " (displacement ", displs[j], ", count ", counts[j],
             " elements) runs past the end of the address space");
    span.lo = std::min(span.lo, base + displs[j] * es);
    span.hi = std::max(span.hi, base + end * es);
  }
  return span;
}

VArgs check_alltoallv(const qcclComm* c, const void* send, const size_t* sendcounts,
                      const size_t* sdispls, const void* recv, const size_t* recvcounts,
                      const size_t* rdispls, qcclDataType_t dt) {
  check_type_op(dt, qcclSum, "qcclAllToAllv");
  const int n = c->nranks;
  const size_t es = dtype_size(dt);
  ByteSpan s = check_side(send, sendcounts, sdispls, n, es, "send");
  ByteSpan r = check_side(recv, recvcounts, rdispls, n, es, "recv");
  QK_CHECK(s.empty() || r.empty() || s.hi <= r.lo || r.hi <= s.lo,
           "qcclAllToAllv: the send blocks (", s.hi - s.lo, " bytes from sendbuff + ",
           s.lo - reinterpret_cast<uintptr_t>(send), ") overlap the receive blocks (", r.hi - r.lo,
           " bytes from recvbuff + ", r.lo - reinterpret_cast<uintptr_t>(recv),
           "); there is no in-place form: receive into a separate buffer");
  QK_CHECK(sendcounts[c->rank] == recvcounts[c->rank], "qcclAllToAllv: this rank (", c->rank,
           ") sends itself ", sendcounts[c->rank], " elements (sendcounts[", c->rank,
           "]) but expects ", recvcounts[c->rank], " (recvcounts[", c->rank, "])");
  // Receive blocks, ordered by displacement, must not overlap: a location
  // written twice would hold whichever peer came last.
  std::vector<int> order;
  for (int j = 0; j < n; ++j)
    if (recvcounts[j]) order.push_back(j);
  std::sort(order.begin(), order.end(), [&](int a, int b) { return rdispls[a] < rdispls[b]; });
  for (size_t k = 1; k < order.size(); ++k) {
    const int a = order[k - 1], b = order[k];
    QK_CHECK(rdispls[a] + recvcounts[a] <= rdispls[b], "qcclAllToAllv: receive blocks ", a,
             " (elements ", rdispls[a], " to ", rdispls[a] + recvcounts[a], ") and ", b, " (from ",
             rdispls[b], ") overlap; each element of recvbuff may be written once");
  }
  VArgs v;
  v.a.reserve(4 * static_cast<size_t>(n));
  for (const size_t* p : {sendcounts, sdispls, recvcounts, rdispls}) v.a.insert(v.a.end(), p, p + n);
  return v;
}

// Runs f and converts what it throws. Errors that leave peers out of step
// (remote, timeout, system) break the communicator for every later call.
template <typename F>
qcclResult_t guarded(qcclComm* comm, F&& f) {
  try {
    f();
    return qcclSuccess;
  } catch (const std::exception& e) {
    qcclResult_t code = result_of(e);
    t_last_error = e.what();
    if (comm && comm->magic == qcclComm::kMagic &&
        (code == qcclRemoteError || code == qcclTimeout || code == qcclSystemError ||
         code == qcclInternalError)) {
      QCCL_WARN("COLL", "comm '{}' rank {}: {}", comm->name, comm->rank, e.what());
      comm->fail(code, e.what());
    }
    return code;
  }
}

// A collective: validated now; run now, or at the outermost GroupEnd. The
// bound call is a plain lambda until it has to wait in a group (a
// std::function of it would allocate on every call).
template <typename F>
qcclResult_t collective(qcclComm_t comm, F&& validate_and_bind) {
  qcclComm* c = nullptr;
  std::optional<std::invoke_result_t<F, qcclComm*>> work;
  qcclResult_t rc = guarded(nullptr, [&] {
    c = checked(comm);
    c->check_usable();
    work.emplace(validate_and_bind(c));
  });
  if (rc != qcclSuccess) return rc;
  if (t_group_depth > 0) {
    t_group.push_back({c, false, {}, std::function<void()>(std::move(*work))});
    return qcclSuccess;
  }
  ActiveCall active(c);
  return guarded(c, *work);
}

qcclResult_t p2p(bool is_send, void* buf, size_t count, qcclDataType_t dt, int peer,
                 qcclComm_t comm, void* stream) {
  qcclComm* c = nullptr;
  P2POp op{};
  qcclResult_t rc = guarded(nullptr, [&] {
    c = checked(comm);
    c->check_usable();
    const char* what = is_send ? "qcclSend" : "qcclRecv";
    QK_CHECK(dtype_valid(dt), what, ": expected a qcclDataType_t, got ", int(dt));
    QK_CHECK(peer >= 0 && peer < c->nranks, what, ": expected peer in [0, ", c->nranks, "), got ", peer);
    QK_CHECK(count == 0 || buf, what, ": buffer is NULL with count ", count);
    op = {is_send, peer, buf, count * dtype_size(dt)};
  });
  if (rc != qcclSuccess) return rc;
  if (t_group_depth > 0) {
    t_group.push_back({c, true, op, {}, stream});
    return qcclSuccess;
  }
  ActiveCall active(c);
  return guarded(c, [&] {
    backend_for(*c, op.buf, nullptr).point_to_point(std::span<const P2POp>(&op, 1), stream);
  });
}

}  // namespace
}  // namespace qccl

using namespace qccl;

extern "C" {

qcclResult_t qcclGetVersion(int* version) {
  if (!version) return qcclInvalidArgument;
  *version = QCCL_VERSION_CODE;
  return qcclSuccess;
}

qcclResult_t qcclGetUniqueId(qcclUniqueId* id) {
  return guarded(nullptr, [&] {
    QK_CHECK(id != nullptr, "qcclGetUniqueId: uniqueId is NULL");
    *id = make_unique_id();
  });
}

qcclResult_t qcclCommInitRankConfig(qcclComm_t* comm, int nranks, qcclUniqueId id, int rank,
                                    qcclConfig_t* config) {
  return guarded(nullptr, [&] {
    QK_CHECK(comm != nullptr, "qcclCommInitRank: comm is NULL");
    *comm = nullptr;
    *comm = init_comm(nranks, id, rank, config).release();
  });
}

qcclResult_t qcclCommInitRank(qcclComm_t* comm, int nranks, qcclUniqueId id, int rank) {
  return qcclCommInitRankConfig(comm, nranks, id, rank, nullptr);
}

qcclResult_t qcclCommSplit(qcclComm_t comm, int color, int key, qcclComm_t* newcomm,
                           qcclConfig_t* config) {
  qcclComm* c = nullptr;
  qcclResult_t rc = guarded(nullptr, [&] {
    c = checked(comm);
    c->check_usable();
    QK_CHECK(newcomm != nullptr, "qcclCommSplit: newcomm is NULL");
    QK_CHECK(color >= 0 || color == QCCL_SPLIT_NOCOLOR, "qcclCommSplit: expected color >= 0 or "
             "QCCL_SPLIT_NOCOLOR, got ", color);
    QK_CHECK_AS(UsageError, t_group_depth == 0, "qcclCommSplit cannot be called inside a group");
    *newcomm = nullptr;
  });
  if (rc != qcclSuccess) return rc;
  ActiveCall active(c);
  return guarded(c, [&] {
    int n = c->nranks;
    int32_t mine[2] = {color, key};
    std::vector<int32_t> all(2 * n);
    all_gather(*c, mine, all.data(), 2, qcclInt32);
    // Members of my color ordered by (key, old rank); the first one hosts the root.
    std::vector<int> members;
    for (int r = 0; r < n; ++r)
      if (color != QCCL_SPLIT_NOCOLOR && all[2 * r] == color) members.push_back(r);
    std::stable_sort(members.begin(), members.end(),
                     [&](int a, int b) { return all[2 * a + 1] < all[2 * b + 1]; });
    qcclUniqueId my_id;
    std::memset(&my_id, 0, sizeof my_id);
    if (!members.empty() && members[0] == c->rank) {
      UniqueIdData d;
      d.token = random_token();
      d.root = start_root(local_address(), d.token, c->timeout_s);
      my_id = encode_unique_id(d);
    }
    std::vector<qcclUniqueId> ids(n);
    all_gather(*c, &my_id, ids.data(), sizeof(qcclUniqueId), qcclUint8);
    if (members.empty()) return;
    int newrank = static_cast<int>(std::find(members.begin(), members.end(), c->rank) - members.begin());
    qcclConfig_t cfg = QCCL_CONFIG_INITIALIZER;
    if (config) cfg = *config;
    if (cfg.timeoutS <= 0) cfg.timeoutS = c->timeout_s;
    *newcomm = init_comm(static_cast<int>(members.size()), ids[members[0]], newrank, &cfg).release();
  });
}

qcclResult_t qcclCommFinalize(qcclComm_t comm) {
  return guarded(nullptr, [&] { checked(comm); });
}

qcclResult_t qcclCommDestroy(qcclComm_t comm) {
  if (!comm) return qcclSuccess;
  return guarded(nullptr, [&] {
    qcclComm* c = checked(comm);
    c->magic = 0;
    delete c;
  });
}

qcclResult_t qcclCommAbort(qcclComm_t comm) {
  if (!comm) return qcclSuccess;
  return guarded(nullptr, [&] {
    qcclComm* c = checked(comm);
    c->aborted.store(true);
    c->fail(qcclInvalidUsage, "aborted by qcclCommAbort");
    // Calls in flight on other threads see the flag within milliseconds.
    for (int i = 0; i < 10000 && c->active_calls.load() > 0; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    if (c->active_calls.load() > 0) {
      QCCL_WARN("INIT", "qcclCommAbort: a call on comm '{}' did not stop; leaking the communicator",
                c->name);
      return;
    }
    c->magic = 0;
    delete c;
  });
}

qcclResult_t qcclCommCount(const qcclComm_t comm, int* count) {
  return guarded(nullptr, [&] {
    QK_CHECK(count, "qcclCommCount: count is NULL");
    *count = checked(comm)->nranks;
  });
}

qcclResult_t qcclCommUserRank(const qcclComm_t comm, int* rank) {
  return guarded(nullptr, [&] {
    QK_CHECK(rank, "qcclCommUserRank: rank is NULL");
    *rank = checked(comm)->rank;
  });
}

qcclResult_t qcclCommGetAsyncError(qcclComm_t comm, qcclResult_t* err) {
  return guarded(nullptr, [&] {
    QK_CHECK(err, "qcclCommGetAsyncError: asyncError is NULL");
    qcclComm* c = checked(comm);
    std::lock_guard<std::mutex> g(c->err_mu);
    *err = c->async_error;
  });
}

qcclResult_t qcclCommGetTraffic(const qcclComm_t comm, qcclCommTraffic_t* traffic) {
  return guarded(nullptr, [&] {
    QK_CHECK(traffic, "qcclCommGetTraffic: traffic is NULL");
    const qcclComm* c = checked(comm);
    traffic->bytesSent = c->bytes_sent.load(std::memory_order_relaxed);
    traffic->bytesReceived = c->bytes_received.load(std::memory_order_relaxed);
    traffic->messagesSent = c->messages_sent.load(std::memory_order_relaxed);
    traffic->messagesReceived = c->messages_received.load(std::memory_order_relaxed);
  });
}

qcclResult_t qcclCommDeviceBackend(const qcclComm_t comm, const void* buff, const char** name) {
  return guarded(nullptr, [&] {
    QK_CHECK(name, "qcclCommDeviceBackend: name is NULL");
    const qcclComm* c = checked(comm);
    *name = nullptr;
    if (buff == nullptr) return;
    if (c->backend_owns && c->backend_owns(buff)) {
      *name = c->backend->name();
    } else if (c->device_owns && c->device_owns(buff)) {
      *name = c->device_kind;
    }
  });
}

const char* qcclGetErrorString(qcclResult_t r) {
  switch (r) {
    case qcclSuccess: return "no error";
    case qcclUnhandledCudaError: return "unhandled cuda error (not used by qccl)";
    case qcclSystemError: return "unhandled system error (see the last error for the call that failed)";
    case qcclInternalError: return "internal error - please report this issue to the qianka developers";
    case qcclInvalidArgument: return "invalid argument";
    case qcclInvalidUsage: return "invalid usage (e.g. the communicator was aborted or broken)";
    case qcclRemoteError: return "remote process exited, closed its connection or sent bad data";
    case qcclInProgress: return "qccl operation in progress";
    case qcclTimeout: return "timeout: a peer did not respond within the deadline";
    default: return "unknown result code";
  }
}

const char* qcclGetLastError(qcclComm_t) { return t_last_error.c_str(); }

qcclResult_t qcclMemAlloc(void** ptr, size_t size) {
  return guarded(nullptr, [&] {
    QK_CHECK(ptr != nullptr, "qcclMemAlloc: ptr is NULL");
    *ptr = nullptr;
    *ptr = shared_alloc(size);
  });
}

qcclResult_t qcclMemFree(void* ptr) {
  return guarded(nullptr, [&] {
    if (ptr) shared_free(ptr);
  });
}

qcclResult_t qcclAllReduce(const void* send, void* recv, size_t count, qcclDataType_t dt,
                           qcclRedOp_t op, qcclComm_t comm, qcclStream_t stream) {
  return collective(comm, [=](qcclComm* c) {
    check_type_op(dt, op, "qcclAllReduce");
    check_buffers(send, recv, count, "qcclAllReduce");
    return ([=] {
      backend_for(*c, send, recv).all_reduce(send, recv, count, dt, op, stream);
    });
  });
}

qcclResult_t qcclBroadcast(const void* send, void* recv, size_t count, qcclDataType_t dt, int root,
                           qcclComm_t comm, qcclStream_t stream) {
  return collective(comm, [=](qcclComm* c) {
    check_type_op(dt, qcclSum, "qcclBroadcast");
    check_root(c, root, "qcclBroadcast");
    QK_CHECK(count == 0 || recv, "qcclBroadcast: recvbuff is NULL with count ", count);
    QK_CHECK(count == 0 || c->rank != root || send, "qcclBroadcast: sendbuff is NULL on the root");
    return ([=] {
      backend_for(*c, send, recv).broadcast(send, recv, count, dt, root, stream);
    });
  });
}

qcclResult_t qcclReduce(const void* send, void* recv, size_t count, qcclDataType_t dt,
                        qcclRedOp_t op, int root, qcclComm_t comm, qcclStream_t stream) {
  return collective(comm, [=](qcclComm* c) {
    check_type_op(dt, op, "qcclReduce");
    check_root(c, root, "qcclReduce");
    QK_CHECK(count == 0 || send, "qcclReduce: sendbuff is NULL with count ", count);
    QK_CHECK(count == 0 || c->rank != root || recv, "qcclReduce: recvbuff is NULL on the root");
    return ([=] {
      backend_for(*c, send, recv).reduce(send, recv, count, dt, op, root, stream);
    });
  });
}

qcclResult_t qcclAllGather(const void* send, void* recv, size_t sendcount, qcclDataType_t dt,
                           qcclComm_t comm, qcclStream_t stream) {
  return collective(comm, [=](qcclComm* c) {
    check_type_op(dt, qcclSum, "qcclAllGather");
    check_buffers(send, recv, sendcount, "qcclAllGather");
    return ([=] {
      backend_for(*c, send, recv).all_gather(send, recv, sendcount, dt, stream);
    });
  });
}

qcclResult_t qcclReduceScatter(const void* send, void* recv, size_t recvcount, qcclDataType_t dt,
                               qcclRedOp_t op, qcclComm_t comm, qcclStream_t stream) {
  return collective(comm, [=](qcclComm* c) {
    check_type_op(dt, op, "qcclReduceScatter");
    check_buffers(send, recv, recvcount, "qcclReduceScatter");
    return ([=] {
      backend_for(*c, send, recv).reduce_scatter(send, recv, recvcount, dt, op, stream);
    });
  });
}

qcclResult_t qcclAllToAll(const void* send, void* recv, size_t count, qcclDataType_t dt,
                          qcclComm_t comm, qcclStream_t stream) {
  return collective(comm, [=](qcclComm* c) {
    check_type_op(dt, qcclSum, "qcclAllToAll");
    check_buffers(send, recv, count, "qcclAllToAll");
    return ([=] {
      backend_for(*c, send, recv).all_to_all(send, recv, count, dt, stream);
    });
  });
}

qcclResult_t qcclAllToAllv(const void* send, const size_t sendcounts[], const size_t sdispls[],
                           void* recv, const size_t recvcounts[], const size_t rdispls[],
                           qcclDataType_t dt, qcclComm_t comm, qcclStream_t stream) {
  return collective(comm, [=](qcclComm* c) {
    VArgs v = check_alltoallv(c, send, sendcounts, sdispls, recv, recvcounts, rdispls, dt);
    return ([=, v = std::move(v)] {
      backend_for(*c, send, recv).all_to_all_v(send, recv, v.blocks(), dt, stream);
    });
  });
}

qcclResult_t qcclSend(const void* send, size_t count, qcclDataType_t dt, int peer,
                      qcclComm_t comm, qcclStream_t stream) {
  return p2p(true, const_cast<void*>(send), count, dt, peer, comm, stream);
}

qcclResult_t qcclRecv(void* recv, size_t count, qcclDataType_t dt, int peer, qcclComm_t comm,
                      qcclStream_t stream) {
  return p2p(false, recv, count, dt, peer, comm, stream);
}

qcclResult_t qcclGroupStart(void) {
  ++t_group_depth;
  return qcclSuccess;
}

qcclResult_t qcclGroupEnd(void) {
  if (t_group_depth == 0) {
    t_last_error = "qcclGroupEnd without a matching qcclGroupStart";
    return qcclInvalidUsage;
  }
  if (--t_group_depth > 0) return qcclSuccess;
  std::vector<GroupItem> items;
  items.swap(t_group);
  // Point-to-point first, all of a communicator's together; then collectives in order.
  std::vector<qcclComm*> comms;
  for (auto& it : items)
    if (it.p2p && std::find(comms.begin(), comms.end(), it.comm) == comms.end()) comms.push_back(it.comm);
  for (qcclComm* c : comms) {
    std::vector<P2POp> ops;
    void* stream = nullptr;
    for (auto& it : items)
      if (it.p2p && it.comm == c) {
        ops.push_back(it.op);
        stream = stream ? stream : it.stream;
      }
    ActiveCall active(c);
    qcclResult_t rc = guarded(c, [&] {
      c->check_usable();
      backend_for(*c, ops[0].buf, nullptr).point_to_point(ops, stream);
    });
    if (rc != qcclSuccess) return rc;
  }
  for (auto& it : items) {
    if (it.p2p) continue;
    ActiveCall active(it.comm);
    qcclResult_t rc = guarded(it.comm, [&] {
      it.comm->check_usable();
      it.coll();
    });
    if (rc != qcclSuccess) return rc;
  }
  return qcclSuccess;
}

}  // extern "C"
