#include "qccl/algo/cost_model.h"

#include <cmath>

#include "qccl/core/settings.h"
#include "qk/base/env.h"
#include "qk/base/error.h"

namespace qccl {

namespace {
QK_ENV_DOUBLE(env_lat_us, "QCCL_LAT_US", 0.0,
              "Cost model: per-message latency in microseconds (0: transport default).");
QK_ENV_DOUBLE(env_bw_gbps, "QCCL_BW_GBPS", 0.0,
              "Cost model: per-link bandwidth in GB/s (0: transport default).");

int ceil_log2(int n) {
  int l = 0;
  while ((1 << l) < n) ++l;
  return l;
}
int floor_log2(int n) {
  int l = 0;
  while ((2 << l) <= n) ++l;
  return l;
}

bool supports(Coll c, Algo a) {
  switch (c) {
    case Coll::kAllReduce: return a == Algo::kRing || a == Algo::kRecursiveDoubling;
    case Coll::kBroadcast:
    case Coll::kReduce: return a == Algo::kTree || a == Algo::kChain;
    case Coll::kAllGather:
    case Coll::kReduceScatter: return a == Algo::kRing;
    case Coll::kAllToAll: return a == Algo::kRing;  // pairwise exchange, reported as ring
  }
  return false;
}
}  // namespace

const char* algo_name(Algo a) {
  switch (a) {
    case Algo::kRing: return "ring";
    case Algo::kRecursiveDoubling: return "rd";
    case Algo::kTree: return "tree";
    case Algo::kChain: return "chain";
  }
  return "?";
}

bool parse_algo(const std::string& s, Algo* out) {
  if (s.empty() || s == "auto") return false;
  if (s == "ring") *out = Algo::kRing;
  else if (s == "rd") *out = Algo::kRecursiveDoubling;
  else if (s == "tree") *out = Algo::kTree;
  else if (s == "chain") *out = Algo::kChain;
  else QK_THROW(qk::ValueError, "QCCL_ALGO: expected auto, ring, rd, tree or chain, got '", s, "'");
  return true;
}

CostModel CostModel::for_transport(const std::string& kind) {
  CostModel m;
  if (kind == "tcp") {
    m.alpha_us = 30.0;
    m.gbps = 2.0;
  }
  if (env_lat_us.get() > 0) m.alpha_us = env_lat_us.get();
  if (env_bw_gbps.get() > 0) m.gbps = env_bw_gbps.get();
  return m;
}

double predict_us(const CostModel& m, Coll coll, Algo a, int n, size_t bytes) {
  if (n <= 1) return 0;
  double s = static_cast<double>(bytes);
  switch (coll) {
    case Coll::kAllReduce:
      if (a == Algo::kRing) return 2.0 * (n - 1) * m.step_us(s / n);
      {
        int p2 = 1 << floor_log2(n);
        int extra = p2 == n ? 0 : 2;
        return (floor_log2(n) + extra) * m.step_us(s);
      }
    case Coll::kBroadcast:
    case Coll::kReduce: {
      if (a == Algo::kTree) return ceil_log2(n) * m.step_us(s);
      double chunks = std::max(1.0, std::ceil(s / kChainChunk));
      return (n - 2 + chunks) * m.step_us(s / chunks);
    }
    case Coll::kAllGather:
    case Coll::kReduceScatter: return (n - 1) * m.step_us(s / n);
    case Coll::kAllToAll: return (n - 1) * m.step_us(s / n);
  }
  return 0;
}

Algo choose(const CostModel& m, const std::string& forced_name, Coll coll, int n, size_t bytes) {
  Algo forced;
  if (parse_algo(forced_name, &forced) && supports(coll, forced)) return forced;
  Algo best = Algo::kRing;
  double best_t = -1;
  for (Algo a : {Algo::kRing, Algo::kRecursiveDoubling, Algo::kTree, Algo::kChain}) {
    if (!supports(coll, a)) continue;
    double t = predict_us(m, coll, a, n, bytes);
    if (best_t < 0 || t < best_t) {
      best = a;
      best_t = t;
    }
  }
  return best;
}

}  // namespace qccl
