// Where a communicator's ranks run on their host's CPUs, settled at set-up.
#pragma once

#include <cstdint>
#include <vector>

#include "comm.h"

namespace qccl {

// What one rank reports: its host, the CPU it runs on, how many CPUs its mask
// allows and (the first 64 of) which.
struct RankCpus {
  uint64_t host = 0;
  int cpu = -1;
  int allowed_count = 0;
  std::vector<int> allowed;
};

// What a rank is to do: move to `cpu` for set-up and give its mask back
// (spread), stay bound to `cpu` (bind), or nothing (cpu -1); and whether its
// host has more ranks than the CPUs their masks allow together.
struct Placement {
  int cpu = -1;
  bool bind = false;
  bool oversubscribed = false;
  bool operator==(const Placement&) const = default;
};

// The plan for every rank, per host:
// - more ranks than the CPUs their masks allow together (oversubscribed) and
//   `bind`: each rank whose mask allows more than one CPU is bound to the
//   allowed CPU with the fewest ranks so far (ranks already confined to one
//   CPU count first), so the host's ranks share its CPUs evenly;
// - otherwise, with `spread`: a rank reporting the CPU of a lower rank of
//   its host moves to a CPU no rank of its host reports, if its mask allows
//   one.
std::vector<Placement> placement_plan(const std::vector<RankCpus>& ranks, bool spread, bool bind);

// Collective at set-up, before anything is timed: the ranks tell rank 0
// their CPUs and it answers each with its Placement (placement_plan with
// QCCL_SPREAD and QCCL_BIND). Returns whether this rank's host has more
// ranks than the CPUs their masks allow: a container's cpuset or a taskset
// can leave 2 CPUs to a job on a host whose sysconf counts 64.
//
// Spreading: ranks of one host that the scheduler started on one CPU (forked
// ranks start where their parent ran) can stay there: a waiting rank yields
// its core to the very peer it waits for, and the pair runs at context-switch
// speed (2 ranks on the 2-core VM, unbound: 5 us per 8-byte all-reduce in 1
// run of 3, 0.3 us bound). The moved rank's mask is given back at once.
//
// Binding: with more ranks than CPUs, unbound ranks run at the scheduler's
// mercy: 4 ranks on the 2-core EPYC VM, 8-byte all-reduce, 8 runs alternating:
// median 6.1 us unbound (3.6-8.5) against 4.6 us bound (3.8-6.3); Open MPI
// 6.2 us in the same runs. The binding stays (like mpirun's --bind-to
// core:overload-allowed) and covers the calling thread, so threads it starts
// later inherit it; QCCL_BIND=0 leaves masks alone.
bool place_local_ranks(qcclComm& c);

}  // namespace qccl
