// `qk perf`: qccl's collective benchmarks in the style of nccl-tests.
//
//   qk perf all_reduce --np 4 -b 8 -e 256M -f 2 -n 20 -w 5 -c 1 -d float -o sum
//
// prints size, count, type, redop, root, time (us), algbw and busbw (GB/s,
// 1e9 B/s) and #wrong for out-of-place and in-place calls, then the average
// bus bandwidth. busbw = algbw x (all_reduce 2(n-1)/n; all_gather,
// reduce_scatter, alltoall, alltoallv (n-1)/n; broadcast, reduce 1), as in
// nccl-tests. alltoallv (qcclAllToAllv, out of place only) sends uneven blocks
// whose per-rank total is the size column: see kAllToAllvPattern.
// The check (-c 1) runs outside the timed loop, on inputs whose exact result
// does not depend on the order of reduction.
//
// Ranks: --np N forks N ranks here. Without --np, the ranks come from the
// launcher's environment: under `qk run` (RANK, WORLD_SIZE, MASTER_ADDR,
// MASTER_PORT) they meet through its store; under mpirun (OMPI_COMM_WORLD_RANK/SIZE,
// or QK_RANK/QK_WORLD_SIZE) at QCCL_COMM_ID=host:port, or through a store
// rank 0 hosts when MASTER_ADDR/MASTER_PORT are set; under mpirun with neither,
// rank 0's unique id goes to the others by MPI_Bcast (QCCL_BACKEND=mpi then
// runs the collectives on Open MPI).
// `qk perf memcpy -b .. -e ..` measures single-thread memcpy for comparison.
//
// `qk perf --tune [--out FILE] [--tune-ranks 2,4]` measures qccl's four
// tuned sizes on this machine (qk/qccl/tune.h) for each count of ranks and
// writes the tuning file QCCL_TUNE_FILE then names.
#include <fmt/format.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "command.h"
#include "qccl.h"
#include "qk/base/env.h"
#include "qk/base/error.h"
#include "qk/base/file_io.h"
#include "qk/base/host_info.h"
#include "qk/base/launch_vars.h"
#include "qk/base/log.h"
#include "qk/dist/launch_env.h"
#include "qk/qccl/check_data.h"
#include "qk/qccl/tune.h"
#ifdef QK_HAVE_MPI
#include "qk/qccl/mpi.h"
#endif

namespace qk::cli {
namespace {

struct PerfOptions {
  std::string coll = "all_reduce";
  std::string min_s = "8", max_s = "64M", dtype_s = "float", op_s = "sum";
  double factor = 2;
  int iters = 20, warmup = 5, check = 1, root = 0, np = 0, registered = 0;
  std::string transport, algo;
  double timeout_s = 0;
  bool tune = false;
  std::string out, tune_ranks;
  int tune_rounds = 7;
};

enum class Coll { kAllReduce, kBroadcast, kReduce, kAllGather, kReduceScatter, kAllToAll, kAllToAllv };

struct CollInfo {
  const char* name;
  Coll coll;
  bool has_op, has_root;
  bool has_in_place = true;
};
const CollInfo kColls[] = {{"all_reduce", Coll::kAllReduce, true, false},
                           {"broadcast", Coll::kBroadcast, false, true},
                           {"reduce", Coll::kReduce, true, true},
                           {"all_gather", Coll::kAllGather, false, false},
                           {"reduce_scatter", Coll::kReduceScatter, true, false},
                           {"alltoall", Coll::kAllToAll, false, false},
                           {"alltoallv", Coll::kAllToAllv, false, false, false}};

// The blocks of `qk perf alltoallv` (and of bench/qccl_mpi_alltoallv.c, which
// must match): each rank sends `count` elements in all, rank r giving rank j
// the share (2k+1)/n^2 of them, k = (j - r) mod n (rounded down; the last
// share takes the remainder). Shares run from 1/n^2 (to itself) to
// (2n-1)/n^2 around the mean 1/n, and every rank also receives `count`.
constexpr const char* kAllToAllvPattern =
    "alltoallv: each rank sends `size` bytes in all, rank r giving rank j the share (2k+1)/n^2 "
    "of them, k = (j - r) mod n (skewed around the mean 1/n; each rank also receives `size`); "
    "out of place only";
// share[k] for k = 0 .. n-1.
std::vector<size_t> alltoallv_shares(size_t count, int n) {
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

size_t parse_size(const std::string& s) {
  QK_CHECK(!s.empty(), "Expected a size like 8, 64K, 256M or 1G, got an empty string");
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  std::string suf(end);
  double mul = 1;
  if (suf == "K" || suf == "k") mul = 1024.0;
  else if (suf == "M" || suf == "m") mul = 1024.0 * 1024;
  else if (suf == "G" || suf == "g") mul = 1024.0 * 1024 * 1024;
  else QK_CHECK(suf.empty(), "Expected a size like 8, 64K, 256M or 1G, got '", s, "'");
  QK_CHECK(v >= 0 && v * mul <= double(1ull << 40), "size '", s, "' is out of range");
  return static_cast<size_t>(v * mul);
}

qcclDataType_t parse_dtype(const std::string& s) {
  struct { const char* name; qcclDataType_t t; } names[] = {
      {"int8", qcclInt8}, {"char", qcclInt8}, {"uint8", qcclUint8}, {"int16", qcclInt16},
      {"uint16", qcclUint16}, {"int32", qcclInt32}, {"int", qcclInt32}, {"uint32", qcclUint32},
      {"int64", qcclInt64}, {"uint64", qcclUint64}, {"half", qcclFloat16}, {"float16", qcclFloat16},
      {"bfloat16", qcclBfloat16}, {"bf16", qcclBfloat16}, {"float", qcclFloat32},
      {"float32", qcclFloat32}, {"double", qcclFloat64}, {"float64", qcclFloat64}};
  for (auto& n : names)
    if (s == n.name) return n.t;
  QK_THROW(ValueError, "-d: expected int8, uint8, int16, uint16, int32, uint32, int64, uint64, "
           "half, bfloat16, float or double, got '", s, "'");
}

qcclRedOp_t parse_op(const std::string& s) {
  const char* names[] = {"sum", "prod", "max", "min", "avg"};
  for (int i = 0; i < 5; ++i)
    if (s == names[i]) return static_cast<qcclRedOp_t>(i);
  QK_THROW(ValueError, "-o: expected sum, prod, max, min or avg, got '", s, "'");
}

// ---- exact inputs and references -----------------------------------------
using qccl::check::get;
using qccl::check::reduced;
using qccl::check::set;
using qccl::check::value;

// ---- one rank ---------------------------------------------------------------
// A benchmark buffer, zeroed (pages faulted in): plain memory, or (-R 1, like
// nccl-tests' buffer registration) a qcclMemAlloc allocation the other ranks
// on the host can map.
using PerfBuffer = std::unique_ptr<char, void (*)(char*)>;
PerfBuffer perf_buffer(size_t bytes, bool shared) {
  void* p = nullptr;
  if (shared) {
    QK_CHECK_AS(IoError, qcclMemAlloc(&p, bytes) == qcclSuccess, "qcclMemAlloc of ", bytes,
                " bytes failed: ", qcclGetLastError(nullptr));
  } else {
    p = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
    QK_CHECK_AS(IoError, p != nullptr, "out of memory allocating ", bytes, " bytes");
  }
  std::memset(p, 0, bytes);
  return PerfBuffer(static_cast<char*>(p), shared ? [](char* q) { qcclMemFree(q); }
                                                  : [](char* q) { std::free(q); });
}

struct Bench {
  const CollInfo& ci;
  const PerfOptions& o;
  qcclComm_t comm;
  int rank, n;
  qcclDataType_t t;
  qcclRedOp_t op;
  size_t es;
  PerfBuffer sendbuf{nullptr, nullptr}, recvbuf{nullptr, nullptr};
  // alltoallv's blocks for the current row (layout()), packed in rank order.
  std::vector<size_t> send_counts{}, send_displs{}, recv_counts{}, recv_displs{};

  void layout(size_t count) {
    if (ci.coll != Coll::kAllToAllv) return;
    const std::vector<size_t> share = alltoallv_shares(count, n);
    send_counts.assign(n, 0), send_displs.assign(n, 0), recv_counts.assign(n, 0), recv_displs.assign(n, 0);
    for (int j = 0; j < n; ++j) {
      send_counts[j] = share[(j - rank + n) % n];
      recv_counts[j] = share[(rank - j + n) % n];
      if (j == 0) continue;
      send_displs[j] = send_displs[j - 1] + send_counts[j - 1];
      recv_displs[j] = recv_displs[j - 1] + recv_counts[j - 1];
    }
  }

  // Counts per call for a "size" in bytes (nccl-tests: size is the largest buffer).
  size_t count_for(size_t size) const {
    size_t c = size / es;
    if (ci.coll == Coll::kAllGather || ci.coll == Coll::kReduceScatter || ci.coll == Coll::kAllToAll)
      c /= n;
    return c;
  }
  size_t bytes_for(size_t count) const {
    bool per_rank = ci.coll == Coll::kAllGather || ci.coll == Coll::kReduceScatter ||
                    ci.coll == Coll::kAllToAll;
    return count * es * (per_rank ? n : 1);
  }
  double bus_factor() const {
    switch (ci.coll) {
      case Coll::kAllReduce: return 2.0 * (n - 1) / n;
      case Coll::kAllGather:
      case Coll::kReduceScatter:
      case Coll::kAllToAll:
      case Coll::kAllToAllv: return double(n - 1) / n;
      default: return 1.0;
    }
  }

  void call(size_t count, bool in_place) {
    char* s = sendbuf.get();
    char* r = recvbuf.get();
    size_t blk = count * es;
    qcclResult_t rc = qcclSuccess;
    switch (ci.coll) {
      case Coll::kAllReduce:
        rc = qcclAllReduce(s, in_place ? s : r, count, t, op, comm, nullptr);
        break;
      case Coll::kBroadcast:
        rc = qcclBroadcast(s, in_place ? s : r, count, t, o.root, comm, nullptr);
        break;
      case Coll::kReduce:
        rc = qcclReduce(s, in_place ? s : r, count, t, op, o.root, comm, nullptr);
        break;
      case Coll::kAllGather:
        rc = qcclAllGather(in_place ? r + rank * blk : s, r, count, t, comm, nullptr);
        break;
      case Coll::kReduceScatter:
        rc = qcclReduceScatter(s, in_place ? s + rank * blk : r, count, t, op, comm, nullptr);
        break;
      case Coll::kAllToAll:
        rc = qcclAllToAll(s, in_place ? s : r, count, t, comm, nullptr);
        break;
      case Coll::kAllToAllv:
        rc = qcclAllToAllv(s, send_counts.data(), send_displs.data(), r, recv_counts.data(),
                           recv_displs.data(), t, comm, nullptr);
        break;
    }
    QK_CHECK_AS(IoError, rc == qcclSuccess, ci.name, " failed on rank ", rank, ": ",
                qcclGetErrorString(rc), ": ", qcclGetLastError(comm));
  }

  // Fills inputs, runs once, returns the number of wrong elements on this rank.
  int64_t check_once(size_t count, bool in_place) {
    char* s = sendbuf.get();
    char* r = recvbuf.get();
    size_t blk = count * es;
    switch (ci.coll) {
      case Coll::kAllReduce:
      case Coll::kReduce:
      case Coll::kBroadcast:
        for (size_t i = 0; i < count; ++i) set(s, t, i, value(rank, i, op, t));
        break;
      case Coll::kReduceScatter:
        for (size_t i = 0; i < count * n; ++i) set(s, t, i, value(rank, i, op, t));
        break;
      case Coll::kAllGather:
        for (size_t i = 0; i < count; ++i)
          set(in_place ? r + rank * blk : s, t, i, value(rank, i, qcclSum, t));
        break;
      case Coll::kAllToAll:
        for (int d = 0; d < n; ++d)
          for (size_t i = 0; i < count; ++i) set(s, t, d * count + i, (rank * 3 + d * 5 + i) % 61);
        break;
      case Coll::kAllToAllv:
        for (int d = 0; d < n; ++d)
          for (size_t i = 0; i < send_counts[d]; ++i) set(s, t, send_displs[d] + i, (rank * 3 + d * 5 + i) % 61);
        break;
    }
    call(count, in_place);
    int64_t wrong = 0;
    auto expect = [&](const char* buf, size_t i, double want) {
      if (get(buf, t, i) != want && !(std::isnan(want) && std::isnan(get(buf, t, i)))) ++wrong;
    };
    // The reference goes through the element type (rounding, integer wrap).
    std::vector<char> one(16);
    auto typed = [&](double v) {
      set(one.data(), t, 0, v);
      return get(one.data(), t, 0);
    };
    const char* out = in_place ? s : r;
    switch (ci.coll) {
      case Coll::kAllReduce:
        for (size_t i = 0; i < count; ++i) expect(out, i, typed(reduced(n, i, op, t)));
        break;
      case Coll::kReduce:
        if (rank == o.root)
          for (size_t i = 0; i < count; ++i) expect(out, i, typed(reduced(n, i, op, t)));
        break;
      case Coll::kBroadcast:
        for (size_t i = 0; i < count; ++i) expect(out, i, typed(value(o.root, i, op, t)));
        break;
      case Coll::kReduceScatter: {
        const char* o2 = in_place ? s + rank * blk : r;
        for (size_t i = 0; i < count; ++i) expect(o2, i, typed(reduced(n, rank * count + i, op, t)));
        break;
      }
      case Coll::kAllGather:
        for (int q = 0; q < n; ++q)
          for (size_t i = 0; i < count; ++i) expect(r, q * count + i, typed(value(q, i, qcclSum, t)));
        break;
      case Coll::kAllToAll:
        for (int q = 0; q < n; ++q)
          for (size_t i = 0; i < count; ++i) expect(out, q * count + i, typed((q * 3 + rank * 5 + i) % 61));
        break;
      case Coll::kAllToAllv:
        for (int q = 0; q < n; ++q)
          for (size_t i = 0; i < recv_counts[q]; ++i)
            expect(r, recv_displs[q] + i, typed((q * 3 + rank * 5 + i) % 61));
        break;
    }
    return wrong;
  }

  double time_us(size_t count, bool in_place) {
    for (int i = 0; i < o.warmup; ++i) call(count, in_place);
    barrier();
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < o.iters; ++i) call(count, in_place);
    double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() /
                std::max(1, o.iters);
    double worst = 0;
    QK_CHECK_AS(IoError, qcclAllReduce(&us, &worst, 1, qcclFloat64, qcclMax, comm, nullptr) == qcclSuccess,
                "timing reduction failed: ", qcclGetLastError(comm));
    return worst;
  }
  void barrier() {
    char one = 1, out = 0;
    QK_CHECK_AS(IoError, qcclAllReduce(&one, &out, 1, qcclInt8, qcclMax, comm, nullptr) == qcclSuccess,
                "barrier failed: ", qcclGetLastError(comm));
  }
  int64_t total_wrong(int64_t mine) {
    int64_t all = 0;
    QK_CHECK_AS(IoError, qcclAllReduce(&mine, &all, 1, qcclInt64, qcclSum, comm, nullptr) == qcclSuccess,
                "check reduction failed: ", qcclGetLastError(comm));
    return all;
  }
};

int run_rank(const PerfOptions& o, const CollInfo& ci, const qcclUniqueId& id, int rank, int n) {
  qcclConfig_t cfg = QCCL_CONFIG_INITIALIZER;
  cfg.timeoutS = o.timeout_s;
  cfg.commName = "perf";
  cfg.transport = o.transport.empty() ? nullptr : o.transport.c_str();
  cfg.algo = o.algo.empty() ? nullptr : o.algo.c_str();
  qcclComm_t comm = nullptr;
  qcclResult_t rc = qcclCommInitRankConfig(&comm, n, id, rank, &cfg);
  QK_CHECK_AS(IoError, rc == qcclSuccess, "rank ", rank, ": qccl init failed: ", qcclGetErrorString(rc),
              ": ", qcclGetLastError(nullptr));
  qcclDataType_t t = parse_dtype(o.dtype_s);
  Bench b{ci, o, comm, rank, n, t, parse_op(o.op_s), qccl::check::element_size(t)};
  size_t lo = parse_size(o.min_s), hi = parse_size(o.max_s);
  QK_CHECK(lo <= hi, "-b ", o.min_s, " is larger than -e ", o.max_s);
  QK_CHECK(o.factor > 1.0, "-f: expected a factor > 1, got ", o.factor);
  QK_CHECK(o.root >= 0 && o.root < n, "-r: expected a root in [0, ", n, "), got ", o.root);
  b.sendbuf = perf_buffer(hi + 64, o.registered != 0);
  b.recvbuf = perf_buffer(hi + 64, o.registered != 0);
  bool show = rank == 0;
  if (show) {
    fmt::print("# qk perf {}: nranks {}, transport {}, algo {}, minBytes {} maxBytes {} step {}x "
               "warmup {} iters {} validation {} buffers {}\n#\n",
               ci.name, n, o.transport.empty() ? "auto" : o.transport, o.algo.empty() ? "auto" : o.algo,
               lo, hi, o.factor, o.warmup, o.iters, o.check,
               o.registered ? "qcclMemAlloc" : "malloc");
    fmt::print("# {:>10} {:>12} {:>8} {:>6} {:>5}  {:>9} {:>7} {:>7} {:>6}  {:>9} {:>7} {:>7} {:>6}\n",
               "", "", "", "", "", "out-of-", "place", "", "", "in-", "place", "", "");
    fmt::print("# {:>10} {:>12} {:>8} {:>6} {:>5}  {:>9} {:>7} {:>7} {:>6}  {:>9} {:>7} {:>7} {:>6}\n",
               "size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time",
               "algbw", "busbw", "#wrong");
    fmt::print("# {:>10} {:>12} {:>8} {:>6} {:>5}  {:>9} {:>7} {:>7} {:>6}  {:>9} {:>7} {:>7} {:>6}\n",
               "(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)",
               "(GB/s)", "");
    std::fflush(stdout);
  }
  double bus_sum = 0;
  int measured = 0;
  int64_t wrong_total = 0;
  for (double sz = static_cast<double>(lo); sz <= static_cast<double>(hi) * 1.0000001;
       sz = std::max(sz * o.factor, sz + 1)) {
    size_t count = b.count_for(static_cast<size_t>(sz));
    size_t bytes = b.bytes_for(count);
    b.layout(count);
    std::string cols;
    for (bool in_place : {false, true}) {
      if (in_place && !ci.has_in_place) {
        cols += fmt::format("  {:>9} {:>7} {:>7} {:>6}", "N/A", "N/A", "N/A", "N/A");
        continue;
      }
      int64_t wrong = o.check ? b.total_wrong(b.check_once(count, in_place)) : 0;
      wrong_total += wrong;
      double us = b.time_us(count, in_place);
      double algbw = us > 0 ? bytes / us / 1e3 : 0;
      double busbw = algbw * b.bus_factor();
      bus_sum += busbw;
      ++measured;
      cols += fmt::format("  {:>9.2f} {:>7.2f} {:>7.2f} {:>6}", us, algbw, busbw,
                          o.check ? std::to_string(wrong) : std::string("N/A"));
    }
    if (show) {
      fmt::print("  {:>10} {:>12} {:>8} {:>6} {:>5}{}\n", bytes, count, o.dtype_s,
                 ci.has_op ? o.op_s : "none", ci.has_root ? o.root : -1, cols);
      std::fflush(stdout);
    }
    if (sz == 0 && lo == 0) sz = 0.5;  // 0 -> 1 -> 2 ... with factor 2
  }
  if (show) {
    fmt::print("# Out of bounds values : {} {}\n", wrong_total, wrong_total ? "FAILED" : "OK");
    fmt::print("# Avg bus bandwidth    : {:.3f}\n#\n", measured ? bus_sum / measured : 0.0);
    std::fflush(stdout);
  }
  qcclCommDestroy(comm);
  return wrong_total ? 2 : 0;
}

// ---- qk perf --tune ---------------------------------------------------------
QK_ENV_OPTIONAL_STRING(env_tune_file_out, "QCCL_TUNE_FILE",
                       "qk perf --tune: the file written when --out is not given.");

std::string tune_out(const PerfOptions& o) {
  if (!o.out.empty()) return o.out;
  if (auto f = env_tune_file_out.lookup(); f && !f->empty()) return *f;
  return "qccl-tune.json";
}

std::vector<int> parse_rank_list(const std::string& s) {
  std::vector<int> out;
  size_t pos = 0;
  while (pos <= s.size()) {
    size_t comma = s.find(',', pos);
    std::string item = s.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    char* end = nullptr;
    long v = std::strtol(item.c_str(), &end, 10);
    QK_CHECK(!item.empty() && *end == 0 && v >= 2 && v <= 256,
             "--tune-ranks: expected counts of ranks from 2 to 256 separated by commas (2,4), got '", s, "'");
    if (std::find(out.begin(), out.end(), static_cast<int>(v)) == out.end()) out.push_back(static_cast<int>(v));
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return out;
}

// 2 and 4 ranks (the benchmarks' counts), and one rank per CPU where there are more.
std::vector<int> default_tune_ranks() {
  std::vector<int> r{2, 4};
  long cpus = ::sysconf(_SC_NPROCESSORS_ONLN);
  if (cpus > 4) r.push_back(static_cast<int>(std::min<long>(cpus, 64)));
  return r;
}

int tune_rank(const PerfOptions& o, const qcclUniqueId& id, int rank, int n) {
  qcclConfig_t cfg = QCCL_CONFIG_INITIALIZER;
  cfg.timeoutS = o.timeout_s;
  cfg.commName = "perf-tune";
  qcclComm_t comm = nullptr;
  qcclResult_t rc = qcclCommInitRankConfig(&comm, n, id, rank, &cfg);
  QK_CHECK_AS(IoError, rc == qcclSuccess, "rank ", rank, ": qccl init failed: ", qcclGetErrorString(rc), ": ",
              qcclGetLastError(nullptr));
  qccl::TuneOptions to;
  to.rounds = o.tune_rounds;
  to.progress = [](const std::string& line) {
    fmt::print("  {}\n", line);
    std::fflush(stdout);
  };
  if (rank == 0) {
    fmt::print("# qk perf --tune: {} ranks on '{}', {} rounds per candidate\n", n, cpu_model_name(), o.tune_rounds);
    std::fflush(stdout);
  }
  qccl::TuneEntry e = qccl::tune_communicator(comm, to);
  qcclCommDestroy(comm);
  if (rank != 0) return 0;
  const std::string path = tune_out(o);
  qccl::add_to_tune_file(path, e);
  fmt::print("# {} ranks: shm_slice {} reduce_slice {} chain_chunk {} cma_copy_chunk {} ({:.1f} s); written to {}\n",
             n, e.sizes.shm_slice, e.sizes.reduce_slice, e.sizes.chain_chunk, e.sizes.cma_copy_chunk, e.seconds, path);
  std::fflush(stdout);
  return 0;
}

void run_memcpy(const PerfOptions& o) {
  size_t lo = std::max<size_t>(parse_size(o.min_s), 1), hi = parse_size(o.max_s);
  std::vector<char> a(hi, 1), b(hi, 0);
  fmt::print("# qk perf memcpy: single thread, {} iterations\n# {:>10} {:>10} {:>8}\n", o.iters,
             "size(B)", "time(us)", "GB/s");
  for (double sz = static_cast<double>(lo); sz <= static_cast<double>(hi) * 1.0000001; sz *= o.factor) {
    size_t n = static_cast<size_t>(sz);
    for (int i = 0; i < o.warmup; ++i) std::memcpy(b.data(), a.data(), n);
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < o.iters; ++i) {
      std::memcpy(b.data(), a.data(), n);
      a[i % n] = static_cast<char>(i);  // keep the copies from being merged
    }
    double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() /
                std::max(1, o.iters);
    fmt::print("  {:>10} {:>10.2f} {:>8.2f}\n", n, us, n / us / 1e3);
  }
  if (b[0] == 42) fmt::print("#\n");  // uses b so the copies stay observable
}

QK_ENV_OPTIONAL_INT(env_qk_rank, "QK_RANK", "qk perf: this process's rank, with QK_WORLD_SIZE and "
                    "QCCL_COMM_ID, for launchers that set neither RANK nor MPI's variables.");
QK_ENV_OPTIONAL_INT(env_qk_world_size, "QK_WORLD_SIZE", "qk perf: the job size, with QK_RANK.");

// Ranks from a launcher's environment, or 0 when there is none.
bool launcher_rank(int* rank, int* size) {
  namespace v = env::launch;
  const env::Var<int64_t>* pairs[][2] = {
      {&v::ompi_rank, &v::ompi_size}, {&env_qk_rank, &env_qk_world_size}, {&v::pmi_rank, &v::pmi_size}};
  for (auto& p : pairs) {
    auto r = p[0]->lookup();
    auto s = p[1]->lookup();
    if (r && s) {
      *rank = static_cast<int>(*r);
      *size = static_cast<int>(*s);
      return true;
    }
  }
  return false;
}

// Runs body(id, rank, size) on this process's rank when a launcher started
// the ranks (and --np is not given): under `qk run` (or mpirun/srun with
// MASTER_ADDR/MASTER_PORT) they meet through the store; under mpirun at
// QCCL_COMM_ID or through MPI. False when there is no launcher.
bool run_launched(const PerfOptions& o, const std::function<int(const qcclUniqueId&, int, int)>& body) {
  int rank = 0, size = 0;
  // Under `qk run` (or mpirun/srun with MASTER_ADDR/MASTER_PORT): meet through the store.
  dist::LaunchEnv le = dist::launch_env();
  if (o.np == 0 && le.world_size > 1 && !le.master_addr.empty() && le.master_port > 0) {
    double timeout = o.timeout_s > 0 ? o.timeout_s : 300;
    qcclUniqueId id = dist::rendezvous_unique_id(le, fmt::format("perf/{}", le.restart_count), timeout);
    if (!le.under_qk_run) logging::set_prefix(fmt::format("[rank {}] ", le.rank));
    int rc = body(id, le.rank, le.world_size);
    if (rc) exit_with(rc);
    return true;
  }
  if (o.np == 0 && launcher_rank(&rank, &size)) {
    qcclUniqueId id;
    bool via_mpi = false;
#ifdef QK_HAVE_MPI
    // Under mpirun/srun without QCCL_COMM_ID: rank 0's id reaches the others by MPI_Bcast.
    via_mpi = !env::get_raw("QCCL_COMM_ID") && qccl::launched_by_mpi();
    if (via_mpi) id = qccl::unique_id_from_mpi(MPI_COMM_WORLD);
#endif
    if (!via_mpi) {
      QK_CHECK(env::get_raw("QCCL_COMM_ID").has_value(),
               "running under a launcher (rank ", rank, " of ", size,
               "): set QCCL_COMM_ID=host:port so the ranks can meet (rank 0 listens there)");
      QK_CHECK_AS(IoError, qcclGetUniqueId(&id) == qcclSuccess, qcclGetLastError(nullptr));
    }
    logging::set_prefix(fmt::format("[rank {}] ", rank));
    int rc = body(id, rank, size);
    if (rc) exit_with(rc);
    return true;
  }
  return false;
}

// Forks np ranks here, each running body(id, rank) and exiting with its
// code; returns the worst code.
int fork_ranks(int np, const std::function<int(const qcclUniqueId&, int)>& body) {
  qcclUniqueId id;
  QK_CHECK_AS(IoError, qcclGetUniqueId(&id) == qcclSuccess, qcclGetLastError(nullptr));
  std::fflush(nullptr);
  std::vector<pid_t> pids;
  for (int r = 0; r < np; ++r) {
    pid_t pid = ::fork();
    QK_CHECK_AS(IoError, pid >= 0, "fork failed: ", detail::errno_string(errno));
    if (pid == 0) {
      logging::set_prefix(fmt::format("[rank {}] ", r));
      int code = 1;
      try {
        code = body(id, r);
      } catch (const std::exception& e) {
        fmt::print(stderr, "qk perf: rank {}: error: {}\n", r, e.what());
      }
      std::fflush(nullptr);
      ::_exit(code);
    }
    pids.push_back(pid);
  }
  int worst = 0;
  for (int r = 0; r < np; ++r) {
    int st = 0;
    while (::waitpid(pids[r], &st, 0) < 0 && errno == EINTR) {
    }
    int code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    if (code) fmt::print(stderr, "qk perf: rank {} exited with status {}\n", r, code);
    worst = std::max(worst, code);
  }
  return worst;
}

// qk perf --tune: ranks from --tune-ranks forked here, one count after the
// other, or the launcher's ranks (all on this host).
void run_tune(const PerfOptions& o) {
  QK_CHECK(o.tune_rounds >= 1 && o.tune_rounds <= 100, "--tune-rounds: expected 1..100, got ", o.tune_rounds);
  const std::string path = tune_out(o);
  bool replaced = false;
  qccl::tune_file_to_extend(path, &replaced);  // refuses a non-tuning file before any work
  if (replaced)
    fmt::print("# {} was measured on another CPU model: its entries are replaced by this machine's\n", path);
  if (run_launched(o, [&](const qcclUniqueId& id, int r, int n) { return tune_rank(o, id, r, n); })) return;
  QK_CHECK(o.np == 0 || o.tune_ranks.empty(), "--np and --tune-ranks: give one of them");
  std::vector<int> counts = o.np ? std::vector<int>{o.np} : o.tune_ranks.empty() ? default_tune_ranks()
                                                                                 : parse_rank_list(o.tune_ranks);
  for (int np : counts) {
    QK_CHECK(np >= 2 && np <= 256, "--np: tuning needs 2..256 ranks, got ", np);
    int worst = fork_ranks(np, [&](const qcclUniqueId& id, int r) { return tune_rank(o, id, r, np); });
    if (worst) exit_with(worst);
  }
  fmt::print("# use it: export QCCL_TUNE_FILE={}\n", path);
}

void run_perf(const PerfOptions& o) {
  if (o.tune) return run_tune(o);
  if (o.coll == "memcpy") return run_memcpy(o);
  const CollInfo* ci = nullptr;
  for (const auto& c : kColls)
    if (o.coll == c.name) ci = &c;
  QK_CHECK(ci, "Expected a collective: all_reduce, broadcast, reduce, all_gather, reduce_scatter, "
           "alltoall, alltoallv (or memcpy), got '", o.coll, "'");
  parse_dtype(o.dtype_s);
  parse_op(o.op_s);
  if (run_launched(o, [&](const qcclUniqueId& id, int r, int n) { return run_rank(o, *ci, id, r, n); })) return;
  int np = o.np ? o.np : 1;
  QK_CHECK(np >= 1 && np <= 256, "--np: expected 1..256 ranks, got ", np);
  int worst = fork_ranks(np, [&](const qcclUniqueId& id, int r) { return run_rank(o, *ci, id, r, np); });
  if (worst) exit_with(worst);
}

void setup_perf(CLI::App& app) {
  auto o = std::make_shared<PerfOptions>();
  app.add_option("collective", o->coll,
                 std::string("all_reduce, broadcast, reduce, all_gather, reduce_scatter, alltoall, "
                             "alltoallv or memcpy. ") + kAllToAllvPattern)
      ->capture_default_str();
  app.add_option("-b,--minbytes", o->min_s, "Smallest size (8, 64K, 1M, ...)")->capture_default_str();
  app.add_option("-e,--maxbytes", o->max_s, "Largest size")->capture_default_str();
  app.add_option("-f,--stepfactor", o->factor, "Size multiplier between rows")->capture_default_str();
  app.add_option("-n,--iters", o->iters, "Timed iterations per size")->check(CLI::Range(1, 1000000))->capture_default_str();
  app.add_option("-w,--warmup_iters", o->warmup, "Untimed iterations first")->check(CLI::Range(0, 100000))->capture_default_str();
  app.add_option("-c,--check", o->check, "Check results (outside the timed loop)")->check(CLI::Range(0, 1))->capture_default_str();
  app.add_option("-d,--datatype", o->dtype_s, "float, half, bfloat16, double, int8, ...")->capture_default_str();
  app.add_option("-o,--op", o->op_s, "sum, prod, max, min or avg")->capture_default_str();
  app.add_option("-r,--root", o->root, "Root of broadcast and reduce")->capture_default_str();
  app.add_option("-R,--registered", o->registered,
                 "1: buffers from qcclMemAlloc, which ranks on one host reduce between directly "
                 "(nccl-tests' buffer registration); 0: malloc")
      ->check(CLI::Range(0, 1))
      ->capture_default_str();
  app.add_option("--np", o->np, "Fork this many ranks here (default: from the launcher, else 1)");
  app.add_option("--transport", o->transport, "auto, shm or tcp (default: QCCL_TRANSPORT)");
  app.add_option("--algo", o->algo, "auto, ring, rd, pairs, tree, chain, direct or hierarchical (default: QCCL_ALGO)");
  app.add_flag("--tune", o->tune,
               "Measure qccl's tuned sizes (shared-memory slice, reduction slice, chain chunk, single-copy "
               "piece) on this machine and write the tuning file QCCL_TUNE_FILE names (the collective "
               "argument and the size options are not used)");
  app.add_option("--out", o->out, "--tune: the file to write or add to (default: $QCCL_TUNE_FILE, else "
                 "qccl-tune.json)");
  app.add_option("--tune-ranks", o->tune_ranks, "--tune: counts of ranks to tune for, one after the other "
                 "(default 2,4 and the CPU count where larger); --np N: only N");
  app.add_option("--tune-rounds", o->tune_rounds, "--tune: timings per candidate value (the median counts)")
      ->capture_default_str();
  app.add_option("--timeout", o->timeout_s, "Deadline of every wait in seconds (default: QCCL_TIMEOUT_S)");
  app.callback([o] { run_perf(*o); });
}

}  // namespace

QK_REGISTER_COMMAND(perf, "Benchmark qccl collectives (nccl-tests style); --np N runs N ranks", setup_perf);

}  // namespace qk::cli
