// A latency-bandwidth (alpha-beta) model of the links a communicator uses,
// and the per-call algorithm choice it drives. QCCL_ALGO overrides it.
//
//   Algo a = choose(comm.cost, comm.algo, Coll::kAllReduce, nranks, bytes);
//
// Figures per transport come from a short ping-pong at communicator set-up
// (cost_probe.h; QCCL_COST_MODEL=measured, the default) or from static
// defaults (QCCL_COST_MODEL=static); QCCL_LAT_US / QCCL_BW_GBPS replace
// either, for every transport ("5") or per transport ("shm=2,tcp=40").
//
// Adding an algorithm: a value in Algo, one row in kAlgos (cost_model.cc)
// with its name, the collectives it implements and its predicted time.
#pragma once

#include <cstddef>
#include <span>
#include <string>

namespace qccl {

enum class Algo { kRing, kRecursiveDoubling, kTree, kChain, kHierarchical, kDirect, kAllPairs };
enum class Coll { kAllReduce, kBroadcast, kReduce, kAllGather, kReduceScatter, kAllToAll };
constexpr int kNumColls = static_cast<int>(Coll::kAllToAll) + 1;

const char* algo_name(Algo a);
// Parses QCCL_ALGO's value; returns false for "auto".
bool parse_algo(const std::string& s, Algo* out);

// Latency and bandwidth of one kind of link.
struct LinkCost {
  double lat_us = 0;  // per message
  double gbps = 0;    // GB/s (1e9 B/s)
  double us(double bytes) const { return lat_us + bytes / (gbps * 1e3); }
};

struct CostModel {
  // Per transport, as measured or configured; each algorithm step pays the
  // slowest link in use (alpha_us, gbps), since a ring or a doubling round
  // waits for its slowest pair.
  LinkCost shm, tcp;
  double alpha_us = 3.0;  // per message
  double gbps = 6.0;      // per link, GB/s
  // Local reduction speed (bytes of each operand per second, GB/s): what
  // separates ring from recursive doubling on two ranks, where both move the
  // same bytes but doubling reduces all of them. QCCL_REDUCE_GBPS or measured.
  double reduce_gbps = 4.0;
  // Single copy between the ranks of one host (transport/cma.h): per system
  // call and GB/s into a cache-sized buffer, measured on ring neighbours.
  // cma_everywhere: every pair of ranks can read and write each other (then
  // the direct all-reduce works on any buffers, and the model may choose it).
  LinkCost cma{2.0, 6.0};
  bool cma_everywhere = false;
  size_t cma_chunk = 256 << 10;  // the pieces single-copy calls move (Tuning::cma_chunk)
  size_t chain_chunk = 256 << 10;  // the pipelined chain's chunk (Tuning::chain_chunk)
  // The last-level cache and the ranks that share it (this host's ranks):
  // where an all-reduce's buffers outgrow it, the direct all-reduce is taken
  // (see direct_preferred in cost_model.cc). 0: unknown, never.
  size_t llc_bytes = 0;
  int host_ranks = 1;
  const char* source = "static";  // "static", "measured", "configured" or a mix, for logs
  // Hierarchical all-reduce (algo/hierarchical.h): set by topo::attach when the
  // ranks span several hosts with equal counts; hosts 1: not available.
  int hosts = 1, ranks_per_host = 1;

  // Static figures (then QCCL_LAT_US / QCCL_BW_GBPS) with `kind` ("shm" or "tcp") the one in use.
  static CostModel for_transport(const std::string& kind);
  // Sets alpha_us / gbps to the slowest of the transports in use.
  void use_slowest(bool shm_in_use, bool tcp_in_use);
  double step_us(double bytes) const { return alpha_us + bytes / (gbps * 1e3); }
  double reduce_us(double bytes) const { return bytes / (reduce_gbps * 1e3); }
};

// The static figure of a transport, then QCCL_LAT_US / QCCL_BW_GBPS.
LinkCost static_link_cost(const std::string& kind);
// QCCL_REDUCE_GBPS (0: not configured).
double configured_reduce_gbps();
// Whether QCCL_LAT_US / QCCL_BW_GBPS configure `kind` (then a measurement does not replace them).
bool lat_configured(const std::string& kind);
bool bw_configured(const std::string& kind);
// QCCL_COST_MODEL: true for "measured" (the default), false for "static".
bool cost_model_measured();

// What choose() knows about an algorithm.
struct AlgoDesc {
  Algo algo;
  const char* name;
  bool (*supports)(Coll);
  // Predicted microseconds for `bytes` per rank over nranks >= 2.
  double (*predict)(const CostModel&, Coll, int nranks, double bytes);
  // Whether the model may choose it on this communicator (null: always).
  bool (*usable)(const CostModel&) = nullptr;
  // Taken without comparing predictions for these sizes (null: never).
  bool (*preferred)(const CostModel&, int nranks, double bytes) = nullptr;
};
std::span<const AlgoDesc> algorithms();

// Predicted time of `a` for `coll`, in microseconds (for choosing and for logs).
double predict_us(const CostModel& m, Coll coll, Algo a, int nranks, size_t bytes);
// The algorithm for one call: `forced` (the comm's QCCL_ALGO / config.algo)
// when it applies to `coll`, else the cheapest by the model.
Algo choose(const CostModel& m, const std::string& forced, Coll coll, int nranks, size_t bytes);

}  // namespace qccl
