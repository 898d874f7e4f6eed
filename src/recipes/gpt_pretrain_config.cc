// Megatron's arguments -> the model config, tokenizer, optimizer, schedule and
// trainer options of `qk pretrain-gpt` (core_transformer_config_from_args,
// build_tokenizer, get_megatron_optimizer, get_optimizer_param_scheduler).
#include <cmath>

#include "qk/base/error.h"
#include "moe_flags.h"
#include "qk/recipes/gpt_pretrain.h"

namespace qk::recipes {

void set_moe_config(transformer::TransformerConfig& c, const MegatronArgs& a) {
  c.expert_model_parallel_size = a.expert_model_parallel_size;
  if (!a.num_experts || *a.num_experts == 0) return;
  c.num_moe_experts = *a.num_experts;
  c.moe_layer_pattern = moe_layer_pattern(a);
  c.moe_ffn_hidden_size = a.moe_ffn_hidden_size.value_or(0);
  c.moe_shared_expert_intermediate_size = a.moe_shared_expert_intermediate_size.value_or(0);
  c.moe_shared_expert_overlap = a.moe_shared_expert_overlap;
  c.moe_grouped_gemm = a.moe_grouped_gemm;
  c.moe_router_topk = a.moe_router_topk;
  c.moe_router_score_function = transformer::parse_moe_score_function(a.moe_router_score_function);
  c.moe_router_pre_softmax = a.moe_router_pre_softmax;
  c.moe_router_num_groups = a.moe_router_num_groups.value_or(0);
  c.moe_router_group_topk = a.moe_router_group_topk.value_or(0);
  c.moe_router_topk_scaling_factor = a.moe_router_topk_scaling_factor;
  QK_CHECK(a.moe_router_load_balancing_type.size() == 1 && a.moe_aux_loss_coeff.size() == 1,
           "--moe-router-load-balancing-type and --moe-aux-loss-coeff take one value each in this build, got ",
           a.moe_router_load_balancing_type.size(), " and ", a.moe_aux_loss_coeff.size());
  c.moe_router_load_balancing_type = transformer::parse_moe_load_balancing(a.moe_router_load_balancing_type[0]);
  c.moe_aux_loss_coeff = a.moe_aux_loss_coeff[0];
  c.moe_z_loss_coeff = a.moe_z_loss_coeff.value_or(0.0);
  c.moe_input_jitter_eps = a.moe_input_jitter_eps.value_or(0.0);
  c.moe_device_level_aux_loss_coeff = a.moe_device_level_aux_loss_coeff.value_or(0.0);
  c.moe_comm_aux_loss_coeff = a.moe_comm_aux_loss_coeff.value_or(0.0);
  c.moe_router_enable_expert_bias = a.moe_router_enable_expert_bias;
  c.moe_router_bias_update_rate = a.moe_router_bias_update_rate;
  c.moe_per_layer_logging = a.moe_per_layer_logging;
  QK_CHECK(a.moe_token_dispatcher_type != "flex", "--moe-token-dispatcher-type flex (DeepEP) is not built; use "
           "allgather or alltoall");
  c.moe_token_dispatcher_type = transformer::parse_moe_token_dispatcher(a.moe_token_dispatcher_type);
  c.moe_permute_fusion = a.moe_permute_fusion;
  c.moe_expert_capacity_factor = a.moe_expert_capacity_factor;
  c.moe_pad_expert_input_to_capacity = a.moe_pad_expert_input_to_capacity;
  c.moe_token_drop_policy = transformer::parse_moe_token_drop_policy(a.moe_token_drop_policy);
  c.moe_device_level_capacity = a.moe_device_level_capacity;
}

namespace {

// MLATransformerConfig's fields from their flags.
void set_mla_config(transformer::TransformerConfig& c, const MegatronArgs& a) {
  if (!a.multi_latent_attention) return;
  c.multi_latent_attention = true;
  c.q_lora_rank = a.q_lora_rank.value_or(0);
  c.kv_lora_rank = a.kv_lora_rank;
  c.qk_head_dim = a.qk_head_dim;
  c.qk_pos_emb_head_dim = a.qk_pos_emb_head_dim;
  c.v_head_dim = a.v_head_dim;
  c.rotary_scaling_factor = a.rotary_scaling_factor;
  c.mscale = a.mscale;
  c.mscale_all_dim = a.mscale_all_dim;
}

}  // namespace

transformer::TransformerConfig gpt_transformer_config(const MegatronArgs& a, int64_t tokenizer_vocab_size) {
  QK_CHECK(a.num_layers && a.hidden_size && a.num_attention_heads && a.seq_length,
           "--num-layers, --hidden-size, --num-attention-heads and --seq-length are required");
  transformer::TransformerConfig c;
  c.num_layers = *a.num_layers;
  c.hidden_size = *a.hidden_size;
  c.num_attention_heads = *a.num_attention_heads;
  c.num_query_groups = query_groups(a);
  c.kv_channels = a.kv_channels.value_or(0);          // validate: hidden / heads
  c.ffn_hidden_size = a.ffn_hidden_size.value_or(0);  // validate: 4 x hidden or the SwiGLU rule
  c.hidden_dropout = a.hidden_dropout;
  c.attention_dropout = a.attention_dropout;
  c.recompute_granularity = transformer::parse_recompute_granularity(a.recompute_granularity.value_or(""));
  c.recompute_method = transformer::parse_recompute_method(a.recompute_method.value_or(""));
  c.recompute_num_layers = a.recompute_num_layers.value_or(0);
  c.apply_residual_connection_post_layernorm = a.apply_residual_connection_post_layernorm;
  c.layernorm_epsilon = a.norm_epsilon;
  c.layernorm_zero_centered_gamma = a.apply_layernorm_1p;
  c.add_bias_linear = a.add_bias_linear;
  // validate_args turns add_qkv_bias on with the linear biases; alone it is refused (not built).
  c.add_qkv_bias = a.add_qkv_bias && !a.add_bias_linear;
  QK_CHECK(!(a.swiglu && a.openai_gelu), "--openai-gelu and --swiglu: give one (the MLP is either GELU or SwiGLU)");
  if (a.swiglu) c.set_swiglu();
  if (a.openai_gelu) c.activation_func = transformer::Activation::openai_gelu;
  c.normalization = transformer::parse_normalization(a.normalization);
  c.qk_layernorm = a.qk_layernorm;
  c.init_method_std = a.init_method_std;
  c.apply_query_key_layer_scaling = a.apply_query_key_layer_scaling;
  // Megatron's default (masked_softmax_fusion) softmax kernel and its flash
  // path accumulate in fp32 whatever --attention-softmax-in-fp32 says; only
  // its unfused fallback (--no-masked-softmax-fusion) runs bf16/fp16 softmax.
  c.attention_softmax_in_fp32 = a.attention_softmax_in_fp32 || a.masked_softmax_fusion;
  c.use_flash_attn = a.use_flash_attn;
  c.seq_length = *a.seq_length;
  c.max_position_embeddings = a.max_position_embeddings.value_or(*a.seq_length);
  c.position_embedding_type = transformer::parse_position_embedding_type(a.position_embedding_type);
  c.rotary_base = static_cast<double>(a.rotary_base);
  c.rotary_percent = a.rotary_percent;
  if (a.rotary_seq_len_interpolation_factor)
    c.rotary_seq_len_interpolation_factor = static_cast<double>(*a.rotary_seq_len_interpolation_factor);
  c.vocab_size = tokenizer_vocab_size;
  c.make_vocab_size_divisible_by = a.make_vocab_size_divisible_by;
  c.share_embeddings_and_output_weights = !a.untie_embeddings_and_output_weights;
  c.params_dtype = a.bf16 ? DType::bf16 : a.fp16 ? DType::f16 : DType::f32;
  c.tensor_model_parallel_size = a.tensor_model_parallel_size;
  c.sequence_parallel = a.sequence_parallel;  // validate: off at tensor size 1
  if (a.padded_vocab_size) {
    // --padded-vocab-size: pad to exactly that many rows (a multiple of
    // want / tp times tp), which every tensor-parallel rank splits evenly.
    const int64_t want = padded_vocab_size(a, tokenizer_vocab_size), tp = a.tensor_model_parallel_size;
    QK_CHECK(want % tp == 0, "--padded-vocab-size (", want, ") must be divisible by --tensor-model-parallel-size (",
             tp, "): each rank holds an equal block of vocabulary rows");
    c.make_vocab_size_divisible_by = want / tp;
    QK_CHECK(transformer::vocab_size_with_padding(tokenizer_vocab_size, want / tp, tp) == want,
             "--padded-vocab-size ", want, " must be >= the tokenizer's ", tokenizer_vocab_size, " ids");
  }
  set_moe_config(c, a);
  set_mla_config(c, a);
  c.validate();
  return c;
}

std::unique_ptr<data::Tokenizer> build_tokenizer(const MegatronArgs& a) {
  QK_CHECK(a.tokenizer_type.has_value(),
           "--tokenizer-type is required (HuggingFaceTokenizer, GPT2BPETokenizer, SentencePieceTokenizer, or "
           "NullTokenizer with --vocab-size for pre-tokenised or --mock-data runs)");
  data::TokenizerOptions o;
  o.type = *a.tokenizer_type;
  o.model = a.tokenizer_model.value_or("");
  o.vocab_file = a.vocab_file.value_or("");
  o.merge_file = a.merge_file.value_or("");
  o.vocab_size = a.vocab_size.value_or(0);
  return data::load_tokenizer(o);
}

GptBatchOptions gpt_batch_options(const MegatronArgs& a, const data::Tokenizer& tokenizer) {
  // GPTDataset: _pad_token_id = tokenizer.pad, else _PAD_TOKEN_ID = -1.
  return {.eod = tokenizer.eod(), .pad = tokenizer.pad() >= 0 ? tokenizer.pad() : -1, .eod_mask_loss = a.eod_mask_loss};
}

optim::OptimizerFactory gpt_optimizer(const MegatronArgs& a) {
  const double lr = a.lr.value_or(0.0);
  if (a.optimizer == "sgd")
    return sgd(optim::SGDOptions(lr).momentum(a.sgd_momentum).weight_decay(a.weight_decay));
  QK_CHECK(a.optimizer == "adam", "--optimizer ", a.optimizer, " is not built; this build has adam and sgd");
  // Megatron's adam is Adam with decoupled weight decay (AdamW); the
  // scheduler sets each group's rate and decay every step.
  return adamw(
      optim::AdamWOptions(lr).betas({a.adam_beta1, a.adam_beta2}).eps(a.adam_eps).weight_decay(a.weight_decay));
}

std::unique_ptr<optim::LossScaler> gpt_loss_scaler(const MegatronArgs& a) {
  // get_megatron_optimizer: --loss-scale gives a constant scaler (fp16 or
  // bf16); --fp16 without it the dynamic one; bf16 and fp32 none.
  if (a.loss_scale && (a.fp16 || a.bf16))
    return std::make_unique<optim::ConstantLossScaler>(static_cast<float>(*a.loss_scale));
  if (!a.fp16) return nullptr;
  return std::make_unique<optim::DynamicLossScaler>(optim::DynamicLossScalerOptions{
      .initial_scale = static_cast<float>(a.initial_loss_scale),
      .min_scale = static_cast<float>(a.min_loss_scale),
      .growth_factor = 2.0f,
      .backoff_factor = 0.5f,
      .growth_interval = static_cast<int64_t>(a.loss_scale_window),
      .hysteresis = a.hysteresis});
}

optim::MixedPrecisionOptions gpt_mixed_precision_options(const MegatronArgs& a) {
  optim::MixedPrecisionOptions o;
  o.clip_grad = a.clip_grad;
  o.accumulate_allreduce_grads_in_fp32 = a.accumulate_allreduce_grads_in_fp32;
  o.log_num_zeros_in_grad = a.log_num_zeros_in_grad;
  o.skip_nonfinite = true;  // --check-for-nan-in-loss-and-grad turns a skip into an error (gpt_pretrain.cc)
  return o;
}

optim::ParamSchedulerOptions gpt_scheduler_options(const MegatronArgs& a) {
  optim::ParamSchedulerOptions o;
  o.init_lr = a.lr_warmup_init;
  o.max_lr = a.lr.value_or(0.0);
  o.min_lr = a.min_lr;
  o.lr_decay_style = a.lr_decay_style;
  o.lr_wsd_decay_style = a.lr_wsd_decay_style;
  o.start_wd = a.start_weight_decay.value_or(a.weight_decay);
  o.end_wd = a.end_weight_decay.value_or(a.weight_decay);
  o.wd_incr_style = a.weight_decay_incr_style;
  o.use_checkpoint_opt_param_scheduler = a.use_checkpoint_opt_param_scheduler;
  o.override_opt_param_scheduler = a.override_opt_param_scheduler;
  optim::TrainingSchedule t;
  t.train_iters = a.train_iters.value_or(0);
  t.train_samples = a.train_samples.value_or(0);
  t.global_batch_size = a.global_batch_size.value_or(0);
  t.lr_decay_iters = a.lr_decay_iters;
  t.lr_decay_samples = a.lr_decay_samples;
  t.lr_warmup_iters = a.lr_warmup_iters;
  t.lr_warmup_samples = a.lr_warmup_samples;
  t.lr_warmup_fraction = a.lr_warmup_fraction;
  t.lr_wsd_decay_iters = a.lr_wsd_decay_iters;
  t.lr_wsd_decay_samples = a.lr_wsd_decay_samples;
  optim::set_schedule_steps(o, t);
  return o;
}

train::TrainerOptions gpt_trainer_options(const MegatronArgs& a, const std::string& out_dir) {
  train::TrainerOptions o;
  o.train_iters = a.train_iters.value_or(0);
  o.train_samples = o.train_iters > 0 ? 0 : a.train_samples.value_or(0);
  o.global_batch_size = a.global_batch_size.value_or(0);
  o.micro_batch_size = a.micro_batch_size.value_or(0);
  o.log_interval = a.log_interval;
  o.eval_interval = a.eval_interval;
  o.eval_iters = a.eval_iters;
  o.save = a.save.value_or("");
  o.save_interval = a.save_interval.value_or(0);
  o.no_save_optim = a.no_save_optim;
  o.no_save_rng = a.no_save_rng;
  o.async_save = a.async_save;
  o.load = a.load.value_or("");
  o.no_load_optim = a.no_load_optim;
  o.no_load_rng = a.no_load_rng;
  o.finetune = a.finetune;
  o.exit_interval = a.exit_interval.value_or(0);
  o.exit_duration_in_mins = static_cast<double>(a.exit_duration_in_mins.value_or(0));
  o.exit_signal_handler = a.exit_signal_handler;
  if (!out_dir.empty()) o.metrics_file = out_dir + "/metrics.jsonl";
  o.tokens_per_sample = a.seq_length.value_or(0);
  return o;
}

}  // namespace qk::recipes
