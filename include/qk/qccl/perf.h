// nccl-tests' benchmark harness on qccl, what `qk perf` prints: a sweep of
// sizes over one collective, each size checked on exact inputs outside the
// timed loop (qk/qccl/check_data.h, as nccl-tests' -c 1), then timed out of
// place and in place; the time is the slowest rank's, the bandwidths are
// nccl-tests' algbw (bytes / time) and busbw (algbw x the collective's bus
// factor: all_reduce 2(n-1)/n; all_gather, reduce_scatter, alltoall,
// alltoallv (n-1)/n; broadcast, reduce 1), in GB/s (1e9 B/s).
//
//   qk::qccl::PerfOptions o;                   // all_reduce, float, sum, 8 B .. 64 MiB, x2
//   o.max_bytes = 1 << 20;
//   qk::qccl::PerfBenchmark bench(comm, o);    // on every rank of comm
//   if (rank == 0) std::fputs(qk::qccl::perf_table_header().c_str(), stdout);
//   qk::qccl::PerfSummary s = bench.run([&](const qk::qccl::PerfRow& row) {
//     if (rank == 0) std::fputs(qk::qccl::perf_table_row(row, o).c_str(), stdout);
//   });
//   if (rank == 0) std::fputs(qk::qccl::perf_table_summary(s).c_str(), stdout);
//   // s.wrong == 0: every checked element was exact on every rank
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "qccl.h"

namespace qk::qccl {

enum class PerfCollective { all_reduce, broadcast, reduce, all_gather, reduce_scatter, alltoall, alltoallv };

struct PerfCollectiveInfo {
  const char* name;  // as `qk perf` spells it: "all_reduce", ..., "alltoallv"
  PerfCollective collective;
  bool has_op, has_root;
  bool has_in_place;  // alltoallv (qcclAllToAllv) is out of place only
};
// Every collective, in the order above.
const std::vector<PerfCollectiveInfo>& perf_collectives();
const PerfCollectiveInfo& perf_collective_info(PerfCollective c);
// The collective called `name`; null when there is none.
const PerfCollectiveInfo* find_perf_collective(std::string_view name);

// The blocks of the alltoallv benchmark (and of bench/qccl_mpi_alltoallv.c,
// which must match): each rank sends `count` elements in all, rank r giving
// rank j the share (2k+1)/n^2 of them, k = (j - r) mod n (rounded down; the
// last share takes the remainder). Shares run from 1/n^2 (to itself) to
// (2n-1)/n^2 around the mean 1/n, and every rank also receives `count`.
extern const char* const kAllToAllvPattern;  // that, in a sentence for --help
// share[k] for k = 0 .. nranks-1; they add up to count.
std::vector<size_t> alltoallv_shares(size_t count, int nranks);

struct PerfOptions {
  PerfCollective collective = PerfCollective::all_reduce;
  qcclDataType_t type = qcclFloat32;
  qcclRedOp_t op = qcclSum;  // all_reduce, reduce, reduce_scatter
  int root = 0;              // broadcast, reduce
  size_t min_bytes = 8, max_bytes = size_t(64) << 20;
  double factor = 2;         // between sizes, > 1
  int iters = 20;            // timed calls per size and placement
  int warmup = 5;            // untimed calls before them
  bool check = true;         // check each size once, outside the timed loop
  bool registered = false;   // buffers from qcclMemAlloc (nccl-tests' registration), else malloc
  // How the table names the type and the operation (the user's spelling).
  std::string type_name = "float", op_name = "sum";
};

// The sizes of the sweep in bytes: min_bytes, then each times factor (and
// at least one more byte) up to max_bytes (0 is followed by 1).
// ValueError when min_bytes > max_bytes or factor <= 1.
std::vector<size_t> perf_sizes(size_t min_bytes, size_t max_bytes, double factor);

// Elements per call for a size in bytes (nccl-tests: the size is the largest
// buffer, so all_gather, reduce_scatter and alltoall send size / n per rank).
size_t perf_count(PerfCollective c, size_t size_bytes, size_t element_bytes, int nranks);
// The bytes a row reports for `count` elements per call.
size_t perf_bytes(PerfCollective c, size_t count, size_t element_bytes, int nranks);
// busbw / algbw.
double perf_bus_factor(PerfCollective c, int nranks);

struct PerfResult {
  bool measured = false;  // false: not run (alltoallv in place)
  double us = 0;          // mean time per call on the slowest rank
  double algbw = 0, busbw = 0;  // GB/s
  int64_t wrong = -1;     // elements wrong on all ranks together; -1: not checked
};

struct PerfRow {
  size_t bytes = 0, count = 0;
  PerfResult out_of_place, in_place;
};

struct PerfSummary {
  int64_t wrong = 0;     // over every checked result
  double avg_busbw = 0;  // mean busbw of the measured results
  int measured = 0;
};

// One rank's share of the benchmark over comm. Every rank of comm makes one
// with the same options and calls the same methods in the same order (they
// are collective). The buffers (max_bytes each, send and receive) are
// allocated here; ValueError for bad options, IoError when a collective fails.
class PerfBenchmark {
 public:
  PerfBenchmark(qcclComm_t comm, PerfOptions options);
  ~PerfBenchmark();
  PerfBenchmark(const PerfBenchmark&) = delete;
  PerfBenchmark& operator=(const PerfBenchmark&) = delete;

  const PerfOptions& options() const;
  // One size: checked (options().check), then timed, out of place, then in place.
  PerfRow run_size(size_t size_bytes);
  // Every size of perf_sizes(min_bytes, max_bytes, factor), on_row after each.
  PerfSummary run(const std::function<void(const PerfRow&)>& on_row = {});

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The table in nccl-tests' layout: three heading lines, a line per row
// (size, count, type, redop, root, then time/algbw/busbw/#wrong out of place
// and in place; N/A where not run or not checked), the two summary lines.
// Each ends in a newline.
std::string perf_table_header();
std::string perf_table_row(const PerfRow& row, const PerfOptions& options);
std::string perf_table_summary(const PerfSummary& summary);

// Single-thread memcpy, the peer figure for qccl's shared-memory copies.
struct MemcpyRow {
  size_t bytes = 0;
  double us = 0;    // mean time per copy
  double gbps = 0;  // GB/s
};
// Sizes min_bytes (at least 1) then x factor up to max_bytes (none when
// min_bytes > max_bytes); warmup untimed and iters timed copies of each;
// on_row after each. ValueError when factor <= 1.
std::vector<MemcpyRow> perf_memcpy(size_t min_bytes, size_t max_bytes, double factor, int iters, int warmup,
                                   const std::function<void(const MemcpyRow&)>& on_row = {});
std::string perf_memcpy_table_header();
std::string perf_memcpy_table_row(const MemcpyRow& row);

}  // namespace qk::qccl
