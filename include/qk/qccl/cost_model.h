// qccl's alpha-beta cost model (the one its per-call algorithm choice runs
// on: docs/qccl.md, "Hierarchical all-reduce") over links the caller
// describes instead of links a communicator measured: what a collective of
// `bytes` per rank costs on a planned cluster, and which of qccl's
// algorithms (ring, recursive doubling, all pairs, tree, chain,
// hierarchical) the model takes there.
//
//   qk::qccl::CollectiveLinks l;
//   l.intra = {3.0, 150.0};      // between ranks of a host: us per message, GB/s
//   l.inter = {5.0, 50.0};       // between hosts: the link a host's ranks share
//   l.hosts = 4;  l.ranks_per_host = 8;
//   auto e = qk::qccl::estimate_collective(qk::qccl::Collective::all_reduce, l, 64 << 20);
//   e.us;  e.algorithm;          // predicted microseconds, "hierarchical"
//
// The links mean what qccl's model means by them: each step of a flat
// algorithm pays the slowest link in use; the hierarchical all-reduce pays
// intra inside hosts and inter across them, where the cross-host rings of a
// host's ranks share `inter` (so `inter.gbps` is what one host can push, not
// one pair). A caller that runs several groups at once through the same
// hosts divides the figures among them.
#pragma once

#include <cstddef>
#include <string>

namespace qk::qccl {

enum class Collective { all_reduce, broadcast, reduce, all_gather, reduce_scatter, all_to_all };
const char* collective_name(Collective c);  // "all_reduce", ...

struct LinkFigures {
  double latency_us = 0;  // per message
  double gbps = 0;        // GB/s (1e9 B/s)
};

struct CollectiveLinks {
  LinkFigures intra;        // between ranks of one host
  LinkFigures inter;        // between hosts (a host's share)
  double reduce_gbps = 0;   // local reduction, GB/s per operand (0: free)
  int hosts = 1;            // hosts the group spans
  int ranks_per_host = 1;   // its ranks on each
};

struct CollectiveEstimate {
  double us = 0;
  std::string algorithm;  // qccl's name: "ring", "rd", "pairs", "tree", "chain", "hierarchical"
};

// The algorithm qccl's model chooses for `c` and its predicted time (0 us and
// "none" for one rank). ValueError for non-positive bandwidths or counts.
CollectiveEstimate estimate_collective(Collective c, const CollectiveLinks& links, double bytes);
// The predicted time of one named algorithm (ValueError: unknown name, or one
// that does not implement `c`; infinity where it is not available, such as
// hierarchical on one host).
double estimate_collective_us(Collective c, const CollectiveLinks& links, double bytes, const std::string& algorithm);

}  // namespace qk::qccl
