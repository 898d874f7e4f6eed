// PipelineSchedule: the communicators, the checks, one (chunk, micro-batch)
// forward and backward, and the schedule without interleaving (Megatron's
// forward_backward_pipelining_without_interleaving, which with one stage is
// forward_backward_no_pipelining).
#include "qk/parallel/pipeline_schedule.h"

#include <algorithm>
#include <deque>

#include "qk/autograd/autograd.h"
#include "qk/autograd/functions.h"
#include "qk/base/error.h"
#include "schedule_context.h"

namespace qk::parallel {

Tensor autograd_backward_step(const Tensor& input, const Tensor& output, const Tensor& output_grad) {
  output.backward(output_grad);
  return input.defined() ? input.grad() : Tensor();
}

void check_pipeline_microbatches(int64_t m, int p, int v) {
  QK_CHECK(m >= 1, "the number of micro-batches (", m,
           " = --global-batch-size / (--micro-batch-size x data-parallel size)) must be >= 1");
  QK_CHECK(v >= 1, "the virtual stages per rank must be >= 1, got ", v);
  if (v > 1)
    QK_CHECK(m % p == 0, "the interleaved schedule needs the number of micro-batches (", m,
             " = --global-batch-size / (--micro-batch-size x data-parallel size)) to be a multiple of "
             "--pipeline-model-parallel-size (",
             p, "); change --global-batch-size or --micro-batch-size, or drop "
             "--num-layers-per-virtual-pipeline-stage / --num-virtual-stages-per-pipeline-rank");
}

// ---- one micro-batch ----

// "F3" (micro-batch 3), "B3.1" (its backward through chunk 1) with chunks.
std::string ScheduleContext::span_name(char kind, int chunk, int64_t microbatch) const {
  std::string s(1, kind);
  s += std::to_string(microbatch);
  if (chunks() > 1) {
    s += '.';
    s += std::to_string(chunk);
  }
  return s;
}

Tensor ScheduleContext::forward(int chunk, int64_t microbatch, const Tensor& input) {
  SpanScope span(timeline(), SpanKind::forward, span_name('F', chunk, microbatch), chunk, microbatch);
  ForwardStepResult r = forward_step(chunk, microbatch, input);
  QK_CHECK(r.output.defined(), "pipeline: forward_step returned no output for chunk ", chunk, ", micro-batch ",
           microbatch);
  if (!last_stage(chunk)) return r.output;
  QK_CHECK(r.output.numel() == 1, "pipeline: on the last stage forward_step must return the micro-batch's scalar "
           "loss, got ", shape_str(r.output.shape()));
  if (r.metrics.empty()) r.metrics["loss"] = {r.output.item_double(), 1};
  for (const auto& [k, v] : r.metrics) {
    metrics[k].sum += v.sum;
    metrics[k].count += v.count;
  }
  if (options.forward_only) return r.output;
  // Megatron: the loss over num_microbatches in forward_step, times the loss
  // scale in backward_step (in StepRunner's order, so one stage matches it bit for bit).
  Tensor loss = r.output;
  if (options.num_microbatches > 1) loss = loss / static_cast<double>(options.num_microbatches);
  if (options.loss_scale != 1.0) loss = mul(loss, options.loss_scale);
  return loss;
}

Tensor ScheduleContext::backward(int chunk, int64_t microbatch, const Tensor& input, const Tensor& output,
                                 const Tensor& output_grad) {
  SpanScope span(timeline(), SpanKind::backward, span_name('B', chunk, microbatch), chunk, microbatch);
  QK_CHECK_AS(InternalError, last_stage(chunk) || output_grad.defined(), "pipeline: no output gradient for chunk ",
              chunk, ", micro-batch ", microbatch);
  if (options.before_backward) options.before_backward(chunk, microbatch);
  return options.backward_step ? options.backward_step(input, output, output_grad)
                               : autograd_backward_step(input, output, output_grad);
}

Tensor ScheduleContext::as_input(Tensor received) const {
  if (!options.forward_only) received.requires_grad_(true);
  return received;
}

// ---- 1F1B without interleaving ----

void run_without_interleaving(ScheduleContext& ctx) {
  StageP2P& p2p = ctx.p2p;
  Timeline* tl = ctx.timeline();
  const bool train = !ctx.options.forward_only;
  const int64_t m = ctx.options.num_microbatches;

  // Megatron's p2p calls; each is waited on at once (1F1B does not overlap).
  auto recv_forward = [&]() -> Tensor {
    return p2p.is_first() ? Tensor() : ctx.as_input(p2p.forward(Tensor(), true).take(tl));
  };
  auto send_forward = [&](const Tensor& out) {
    if (!p2p.is_last()) p2p.forward(out, false).wait(tl);
  };
  auto send_forward_recv_backward = [&](const Tensor& out) -> Tensor {
    if (p2p.is_last()) return {};
    Exchange send = p2p.forward(out, false), recv = p2p.backward(Tensor(), true);
    send.wait(tl);
    return recv.take(tl);
  };
  auto send_backward = [&](const Tensor& grad) {
    if (!p2p.is_first()) p2p.backward(grad, false).wait(tl);
  };
  auto send_backward_recv_forward = [&](const Tensor& grad) -> Tensor {
    if (p2p.is_first()) return {};
    Exchange send = p2p.backward(grad, false), recv = p2p.forward(Tensor(), true);
    send.wait(tl);
    return ctx.as_input(recv.take(tl));
  };
  auto recv_backward = [&]() -> Tensor {
    return p2p.is_last() ? Tensor() : p2p.backward(Tensor(), true).take(tl);
  };

  struct InFlight {
    int64_t microbatch;
    Tensor input, output;
  };
  std::deque<InFlight> in_flight;  // forwards whose backward is still to come, oldest first
  auto backward_oldest = [&](const Tensor& output_grad) {
    InFlight f = std::move(in_flight.front());
    in_flight.pop_front();
    return ctx.backward(0, f.microbatch, f.input, f.output, output_grad);
  };

  // Earlier stages run ahead: stage r does p - r - 1 forwards before its first backward.
  const int64_t warmup = std::min<int64_t>(p2p.size() - p2p.rank() - 1, m);
  const int64_t remaining = m - warmup;
  for (int64_t i = 0; i < warmup; ++i) {
    Tensor input = recv_forward();
    Tensor output = ctx.forward(0, i, input);
    send_forward(output);
    if (train) in_flight.push_back({i, input, output});
  }
  Tensor input = remaining > 0 ? recv_forward() : Tensor();
  for (int64_t i = 0; i < remaining; ++i) {
    const bool last_iteration = i == remaining - 1;
    const int64_t micro = warmup + i;
    Tensor output = ctx.forward(0, micro, input);
    if (!train) {
      send_forward(output);
      if (!last_iteration) input = recv_forward();
      continue;
    }
    const Tensor output_grad = send_forward_recv_backward(output);
    in_flight.push_back({micro, input, output});
    const Tensor input_grad = backward_oldest(output_grad);
    if (last_iteration) {
      input = Tensor();
      send_backward(input_grad);
    } else {
      input = send_backward_recv_forward(input_grad);
    }
  }
  if (!train) return;
  for (int64_t i = 0; i < warmup; ++i) send_backward(backward_oldest(recv_backward()));  // cool-down
}

// ---- PipelineSchedule ----

PipelineSchedule::PipelineSchedule(dist::ProcessGroup& pp)
    : rank_(pp.rank()), size_(pp.size()), global_ranks_(pp.global_ranks()) {
  if (size_ == 1) return;
  act_ = pp.split(0, pp.rank(), pp.name() + ".activations");
  grad_ = pp.split(0, pp.rank(), pp.name() + ".gradients");
}

PipelineSchedule::~PipelineSchedule() = default;

std::vector<dist::ProcessGroup*> PipelineSchedule::p2p_groups() const {
  if (size_ == 1) return {};
  return {act_.get(), grad_.get()};
}

PipelineScheduleResult PipelineSchedule::run(const ForwardStepFn& forward_step, const PipelineScheduleOptions& o) {
  QK_CHECK(forward_step != nullptr, "PipelineSchedule::run: forward_step is empty");
  check_pipeline_microbatches(o.num_microbatches, size_, o.num_model_chunks);
  QK_CHECK(size_ == 1 || !o.tensor_shape.empty(), "PipelineSchedule::run: tensor_shape (the activation the "
           "stages exchange, [micro batch, sequence, hidden]) is required with ", size_, " stages");
  StageP2P p2p(act_.get(), grad_.get(), global_ranks_, o.tensor_shape, o.dtype, o.timeline, o.device);
  ScheduleContext ctx{forward_step, o, p2p, {}};
  std::optional<NoGradGuard> no_grad;
  if (o.forward_only) no_grad.emplace();
  if (o.num_model_chunks > 1)
    run_with_interleaving(ctx);
  else
    run_without_interleaving(ctx);
  p2p.finish();
  return {std::move(ctx.metrics), o.num_microbatches};
}

StepMetrics broadcast_from_last_stage(const StepMetrics& metrics, dist::ProcessGroup& pp) {
  if (pp.size() == 1) return metrics;
  const int root = pp.size() - 1;
  // Names as one string ("name\n" each), then the sums and counts.
  std::string names;
  std::vector<double> values;
  for (const auto& [k, v] : metrics) {
    names += k + '\n';
    values.push_back(v.sum);
    values.push_back(v.count);
  }
  Tensor sizes = from_vector<int64_t>({static_cast<int64_t>(names.size()), static_cast<int64_t>(values.size())}, {2});
  pp.broadcast(sizes, root);
  const int64_t name_bytes = sizes.data_ptr<int64_t>()[0], value_count = sizes.data_ptr<int64_t>()[1];
  Tensor name_buf = zeros({std::max<int64_t>(name_bytes, 1)}, TensorOptions(DType::u8));
  Tensor value_buf = zeros({std::max<int64_t>(value_count, 1)}, TensorOptions(DType::f64));
  if (pp.rank() == root) {
    std::copy(names.begin(), names.end(), static_cast<char*>(name_buf.raw_data()));
    std::copy(values.begin(), values.end(), value_buf.data_ptr<double>());
  }
  pp.broadcast(name_buf, root);
  pp.broadcast(value_buf, root);
  StepMetrics out;
  const std::string all(static_cast<const char*>(name_buf.raw_data()), static_cast<size_t>(name_bytes));
  size_t start = 0, i = 0;
  for (size_t nl = all.find('\n'); nl != std::string::npos; nl = all.find('\n', start), i += 2) {
    out[all.substr(start, nl - start)] = {value_buf.data_ptr<double>()[i], value_buf.data_ptr<double>()[i + 1]};
    start = nl + 1;
  }
  return out;
}

}  // namespace qk::parallel
