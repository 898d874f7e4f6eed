// What this build does with each Megatron flag: the one table to edit when a
// feature lands. A flag without a row here is supported. A "not yet" row refuses
// the flag; with `fine`, only the values that need the missing feature (e.g. a
// size above 1). A "supported" row with `fine` accepts the flag but refuses the
// values it names (e.g. a tokenizer type this build cannot read). A "no-op" row
// accepts the flag with one info line saying what it means here.
//
// Built: GPT/Llama over tensor x pipeline (interleaved too) x expert x
// data-parallel ranks; sequence parallelism, the distributed optimizer,
// overlapped reductions, activation recompute, mixture of experts and
// multi-latent attention. Not yet: context parallelism and an expert tensor
// size other than the tensor size; --sequence-parallel at tensor size 1 is
// turned off with a note, as Megatron does.
#include <set>

#include "megatron_flag_table.h"

namespace qk::recipes::detail {

namespace {

constexpr FlagStatus kSupported = FlagStatus::kSupported, kNotYet = FlagStatus::kNotYet,
                     kNoop = FlagStatus::kNoop;

constexpr std::string_view kKernelChoice =
    "a choice between Megatron's CUDA kernels; qianka has one CPU implementation of each, "
    "with the same numerics";
constexpr std::string_view kNoTensorBoard =
    "no TensorBoard or Weights & Biases output is written; metrics go to the JSONL metrics "
    "file and the PNG curves";

std::vector<StatusRule> build_rules() {
  std::vector<StatusRule> r = {
      // ---- parallelism
      // --tensor-model-parallel-size is supported (no row).
      {"--sequence-parallel", kSupported, "sequence parallelism", nullptr, {},
       "turned off because --tensor-model-parallel-size is 1 (Megatron warns and does the same)",
       [](const A& a) { return a.tensor_model_parallel_size == 1; }},
      {"--context-parallel-size", kNotYet, "context parallelism",
       [](const A& a) { return a.context_parallel_size == 1; }, "this build runs context size 1"},
      // --pipeline-model-parallel-size is supported (no row).
      // --decoder-first/last-pipeline-num-layers, --num-layers-per-virtual-pipeline-stage and
      // --num-virtual-stages-per-pipeline-rank are supported (no rows).
      {"--account-for-embedding-in-pipeline-split", kNotYet,
       "a pipeline split that counts the embedding as a layer (a first model chunk without layers)"},
      {"--account-for-loss-in-pipeline-split", kNotYet,
       "a pipeline split that counts the loss as a layer (a last model chunk without layers)"},
      // --expert-model-parallel-size is supported (no row).
      {"--expert-tensor-parallel-size", kNotYet, "an expert tensor-parallel size other than the tensor size",
       [](const A& a) {
         return !a.expert_tensor_parallel_size || *a.expert_tensor_parallel_size == a.tensor_model_parallel_size;
       },
       "this build splits the experts over the tensor-parallel group (Megatron's default: "
       "--expert-tensor-parallel-size = --tensor-model-parallel-size)"},
      // --use-distributed-optimizer, --overlap-grad-reduce, --overlap-param-gather,
      // --ddp-bucket-size and --recompute-{activations,granularity,method,num-layers}
      // are supported, also with pipeline parallelism.
      {"--tp-comm-overlap", kNotYet, "tensor-parallel communication overlap"},
      {"--recompute-modules", kSupported, "recomputing modules other than the attention core",
       [](const A& a) {
         for (const auto& m : a.recompute_modules.value_or(std::vector<std::string>{}))
           if (m != "core_attn") return false;
         return true;
       },
       "--recompute-modules core_attn (Megatron's default for selective recompute) is accepted"},
      {"--distribute-saved-activations", kNotYet, "spreading checkpointed activations over the tensor-parallel group"},
      {"--profile", kNotYet, "the --profile timeline without a pipeline",
       [](const A& a) { return !a.profile || a.pipeline_model_parallel_size > 1; },
       "this build records the pipeline schedule's timeline (--pipeline-model-parallel-size > 1)"},

      // ---- mixture of experts and multi-latent attention: --num-experts,
      // the --moe-* flags and --multi-latent-attention with its --q-lora-rank ...
      // --mscale-all-dim are supported (no rows); --moe-token-dispatcher-type flex
      // (DeepEP) is refused where the config is built.
      {"--rope-type", kSupported, "YaRN RoPE without multi-latent attention",
       [](const A& a) { return a.rope_type == "rope" || a.multi_latent_attention; },
       "--rope-type rope is accepted, and yarn with --multi-latent-attention (which rotates with YaRN)"},

      // ---- model features not built
      {"--position-embedding-type", kSupported, "this position embedding type",
       [](const A& a) {
         return a.position_embedding_type == "learned_absolute" || a.position_embedding_type == "rope" ||
                a.position_embedding_type == "none";
       },
       "this build has learned_absolute, rope and none"},
      {"--rotary-interleaved", kNotYet, "interleaved RoPE"},
      {"--use-rope-scaling", kNotYet, "Llama 3.x RoPE scaling"},
      {"--rope-scaling-factor", kNotYet, "Llama 3.x RoPE scaling"},
      {"--use-legacy-models", kNotYet, "Megatron's legacy (non-core) models",
       nullptr, "this build has the Megatron-core layout"},
      {"--fp32-residual-connection", kNotYet, "an fp32 residual stream"},
      {"--apply-query-key-layer-scaling", kNotYet, "query-key layer scaling"},
      {"--data-parallel-random-init", kNotYet, "different initial weights per data-parallel rank"},
      {"--fp8-format", kNotYet, "fp8 training"},
      {"--fp8-recipe", kNotYet, "fp8 training"},
      {"--fp8-margin", kNotYet, "fp8 training"},
      {"--fp8-amax-history-len", kNotYet, "fp8 training"},
      {"--fp8-amax-compute-algo", kNotYet, "fp8 training"},

      // ---- training and data features not built
      {"--rampup-batch-size", kNotYet, "batch-size ramp-up"},
      {"--optimizer", kSupported, "the Muon optimizer",
       [](const A& a) { return a.optimizer == "adam" || a.optimizer == "sgd"; }, "this build has adam and sgd"},
      {"--dataloader-type", kSupported, "this data loader type",
       [](const A& a) { return a.dataloader_type == "single"; }, "this build has the single-pass loader"},
      {"--reset-position-ids", kNotYet, "document-boundary position ids"},
      {"--reset-attention-mask", kNotYet, "document-boundary attention masks"},
      {"--tokenizer-type", kSupported, "this tokenizer type",
       [](const A& a) {
         const std::string t = a.tokenizer_type.value_or("");
         return t == "HuggingFaceTokenizer" || t == "GPT2BPETokenizer" || t == "SentencePieceTokenizer" ||
                t == "NullTokenizer";
       },
       "this build reads HuggingFaceTokenizer, GPT2BPETokenizer, SentencePieceTokenizer and NullTokenizer"},
      {"--vocab-extra-ids", kNotYet, "extra sentinel tokens",
       [](const A& a) { return a.vocab_extra_ids == 0; }, "--vocab-extra-ids 0 is accepted"},

      // ---- no-ops: accepted, one info line
      {"--use-mcore-models", kNoop, "qianka builds the Megatron-core model layout, the only one it has"},
      {"--use-cpu-initialization", kNoop,
       "weights are always initialised on the CPU, the same for every parallel layout"},
      {"--no-rope-fusion", kNoop, kKernelChoice},
      {"--no-masked-softmax-fusion", kNoop, kKernelChoice},
      {"--no-bias-gelu-fusion", kNoop, kKernelChoice},
      {"--no-bias-swiglu-fusion", kNoop, kKernelChoice},
      {"--no-bias-dropout-fusion", kNoop, kKernelChoice},
      {"--no-gradient-accumulation-fusion", kNoop, kKernelChoice},
      {"--no-persist-layer-norm", kNoop, kKernelChoice},
      {"--cross-entropy-loss-fusion", kNoop,
       "the output-layer cross entropy is always fused and chunked (logits never materialised whole)"},
      {"--no-async-tensor-model-parallel-allreduce", kNoop, "deprecated and ignored by Megatron too"},
      {"--attention-backend", kNoop,
       "qianka has one attention kernel (memory-efficient with --use-flash-attn)"},
      {"--transformer-impl", kNoop, "there is no Transformer Engine; qianka's own layers run"},
      {"--fp16-lm-cross-entropy", kNoop, "the cross entropy always accumulates in fp32 here"},
      {"--distributed-backend", kNoop, "collectives run on qccl whatever backend is named"},
      {"--local-rank", kNoop, "each rank's place comes from qk run's environment"},
      {"--empty-unused-memory-level", kNoop, "there is no device memory cache to empty"},
      {"--manual-gc", kNoop, "there is no Python garbage collector"},
      {"--manual-gc-interval", kNoop, "there is no Python garbage collector"},
      {"--wait-after-ckpt", kNoop,
       "checkpoints are written synchronously and published atomically, so there is nothing to wait for"},
      {"--ckpt-format", kNoop,
       "checkpoints are safetensors with a JSON sidecar, stored whole by name, whatever format is named"},
      {"--no-mmap-bin-files", kNoop, ".bin files are always memory-mapped"},
      {"--num-workers", kNoop,
       "samples come from memory-mapped files in the training process; there are no worker processes"},
      {"--num-dataset-builder-threads", kNoop, "dataset indices are built by one thread, then cached"},
      {"--no-create-attention-mask-in-dataloader", kNoop,
       "causal attention needs no mask tensor, so none is built"},
      {"--tensorboard-dir", kNoop, kNoTensorBoard},
      {"--tensorboard-log-interval", kNoop, kNoTensorBoard},
      {"--tensorboard-queue-size", kNoop, kNoTensorBoard},
      {"--log-timers-to-tensorboard", kNoop, kNoTensorBoard},
      {"--no-log-loss-scale-to-tensorboard", kNoop, kNoTensorBoard},
      {"--log-validation-ppl-to-tensorboard", kNoop, kNoTensorBoard},
      {"--log-memory-to-tensorboard", kNoop, kNoTensorBoard},
      {"--log-world-size-to-tensorboard", kNoop, kNoTensorBoard},
      {"--wandb-project", kNoop, kNoTensorBoard},
      {"--wandb-entity", kNoop, kNoTensorBoard},
      {"--wandb-exp-name", kNoop, kNoTensorBoard},
      {"--wandb-save-dir", kNoop, kNoTensorBoard},
      {"--timing-log-level", kNoop,
       "the iteration line reports the iteration time; per-operation timers are not reported"},
      {"--timing-log-option", kNoop, "per-operation timers are not reported"},
      {"--logging-level", kNoop, "qianka's log level comes from QK_LOG_LEVEL"},
  };
  return r;
}

}  // namespace

const std::vector<StatusRule>& status_rules() {
  static const std::vector<StatusRule> rules = build_rules();
  return rules;
}

const StatusRule* find_status_rule(std::string_view flag) {
  for (const auto& r : status_rules())
    if (r.flag == flag) return &r;
  return nullptr;
}

std::string not_yet_text(const StatusRule& r) {
  std::string s = std::string(r.what) + " is not built yet";
  if (!r.fine_note.empty()) s += "; " + std::string(r.fine_note);
  return s;
}

}  // namespace qk::recipes::detail
