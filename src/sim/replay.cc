// Replaying a schedule trace with costs (replay.h).
#include "replay.h"

#include <algorithm>
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

struct Stage {
  size_t pc = 0;
  double t = 0;
  std::vector<Pending> exchanges;
  std::map<ChannelKey, size_t> received;  // receives posted per channel so far
  std::vector<double> live;               // micro-batches in flight per chunk
};

}  // namespace

std::vector<StageReplay> replay(const std::vector<parallel::StageTrace>& trace, const std::vector<StageCosts>& costs,
                                bool record_spans) {
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

  size_t finished = 0;
  while (finished < p) {
    bool progress = false;
    finished = 0;
    for (size_t r = 0; r < p; ++r) {
      Stage& s = st[r];
      const StageCosts& c = costs[r];
      StageReplay& o = out[r];
      const auto& ops = trace[r].ops;
      while (s.pc < ops.size()) {
        const ScheduleOp& op = ops[s.pc];
        if (op.kind == ScheduleOpKind::forward || op.kind == ScheduleOpKind::backward) {
          const bool fwd = op.kind == ScheduleOpKind::forward;
          const size_t chunk = static_cast<size_t>(op.chunk);
          QK_CHECK(chunk < c.forward.size(), "replay: stage ", r, " runs chunk ", op.chunk, " but has costs for ",
                   c.forward.size());
          const double d = fwd ? c.forward[chunk] : c.backward[chunk];
          if (!fwd && op.microbatch == last_micro) {
            o.last_backward_start[chunk] = s.t;
            o.last_backward_end[chunk] = s.t + d;
          }
          if (record_spans) {
            std::string name(fwd ? "F" : "B");
            name += std::to_string(op.microbatch);
            if (c.forward.size() > 1) {
              name += '.';
              name += std::to_string(op.chunk);
            }
            o.spans.push_back({fwd ? parallel::SpanKind::forward : parallel::SpanKind::backward, s.t * 1e6,
                               (s.t + d) * 1e6, name, op.chunk, op.microbatch});
          }
          s.t += d;
          o.busy += d;
          s.live[chunk] += fwd ? 1 : -1;
          if (fwd) {
            double kept = 0;
            for (size_t k = 0; k < s.live.size(); ++k) kept += s.live[k] * c.activation_bytes[k];
            o.peak_activation_bytes = std::max(o.peak_activation_bytes, kept);
          }
        } else if (op.kind == ScheduleOpKind::post) {
          Pending& e = s.exchanges.at(static_cast<size_t>(op.exchange));
          const int ch = static_cast<int>(op.channel);
          if (op.send_to >= 0) {
            const bool to_next = op.channel == parallel::P2PChannel::activation;
            e.sends = true;
            e.send_arrival = s.t + (to_next ? c.send_next : c.send_prev);
            arrivals[{ch, static_cast<int>(r), op.send_to}].push_back(e.send_arrival);
          }
          if (op.recv_from >= 0) {
            e.receives = true;
            e.recv_key = {ch, op.recv_from, static_cast<int>(r)};
            e.recv_index = s.received[e.recv_key]++;
          }
        } else {  // wait
          Pending& e = s.exchanges.at(static_cast<size_t>(op.exchange));
          double until = s.t;
          if (e.sends) until = std::max(until, e.send_arrival);
          if (e.receives) {
            auto it = arrivals.find(e.recv_key);
            if (it == arrivals.end() || it->second.size() <= e.recv_index) break;  // not sent yet: blocked
            until = std::max(until, it->second[e.recv_index]);
          }
          if (record_spans && until > s.t)
            o.spans.push_back({e.receives ? parallel::SpanKind::recv : parallel::SpanKind::send, s.t * 1e6,
                               until * 1e6, e.receives ? "recv" : "send", -1, -1});
          s.t = until;
        }
        ++s.pc;
        progress = true;
      }
      if (s.pc == ops.size()) {
        ++finished;
        o.end = s.t;
      }
    }
    QK_CHECK_AS(InternalError, progress || finished == p, "replay: the schedule trace deadlocked (",
                p - finished, " stages blocked)");
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
