// Batches of sends and receives between adjacent pipeline stages.
#include "stage_p2p.h"

#include "qk/base/error.h"
#include "qk/tensor/ops/view.h"

namespace qk::parallel {

void Exchange::wait(Timeline* timeline) {
  if (!state_ || state_->waited) return;
  if (state_->trace) {  // recording: the wait is the event
    ScheduleOp op;
    op.kind = ScheduleOpKind::wait;
    op.exchange = state_->id;
    state_->trace->ops.push_back(op);
    state_->waited = true;
    return;
  }
  SpanScope span(timeline, receives() ? SpanKind::recv : SpanKind::send, state_->what);
  // The error says which stage and job rank this one was talking to; qccl's
  // message under it names the peer that failed and how.
  try {
    state_->work->wait();
  } catch (const TimeoutError& e) {
    throw TimeoutError("pipeline: " + state_->what + " failed: " + e.message(), __FILE__, __LINE__);
  } catch (const IoError& e) {
    throw IoError("pipeline: " + state_->what + " failed: " + e.message(), __FILE__, __LINE__);
  }
  state_->waited = true;
  state_->work.reset();
}

Tensor Exchange::take(Timeline* timeline) {
  QK_CHECK_AS(InternalError, receives(), "Exchange::take: this exchange receives nothing");
  wait(timeline);
  return state_->received;
}

// A recorded exchange is done only once waited on, so kept sends are waited at finish().
bool Exchange::done() const {
  return !state_ || state_->waited || (!state_->trace && state_->work->is_completed());
}

StageP2P::StageP2P(dist::ProcessGroup* act, dist::ProcessGroup* grad, std::vector<int> global_ranks, Shape shape,
                   DType dtype, Timeline* timeline, Device device)
    : act_(act), grad_(grad), global_ranks_(std::move(global_ranks)), shape_(std::move(shape)), dtype_(dtype),
      device_(device), timeline_(timeline) {
  size_ = act_ ? act_->size() : 1;
  rank_ = act_ ? act_->rank() : 0;
  QK_CHECK_AS(InternalError, static_cast<int>(global_ranks_.size()) == size_, "StageP2P: ", global_ranks_.size(),
              " global ranks for ", size_, " stages");
}

StageP2P::StageP2P(int rank, int size, StageTrace* trace)
    : act_(nullptr), grad_(nullptr), rank_(rank), size_(size), shape_({1}), dtype_(DType::f32), device_(kCPU),
      timeline_(nullptr), trace_(trace) {
  QK_CHECK_AS(InternalError, trace && size >= 1 && rank >= 0 && rank < size, "StageP2P: recording stage ", rank,
              " of ", size);
  global_ranks_.resize(static_cast<size_t>(size));
  for (int i = 0; i < size; ++i) global_ranks_[static_cast<size_t>(i)] = i;
}

std::string StageP2P::stage_name(int stage) const {
  return "stage " + std::to_string(stage) + " (global rank " + std::to_string(global_ranks_[stage]) + ")";
}

Tensor StageP2P::checked(const Tensor& t) const {
  QK_CHECK(t.shape() == shape_ && t.dtype() == dtype_, "pipeline: ", stage_name(rank_), " produced an activation ",
           shape_str(t.shape()), " ", dtype_name(t.dtype()), ", but the stages exchange ", shape_str(shape_), " ",
           dtype_name(dtype_),
           " ([--micro-batch-size, --seq-length (/ --tensor-model-parallel-size under --sequence-parallel), "
           "--hidden-size] in the model's dtype); every stage must be built with the same settings");
  return ops::contiguous(t.detach());
}

Exchange StageP2P::exchange(dist::ProcessGroup& pg, const Tensor& send, int send_to, bool recv, int recv_from,
                            const char* tensor_name) {
  std::vector<dist::P2POp> ops;
  std::string what = stage_name(rank_);
  Exchange e;
  e.state_ = std::make_shared<Exchange::State>();
  if (send.defined()) {
    ops.push_back(dist::P2POp::send(checked(send), send_to));
    what += std::string(" sending ") + tensor_name + " to " + stage_name(send_to);
  }
  if (recv) {
    e.state_->received = empty(shape_, TensorOptions(dtype_).device(device_));
    ops.push_back(dist::P2POp::recv(e.state_->received, recv_from));
    what += std::string(send.defined() ? " and" : "") + " receiving " + tensor_name + " from " + stage_name(recv_from);
  }
  if (ops.empty()) return {};
  e.state_->what = std::move(what);
  e.state_->work = pg.batch_isend_irecv(ops);
  return e;
}

Exchange StageP2P::record(const Tensor& send, int send_to, bool recv, int recv_from, P2PChannel channel) {
  if (!send.defined() && !recv) return {};
  Exchange e;
  e.state_ = std::make_shared<Exchange::State>();
  e.state_->trace = trace_;
  e.state_->id = trace_->num_exchanges++;
  if (recv) e.state_->received = zeros(shape_);
  ScheduleOp op;
  op.kind = ScheduleOpKind::post;
  op.exchange = e.state_->id;
  op.channel = channel;
  op.send_to = send.defined() ? send_to : -1;
  op.recv_from = recv ? recv_from : -1;
  trace_->ops.push_back(op);
  return e;
}

Exchange StageP2P::forward(const Tensor& output, bool recv) {
  if (size_ == 1) return {};
  const int next = (rank_ + 1) % size_, prev = (rank_ + size_ - 1) % size_;
  if (trace_) return record(output, next, recv, prev, P2PChannel::activation);
  return exchange(*act_, output, next, recv, prev, "an activation");
}

Exchange StageP2P::backward(const Tensor& input_grad, bool recv) {
  if (size_ == 1) return {};
  const int next = (rank_ + 1) % size_, prev = (rank_ + size_ - 1) % size_;
  if (trace_) return record(input_grad, prev, recv, next, P2PChannel::gradient);
  return exchange(*grad_, input_grad, prev, recv, next, "a gradient");
}

void StageP2P::keep(const Exchange& e) {
  if (!e.defined()) return;
  // Completed ones are waited on (which surfaces a failure; no span: nothing
  // waited) and dropped.
  std::erase_if(kept_, [](Exchange& k) {
    if (!k.done()) return false;
    k.wait(nullptr);
    return true;
  });
  kept_.push_back(e);
}

void StageP2P::finish() {
  for (Exchange& e : kept_) e.wait(timeline_);
  kept_.clear();
}

}  // namespace qk::parallel
