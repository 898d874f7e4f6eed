// TrafficMeter: per-group ProcessGroup::traffic() deltas around training steps.
#include "qk/train/traffic_meter.h"

namespace qk::train {

namespace {

void add_into(dist::GroupTraffic& sum, const dist::GroupTraffic& d) {
  for (auto op : {&dist::GroupTraffic::all_reduce, &dist::GroupTraffic::broadcast, &dist::GroupTraffic::all_gather,
                  &dist::GroupTraffic::reduce_scatter, &dist::GroupTraffic::all_to_all, &dist::GroupTraffic::send,
                  &dist::GroupTraffic::recv}) {
    (sum.*op).calls += (d.*op).calls;
    (sum.*op).bytes += (d.*op).bytes;
  }
  sum.wire_bytes_sent += d.wire_bytes_sent;
  sum.wire_bytes_received += d.wire_bytes_received;
  sum.wire_messages_sent += d.wire_messages_sent;
  sum.wire_messages_received += d.wire_messages_received;
}

}  // namespace

void TrafficMeter::add(std::string label, dist::ProcessGroup* group) {
  if (!group || group->size() < 2) return;
  for (Metered& m : groups_)
    if (m.label == label) {
      m.groups.push_back(group);
      m.before.emplace_back();
      return;
    }
  groups_.push_back({std::move(label), {group}, {{}}, {}});
}

void TrafficMeter::begin_step() {
  for (Metered& m : groups_)
    for (size_t i = 0; i < m.groups.size(); ++i) m.before[i] = m.groups[i]->traffic();
}

void TrafficMeter::end_step() {
  for (Metered& m : groups_)
    for (size_t i = 0; i < m.groups.size(); ++i) add_into(m.sum, m.groups[i]->traffic() - m.before[i]);
  ++steps_;
}

std::vector<GroupVolume> TrafficMeter::take() {
  std::vector<GroupVolume> out;
  if (steps_ == 0) return out;
  const double n = static_cast<double>(steps_);
  for (Metered& m : groups_) {
    const dist::GroupTraffic& s = m.sum;
    GroupVolume v;
    v.group = m.label;
    v.all_reduce = static_cast<double>(s.all_reduce.bytes) / n;
    v.all_gather = static_cast<double>(s.all_gather.bytes) / n;
    v.reduce_scatter = static_cast<double>(s.reduce_scatter.bytes) / n;
    v.other = static_cast<double>(s.broadcast.bytes + s.all_to_all.bytes + s.send.bytes + s.recv.bytes) / n;
    v.calls = static_cast<double>(s.all_reduce.calls + s.broadcast.calls + s.all_gather.calls +
                                  s.reduce_scatter.calls + s.all_to_all.calls + s.send.calls + s.recv.calls) /
              n;
    v.wire_sent = static_cast<double>(s.wire_bytes_sent) / n;
    v.wire_received = static_cast<double>(s.wire_bytes_received) / n;
    out.push_back(v);
    m.sum = {};
  }
  steps_ = 0;
  return out;
}

}  // namespace qk::train
