// The perf harness (qk/qccl/perf.h): one rank's buffers, calls, checks and
// timed loop (PerfRank), the sweep over sizes, the table.
#include "qk/qccl/perf.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "perf/perf_rank.h"
#include "qk/base/error.h"
#include "qk/qccl/check_data.h"

namespace qk::qccl {

using check::get;
using check::reduced;
using check::set;
using check::value;

// ---- collectives and sizes -------------------------------------------------

const std::vector<PerfCollectiveInfo>& perf_collectives() {
  static const std::vector<PerfCollectiveInfo> all{
      {"all_reduce", PerfCollective::all_reduce, true, false, true},
      {"broadcast", PerfCollective::broadcast, false, true, true},
      {"reduce", PerfCollective::reduce, true, true, true},
      {"all_gather", PerfCollective::all_gather, false, false, true},
      {"reduce_scatter", PerfCollective::reduce_scatter, true, false, true},
      {"alltoall", PerfCollective::alltoall, false, false, true},
      {"alltoallv", PerfCollective::alltoallv, false, false, false}};
  return all;
}

const PerfCollectiveInfo& perf_collective_info(PerfCollective c) {
  for (const PerfCollectiveInfo& i : perf_collectives())
    if (i.collective == c) return i;
  QK_THROW(ValueError, "no collective numbered ", static_cast<int>(c));
}

const PerfCollectiveInfo* find_perf_collective(std::string_view name) {
  for (const PerfCollectiveInfo& i : perf_collectives())
    if (name == i.name) return &i;
  return nullptr;
}

const char* const kAllToAllvPattern =
    "alltoallv: each rank sends `size` bytes in all, rank r giving rank j the share (2k+1)/n^2 "
    "of them, k = (j - r) mod n (skewed around the mean 1/n; each rank also receives `size`); "
    "out of place only";

std::vector<size_t> alltoallv_shares(size_t count, int n) {
  QK_CHECK(n >= 1, "alltoallv_shares: expected at least one rank, got ", n);
  const size_t nn = static_cast<size_t>(n) * static_cast<size_t>(n);
  std::vector<size_t> share(n);
  size_t given = 0;
  for (int k = 0; k < n - 1; ++k) {
    const size_t w = 2 * static_cast<size_t>(k) + 1;
    share[k] = count / nn * w + count % nn * w / nn;  // floor(count * w / n^2) without overflow
    given += share[k];
  }
  share[n - 1] = count - given;
  return share;
}

std::vector<size_t> perf_sizes(size_t lo, size_t hi, double factor) {
  QK_CHECK(lo <= hi, "perf sizes: the smallest (", lo, " B) is larger than the largest (", hi, " B)");
  QK_CHECK(factor > 1.0, "perf sizes: expected a factor > 1, got ", factor);
  std::vector<size_t> sizes;
  for (double sz = static_cast<double>(lo); sz <= static_cast<double>(hi) * 1.0000001;
       sz = std::max(sz * factor, sz + 1)) {
    sizes.push_back(static_cast<size_t>(sz));
    if (sz == 0 && lo == 0) sz = 0.5;  // then 1
  }
  return sizes;
}

namespace {
bool per_rank_blocks(PerfCollective c) {
  return c == PerfCollective::all_gather || c == PerfCollective::reduce_scatter || c == PerfCollective::alltoall;
}
}  // namespace

size_t perf_count(PerfCollective c, size_t size_bytes, size_t element_bytes, int nranks) {
  size_t count = size_bytes / element_bytes;
  if (per_rank_blocks(c)) count /= static_cast<size_t>(nranks);
  return count;
}

size_t perf_bytes(PerfCollective c, size_t count, size_t element_bytes, int nranks) {
  return count * element_bytes * (per_rank_blocks(c) ? static_cast<size_t>(nranks) : 1);
}

double perf_bus_factor(PerfCollective c, int n) {
  switch (c) {
    case PerfCollective::all_reduce: return 2.0 * (n - 1) / n;
    case PerfCollective::all_gather:
    case PerfCollective::reduce_scatter:
    case PerfCollective::alltoall:
    case PerfCollective::alltoallv: return double(n - 1) / n;
    default: return 1.0;
  }
}

// ---- one rank -------------------------------------------------------------

// Zeroed (pages faulted in): plain memory, or (registered) a qcclMemAlloc
// allocation the other ranks on the host can map.
PerfRank::Buffer PerfRank::make_buffer(size_t bytes, bool shared) {
  void* p = nullptr;
  if (shared) {
    QK_CHECK_AS(IoError, qcclMemAlloc(&p, bytes) == qcclSuccess, "qcclMemAlloc of ", bytes,
                " bytes failed: ", qcclGetLastError(nullptr));
  } else {
    p = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
    QK_CHECK_AS(IoError, p != nullptr, "out of memory allocating ", bytes, " bytes");
  }
  std::memset(p, 0, bytes);
  return Buffer(static_cast<char*>(p), shared ? [](char* q) { qcclMemFree(q); } : [](char* q) { std::free(q); });
}

PerfRank::PerfRank(qcclComm_t comm, const PerfOptions& o)
    : ci_(perf_collective_info(o.collective)), o_(o), comm_(comm) {
  QK_CHECK(comm != nullptr, "PerfBenchmark: expected a communicator, got null");
  QK_CHECK_AS(IoError, qcclCommUserRank(comm, &rank_) == qcclSuccess && qcclCommCount(comm, &n_) == qcclSuccess,
              "PerfBenchmark: cannot read the communicator's rank and size: ", qcclGetLastError(comm));
  es_ = check::element_size(o.type);
  QK_CHECK(es_ != 0, "PerfOptions::type: expected a qcclDataType_t, got ", static_cast<int>(o.type));
  QK_CHECK(o.op >= 0 && o.op < qcclNumOps, "PerfOptions::op: expected a qcclRedOp_t, got ", static_cast<int>(o.op));
  QK_CHECK(o.root >= 0 && o.root < n_, "PerfOptions::root: expected a rank in [0, ", n_, "), got ", o.root);
  QK_CHECK(o.min_bytes <= o.max_bytes, "PerfOptions: min_bytes ", o.min_bytes, " is larger than max_bytes ",
           o.max_bytes);
  QK_CHECK(o.factor > 1.0, "PerfOptions::factor: expected a factor > 1, got ", o.factor);
  QK_CHECK(o.iters >= 1 && o.warmup >= 0, "PerfOptions: expected iters >= 1 and warmup >= 0, got ", o.iters,
           " and ", o.warmup);
  sendbuf_ = make_buffer(o.max_bytes + 64, o.registered);
  recvbuf_ = make_buffer(o.max_bytes + 64, o.registered);
}

char* PerfRank::output(size_t count, bool in_place) {
  char* s = sendbuf_.get();
  char* r = recvbuf_.get();
  switch (ci_.collective) {
    case PerfCollective::reduce_scatter: return in_place ? s + rank_ * count * es_ : r;
    case PerfCollective::all_gather:
    case PerfCollective::alltoallv: return r;
    default: return in_place ? s : r;
  }
}

void PerfRank::layout(size_t count) {
  if (ci_.collective != PerfCollective::alltoallv) return;
  const std::vector<size_t> share = alltoallv_shares(count, n_);
  send_counts_.assign(n_, 0), send_displs_.assign(n_, 0), recv_counts_.assign(n_, 0), recv_displs_.assign(n_, 0);
  for (int j = 0; j < n_; ++j) {
    send_counts_[j] = share[(j - rank_ + n_) % n_];
    recv_counts_[j] = share[(rank_ - j + n_) % n_];
    if (j == 0) continue;
    send_displs_[j] = send_displs_[j - 1] + send_counts_[j - 1];
    recv_displs_[j] = recv_displs_[j - 1] + recv_counts_[j - 1];
  }
}

void PerfRank::call(size_t count, bool in_place) {
  char* s = sendbuf_.get();
  char* r = recvbuf_.get();
  const size_t blk = count * es_;
  const qcclDataType_t t = o_.type;
  qcclResult_t rc = qcclSuccess;
  switch (ci_.collective) {
    case PerfCollective::all_reduce: rc = qcclAllReduce(s, in_place ? s : r, count, t, o_.op, comm_, nullptr); break;
    case PerfCollective::broadcast: rc = qcclBroadcast(s, in_place ? s : r, count, t, o_.root, comm_, nullptr); break;
    case PerfCollective::reduce:
      rc = qcclReduce(s, in_place ? s : r, count, t, o_.op, o_.root, comm_, nullptr);
      break;
    case PerfCollective::all_gather:
      rc = qcclAllGather(in_place ? r + rank_ * blk : s, r, count, t, comm_, nullptr);
      break;
    case PerfCollective::reduce_scatter:
      rc = qcclReduceScatter(s, in_place ? s + rank_ * blk : r, count, t, o_.op, comm_, nullptr);
      break;
    case PerfCollective::alltoall: rc = qcclAllToAll(s, in_place ? s : r, count, t, comm_, nullptr); break;
    case PerfCollective::alltoallv:
      rc = qcclAllToAllv(s, send_counts_.data(), send_displs_.data(), r, recv_counts_.data(), recv_displs_.data(), t,
                         comm_, nullptr);
      break;
  }
  QK_CHECK_AS(IoError, rc == qcclSuccess, ci_.name, " failed on rank ", rank_, ": ", qcclGetErrorString(rc), ": ",
              qcclGetLastError(comm_));
}

void PerfRank::fill_inputs(size_t count, bool in_place) {
  char* s = sendbuf_.get();
  char* r = recvbuf_.get();
  const size_t blk = count * es_;
  const qcclDataType_t t = o_.type;
  switch (ci_.collective) {
    case PerfCollective::all_reduce:
    case PerfCollective::reduce:
    case PerfCollective::broadcast:
      for (size_t i = 0; i < count; ++i) set(s, t, i, value(rank_, i, o_.op, t));
      break;
    case PerfCollective::reduce_scatter:
      for (size_t i = 0; i < count * n_; ++i) set(s, t, i, value(rank_, i, o_.op, t));
      break;
    case PerfCollective::all_gather:
      for (size_t i = 0; i < count; ++i) set(in_place ? r + rank_ * blk : s, t, i, value(rank_, i, qcclSum, t));
      break;
    case PerfCollective::alltoall:
      for (int d = 0; d < n_; ++d)
        for (size_t i = 0; i < count; ++i) set(s, t, d * count + i, (rank_ * 3 + d * 5 + i) % 61);
      break;
    case PerfCollective::alltoallv:
      for (int d = 0; d < n_; ++d)
        for (size_t i = 0; i < send_counts_[d]; ++i) set(s, t, send_displs_[d] + i, (rank_ * 3 + d * 5 + i) % 61);
      break;
  }
}

int64_t PerfRank::count_wrong(size_t count, bool in_place) {
  const qcclDataType_t t = o_.type;
  const qcclRedOp_t op = o_.op;
  int64_t wrong = 0;
  auto expect = [&](const char* buf, size_t i, double want) {
    if (get(buf, t, i) != want && !(std::isnan(want) && std::isnan(get(buf, t, i)))) ++wrong;
  };
  // The reference goes through the element type (rounding, integer wrap).
  char one[16] = {};
  auto typed = [&](double v) {
    set(one, t, 0, v);
    return get(one, t, 0);
  };
  const char* out = output(count, in_place);
  switch (ci_.collective) {
    case PerfCollective::all_reduce:
      for (size_t i = 0; i < count; ++i) expect(out, i, typed(reduced(n_, i, op, t)));
      break;
    case PerfCollective::reduce:
      if (rank_ == o_.root)
        for (size_t i = 0; i < count; ++i) expect(out, i, typed(reduced(n_, i, op, t)));
      break;
    case PerfCollective::broadcast:
      for (size_t i = 0; i < count; ++i) expect(out, i, typed(value(o_.root, i, op, t)));
      break;
    case PerfCollective::reduce_scatter:
      for (size_t i = 0; i < count; ++i) expect(out, i, typed(reduced(n_, rank_ * count + i, op, t)));
      break;
    case PerfCollective::all_gather:
      for (int q = 0; q < n_; ++q)
        for (size_t i = 0; i < count; ++i) expect(out, q * count + i, typed(value(q, i, qcclSum, t)));
      break;
    case PerfCollective::alltoall:
      for (int q = 0; q < n_; ++q)
        for (size_t i = 0; i < count; ++i) expect(out, q * count + i, typed((q * 3 + rank_ * 5 + i) % 61));
      break;
    case PerfCollective::alltoallv:
      for (int q = 0; q < n_; ++q)
        for (size_t i = 0; i < recv_counts_[q]; ++i)
          expect(out, recv_displs_[q] + i, typed((q * 3 + rank_ * 5 + i) % 61));
      break;
  }
  return wrong;
}

int64_t PerfRank::check_once(size_t count, bool in_place) {
  fill_inputs(count, in_place);
  call(count, in_place);
  return count_wrong(count, in_place);
}

int64_t PerfRank::total_wrong(int64_t mine) {
  int64_t all = 0;
  QK_CHECK_AS(IoError, qcclAllReduce(&mine, &all, 1, qcclInt64, qcclSum, comm_, nullptr) == qcclSuccess,
              "check reduction failed: ", qcclGetLastError(comm_));
  return all;
}

void PerfRank::barrier() {
  char one = 1, out = 0;
  QK_CHECK_AS(IoError, qcclAllReduce(&one, &out, 1, qcclInt8, qcclMax, comm_, nullptr) == qcclSuccess,
              "barrier failed: ", qcclGetLastError(comm_));
}

double PerfRank::time_us(size_t count, bool in_place) {
  for (int i = 0; i < o_.warmup; ++i) call(count, in_place);
  barrier();
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < o_.iters; ++i) call(count, in_place);
  double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() /
              std::max(1, o_.iters);
  double worst = 0;
  QK_CHECK_AS(IoError, qcclAllReduce(&us, &worst, 1, qcclFloat64, qcclMax, comm_, nullptr) == qcclSuccess,
              "timing reduction failed: ", qcclGetLastError(comm_));
  return worst;
}

// ---- the sweep --------------------------------------------------------------

struct PerfBenchmark::Impl {
  PerfOptions options;
  PerfRank rank;
  Impl(qcclComm_t comm, PerfOptions o) : options(std::move(o)), rank(comm, options) {}
};

PerfBenchmark::PerfBenchmark(qcclComm_t comm, PerfOptions options)
    : impl_(std::make_unique<Impl>(comm, std::move(options))) {}
PerfBenchmark::~PerfBenchmark() = default;

const PerfOptions& PerfBenchmark::options() const { return impl_->options; }

PerfRow PerfBenchmark::run_size(size_t size_bytes) {
  const PerfOptions& o = impl_->options;
  PerfRank& b = impl_->rank;
  QK_CHECK(size_bytes <= o.max_bytes, "PerfBenchmark::run_size: ", size_bytes,
           " bytes is larger than the buffers (max_bytes ", o.max_bytes, ")");
  PerfRow row;
  row.count = perf_count(o.collective, size_bytes, b.element_bytes(), b.nranks());
  row.bytes = perf_bytes(o.collective, row.count, b.element_bytes(), b.nranks());
  b.layout(row.count);
  for (bool in_place : {false, true}) {
    if (in_place && !b.info().has_in_place) continue;
    PerfResult& r = in_place ? row.in_place : row.out_of_place;
    if (o.check) r.wrong = b.total_wrong(b.check_once(row.count, in_place));
    r.us = b.time_us(row.count, in_place);
    r.algbw = r.us > 0 ? row.bytes / r.us / 1e3 : 0;
    r.busbw = r.algbw * perf_bus_factor(o.collective, b.nranks());
    r.measured = true;
  }
  return row;
}

PerfSummary PerfBenchmark::run(const std::function<void(const PerfRow&)>& on_row) {
  const PerfOptions& o = impl_->options;
  PerfSummary s;
  double bus_sum = 0;
  for (size_t size : perf_sizes(o.min_bytes, o.max_bytes, o.factor)) {
    const PerfRow row = run_size(size);
    for (const PerfResult* r : {&row.out_of_place, &row.in_place}) {
      if (!r->measured) continue;
      s.wrong += std::max<int64_t>(r->wrong, 0);
      bus_sum += r->busbw;
      ++s.measured;
    }
    if (on_row) on_row(row);
  }
  s.avg_busbw = s.measured ? bus_sum / s.measured : 0.0;
  return s;
}

// ---- the table --------------------------------------------------------------

std::string perf_table_header() {
  constexpr const char* kLine = "# {:>10} {:>12} {:>8} {:>6} {:>5}  {:>9} {:>7} {:>7} {:>6}  {:>9} {:>7} {:>7} {:>6}\n";
  std::string s = fmt::format(kLine, "", "", "", "", "", "out-of-", "place", "", "", "in-", "place", "", "");
  s += fmt::format(kLine, "size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time",
                   "algbw", "busbw", "#wrong");
  s += fmt::format(kLine, "(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)",
                   "(GB/s)", "");
  return s;
}

std::string perf_table_row(const PerfRow& row, const PerfOptions& o) {
  const PerfCollectiveInfo& ci = perf_collective_info(o.collective);
  std::string cols;
  for (const PerfResult* r : {&row.out_of_place, &row.in_place}) {
    if (!r->measured)
      cols += fmt::format("  {:>9} {:>7} {:>7} {:>6}", "N/A", "N/A", "N/A", "N/A");
    else
      cols += fmt::format("  {:>9.2f} {:>7.2f} {:>7.2f} {:>6}", r->us, r->algbw, r->busbw,
                          r->wrong >= 0 ? std::to_string(r->wrong) : std::string("N/A"));
  }
  return fmt::format("  {:>10} {:>12} {:>8} {:>6} {:>5}{}\n", row.bytes, row.count, o.type_name,
                     ci.has_op ? o.op_name : "none", ci.has_root ? o.root : -1, cols);
}

std::string perf_table_summary(const PerfSummary& s) {
  return fmt::format("# Out of bounds values : {} {}\n# Avg bus bandwidth    : {:.3f}\n#\n", s.wrong,
                     s.wrong ? "FAILED" : "OK", s.avg_busbw);
}

// ---- memcpy -----------------------------------------------------------------

std::vector<MemcpyRow> perf_memcpy(size_t min_bytes, size_t max_bytes, double factor, int iters, int warmup,
                                   const std::function<void(const MemcpyRow&)>& on_row) {
  QK_CHECK(factor > 1.0, "perf memcpy: expected a factor > 1, got ", factor);
  const size_t lo = std::max<size_t>(min_bytes, 1), hi = max_bytes;
  std::vector<char> a(hi, 1), b(hi, 0);
  std::vector<MemcpyRow> rows;
  for (double sz = static_cast<double>(lo); sz <= static_cast<double>(hi) * 1.0000001; sz *= factor) {
    const size_t n = static_cast<size_t>(sz);
    for (int i = 0; i < warmup; ++i) std::memcpy(b.data(), a.data(), n);
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < iters; ++i) {
      std::memcpy(b.data(), a.data(), n);
      a[i % n] = static_cast<char>(i);  // keep the copies from being merged
    }
    const double us =
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / std::max(1, iters);
    rows.push_back({n, us, n / us / 1e3});
    if (on_row) on_row(rows.back());
  }
  asm volatile("" : : "r"(b.data()) : "memory");  // b may be read: the copies stay
  return rows;
}

std::string perf_memcpy_table_header() { return fmt::format("# {:>10} {:>10} {:>8}\n", "size(B)", "time(us)", "GB/s"); }

std::string perf_memcpy_table_row(const MemcpyRow& r) {
  return fmt::format("  {:>10} {:>10.2f} {:>8.2f}\n", r.bytes, r.us, r.gbps);
}

}  // namespace qk::qccl
