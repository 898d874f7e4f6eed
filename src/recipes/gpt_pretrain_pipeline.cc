// pretrain_gpt's pipeline stage: the chunks behind one module with the
// unsplit names, and the schedule's steps in place of StepRunner's loop.
#include "qk/recipes/gpt_pretrain_pipeline.h"

#include <cmath>

#include "qk/autograd/autocast.h"
#include "qk/autograd/autograd.h"
#include "qk/base/error.h"
#include "qk/base/log.h"
#include "qk/base/timer.h"
#include "qk/parallel/sharding.h"
#include "qk/tensor/generator.h"
#include "qk/optim/distributed_optimizer.h"

namespace qk::recipes {

namespace {

// `from`'s parameters, buffers and children into `into` under the same
// names, the tensors shared (not copied): chunks of one rank merge into one
// tree ("decoder.layers.{global}" from each).
void merge_into(nn::Module& into, const nn::Module& from) {
  for (const auto& item : from.named_parameters(/*recurse=*/false)) {
    into.register_parameter(item.key(), Tensor());
    into.replace_parameter(item.key(), item.value());
  }
  for (const auto& item : from.named_buffers(/*recurse=*/false)) into.register_buffer(item.key(), item.value());
  for (const auto& item : from.named_children()) {
    const auto kids = into.named_children();
    const std::shared_ptr<nn::Module>* found = kids.find(item.key());
    std::shared_ptr<nn::Module> node =
        found ? *found : into.register_module(item.key(), std::make_shared<nn::Module>(item.value()->name()));
    merge_into(*node, *item.value());
  }
}

// The stage as one module: train()/eval() reach the chunks themselves too.
class GptStageModule : public nn::Module {
 public:
  explicit GptStageModule(std::vector<transformer::GPTModelChunk> chunks)
      : nn::Module("GPTModelStage"), chunks_(std::move(chunks)) {
    for (auto& ch : chunks_) merge_into(*this, *ch);
  }
  void train(bool on) override {
    nn::Module::train(on);
    for (auto& ch : chunks_) ch->train(on);
  }

 private:
  std::vector<transformer::GPTModelChunk> chunks_;
};

}  // namespace

GptPipelineStage build_gpt_pipeline_stage(const MegatronArgs& a, const transformer::TransformerConfig& cfg,
                                          int pp_rank, std::shared_ptr<dist::ProcessGroup> tp,
                                          std::shared_ptr<dist::ProcessGroup> ep) {
  parallel::PipelineSplitOptions so;
  so.num_layers = cfg.num_layers;
  so.pipeline_model_parallel_size = a.pipeline_model_parallel_size;
  so.num_layers_per_virtual_pipeline_stage = a.num_layers_per_virtual_pipeline_stage.value_or(0);
  so.num_virtual_stages_per_pipeline_rank = a.num_virtual_stages_per_pipeline_rank.value_or(0);
  so.decoder_first_pipeline_num_layers = a.decoder_first_pipeline_num_layers;
  so.decoder_last_pipeline_num_layers = a.decoder_last_pipeline_num_layers;
  GptPipelineStage s{parallel::PipelineLayerSplit::make(so), {}, nullptr};
  s.chunks =
      transformer::build_gpt_model_chunks(cfg, s.split, pp_rank,
                                          transformer::GPTModelParallel{.tp = tp && tp->size() > 1 ? tp : nullptr,
                                                                        .ep = ep && ep->size() > 1 ? ep : nullptr});
  s.model = std::make_shared<GptStageModule>(s.chunks);
  // Megatron's _set_random_seed: seed + 100 x pipeline rank; the first
  // stage's generator continues as the unsplit model's does.
  if (pp_rank > 0)
    default_generator().set_state(static_cast<uint64_t>(a.seed) + 100 * static_cast<uint64_t>(pp_rank), 0);
  return s;
}

parallel::TensorParallel GptPipelineStage::tensor_parallel(dist::ProcessGroup* tp) const {
  parallel::TensorParallel t;
  t.group = tp;
  if (!tp || tp->size() == 1) return t;
  for (const auto& ch : chunks) {
    for (const auto& [name, spec] : parallel::tensor_parallel_shard_specs(*ch)) t.shard_specs[name] = spec;
    for (const std::string& n : parallel::partial_gradient_parameter_names(*ch)) t.partial_gradients.push_back(n);
    t.generator = ch->tensor_parallel_generator();
  }
  return t;
}

parallel::PipelineParallel GptPipelineStage::pipeline_parallel(dist::ProcessGroup* pp,
                                                               dist::ProcessGroup* embedding) const {
  parallel::PipelineParallel p;
  p.group = pp;
  p.embedding = embedding;
  p.tied_parameter = transformer::shared_embedding_parameter_name(chunks);
  p.tied_copy = !p.tied_parameter.empty() && p.tied_parameter != p.tied_source;
  return p;
}

std::unique_ptr<optim::MixedPrecisionOptimizer> build_gpt_stage_optimizer(const MegatronArgs& a,
                                                                          GptPipelineStage& stage,
                                                                          dist::ProcessGroup* dp,
                                                                          const parallel::ExpertParallel& expert) {
  auto opt =
      gpt_build_optimizer(a, *stage.model, dp, transformer::shared_embedding_parameter_name(stage.chunks), expert);
  if (a.overlap_param_gather)
    if (auto* d = dynamic_cast<optim::DistributedOptimizer*>(opt.get()))
      for (auto& ch : stage.chunks) ch->set_forward_pre_hook(d->forward_pre_hook());
  return opt;
}

GptPipelineSteps::GptPipelineSteps(GptPipelineStage& stage, optim::MixedPrecisionOptimizer& opt, GptPipelineOptions o)
    : stage_(stage), opt_(opt), o_(std::move(o)) {
  QK_CHECK(o_.pp != nullptr, "GptPipelineSteps: no pipeline group");
  parallel::check_pipeline_microbatches(o_.num_microbatches, o_.pp->size(), stage_.split.virtual_pipeline_size());
  schedule_ = std::make_unique<parallel::PipelineSchedule>(*o_.pp);
}

GptPipelineSteps::~GptPipelineSteps() = default;

void GptPipelineSteps::set_scheduler(optim::OptimizerParamScheduler* scheduler, int64_t increment) {
  sched_ = scheduler;
  increment_ = increment;
}

// Micro-batch j of this step: the first stage reads its tokens, the last its
// labels, each in order; other stages read nothing.
const GptBatch& GptPipelineSteps::batch(int64_t microbatch) {
  while (static_cast<int64_t>(batches_.size()) <= microbatch) batches_.push_back(data_->next());
  return batches_[static_cast<size_t>(microbatch)];
}

parallel::ForwardStepResult GptPipelineSteps::forward(int chunk, int64_t microbatch, const Tensor& input) {
  transformer::GPTModelChunk& ch = stage_.chunks[static_cast<size_t>(chunk)];
  transformer::GPTChunkInput in;
  const GptBatch* b = ch->pre_process() || ch->post_process() ? &batch(microbatch) : nullptr;
  auto on = [&](const Tensor& t) { return t.defined() && !o_.device.is_cpu() ? t.to(o_.device) : t; };
  if (ch->pre_process()) {
    in.tokens = on(b->tokens);
    in.position_ids = on(b->position_ids);
  } else {
    in.hidden = input;
  }
  if (ch->post_process()) {
    in.labels = on(b->labels);
    in.loss_mask = on(b->loss_mask);
  }
  Tensor out;
  {
    std::optional<autocast::Guard> amp;
    if (o_.autocast) amp.emplace(*o_.autocast);
    out = ch->forward(in);
  }
  if (o_.after_training_forward && ch->is_training()) o_.after_training_forward();
  if (!ch->post_process()) {
    if (out.dtype() != o_.dtype) out = out.to(o_.dtype);  // what the next stage expects
    return {out, {}};
  }
  const double value = out.item<double>(), tokens = b->loss_tokens();
  if (o_.check_loss) o_.check_loss(value);
  return {out, {{"lm loss", {value * tokens, tokens}}}};
}

std::map<std::string, double> GptPipelineSteps::reduce(const parallel::StepMetrics& last_stage) const {
  const parallel::StepMetrics m = parallel::broadcast_from_last_stage(last_stage, *o_.pp);
  std::vector<double> v;
  for (const auto& [k, x] : m) v.push_back(x.sum), v.push_back(x.count);
  if (o_.dp && o_.dp->size() > 1 && !v.empty()) {
    Tensor t = from_vector<double>(v, {static_cast<int64_t>(v.size())});
    o_.dp->all_reduce(t);
    v.assign(t.data_ptr<double>(), t.data_ptr<double>() + v.size());
  }
  std::map<std::string, double> out;
  size_t i = 0;
  for (const auto& kv : m) {
    out[kv.first] = v[i + 1] > 0 ? v[i] / v[i + 1] : 0.0;
    i += 2;
  }
  return out;
}

train::StepStats GptPipelineSteps::step(GptBatchIterator& data) {
  const Timer timer;
  opt_.zero_grad();
  data_ = &data;
  batches_.clear();
  parallel::PipelineScheduleOptions so;
  so.num_microbatches = o_.num_microbatches;
  so.tensor_shape = {o_.micro_batch_size, o_.seq_length, o_.hidden_size};
  so.dtype = o_.dtype;
  so.device = o_.device;
  so.num_model_chunks = stage_.split.virtual_pipeline_size();
  so.overlap_p2p_comm = o_.overlap_p2p_comm;
  so.loss_scale = opt_.loss_scale();
  parallel::Timeline* tl = o_.timeline && profiled_ < o_.max_profiled_steps ? o_.timeline : nullptr;
  so.timeline = tl;
  // Overlapped gradient reduction: a bucket may start once its parameters'
  // gradients of their chunk's last micro-batch are in (Megatron enables
  // grad sync for that backward only).
  so.before_backward = [&](int, int64_t microbatch) { opt_.begin_microbatch(microbatch == o_.num_microbatches - 1); };
  so.backward_step = [&](const Tensor& in, const Tensor& out, const Tensor& grad) {
    Tensor g = parallel::autograd_backward_step(in, out, grad);
    opt_.accumulate_grads();  // --accumulate-allreduce-grads-in-fp32 (bf16/f16 models)
    return g;
  };
  if (tl) tl->begin_step();
  const parallel::PipelineScheduleResult r =
      schedule_->run([this](int c, int64_t j, const Tensor& x) { return forward(c, j, x); }, so);
  if (tl) tl->end_step();
  batches_.clear();
  train::StepStats s;
  optim::OptimizerStepResult u;
  {
    parallel::SpanScope span(tl, parallel::SpanKind::optimizer, "optimizer");
    opt_.finish_grad_sync(o_.dp);
    if (const auto* d = dynamic_cast<const optim::DistributedOptimizer*>(&opt_)) {
      const optim::ParamAndGradBuffer::GradSyncStats& g = d->buffer().last_grad_sync();
      QK_DEBUG("pipeline stage {}: {} of {} gradient buckets launched during backward", o_.pp->rank(),
               g.launched_in_backward, g.buckets);
    }
    s.lr = opt_.optimizer().lr(0);
    u = opt_.step();  // the tied embedding, norm and inf check over the pipeline
  }
  if (tl) {
    // The pipeline's bubble: every stage over the same window (the
    // schedule's first start to its last end), averaged over the stages.
    const double mine = parallel::measure_bubble(*tl, parallel::common_window(*tl, *o_.pp)).fraction;
    Tensor mean = from_vector<double>({mine}, {1});
    o_.pp->all_reduce(mean, dist::ReduceOp::avg);
    bubble_sum_ += mean.data_ptr<double>()[0];
    ++bubble_steps_;
    ++profiled_;
  }
  if (u.updated && sched_) sched_->step(increment_);
  s.metrics = reduce(r.metrics);
  QK_CHECK(!s.metrics.empty(), "the last pipeline stage reported no metrics");
  s.loss = s.metrics.count("loss") ? s.metrics.at("loss") : s.metrics.begin()->second;
  s.skipped = !u.updated;
  for (const auto& kv : s.metrics) s.nan |= s.skipped && !std::isfinite(kv.second);
  s.grad_norm = u.grad_norm;
  s.num_zeros_in_grad = u.num_zeros_in_grad;
  s.loss_scale = opt_.loss_scale();
  s.seconds = timer.seconds();
  return s;
}

std::pair<double, int64_t> GptPipelineSteps::take_bubble() {
  const std::pair<double, int64_t> r{bubble_sum_, bubble_steps_};
  bubble_sum_ = 0;
  bubble_steps_ = 0;
  return r;
}

std::map<std::string, double> GptPipelineSteps::forward_only(GptBatchIterator& data, int64_t microbatches) {
  opt_.finish_param_sync();
  data_ = &data;
  batches_.clear();
  parallel::PipelineScheduleOptions so;
  so.num_microbatches = microbatches;
  so.tensor_shape = {o_.micro_batch_size, o_.seq_length, o_.hidden_size};
  so.dtype = o_.dtype;
  so.device = o_.device;
  so.num_model_chunks = stage_.split.virtual_pipeline_size();
  so.forward_only = true;
  parallel::PipelineScheduleResult r;
  {
    NoGradGuard no_grad;
    r = schedule_->run([this](int c, int64_t j, const Tensor& x) { return forward(c, j, x); }, so);
  }
  batches_.clear();
  return reduce(r.metrics);
}

}  // namespace qk::recipes
