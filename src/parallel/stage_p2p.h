// Point to point between adjacent pipeline stages (Megatron's
// p2p_communication.py): activations to the next stage and from the previous
// one on one communicator, their gradients the other way on another, as
// asynchronous batches the schedules wait on now (no overlap) or when the
// tensor is needed (overlap). Stages form a ring (next of the last is the
// first), which the interleaved schedule uses between model chunks.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "qk/dist/process_group.h"
#include "qk/parallel/schedule_trace.h"
#include "qk/parallel/timeline.h"

namespace qk::parallel {

// One batch in flight: an optional send and an optional receive. Copies
// share it; waiting twice waits once.
class Exchange {
 public:
  Exchange() = default;
  bool defined() const { return state_ != nullptr; }
  bool receives() const { return state_ && state_->received.defined(); }
  // Waits (a recv span when it receives, else a send span); errors name the
  // peers' stages and global ranks.
  void wait(Timeline* timeline);
  // wait(), then the received tensor.
  Tensor take(Timeline* timeline);
  bool done() const;

 private:
  friend class StageP2P;
  struct State {
    dist::WorkPtr work;
    Tensor received;
    std::string what;  // "stage 1 (rank 3) sending an activation to stage 2 (rank 5)"
    bool waited = false;
    StageTrace* trace = nullptr;  // a recording StageP2P's: waits are written there
    int id = -1;                  // the exchange's number in the trace
  };
  std::shared_ptr<State> state_;
};

class StageP2P {
 public:
  // act/grad: the two communicators over the pipeline's stages (null for a
  // single stage); global_ranks: each stage's rank in the job, for errors.
  // Received tensors are allocated on `device` (where the stage's model lives).
  StageP2P(dist::ProcessGroup* act, dist::ProcessGroup* grad, std::vector<int> global_ranks, Shape shape, DType dtype,
           Timeline* timeline, Device device = kCPU);
  // Recording: stage `rank` of `size` moves nothing; every exchange it posts
  // and waits on is appended to `trace` (schedule_trace.h), and the tensors
  // it hands out are [1] f32 placeholders.
  StageP2P(int rank, int size, StageTrace* trace);

  int rank() const { return rank_; }
  int size() const { return size_; }
  bool is_first() const { return rank_ == 0; }
  bool is_last() const { return rank_ == size_ - 1; }

  // Sends `output` (undefined: nothing) to the next stage and, with recv,
  // receives an activation from the previous one. Undefined when it does neither.
  Exchange forward(const Tensor& output, bool recv);
  // Sends `input_grad` (undefined: nothing) to the previous stage and, with
  // recv, receives an output gradient from the next one.
  Exchange backward(const Tensor& input_grad, bool recv);

  // Keeps a send-only exchange until it completes (overlap: nothing waits on it).
  void keep(const Exchange& e);
  // Waits for everything kept (end of the schedule).
  void finish();

 private:
  Exchange exchange(dist::ProcessGroup& pg, const Tensor& send, int send_to, bool recv, int recv_from,
                    const char* tensor_name);
  Exchange record(const Tensor& send, int send_to, bool recv, int recv_from, P2PChannel channel);
  std::string stage_name(int stage) const;
  Tensor checked(const Tensor& t) const;

  dist::ProcessGroup* act_;
  dist::ProcessGroup* grad_;
  std::vector<int> global_ranks_;
  int rank_ = 0, size_ = 1;
  Shape shape_;
  DType dtype_;
  Device device_;
  Timeline* timeline_;
  StageTrace* trace_ = nullptr;
  std::vector<Exchange> kept_;
};

}  // namespace qk::parallel
