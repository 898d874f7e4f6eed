// The interleaved 1F1B schedule (Megatron's
// forward_backward_pipelining_with_interleaving with
// microbatch_group_size_per_vp_stage = p): each rank holds v model chunks;
// micro-batches go through chunk 0 of every stage, then chunk 1, ..., in
// groups of p, so a stage waits v times less at the pipeline's fill and drain.
#include <utility>
#include <vector>

#include "qk/base/error.h"
#include "schedule_context.h"

namespace qk::parallel {

namespace {

// A chunk's micro-batches: how each input and output gradient arrives (in
// micro-batch order, so the n-th delivered is micro-batch n), and what the
// backward needs.
struct ChunkState {
  explicit ChunkState(int64_t m) : input_rx(m), grad_rx(m), inputs(m), outputs(m) {}
  std::vector<Exchange> input_rx, grad_rx;
  std::vector<Tensor> inputs, outputs;
  int64_t inputs_delivered = 0, grads_delivered = 0;
};

// One run of the schedule: virtual micro-batch k is this rank's k-th forward
// (or backward); the phases are Megatron's warm-up, steady 1F1B and
// cool-down.
class InterleavedRun {
 public:
  explicit InterleavedRun(ScheduleContext& ctx)
      : ctx_(ctx),
        p2p_(ctx.p2p),
        tl_(ctx.timeline()),
        p_(p2p_.size()),
        rank_(p2p_.rank()),
        v_(ctx.chunks()),
        m_(ctx.options.num_microbatches),
        total_(m_ * v_),
        group_(static_cast<int64_t>(p_) * v_),
        train_(!ctx.options.forward_only),
        overlap_(ctx.options.overlap_p2p_comm),
        chunks_(static_cast<size_t>(v_), ChunkState(m_)) {
    QK_CHECK(p_ > 1, "the interleaved schedule (", v_,
             " model chunks per rank) needs --pipeline-model-parallel-size > 1");
    // Warm-up: (p - rank - 1) x 2 + (v - 1) x p forwards (all of them when
    // they would be more, or for evaluation).
    warmup_ = train_ ? (p_ - rank_ - 1) * 2 + static_cast<int64_t>(v_ - 1) * p_ : total_;
    all_warmup_ = warmup_ >= total_;
    if (all_warmup_) warmup_ = total_;
    remaining_ = total_ - warmup_;
  }

  void run() {
    warm_up();
    steady_state();
    if (train_) cool_down();
  }

 private:
  // Virtual micro-batch k -> chunk, micro-batch.
  int chunk_of(int64_t k, bool forward) const {
    const int c = static_cast<int>((k % group_) / p_);
    return forward ? c : v_ - 1 - c;
  }
  int64_t micro_of(int64_t k) const { return (k / group_) * p_ + k % p_; }

  // Megatron's recv_tensor_from_previous_stage: whether step k receives a
  // tensor for the next forward (backward), and for which chunk. The leading
  // stage (first in forward, last in backward) gets it from the other end of
  // the ring, p - 1 steps behind, for the neighbouring chunk.
  std::pair<bool, int> incoming(int64_t k, bool forward) const {
    const bool leading = forward ? p2p_.is_first() : p2p_.is_last();
    if (!leading) return {true, chunk_of(k + 1, forward)};
    const bool early = k < p_ - 1;
    const int sender_chunk = early ? chunk_of(k + 1, forward) : chunk_of(k - (p_ - 1), forward);
    const bool recv = !early && sender_chunk != (forward ? v_ - 1 : 0);
    return {recv, sender_chunk + (forward ? 1 : -1)};
  }

  void deliver_input(const Exchange& e, int c) { chunks_[c].input_rx[chunks_[c].inputs_delivered++] = e; }
  void deliver_grad(const Exchange& e, int c) { chunks_[c].grad_rx[chunks_[c].grads_delivered++] = e; }

  // Without overlap every exchange completes where it was made (Megatron's
  // blocking p2p); with overlap a receive is waited on by the step that
  // needs it, and sends complete on their own.
  void settle(Exchange& e) {
    if (!overlap_)
      e.wait(tl_);
    else if (!e.receives())
      p2p_.keep(e);
  }

  // The activation to send on (undefined: none).
  Tensor forward_step(int64_t k) {
    const int c = chunk_of(k, true);
    const int64_t j = micro_of(k);
    ChunkState& s = chunks_[c];
    Tensor input;
    if (!ctx_.first_stage(c)) {
      QK_CHECK_AS(InternalError, s.input_rx[j].receives(), "interleaved schedule: stage ", rank_,
                  " has no input for chunk ", c, ", micro-batch ", j);
      input = ctx_.as_input(s.input_rx[j].take(tl_));
      s.input_rx[j] = Exchange();
    }
    Tensor output = ctx_.forward(c, j, input);
    if (train_) {
      s.inputs[j] = input;
      s.outputs[j] = output;
    }
    return ctx_.last_stage(c) ? Tensor() : output;
  }

  // The input gradient to send back (undefined: none).
  Tensor backward_step(int64_t k) {
    const int c = chunk_of(k, false);
    const int64_t j = micro_of(k);
    ChunkState& s = chunks_[c];
    Tensor output_grad;
    if (!ctx_.last_stage(c)) {
      QK_CHECK_AS(InternalError, s.grad_rx[j].receives(), "interleaved schedule: stage ", rank_,
                  " has no output gradient for chunk ", c, ", micro-batch ", j);
      output_grad = s.grad_rx[j].take(tl_);
      s.grad_rx[j] = Exchange();
    }
    Tensor input_grad = ctx_.backward(c, j, s.inputs[j], s.outputs[j], output_grad);
    s.inputs[j] = Tensor();
    s.outputs[j] = Tensor();
    return ctx_.first_stage(c) ? Tensor() : input_grad;
  }

  Exchange send_forward_recv(const Tensor& output, int64_t k, bool last) {
    auto [recv, chunk] = incoming(k, true);
    recv = recv && !last;
    Exchange e = p2p_.forward(output, recv);
    if (recv) deliver_input(e, chunk);
    return e;
  }

  Exchange send_backward_recv(const Tensor& input_grad, int64_t k, bool last) {
    auto [recv, chunk] = incoming(k, false);
    recv = recv && !last;
    Exchange e = p2p_.backward(input_grad, recv);
    if (recv) deliver_grad(e, chunk);
    return e;
  }

  void warm_up() {
    if (!p2p_.is_first()) {
      Exchange first = p2p_.forward(Tensor(), true);
      deliver_input(first, 0);
      settle(first);
    }
    for (int64_t k = 0; k < warmup_; ++k) {
      const Tensor output = forward_step(k);
      Exchange act = send_forward_recv(output, k, k == total_ - 1);
      Exchange grad;
      if (k == warmup_ - 1 && train_ && !all_warmup_ && !p2p_.is_last()) {  // the first output gradient
        grad = p2p_.backward(Tensor(), true);
        deliver_grad(grad, v_ - 1);
      }
      settle(act);
      settle(grad);
    }
  }

  // One forward, one backward. With overlap each direction's exchange goes
  // out right after its computation, so the next input arrives during this
  // backward; without, both go out after the pair, as Megatron's
  // send_forward_backward_recv_forward_backward.
  void steady_state() {
    for (int64_t k = 0; k < remaining_; ++k) {
      const int64_t fk = warmup_ + k, bk = k;
      const bool last = k == remaining_ - 1;  // the extra input received before the loop covers it
      const Tensor output = forward_step(fk);
      Exchange act;
      if (overlap_) act = send_forward_recv(output, fk, last);
      const Tensor input_grad = backward_step(bk);
      if (!overlap_) act = send_forward_recv(output, fk, last);
      Exchange grad = send_backward_recv(input_grad, bk, false);
      settle(act);
      settle(grad);
    }
  }

  // The remaining backwards.
  void cool_down() {
    if (all_warmup_ && !p2p_.is_last()) {
      Exchange grad = p2p_.backward(Tensor(), true);
      deliver_grad(grad, v_ - 1);
      settle(grad);
    }
    for (int64_t k = remaining_; k < total_; ++k) {
      const Tensor input_grad = backward_step(k);
      Exchange grad = send_backward_recv(input_grad, k, k == total_ - 1);
      settle(grad);
    }
  }

  ScheduleContext& ctx_;
  StageP2P& p2p_;
  Timeline* tl_;
  const int p_, rank_, v_;
  const int64_t m_, total_, group_;
  const bool train_, overlap_;
  std::vector<ChunkState> chunks_;
  int64_t warmup_ = 0, remaining_ = 0;
  bool all_warmup_ = false;
};

}  // namespace

void run_with_interleaving(ScheduleContext& ctx) { InterleavedRun(ctx).run(); }

}  // namespace qk::parallel
