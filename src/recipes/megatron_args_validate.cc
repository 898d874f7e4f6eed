// Megatron's validate_args (megatron/training/arguments.py) and the checks its
// TransformerConfig, microbatch calculator, tokenizer builder and LR scheduler
// make later, done up front: the defaults Megatron derives are filled in, and a
// broken rule is a ValueError naming the flags and values involved.
#include <cmath>
#include <limits>

#include "megatron_flag_table.h"
#include "moe_flags.h"
#include "qk/base/error.h"
#include "qk/base/log.h"
#include "qk/data/tokenizer.h"

namespace qk::recipes {

namespace {

void positive(int64_t v, const char* flag) { QK_CHECK(v > 0, flag, " must be positive, got ", v); }
void positive(const std::optional<int64_t>& v, const char* flag) {
  if (v) positive(*v, flag);
}
void probability(double p, const char* flag) {
  QK_CHECK(p >= 0 && p <= 1, flag, " must be a probability in [0, 1], got ", p);
}
void non_negative(double v, const char* flag) {
  QK_CHECK(std::isfinite(v) && v >= 0, flag, " must be a finite number >= 0, got ", v);
}

void validate_parallel_layout(MegatronArgs& a, const MegatronArgsOptions& o) {
  QK_CHECK(o.world_size >= 1, "world size must be >= 1, got ", o.world_size);
  a.rank = o.rank;
  a.world_size = o.world_size;
  positive(a.tensor_model_parallel_size, "--tensor-model-parallel-size");
  positive(a.pipeline_model_parallel_size, "--pipeline-model-parallel-size");
  positive(a.context_parallel_size, "--context-parallel-size");
  positive(a.expert_model_parallel_size, "--expert-model-parallel-size");
  const int64_t model = a.tensor_model_parallel_size * a.pipeline_model_parallel_size * a.context_parallel_size;
  QK_CHECK_AS(WorldSizeError, a.world_size % model == 0, "world size (", a.world_size,
           ") is not divisible by --tensor-model-parallel-size (", a.tensor_model_parallel_size,
           ") x --pipeline-model-parallel-size (", a.pipeline_model_parallel_size, ") x --context-parallel-size (",
           a.context_parallel_size, ") = ", model);
  a.data_parallel_size = a.world_size / model;
  if (!a.expert_tensor_parallel_size) a.expert_tensor_parallel_size = a.tensor_model_parallel_size;
}

void validate_batch(MegatronArgs& a) {
  QK_CHECK(a.micro_batch_size.has_value(), "--micro-batch-size is required");
  positive(*a.micro_batch_size, "--micro-batch-size");
  if (!a.global_batch_size) a.global_batch_size = *a.micro_batch_size * a.data_parallel_size;
  positive(*a.global_batch_size, "--global-batch-size");
  const int64_t per_step = *a.micro_batch_size * a.data_parallel_size;
  if (*a.global_batch_size % per_step != 0) {
    const std::string why = ::qk::detail::str_cat(
        "--global-batch-size (", *a.global_batch_size, ") must be divisible by --micro-batch-size (",
        *a.micro_batch_size, ") x data-parallel size (", a.data_parallel_size, ") = ", per_step,
        "; the data-parallel size is the world size (", a.world_size,
        ") / (tensor x pipeline x context parallel sizes)");
    // Divisible by the micro-batch but not by the data-parallel ranks: this
    // world size is what does not fit (qk run then ends the job).
    if (*a.global_batch_size % *a.micro_batch_size == 0) QK_THROW(WorldSizeError, why);
    QK_THROW(ValueError, why);
  }
  if (a.rampup_batch_size) {
    QK_CHECK(a.rampup_batch_size->size() == 3,
             "--rampup-batch-size expects 3 values: <start batch size> <increment> <ramp-up samples>, got ",
             a.rampup_batch_size->size());
  }
}

void validate_pipeline(MegatronArgs& a) {
  QK_CHECK(a.num_layers.has_value(), "--num-layers is required");
  positive(*a.num_layers, "--num-layers");
  QK_CHECK(!(a.num_layers_per_virtual_pipeline_stage && a.num_virtual_stages_per_pipeline_rank),
           "give only one of --num-layers-per-virtual-pipeline-stage and --num-virtual-stages-per-pipeline-rank");
  const int64_t pp = a.pipeline_model_parallel_size;
  // Megatron's standalone embedding / loss slots: the split counts them as layers.
  const int64_t slots = *a.num_layers + (a.account_for_embedding_in_pipeline_split ? 1 : 0) +
                        (a.account_for_loss_in_pipeline_split ? 1 : 0);
  const bool accounted = slots != *a.num_layers;
  if (accounted) {
    QK_CHECK(!a.decoder_first_pipeline_num_layers && !a.decoder_last_pipeline_num_layers,
             "--account-for-embedding/loss-in-pipeline-split do not go with --decoder-first/last-pipeline-num-layers");
    QK_CHECK(slots % pp == 0, "--num-layers (", *a.num_layers, ") plus the embedding and loss slots (",
             slots - *a.num_layers, ") must be divisible by --pipeline-model-parallel-size (", pp, ")");
  }
  a.virtual_pipeline_model_parallel_size.reset();
  if (a.num_layers_per_virtual_pipeline_stage || a.num_virtual_stages_per_pipeline_rank) {
    if (a.num_layers_per_virtual_pipeline_stage) {
      positive(*a.num_layers_per_virtual_pipeline_stage, "--num-layers-per-virtual-pipeline-stage");
      QK_CHECK(!a.decoder_first_pipeline_num_layers && !a.decoder_last_pipeline_num_layers,
               "uneven pipeline stages (--decoder-first/last-pipeline-num-layers) need "
               "--num-virtual-stages-per-pipeline-rank, not --num-layers-per-virtual-pipeline-stage");
      QK_CHECK(slots % pp == 0, "--num-layers (", *a.num_layers,
               ") must be divisible by --pipeline-model-parallel-size (", pp, ")");
      const int64_t per_stage = slots / pp;
      QK_CHECK(per_stage % *a.num_layers_per_virtual_pipeline_stage == 0, "layers per pipeline stage (",
               per_stage, " = --num-layers ", *a.num_layers, " / --pipeline-model-parallel-size ", pp,
               ") must be divisible by --num-layers-per-virtual-pipeline-stage (",
               *a.num_layers_per_virtual_pipeline_stage, ")");
      a.virtual_pipeline_model_parallel_size = per_stage / *a.num_layers_per_virtual_pipeline_stage;
    } else {
      positive(*a.num_virtual_stages_per_pipeline_rank, "--num-virtual-stages-per-pipeline-rank");
      a.virtual_pipeline_model_parallel_size = a.num_virtual_stages_per_pipeline_rank;
    }
    if (a.virtual_pipeline_model_parallel_size == 1) a.virtual_pipeline_model_parallel_size.reset();
  } else if (!a.decoder_first_pipeline_num_layers && !a.decoder_last_pipeline_num_layers && !accounted) {
    QK_CHECK(*a.num_layers % pp == 0, "--num-layers (", *a.num_layers,
             ") must be divisible by --pipeline-model-parallel-size (", pp, ")");
  }
  if (a.virtual_pipeline_model_parallel_size) {
    QK_CHECK(pp > (a.overlap_p2p_comm ? 1 : 2), "the interleaved schedule (",
             *a.virtual_pipeline_model_parallel_size,
             " virtual stages per rank) needs --pipeline-model-parallel-size > ", a.overlap_p2p_comm ? 1 : 2,
             " (got ", pp, ")", a.overlap_p2p_comm ? "" : " with --no-overlap-p2p-communication");
  } else {
    a.overlap_p2p_comm = false;  // Megatron: no p2p overlap without the interleaved schedule
  }
  positive(a.ddp_bucket_size, "--ddp-bucket-size");
  if (a.overlap_param_gather) {
    QK_CHECK(a.use_distributed_optimizer, "--overlap-param-gather needs --use-distributed-optimizer");
    QK_CHECK(a.overlap_grad_reduce, "--overlap-param-gather needs --overlap-grad-reduce");
  }
}

void validate_precision(MegatronArgs& a) {
  QK_CHECK(!(a.fp16 && a.bf16), "--fp16 and --bf16 cannot both be given");
  a.params_dtype = "torch.float32";
  if (a.fp16) {
    a.params_dtype = "torch.float16";
    // Dynamic loss scaling treats NaN gradients as overflow, so Megatron stops checking.
    if (!a.loss_scale) a.check_for_nan_in_loss_and_grad = false;
  }
  if (a.bf16) {
    a.params_dtype = "torch.bfloat16";
    a.accumulate_allreduce_grads_in_fp32 = true;  // Megatron: bf16 reduces gradients in fp32
  }
  if (a.loss_scale) QK_CHECK(*a.loss_scale > 0, "--loss-scale must be > 0, got ", *a.loss_scale);
  QK_CHECK(a.initial_loss_scale > 0, "--initial-loss-scale must be > 0, got ", a.initial_loss_scale);
  QK_CHECK(a.min_loss_scale > 0, "--min-loss-scale must be > 0, got ", a.min_loss_scale);
  QK_CHECK(a.loss_scale_window > 0, "--loss-scale-window must be > 0, got ", a.loss_scale_window);
  positive(a.hysteresis, "--hysteresis");
  QK_CHECK(!a.fp16_lm_cross_entropy || a.fp16, "--fp16-lm-cross-entropy needs --fp16");
  QK_CHECK(!a.fp32_residual_connection || a.fp16 || a.bf16, "--fp32-residual-connection needs --fp16 or --bf16");
  QK_CHECK(!a.moe_grouped_gemm || a.bf16, "--moe-grouped-gemm needs --bf16 (Megatron's grouped GEMM is bf16 only)");
  if (a.apply_query_key_layer_scaling) a.attention_softmax_in_fp32 = true;
}

// Megatron's iteration- vs sample-based rules, and its LR scheduler's assertions.
void validate_schedule(MegatronArgs& a, const MegatronArgsOptions& o) {
  if (!a.dataloader_type) a.dataloader_type = "single";
  if (a.train_iters && *a.train_iters) {
    QK_CHECK(!a.train_samples, "--train-iters and --train-samples cannot both be given");
    QK_CHECK(!a.lr_decay_samples, "--lr-decay-samples goes with --train-samples, not --train-iters");
    QK_CHECK(a.lr_warmup_samples == 0, "--lr-warmup-samples goes with --train-samples, not --train-iters");
    QK_CHECK(!a.rampup_batch_size, "--rampup-batch-size goes with --train-samples, not --train-iters");
    QK_CHECK(!a.lr_warmup_fraction || a.lr_warmup_iters == 0,
             "give only one of --lr-warmup-fraction and --lr-warmup-iters");
  }
  if (a.train_samples && *a.train_samples) {
    QK_CHECK(!a.lr_decay_iters, "--lr-decay-iters goes with --train-iters, not --train-samples");
    QK_CHECK(a.lr_warmup_iters == 0, "--lr-warmup-iters goes with --train-iters, not --train-samples");
    QK_CHECK(!a.lr_warmup_fraction || a.lr_warmup_samples == 0,
             "give only one of --lr-warmup-fraction and --lr-warmup-samples");
  }
  positive(a.train_iters, "--train-iters");
  positive(a.train_samples, "--train-samples");
  if (o.require_training)
    QK_CHECK(a.train_iters || a.train_samples, "give --train-iters or --train-samples (how long to train)");

  if (o.require_training) QK_CHECK(a.lr.has_value(), "--lr is required");
  if (a.lr) {
    non_negative(*a.lr, "--lr");
    QK_CHECK(a.min_lr <= *a.lr, "--min-lr (", a.min_lr, ") must not exceed --lr (", *a.lr, ")");
  }
  non_negative(a.min_lr, "--min-lr");
  non_negative(a.lr_warmup_init, "--lr-warmup-init");
  QK_CHECK(a.lr_warmup_iters >= 0, "--lr-warmup-iters must be >= 0, got ", a.lr_warmup_iters);
  QK_CHECK(a.lr_warmup_samples >= 0, "--lr-warmup-samples must be >= 0, got ", a.lr_warmup_samples);
  if (a.lr_warmup_fraction) probability(*a.lr_warmup_fraction, "--lr-warmup-fraction");
  positive(a.lr_decay_iters, "--lr-decay-iters");
  positive(a.lr_decay_samples, "--lr-decay-samples");

  // OptimizerParamScheduler: 0 <= warmup steps < decay steps; WSD needs its annealing length.
  if (a.train_iters && *a.train_iters) {
    const int64_t decay = a.lr_decay_iters.value_or(*a.train_iters);
    const char* decay_flag = a.lr_decay_iters ? "--lr-decay-iters" : "--train-iters";
    if (!a.lr_warmup_fraction)
      QK_CHECK(a.lr_warmup_iters < decay, "--lr-warmup-iters (", a.lr_warmup_iters,
               ") must be smaller than the LR decay length (", decay, " iterations, from ", decay_flag, ")");
    if (a.lr_decay_style == "WSD")
      QK_CHECK(a.lr_wsd_decay_iters.has_value(), "--lr-decay-style WSD needs --lr-wsd-decay-iters");
  } else if (a.train_samples && *a.train_samples) {
    const int64_t decay = a.lr_decay_samples.value_or(*a.train_samples);
    const char* decay_flag = a.lr_decay_samples ? "--lr-decay-samples" : "--train-samples";
    if (!a.lr_warmup_fraction)
      QK_CHECK(a.lr_warmup_samples < decay, "--lr-warmup-samples (", a.lr_warmup_samples,
               ") must be smaller than the LR decay length (", decay, " samples, from ", decay_flag, ")");
    if (a.lr_decay_style == "WSD")
      QK_CHECK(a.lr_wsd_decay_samples.has_value(), "--lr-decay-style WSD needs --lr-wsd-decay-samples");
  }

  if (a.weight_decay_incr_style == "constant") {
    QK_CHECK(!a.start_weight_decay && !a.end_weight_decay,
             "--start-weight-decay/--end-weight-decay need --weight-decay-incr-style linear or cosine "
             "(it is constant: use --weight-decay)");
    a.start_weight_decay = a.weight_decay;
    a.end_weight_decay = a.weight_decay;
  } else {
    QK_CHECK(a.start_weight_decay && a.end_weight_decay, "--weight-decay-incr-style ", a.weight_decay_incr_style,
             " needs --start-weight-decay and --end-weight-decay");
    non_negative(*a.start_weight_decay, "--start-weight-decay");
    non_negative(*a.end_weight_decay, "--end-weight-decay");
  }
  non_negative(a.weight_decay, "--weight-decay");
  non_negative(a.clip_grad, "--clip-grad");
  // torch.optim.Adam's own checks.
  QK_CHECK(a.adam_beta1 >= 0 && a.adam_beta1 < 1, "--adam-beta1 must be in [0, 1), got ", a.adam_beta1);
  QK_CHECK(a.adam_beta2 >= 0 && a.adam_beta2 < 1, "--adam-beta2 must be in [0, 1), got ", a.adam_beta2);
  non_negative(a.adam_eps, "--adam-eps");

  positive(a.log_interval, "--log-interval");
  positive(a.eval_interval, "--eval-interval");
  QK_CHECK(a.eval_iters >= 0, "--eval-iters must be >= 0, got ", a.eval_iters);
  positive(a.exit_interval, "--exit-interval");
  positive(a.exit_duration_in_mins, "--exit-duration-in-mins");
  positive(a.distributed_timeout_minutes, "--distributed-timeout-minutes");
  QK_CHECK(a.seed >= 0 && a.seed < (int64_t{1} << 32), "--seed must be in [0, 2^32) (numpy's seed range), got ",
           a.seed);
  if (a.save) {
    QK_CHECK(a.save_interval.has_value(), "--save ", *a.save, " needs --save-interval");
  }
  positive(a.save_interval, "--save-interval");
}

void validate_recompute(MegatronArgs& a) {
  if (a.recompute_activations) a.recompute_granularity = "selective";
  if (a.distribute_saved_activations) {
    QK_CHECK(a.tensor_model_parallel_size > 1, "--distribute-saved-activations needs --tensor-model-parallel-size > 1");
    QK_CHECK(a.recompute_granularity == "full", "--distribute-saved-activations needs --recompute-granularity full");
    QK_CHECK(a.recompute_method.has_value(), "--distribute-saved-activations needs --recompute-method");
  }
  if (a.recompute_granularity == "selective") {
    QK_CHECK(!a.recompute_method, "--recompute-method ", *a.recompute_method,
             " does not go with --recompute-granularity selective");
    // TransformerConfig.__post_init__: selective recomputes core attention in every layer.
    QK_CHECK(!a.recompute_num_layers, "--recompute-num-layers ", *a.recompute_num_layers,
             " does not go with --recompute-granularity selective");
  }
  if (a.recompute_granularity == "full") {
    QK_CHECK(a.recompute_method && a.recompute_num_layers,
             "--recompute-granularity full needs --recompute-method and --recompute-num-layers");
    positive(*a.recompute_num_layers, "--recompute-num-layers");
    const int64_t per_stage = *a.num_layers / a.pipeline_model_parallel_size;
    QK_CHECK(*a.recompute_num_layers <= per_stage, "--recompute-num-layers (", *a.recompute_num_layers,
             ") exceeds the layers per pipeline stage (", per_stage, ")");
  } else if (a.recompute_method) {
    QK_CHECK(false, "--recompute-method ", *a.recompute_method, " needs --recompute-granularity full");
  }
}

void validate_model(MegatronArgs& a) {
  QK_CHECK(a.hidden_size.has_value(), "--hidden-size is required");
  positive(*a.hidden_size, "--hidden-size");
  QK_CHECK(a.num_attention_heads.has_value(), "--num-attention-heads is required");
  positive(*a.num_attention_heads, "--num-attention-heads");
  QK_CHECK(a.max_position_embeddings.has_value(), "--max-position-embeddings is required");
  positive(*a.max_position_embeddings, "--max-position-embeddings");
  const int64_t h = *a.hidden_size, heads = *a.num_attention_heads;

  const bool ffn_default = !a.ffn_hidden_size;
  if (ffn_default) {
    // Megatron's SwiGLU rule keeps the parameter count near the 4h MLP, a multiple of 64.
    a.ffn_hidden_size = a.swiglu ? static_cast<int64_t>((4.0 * static_cast<double>(h) * 2 / 3) / 64) * 64 : 4 * h;
  }
  QK_CHECK(*a.ffn_hidden_size > 0, "--ffn-hidden-size must be positive, got ", *a.ffn_hidden_size,
           a.swiglu ? " (the --swiglu default int(4*h*2/3/64)*64 is 0 for --hidden-size < 24: give it)" : "");
  if (!a.kv_channels) {
    QK_CHECK(h % heads == 0, "--hidden-size (", h, ") must be divisible by --num-attention-heads (", heads,
             ") unless --kv-channels is given");
    a.kv_channels = h / heads;
  }
  positive(*a.kv_channels, "--kv-channels");
  positive(a.num_query_groups, "--num-query-groups");
  const int64_t groups = query_groups(a);
  QK_CHECK(heads % groups == 0, "--num-attention-heads (", heads, ") must be divisible by --num-query-groups (",
           groups, ")");
  const int64_t tp = a.tensor_model_parallel_size;
  QK_CHECK(heads % tp == 0, "--num-attention-heads (", heads, ") must be divisible by --tensor-model-parallel-size (",
           tp, ")");
  QK_CHECK(groups % tp == 0, "--num-query-groups (", groups, ") must be divisible by --tensor-model-parallel-size (",
           tp, ")");
  QK_CHECK(*a.ffn_hidden_size % tp == 0, "--ffn-hidden-size (", *a.ffn_hidden_size,
           ") must be divisible by --tensor-model-parallel-size (", tp, ")",
           ffn_default ? " (the default from --hidden-size; give --ffn-hidden-size)" : "");

  QK_CHECK(a.seq_length.has_value(), "--seq-length is required");
  positive(*a.seq_length, "--seq-length");
  if (a.context_parallel_size > 1)
    QK_CHECK(*a.seq_length % (2 * a.context_parallel_size) == 0, "--seq-length (", *a.seq_length,
             ") must be a multiple of 2 x --context-parallel-size (", a.context_parallel_size, ")");
  // Megatron checks this whatever the position embedding (RoPE tables are sized by it too).
  QK_CHECK(*a.max_position_embeddings >= *a.seq_length, "--max-position-embeddings (", *a.max_position_embeddings,
           ") must be >= --seq-length (", *a.seq_length, ")");

  // Megatron turns sequence parallelism off at tensor size 1 (the status
  // check notes it when the flag was given).
  if (a.tensor_model_parallel_size == 1) a.sequence_parallel = false;
  QK_CHECK(!a.sequence_parallel || *a.seq_length % a.tensor_model_parallel_size == 0, "--seq-length (",
           *a.seq_length, ") must be divisible by --tensor-model-parallel-size (", a.tensor_model_parallel_size,
           ") with --sequence-parallel: each rank holds an equal block of the sequence");
  QK_CHECK(!a.tp_comm_overlap || a.sequence_parallel, "--tp-comm-overlap needs --sequence-parallel");
  if (!a.add_bias_linear) a.bias_gelu_fusion = false;
  if (a.add_bias_linear) a.add_qkv_bias = true;

  if (a.use_rotary_position_embeddings) a.position_embedding_type = "rope";
  if (a.position_embedding_type != "rope") a.apply_rope_fusion = false;
  QK_CHECK(a.add_position_embedding || a.position_embedding_type == "rope",
           "--no-position-embedding is deprecated, use --position-embedding-type (Megatron accepts it only "
           "with --position-embedding-type rope; got ", a.position_embedding_type, ")");
  QK_CHECK(a.rotary_percent > 0 && a.rotary_percent <= 1, "--rotary-percent must be in (0, 1], got ",
           a.rotary_percent);
  positive(a.rotary_base, "--rotary-base");
  positive(a.rotary_seq_len_interpolation_factor, "--rotary-seq-len-interpolation-factor");
  non_negative(a.norm_epsilon, "--norm-epsilon");
  non_negative(a.init_method_std, "--init-method-std");
  probability(a.attention_dropout, "--attention-dropout");
  probability(a.hidden_dropout, "--hidden-dropout");
  positive(a.make_vocab_size_divisible_by, "--make-vocab-size-divisible-by");
  positive(a.vocab_size, "--vocab-size");
  positive(a.padded_vocab_size, "--padded-vocab-size");
}

void validate_moe(MegatronArgs& a) {
  if (a.num_experts == 0) a.num_experts.reset();  // Megatron: 0 means no MoE
  if (a.expert_model_parallel_size > 1) {
    QK_CHECK(a.num_experts.has_value(), "--expert-model-parallel-size ", a.expert_model_parallel_size,
             " needs --num-experts");
    QK_CHECK(!a.fp16, "expert parallelism does not support --fp16 (Megatron's rule)");
  }
  if (!a.num_experts) return;
  positive(*a.num_experts, "--num-experts");
  if (!a.moe_ffn_hidden_size) a.moe_ffn_hidden_size = a.ffn_hidden_size;
  // The MoE rules themselves are the model config's (one place:
  // TransformerConfig::validate_moe), checked on the flags' config here so a
  // bad combination stops the run before anything is read or built.
  transformer::TransformerConfig c;
  c.num_layers = *a.num_layers;
  c.hidden_size = a.hidden_size.value_or(0);
  c.ffn_hidden_size = a.ffn_hidden_size.value_or(0);
  set_moe_config(c, a);
  c.validate_moe();
}

void validate_data(MegatronArgs& a, const MegatronArgsOptions& o) {
  const bool per_split = a.train_data_path || a.valid_data_path || a.test_data_path;
  const int sources = (a.mock_data ? 1 : 0) + (a.data_path ? 1 : 0) + (per_split ? 1 : 0);
  QK_CHECK(sources <= 1, "give one data source: --mock-data, --data-path, or --train/valid/test-data-path");
  if (o.require_training)
    QK_CHECK(sources == 1, "no training data: give --data-path, --train-data-path or --mock-data");
  if (a.data_path) QK_CHECK(!a.data_path->empty(), "--data-path was given no prefixes");
  if (per_split) QK_CHECK(a.train_data_path || !o.require_training, "--valid/test-data-path need --train-data-path");
  if (a.data_path && !a.split) {
    if (o.rank == 0) QK_WARN("--data-path without --split: using Megatron's legacy default '969, 30, 1'");
    a.split = "969, 30, 1";
  }
  if (a.split) {
    // _parse_and_normalize_split: the numbers in the string, up to three, not all zero.
    std::vector<double> w;
    for (size_t p = 0; p < a.split->size();) {
      const size_t q = a.split->find_first_of(".0123456789", p);
      if (q == std::string::npos) break;
      size_t e = a.split->find_first_not_of(".0123456789", q);
      if (e == std::string::npos) e = a.split->size();
      char* end = nullptr;
      const std::string num = a.split->substr(q, e - q);
      w.push_back(std::strtod(num.c_str(), &end));
      QK_CHECK(end && *end == '\0', "--split '", *a.split, "': '", num, "' is not a number");
      p = e;
    }
    QK_CHECK(!w.empty() && w.size() <= 3, "--split '", *a.split,
             "' needs 1 to 3 proportions for train, valid, test, e.g. 949,50,1");
    QK_CHECK(w[0] + (w.size() > 1 ? w[1] : 0) + (w.size() > 2 ? w[2] : 0) > 0, "--split '", *a.split,
             "' proportions sum to 0");
  }
  positive(a.seq_length, "--seq-length");
  // Megatron's build_tokenizer asserts the files each type reads.
  if (a.tokenizer_type) {
    const std::string& t = *a.tokenizer_type;
    if (t == "GPT2BPETokenizer") {
      QK_CHECK(a.vocab_file && a.merge_file, "--tokenizer-type GPT2BPETokenizer needs --vocab-file and --merge-file");
    } else if (t == "HuggingFaceTokenizer" || t == "SentencePieceTokenizer" || t == "GPTSentencePieceTokenizer" ||
               t == "Llama2Tokenizer" || t == "TikTokenizer") {
      QK_CHECK(a.tokenizer_model.has_value(), "--tokenizer-type ", t, " needs --tokenizer-model");
    } else if (t == "NullTokenizer") {
      QK_CHECK(a.vocab_size.has_value(), "--tokenizer-type NullTokenizer needs --vocab-size");
    }
  }
}

// --enable-cuda-graph (--cuda-graph): what a recorded step cannot hold.
void validate_cuda_graph(const MegatronArgs& a) {
  if (!a.enable_cuda_graph) return;
  QK_CHECK(a.world_size == 1, "--enable-cuda-graph runs on one GPU: the collectives of ", a.world_size,
           " ranks are host-driven and cannot be recorded in a graph; run it with one rank");
  QK_CHECK(!a.num_experts, "--enable-cuda-graph does not run MoE layers (--num-experts): their routing sizes "
           "tokens per expert on the host each step");
  QK_CHECK(a.cuda_graph_warmup_steps >= 1, "--cuda-graph-warmup-steps must be >= 1, got ",
           a.cuda_graph_warmup_steps);
}

}  // namespace

int64_t query_groups(const MegatronArgs& a) {
  return a.group_query_attention ? a.num_query_groups : a.num_attention_heads.value_or(1);
}

int64_t padded_vocab_size(const MegatronArgs& a, int64_t tokenizer_vocab_size) {
  QK_CHECK(tokenizer_vocab_size > 0, "vocabulary size must be positive, got ", tokenizer_vocab_size);
  if (a.padded_vocab_size) {
    QK_CHECK(*a.padded_vocab_size >= tokenizer_vocab_size, "--padded-vocab-size (", *a.padded_vocab_size,
             ") is smaller than the tokenizer's vocabulary (", tokenizer_vocab_size, ")");
    return *a.padded_vocab_size;
  }
  return data::padded_vocab_size(tokenizer_vocab_size, a.make_vocab_size_divisible_by, a.tensor_model_parallel_size);
}

std::vector<int64_t> moe_layer_pattern(const MegatronArgs& a) {
  QK_CHECK(a.num_layers.has_value(), "--num-layers is required");
  if (!a.moe_layer_freq.pattern.empty()) {
    QK_CHECK(static_cast<int64_t>(a.moe_layer_freq.pattern.size()) == *a.num_layers, "--moe-layer-freq has ",
             a.moe_layer_freq.pattern.size(), " entries but --num-layers is ", *a.num_layers);
    return a.moe_layer_freq.pattern;
  }
  QK_CHECK(a.moe_layer_freq.every >= 1, "--moe-layer-freq must be >= 1, got ", a.moe_layer_freq.every);
  std::vector<int64_t> p(static_cast<size_t>(*a.num_layers));
  for (size_t i = 0; i < p.size(); ++i) p[i] = static_cast<int64_t>(i) % a.moe_layer_freq.every == 0 ? 1 : 0;
  return p;
}

void validate_megatron_args(MegatronArgs& a, const MegatronArgsOptions& o) {
  validate_parallel_layout(a, o);
  validate_batch(a);
  validate_pipeline(a);
  validate_precision(a);
  validate_schedule(a, o);
  validate_model(a);
  validate_recompute(a);
  validate_cuda_graph(a);
  validate_moe(a);
  validate_data(a, o);
}

}  // namespace qk::recipes
