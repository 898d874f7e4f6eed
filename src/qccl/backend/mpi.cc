// The MPI backend (QCCL_BACKEND=mpi): each qccl call becomes the matching
// MPI call on an MPI communicator with the same ranks in the same order.
#include "backend/mpi.h"

#include <fmt/ranges.h>

#include <climits>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "comm.h"
#include "core/debug.h"
#include "core/errors.h"
#include "core/reduce.h"

namespace qccl {

namespace {

// ---- MPI errors -> qccl exceptions (api.cc turns those into result codes) ---
[[noreturn]] void throw_mpi(int rc, const char* call, const qcclComm& c) {
  char msg[MPI_MAX_ERROR_STRING] = {0};
  int len = 0, cls = MPI_ERR_UNKNOWN;
  MPI_Error_string(rc, msg, &len);
  MPI_Error_class(rc, &cls);
  std::string fn(call);  // "MPI_Allreduce(sp, rp, ...)" -> "MPI_Allreduce"
  fn = fn.substr(0, fn.find('('));
  std::string where = fmt::format("{} on comm '{}' rank {} (QCCL_BACKEND=mpi) failed: {}", fn,
                                  c.name, c.rank, msg);
  switch (cls) {
    case MPI_ERR_BUFFER: case MPI_ERR_COUNT: case MPI_ERR_TYPE: case MPI_ERR_TAG:
    case MPI_ERR_RANK: case MPI_ERR_ROOT: case MPI_ERR_OP: case MPI_ERR_ARG:
      QK_THROW(qk::ValueError, where);
    case MPI_ERR_COMM: case MPI_ERR_GROUP: case MPI_ERR_REQUEST:
      QK_THROW(UsageError, where);
    case MPI_ERR_TRUNCATE:  // a peer sent more than was posted: ranks disagree on the call
      QK_THROW(RemoteError, where, " (do all ranks pass the same count?)");
    case MPI_ERR_INTERN:
      QK_THROW(qk::InternalError, where);
    default:
      QK_THROW(qk::IoError, where);
  }
}

#define QCCL_MPI(call, c)                             \
  do {                                                \
    int rc_ = (call);                                 \
    if (rc_ != MPI_SUCCESS) throw_mpi(rc_, #call, c); \
  } while (0)

// ---- types and ops ----------------------------------------------------------
// f16/bf16 have no MPI type: they travel as MPI_UINT16_T and reduce with user
// ops that run qccl's own kernel (f32, rounded once per step), so results
// match the native engine's.
template <qcclDataType_t T, qcclRedOp_t Op>
void half_op(void* in, void* inout, int* len, MPI_Datatype*) {
  reduce(inout, in, inout, static_cast<size_t>(*len), T, Op);
}

struct HalfOps {
  MPI_Op op[2][4];  // [f16, bf16][sum, prod, max, min]
};

const HalfOps& half_ops() {
  static HalfOps ops;
  static std::once_flag once;
  std::call_once(once, [] {
    MPI_User_function* fns[2][4] = {
        {half_op<qcclFloat16, qcclSum>, half_op<qcclFloat16, qcclProd>,
         half_op<qcclFloat16, qcclMax>, half_op<qcclFloat16, qcclMin>},
        {half_op<qcclBfloat16, qcclSum>, half_op<qcclBfloat16, qcclProd>,
         half_op<qcclBfloat16, qcclMax>, half_op<qcclBfloat16, qcclMin>}};
    for (int t = 0; t < 2; ++t)
      for (int o = 0; o < 4; ++o) MPI_Op_create(fns[t][o], /*commute=*/1, &ops.op[t][o]);
  });
  return ops;
}

MPI_Datatype mpi_type(qcclDataType_t t) {
  switch (t) {
    case qcclInt8: return MPI_INT8_T;
    case qcclUint8: return MPI_UINT8_T;
    case qcclInt16: return MPI_INT16_T;
    case qcclUint16: return MPI_UINT16_T;
    case qcclInt32: return MPI_INT32_T;
    case qcclUint32: return MPI_UINT32_T;
    case qcclInt64: return MPI_INT64_T;
    case qcclUint64: return MPI_UINT64_T;
    case qcclFloat16: case qcclBfloat16: return MPI_UINT16_T;
    case qcclFloat32: return MPI_FLOAT;
    case qcclFloat64: return MPI_DOUBLE;
    default: QK_THROW(qk::ValueError, "no MPI type for qccl type ", int(t));
  }
}

// Avg reduces as a sum; the caller divides the result (finish_avg).
MPI_Op mpi_op(qcclDataType_t t, qcclRedOp_t op) {
  int o = op == qcclAvg ? 0 : static_cast<int>(op);
  if (t == qcclFloat16 || t == qcclBfloat16) return half_ops().op[t == qcclBfloat16][o];
  const MPI_Op builtin[4] = {MPI_SUM, MPI_PROD, MPI_MAX, MPI_MIN};
  return builtin[o];
}

// MPI counts are int: larger calls go in pieces (reductions, broadcast) or are refused.
constexpr size_t kMaxCount = size_t(1) << 30;

int checked_count(size_t n, const char* what) {
  QK_CHECK(n <= size_t(INT_MAX), what, ": count ", n, " is larger than MPI's int counts allow "
           "with QCCL_BACKEND=mpi; split the call or use the native backend");
  return static_cast<int>(n);
}

bool inside(const void* p, const void* base, size_t bytes) {
  auto a = reinterpret_cast<uintptr_t>(p), b = reinterpret_cast<uintptr_t>(base);
  return a >= b && a < b + bytes;
}

// ---- the backend ------------------------------------------------------------
class MpiBackend final : public Backend {
 public:
  MpiBackend(qcclComm& c, MPI_Comm comm) : c_(c), comm_(comm) {}
  ~MpiBackend() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized && comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
  }
  const char* name() const override { return "mpi"; }

  void all_reduce(const void* s, void* r, size_t n, qcclDataType_t t, qcclRedOp_t op, void*) override {
    size_t es = dtype_size(t);
    for (size_t off = 0; off < n; off += kMaxCount) {
      int k = static_cast<int>(std::min(kMaxCount, n - off));
      char* rp = static_cast<char*>(r) + off * es;
      const void* sp = s == r ? MPI_IN_PLACE : static_cast<const char*>(s) + off * es;
      QCCL_MPI(MPI_Allreduce(sp, rp, k, mpi_type(t), mpi_op(t, op), comm_), c_);
    }
    if (op == qcclAvg) finish_avg(r, n, t, c_.nranks);
  }

  void broadcast(const void* s, void* r, size_t n, qcclDataType_t t, int root, void*) override {
    size_t es = dtype_size(t);
    if (c_.rank == root && s != r && n) std::memmove(r, s, n * es);
    for (size_t off = 0; off < n; off += kMaxCount) {
      int k = static_cast<int>(std::min(kMaxCount, n - off));
      QCCL_MPI(MPI_Bcast(static_cast<char*>(r) + off * es, k, mpi_type(t), root, comm_), c_);
    }
  }

  void reduce(const void* s, void* r, size_t n, qcclDataType_t t, qcclRedOp_t op, int root,
              void*) override {
    size_t es = dtype_size(t);
    bool me = c_.rank == root;
    for (size_t off = 0; off < n; off += kMaxCount) {
      int k = static_cast<int>(std::min(kMaxCount, n - off));
      const void* sp = me && s == r ? MPI_IN_PLACE : static_cast<const char*>(s) + off * es;
      void* rp = me ? static_cast<char*>(r) + off * es : nullptr;
      QCCL_MPI(MPI_Reduce(sp, rp, k, mpi_type(t), mpi_op(t, op), root, comm_), c_);
    }
    if (me && op == qcclAvg) finish_avg(r, n, t, c_.nranks);
  }

  void all_gather(const void* s, void* r, size_t n, qcclDataType_t t, void*) override {
    if (n == 0) return;
    int k = checked_count(n, "qcclAllGather");
    size_t blk = n * dtype_size(t);
    const void* sp = s == static_cast<char*>(r) + c_.rank * blk ? MPI_IN_PLACE : s;
    QCCL_MPI(MPI_Allgather(sp, k, mpi_type(t), r, k, mpi_type(t), comm_), c_);
  }

  void reduce_scatter(const void* s, void* r, size_t n, qcclDataType_t t, qcclRedOp_t op,
                      void*) override {
    if (n == 0) return;
    int k = checked_count(n, "qcclReduceScatter");
    size_t blk = n * dtype_size(t);
    // MPI's in-place form leaves the result at the start of the buffer, not at
    // this rank's block (qccl's in-place convention): go through a temporary.
    bool overlap = inside(r, s, blk * c_.nranks);
    void* out = overlap ? tmp(blk) : r;
    QCCL_MPI(MPI_Reduce_scatter_block(s, out, k, mpi_type(t), mpi_op(t, op), comm_), c_);
    if (overlap) std::memcpy(r, out, blk);
    if (op == qcclAvg) finish_avg(r, n, t, c_.nranks);
  }

  void all_to_all(const void* s, void* r, size_t n, qcclDataType_t t, void*) override {
    if (n == 0) return;
    int k = checked_count(n, "qcclAllToAll");
    const void* sp = s == r ? MPI_IN_PLACE : s;
    QCCL_MPI(MPI_Alltoall(sp, k, mpi_type(t), r, k, mpi_type(t), comm_), c_);
  }

  // MPI_Alltoallv, after every rank has checked every pair's counts: MPI
  // would under-fill or truncate a receive whose count differs from the
  // send. Its counts and displacements are int; when any rank's do not fit,
  // all ranks (they gathered that too) move the blocks as point-to-point
  // messages instead, which go in pieces.
  void all_to_all_v(const void* s, void* r, const VBlocks& v, qcclDataType_t t, void*) override {
    const int n = c_.nranks;
    bool fits = true;
    for (int j = 0; j < n; ++j)
      fits = fits && v.send_counts[j] + v.send_displs[j] <= size_t(INT_MAX) &&
             v.recv_counts[j] + v.recv_displs[j] <= size_t(INT_MAX);
    const size_t stride = 2 * static_cast<size_t>(n) + 1;
    std::vector<uint64_t> mine(stride), all(stride * n);
    for (int j = 0; j < n; ++j) {
      mine[j] = v.send_counts[j];
      mine[n + j] = v.recv_counts[j];
    }
    mine[2 * n] = fits;
    QCCL_MPI(MPI_Allgather(mine.data(), static_cast<int>(stride), MPI_UINT64_T, all.data(),
                           static_cast<int>(stride), MPI_UINT64_T, comm_), c_);
    check_all_to_all_v_counts(c_, all, stride);
    for (int i = 0; i < n; ++i) fits = fits && all[i * stride + 2 * n] != 0;
    const size_t es = dtype_size(t);
    if (!fits) {
      std::vector<P2POp> ops;
      for (int j = 0; j < n; ++j) {
        char* sb = v.send_counts[j] ? const_cast<char*>(static_cast<const char*>(s)) + v.send_displs[j] * es
                                    : nullptr;
        char* rb = v.recv_counts[j] ? static_cast<char*>(r) + v.recv_displs[j] * es : nullptr;
        ops.push_back({true, j, sb, v.send_counts[j] * es});
        ops.push_back({false, j, rb, v.recv_counts[j] * es});
      }
      point_to_point(ops, nullptr);
      return;
    }
    std::vector<int> a(4 * n);
    for (int j = 0; j < n; ++j) {
      a[j] = static_cast<int>(v.send_counts[j]);
      a[n + j] = static_cast<int>(v.send_displs[j]);
      a[2 * n + j] = static_cast<int>(v.recv_counts[j]);
      a[3 * n + j] = static_cast<int>(v.recv_displs[j]);
    }
    // MPI reads no data through a NULL buffer whose counts are all zero, but
    // some MPIs refuse the pointer: give them a valid one.
    static char none;
    const void* sp = s ? s : &none;
    void* rp = r ? r : &none;
    QCCL_MPI(MPI_Alltoallv(sp, a.data(), a.data() + n, mpi_type(t), rp, a.data() + 2 * n,
                           a.data() + 3 * n, mpi_type(t), comm_), c_);
  }

  // All posted at once (a group's exchange cannot deadlock); MPI keeps the
  // messages between a pair in order, as qccl promises.
  void point_to_point(std::span<const P2POp> ops, void*) override {
    std::vector<MPI_Request> reqs;
    std::vector<size_t> want;  // bytes expected per request (receives), to catch short messages
    for (const P2POp& op : ops) {
      size_t off = 0;
      do {  // a zero-byte message still travels, so both sides agree on the count of messages
        int k = static_cast<int>(std::min(kMaxCount, op.bytes - off));
        char* p = static_cast<char*>(op.buf) + off;
        MPI_Request rq;
        if (op.is_send)
          QCCL_MPI(MPI_Isend(p, k, MPI_BYTE, op.peer, kTag, comm_, &rq), c_);
        else
          QCCL_MPI(MPI_Irecv(p, k, MPI_BYTE, op.peer, kTag, comm_, &rq), c_);
        reqs.push_back(rq);
        want.push_back(op.is_send ? SIZE_MAX : static_cast<size_t>(k));
        off += k;
      } while (off < op.bytes);
    }
    std::vector<MPI_Status> st(reqs.size());
    int rc = MPI_Waitall(static_cast<int>(reqs.size()), reqs.data(), st.data());
    if (rc == MPI_ERR_IN_STATUS) {
      for (auto& s : st)
        if (s.MPI_ERROR != MPI_SUCCESS && s.MPI_ERROR != MPI_ERR_PENDING) throw_mpi(s.MPI_ERROR, "MPI_Waitall", c_);
    }
    if (rc != MPI_SUCCESS) throw_mpi(rc, "MPI_Waitall", c_);
    for (size_t i = 0; i < st.size(); ++i) {
      if (want[i] == SIZE_MAX) continue;
      int got = 0;
      MPI_Get_count(&st[i], MPI_BYTE, &got);
      if (static_cast<size_t>(got) != want[i])
        QCCL_REMOTE_ERROR(c_.peer_name(st[i].MPI_SOURCE),
                          " sent ", got, " bytes where qcclRecv expected ", want[i],
                          " (QCCL_BACKEND=mpi; do both sides pass the same count and type?)");
    }
  }

 private:
  static constexpr int kTag = 0x51;  // this MPI communicator carries only qccl's messages
  void* tmp(size_t bytes) {
    if (tmp_.size() < bytes) tmp_.resize(bytes);
    return tmp_.data();
  }
  qcclComm& c_;
  MPI_Comm comm_;
  std::vector<char> tmp_;
};

}  // namespace

std::unique_ptr<Backend> make_mpi_backend(qcclComm& c) {
  qk::qccl::ensure_mpi_initialized();
  int wrank = 0, wsize = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &wrank);
  MPI_Comm_size(MPI_COMM_WORLD, &wsize);
  // Which MPI_COMM_WORLD rank each qccl rank is, over qccl's own connections.
  int32_t mine[2] = {wrank, wsize};
  std::vector<int32_t> all(2 * c.nranks);
  qccl::all_gather(c, mine, all.data(), 2, qcclInt32);
  std::vector<int> world(c.nranks);
  std::vector<int> owner(wsize, -1);
  for (int r = 0; r < c.nranks; ++r) {
    world[r] = all[2 * r];
    QK_CHECK_AS(UsageError, all[2 * r + 1] == wsize && world[r] >= 0 && world[r] < wsize,
                "QCCL_BACKEND=mpi: ", c.peer_name(r), " is MPI rank ", world[r], " of ",
                all[2 * r + 1], " but this rank is in an MPI world of ", wsize,
                ": all ranks of a communicator must be ranks of one MPI job (one mpirun)");
    QK_CHECK_AS(UsageError, owner[world[r]] < 0, "QCCL_BACKEND=mpi: ", c.peer_name(owner[world[r]]),
                " and ", c.peer_name(r), " are both MPI_COMM_WORLD rank ", world[r],
                ": were the ranks started by one mpirun? (separately started processes are each "
                "an MPI job of their own)");
    owner[world[r]] = r;
  }
  MPI_Group wg = MPI_GROUP_NULL, g = MPI_GROUP_NULL;
  MPI_Comm comm = MPI_COMM_NULL;
  QCCL_MPI(MPI_Comm_group(MPI_COMM_WORLD, &wg), c);
  QCCL_MPI(MPI_Group_incl(wg, c.nranks, world.data(), &g), c);
  // Collective over the group's members only, so sub-communicators need no
  // help from the other ranks. The tag keeps concurrent creations apart.
  int tag = (c.token[0] | (c.token[1] << 8)) & 0x7fff;
  int rc = MPI_Comm_create_group(MPI_COMM_WORLD, g, tag, &comm);
  MPI_Group_free(&g);
  MPI_Group_free(&wg);
  if (rc != MPI_SUCCESS) throw_mpi(rc, "MPI_Comm_create_group", c);
  MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
  MPI_Comm_set_name(comm, c.name.c_str());
  int r = -1;
  MPI_Comm_rank(comm, &r);
  QK_CHECK_AS(qk::InternalError, r == c.rank, "MPI communicator rank ", r, " != qccl rank ", c.rank);
  QCCL_INFO("INIT", "comm '{}' rank {}: MPI communicator over MPI_COMM_WORLD ranks [{}]", c.name,
            c.rank, fmt::join(world, ", "));
  return std::make_unique<MpiBackend>(c, comm);
}

}  // namespace qccl
