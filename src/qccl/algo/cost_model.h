// A latency-bandwidth (alpha-beta) model of the links a communicator uses,
// and the per-call algorithm choice it drives. QCCL_ALGO overrides it.
//
//   Algo a = choose(comm.cost, Coll::kAllReduce, nranks, bytes);
//
// Defaults per transport are conservative figures for one host (shm) and a
// loopback or 10 GbE link (tcp); QCCL_LAT_US / QCCL_BW_GBPS replace them.
#pragma once

#include <cstddef>
#include <string>

namespace qccl {

enum class Algo { kRing, kRecursiveDoubling, kTree, kChain };
enum class Coll { kAllReduce, kBroadcast, kReduce, kAllGather, kReduceScatter, kAllToAll };

const char* algo_name(Algo a);
// Parses QCCL_ALGO's value; returns false for "auto".
bool parse_algo(const std::string& s, Algo* out);

struct CostModel {
  double alpha_us = 3.0;  // per message
  double gbps = 6.0;      // per link, GB/s
  // Settings for the slowest transport in use ("shm" or "tcp"), then the overrides.
  static CostModel for_transport(const std::string& kind);
  double step_us(double bytes) const { return alpha_us + bytes / (gbps * 1e3); }
};

// Predicted time of `a` for `coll`, in microseconds (for choosing and for logs).
double predict_us(const CostModel& m, Coll coll, Algo a, int nranks, size_t bytes);
// The algorithm for one call: `forced` (the comm's QCCL_ALGO / config.algo)
// when it applies to `coll`, else the cheapest by the model.
Algo choose(const CostModel& m, const std::string& forced, Coll coll, int nranks, size_t bytes);

// Chunk size of the pipelined chain (broadcast, reduce).
constexpr size_t kChainChunk = 256 << 10;

}  // namespace qccl
