#include "rendezvous.h"
#include "qk/dist/agent.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <algorithm>
#include <thread>

#include "qk/base/error.h"

namespace qk::dist {
namespace {

using Clock = Rendezvous::Clock;
constexpr auto kPoll = std::chrono::milliseconds(100);
constexpr auto kWatchEvery = std::chrono::milliseconds(250);
// The same on every node, whatever its --heartbeat-timeout (>= 2 s: several
// beats fit in it).
constexpr auto kBeatEvery = std::chrono::milliseconds(500);

std::string hostname() {
  char h[256] = {0};
  ::gethostname(h, sizeof h - 1);
  return h;
}

Clock::time_point after(double seconds) {
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

std::string join_ids(const std::vector<int>& ids) { return fmt::format("{}", fmt::join(ids, ",")); }

int to_int(const std::string& s, const char* what) {
  size_t used = 0;
  int v = 0;
  try {
    v = std::stoi(s, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  QK_CHECK_AS(ValueError, used == s.size() && !s.empty(), what, ": expected an integer, got '", s, "'");
  return v;
}

}  // namespace

std::pair<int, int> parse_nnodes(const std::string& s) {
  const size_t colon = s.find(':');
  if (colon == std::string::npos) {
    const int n = to_int(s, "--nnodes");
    QK_CHECK_AS(ValueError, n >= 1, "--nnodes: expected >= 1, got ", n);
    return {n, n};
  }
  const int lo = to_int(s.substr(0, colon), "--nnodes MIN:MAX (MIN)");
  const int hi = to_int(s.substr(colon + 1), "--nnodes MIN:MAX (MAX)");
  QK_CHECK_AS(ValueError, lo >= 1 && lo <= hi, "--nnodes ", s, ": expected 1 <= MIN <= MAX");
  return {lo, hi};
}

Rendezvous::Rendezvous(qccl::Store& store, RendezvousOptions o, bool (*interrupted)())
    : store_(store), o_(o), interrupted_(interrupted) {
  QK_CHECK_AS(ValueError, o_.min_nodes >= 1 && o_.min_nodes <= o_.max_nodes, "rendezvous: expected 1 <= min nodes (",
              o_.min_nodes, ") <= max nodes (", o_.max_nodes, ")");
  QK_CHECK_AS(ValueError, o_.node_id >= 0 && o_.node_id < o_.max_nodes, "--node-rank: expected 0..",
              o_.max_nodes - 1, ", got ", o_.node_id);
}

std::string Rendezvous::key(int attempt, const std::string& rest) const {
  return fmt::format("run/{}/{}", attempt, rest);
}

bool Rendezvous::wait_for(const std::string& k, Clock::time_point deadline, const std::string& what) {
  for (;;) {
    if (interrupted_()) return false;
    const double left = std::chrono::duration<double>(deadline - Clock::now()).count();
    try {
      store_.wait({k}, std::max(0.0, std::min(0.5, left)));
      return true;
    } catch (const TimeoutError&) {
      if (left > 0.5) continue;
      QK_THROW(TimeoutError, "rendezvous at ", store_.address(), " timed out after ", o_.timeout_s, " s ", what,
               " (--rdzv-timeout sets the deadline)");
    }
  }
}

void Rendezvous::announce(int attempt) {
  const std::string k = key(attempt, fmt::format("node/{}", o_.node_id));
  if (auto other = store_.try_get(k))
    QK_THROW(ValueError, "rendezvous (attempt ", attempt, "): node rank ", o_.node_id, " already joined from '",
             *other, "'; give every node its own --node-rank");
  store_.set(k, fmt::format("{} nproc {}", hostname(), o_.nproc_per_node));
  store_.add(key(attempt, "joined"), 1);
}

// Node 0: waits until the attempt's members are known. The first attempt
// takes every node that joins within the last call after min_nodes did (all
// of them: at once); a later one waits for each node of the attempt before
// unless it left or its heartbeats stopped, so a restart after a failure
// regroups as soon as the survivors are back.
std::vector<int> Rendezvous::decide(int attempt) {
  const auto deadline = after(o_.timeout_s);
  std::optional<Clock::time_point> min_reached;
  std::vector<int> present;
  int64_t counted = -1;
  for (;;) {
    if (interrupted_()) return {};
    const int64_t joined = store_.add(key(attempt, "joined"), 0);
    if (joined != counted) {
      counted = joined;
      present.clear();
      for (int id = 0; id < o_.max_nodes; ++id)
        if (store_.check({key(attempt, fmt::format("node/{}", id))})) present.push_back(id);
    }
    const int n = static_cast<int>(present.size());
    if (n >= o_.min_nodes && !min_reached) min_reached = Clock::now();
    if (n == o_.max_nodes) return present;
    if (n >= o_.min_nodes) {
      if (last_) {
        bool waiting = false;
        for (int id : last_->nodes) {
          if (std::find(present.begin(), present.end(), id) != present.end()) continue;
          if (store_.check({key(last_->attempt, fmt::format("left/{}", id))})) continue;
          if (silent_for(last_->attempt, id) < o_.heartbeat_timeout_s) waiting = true;
        }
        if (!waiting) return present;
      } else if (seconds_since(*min_reached) >= o_.last_call_s) {
        return present;
      }
    }
    if (Clock::now() >= deadline) {
      std::vector<int> absent;
      for (int id = 0; id < o_.max_nodes; ++id)
        if (std::find(present.begin(), present.end(), id) == present.end()) absent.push_back(id);
      const std::string missing = fmt::format("{}", fmt::join(absent, ", "));
      if (n >= o_.min_nodes)  // enough nodes, but one of the last attempt's still beats and never came back
        QK_THROW(TimeoutError, "rendezvous (attempt ", attempt, ") at ", store_.address(), " timed out after ",
                 o_.timeout_s, " s waiting for node(s) of the attempt before that still send heartbeats but did "
                 "not rejoin (of ", missing, "); their agents are alive but stuck: stop them, or let them rejoin");
      const std::string need =
          o_.min_nodes == o_.max_nodes ? std::to_string(o_.max_nodes)
                                       : fmt::format("at least {} (--nnodes {}:{})", o_.min_nodes, o_.min_nodes,
                                                     o_.max_nodes);
      QK_THROW(TimeoutError, "rendezvous (attempt ", attempt, ") at ", store_.address(), " timed out after ",
               o_.timeout_s, " s: node(s) ", missing, " of ", o_.max_nodes, " never joined and ", need,
               " are needed (start `qk run --nnodes ", o_.min_nodes == o_.max_nodes ? std::to_string(o_.max_nodes)
               : fmt::format("{}:{}", o_.min_nodes, o_.max_nodes), " --node-rank I ...` on each, with the same "
               "--master-addr/--master-port and QK_STORE_TOKEN; --rdzv-timeout sets the deadline)");
    }
    std::this_thread::sleep_for(kPoll);
  }
}

double Rendezvous::silent_for(int attempt, int id) {
  auto v = store_.try_get(key(attempt, fmt::format("beat/{}", id)));
  auto it = beats_seen_.find(id);
  if (v && (it == beats_seen_.end() || it->second.value != *v))
    it = beats_seen_.insert_or_assign(id, Seen{*v, Clock::now()}).first;
  return seconds_since(it == beats_seen_.end() ? attempt_started_ : it->second.at);
}

Membership Rendezvous::read_members(int attempt) {
  Membership m;
  m.attempt = attempt;
  m.position = -1;
  const std::string list = store_.get(key(attempt, "members"));
  size_t begin = 0;
  while (begin < list.size()) {
    size_t end = list.find(',', begin);
    if (end == std::string::npos) end = list.size();
    m.nodes.push_back(to_int(list.substr(begin, end - begin), "rendezvous members"));
    begin = end + 1;
  }
  for (size_t i = 0; i < m.nodes.size(); ++i) {
    const int id = m.nodes[i];
    if (id == o_.node_id) m.position = static_cast<int>(i);
    const std::string v = store_.get(key(attempt, fmt::format("node/{}", id)));
    QK_CHECK(v.size() >= 8 && v.substr(v.rfind(' ') + 1) == std::to_string(o_.nproc_per_node),
             "rendezvous: node ", id, " is '", v, "', but this node runs --nproc-per-node ", o_.nproc_per_node,
             "; every node must use the same value");
  }
  return m;
}

std::optional<Membership> Rendezvous::join(int attempt) {
  int k = attempt;
  auto deadline = after(o_.timeout_s);
  if (o_.node_id != 0) {
    // A node that starts (or comes back) late joins the attempt node 0 is
    // forming, or the next one.
    if (!wait_for("run/attempt", deadline, "waiting for node 0 to open an attempt")) return std::nullopt;
    k = std::max(k, to_int(store_.get("run/attempt"), "rendezvous attempt"));
  }
  for (;;) {
    attempt_started_ = Clock::now();
    if (o_.node_id == 0) {
      store_.set("run/attempt", std::to_string(k));
    } else {
      while (store_.check({key(k, "members")})) ++k;  // started already (a node that comes back)
    }
    announce(k);
    if (o_.node_id == 0) {
      const std::vector<int> members = decide(k);
      if (members.empty()) return std::nullopt;
      store_.set(key(k, "members"), join_ids(members));
    } else if (!wait_for(key(k, "members"), deadline,
                         fmt::format("waiting for node 0 to start attempt {} (it waits for the other nodes)", k))) {
      return std::nullopt;
    }
    Membership m = read_members(k);
    if (m.position >= 0) {
      last_ = m;
      beats_seen_.clear();
      beats_sent_ = 0;
      next_watch_ = Clock::now();
      return m;
    }
    // Attempt k started without this node: wait for the next one, which
    // node 0 opens once it sees this node waiting.
    ++k;
    deadline = after(o_.timeout_s);
  }
}

std::optional<Rendezvous::End> Rendezvous::watch(const Membership& m) {
  if (Clock::now() < next_watch_) return std::nullopt;
  next_watch_ = Clock::now() + kWatchEvery;
  if (auto f = store_.try_get(key(m.attempt, "failed")))
    return End{*f, true, store_.check({key(m.attempt, "fatal")})};
  if (auto r = store_.try_get(key(m.attempt, "regroup"))) return End{*r, false, false};
  if (o_.node_id != 0) {
    if (Clock::now() - last_beat_ >= kBeatEvery) {
      store_.set(key(m.attempt, fmt::format("beat/{}", o_.node_id)), std::to_string(++beats_sent_));
      last_beat_ = Clock::now();
    }
    return std::nullopt;
  }
  for (int id : m.nodes) {
    if (id == 0) continue;
    const double silent = silent_for(m.attempt, id);
    if (silent > o_.heartbeat_timeout_s) {
      const std::string why = fmt::format("node {} sent no heartbeat for {:.0f} s (--heartbeat-timeout): taking it "
                                          "as lost",
                                          id, silent);
      fail(m, why, false);
      return End{why, true, false};
    }
  }
  if (static_cast<int>(m.nodes.size()) < o_.max_nodes && store_.add(key(m.attempt + 1, "joined"), 0) > 0) {
    const std::string why =
        fmt::format("a node is waiting to join; regrouping ({} of at most {} nodes now)", m.nodes.size(),
                    o_.max_nodes);
    if (!store_.check({key(m.attempt, "failed")})) store_.set(key(m.attempt, "regroup"), why);
    return End{why, false, false};
  }
  return std::nullopt;
}

void Rendezvous::fail(const Membership& m, const std::string& why, bool fatal) {
  if (fatal) store_.set(key(m.attempt, "fatal"), "1");
  if (!store_.check({key(m.attempt, "failed")})) store_.set(key(m.attempt, "failed"), why);
}

void Rendezvous::leave(const Membership& m) { store_.set(key(m.attempt, fmt::format("left/{}", o_.node_id)), "1"); }

std::optional<std::string> Rendezvous::failure(const Membership& m) {
  return store_.try_get(key(m.attempt, "failed"));
}

void Rendezvous::set_done(const Membership& m) {
  store_.set(key(m.attempt, fmt::format("done/{}", o_.node_id)), "ok");
}

bool Rendezvous::all_done(const Membership& m) {
  std::vector<std::string> keys;
  for (int id : m.nodes) keys.push_back(key(m.attempt, fmt::format("done/{}", id)));
  return store_.check(keys);
}

}  // namespace qk::dist
