// Checked MPI wrappers (see include/qk/hpc/comm.h).
#include "qk/hpc/comm.h"

#include <climits>

#include "qk/base/error.h"

namespace qk::hpc {

void mpi_fail(int code, const char* what, const char* file, int line) {
  char msg[MPI_MAX_ERROR_STRING] = {0};
  int len = 0;
  MPI_Error_string(code, msg, &len);
  throw Error(detail::str_cat("MPI call `", what, "` failed: ", std::string(msg, len),
                              ". Check that every rank runs the same command and that "
                              "mpirun started all of them."),
              file, line);
}

MpiSession::MpiSession(int* argc, char*** argv) {
  int inited = 0;
  QK_MPI_CHECK(MPI_Initialized(&inited));
  if (inited) return;
  int provided = 0;
  QK_MPI_CHECK(MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided));
  // Errors come back as codes so QK_MPI_CHECK can report them as exceptions.
  QK_MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
  owns_ = true;
}

MpiSession::~MpiSession() {
  if (!owns_) return;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

Comm::Comm(MPI_Comm c, bool owned) : comm_(c), owned_(owned) {
  QK_MPI_CHECK(MPI_Comm_rank(comm_, &rank_));
  QK_MPI_CHECK(MPI_Comm_size(comm_, &size_));
}

Comm::~Comm() {
  if (owned_ && comm_ != MPI_COMM_NULL) {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Comm_free(&comm_);
  }
}

Comm::Comm(Comm&& o) noexcept
    : comm_(o.comm_), owned_(o.owned_), rank_(o.rank_), size_(o.size_) {
  o.comm_ = MPI_COMM_NULL;
  o.owned_ = false;
}

Comm& Comm::operator=(Comm&& o) noexcept {
  if (this != &o) {
    this->~Comm();
    comm_ = o.comm_;
    owned_ = o.owned_;
    rank_ = o.rank_;
    size_ = o.size_;
    o.comm_ = MPI_COMM_NULL;
    o.owned_ = false;
  }
  return *this;
}

Comm Comm::world() { return Comm(MPI_COMM_WORLD, false); }

Comm Comm::split(int color, int key) const {
  MPI_Comm c;
  QK_MPI_CHECK(MPI_Comm_split(comm_, color, key, &c));
  return Comm(c, true);
}

Comm Comm::split_node() const {
  MPI_Comm c;
  QK_MPI_CHECK(MPI_Comm_split_type(comm_, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &c));
  return Comm(c, true);
}

namespace {
int count_of(size_t bytes) {
  QK_CHECK(bytes <= static_cast<size_t>(INT_MAX), "MPI message of ", bytes,
           " bytes is larger than 2 GiB; use more ranks or a smaller problem");
  return static_cast<int>(bytes);
}
}  // namespace

void Comm::barrier() const { QK_MPI_CHECK(MPI_Barrier(comm_)); }

void Comm::bcast(void* buf, size_t bytes, int root) const {
  if (size_ == 1) return;
  QK_MPI_CHECK(MPI_Bcast(buf, count_of(bytes), MPI_BYTE, root, comm_));
}

double Comm::allreduce_sum(double v) const {
  if (size_ == 1) return v;
  double r;
  QK_MPI_CHECK(MPI_Allreduce(&v, &r, 1, MPI_DOUBLE, MPI_SUM, comm_));
  return r;
}

double Comm::allreduce_max(double v) const {
  if (size_ == 1) return v;
  double r;
  QK_MPI_CHECK(MPI_Allreduce(&v, &r, 1, MPI_DOUBLE, MPI_MAX, comm_));
  return r;
}

int64_t Comm::allreduce_max(int64_t v) const {
  if (size_ == 1) return v;
  int64_t r;
  QK_MPI_CHECK(MPI_Allreduce(&v, &r, 1, MPI_INT64_T, MPI_MAX, comm_));
  return r;
}

int64_t Comm::allreduce_min(int64_t v) const {
  if (size_ == 1) return v;
  int64_t r;
  QK_MPI_CHECK(MPI_Allreduce(&v, &r, 1, MPI_INT64_T, MPI_MIN, comm_));
  return r;
}

void Comm::allreduce_sum(double* inout, size_t n) const {
  if (size_ == 1 || n == 0) return;
  QK_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, inout, count_of(n * 8) / 8, MPI_DOUBLE, MPI_SUM, comm_));
}

void Comm::allreduce_max(double* inout, size_t n) const {
  if (size_ == 1 || n == 0) return;
  QK_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, inout, count_of(n * 8) / 8, MPI_DOUBLE, MPI_MAX, comm_));
}

void Comm::send(const void* buf, size_t bytes, int dest, int tag) const {
  QK_MPI_CHECK(MPI_Send(buf, count_of(bytes), MPI_BYTE, dest, tag, comm_));
}

void Comm::recv(void* buf, size_t bytes, int src, int tag) const {
  MPI_Status st;
  QK_MPI_CHECK(MPI_Recv(buf, count_of(bytes), MPI_BYTE, src, tag, comm_, &st));
  int got = 0;
  QK_MPI_CHECK(MPI_Get_count(&st, MPI_BYTE, &got));
  QK_CHECK(static_cast<size_t>(got) == bytes, "Expected a ", bytes, "-byte message from rank ",
           src, ", got ", got, " bytes; the ranks disagree about the problem");
}

MPI_Request Comm::isend(const void* buf, size_t bytes, int dest, int tag) const {
  MPI_Request r;
  QK_MPI_CHECK(MPI_Isend(buf, count_of(bytes), MPI_BYTE, dest, tag, comm_, &r));
  return r;
}

MPI_Request Comm::irecv(void* buf, size_t bytes, int src, int tag) const {
  MPI_Request r;
  QK_MPI_CHECK(MPI_Irecv(buf, count_of(bytes), MPI_BYTE, src, tag, comm_, &r));
  return r;
}

void Comm::wait(MPI_Request* req) {
  if (*req == MPI_REQUEST_NULL) return;
  QK_MPI_CHECK(MPI_Wait(req, MPI_STATUS_IGNORE));
}

void Comm::sendrecv(const void* sbuf, size_t sbytes, int dest, void* rbuf, size_t rbytes, int src,
                    int tag) const {
  QK_MPI_CHECK(MPI_Sendrecv(sbuf, count_of(sbytes), MPI_BYTE, dest, tag, rbuf, count_of(rbytes),
                            MPI_BYTE, src, tag, comm_, MPI_STATUS_IGNORE));
}

int ranks_on_this_node(const Comm& world) { return world.split_node().size(); }

}  // namespace qk::hpc
