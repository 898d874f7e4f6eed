// Megatron-LM's command-line arguments: the flags of megatron/training/arguments.py
// parsed with argparse's conventions into one struct, checked against what this
// build can do, and validated with Megatron's rules (validate_args).
//
//   qk::recipes::MegatronArgsOptions o;
//   o.world_size = 2;                                   // ranks of this run
//   auto p = qk::recipes::parse_megatron_args({"--num-layers", "6", "--hidden-size", "512",
//                                            "--num-attention-heads", "8", ...}, o);
//   if (p.help) { std::cout << qk::recipes::megatron_help(); return 0; }
//   for (auto& line : p.notes) QK_INFO("{}", line);     // one line per no-op flag
//   QK_INFO("{}", qk::recipes::format_megatron_args(p.args));
//   int64_t ffn = *p.args.ffn_hidden_size;              // 2048, Megatron's 4 x hidden default
//
// Field names are Megatron's argparse destinations (`--disable-bias-linear` sets
// add_bias_linear = false, `--use-mcore-models` sets deprecated_use_mcore_models);
// types and defaults are Megatron's (an argparse default of None is std::nullopt).
// Checked against NVIDIA/Megatron-LM main, megatron/training/arguments.py at commit
// 000c4ac24f61159c138b0975def722c65245983c (late 2025, Megatron-core 0.14/0.15 era).
//
// Each flag has a status in one table (src/recipes/megatron_args_status.cc):
//  - supported: does what Megatron does;
//  - not yet:   a feature this build lacks; giving the flag (or a value that needs the
//               feature, e.g. --pipeline-model-parallel-size 2) is an error naming it;
//               a supported flag may refuse some values the same way (--tokenizer-type
//               TikTokenizer);
//  - no-op:     accepted with one info line saying what it means here.
// An unknown flag is an error naming the closest known flag.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace qk::recipes {

// Megatron's moe_freq_type (--moe-layer-freq): an integer N (an MoE layer every N
// layers, starting with layer 0) or a Python list expression such as
// "([0]*1+[1]*26)" evaluated to one 0/1 entry per layer.
struct LayerFrequency {
  int64_t every = 1;
  std::vector<int64_t> pattern;  // non-empty when given as a list expression
  bool operator==(const LayerFrequency&) const = default;
};

// One field per Megatron-LM flag qianka knows, grouped as arguments.py groups them.
struct MegatronArgs {
  // ---- network size
  std::optional<int64_t> num_layers;
  std::optional<int64_t> hidden_size;
  std::optional<int64_t> ffn_hidden_size;  // validate: 4*hidden, or the SwiGLU rule
  std::optional<int64_t> num_attention_heads;
  std::string attention_backend = "auto";
  std::optional<int64_t> kv_channels;  // validate: hidden / heads
  bool group_query_attention = false;
  int64_t num_query_groups = 1;  // used only with group_query_attention (see query_groups())
  std::optional<int64_t> max_position_embeddings;
  std::string position_embedding_type = "learned_absolute";
  bool use_rotary_position_embeddings = false;
  int64_t rotary_base = 10000;
  double rotary_percent = 1.0;
  bool rotary_interleaved = false;
  std::optional<int64_t> rotary_seq_len_interpolation_factor;
  bool use_rope_scaling = false;
  double rope_scaling_factor = 8.0;
  bool add_position_embedding = true;  // --no-position-embedding
  int64_t make_vocab_size_divisible_by = 128;
  std::string normalization = "LayerNorm";
  double norm_epsilon = 1e-5;
  bool apply_layernorm_1p = false;
  bool apply_residual_connection_post_layernorm = false;
  bool swiglu = false;
  bool openai_gelu = false;  // GPT-2's tanh GELU (transformers' gelu_new)
  bool untie_embeddings_and_output_weights = false;
  bool multi_latent_attention = false;
  bool qk_layernorm = false;  // Megatron lists it in its 'vision' group

  // ---- regularization
  double attention_dropout = 0.1;
  double hidden_dropout = 0.1;
  double weight_decay = 0.01;
  std::optional<double> start_weight_decay;  // validate: = weight_decay when constant
  std::optional<double> end_weight_decay;
  std::string weight_decay_incr_style = "constant";
  double clip_grad = 1.0;
  double adam_beta1 = 0.9;
  double adam_beta2 = 0.999;
  double adam_eps = 1e-8;
  double sgd_momentum = 0.9;

  // ---- training
  std::optional<int64_t> micro_batch_size;
  std::optional<int64_t> global_batch_size;  // validate: micro x data-parallel
  std::optional<std::vector<std::string>> rampup_batch_size;
  bool recompute_activations = false;
  std::optional<std::string> recompute_granularity;
  bool check_for_nan_in_loss_and_grad = true;
  bool distribute_saved_activations = false;
  std::optional<std::string> recompute_method;
  std::optional<int64_t> recompute_num_layers;
  std::optional<std::vector<std::string>> recompute_modules;
  bool profile = false;
  bool use_cpu_initialization = false;  // Megatron: store_true with default None
  int64_t empty_unused_memory_level = 0;
  std::optional<int64_t> train_iters;
  std::optional<int64_t> train_samples;
  int64_t log_interval = 100;
  std::optional<int64_t> exit_interval;
  std::optional<int64_t> exit_duration_in_mins;
  bool exit_signal_handler = false;
  std::optional<std::string> tensorboard_dir;
  bool masked_softmax_fusion = true;
  bool bias_gelu_fusion = true;
  bool bias_swiglu_fusion = true;
  bool bias_dropout_fusion = true;
  bool apply_rope_fusion = true;  // --no-rope-fusion
  std::optional<std::string> rope_type;
  bool cross_entropy_loss_fusion = false;
  bool use_flash_attn = false;
  bool enable_cuda_graph = false;        // --enable-cuda-graph, or qianka's --cuda-graph
  int64_t cuda_graph_warmup_steps = 3;   // Megatron's default
  bool add_bias_linear = true;  // --disable-bias-linear
  bool add_qkv_bias = false;    // validate: true when add_bias_linear
  std::string optimizer = "adam";
  std::optional<std::string> dataloader_type;  // validate: "single"
  bool async_tensor_model_parallel_allreduce = true;
  bool no_persist_layer_norm = false;
  bool sequence_parallel = false;
  bool gradient_accumulation_fusion = true;
  bool deprecated_use_mcore_models = false;  // --use-mcore-models
  bool use_legacy_models = false;
  bool manual_gc = false;
  int64_t manual_gc_interval = 0;
  bool tp_comm_overlap = false;

  // ---- initialization
  int64_t seed = 1234;
  bool data_parallel_random_init = false;
  double init_method_std = 0.02;

  // ---- learning rate
  std::optional<double> lr;
  std::string lr_decay_style = "linear";
  std::string lr_wsd_decay_style = "exponential";
  std::optional<int64_t> lr_decay_iters;
  std::optional<int64_t> lr_decay_samples;
  std::optional<int64_t> lr_wsd_decay_samples;
  std::optional<int64_t> lr_wsd_decay_iters;
  std::optional<double> lr_warmup_fraction;
  int64_t lr_warmup_iters = 0;
  int64_t lr_warmup_samples = 0;
  double lr_warmup_init = 0.0;
  double min_lr = 0.0;
  bool override_opt_param_scheduler = false;
  bool use_checkpoint_opt_param_scheduler = false;

  // ---- checkpointing
  std::optional<std::string> save;
  std::optional<int64_t> save_interval;
  bool no_save_optim = false;  // Megatron: store_true with default None (falsy)
  bool no_save_rng = false;
  bool async_save = false;
  std::optional<std::string> load;
  bool no_load_optim = false;
  bool no_load_rng = false;
  bool finetune = false;
  bool exit_on_missing_checkpoint = false;
  std::string ckpt_format = "torch_dist";
  double wait_after_ckpt = 0.0;  // MT-Megatron fork flag, not upstream

  // ---- mixed precision
  bool fp16 = false;
  bool bf16 = false;
  std::optional<double> loss_scale;
  double initial_loss_scale = 4294967296.0;  // 2**32
  double min_loss_scale = 1.0;
  double loss_scale_window = 1000.0;
  int64_t hysteresis = 2;
  bool fp32_residual_connection = false;
  bool apply_query_key_layer_scaling = false;
  bool attention_softmax_in_fp32 = false;
  bool accumulate_allreduce_grads_in_fp32 = false;
  bool fp16_lm_cross_entropy = false;

  // ---- distributed
  int64_t tensor_model_parallel_size = 1;
  int64_t pipeline_model_parallel_size = 1;
  std::optional<int64_t> decoder_first_pipeline_num_layers;
  std::optional<int64_t> decoder_last_pipeline_num_layers;
  std::optional<int64_t> num_layers_per_virtual_pipeline_stage;
  std::optional<int64_t> num_virtual_stages_per_pipeline_rank;
  bool account_for_embedding_in_pipeline_split = false;  // the embedding takes a layer's slot
  bool account_for_loss_in_pipeline_split = false;       // the output layer and loss take a layer's slot
  bool overlap_p2p_comm = true;  // --no-overlap-p2p-communication
  std::string distributed_backend = "nccl";
  int64_t distributed_timeout_minutes = 10;
  bool overlap_grad_reduce = false;
  bool overlap_param_gather = false;
  bool use_distributed_optimizer = false;
  std::optional<int64_t> ddp_bucket_size;  // elements per gradient bucket
  int64_t context_parallel_size = 1;
  int64_t local_rank = 0;

  // ---- validation
  int64_t eval_iters = 100;
  int64_t eval_interval = 1000;

  // ---- data and dataloader
  std::optional<std::vector<std::string>> data_path;  // words, whitespace-split
  std::optional<std::string> split;  // validate: "969, 30, 1" when --data-path is given
  std::optional<std::vector<std::string>> train_data_path;
  std::optional<std::vector<std::string>> valid_data_path;
  std::optional<std::vector<std::string>> test_data_path;
  std::optional<std::string> data_cache_path;
  bool mmap_bin_files = true;
  bool mock_data = false;
  std::optional<int64_t> seq_length;
  int64_t num_workers = 2;
  bool reset_position_ids = false;
  bool reset_attention_mask = false;
  bool eod_mask_loss = false;
  bool create_attention_mask_in_dataloader = true;
  int64_t num_dataset_builder_threads = 1;

  // ---- tokenizer
  std::optional<int64_t> vocab_size;
  std::optional<int64_t> padded_vocab_size;
  std::optional<std::string> vocab_file;
  std::optional<std::string> merge_file;
  int64_t vocab_extra_ids = 0;
  std::optional<std::string> tokenizer_type;
  std::optional<std::string> tokenizer_model;

  // ---- moe
  int64_t expert_model_parallel_size = 1;
  std::optional<int64_t> expert_tensor_parallel_size;  // validate: = tensor size
  std::optional<int64_t> num_experts;
  LayerFrequency moe_layer_freq;
  std::optional<int64_t> moe_ffn_hidden_size;  // validate: = ffn_hidden_size with experts
  std::optional<int64_t> moe_shared_expert_intermediate_size;
  bool moe_shared_expert_overlap = false;
  bool moe_grouped_gemm = false;
  std::vector<std::string> moe_router_load_balancing_type = {"aux_loss"};
  std::string moe_router_score_function = "softmax";
  int64_t moe_router_topk = 2;
  bool moe_router_pre_softmax = false;
  std::optional<int64_t> moe_router_num_groups;
  std::optional<int64_t> moe_router_group_topk;
  std::optional<double> moe_router_topk_scaling_factor;
  bool moe_router_enable_expert_bias = false;
  double moe_router_bias_update_rate = 1e-3;
  std::vector<double> moe_aux_loss_coeff = {0.0};
  std::optional<double> moe_z_loss_coeff;
  std::optional<double> moe_input_jitter_eps;
  bool moe_per_layer_logging = false;
  std::string moe_token_dispatcher_type = "allgather";
  bool moe_permute_fusion = false;
  std::optional<double> moe_expert_capacity_factor;
  bool moe_pad_expert_input_to_capacity = false;
  std::string moe_token_drop_policy = "probs";
  // MT-Megatron / DeepSeek-V2 fork flags (not in upstream Megatron-LM).
  bool moe_device_level_capacity = false;
  std::optional<double> moe_device_level_aux_loss_coeff;
  std::optional<double> moe_comm_aux_loss_coeff;

  // ---- mla
  std::optional<int64_t> q_lora_rank;
  int64_t kv_lora_rank = 32;
  int64_t qk_head_dim = 128;
  int64_t qk_pos_emb_head_dim = 64;
  int64_t v_head_dim = 128;
  double rotary_scaling_factor = 1.0;
  double mscale = 1.0;
  double mscale_all_dim = 0.0;

  // ---- logging
  bool log_params_norm = false;
  bool log_num_zeros_in_grad = false;
  bool log_throughput = false;
  int64_t timing_log_level = 0;
  std::string timing_log_option = "minmax";
  int64_t tensorboard_log_interval = 1;
  int64_t tensorboard_queue_size = 1000;
  bool log_timers_to_tensorboard = false;
  bool log_loss_scale_to_tensorboard = true;
  bool log_validation_ppl_to_tensorboard = false;
  bool log_memory_to_tensorboard = false;
  bool log_world_size_to_tensorboard = false;
  std::string wandb_project;
  std::string wandb_entity;
  std::string wandb_exp_name;
  std::string wandb_save_dir;
  std::optional<int64_t> logging_level;

  // ---- Transformer-Engine
  std::optional<std::string> fp8;  // --fp8-format
  std::string fp8_recipe = "delayed";
  int64_t fp8_margin = 0;
  int64_t fp8_amax_history_len = 1;
  std::string fp8_amax_compute_algo = "most_recent";
  std::string transformer_impl = "transformer_engine";

  // ---- set by validate_megatron_args (as Megatron's validate_args sets them)
  int64_t rank = 0;
  int64_t world_size = 1;
  int64_t data_parallel_size = 1;
  std::optional<int64_t> virtual_pipeline_model_parallel_size;
  std::string params_dtype = "torch.float32";  // Megatron's printed value
};

// A normalised dataset blend: Megatron's get_blend_from_list over the words of
// --data-path (or --train/valid/test-data-path): "PREFIX", "W1 P1 W2 P2 ..." or
// "P1 P2 ...". The seed's "token-count path" lines are weight/prefix pairs (the
// counts are the weights). Weights are normalised to sum 1; they are empty when
// Megatron infers them from the datasets' sizes (a list of bare prefixes).
struct DataBlend {
  std::vector<std::string> prefixes;
  std::vector<double> weights;
  // Filled by check_data_blend_files: each prefix's sequence and token counts.
  std::vector<int64_t> num_sequences;
  std::vector<int64_t> num_tokens;
};

// Throws ValueError naming `flag` for an empty list, a negative weight, weights
// summing to 0, or a mix of numbers and non-numbers in the weight positions.
DataBlend parse_data_blend(const std::vector<std::string>& words, const std::string& flag = "--data-path");
// Opens every PREFIX.bin / PREFIX.idx (validated); an IoError names the flag, the
// prefix and what is wrong with which file.
void check_data_blend_files(DataBlend& blend, const std::string& flag = "--data-path");

struct MegatronArgsOptions {
  int64_t world_size = 1;  // ranks of the run (Megatron reads WORLD_SIZE)
  int64_t rank = 0;
  // Require what a training run needs: --micro-batch-size, --lr, --train-iters or
  // --train-samples, a data source (--data-path, --train-data-path or --mock-data).
  bool require_training = true;
  // Open each blend's .bin/.idx (check_data_blend_files).
  bool check_data_files = true;
  // Flags whose feature this build lacks but the caller models rather than
  // runs (`qk sim` plans runs with --context-parallel-size and
  // --tp-comm-overlap): accepted with a note instead of refused.
  std::vector<std::string> modelled_flags;
};

// A flag as the user gave it: primary spelling and its values as typed (joined by
// spaces; empty for a switch).
struct GivenFlag {
  std::string flag;
  std::string value;
};

struct ParsedMegatronArgs {
  MegatronArgs args;
  bool help = false;  // -h/--help was given: nothing else was checked
  // One info line per no-op flag given (log them with QK_INFO).
  std::vector<std::string> notes;
  // The flags the user gave, in order (a repeated flag once, where it was last given).
  std::vector<GivenFlag> given;
  // Parsed blends of --data-path / --train-data-path / --valid-data-path / --test-data-path.
  std::optional<DataBlend> data_blend, train_blend, valid_blend, test_blend;
};

// Everything in order: parse_megatron_flags, check_megatron_flag_status,
// validate_megatron_args, then the blends (and their files).
ParsedMegatronArgs parse_megatron_args(const std::vector<std::string>& argv,
                                       const MegatronArgsOptions& o = {});

// argparse's part only: the flags into fields (no status check, no validation).
// Throws ValueError for an unknown flag (naming the closest known one), a missing
// value, a value of the wrong type or outside the flag's choices.
ParsedMegatronArgs parse_megatron_flags(const std::vector<std::string>& argv);

// Refuses every given flag whose status is "not yet" (all of them in one error, one
// line each) and fills p.notes with one line per given no-op flag. A flag in
// `modelled` is accepted with a note (MegatronArgsOptions::modelled_flags).
void check_megatron_flag_status(ParsedMegatronArgs& p, const std::vector<std::string>& modelled = {});

// Megatron's validate_args: fills the defaults it derives (ffn_hidden_size,
// kv_channels, global_batch_size, data_parallel_size, split, start/end weight decay,
// ...) and throws ValueError naming the flags and values of the first broken rule.
void validate_megatron_args(MegatronArgs& a, const MegatronArgsOptions& o = {});

// Number of key/value head groups the model uses: num_query_groups with
// --group-query-attention, else one per attention head (Megatron's config rule).
int64_t query_groups(const MegatronArgs& a);
// Megatron's _vocab_size_with_padding: the tokenizer's vocabulary padded to a
// multiple of make_vocab_size_divisible_by x tensor size (or --padded-vocab-size).
int64_t padded_vocab_size(const MegatronArgs& a, int64_t tokenizer_vocab_size);
// MoE layer pattern (1 = MoE layer) for num_layers layers, as Megatron's
// get_moe_layer_pattern builds it from --moe-layer-freq.
std::vector<int64_t> moe_layer_pattern(const MegatronArgs& a);

// Megatron's _print_args: a "---- arguments ----" header, "  name ..... value" lines
// sorted case-insensitively, Python-style values (None, True, 1e-05, ['a', 'b']),
// and the "---- end of arguments ----" footer.
std::string format_megatron_args(const MegatronArgs& a, const std::string& title = "arguments");

// The arguments as a JSON object keyed by Megatron's argument names, values
// typed (null for None), e.g. {"num_layers": 6, "bf16": true, "lr": 0.0003, ...};
// checkpoints keep them. from_json fills the names it finds and keeps the
// defaults of the rest; ValueError names a value of the wrong type.
std::string megatron_args_to_json(const MegatronArgs& a);
MegatronArgs megatron_args_from_json(const std::string& json);

// --help: every flag grouped as Megatron's arguments.py groups them, each with its
// value type, default, status in this build and one line of help.
std::string megatron_help(const std::string& program = "qk pretrain-gpt");

// What this build does with a flag, for --help, docs and tests.
enum class FlagStatus { kSupported, kNotYet, kNoop };
struct FlagInfo {
  std::string flag;           // primary spelling, e.g. "--disable-bias-linear"
  std::vector<std::string> aliases;
  std::string dest;           // field name, e.g. "add_bias_linear"
  std::string group;          // Megatron's argument group title
  std::string type;           // "int", "float", "str", "flag", "int list", ...
  std::string default_value;  // Python-style
  std::vector<std::string> choices;
  FlagStatus status = FlagStatus::kSupported;
  // not yet: "context parallelism is not built yet; this build runs context
  // size 1"; no-op: what the flag means here; empty when supported.
  std::string status_text;
  // Only some values are refused: not yet with size 1 fine (--pipeline-model-parallel-size),
  // or supported with some values not yet (--position-embedding-type mrope).
  bool status_depends_on_value = false;
  std::string help;
};
std::vector<FlagInfo> megatron_flags();
const char* flag_status_name(FlagStatus s);  // "supported", "not yet", "no-op"

}  // namespace qk::recipes
