// pretrain_gpt: Megatron-LM's pretrain() for the GPT model on the pieces of
// gpt_pretrain.h, in Megatron's order (initialize, model and optimizer,
// checkpoint, data, train with evaluation, final validation and test).
#include <fmt/format.h>

#include <cmath>
#include <cstdio>
#include <ctime>
#include <nlohmann/json.hpp>
#include <thread>

#include "gpt_pretrain_moe.h"
#include "gpt_pretrain_pipeline.h"
#include "qk/base/env.h"
#include "qk/base/error.h"
#include "qk/base/fault.h"
#include "qk/base/file_io.h"
#include "qk/base/log.h"
#include "qk/base/thread_pool.h"
#include "qk/dist/launch_env.h"
#include "qk/dist/process_group.h"
#include "qk/parallel/parallel_state.h"
#include "qk/parallel/timeline.h"
#include "qk/tensor/backend.h"
#include "qk/tensor/generator.h"
#include "qk/train/gemm_peak.h"
#include "qk/train/gpt_pretrain.h"
#include "qk/train/model_parallel.h"
#include "qk/transformer/gpt_model.h"
#include "qk/transformer/hf_checkpoint.h"

namespace qk::train {
namespace {

constexpr const char* kRunFormat = kPretrainGptFormat;

std::string datetime_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  localtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", &tm);
  return buf;
}

// The job of this process (Megatron's initialize_megatron): qk run's or
// torchrun's environment, Megatron's rank grid over it (the tensor- and
// data-parallel groups this rank trains in), and one compute thread per core
// of this node's share, as torchrun leaves OMP_NUM_THREADS when it starts
// several processes per node.
struct World {
  int rank = 0, size = 1;
  std::shared_ptr<parallel::ParallelState> ps;    // null for one rank
  std::shared_ptr<dist::ProcessGroup> tp, dp;     // this rank's groups (null for one rank)
  std::shared_ptr<dist::ProcessGroup> pp, embedding;  // pipeline groups (embedding: first and last stage only)
  std::shared_ptr<dist::ProcessGroup> ep, expert_dp;  // expert groups (null below expert-parallel size 2)
  dist::ProcessGroup* job = nullptr;              // every rank (null for one rank)
  int tp_size() const { return tp ? tp->size() : 1; }
  int dp_rank() const { return dp ? dp->rank() : 0; }
  int dp_size() const { return dp ? dp->size() : 1; }
  int pp_rank() const { return pp ? pp->rank() : 0; }
  int pp_size() const { return pp ? pp->size() : 1; }
  int ep_size() const { return ep ? ep->size() : 1; }
  DataParallel data_parallel() const { return {dp.get(), nullptr}; }
};

World join_world(const MegatronArgs& a) {
  const dist::LaunchEnv env = dist::launch_env();
  QK_CHECK(env.world_size == a.world_size, "the arguments were validated for ", a.world_size,
           " ranks but this job has ", env.world_size, " (", env.source,
           "); parse them with MegatronArgsOptions{.world_size = launch_env().world_size}");
  World w;
  if (env.world_size > 1) {
    if (!dist::is_initialized())
      dist::init(dist::InitOptions().timeout(60.0 * static_cast<double>(a.distributed_timeout_minutes)));
    w.rank = dist::rank();
    w.size = dist::world_size();
    w.job = &dist::group();
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
  return w;
}

double params_norm(MixedPrecisionOptimizer& opt) {
  // Megatron's calc_params_l2_norm: over the fp32 main parameters, each
  // tensor-parallel shard once (summed over the group), replicated ones once;
  // the distributed optimizer's main parameters are data-parallel pieces, so
  // its gathered model weights instead. Collective over the tensor-parallel
  // group; under pipeline parallelism the stages' squares are summed over the
  // pipeline group, the last stage's copy of the tied embedding left out.
  opt.finish_param_sync();
  const TensorParallel& tp = opt.tensor_parallel();
  const PipelineParallel& pp = opt.pipeline_parallel();
  const std::vector<Tensor>& params = opt.reduces_own_grads() ? opt.model_params() : opt.main_params();
  double sq[2] = {0, 0};  // shards, replicated
  for (size_t i = 0; i < params.size(); ++i) {
    const Tensor c = params[i].detach().to(DType::f32).contiguous().to(kCPU);
    const float* d = c.data_ptr<float>();
    double s = 0;
    for (int64_t j = 0; j < c.numel(); ++j) s += static_cast<double>(d[j]) * d[j];
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

double mask_sum(const Tensor& mask) {
  const float* m = mask.data_ptr<float>();
  double s = 0;
  for (int64_t i = 0; i < mask.numel(); ++i) s += m[i];
  return s;
}

// The padded vocabulary of the checkpoint --load resumes from (0: none,
// or not one of pretrain_gpt's). It is a multiple of
// --make-vocab-size-divisible-by x the tensor-parallel size it was saved
// at, so another layout would pad differently.
int64_t checkpoint_padded_vocab(const MegatronArgs& a) {
  if (!a.load) return 0;
  const std::optional<CheckpointInfo> c = find_checkpoint(*a.load);
  if (!c) return 0;
  const nlohmann::json j = nlohmann::json::parse(c->meta, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("user") || !j["user"].is_object()) return 0;
  const nlohmann::json& u = j["user"];
  if (u.value("format", std::string()) != kRunFormat) return 0;
  return u.value("padded_vocab_size", int64_t{0});
}

// The GEMM rate every rank gets while all of them run at once (what a
// training step shares the cores with), averaged over ranks.
GemmPeak measure_peak(const World& w, DType dtype, Device device) {
  if (w.job) w.job->barrier();
  GemmPeak p;
  try {
    p = measure_gemm_peak(1024, dtype, 5, device);
  } catch (const Error&) {
    p = measure_gemm_peak(1024, DType::f32, 5, device);  // a dtype without its own GEMM: the f32 rate
  }
  if (w.job) {
    Tensor v = from_vector<double>({p.flops}, {1});
    w.job->all_reduce(v);
    p.flops = v.data_ptr<double>()[0] / w.size;
  }
  return p;
}

}  // namespace

PretrainGptResult pretrain_gpt(const MegatronArgs& a, const PretrainGptOptions& o) {
  QK_CHECK(a.context_parallel_size == 1, "pretrain_gpt runs tensor, pipeline, expert and data parallelism "
           "(--context-parallel-size must be 1)");
  const bool pipelined = a.pipeline_model_parallel_size > 1;
  // Before anything is read or written: a device this machine lacks stops the run here.
  const Device device = [&] {
    try {
      return resolve_device(o.device, dist::launch_env().local_rank);
    } catch (const Error& e) {
      QK_THROW(ValueError, "--device ", o.device, ": ", e.message());
    }
  }();
  const World world = join_world(a);
  const bool lead = world.rank == 0;
  const auto print = o.print ? o.print : [](const std::string& s) {
    std::fputs((s + "\n").c_str(), stdout);
    std::fflush(stdout);
  };
  auto say = [&](const std::string& s) {
    if (lead) print(s);
  };
  auto say_datetime = [&](const std::string& what) { say(fmt::format("[{}] datetime: {} ", what, datetime_now())); };

  say(format_megatron_args(a));
  if (lead)
    for (const auto& n : o.notes) QK_INFO("{}", n);
  if (world.ps) {
    std::string layout = world.ps->layout().format();
    while (!layout.empty() && layout.back() == '\n') layout.pop_back();
    say("> " + layout);
  }
  PretrainGptResult result;
  result.output_dir = a.save.value_or(o.default_output_dir);
  say(fmt::format("> metrics (metrics.jsonl) and loss/learning-rate curves (training_curves.png) go to {}{}",
                  result.output_dir, a.save ? " (--save)" : " (no --save given)"));
  if (lead) make_dirs(result.output_dir);

  // ---- tokenizer and model
  say(fmt::format("> building {} tokenizer ...", a.tokenizer_type.value_or("?")));
  const std::unique_ptr<data::Tokenizer> tokenizer = build_tokenizer(a);
  if (a.vocab_size && *a.tokenizer_type != "NullTokenizer" && lead)
    QK_INFO("--vocab-size {}: only NullTokenizer reads it (as in Megatron); the vocabulary is the tokenizer's {} ids",
            *a.vocab_size, tokenizer->vocab_size());
  transformer::TransformerConfig cfg = gpt_transformer_config(a, tokenizer->vocab_size());
  if (const int64_t rows = checkpoint_padded_vocab(a);
      rows > 0 && rows != cfg.padded_vocab_size() && !a.padded_vocab_size) {
    // Saved at another tensor-parallel size: keep the checkpoint's rows so
    // its whole tensors load as they are and training continues on them.
    QK_CHECK(rows % a.tensor_model_parallel_size == 0, "the checkpoint in --load ", *a.load, " has ", rows,
             " vocabulary rows, which --tensor-model-parallel-size ", a.tensor_model_parallel_size,
             " does not divide; load it at a tensor size that does");
    MegatronArgs with_rows = a;
    with_rows.padded_vocab_size = rows;
    cfg = gpt_transformer_config(with_rows, tokenizer->vocab_size());
    say(fmt::format("> the checkpoint in --load pads the vocabulary to {} rows (saved at another tensor-parallel "
                    "size); this run keeps them (as --padded-vocab-size {} would)",
                    rows, rows));
  }
  const int64_t padded = cfg.padded_vocab_size();
  say(fmt::format(" > padded vocab (size: {}) with {} dummy tokens (new size: {})", tokenizer->vocab_size(),
                  padded - tokenizer->vocab_size(), padded));

  // --load of a Hugging Face folder: the flags must build its model (checked
  // before building ours, so a mismatch fails fast).
  const bool load_hf = a.load && transformer::is_hf_folder(*a.load);
  QK_CHECK_AS(ValueError, !(load_hf && pipelined), "--load of a Hugging Face folder (", *a.load,
              ") builds the unsplit model: load it at --pipeline-model-parallel-size 1, save a checkpoint and "
              "--load that at the pipeline size");
  if (load_hf) check_flags_match_hf_config(a, cfg, *a.load);

  // Megatron's _set_random_seed: seed (+ 100 x pipeline rank, which the
  // stages after the first take once their chunks are built from the
  // unsplit model's draws), the same on every data-parallel and
  // tensor-parallel rank, so the replicas start equal and the shards cut one
  // full initialisation (the per-rank dropout generator of tensor
  // parallelism is seeded from it).
  manual_seed(static_cast<uint64_t>(a.seed));
  const int tp_size = world.tp_size();
  // Under pipeline parallelism this rank's stage: its chunks behind one
  // module with the unsplit names (gpt_pretrain_pipeline.h).
  transformer::GPTModel gpt{nullptr};
  std::optional<GptPipelineStage> stage;
  if (pipelined) stage = build_gpt_pipeline_stage(a, cfg, world.pp_rank(), world.tp, world.ep);
  else
    gpt = transformer::GPTModel(cfg, transformer::GPTModelParallel{.tp = tp_size > 1 ? world.tp : nullptr, .ep = world.ep});
  nn::Module& model = pipelined ? *stage->model : static_cast<nn::Module&>(*gpt);
  // The MoE layers (none without --num-experts): aux-loss scale, expert bias, statistics.
  std::vector<nn::Module*> parts;
  if (pipelined)
    for (auto& ch : stage->chunks) parts.push_back(ch.get());
  else
    parts.push_back(gpt.get());
  GptMoeLayers moe(parts, cfg);
  for (const Tensor& p : model.parameters()) result.num_parameters += p.numel();
  say(fmt::format(" > number of parameters on (tensor, pipeline) model parallel rank (0, 0): {}",
                  result.num_parameters));
  if (pipelined) say("> pipeline layers: " + stage->split.format());
  // Its weights, before the optimizer copies them; then iteration 0 and a
  // fresh optimizer, as --finetune.
  if (load_hf) say(load_hf_weights_for_finetune(a, *gpt, *a.load));
  if (!device.is_cpu()) {
    model.to(device);  // before the optimizer takes the parameters
    say(fmt::format("> model, gradients, optimizer state and batches on {} ({})", device.str(),
                    backend(device.type).device_name(device.index)));
  }

  ModelParallel mp;
  mp.world = world.job;
  if (pipelined) {
    mp.tp = stage->tensor_parallel(world.tp.get());
    mp.pp = stage->pipeline_parallel(world.pp.get(), world.embedding.get());
  } else if (tp_size > 1) {
    mp.tp = tensor_parallel_of(*gpt, world.tp.get(), gpt->tensor_parallel_generator());
  }
  if (world.ep) {
    // Expert parallelism: the routed experts' gradients over the
    // expert-data-parallel ranks, their norm over the expert-parallel group,
    // checkpoints gathered by name.
    mp.ep.ep = world.ep.get();
    mp.ep.expert_dp = world.expert_dp.get();
    for (const auto& item : model.named_parameters())
      if (transformer::is_expert_parameter(item.key())) mp.ep.params.insert(item.key());
  }
  const std::unique_ptr<MixedPrecisionOptimizer> optimizer =
      pipelined ? build_gpt_stage_optimizer(a, *stage, world.dp.get(), mp.ep)
                : gpt_build_optimizer(a, *gpt, world.dp.get(), mp.ep);
  MixedPrecisionOptimizer& opt = *optimizer;
  if (mp.ep.active()) opt.set_expert_parallel(mp.ep);
  // Clipping and the inf check over the whole model, the partial gradients
  // (sequence-parallel norms, q/k norms) summed over the group; the tied
  // embedding's gradient over the first and last stage.
  if (mp.tp.active()) opt.set_tensor_parallel(mp.tp);
  if (pipelined) opt.set_pipeline_parallel(mp.pp);
  say(gpt_theoretical_memory(a, opt, world.dp_size()));
  if (lead)
    for (const auto& n : gpt_recompute_notes(a)) QK_INFO("{}", n);
  OptimizerParamScheduler sched(&opt.optimizer(), gpt_scheduler_options(a), opt.group_schedules());
  TrainerOptions to = gpt_trainer_options(a, lead ? result.output_dir : "");
  to.flops_per_sample = transformer::num_floating_point_operations(cfg, 1);
  if (load_hf) to.load.clear();
  to.args_json = megatron_args_to_json(a);
  to.curve_title = fmt::format("GPT {} layers, hidden {}, {} heads, sequence {}", cfg.num_layers, cfg.hidden_size,
                               cfg.num_attention_heads, cfg.seq_length);
  Trainer trainer(model, opt, sched, to, world.data_parallel(), mp);
  say_datetime("after model, optimizer, and learning rate scheduler are built");

  // ---- checkpoint
  int64_t resumed_at = -1;  // the loaded checkpoint's iteration
  if (a.load && !load_hf) {
    if (const auto loaded = trainer.load()) {
      resumed_at = trainer.progress().iteration;
      say(fmt::format("  successfully loaded checkpoint from {} [ t 1/{}, p 1/{} ] at iteration {}", loaded->where,
                      tp_size, world.pp_size(), trainer.progress().iteration));
    } else {
      QK_CHECK(!a.exit_on_missing_checkpoint, "--exit-on-missing-checkpoint: no checkpoint in --load ", *a.load);
      say(fmt::format("WARNING: could not find a checkpoint in {}\n    will not load any checkpoints and will start "
                      "from random",
                      *a.load));
    }
  }

  // ---- data: rank 0 builds (and caches) the indices first, as Megatron does
  say("> building train, validation, and test datasets ...");
  GptDatasets data;
  if (lead) data = build_gpt_datasets(a, *tokenizer);
  if (world.job) world.job->barrier();
  if (!lead) data = build_gpt_datasets(a, *tokenizer);
  say(data.description);
  const GptBatchOptions bo = gpt_batch_options(a, *tokenizer);
  const int64_t micro = a.micro_batch_size.value_or(1);
  GptBatchIterator train_it(data.train, trainer.progress().consumed_train_samples, micro, world.dp_rank(), world.dp_size(), bo,
                            "train");
  const bool do_valid = data.valid && a.eval_iters > 0;
  const bool do_test = data.test && a.eval_iters > 0;
  std::optional<GptBatchIterator> valid_it;
  if (do_valid)
    valid_it.emplace(data.valid, trainer.progress().consumed_valid_samples, micro, world.dp_rank(), world.dp_size(), bo,
                     "validation");
  say_datetime("after dataloaders are built");

  if (o.measure_gemm_peak) {
    const GemmPeak peak = measure_peak(world, cfg.params_dtype, device);
    result.gemm_peak_flops = peak.flops;
    say(fmt::format("> GEMM peak: {:.4f} TFLOP/s per rank ({}^3 {} matmul on {}, fastest of 5+ calls, all {} ranks at "
                    "once; what MFU is measured against)",
                    peak.flops / 1e12, peak.n, dtype_name(peak.dtype), device.str(), world.size));
  }

  // ---- the loop
  auto check_loss = [&](double value) {
    // --check-for-nan-in-loss-and-grad (Megatron's default): a fatal error.
    QK_CHECK_AS(ValueError, !a.check_for_nan_in_loss_and_grad || std::isfinite(value), "Rank ", world.rank,
                ": found ", std::isnan(value) ? "NaN" : "Inf", " in local forward loss calculation at iteration ",
                trainer.progress().iteration + 1, " (--no-check-for-nan-in-loss-and-grad skips such iterations)");
  };
  auto forward = [&](GptBatchIterator& it) {
    const GptBatch b = it.next();
    const double tokens = mask_sum(b.loss_mask);  // the host's copy, before the batch moves
    auto on = [&](const Tensor& t) { return t.defined() && !device.is_cpu() ? t.to(device) : t; };
    Tensor loss = gpt->forward(on(b.tokens), on(b.position_ids), on(b.labels), on(b.loss_mask));
    const double value = loss.item<double>();
    check_loss(value);
    if (gpt->is_training()) moe.record();
    return MicroBatchOutput{loss, {{"lm loss", {value * tokens, tokens}}}};
  };
  // --profile: each rank's spans of the first profiled steps, one Chrome
  // trace at the end (trace.json in the output folder).
  parallel::Timeline timeline(world.rank, fmt::format("rank {} (pp {}, tp {}, dp {})", world.rank, world.pp_rank(),
                                                      world.tp ? world.tp->rank() : 0, world.dp_rank()));
  TrainerCallbacks cb;
  std::unique_ptr<GptPipelineSteps> pipeline;
  if (pipelined) {
    // The schedule replaces StepRunner's micro-batch loop (1F1B, or
    // interleaved over virtual stages); evaluation runs it forward only.
    GptPipelineOptions po;
    po.pp = world.pp.get();
    po.dp = world.dp.get();
    po.num_microbatches = trainer.num_microbatches();
    po.micro_batch_size = micro;
    po.seq_length = cfg.seq_length / (cfg.sequence_parallel ? tp_size : 1);
    po.hidden_size = cfg.hidden_size;
    po.dtype = cfg.params_dtype;
    po.device = device;
    po.autocast = to.autocast;
    po.overlap_p2p_comm = a.overlap_p2p_comm && stage->split.interleaved();
    po.check_loss = check_loss;
    if (!moe.empty()) po.after_training_forward = [&] { moe.record(); };
    po.timeline = a.profile ? &timeline : nullptr;
    pipeline = std::make_unique<GptPipelineSteps>(*stage, opt, po);
    pipeline->set_scheduler(&sched, to.global_batch_size);
    // The traffic line's "pp": the activations and gradients sent and
    // received between stages; "embedding": the tied gradient's sum.
    for (dist::ProcessGroup* g : pipeline->p2p_groups()) trainer.meter_traffic("pp", g);
    if (!mp.pp.tied_parameter.empty()) trainer.meter_traffic("embedding", world.embedding.get());
    CustomSteps steps;
    steps.train = [&] { return pipeline->step(train_it); };
    if (do_valid) steps.evaluate = [&](int64_t n) { return pipeline->forward_only(*valid_it, n); };
    trainer.set_custom_steps(std::move(steps));
  } else {
    cb.train_step = [&](int64_t) { return forward(train_it); };
    if (do_valid) cb.valid_step = [&](int64_t) { return forward(*valid_it); };
  }
  // Megatron's MoEAuxLossAutoScaler.set_loss_scale(loss_scale / num_microbatches):
  // the auxiliary losses' gradients as the main loss's, set for each step.
  auto set_aux_loss_scale = [&] {
    moe.set_aux_loss_scale(static_cast<double>(opt.loss_scale()) / static_cast<double>(trainer.num_microbatches()));
  };
  set_aux_loss_scale();
  cb.on_step = [&](int64_t iteration, const StepStats& st) {
    // Aux-loss-free balancing after the step, on the tokens of every
    // data-parallel rank (the expert-parallel ones included).
    moe.update_expert_bias(world.dp.get());
    set_aux_loss_scale();
    // Without a loss scaler a skipped step means non-finite gradients, which
    // Megatron's DDP reports as an error while the check is on.
    QK_CHECK_AS(ValueError, !(st.skipped && !opt.scaler() && a.check_for_nan_in_loss_and_grad), "Rank ",
                world.rank, ": found NaN or Inf in the gradients at iteration ", iteration,
                " (--no-check-for-nan-in-loss-and-grad skips such iterations)");
    fault::point("step", iteration);
  };
  // The interval's MoE statistics (collective over dp and pp): the mean
  // losses join the iteration line and metrics.jsonl (Megatron's
  // track_moe_metrics), the per-layer ones the lines below it.
  std::vector<MoeLayerLog> moe_log;
  if (!moe.empty() && lead) GptMoeLayers::start_jsonl(result.output_dir + "/moe_metrics.jsonl", resumed_at);
  if (!moe.empty())
    cb.log_losses = [&](int64_t) {
      moe_log = moe.take_interval(world.dp.get(), world.pp.get(), world.ep_size());
      return moe_line_losses(moe_log, cfg);
    };
  bool memory_reported = false;
  cb.on_log = [&](const LogStats& s) {
    IterationLineExtras x;
    x.log_throughput = a.log_throughput;
    if (a.log_params_norm) x.params_norm = params_norm(opt);  // collective: before the other ranks leave
    if (!lead) return;
    print(megatron_iteration_line(s, x));
    if (a.moe_per_layer_logging)
      for (const MoeLayerLog& l : moe_log) print(moe_layer_line(l));
    if (!moe_log.empty()) {
      moe.add_heatmap_column(s.iteration, moe_log);
      GptMoeLayers::append_jsonl(result.output_dir + "/moe_metrics.jsonl", s.iteration, moe_log);
    }
    print(throughput_line(s, world.size, result.gemm_peak_flops));
    if (!s.comm.empty()) print(traffic_line(s.comm));
    if (pipeline && a.profile) {
      const auto [sum, steps] = pipeline->take_bubble();
      if (steps > 0)
        print(fmt::format(" [qk] pipeline bubble: {:.1f}% measured over {} profiled step(s), {:.1f}% in theory "
                          "((p-1)/(m+p-1)/v)",
                          100.0 * sum / static_cast<double>(steps), steps,
                          100.0 * parallel::theoretical_bubble_fraction(world.pp_size(), trainer.num_microbatches(),
                                                                        stage->split.virtual_pipeline_size())));
    }
    if (!memory_reported) print(gpt_memory_report(opt, s.iteration, world.rank));  // Megatron's report_memory
    memory_reported = true;
  };
  cb.on_eval = [&](const EvalStats& e) {
    say(megatron_validation_block(fmt::format("iteration {}", e.iteration), e.metrics));
  };
  cb.on_save = [&](const CheckpointInfo& c) {
    print(fmt::format("  successfully saved checkpoint from iteration {:7d} to {} [ t 1/{}, p 1/{} ]",
                      trainer.progress().iteration, c.path, tp_size, world.pp_size()));
  };
  cb.user_state = [&] {
    return nlohmann::json{{"format", kRunFormat},
                          {"tokenizer_vocab_size", tokenizer->vocab_size()},
                          {"padded_vocab_size", padded},
                          {"model", cfg.summary()}}
        .dump();
  };

  say("training ...");
  reset_peak_memory(device);  // "max allocated" in the memory report: training's high-water mark
  result.train = trainer.train(cb);
  if (lead && !moe.empty()) {
    const std::string heatmap = result.output_dir + "/moe_expert_load.png";
    moe.write_heatmap(heatmap);
    say(fmt::format("> expert load per MoE layer and logged iteration (share of routed tokens): {}", heatmap));
  }
  if (pipeline && a.profile) {
    // Every rank's timeline to rank 0 (collective over the job), one trace.
    const std::vector<parallel::Timeline> all = parallel::gather_timelines(timeline, *world.job);
    if (lead) {
      const std::string path = result.output_dir + "/trace.json";
      parallel::write_chrome_trace(path, all);
      say(fmt::format("> --profile: the timeline of {} step(s) of every rank is in {} (chrome://tracing, "
                      "ui.perfetto.dev)",
                      pipeline->profiled_steps(), path));
    }
  }
  switch (result.train.exit_reason) {
    case ExitReason::signal: say_datetime("exiting program after receiving SIGTERM."); return result;
    case ExitReason::exit_interval:
      say_datetime(fmt::format("exiting program at iteration {}", result.train.progress.iteration));
      return result;
    case ExitReason::exit_duration:
      say_datetime(fmt::format("exiting program after {} minutes", a.exit_duration_in_mins.value_or(0)));
      return result;
    case ExitReason::finished: break;
  }
  say_datetime("after training is done");

  // ---- Megatron's final evaluation: validation continues where it was, test from its start
  const int64_t iteration = result.train.progress.iteration;
  if (do_valid) {
    result.final_valid = trainer.evaluate(cb.valid_step);  // the pipeline's forward-only steps when pipelined
    say(megatron_validation_block(fmt::format("iteration {} on validation set", iteration),
                                  result.final_valid->metrics));
  }
  if (do_test) {
    GptBatchIterator test_it(data.test, 0, micro, world.dp_rank(), world.dp_size(), bo, "test");
    EvalStats e;
    e.iteration = iteration;
    model.eval();
    const int64_t n = a.eval_iters * trainer.num_microbatches();
    e.metrics = pipelined ? pipeline->forward_only(test_it, n)
                          : trainer.runner().forward_only([&](int64_t) { return forward(test_it); }, n);
    model.train();
    result.final_test = e;
    say(megatron_validation_block(fmt::format("iteration {} on test set", iteration), e.metrics));
  }
  return result;
}

}  // namespace qk::train
