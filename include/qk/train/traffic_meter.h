// The bytes each process group moves per training iteration: snapshots of
// ProcessGroup::traffic() around every step, averaged over a log interval
// (the Trainer reports them in LogStats::comm; `qk pretrain-gpt` prints
// them after each iteration line). Evaluation and checkpoints are left out.
//
//   qk::train::TrafficMeter meter;
//   meter.add("tp", tp.get());   meter.add("dp", dp.get());   // null or size 1: not metered
//   meter.add("pp", act);  meter.add("pp", grad);              // one label: the groups' sum
//   meter.begin_step();  runner.step(...);  meter.end_step();
//   for (const qk::train::GroupVolume& v : meter.take()) ...  // per iteration since the last take()
#pragma once

#include <string>
#include <vector>

#include "qk/dist/process_group.h"

namespace qk::train {

// One group's traffic per iteration, in bytes.
struct GroupVolume {
  std::string group;  // the label given to add()
  // The buffers handed to the calls, as nccl-tests' "size": all-reduce its
  // buffer, all-gather its output, reduce-scatter its input (see
  // dist::GroupTraffic); `other`: broadcast, all-to-all, send and receive.
  double all_reduce = 0, all_gather = 0, reduce_scatter = 0, other = 0;
  double calls = 0;
  // What qccl's algorithms sent and received on this rank (e.g. a ring
  // all-reduce of B bytes on n ranks sends 2(n-1)/n x B).
  double wire_sent = 0, wire_received = 0;
  double bytes() const { return all_reduce + all_gather + reduce_scatter + other; }
};

class TrafficMeter {
 public:
  // Meters `group` under `label`; groups added under one label are summed.
  void add(std::string label, dist::ProcessGroup* group);
  bool empty() const { return groups_.empty(); }
  void begin_step();
  void end_step();
  // Means per measured step since the previous take() (empty when nothing
  // is metered or no step ended), then starts over.
  std::vector<GroupVolume> take();

 private:
  struct Metered {
    std::string label;
    std::vector<dist::ProcessGroup*> groups;
    std::vector<dist::GroupTraffic> before;
    dist::GroupTraffic sum;
  };
  std::vector<Metered> groups_;
  int64_t steps_ = 0;
};

}  // namespace qk::train
