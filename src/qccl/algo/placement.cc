#include "algo/placement.h"

#include <sched.h>

#include <algorithm>
#include <map>
#include <set>

#include "algo/cost_probe.h"
#include "core/debug.h"
#include "engine.h"
#include "qk/base/env.h"

namespace qccl {

namespace {

QK_ENV_BOOL(env_spread, "QCCL_SPREAD", true,
            "At set-up, move a rank that shares its CPU with another rank of its host to a free CPU "
            "(its mask is given back at once: nothing stays bound).");
QK_ENV_BOOL(env_bind, "QCCL_BIND", true,
            "With more ranks on a host than CPUs their masks allow, bind each rank's calling thread to one "
            "CPU, spread evenly (threads it starts later inherit the binding); 0 leaves masks alone.");

constexpr size_t kMaxListed = 64;  // CPUs a rank lists; allowed_count says how many there are

}  // namespace

std::vector<Placement> placement_plan(const std::vector<RankCpus>& ranks, bool spread, bool bind) {
  const size_t n = ranks.size();
  std::vector<Placement> plan(n);
  std::map<uint64_t, std::vector<size_t>> hosts;  // host -> its ranks, in rank order
  for (size_t i = 0; i < n; ++i) hosts[ranks[i].host].push_back(i);
  for (const auto& [host, members] : hosts) {
    std::set<int> cpus;
    size_t most = 0;  // a mask's CPU count: a lower bound where lists were cut at kMaxListed
    bool known = true;  // a rank that could not read its mask reports none
    for (size_t i : members) {
      cpus.insert(ranks[i].allowed.begin(), ranks[i].allowed.end());
      most = std::max(most, static_cast<size_t>(ranks[i].allowed_count));
      known = known && ranks[i].allowed_count > 0;
    }
    if (!known) continue;
    const bool oversubscribed = members.size() > std::max(cpus.size(), most);
    for (size_t i : members) plan[i].oversubscribed = oversubscribed;
    if (oversubscribed && bind) {
      std::map<int, int> load;
      for (size_t i : members)
        if (ranks[i].allowed_count == 1 && !ranks[i].allowed.empty()) ++load[ranks[i].allowed[0]];
      for (size_t i : members) {
        if (ranks[i].allowed_count <= 1) continue;
        int best = -1;
        for (int cpu : ranks[i].allowed)
          if (best < 0 || load[cpu] < load[best]) best = cpu;
        if (best < 0) continue;
        ++load[best];
        plan[i].cpu = best;
        plan[i].bind = true;
      }
    } else if (!oversubscribed && spread) {
      std::set<int> taken;
      for (size_t i : members) taken.insert(ranks[i].cpu);
      std::set<int> seen;
      for (size_t i : members) {
        const int cpu = ranks[i].cpu;
        if (cpu < 0 || seen.insert(cpu).second) continue;  // the lowest rank on a CPU stays
        for (int candidate : ranks[i].allowed)
          if (!taken.count(candidate)) {
            plan[i].cpu = candidate;
            taken.insert(candidate);
            break;
          }
      }
    }
  }
  return plan;
}

bool place_local_ranks(qcclComm& c) {
  const bool spread = env_spread.get(), bind = env_bind.get();
  if (c.nranks < 2) return false;
  cpu_set_t mask;
  CPU_ZERO(&mask);
  // Every rank takes part in the gather below, even one that cannot read its mask.
  if (::sched_getaffinity(0, sizeof mask, &mask) != 0) CPU_ZERO(&mask);
  std::vector<int> allowed;
  for (int i = 0; i < CPU_SETSIZE && allowed.size() < kMaxListed; ++i)
    if (CPU_ISSET(i, &mask)) allowed.push_back(i);
  // What each rank says: host, CPU, how many CPUs its mask allows, and which (-1 after the last).
  const size_t k = 3 + kMaxListed;
  std::vector<double> mine(k, -1.0);
  mine[0] = static_cast<double>(c.peers[c.rank].host_hash >> 12);  // exact in a double
  mine[1] = ::sched_getcpu();
  mine[2] = CPU_COUNT(&mask);
  for (size_t i = 0; i < allowed.size(); ++i) mine[3 + i] = allowed[i];
  Call call(c, "placement", MsgKind::kProbe, mine.size() * sizeof(double), "gather");
  std::vector<Placement> plan;
  std::vector<double> reply = gather_and_answer(call, mine, 3, [&](const std::vector<double>& all, int r) {
    if (plan.empty()) {
      std::vector<RankCpus> ranks(c.nranks);
      for (int q = 0; q < c.nranks; ++q) {
        const double* v = all.data() + q * k;
        ranks[q].host = static_cast<uint64_t>(v[0]);
        ranks[q].cpu = static_cast<int>(v[1]);
        ranks[q].allowed_count = static_cast<int>(v[2]);
        for (size_t i = 3; i < k && v[i] >= 0; ++i) ranks[q].allowed.push_back(static_cast<int>(v[i]));
      }
      plan = placement_plan(ranks, spread, bind);
    }
    return std::vector<double>{static_cast<double>(plan[r].cpu), plan[r].bind ? 1.0 : 0.0,
                               plan[r].oversubscribed ? 1.0 : 0.0};
  });
  finish(call);
  const bool oversubscribed = reply[2] != 0;
  const int to = static_cast<int>(reply[0]);
  if (to < 0) return oversubscribed;
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(to, &one);
  const bool moved = ::sched_setaffinity(0, sizeof one, &one) == 0;
  if (reply[1] != 0) {
    QCCL_INFO("INIT", "comm '{}' rank {}: more ranks on this host than CPUs; {} CPU {} (QCCL_BIND=0: leave it)",
              c.name, c.rank, moved ? "bound to" : "could not bind to", to);
    return oversubscribed;
  }
  ::sched_setaffinity(0, sizeof mask, &mask);  // spreading: nothing stays bound
  QCCL_INFO("INIT", "comm '{}' rank {}: shared CPU {} with a rank of this host; {} CPU {}", c.name, c.rank,
            static_cast<int>(mine[1]), moved ? "moved to" : "could not move to", to);
  return oversubscribed;
}

}  // namespace qccl
