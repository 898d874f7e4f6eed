// Replaying a schedule trace with costs (replay.h).
#include "replay.h"

#include <algorithm>
#include <cmath>
#include <mutex>
#include <string>
#include <tuple>

#include "qk/base/error.h"

namespace qk::sim {

namespace {

using parallel::ScheduleOp;
using parallel::ScheduleOpKind;

// Arrival times of the sends on one (channel, from, to), in order.
using ChannelKey = std::tuple<int, int, int>;

struct Pending {
  bool sends = false, receives = false;
  double send_arrival = 0;
  ChannelKey recv_key{};
  size_t recv_index = 0;
};

enum class StageState { ready, computing, sleeping, blocked, done };

struct Stage {
  size_t pc = 0;
  StageState state = StageState::ready;
  double start = 0;  // computing: when the operation began
  double end = 0;    // computing: when it ends at the present speed; sleeping: when it wakes
  std::vector<Pending> exchanges;
  std::map<ChannelKey, size_t> received;  // receives posted per channel so far
  std::vector<double> live;               // micro-batches in flight per chunk
};

}  // namespace

// One clock for all stages: at each moment every stage runs its posts and
// satisfied waits, then starts its next forward or backward (computing),
// sleeps until a known arrival, or blocks on a send not yet posted; time
// moves to the next end or arrival. With a speed function the computing
// stages' rate follows how many compute (processor sharing), so a running
// operation's end moves when that count changes; without one every end is
// its start plus its cost, as each stage on its own clock would have it.
std::vector<StageReplay> replay(const std::vector<parallel::StageTrace>& trace, const std::vector<StageCosts>& costs,
                                bool record_spans, const StageSpeed& speed) {
  const size_t p = trace.size();
  QK_CHECK(costs.size() == p, "replay: ", costs.size(), " stage costs for ", p, " stages");
  std::map<ChannelKey, std::vector<double>> arrivals;
  std::vector<Stage> st(p);
  std::vector<StageReplay> out(p);
  for (size_t r = 0; r < p; ++r) {
    st[r].exchanges.resize(static_cast<size_t>(trace[r].num_exchanges));
    const size_t v = costs[r].forward.size();
    QK_CHECK(costs[r].backward.size() == v && costs[r].activation_bytes.size() == v && v >= 1,
             "replay: stage ", r, " has inconsistent per-chunk costs");
    st[r].live.assign(v, 0);
    out[r].last_backward_start.assign(v, 0);
    out[r].last_backward_end.assign(v, 0);
  }
  int64_t last_micro = 0;
  for (const auto& t : trace)
    for (const auto& op : t.ops) last_micro = std::max(last_micro, op.microbatch);

  double now = 0, rate = 1;  // rate: the computing stages' speed, as their ends were set
  // Stages that may move at `now`: those whose operation ended or whose
  // wait's send arrived, and those blocked on a channel just posted to.
  std::vector<size_t> work;
  std::vector<char> queued(p, 0);
  auto wake = [&](size_t r) {
    if (!queued[r]) {
      queued[r] = 1;
      work.push_back(r);
    }
  };
  // Runs stage r's operations that take no time at `now`; leaves it computing,
  // sleeping, blocked or done.
  auto advance = [&](size_t r) {
    Stage& s = st[r];
    const StageCosts& c = costs[r];
    StageReplay& o = out[r];
    const auto& ops = trace[r].ops;
    while (s.state == StageState::ready || s.state == StageState::blocked) {
      if (s.pc == ops.size()) {
        s.state = StageState::done;
        o.end = now;
        return;
      }
      const ScheduleOp& op = ops[s.pc];
      if (op.kind == ScheduleOpKind::forward || op.kind == ScheduleOpKind::backward) {
        const bool fwd = op.kind == ScheduleOpKind::forward;
        const size_t chunk = static_cast<size_t>(op.chunk);
        QK_CHECK(chunk < c.forward.size(), "replay: stage ", r, " runs chunk ", op.chunk, " but has costs for ",
                 c.forward.size());
        s.state = StageState::computing;
        s.start = now;
        s.end = now + (fwd ? c.forward[chunk] : c.backward[chunk]) / rate;
        s.live[chunk] += fwd ? 1 : -1;
        if (fwd) {
          double kept = 0;
          for (size_t k = 0; k < s.live.size(); ++k) kept += s.live[k] * c.activation_bytes[k];
          o.peak_activation_bytes = std::max(o.peak_activation_bytes, kept);
        }
        return;
      }
      if (op.kind == ScheduleOpKind::post) {
        Pending& e = s.exchanges.at(static_cast<size_t>(op.exchange));
        const int ch = static_cast<int>(op.channel);
        if (op.send_to >= 0) {
          const bool to_next = op.channel == parallel::P2PChannel::activation;
          e.sends = true;
          e.send_arrival = now + (to_next ? c.send_next : c.send_prev);
          arrivals[{ch, static_cast<int>(r), op.send_to}].push_back(e.send_arrival);
          if (st[static_cast<size_t>(op.send_to)].state == StageState::blocked) wake(static_cast<size_t>(op.send_to));
        }
        if (op.recv_from >= 0) {
          e.receives = true;
          e.recv_key = {ch, op.recv_from, static_cast<int>(r)};
          e.recv_index = s.received[e.recv_key]++;
        }
      } else {  // wait
        Pending& e = s.exchanges.at(static_cast<size_t>(op.exchange));
        double until = now;
        if (e.sends) until = std::max(until, e.send_arrival);
        if (e.receives) {
          auto it = arrivals.find(e.recv_key);
          if (it == arrivals.end() || it->second.size() <= e.recv_index) {  // not sent yet
            s.state = StageState::blocked;
            return;
          }
          until = std::max(until, it->second[e.recv_index]);
        }
        if (until > now) {
          if (record_spans)
            o.spans.push_back({e.receives ? parallel::SpanKind::recv : parallel::SpanKind::send, now * 1e6,
                               until * 1e6, e.receives ? "recv" : "send", -1, -1});
          s.state = StageState::sleeping;
          s.end = until;
          ++s.pc;
          return;
        }
      }
      s.state = StageState::ready;
      ++s.pc;
    }
  };
  // A computing stage whose operation ends now.
  auto finish = [&](size_t r) {
    Stage& s = st[r];
    const StageCosts& c = costs[r];
    StageReplay& o = out[r];
    const ScheduleOp& op = trace[r].ops[s.pc];
    const bool fwd = op.kind == ScheduleOpKind::forward;
    const size_t chunk = static_cast<size_t>(op.chunk);
    if (!fwd && op.microbatch == last_micro) {
      o.last_backward_start[chunk] = s.start;
      o.last_backward_end[chunk] = now;
    }
    if (record_spans) {
      std::string name(fwd ? "F" : "B");
      name += std::to_string(op.microbatch);
      if (c.forward.size() > 1) {
        name += '.';
        name += std::to_string(op.chunk);
      }
      o.spans.push_back({fwd ? parallel::SpanKind::forward : parallel::SpanKind::backward, s.start * 1e6, now * 1e6,
                         name, op.chunk, op.microbatch});
    }
    o.busy += now - s.start;
    s.state = StageState::ready;
    ++s.pc;
  };

  for (size_t r = 0; r < p; ++r) wake(r);
  for (;;) {
    while (!work.empty()) {
      const size_t r = work.back();
      work.pop_back();
      queued[r] = 0;
      if (st[r].state == StageState::ready || st[r].state == StageState::blocked) advance(r);
    }
    int computing = 0;
    size_t finished = 0;
    for (const Stage& s : st) {
      computing += s.state == StageState::computing;
      finished += s.state == StageState::done;
    }
    if (finished == p) break;
    if (speed && computing > 0) {
      const double want = speed(computing);
      QK_CHECK_AS(InternalError, want > 0, "replay: the speed of ", computing, " computing stages is ", want);
      if (want != rate) {
        for (Stage& s : st)
          if (s.state == StageState::computing) s.end = now + (s.end - now) * rate / want;
        rate = want;
      }
    }
    double next = INFINITY;
    for (const Stage& s : st)
      if (s.state == StageState::computing || s.state == StageState::sleeping) next = std::min(next, s.end);
    QK_CHECK_AS(InternalError, next < INFINITY, "replay: the schedule trace deadlocked (", p - finished,
                " stages blocked)");
    now = next;
    for (size_t r = 0; r < p; ++r) {
      if (st[r].end > now) continue;
      if (st[r].state == StageState::computing) {
        finish(r);
        wake(r);
      } else if (st[r].state == StageState::sleeping) {
        st[r].state = StageState::ready;
        wake(r);
      }
    }
  }
  return out;
}

std::shared_ptr<const std::vector<parallel::StageTrace>> cached_trace(const parallel::ScheduleTraceOptions& o) {
  static std::mutex mu;
  static std::map<std::tuple<int, int64_t, int, bool, bool>, std::shared_ptr<const std::vector<parallel::StageTrace>>>
      cache;
  const auto key = std::make_tuple(o.pipeline_size, o.num_microbatches, o.num_model_chunks, o.overlap_p2p_comm,
                                   o.forward_only);
  {
    std::lock_guard<std::mutex> lk(mu);
    if (auto it = cache.find(key); it != cache.end()) return it->second;
  }
  auto t = std::make_shared<const std::vector<parallel::StageTrace>>(parallel::trace_pipeline_schedule(o));
  std::lock_guard<std::mutex> lk(mu);
  if (cache.size() > 256) cache.clear();
  cache[key] = t;
  return t;
}

}  // namespace qk::sim
