// The knobs of the engine and the algorithms that depend on the machine,
// chosen when a communicator is made from what this machine reports and
// measures, never from figures taken on one development machine (issue 19):
//
//   spin_ns           how long a wait polls before it yields its core: the
//                     measured cost of one sched_yield (ski rental: spinning
//                     longer than a yield costs can at most double a wait)
//   direct_chunk      the mapped direct all-reduce's chunk: the L1 data cache
//   cma_chunk         single-copy reads and writes: an eighth of the L2 cache,
//                     so operand, result and destination lines stay in it
//   stream_from       non-temporal stores from this size: when the ranks'
//                     send and receive buffers no longer fit in the last-level cache
//   cma_min_bytes     engine messages go single-copy from this size: where the
//                     host's ranks' buffers outgrow the last-level cache (the
//                     rings' second copy then goes through memory), and never
//                     below the ring's size with more ranks than cores (a ring
//                     lets the sender go on without the receiver)
//   direct_min_bytes  all-reduces check for shared buffers from this size:
//                     where that check costs at most 5% of the call
//   register_min_bytes  plain buffers are looked up and registered
//                     (transport/registry.h) from this size: where checking a
//                     registration (timed at init) costs at most 5% of the call
//
// QCCL_SPIN_US, QCCL_CMA_MIN_BYTES and QCCL_DIRECT_MIN_BYTES override the
// derived values; QCCL_DEBUG=INFO prints them with the init time.
#pragma once

#include <cstddef>
#include <string>

namespace qccl {

struct CostModel;

struct Tuning {
  double spin_ns = 500;
  double yield_ns = 0;  // measured; 0 where not measured
  size_t direct_chunk = 32 << 10;
  size_t cma_chunk = 256 << 10;
  size_t stream_from = 4 << 20;
  size_t cma_min_bytes = 256 << 10;
  size_t direct_min_bytes = 64 << 10;
  size_t register_min_bytes = 1 << 20;
  double validate_ns = 0;  // measured cost of checking one registration
  std::string describe() const;  // one line for the INFO log
};

// Cache sizes as the C library reports them (0 where it does not know).
struct CacheSizes {
  size_t l1d = 0, l2 = 0, llc = 0;
};
CacheSizes cache_sizes();

// The machine's part: cache-derived sizes and the measured yield cost
// (a few tens of us). ranks_on_host: how many ranks share the caches.
Tuning machine_tuning(const CacheSizes& caches, int ranks_on_host);
// The model's part, on every rank from the same (agreed) model, so every
// rank takes the same paths: the single-copy and shared-buffer thresholds.
void derive_thresholds(Tuning& t, const CostModel& m, int nranks, bool oversubscribed, size_t ring_bytes);
// Cost of one sched_yield that returns at once, in ns (lower quartile of batches).
double measure_yield_ns();
// Cost of checking that one registration still holds (registry.h), in ns.
double measure_validate_ns();

}  // namespace qccl
