// GPT pre-training with Megatron-LM's arguments (pretrain_gpt.py on
// megatron/training/training.py): `qk pretrain-gpt` is a thin CLI over
// pretrain_gpt(); the pieces it is made of are public so a C++ program can
// run the same loop with its own model, data or logging.
//
//   auto p = qk::recipes::parse_megatron_args(argv, {.world_size = env.world_size, .rank = env.rank});
//   qk::recipes::PretrainGptResult r = qk::recipes::pretrain_gpt(p.args, {.notes = p.notes});
//
//   // or piece by piece:
//   auto tok = qk::recipes::build_tokenizer(args);                         // --tokenizer-type ...
//   auto cfg = qk::recipes::gpt_transformer_config(args, tok->vocab_size());  // every model flag
//   auto data = qk::recipes::build_gpt_datasets(args, *tok);               // --data-path/--split, --mock-data ...
//   qk::recipes::GptBatchIterator it(*data.train, consumed_samples, args.micro_batch_size.value(), rank, world,
//                                  qk::recipes::gpt_batch_options(args, *tok));
//   qk::recipes::GptBatch b = it.next();      // tokens, labels, loss_mask, position_ids [micro, seq]
//
// What each Megatron flag does here is in docs/llm.md (and --help); the
// status table (src/recipes/megatron_args_status.cc) refuses the flags whose
// features are not built and notes the ones that mean nothing on a CPU.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "qk/data/gpt_dataset.h"
#include "qk/data/tokenizer.h"
#include "qk/tensor/tensor.h"
#include "qk/recipes/megatron_args.h"
#include "qk/optim/mixed_precision_optimizer.h"
#include "qk/train/trainer.h"
#include "qk/transformer/config.h"
#include "qk/transformer/gpt_model.h"

namespace qk::recipes {

// ---- model

// TransformerConfig from the model flags (sizes, attention, position
// embedding, normalisation, MLP, dropout, bias, tied output, init, vocabulary
// padding, --bf16/--fp16 parameters). `tokenizer_vocab_size` is padded as
// Megatron pads it (--make-vocab-size-divisible-by, --padded-vocab-size).
transformer::TransformerConfig gpt_transformer_config(const MegatronArgs& a, int64_t tokenizer_vocab_size);

// ---- tokenizer

// --tokenizer-type with --vocab-file/--merge-file (GPT2BPETokenizer),
// --tokenizer-model (HuggingFaceTokenizer, SentencePieceTokenizer) or
// --vocab-size (NullTokenizer). Errors name the flag that is missing.
std::unique_ptr<data::Tokenizer> build_tokenizer(const MegatronArgs& a);

// ---- data

// Megatron's get_train_valid_test_num_samples: train_iters (or
// train_samples / global batch) global batches to train on;
// (train_iters / eval_interval + 1) x eval_iters batches to validate on;
// eval_iters batches to test on.
struct GptSampleCounts {
  int64_t train = 0, valid = 0, test = 0;
};
GptSampleCounts gpt_sample_counts(const MegatronArgs& a);

// The three splits (null: that split has no data, as a zero --split weight
// or a missing --valid-data-path leaves it), built as Megatron-Core's
// BlendedMegatronDatasetBuilder builds them: --mock-data (MockGPTDataset),
// --data-path with --split (one prefix: a GPTDataset per split; weighted
// prefixes or the seed's "token-count path" lines: a BlendedDataset),
// or --train/valid/test-data-path (one blend per split). Index caches go to
// --data-cache-path (default: next to each dataset).
struct GptDatasets {
  std::shared_ptr<const data::GptSamples> train, valid, test;
  std::vector<std::shared_ptr<const void>> owners;  // what the datasets read from
  std::string description;                         // one line per split, for the log
};
GptDatasets build_gpt_datasets(const MegatronArgs& a, const data::Tokenizer& tokenizer);

// How a sample becomes a micro-batch row (GPTDataset.__getitem__): tokens =
// text[:-1], labels = text[1:], loss_mask 1 except where the label is the
// tokenizer's pad id (and, with --eod-mask-loss, where the token is eod),
// position_ids 0..seq-1.
struct GptBatchOptions {
  int64_t eod = -1;
  int64_t pad = -1;  // Megatron's _PAD_TOKEN_ID (-1) unless the tokenizer has one
  bool eod_mask_loss = false;
};
GptBatchOptions gpt_batch_options(const MegatronArgs& a, const data::Tokenizer& tokenizer);

// One micro-batch, [micro_batch_size, seq_length] each (tokens, labels,
// position_ids i64; loss_mask f32).
struct GptBatch {
  Tensor tokens, labels, loss_mask, position_ids;
  // The tokens the loss counts: the sum of loss_mask (a host tensor).
  double loss_tokens() const;
};

// Megatron's MegatronPretrainingSampler and collation: global micro-batch k
// (from `consumed_samples` on) is samples consumed + k * micro * dp +
// dp_rank * micro .. + micro, so a resumed run continues where the
// checkpoint's consumed samples left it, whatever the data-parallel size.
class GptBatchIterator {
 public:
  GptBatchIterator(std::shared_ptr<const data::GptSamples> samples, int64_t consumed_samples,
                   int64_t micro_batch_size, int dp_rank, int dp_size, GptBatchOptions o, std::string split = "train");
  // Throws ValueError when the dataset has no whole global micro-batch left.
  GptBatch next();
  int64_t consumed_samples() const { return consumed_; }

 private:
  std::shared_ptr<const data::GptSamples> samples_;
  int64_t consumed_, micro_;
  int rank_, size_;
  GptBatchOptions o_;
  std::string split_;
};

// ---- optimizer, schedule, trainer

optim::OptimizerFactory gpt_optimizer(const MegatronArgs& a);                // --optimizer adam (AdamW) | sgd
// The MixedPrecisionOptimizer over megatron_param_groups(model), or with
// --use-distributed-optimizer (or --overlap-grad-reduce alone) a
// DistributedOptimizer over `dp` (--overlap-grad-reduce,
// --overlap-param-gather: its forward pre-hook goes on the model,
// --ddp-bucket-size).
std::unique_ptr<optim::MixedPrecisionOptimizer> gpt_build_optimizer(const MegatronArgs& a,
                                                                    transformer::GPTModelImpl& model,
                                                                    dist::ProcessGroup* dp,
                                                                    const parallel::ExpertParallel& expert = {});
// The same over any module's parameters, no hook installed (a pipeline
// stage's: gpt_pretrain_pipeline.h). shared_embedding: the stage's tied
// weight, a bucket of its own under the distributed optimizer.
std::unique_ptr<optim::MixedPrecisionOptimizer> gpt_build_optimizer(const MegatronArgs& a, const nn::Module& model,
                                                             dist::ProcessGroup* dp,
                                                             const std::string& shared_embedding = "",
                                                             const parallel::ExpertParallel& expert = {});
// Megatron's report_theoretical_memory line for the weights and optimizer
// ("Theoretical memory footprints: weight and optimizer=... MB") with the
// parts per rank, this run's and the other optimizer's.
std::string gpt_theoretical_memory(const MegatronArgs& a, const optim::MixedPrecisionOptimizer& opt,
                                   int data_parallel_size);
// Megatron's report_memory after the first logged iteration, from the CPU
// tensor allocator and the optimizer's tensors: "[Rank 0] (after 1
// iterations) memory (MB) | allocated: ... | max allocated: ... | weights:
// ... | gradients: ... | main weights: ... | optimizer state: ...".
std::string gpt_memory_report(const optim::MixedPrecisionOptimizer& opt, int64_t iteration, int rank);
// Info lines about recompute settings that change nothing here (selective
// with --use-flash-attn), for the log.
std::vector<std::string> gpt_recompute_notes(const MegatronArgs& a);
std::unique_ptr<optim::LossScaler> gpt_loss_scaler(const MegatronArgs& a);   // --fp16 dynamic, --loss-scale constant
optim::MixedPrecisionOptions gpt_mixed_precision_options(const MegatronArgs& a);
optim::ParamSchedulerOptions gpt_scheduler_options(const MegatronArgs& a);   // --lr ..., --weight-decay ...
// --train-iters ... --exit-signal-handler; metrics and curves under `out_dir`.
train::TrainerOptions gpt_trainer_options(const MegatronArgs& a, const std::string& out_dir);

// ---- logs (Megatron's formats)

// What the iteration line needs beside the Trainer's numbers.
struct IterationLineExtras {
  bool log_throughput = false;           // --log-throughput
  std::optional<double> params_norm;     // --log-params-norm
  std::string timestamp;                 // "2026-12-01 16:00:00"; empty: now
};
// " [2026-12-01 16:00:00] iteration       10/     100 | consumed samples: ... |
// elapsed time per iteration (ms): 123.4 | [throughput per GPU (TFLOP/s/GPU): 1.2 |]
// learning rate: 1.500000E-04 | global batch size:    64 | lm loss: 7.123456E+00 |
// loss scale: 1.0 | grad norm: 1.234 | [num zeros: ... |] [params norm: ... |]
// number of skipped iterations:   0 | number of nan iterations:   0 |"
std::string megatron_iteration_line(const train::LogStats& s, const IterationLineExtras& x = {});
// qianka's line after it: tokens/s, achieved TFLOP/s and MFU per rank against
// the measured GEMM peak, peak memory.
std::string throughput_line(const train::LogStats& s, int world_size, double gemm_peak_flops);
// qianka's line of the bytes each process group moved per iteration of the
// interval (LogStats::comm): " [qk] bytes per iteration: tp 12.58 MB in 30
// calls (all-reduce 12.58 MB), 12.58 MB sent | dp 2.10 MB in 2 calls
// (all-reduce 2.10 MB), 2.10 MB sent |".
std::string traffic_line(const std::vector<train::GroupVolume>& comm);
// Megatron's evaluate_and_print_results: a dashed line, " validation loss at
// PREFIX | lm loss value: 5.400000E+00 | lm loss PPL: 2.214064E+02 | ", a dashed line.
std::string megatron_validation_block(const std::string& prefix, const std::map<std::string, double>& metrics);

// ---- fine-tuning from Hugging Face weights (--load HF_FOLDER)

// Checks the model the flags build (`from_flags`, gpt_transformer_config)
// against the config.json of the Hugging Face folder `dir`: every mismatch is
// listed in one ValueError naming the flag and the config.json field.
void check_flags_match_hf_config(const MegatronArgs& a, const transformer::TransformerConfig& from_flags,
                                 const std::string& dir);
// check_flags_match_hf_config, then the folder's weights into `model` (the
// vocabulary padded by repeating its last row, as Megatron's checkpoint
// converter does; dtypes converted). Returns a line for the log.
std::string load_hf_weights_for_finetune(const MegatronArgs& a, transformer::GPTModelImpl& model,
                                         const std::string& dir);

// ---- the whole run

// The `user` state pretrain_gpt writes into every checkpoint: {"format": this,
// "tokenizer_vocab_size", "padded_vocab_size", "model": config summary}.
inline constexpr const char* kPretrainGptFormat = "qk-pretrain-gpt-v1";

struct PretrainGptOptions {
  // Info lines for the log (the no-op notes of parse_megatron_args).
  std::vector<std::string> notes = {};
  // Where rank 0's lines go (the argument dump, iteration and validation lines); default stdout.
  std::function<void(const std::string&)> print = {};
  // Metrics and curves without --save go here.
  std::string default_output_dir = "runs/pretrain_gpt";
  // Measure the GEMM peak at start for MFU (about 0.3 s).
  bool measure_gemm_peak = true;
  // Where the model, its gradients, the optimizer and each batch live: "cpu",
  // "cuda" (the local rank's GPU), "cuda:N" (resolve_device); every
  // parallel layout runs there.
  std::string device = "cpu";
};

struct PretrainGptResult {
  train::TrainResult train;
  std::optional<train::EvalStats> final_valid, final_test;  // "on validation set" / "on test set" at the end
  std::string output_dir;                            // metrics.jsonl, training_curves.png
  double gemm_peak_flops = 0;                        // per rank, as measured
  int64_t num_parameters = 0;
};

// Megatron's pretrain(): joins the job described by qk run's (or
// torchrun's) environment and builds Megatron's rank grid over it
// (--tensor-model-parallel-size x data-parallel ranks; the layout printed
// once), builds tokenizer, model (tensor-parallel above size 1, with
// --sequence-parallel), optimizer, schedule and data (sampled by
// data-parallel rank: the tensor-parallel ranks of a data-parallel group read
// the same micro-batches) from the validated arguments, resumes from --load
// (a checkpoint of any tensor x data-parallel layout), trains with periodic
// evaluation and checkpoints, then evaluates the validation and test splits.
// `a` must come from parse_megatron_args / validate_megatron_args with this
// job's world size.
PretrainGptResult pretrain_gpt(const MegatronArgs& a, const PretrainGptOptions& o = {});

}  // namespace qk::recipes
