// The interleaved 1F1B schedule (Megatron's
// forward_backward_pipelining_with_interleaving with
// microbatch_group_size_per_vp_stage = p): each rank holds v model chunks;
// micro-batches go through chunk 0 of every stage, then chunk 1, ..., in
// groups of p, so a stage waits v times less at the pipeline's fill and drain.
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

}  // namespace

void run_with_interleaving(ScheduleContext& ctx) {
  StageP2P& p2p = ctx.p2p;
  Timeline* tl = ctx.timeline();
  const int p = p2p.size(), rank = p2p.rank(), v = ctx.chunks();
  QK_CHECK(p > 1, "the interleaved schedule (", v, " model chunks per rank) needs --pipeline-model-parallel-size > 1");
  const int64_t m = ctx.options.num_microbatches, total = m * v, group = static_cast<int64_t>(p) * v;
  const bool train = !ctx.options.forward_only, overlap = ctx.options.overlap_p2p_comm;

  // Virtual micro-batch k (this rank's k-th forward, or backward) -> chunk, micro-batch.
  auto chunk_of = [&](int64_t k, bool forward) {
    const int c = static_cast<int>((k % group) / p);
    return forward ? c : v - 1 - c;
  };
  auto micro_of = [&](int64_t k) { return (k / group) * p + k % p; };
  // Megatron's recv_tensor_from_previous_stage: whether step k receives a
  // tensor for the next forward (backward), and for which chunk. The leading
  // stage (first in forward, last in backward) gets it from the other end of
  // the ring, p - 1 steps behind, for the neighbouring chunk.
  auto incoming = [&](int64_t k, bool forward) -> std::pair<bool, int> {
    const bool leading = forward ? p2p.is_first() : p2p.is_last();
    if (!leading) return {true, chunk_of(k + 1, forward)};
    const bool early = k < p - 1;
    const int sender_chunk = early ? chunk_of(k + 1, forward) : chunk_of(k - (p - 1), forward);
    const bool recv = !early && sender_chunk != (forward ? v - 1 : 0);
    return {recv, sender_chunk + (forward ? 1 : -1)};
  };

  std::vector<ChunkState> chunks(static_cast<size_t>(v), ChunkState(m));
  auto deliver_input = [&](const Exchange& e, int c) { chunks[c].input_rx[chunks[c].inputs_delivered++] = e; };
  auto deliver_grad = [&](const Exchange& e, int c) { chunks[c].grad_rx[chunks[c].grads_delivered++] = e; };
  // Without overlap every exchange completes where it was made (Megatron's
  // blocking p2p); with overlap a receive is waited on by the step that
  // needs it, and sends complete on their own.
  auto settle = [&](Exchange& e) {
    if (!overlap)
      e.wait(tl);
    else if (!e.receives())
      p2p.keep(e);
  };
  auto forward_step = [&](int64_t k) -> Tensor {  // the activation to send on (undefined: none)
    const int c = chunk_of(k, true);
    const int64_t j = micro_of(k);
    ChunkState& s = chunks[c];
    Tensor input;
    if (!ctx.first_stage(c)) {
      QK_CHECK_AS(InternalError, s.input_rx[j].receives(), "interleaved schedule: stage ", rank,
                  " has no input for chunk ", c, ", micro-batch ", j);
      input = ctx.as_input(s.input_rx[j].take(tl));
      s.input_rx[j] = Exchange();
    }
    Tensor output = ctx.forward(c, j, input);
    if (train) {
      s.inputs[j] = input;
      s.outputs[j] = output;
    }
    return ctx.last_stage(c) ? Tensor() : output;
  };
  auto backward_step = [&](int64_t k) -> Tensor {  // the input gradient to send back (undefined: none)
    const int c = chunk_of(k, false);
    const int64_t j = micro_of(k);
    ChunkState& s = chunks[c];
    Tensor output_grad;
    if (!ctx.last_stage(c)) {
      QK_CHECK_AS(InternalError, s.grad_rx[j].receives(), "interleaved schedule: stage ", rank,
                  " has no output gradient for chunk ", c, ", micro-batch ", j);
      output_grad = s.grad_rx[j].take(tl);
      s.grad_rx[j] = Exchange();
    }
    Tensor input_grad = ctx.backward(c, j, s.inputs[j], s.outputs[j], output_grad);
    s.inputs[j] = Tensor();
    s.outputs[j] = Tensor();
    return ctx.first_stage(c) ? Tensor() : input_grad;
  };
  auto send_forward_recv = [&](const Tensor& output, int64_t k, bool last) {
    auto [recv, chunk] = incoming(k, true);
    recv = recv && !last;
    Exchange e = p2p.forward(output, recv);
    if (recv) deliver_input(e, chunk);
    return e;
  };
  auto send_backward_recv = [&](const Tensor& input_grad, int64_t k, bool last) {
    auto [recv, chunk] = incoming(k, false);
    recv = recv && !last;
    Exchange e = p2p.backward(input_grad, recv);
    if (recv) deliver_grad(e, chunk);
    return e;
  };

  // Warm-up: (p - rank - 1) x 2 + (v - 1) x p forwards (all of them when
  // they would be more, or for evaluation).
  int64_t warmup = train ? (p - rank - 1) * 2 + static_cast<int64_t>(v - 1) * p : total;
  const bool all_warmup = warmup >= total;
  if (all_warmup) warmup = total;
  const int64_t remaining = total - warmup;

  if (!p2p.is_first()) {
    Exchange first = p2p.forward(Tensor(), true);
    deliver_input(first, 0);
    settle(first);
  }
  for (int64_t k = 0; k < warmup; ++k) {
    const Tensor output = forward_step(k);
    Exchange act = send_forward_recv(output, k, k == total - 1);
    Exchange grad;
    if (k == warmup - 1 && train && !all_warmup && !p2p.is_last()) {  // the first output gradient
      grad = p2p.backward(Tensor(), true);
      deliver_grad(grad, v - 1);
    }
    settle(act);
    settle(grad);
  }

  // Steady state: one forward, one backward. With overlap each direction's
  // exchange goes out right after its computation, so the next input arrives
  // during this backward; without, both go out after the pair, as Megatron's
  // send_forward_backward_recv_forward_backward.
  for (int64_t k = 0; k < remaining; ++k) {
    const int64_t fk = warmup + k, bk = k;
    const bool last = k == remaining - 1;  // the extra input received before the loop covers it
    const Tensor output = forward_step(fk);
    Exchange act;
    if (overlap) act = send_forward_recv(output, fk, last);
    const Tensor input_grad = backward_step(bk);
    if (!overlap) act = send_forward_recv(output, fk, last);
    Exchange grad = send_backward_recv(input_grad, bk, false);
    settle(act);
    settle(grad);
  }

  if (!train) return;
  // Cool-down: the remaining backwards.
  if (all_warmup && !p2p.is_last()) {
    Exchange grad = p2p.backward(Tensor(), true);
    deliver_grad(grad, v - 1);
    settle(grad);
  }
  for (int64_t k = remaining; k < total; ++k) {
    const Tensor input_grad = backward_step(k);
    Exchange grad = send_backward_recv(input_grad, k, k == total - 1);
    settle(grad);
  }
}

}  // namespace qk::parallel
