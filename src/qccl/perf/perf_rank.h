// One rank's side of the perf harness (qk/qccl/perf.h): its buffers, the call
// of the collective, its exact inputs and the count of wrong elements, the
// timed loop. PerfBenchmark drives it; the tests reach its buffers to see
// the check catch a wrong element.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "qk/qccl/perf.h"

namespace qk::qccl {

class PerfRank {
 public:
  // Buffers of max_bytes (+ 64) each, zeroed.
  PerfRank(qcclComm_t comm, const PerfOptions& o);

  int rank() const { return rank_; }
  int nranks() const { return n_; }
  size_t element_bytes() const { return es_; }
  const PerfCollectiveInfo& info() const { return ci_; }
  char* send_buffer() { return sendbuf_.get(); }
  char* recv_buffer() { return recvbuf_.get(); }
  // Where the result of a call lands (alltoallv: recv_counts() at recv_displs()).
  char* output(size_t count, bool in_place);

  // Sets alltoallv's blocks for `count` elements per rank (other collectives: nothing).
  void layout(size_t count);
  // One call of the collective; IoError when it fails.
  void call(size_t count, bool in_place);
  // Exact inputs for one call (qk/qccl/check_data.h).
  void fill_inputs(size_t count, bool in_place);
  // Elements of this rank's output that differ from the reference.
  int64_t count_wrong(size_t count, bool in_place);
  // fill_inputs, call, count_wrong.
  int64_t check_once(size_t count, bool in_place);
  // Sum over the ranks (collective).
  int64_t total_wrong(int64_t mine);
  // warmup calls, a barrier, iters timed calls: the mean time per call on
  // the slowest rank, in microseconds (collective).
  double time_us(size_t count, bool in_place);

 private:
  using Buffer = std::unique_ptr<char, void (*)(char*)>;
  static Buffer make_buffer(size_t bytes, bool shared);
  void barrier();

  const PerfCollectiveInfo& ci_;
  PerfOptions o_;
  qcclComm_t comm_;
  int rank_ = 0, n_ = 1;
  size_t es_ = 0;
  Buffer sendbuf_{nullptr, nullptr}, recvbuf_{nullptr, nullptr};
  // alltoallv's blocks for the current row (layout()), packed in rank order.
  std::vector<size_t> send_counts_, send_displs_, recv_counts_, recv_displs_;
};

}  // namespace qk::qccl
