// qk/qccl/cost_model.h: the private cost model (algo/cost_model.h) over
// figures the caller gives.
#include "qk/qccl/cost_model.h"

#include <limits>

#include "algo/cost_model.h"
#include "qk/base/error.h"

namespace qk::qccl {

namespace {

::qccl::Coll to_coll(Collective c) {
  switch (c) {
    case Collective::all_reduce: return ::qccl::Coll::kAllReduce;
    case Collective::broadcast: return ::qccl::Coll::kBroadcast;
    case Collective::reduce: return ::qccl::Coll::kReduce;
    case Collective::all_gather: return ::qccl::Coll::kAllGather;
    case Collective::reduce_scatter: return ::qccl::Coll::kReduceScatter;
    case Collective::all_to_all: return ::qccl::Coll::kAllToAll;
  }
  QK_INTERNAL_ASSERT(false, "collective ", static_cast<int>(c));
  return ::qccl::Coll::kAllReduce;
}

::qccl::CostModel model_of(const CollectiveLinks& l) {
  QK_CHECK(l.hosts >= 1 && l.ranks_per_host >= 1, "collective cost: hosts (", l.hosts, ") and ranks per host (",
           l.ranks_per_host, ") must be >= 1");
  QK_CHECK(l.ranks_per_host == 1 || l.intra.gbps > 0, "collective cost: the intra-host link needs a bandwidth > 0, got ",
           l.intra.gbps);
  QK_CHECK(l.hosts == 1 || l.inter.gbps > 0, "collective cost: the inter-host link needs a bandwidth > 0, got ",
           l.inter.gbps);
  QK_CHECK(l.intra.latency_us >= 0 && l.inter.latency_us >= 0 && l.reduce_gbps >= 0,
           "collective cost: latencies and the reduction speed must not be negative");
  ::qccl::CostModel m;
  m.shm = {l.intra.latency_us, l.intra.gbps > 0 ? l.intra.gbps : 1.0};
  m.tcp = {l.inter.latency_us, l.inter.gbps > 0 ? l.inter.gbps : 1.0};
  m.use_slowest(l.ranks_per_host > 1, l.hosts > 1);
  m.reduce_gbps = l.reduce_gbps > 0 ? l.reduce_gbps : std::numeric_limits<double>::infinity();
  m.cma_everywhere = false;  // host single copy: not a cluster's link
  m.llc_bytes = 0;
  m.hosts = l.hosts;
  m.ranks_per_host = l.ranks_per_host;
  m.source = "configured";
  return m;
}

}  // namespace

const char* collective_name(Collective c) {
  switch (c) {
    case Collective::all_reduce: return "all_reduce";
    case Collective::broadcast: return "broadcast";
    case Collective::reduce: return "reduce";
    case Collective::all_gather: return "all_gather";
    case Collective::reduce_scatter: return "reduce_scatter";
    case Collective::all_to_all: return "all_to_all";
  }
  return "?";
}

CollectiveEstimate estimate_collective(Collective c, const CollectiveLinks& l, double bytes) {
  QK_CHECK(bytes >= 0, "collective cost: bytes must not be negative, got ", bytes);
  const int n = l.hosts * l.ranks_per_host;
  if (n <= 1) return {0, "none"};
  const ::qccl::CostModel m = model_of(l);
  const size_t b = static_cast<size_t>(bytes);
  const ::qccl::Algo a = ::qccl::choose(m, "", to_coll(c), n, b);
  return {::qccl::predict_us(m, to_coll(c), a, n, b), ::qccl::algo_name(a)};
}

double estimate_collective_us(Collective c, const CollectiveLinks& l, double bytes, const std::string& algorithm) {
  const int n = l.hosts * l.ranks_per_host;
  ::qccl::Algo a;
  QK_CHECK(::qccl::parse_algo(algorithm, &a), "collective cost: name an algorithm, not '", algorithm, "'");
  bool supported = false;
  for (const auto& d : ::qccl::algorithms())
    if (d.algo == a) supported = d.supports(to_coll(c));
  QK_CHECK(supported, "collective cost: ", algorithm, " does not implement ", collective_name(c));
  if (n <= 1) return 0;
  return ::qccl::predict_us(model_of(l), to_coll(c), a, n, static_cast<size_t>(bytes));
}

}  // namespace qk::qccl
