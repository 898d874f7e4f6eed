#include "algo/cost_model.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <cstdlib>

#include "qk/base/env.h"
#include "qk/base/error.h"

namespace qccl {

namespace {
QK_ENV_STRING(env_cost_model, "QCCL_COST_MODEL", "measured",
              "Cost model figures: measured (ping-pong at init) or static (built-in defaults).");
QK_ENV_STRING(env_lat_us, "QCCL_LAT_US", "",
              "Cost model latency per message in us: one value, or per transport (shm=2,tcp=40).");
QK_ENV_DOUBLE(env_reduce_gbps, "QCCL_REDUCE_GBPS", 0.0,
              "Cost model: local reduction speed in GB/s per operand (0: measured or 4).");
QK_ENV_STRING(env_bw_gbps, "QCCL_BW_GBPS", "",
              "Cost model bandwidth per link in GB/s: one value, or per transport (shm=8,tcp=2).");

// The value `spec` gives `kind`: "5" gives every transport 5, "shm=2,tcp=40"
// gives each its own; 0 when it gives none.
double figure_for(const std::string& spec, const std::string& kind, const char* var) {
  if (spec.empty()) return 0;
  double all = 0, mine = 0;
  size_t pos = 0;
  while (pos <= spec.size()) {
    size_t end = spec.find(',', pos);
    if (end == std::string::npos) end = spec.size();
    std::string item = spec.substr(pos, end - pos);
    size_t eq = item.find('=');
    std::string key = eq == std::string::npos ? "" : item.substr(0, eq);
    std::string val = eq == std::string::npos ? item : item.substr(eq + 1);
    char* stop = nullptr;
    double v = std::strtod(val.c_str(), &stop);
    QK_CHECK(!val.empty() && *stop == '\0' && v > 0 && (key.empty() || key == "shm" || key == "tcp"),
             var, ": expected a positive number or shm=N,tcp=N, got '", spec, "'");
    if (key.empty()) all = v;
    else if (key == kind) mine = v;
    pos = end + 1;
  }
  return mine > 0 ? mine : all;
}

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

bool reduces(Coll c) { return c == Coll::kAllReduce || c == Coll::kReduce || c == Coll::kReduceScatter; }

// Ring all-reduce: reduce-scatter then all-gather, 2(n-1) steps of bytes/n,
// n-1 of them reducing. Ring all-gather / reduce-scatter and pairwise
// all-to-all: n-1 steps of bytes/n.
double ring_us(const CostModel& m, Coll c, int n, double s) {
  double red = reduces(c) ? (n - 1) * m.reduce_us(s / n) : 0;
  if (c == Coll::kAllReduce) return 2.0 * (n - 1) * m.step_us(s / n) + red;
  return (n - 1) * m.step_us(s / n) + red;
}
// Recursive doubling: log2 rounds of the whole buffer, each reducing all of
// it, plus a fold in and out when n is not a power of two.
double rd_us(const CostModel& m, Coll, int n, double s) {
  int rounds = floor_log2(n);
  bool fold = (1 << rounds) != n;
  return (rounds + (fold ? 2 : 0)) * m.step_us(s) + (rounds + (fold ? 1 : 0)) * m.reduce_us(s);
}
// All pairs: every rank sends its buffer to the n-1 others at once and
// reduces what it gets: one message latency, n-1 transfers and n-1
// reductions of the whole buffer, and a quarter of a latency of work per
// extra message (so it gives way to doubling from 16 ranks). 4 ranks on 2
// cores, 8 B: 3.6-4.7 us against 4.6-6.5 for doubling (Open MPI 4.5-5.0).
double all_pairs_us(const CostModel& m, Coll, int n, double s) {
  return m.alpha_us * (1 + 0.25 * (n - 2)) + (n - 1) * (s / (m.gbps * 1e3) + m.reduce_us(s));
}
double tree_us(const CostModel& m, Coll c, int n, double s) {
  return ceil_log2(n) * (m.step_us(s) + (reduces(c) ? m.reduce_us(s) : 0));
}
// Pipelined chain: n-2 steps to fill, then one step per chunk.
double chain_us(const CostModel& m, Coll c, int n, double s) {
  double chunks = std::max(1.0, std::ceil(s / static_cast<double>(m.chain_chunk)));
  double step = m.step_us(s / chunks) + (reduces(c) ? m.reduce_us(s / chunks) : 0);
  return (n - 2 + chunks) * step;
}

// Hierarchical all-reduce (L ranks on each of H hosts): ring reduce-scatter
// and all-gather inside the hosts over shm (2(L-1) steps of s/L, L-1 of them
// reducing), and L concurrent ring all-reduces of s/L across hosts over tcp
// (2(H-1) steps, H-1 reducing). The L cross-host rings share each host's
// link, so a cross-host step moves L blocks of s/(LH), s/H bytes, through the
// link the probe timed one pair at a time (2 hosts x 2 ranks behind a 1 gbit
// link: counting s/(LH) per step predicted a third of the measured time).
// Unavailable (infinite) on one host.
double hierarchical_us(const CostModel& m, Coll, int, double s) {
  if (m.hosts <= 1) return std::numeric_limits<double>::infinity();
  double L = m.ranks_per_host, H = m.hosts;
  double local = 2.0 * (L - 1) * m.shm.us(s / L) + (L - 1) * m.reduce_us(s / L);
  double across = 2.0 * (H - 1) * m.tcp.us(s / H) + (H - 1) * m.reduce_us(s / (L * H));
  return local + across;
}
// Direct all-reduce (algo/direct.h): a descriptor exchange and a completion
// exchange (each one round of messages to every peer, priced like all
// pairs), and each rank reduces its 1/n of the buffer from every rank's
// memory into every rank's. On qcclMemAlloc buffers every operand is a load
// (the reduction's speed); elsewhere the n-1 remote operands come in and the
// results go out through single-copy calls of cma_chunk bytes.
double exchange_us(const CostModel& m, int n) { return m.alpha_us * (1 + 0.25 * (n - 2)); }
double direct_us(const CostModel& m, Coll, int n, double s) {
  double share = s / n;
  double red = (n - 1) * m.reduce_us(share);
  if (!m.cma_everywhere) return 2 * exchange_us(m, n) + red;
  double calls = 2.0 * (n - 1) * std::ceil(share / static_cast<double>(m.cma_chunk));
  return 2 * exchange_us(m, n) + red + calls * m.cma.lat_us + 2.0 * (n - 1) * share / (m.cma.gbps * 1e3);
}
bool direct_usable(const CostModel& m) { return m.cma_everywhere && m.hosts <= 1; }
// The figures above are timed on buffers that stay in cache (the probe's
// 1 MiB bulk), where the rings' two copies cost little more than one. Once
// the send and receive buffers of the host's ranks (2 S per rank) outgrow the
// last-level cache every byte goes through memory, and there the direct
// all-reduce, which moves each byte through memory 4 times per rank (read
// two operands, store two results) in two rounds of messages, beats the
// ring's 2(n-1) rounds and extra copies: 2 ranks on the 2-core EPYC VM (32
// MiB L3), median of 5 runs, 16 MiB 3.7 ms direct against 4.5 ring, 64 MiB
// 13.8 against 14.0; 4 ranks, 16 MiB 9.5 against 13.7, 64 MiB 32 against 46;
// below the cache the ring or doubling won (4 MiB: 0.85 ms ring, 1.05 direct).
bool direct_preferred(const CostModel& m, int, double s) {
  return direct_usable(m) && m.llc_bytes > 0 && 2.0 * s * m.host_ranks > static_cast<double>(m.llc_bytes);
}

const AlgoDesc kAlgos[] = {
    {Algo::kRing, "ring",
     // all-to-all is a pairwise exchange, reported as ring
     [](Coll c) { return c != Coll::kBroadcast && c != Coll::kReduce; }, ring_us},
    {Algo::kRecursiveDoubling, "rd", [](Coll c) { return c == Coll::kAllReduce; }, rd_us},
    {Algo::kTree, "tree", [](Coll c) { return c == Coll::kBroadcast || c == Coll::kReduce; }, tree_us},
    {Algo::kChain, "chain", [](Coll c) { return c == Coll::kBroadcast || c == Coll::kReduce; }, chain_us},
    {Algo::kHierarchical, "hierarchical", [](Coll c) { return c == Coll::kAllReduce; }, hierarchical_us},
    {Algo::kAllPairs, "pairs", [](Coll c) { return c == Coll::kAllReduce; }, all_pairs_us},
    {Algo::kDirect, "direct", [](Coll c) { return c == Coll::kAllReduce; }, direct_us, direct_usable, direct_preferred},
};

const AlgoDesc& desc(Algo a) {
  for (const AlgoDesc& d : kAlgos)
    if (d.algo == a) return d;
  QK_INTERNAL_ASSERT(false, "algorithm ", static_cast<int>(a), " is not in kAlgos");
  return kAlgos[0];
}
}  // namespace

std::span<const AlgoDesc> algorithms() { return kAlgos; }

const char* algo_name(Algo a) { return desc(a).name; }

bool parse_algo(const std::string& s, Algo* out) {
  if (s.empty() || s == "auto") return false;
  std::string names;
  for (const AlgoDesc& d : kAlgos) {
    if (s == d.name) {
      *out = d.algo;
      return true;
    }
    names += std::string(", ") + d.name;
  }
  QK_THROW(qk::ValueError, "QCCL_ALGO: expected auto", names, ", got '", s, "'");
}

LinkCost static_link_cost(const std::string& kind) {
  // One host: a few us per message through the engine, memcpy-class
  // bandwidth; tcp: loopback or 10 GbE class.
  LinkCost l = kind == "tcp" ? LinkCost{30.0, 2.0} : LinkCost{3.0, 6.0};
  double lat = figure_for(env_lat_us.reload(), kind, "QCCL_LAT_US");
  double bw = figure_for(env_bw_gbps.reload(), kind, "QCCL_BW_GBPS");
  if (lat > 0) l.lat_us = lat;
  if (bw > 0) l.gbps = bw;
  return l;
}

double configured_reduce_gbps() {
  double v = env_reduce_gbps.reload();
  QK_CHECK(v >= 0, "QCCL_REDUCE_GBPS: expected GB/s >= 0, got ", v);
  return v;
}

bool lat_configured(const std::string& kind) {
  return figure_for(env_lat_us.reload(), kind, "QCCL_LAT_US") > 0;
}
bool bw_configured(const std::string& kind) {
  return figure_for(env_bw_gbps.reload(), kind, "QCCL_BW_GBPS") > 0;
}

bool cost_model_measured() {
  std::string v = env_cost_model.reload();
  QK_CHECK(v == "measured" || v == "static", "QCCL_COST_MODEL: expected measured or static, got '", v, "'");
  return v == "measured";
}

CostModel CostModel::for_transport(const std::string& kind) {
  CostModel m;
  m.shm = static_link_cost("shm");
  m.tcp = static_link_cost("tcp");
  m.use_slowest(kind != "tcp", kind == "tcp");
  if (configured_reduce_gbps() > 0) m.reduce_gbps = configured_reduce_gbps();
  m.source = lat_configured(kind) || bw_configured(kind) ? "configured" : "static";
  return m;
}

void CostModel::use_slowest(bool shm_in_use, bool tcp_in_use) {
  if (!shm_in_use && !tcp_in_use) shm_in_use = true;  // one rank: any figure will do
  alpha_us = std::max(shm_in_use ? shm.lat_us : 0.0, tcp_in_use ? tcp.lat_us : 0.0);
  gbps = std::min(shm_in_use ? shm.gbps : 1e300, tcp_in_use ? tcp.gbps : 1e300);
}

double predict_us(const CostModel& m, Coll coll, Algo a, int n, size_t bytes) {
  if (n <= 1) return 0;
  return desc(a).predict(m, coll, n, static_cast<double>(bytes));
}

Algo choose(const CostModel& m, const std::string& forced_name, Coll coll, int n, size_t bytes) {
  Algo forced;
  if (parse_algo(forced_name, &forced) && desc(forced).supports(coll)) return forced;
  for (const AlgoDesc& d : kAlgos)
    if (d.supports(coll) && d.preferred && d.preferred(m, n, static_cast<double>(bytes))) return d.algo;
  const AlgoDesc* best = nullptr;
  double best_t = 0;
  for (const AlgoDesc& d : kAlgos) {
    if (!d.supports(coll) || (d.usable && !d.usable(m)) || d.preferred) continue;
    double t = d.predict(m, coll, std::max(n, 2), static_cast<double>(bytes));
    if (!best || t < best_t) {
      best = &d;
      best_t = t;
    }
  }
  QK_INTERNAL_ASSERT(best, "no algorithm implements collective ", static_cast<int>(coll));
  return best->algo;
}

}  // namespace qccl
