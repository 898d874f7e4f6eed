// The knobs of the engine and the algorithms that depend on the machine,
// chosen when a communicator is made from what this machine reports and
// measures, never from figures taken on one development machine:
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
//
// Four sizes no cheap probe predicts (docs/qccl.md: derived from the
// ping-pong's latency and bandwidth they lost up to 6x) are measured by
// `qk perf --tune`, which times the collectives that use them at candidate
// values and writes a tuning file (algo/tune_file.h) that QCCL_TUNE_FILE
// names; without one they keep the defaults below:
//
//   shm_slice       a shared-memory producer publishes at least every slice,
//                   so the consumer starts early
//   reduce_slice    a receive-and-reduce consumes the ring in slices, so the
//                   producer can refill behind it
//   chain_chunk     the pipelined chain's chunk (broadcast, reduce); agreed
//                   between all ranks at init (both ends must cut alike)
//   cma_copy_chunk  a plain single-copy receive moves this much per progress
//                   step, so other transfers keep moving
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
  size_t shm_slice = 64 << 10;
  size_t reduce_slice = 64 << 10;
  size_t chain_chunk = 256 << 10;
  size_t cma_copy_chunk = 4 << 20;
  std::string sizes_from = "defaults";  // where the four sizes came from, for the INFO log
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
// The four measured sizes: QCCL_SHM_SLICE_BYTES, QCCL_REDUCE_SLICE_BYTES,
// QCCL_CHAIN_CHUNK_BYTES and QCCL_CMA_COPY_CHUNK_BYTES, else the entry of the
// tuning file QCCL_TUNE_FILE names nearest ranks_on_host, else the defaults.
// A file that cannot be read, or that was written on another CPU model, is
// reported (a warning, once per process) and left out: a rank that stopped
// here would leave the others waiting at the next step of init.
void apply_tuned_sizes(Tuning& t, int ranks_on_host);
// The model's part, on every rank from the same (agreed) model, so every
// rank takes the same paths: the single-copy and shared-buffer thresholds.
void derive_thresholds(Tuning& t, const CostModel& m, int nranks, bool oversubscribed, size_t ring_bytes);
// Cost of one sched_yield that returns at once, in ns (lower quartile of batches).
double measure_yield_ns();
// Cost of checking that one registration still holds (registry.h), in ns.
double measure_validate_ns();

}  // namespace qccl
