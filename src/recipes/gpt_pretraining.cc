// GptPretraining: Megatron-LM's pretrain() for the GPT model, stage by stage
// (initialize, model and optimizer, data iterators, train, evaluate), on the
// pieces of gpt_pretrain.h; pretrain_gpt() runs the stages in order.
#include "qk/recipes/gpt_pretraining.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>

#include "qk/base/env.h"
#include "qk/base/error.h"
#include "qk/base/fault.h"
#include "qk/base/file_io.h"
#include "qk/base/log.h"
#include "qk/base/thread_pool.h"
#include "qk/base/timer.h"
#include "qk/dist/launch_env.h"
#include "qk/parallel/timeline.h"
#include "qk/recipes/metrics_plot.h"
#include "qk/tensor/backend.h"
#include "qk/tensor/generator.h"
#include "qk/tensor/ops/elementwise.h"
#include "qk/tensor/ops/view.h"
#include "qk/train/checkpoint.h"
#include "qk/train/gemm_peak.h"
#include "qk/transformer/hf_checkpoint.h"

namespace qk::recipes {
namespace {

constexpr const char* kRunFormat = kPretrainGptFormat;

// qk run's or torchrun's environment, Megatron's rank grid over it (the
// tensor- and data-parallel groups this rank trains in), and one compute
// thread per core of this node's share, as torchrun leaves OMP_NUM_THREADS
// when it starts several processes per node.
void join_job(const MegatronArgs& a, GptJob& w) {
  const dist::LaunchEnv env = dist::launch_env();
  QK_CHECK(env.world_size == a.world_size, "the arguments were validated for ", a.world_size,
           " ranks but this job has ", env.world_size, " (", env.source,
           "); parse them with MegatronArgsOptions{.world_size = launch_env().world_size}");
  if (env.world_size > 1) {
    if (!dist::is_initialized())
      dist::init(dist::InitOptions().timeout(60.0 * static_cast<double>(a.distributed_timeout_minutes)));
    w.rank = dist::rank();
    w.size = dist::world_size();
    w.world = &dist::group();
    parallel::ParallelSizes sizes;
    sizes.tensor_model_parallel_size = static_cast<int>(a.tensor_model_parallel_size);
    sizes.pipeline_model_parallel_size = static_cast<int>(a.pipeline_model_parallel_size);
    sizes.context_parallel_size = static_cast<int>(a.context_parallel_size);
    sizes.expert_model_parallel_size = static_cast<int>(a.expert_model_parallel_size);
    sizes.expert_tensor_parallel_size = static_cast<int>(a.expert_tensor_parallel_size.value_or(0));
    w.ps = parallel::ParallelState::create(dist::group(), sizes);
    w.tp = w.ps->group(parallel::GroupKind::tp);
    w.dp = w.ps->group(parallel::GroupKind::dp);
    w.pp = w.ps->group(parallel::GroupKind::pp);
    w.embedding = w.ps->group(parallel::GroupKind::embedding);
    if (a.expert_model_parallel_size > 1) {
      w.ep = w.ps->group(parallel::GroupKind::ep);
      w.expert_dp = w.ps->group(parallel::GroupKind::expert_dp);
    }
  }
  if (env.local_world_size > 1 && !env::get_raw("QK_NUM_THREADS")) {
    const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    set_num_threads(std::max(1, cores / env.local_world_size));
  }
}

double params_norm(optim::MixedPrecisionOptimizer& opt) {
  // Megatron's calc_params_l2_norm: over the fp32 main parameters, each
  // tensor-parallel shard once (summed over the group), replicated ones once;
  // the distributed optimizer's main parameters are data-parallel pieces, so
  // its gathered model weights instead. Collective over the tensor-parallel
  // group; under pipeline parallelism the stages' squares are summed over the
  // pipeline group, the last stage's copy of the tied embedding left out.
  opt.finish_param_sync();
  const parallel::TensorParallel& tp = opt.tensor_parallel();
  const parallel::PipelineParallel& pp = opt.pipeline_parallel();
  const std::vector<Tensor>& params = opt.reduces_own_grads() ? opt.model_params() : opt.main_params();
  double sq[2] = {0, 0};  // shards, replicated
  for (size_t i = 0; i < params.size(); ++i) {
    const Tensor c = params[i].detach().to(DType::f32).contiguous().to(kCPU);
    const float* d = c.data_ptr<float>();
    double s = 0;
    for (int64_t j = 0, n = c.numel(); j < n; ++j) s += static_cast<double>(d[j]) * d[j];
    const std::string& name = opt.names()[i];
    if (pp.tied_copy && name == pp.tied_parameter) continue;
    sq[tp.active() && tp.is_shard(name) ? 0 : 1] += s;
  }
  if (tp.active()) {
    Tensor shards = from_vector<double>({sq[0]}, {1});
    tp.group->all_reduce(shards);
    sq[0] = shards.data_ptr<double>()[0];
  }
  double total = sq[0] + sq[1];
  if (pp.active()) {
    Tensor t = from_vector<double>({total}, {1});
    pp.group->all_reduce(t);
    total = t.data_ptr<double>()[0];
  }
  return std::sqrt(total);
}

// The padded vocabulary of the checkpoint --load resumes from (0: none,
// or not one of pretrain_gpt's). It is a multiple of
// --make-vocab-size-divisible-by x the tensor-parallel size it was saved
// at, so another layout would pad differently.
int64_t checkpoint_padded_vocab(const MegatronArgs& a) {
  if (!a.load) return 0;
  const std::optional<CheckpointInfo> c = train::find_checkpoint(*a.load);
  if (!c) return 0;
  const nlohmann::json j = nlohmann::json::parse(c->meta, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("user") || !j["user"].is_object()) return 0;
  const nlohmann::json& u = j["user"];
  if (u.value("format", std::string()) != kRunFormat) return 0;
  return u.value("padded_vocab_size", int64_t{0});
}

// The GEMM rate every rank gets while all of them run at once (what a
// training step shares the cores with), averaged over ranks.
train::GemmPeak measure_peak(const GptJob& w, DType dtype, Device device) {
  if (w.world) w.world->barrier();
  train::GemmPeak p;
  try {
    p = train::measure_gemm_peak(1024, dtype, 5, device);
  } catch (const Error&) {
    p = train::measure_gemm_peak(1024, DType::f32, 5, device);  // a dtype without its own GEMM: the f32 rate
  }
  if (w.world) {
    Tensor v = from_vector<double>({p.flops}, {1});
    w.world->all_reduce(v);
    p.flops = v.data_ptr<double>()[0] / w.size;
  }
  return p;
}

}  // namespace

struct GptPretraining::State {
  MegatronArgs a;
  PretrainGptOptions o;
  int done = 0;  // stages run: 1 initialize, 2 model and optimizer, 3 data, 4 train, 5 evaluate
  std::function<void(const std::string&)> print;
  GptJob job;
  PretrainGptResult result;
  // setup_model_and_optimizer
  std::unique_ptr<data::Tokenizer> tokenizer;
  transformer::TransformerConfig cfg;
  int64_t padded_vocab = 0;
  bool load_hf = false;  // --load names a Hugging Face folder
  transformer::GPTModel gpt{nullptr};
  std::optional<GptPipelineStage> stage;  // this rank's chunks under pipeline parallelism
  nn::Module* model = nullptr;
  std::optional<GptMoeLayers> moe;
  parallel::ModelParallel mp;
  std::unique_ptr<optim::MixedPrecisionOptimizer> opt;
  std::unique_ptr<optim::OptimizerParamScheduler> sched;
  train::TrainerOptions to;
  std::unique_ptr<train::Trainer> trainer;
  int64_t resumed_at = -1;  // the loaded checkpoint's iteration
  // build_data_iterators
  GptDatasets data;
  GptBatchOptions batch;
  int64_t micro = 1;
  std::optional<GptBatchIterator> train_it, valid_it;
  bool do_valid = false, do_test = false;
  // train
  std::optional<parallel::Timeline> timeline;
  std::unique_ptr<GptPipelineSteps> pipeline;
  std::vector<MoeLayerLog> moe_log;
  bool memory_reported = false;
  train::ForwardStep valid_step;
  // --enable-cuda-graph: each micro-batch's inputs on the device, the same
  // tensors every step (what the recorded forward reads).
  std::vector<GptBatch> graph_inputs;

  bool pipelined() const { return a.pipeline_model_parallel_size > 1; }
};

GptPretraining::GptPretraining(const MegatronArgs& a, PretrainGptOptions o) : s_(std::make_unique<State>()) {
  s_->a = a;
  s_->o = std::move(o);
  s_->print = s_->o.print ? s_->o.print : [](const std::string& line) {
    std::fputs((line + "\n").c_str(), stdout);
    std::fflush(stdout);
  };
}

GptPretraining::~GptPretraining() = default;

void GptPretraining::require(int stage, const char* caller) const {
  static const char* const kStages[] = {"the constructor", "initialize()", "setup_model_and_optimizer()",
                                        "build_data_iterators()", "train()", "evaluate()"};
  QK_CHECK(s_->done >= stage, "GptPretraining::", caller, " needs ", kStages[stage], " first");
}

void GptPretraining::say(const std::string& line) const {
  if (s_->job.lead()) s_->print(line);
}

void GptPretraining::say_datetime(const std::string& what) const {
  say(fmt::format("[{}] datetime: {} ", what, qk::timestamp()));
}

const MegatronArgs& GptPretraining::args() const { return s_->a; }
const PretrainGptOptions& GptPretraining::options() const { return s_->o; }
const GptJob& GptPretraining::job() const { return require(1, "job"), s_->job; }
const data::Tokenizer& GptPretraining::tokenizer() const { return require(2, "tokenizer"), *s_->tokenizer; }
const transformer::TransformerConfig& GptPretraining::config() const { return require(2, "config"), s_->cfg; }
nn::Module& GptPretraining::model() { return require(2, "model"), *s_->model; }
transformer::GPTModel GptPretraining::gpt() { return require(2, "gpt"), s_->gpt; }
GptPipelineStage* GptPretraining::pipeline_stage() {
  return require(2, "pipeline_stage"), s_->stage ? &*s_->stage : nullptr;
}
const parallel::ModelParallel& GptPretraining::model_parallel() const { return require(2, "model_parallel"), s_->mp; }
optim::MixedPrecisionOptimizer& GptPretraining::optimizer() { return require(2, "optimizer"), *s_->opt; }
optim::OptimizerParamScheduler& GptPretraining::scheduler() { return require(2, "scheduler"), *s_->sched; }
train::Trainer& GptPretraining::trainer() { return require(2, "trainer"), *s_->trainer; }
const GptDatasets& GptPretraining::datasets() const { return require(3, "datasets"), s_->data; }
const PretrainGptResult& GptPretraining::result() const { return s_->result; }

// ---- initialize (Megatron's initialize_megatron)

void GptPretraining::initialize() {
  QK_CHECK(s_->done == 0, "GptPretraining::initialize: already run");
  const MegatronArgs& a = s_->a;
  QK_CHECK(a.context_parallel_size == 1, "pretrain_gpt runs tensor, pipeline, expert and data parallelism "
           "(--context-parallel-size must be 1)");
  // Before anything is read or written: a device this machine lacks stops the run here.
  s_->job.device = [&] {
    try {
      return resolve_device(s_->o.device, dist::launch_env().local_rank);
    } catch (const Error& e) {
      QK_THROW(ValueError, "--device ", s_->o.device, ": ", e.message());
    }
  }();
  join_job(a, s_->job);
  say(format_megatron_args(a));
  if (s_->job.lead())
    for (const auto& n : s_->o.notes) QK_INFO("{}", n);
  if (s_->job.ps) {
    std::string layout = s_->job.ps->layout().format();
    while (!layout.empty() && layout.back() == '\n') layout.pop_back();
    say("> " + layout);
  }
  s_->job.output_dir = s_->result.output_dir = a.save.value_or(s_->o.default_output_dir);
  say(fmt::format("> metrics (metrics.jsonl) and loss/learning-rate curves (training_curves.png) go to {}{}",
                  s_->job.output_dir, a.save ? " (--save)" : " (no --save given)"));
  if (s_->job.lead()) make_dirs(s_->job.output_dir);
  s_->done = 1;
}

// ---- model and optimizer (Megatron's setup_model_and_optimizer)

void GptPretraining::setup_model_and_optimizer() {
  require(1, "setup_model_and_optimizer");
  QK_CHECK(s_->done == 1, "GptPretraining::setup_model_and_optimizer: already run");
  build_model();
  build_optimizer();
  say_datetime("after model, optimizer, and learning rate scheduler are built");
  load_checkpoint();
  s_->done = 2;
}

void GptPretraining::build_model() {
  State& s = *s_;
  const MegatronArgs& a = s.a;
  say(fmt::format("> building {} tokenizer ...", a.tokenizer_type.value_or("?")));
  s.tokenizer = build_tokenizer(a);
  if (a.vocab_size && *a.tokenizer_type != "NullTokenizer" && s.job.lead())
    QK_INFO("--vocab-size {}: only NullTokenizer reads it (as in Megatron); the vocabulary is the tokenizer's {} ids",
            *a.vocab_size, s.tokenizer->vocab_size());
  s.cfg = gpt_transformer_config(a, s.tokenizer->vocab_size());
  if (const int64_t rows = checkpoint_padded_vocab(a);
      rows > 0 && rows != s.cfg.padded_vocab_size() && !a.padded_vocab_size) {
    // Saved at another tensor-parallel size: keep the checkpoint's rows so
    // its whole tensors load as they are and training continues on them.
    QK_CHECK(rows % a.tensor_model_parallel_size == 0, "the checkpoint in --load ", *a.load, " has ", rows,
             " vocabulary rows, which --tensor-model-parallel-size ", a.tensor_model_parallel_size,
             " does not divide; load it at a tensor size that does");
    MegatronArgs with_rows = a;
    with_rows.padded_vocab_size = rows;
    s.cfg = gpt_transformer_config(with_rows, s.tokenizer->vocab_size());
    say(fmt::format("> the checkpoint in --load pads the vocabulary to {} rows (saved at another tensor-parallel "
                    "size); this run keeps them (as --padded-vocab-size {} would)",
                    rows, rows));
  }
  s.padded_vocab = s.cfg.padded_vocab_size();
  say(fmt::format(" > padded vocab (size: {}) with {} dummy tokens (new size: {})", s.tokenizer->vocab_size(),
                  s.padded_vocab - s.tokenizer->vocab_size(), s.padded_vocab));

  // --load of a Hugging Face folder: the flags must build its model (checked
  // before building ours, so a mismatch fails fast).
  s.load_hf = a.load && transformer::is_hf_folder(*a.load);
  QK_CHECK_AS(ValueError, !(s.load_hf && s.pipelined()), "--load of a Hugging Face folder (", *a.load,
              ") builds the unsplit model: load it at --pipeline-model-parallel-size 1, save a checkpoint and "
              "--load that at the pipeline size");
  if (s.load_hf) check_flags_match_hf_config(a, s.cfg, *a.load);

  // Megatron's _set_random_seed: seed (+ 100 x pipeline rank, which the
  // stages after the first take once their chunks are built from the
  // unsplit model's draws), the same on every data-parallel and
  // tensor-parallel rank, so the replicas start equal and the shards cut one
  // full initialisation (the per-rank dropout generator of tensor
  // parallelism is seeded from it).
  manual_seed(static_cast<uint64_t>(a.seed));
  // Under pipeline parallelism this rank's stage: its chunks behind one
  // module with the unsplit names (gpt_pretrain_pipeline.h).
  std::vector<nn::Module*> parts;  // what holds the MoE layers
  if (s.pipelined()) {
    s.stage = build_gpt_pipeline_stage(a, s.cfg, s.job.pp_rank(), s.job.tp, s.job.ep);
    s.model = s.stage->model.get();
    for (auto& ch : s.stage->chunks) parts.push_back(ch.get());
  } else {
    s.gpt = transformer::GPTModel(
        s.cfg, transformer::GPTModelParallel{.tp = s.job.tp_size() > 1 ? s.job.tp : nullptr, .ep = s.job.ep});
    s.model = s.gpt.get();
    parts.push_back(s.gpt.get());
  }
  // The MoE layers (none without --num-experts): aux-loss scale, expert bias, statistics.
  s.moe.emplace(parts, s.cfg);
  for (const Tensor& p : s.model->parameters()) s.result.num_parameters += p.numel();
  say(fmt::format(" > number of parameters on (tensor, pipeline) model parallel rank (0, 0): {}",
                  s.result.num_parameters));
  if (s.pipelined()) say("> pipeline layers: " + s.stage->split.format());
  // Its weights, before the optimizer copies them; then iteration 0 and a
  // fresh optimizer, as --finetune.
  if (s.load_hf) say(load_hf_weights_for_finetune(a, *s.gpt, *a.load));
  if (!s.job.device.is_cpu()) {
    s.model->to(s.job.device);  // before the optimizer takes the parameters
    say(fmt::format("> model, gradients, optimizer state and batches on {} ({})", s.job.device.str(),
                    backend(s.job.device.type).device_name(s.job.device.index)));
  }
}

void GptPretraining::build_optimizer() {
  State& s = *s_;
  const MegatronArgs& a = s.a;
  s.mp.world = s.job.world;
  if (s.pipelined()) {
    s.mp.tp = s.stage->tensor_parallel(s.job.tp.get());
    s.mp.pp = s.stage->pipeline_parallel(s.job.pp.get(), s.job.embedding.get());
  } else if (s.job.tp_size() > 1) {
    s.mp.tp = parallel::tensor_parallel_of(*s.gpt, s.job.tp.get(), s.gpt->tensor_parallel_generator());
  }
  if (s.job.ep) {
    // Expert parallelism: the routed experts' gradients over the
    // expert-data-parallel ranks, their norm over the expert-parallel group,
    // checkpoints gathered by name.
    s.mp.ep.ep = s.job.ep.get();
    s.mp.ep.expert_dp = s.job.expert_dp.get();
    for (const auto& item : s.model->named_parameters())
      if (transformer::is_expert_parameter(item.key())) s.mp.ep.params.insert(item.key());
  }
  s.opt = s.pipelined() ? build_gpt_stage_optimizer(a, *s.stage, s.job.dp.get(), s.mp.ep)
                        : gpt_build_optimizer(a, *s.gpt, s.job.dp.get(), s.mp.ep);
  if (s.mp.ep.active()) s.opt->set_expert_parallel(s.mp.ep);
  // Clipping and the inf check over the whole model, the partial gradients
  // (sequence-parallel norms, q/k norms) summed over the group; the tied
  // embedding's gradient over the first and last stage.
  if (s.mp.tp.active()) s.opt->set_tensor_parallel(s.mp.tp);
  if (s.pipelined()) s.opt->set_pipeline_parallel(s.mp.pp);
  say(gpt_theoretical_memory(a, *s.opt, s.job.dp_size()));
  if (s.job.lead())
    for (const auto& n : gpt_recompute_notes(a)) QK_INFO("{}", n);
  s.sched = std::make_unique<optim::OptimizerParamScheduler>(&s.opt->optimizer(), gpt_scheduler_options(a),
                                                             s.opt->group_schedules());
  s.to = gpt_trainer_options(a, s.job.lead() ? s.job.output_dir : "");
  s.to.flops_per_sample = transformer::num_floating_point_operations(s.cfg, 1);
  if (s.load_hf) s.to.load.clear();
  s.to.args_json = megatron_args_to_json(a);
  if (a.enable_cuda_graph) {
    QK_CHECK_DEVICE(!s.job.device.is_cpu(), "--enable-cuda-graph records the step as a CUDA graph: it needs a GPU "
                    "(--device cuda), not ", s.job.device.str());
    s.to.graph_device = s.job.device;
    s.to.graph_warmup_steps = a.cuda_graph_warmup_steps;
  }
  s.trainer = std::make_unique<train::Trainer>(*s.model, *s.opt, *s.sched, s.to, s.job.data_parallel(), s.mp);
}

void GptPretraining::load_checkpoint() {
  State& s = *s_;
  const MegatronArgs& a = s.a;
  if (!a.load || s.load_hf) return;
  if (const auto loaded = s.trainer->load()) {
    s.resumed_at = s.trainer->progress().iteration;
    say(fmt::format("  successfully loaded checkpoint from {} [ t 1/{}, p 1/{} ] at iteration {}", loaded->where,
                    s.job.tp_size(), s.job.pp_size(), s.trainer->progress().iteration));
  } else {
    QK_CHECK(!a.exit_on_missing_checkpoint, "--exit-on-missing-checkpoint: no checkpoint in --load ", *a.load);
    say(fmt::format("WARNING: could not find a checkpoint in {}\n    will not load any checkpoints and will start "
                    "from random",
                    *a.load));
  }
}

// ---- data iterators (Megatron's build_train_valid_test_data_iterators)

void GptPretraining::build_data_iterators() {
  require(2, "build_data_iterators");
  QK_CHECK(s_->done == 2, "GptPretraining::build_data_iterators: already run");
  State& s = *s_;
  const MegatronArgs& a = s.a;
  // Rank 0 builds (and caches) the indices first, as Megatron does.
  say("> building train, validation, and test datasets ...");
  if (s.job.lead()) s.data = build_gpt_datasets(a, *s.tokenizer);
  if (s.job.world) s.job.world->barrier();
  if (!s.job.lead()) s.data = build_gpt_datasets(a, *s.tokenizer);
  say(s.data.description);
  s.batch = gpt_batch_options(a, *s.tokenizer);
  s.micro = a.micro_batch_size.value_or(1);
  const train::TrainProgress& p = s.trainer->progress();
  s.train_it.emplace(s.data.train, p.consumed_train_samples, s.micro, s.job.dp_rank(), s.job.dp_size(), s.batch,
                     "train");
  s.do_valid = s.data.valid && a.eval_iters > 0;
  s.do_test = s.data.test && a.eval_iters > 0;
  if (s.do_valid)
    s.valid_it.emplace(s.data.valid, p.consumed_valid_samples, s.micro, s.job.dp_rank(), s.job.dp_size(), s.batch,
                       "validation");
  say_datetime("after dataloaders are built");
  if (s.o.measure_gemm_peak) {
    const train::GemmPeak peak = measure_peak(s.job, s.cfg.params_dtype, s.job.device);
    s.result.gemm_peak_flops = peak.flops;
    say(fmt::format("> GEMM peak: {:.4f} TFLOP/s per rank ({}^3 {} matmul on {}, fastest of 5+ calls, all {} ranks at "
                    "once; what MFU is measured against)",
                    peak.flops / 1e12, peak.n, dtype_name(peak.dtype), s.job.device.str(), s.job.size));
  }
  s.done = 3;
}

// ---- train (Megatron's train)

void GptPretraining::check_loss(double value, int64_t iteration) const {
  // --check-for-nan-in-loss-and-grad (Megatron's default): a fatal error.
  QK_CHECK_AS(ValueError, !s_->a.check_for_nan_in_loss_and_grad || std::isfinite(value), "Rank ", s_->job.rank,
              ": found ", std::isnan(value) ? "NaN" : "Inf", " in the forward loss calculation at iteration ",
              iteration, " (--no-check-for-nan-in-loss-and-grad skips such iterations)");
}

train::MicroBatchOutput GptPretraining::forward(GptBatchIterator& it) {
  State& s = *s_;
  const GptBatch b = it.next();
  const double tokens = b.loss_tokens();  // the host's copy, before the batch moves
  auto on = [&](const Tensor& t) { return t.defined() && !s.job.device.is_cpu() ? t.to(s.job.device) : t; };
  Tensor loss = s.gpt->forward(on(b.tokens), on(b.position_ids), on(b.labels), on(b.loss_mask));
  if (s.gpt->is_training()) s.moe->record();
  // The loss stays on the device: the step reads every micro-batch's at
  // once (StepRunner), and the NaN check looks at the step's (on_step).
  train::Metric lm;
  lm.count = tokens;
  lm.device_sum = ops::binary_scalar(BinaryOp::mul, ops::cast(loss.detach(), DType::f64), tokens);
  return train::MicroBatchOutput{loss, {{"lm loss", lm}}};
}

// --enable-cuda-graph: micro-batch i into its input tensors (made at the
// first load, then copied into), its token count for the loss's metric.
std::map<std::string, train::Metric> GptPretraining::load_graph_inputs(int64_t i) {
  State& s = *s_;
  const GptBatch b = s.train_it->next();
  if (s.graph_inputs.size() <= static_cast<size_t>(i)) s.graph_inputs.resize(static_cast<size_t>(i) + 1);
  GptBatch& in = s.graph_inputs[static_cast<size_t>(i)];
  auto into = [&](Tensor& dst, const Tensor& src) {
    if (!dst.defined()) dst = ops::to_device(src, s.job.device);
    else ops::copy_(dst, src);
  };
  into(in.tokens, b.tokens);
  into(in.labels, b.labels);
  into(in.loss_mask, b.loss_mask);
  into(in.position_ids, b.position_ids);
  return {{"lm loss", train::Metric(0.0, b.loss_tokens())}};
}

// The recorded forward: from the input tensors only; the loss's sum weighs
// it by the mask's sum on the device (the host's count varies by batch).
train::MicroBatchOutput GptPretraining::graphed_forward(int64_t i) {
  State& s = *s_;
  const GptBatch& in = s.graph_inputs.at(static_cast<size_t>(i));
  Tensor loss = s.gpt->forward(in.tokens, in.position_ids, in.labels, in.loss_mask);
  train::Metric lm;
  lm.device_sum = ops::mul(ops::cast(loss.detach(), DType::f64), ops::cast(ops::sum(in.loss_mask), DType::f64));
  return train::MicroBatchOutput{loss, {{"lm loss", lm}}};
}

// The schedule replaces StepRunner's micro-batch loop (1F1B, or interleaved
// over virtual stages); evaluation runs it forward only.
void GptPretraining::set_up_pipeline_steps() {
  State& s = *s_;
  GptPipelineOptions po;
  po.pp = s.job.pp.get();
  po.dp = s.job.dp.get();
  po.num_microbatches = s.trainer->num_microbatches();
  po.micro_batch_size = s.micro;
  po.seq_length = s.cfg.seq_length / (s.cfg.sequence_parallel ? s.job.tp_size() : 1);
  po.hidden_size = s.cfg.hidden_size;
  po.dtype = s.cfg.params_dtype;
  po.device = s.job.device;
  po.autocast = s.to.autocast;
  po.overlap_p2p_comm = s.a.overlap_p2p_comm && s.stage->split.interleaved();
  po.check_loss = [this](double v) { check_loss(v, s_->trainer->progress().iteration + 1); };
  if (!s.moe->empty()) po.after_training_forward = [&s] { s.moe->record(); };
  po.timeline = s.a.profile ? &*s.timeline : nullptr;
  s.pipeline = std::make_unique<GptPipelineSteps>(*s.stage, *s.opt, po);
  s.pipeline->set_scheduler(s.sched.get(), s.to.global_batch_size);
  // The traffic line's "pp": the activations and gradients sent and
  // received between stages; "embedding": the tied gradient's sum.
  for (dist::ProcessGroup* g : s.pipeline->p2p_groups()) s.trainer->meter_traffic("pp", g);
  if (!s.mp.pp.tied_parameter.empty()) s.trainer->meter_traffic("embedding", s.job.embedding.get());
  train::CustomSteps steps;
  steps.train = [&s] { return s.pipeline->step(*s.train_it); };
  if (s.do_valid) steps.evaluate = [&s](int64_t n) { return s.pipeline->forward_only(*s.valid_it, n); };
  s.trainer->set_custom_steps(std::move(steps));
}

train::TrainerCallbacks GptPretraining::callbacks() {
  State& s = *s_;
  train::TrainerCallbacks cb;
  if (!s.job.output_dir.empty()) {
    const std::string title = fmt::format("GPT {} layers, hidden {}, {} heads, sequence {}", s.cfg.num_layers,
                                          s.cfg.hidden_size, s.cfg.num_attention_heads, s.cfg.seq_length);
    cb.on_metrics = [&s, title](const train::MetricsLog& log) {
      plot_metrics(s.job.output_dir + "/training_curves.png", title, log);
    };
  }
  if (s.pipelined()) {
    set_up_pipeline_steps();
  } else {
    if (s.a.enable_cuda_graph) {
      cb.train_load = [this](int64_t i) { return load_graph_inputs(i); };
      cb.train_step = [this](int64_t i) { return graphed_forward(i); };
    } else {
      cb.train_step = [this](int64_t) { return forward(*s_->train_it); };
    }
    if (s.do_valid) cb.valid_step = [this](int64_t) { return forward(*s_->valid_it); };
  }
  // Megatron's MoEAuxLossAutoScaler.set_loss_scale(loss_scale / num_microbatches):
  // the auxiliary losses' gradients as the main loss's, set for each step.
  auto set_aux_loss_scale = [&s] {
    s.moe->set_aux_loss_scale(static_cast<double>(s.opt->loss_scale()) /
                              static_cast<double>(s.trainer->num_microbatches()));
  };
  set_aux_loss_scale();
  cb.on_step = [this, &s, set_aux_loss_scale](int64_t iteration, const train::StepStats& st) {
    if (const auto lm = st.metrics.find("lm loss"); lm != st.metrics.end()) check_loss(lm->second, iteration);
    // Aux-loss-free balancing after the step, on the tokens of every
    // data-parallel rank (the expert-parallel ones included).
    s.moe->update_expert_bias(s.job.dp.get());
    set_aux_loss_scale();
    // Without a loss scaler a skipped step means non-finite gradients, which
    // Megatron's DDP reports as an error while the check is on.
    QK_CHECK_AS(ValueError, !(st.skipped && !s.opt->scaler() && s.a.check_for_nan_in_loss_and_grad), "Rank ",
                s.job.rank, ": found NaN or Inf in the gradients at iteration ", iteration,
                " (--no-check-for-nan-in-loss-and-grad skips such iterations)");
    fault::point("step", iteration);
  };
  // The interval's MoE statistics (collective over dp and pp): the mean
  // losses join the iteration line and metrics.jsonl (Megatron's
  // track_moe_metrics), the per-layer ones the lines below it.
  if (!s.moe->empty() && s.job.lead())
    GptMoeLayers::start_jsonl(s.job.output_dir + "/moe_metrics.jsonl", s.resumed_at);
  if (!s.moe->empty())
    cb.log_losses = [&s](int64_t) {
      s.moe_log = s.moe->take_interval(s.job.dp.get(), s.job.pp.get(), s.job.ep_size());
      return moe_line_losses(s.moe_log, s.cfg);
    };
  cb.on_log = [this](const train::LogStats& st) { on_log(st); };
  cb.on_eval = [this](const train::EvalStats& e) {
    say(megatron_validation_block(fmt::format("iteration {}", e.iteration), e.metrics));
  };
  cb.on_save = [&s](const CheckpointInfo& c) {
    s.print(fmt::format("  successfully saved checkpoint from iteration {:7d} to {} [ t 1/{}, p 1/{} ]",
                        s.trainer->progress().iteration, c.path, s.job.tp_size(), s.job.pp_size()));
  };
  cb.user_state = [&s] {
    return nlohmann::json{{"format", kRunFormat},
                          {"tokenizer_vocab_size", s.tokenizer->vocab_size()},
                          {"padded_vocab_size", s.padded_vocab},
                          {"model", s.cfg.summary()}}
        .dump();
  };
  return cb;
}

void GptPretraining::on_log(const train::LogStats& st) {
  State& s = *s_;
  IterationLineExtras x;
  x.log_throughput = s.a.log_throughput;
  if (s.a.log_params_norm) x.params_norm = params_norm(*s.opt);  // collective: before the other ranks leave
  if (!s.job.lead()) return;
  s.print(megatron_iteration_line(st, x));
  if (s.a.moe_per_layer_logging)
    for (const MoeLayerLog& l : s.moe_log) s.print(moe_layer_line(l));
  if (!s.moe_log.empty()) {
    s.moe->add_heatmap_column(st.iteration, s.moe_log);
    GptMoeLayers::append_jsonl(s.job.output_dir + "/moe_metrics.jsonl", st.iteration, s.moe_log);
  }
  s.print(throughput_line(st, s.job.size, s.result.gemm_peak_flops));
  if (!st.comm.empty()) s.print(traffic_line(st.comm));
  if (s.pipeline && s.a.profile) {
    const auto [sum, steps] = s.pipeline->take_bubble();
    if (steps > 0)
      s.print(fmt::format(" [qk] pipeline bubble: {:.1f}% measured over {} profiled step(s), {:.1f}% in theory "
                          "((p-1)/(v m+p-1))",
                          100.0 * sum / static_cast<double>(steps), steps,
                          100.0 * parallel::theoretical_bubble_fraction(s.job.pp_size(), s.trainer->num_microbatches(),
                                                                        s.stage->split.virtual_pipeline_size())));
  }
  if (!s.memory_reported) s.print(gpt_memory_report(*s.opt, st.iteration, s.job.rank));  // Megatron's report_memory
  s.memory_reported = true;
}

train::ExitReason GptPretraining::train() {
  require(3, "train");
  QK_CHECK(s_->done == 3, "GptPretraining::train: already run");
  State& s = *s_;
  // --profile: each rank's spans of the first profiled steps, one Chrome
  // trace at the end (trace.json in the output folder).
  s.timeline.emplace(s.job.rank, fmt::format("rank {} (pp {}, tp {}, dp {})", s.job.rank, s.job.pp_rank(),
                                             s.job.tp ? s.job.tp->rank() : 0, s.job.dp_rank()));
  const train::TrainerCallbacks cb = callbacks();
  s.valid_step = cb.valid_step;
  say("training ...");
  reset_peak_memory(s.job.device);  // "max allocated" in the memory report: training's high-water mark
  s.result.train = s.trainer->train(cb);
  write_moe_heatmap_and_trace();
  s.done = 4;
  switch (s.result.train.exit_reason) {
    case train::ExitReason::signal: say_datetime("exiting program after receiving SIGTERM."); break;
    case train::ExitReason::exit_interval:
      say_datetime(fmt::format("exiting program at iteration {}", s.result.train.progress.iteration));
      break;
    case train::ExitReason::exit_duration:
      say_datetime(fmt::format("exiting program after {} minutes", s.a.exit_duration_in_mins.value_or(0)));
      break;
    case train::ExitReason::finished: say_datetime("after training is done"); break;
  }
  return s.result.train.exit_reason;
}

void GptPretraining::write_moe_heatmap_and_trace() {
  State& s = *s_;
  if (s.job.lead() && !s.moe->empty()) {
    const std::string heatmap = s.job.output_dir + "/moe_expert_load.png";
    s.moe->write_heatmap(heatmap);
    say(fmt::format("> expert load per MoE layer and logged iteration (share of routed tokens): {}", heatmap));
  }
  if (s.pipeline && s.a.profile) {
    // Every rank's timeline to rank 0 (collective over the job), one trace.
    const std::vector<parallel::Timeline> all = parallel::gather_timelines(*s.timeline, *s.job.world);
    if (s.job.lead()) {
      const std::string path = s.job.output_dir + "/trace.json";
      parallel::write_chrome_trace(path, all);
      say(fmt::format("> --profile: the timeline of {} step(s) of every rank is in {} (chrome://tracing, "
                      "ui.perfetto.dev)",
                      s.pipeline->profiled_steps(), path));
    }
  }
}

// ---- Megatron's final evaluation: validation continues where it was, test from its start

void GptPretraining::evaluate() {
  require(4, "evaluate");
  QK_CHECK(s_->done == 4, "GptPretraining::evaluate: already run");
  State& s = *s_;
  QK_CHECK(s.result.train.exit_reason == train::ExitReason::finished,
           "GptPretraining::evaluate: training stopped early (", train::exit_reason_name(s.result.train.exit_reason),
           "); Megatron evaluates only a finished run");
  const int64_t iteration = s.result.train.progress.iteration;
  if (s.do_valid) {
    s.result.final_valid = s.trainer->evaluate(s.valid_step);  // the pipeline's forward-only steps when pipelined
    say(megatron_validation_block(fmt::format("iteration {} on validation set", iteration),
                                  s.result.final_valid->metrics));
  }
  if (s.do_test) {
    GptBatchIterator test_it(s.data.test, 0, s.micro, s.job.dp_rank(), s.job.dp_size(), s.batch, "test");
    train::EvalStats e;
    e.iteration = iteration;
    s.model->eval();
    const int64_t n = s.a.eval_iters * s.trainer->num_microbatches();
    e.metrics = s.pipeline ? s.pipeline->forward_only(test_it, n)
                           : s.trainer->runner().forward_only([&](int64_t) { return forward(test_it); }, n);
    s.model->train();
    s.result.final_test = e;
    say(megatron_validation_block(fmt::format("iteration {} on test set", iteration), e.metrics));
  }
  s.done = 5;
}

PretrainGptResult pretrain_gpt(const MegatronArgs& a, const PretrainGptOptions& o) {
  GptPretraining run(a, o);
  run.initialize();
  run.setup_model_and_optimizer();
  run.build_data_iterators();
  if (run.train() == train::ExitReason::finished) run.evaluate();
  return run.result();
}

}  // namespace qk::recipes
