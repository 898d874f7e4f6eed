// StepRunner: the micro-batch loop, the one gradient reduction and the
// optimizer step of an iteration.
#include "qk/train/step_runner.h"

#include <cmath>
#include <optional>

#include "qk/autograd/autocast.h"
#include "qk/autograd/autograd.h"
#include "qk/autograd/functions.h"
#include "qk/base/error.h"
#include "qk/base/timer.h"
#include "qk/tensor/ops/elementwise.h"
#include "qk/tensor/ops/index.h"
#include "qk/tensor/ops/view.h"

namespace qk::train {

int64_t num_microbatches(int64_t global_batch_size, int64_t micro_batch_size, int64_t data_parallel_size) {
  QK_CHECK_AS(ValueError, global_batch_size > 0 && micro_batch_size > 0 && data_parallel_size > 0,
              "global batch size (", global_batch_size, "), micro batch size (", micro_batch_size,
              ") and data parallel size (", data_parallel_size, ") must be positive");
  const int64_t per_step = micro_batch_size * data_parallel_size;
  QK_CHECK_AS(ValueError, global_batch_size % per_step == 0, "global batch size (", global_batch_size,
              ") is not divisible by micro batch size (", micro_batch_size, ") times data parallel size (",
              data_parallel_size, "); use a --global-batch-size that is a multiple of ", per_step);
  return global_batch_size / per_step;
}

StepRunner::StepRunner(optim::MixedPrecisionOptimizer& opt, DataParallel dp, StepRunnerOptions o)
    : opt_(opt), dp_(dp), o_(o) {
  QK_CHECK_AS(ValueError, o_.num_microbatches >= 1, "StepRunner: num_microbatches must be >= 1, got ",
              o_.num_microbatches);
  QK_CHECK_AS(ValueError, !dp_.ddp || dp_.group, "StepRunner: a DDP wrapper needs its process group in DataParallel");
  QK_CHECK_AS(ValueError, !(dp_.ddp && opt_.reduces_own_grads()),
              "StepRunner: the distributed optimizer reduces the gradients over its own data-parallel group: pass "
              "the group without a DDP wrapper");
  QK_CHECK_AS(ValueError, !(dp_.ddp && opt_.options().accumulate_allreduce_grads_in_fp32 && opt_.has_fp32_copies()),
              "accumulate_allreduce_grads_in_fp32 averages the optimizer's own fp32 gradient buffer: pass the "
              "data-parallel process group without a DDP wrapper");
}

void StepRunner::set_scheduler(optim::OptimizerParamScheduler* scheduler, int64_t increment) {
  sched_ = scheduler;
  increment_ = increment;
}

namespace {

void add_device(Metric& m, const Tensor& v) {
  const Tensor x = v.detach();
  m.device_sum = m.device_sum.defined() ? ops::add(m.device_sum, ops::cast(x, DType::f64))
                                        : ops::cast(x, DType::f64);
}

void add_output(std::map<std::string, Metric>& sums, const MicroBatchOutput& out) {
  QK_CHECK_AS(ValueError, out.loss.defined() && out.loss.numel() == 1,
              "forward_step must return a scalar loss tensor");
  if (out.metrics.empty()) {
    Metric& m = sums["loss"];
    add_device(m, ops::reshape(out.loss, {}));
    m.count += 1;
  }
  for (const auto& [k, v] : out.metrics) {
    sums[k].sum += v.sum;
    sums[k].count += v.count;
    if (v.device_sum.defined()) {
      QK_CHECK_AS(ValueError, v.device_sum.numel() == 1, "metric '", k, "': device_sum must be a scalar");
      add_device(sums[k], ops::reshape(v.device_sum, {}));
    }
  }
}

// The device sums into the host sums: one read per device for all of them.
void read_device_sums(std::map<std::string, Metric>& sums) {
  std::map<std::string, std::vector<Metric*>> by_device;
  for (auto& [k, m] : sums)
    if (m.device_sum.defined()) by_device[m.device_sum.device().str()].push_back(&m);
  for (auto& [device, ms] : by_device) {
    std::vector<Tensor> parts;
    for (Metric* m : ms) parts.push_back(ops::reshape(m->device_sum, {1}));
    const Tensor host = ops::to_device(parts.size() == 1 ? parts[0] : ops::cat(parts, 0), kCPU);
    const double* d = host.data_ptr<double>();
    for (size_t i = 0; i < ms.size(); ++i) {
      ms[i]->sum += d[i];
      ms[i]->device_sum = Tensor();
    }
  }
}

}  // namespace

std::map<std::string, double> StepRunner::reduce(std::map<std::string, Metric>& m) const {
  read_device_sums(m);
  std::vector<double> v{static_cast<double>(m.size())};
  for (const auto& [k, x] : m) v.push_back(x.sum), v.push_back(x.count);
  if (o_.reduce_metrics && dp_.size() > 1) {
    Tensor t = from_vector<double>(v, {static_cast<int64_t>(v.size())});
    dp_.group->all_reduce(t);
    const double* d = t.data_ptr<double>();
    QK_CHECK_AS(ValueError, d[0] == v[0] * dp_.size(), "The ranks reported different metrics (rank ", dp_.rank(),
                " has ", m.size(), "): every rank's forward_step must return the same metric names");
    v.assign(d, d + v.size());
  }
  std::map<std::string, double> out;
  size_t i = 1;
  for (const auto& kv : m) {
    out[kv.first] = v[i + 1] > 0 ? v[i] / v[i + 1] : 0.0;
    i += 2;
  }
  return out;
}

std::map<std::string, Metric> StepRunner::run_microbatches(const ForwardStep& forward_step) {
  const int64_t k = o_.num_microbatches;
  opt_.zero_grad();
  std::map<std::string, Metric> sums;
  for (int64_t i = 0; i < k; ++i) {
    std::optional<dist::DistributedDataParallel::NoSync> no_sync;
    if (dp_.ddp && i + 1 < k) no_sync.emplace(*dp_.ddp);
    if (dp_.ddp) dp_.ddp->prepare_forward();
    opt_.begin_microbatch(i + 1 == k);
    MicroBatchOutput out;
    {
      std::optional<autocast::Guard> amp;
      if (o_.autocast) amp.emplace(*o_.autocast);
      out = forward_step(i);
    }
    add_output(sums, out);
    Tensor loss = out.loss;
    if (k > 1) loss = loss / static_cast<double>(k);
    const float scale = opt_.loss_scale();
    if (scale != 1.0f) loss = mul(loss, static_cast<double>(scale));
    loss.backward();
    opt_.accumulate_grads();
  }
  return sums;
}

StepStats StepRunner::finish_step(std::map<std::string, Metric>& sums, const Timer& timer) {
  StepStats s;
  if (dp_.ddp) {
    s.comm_wait_ms = dp_.ddp->last_step().wait_ms;
  } else {
    opt_.finish_grad_sync(dp_.group);
  }
  s.lr = opt_.optimizer().lr(0);
  const optim::OptimizerStepResult r = opt_.step();
  if (r.updated && sched_) sched_->step(increment_);
  s.metrics = reduce(sums);
  s.loss = s.metrics.count("loss") ? s.metrics.at("loss") : s.metrics.begin()->second;
  s.skipped = !r.updated;
  for (const auto& kv : s.metrics) s.nan |= s.skipped && !std::isfinite(kv.second);  // Megatron: any loss
  s.grad_norm = r.grad_norm;
  s.num_zeros_in_grad = r.num_zeros_in_grad;
  s.loss_scale = opt_.loss_scale();
  s.seconds = timer.seconds();
  return s;
}

StepStats StepRunner::step(const ForwardStep& forward_step) {
  // The eager step gives the parameters gradients of its own: a graph
  // recorded before would write where they no longer look. Recorded anew.
  graph_.reset();
  graph_sums_.clear();
  const Timer timer;
  std::map<std::string, Metric> sums = run_microbatches(forward_step);
  return finish_step(sums, timer);
}

namespace {

// The step's metrics from the graph's device sums and the loaded
// micro-batches' host parts (names `load` did not give keep the capture's).
std::map<std::string, Metric> graphed_sums(const std::map<std::string, Metric>& captured,
                                           const std::vector<std::map<std::string, Metric>>& loaded) {
  std::map<std::string, Metric> sums = captured;
  std::map<std::string, Metric> host;
  for (const auto& m : loaded)
    for (const auto& [k, v] : m) {
      host[k].sum += v.sum;
      host[k].count += v.count;
    }
  for (const auto& [k, v] : host) {
    QK_CHECK_AS(ValueError, sums.count(k), "graphed step: load() gave metric '", k,
                "', which the forward step does not return");
    sums[k].sum = v.sum;
    sums[k].count = v.count;
  }
  return sums;
}

}  // namespace

StepStats StepRunner::step(const GraphedForwardStep& g) {
  QK_CHECK_AS(ValueError, g.load && g.forward, "graphed step: give both load and forward");
  QK_CHECK_AS(ValueError, dp_.size() == 1 && !dp_.ddp,
              "graphed steps (--cuda-graph) run one data-parallel rank: the gradients' all-reduce between ",
              dp_.size(), " ranks is host-driven and cannot be recorded in a device graph; run without graph capture");
  const Timer timer;
  const int64_t k = o_.num_microbatches;
  std::vector<std::map<std::string, Metric>> loaded;
  for (int64_t i = 0; i < k; ++i) loaded.push_back(g.load(i));
  if (graphed_calls_++ < o_.graph_warmup_steps) {
    std::map<std::string, Metric> sums = graphed_sums(run_microbatches(g.forward), loaded);
    return finish_step(sums, timer);
  }
  // Recorded with the loss scale as a constant: a new scale, a new graph.
  if (!graph_ || graph_scale_ != opt_.loss_scale()) {
    graph_.reset();  // its memory back first
    graph_sums_.clear();
    graph_ = capture_graph(g.device, [&] { graph_sums_ = run_microbatches(g.forward); });
    graph_scale_ = opt_.loss_scale();
  }
  graph_->replay();
  std::map<std::string, Metric> sums = graphed_sums(graph_sums_, loaded);
  return finish_step(sums, timer);
}

int64_t StepRunner::graph_nodes() const { return graph_ ? graph_->num_nodes() : 0; }

std::map<std::string, double> StepRunner::forward_only(const ForwardStep& forward_step, int64_t microbatches) {
  opt_.finish_param_sync();
  NoGradGuard no_grad;
  std::map<std::string, Metric> sums;
  for (int64_t i = 0; i < microbatches; ++i) {
    std::optional<autocast::Guard> amp;
    if (o_.autocast) amp.emplace(*o_.autocast);
    add_output(sums, forward_step(i));
  }
  return reduce(sums);
}

}  // namespace qk::train
