// The `qk run` agents' meeting point for each attempt of a job: which nodes
// take part (elastic: between min_nodes and max_nodes of them), in which
// order, and the watch kept while the attempt runs (failures, heartbeats,
// nodes waiting to join).
//
// Node 0's agent hosts the store and decides; every agent reads its answer.
// Store keys (attempt k):
//   run/attempt         the attempt node 0 has opened last
//   run/k/node/<id>     node <id> joined attempt k ("<host> nproc <n>")
//   run/k/joined        how many nodes joined attempt k (an add counter)
//   run/k/members       the nodes of attempt k in rank order ("0,1,3"), set
//                       by node 0 when every node joined, or when at least
//                       min_nodes did and the last call has passed
//   run/k/failed        the first failure (every agent restarts)
//   run/k/regroup       node 0 saw a node wait for attempt k+1 while k has
//                       fewer than max_nodes: a restart that is not a failure
//   run/k/beat/<id>     node <id>'s heartbeat counter (node 0 watches)
//   run/k/done/<id>     node <id>'s workers all exited 0
// A node that joins after the members were set waits for attempt k+1.
#pragma once

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "qk/qccl/store.h"

namespace qk::dist {

struct RendezvousOptions {
  int node_id = 0;       // unique, 0..max_nodes-1; 0 hosts the store and decides
  int min_nodes = 1;
  int max_nodes = 1;
  int nproc_per_node = 1;
  double timeout_s = 300;    // for min_nodes to join
  double last_call_s = 2;    // once min_nodes joined, for the others
  double heartbeat_timeout_s = 10;
};

struct Membership {
  int attempt = 0;
  std::vector<int> nodes;  // node ids in rank order
  int position = 0;        // this node's index in `nodes` (its GROUP_RANK)
};

class Rendezvous {
 public:
  using Clock = std::chrono::steady_clock;

  // `interrupted` is polled while waiting; when it returns true, join()
  // returns std::nullopt.
  Rendezvous(qccl::Store& store, RendezvousOptions o, bool (*interrupted)());

  // Joins the first attempt >= `attempt` that this node can still join and
  // returns its members (throws TimeoutError naming the missing nodes).
  std::optional<Membership> join(int attempt);

  // While an attempt runs, every ~250 ms: beats (non-zero nodes) and, on
  // node 0, checks the others' heartbeats and waiting nodes. Returns why the
  // attempt must end, if it must: {failure text, counts as a failure}.
  struct End {
    std::string why;
    bool failure = true;  // false: a regroup, not counted against --max-restarts
    bool fatal = false;   // a worker refused the job's size: nobody restarts
  };
  std::optional<End> watch(const Membership& m);
  // Publishes a failure (the first one wins); fatal: no agent restarts.
  void fail(const Membership& m, const std::string& why, bool fatal);
  // This node gives up: node 0 need not wait for it at the next attempt.
  void leave(const Membership& m);
  // Marks this node done; on node 0, true once every member is done.
  void set_done(const Membership& m);
  bool all_done(const Membership& m);
  std::optional<std::string> failure(const Membership& m);

 private:
  std::string key(int attempt, const std::string& rest) const;
  void announce(int attempt);
  std::vector<int> decide(int attempt);  // node 0
  Membership read_members(int attempt);
  // Node 0: seconds since node `id`'s heartbeat counter of `attempt` last
  // changed (since this attempt began when none was seen).
  double silent_for(int attempt, int id);
  // False when interrupted; TimeoutError saying `what` at the deadline.
  bool wait_for(const std::string& key, Clock::time_point deadline, const std::string& what);

  qccl::Store& store_;
  RendezvousOptions o_;
  bool (*interrupted_)();
  std::optional<Membership> last_;  // the attempt this node last took part in
  Clock::time_point attempt_started_{};
  Clock::time_point next_watch_{};
  Clock::time_point last_beat_{};
  int64_t beats_sent_ = 0;
  struct Seen {
    std::string value;
    Clock::time_point at;
  };
  std::map<int, Seen> beats_seen_;  // node 0: last heartbeat value per member
};

}  // namespace qk::dist
