// Sampling text from a GPTModel with its KV cache: greedy, temperature,
// top-k, top-p (nucleus), a seeded generator of its own, stop tokens and a
// per-token callback for streaming.
//
//   using namespace qk::transformer;
//   model->eval();                                    // generation runs without dropout
//   GenerateOptions o;
//   o.max_new_tokens = 64;
//   o.sampling = {.temperature = 0.8, .top_k = 40};   // or {.temperature = 0} for greedy
//   o.seed = 7;                                       // same seed, same tokens
//   o.stop_tokens = {tokenizer->eod()};
//   o.on_token = [&](int64_t row, int64_t id) { print(tokenizer->decode({id})); return true; };
//   GenerateResult r = generate(*model, {prompt_ids}, o);
//   r.tokens[0];  r.decode_tokens_per_second();
//
// The prompt runs through the model once (one batched forward_step filling
// the cache); every later step feeds one token per row. Prompts of different
// lengths share one batch without padding: all rows advance position by
// position, a row still inside its prompt is fed its next prompt token and
// its logits are not sampled.
#pragma once

#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

#include "qk/tensor/generator.h"
#include "qk/transformer/gpt_model.h"

namespace qk::transformer {

// Transformers' order: temperature, then top-k, then top-p on what is left.
struct SamplingOptions {
  // Logits are divided by it; 0 means greedy.
  double temperature = 1.0;
  // Keep the k most likely ids (0: all; 1: greedy).
  int64_t top_k = 0;
  // Keep the most likely ids, most likely first, while the probability
  // before each is below top_p (so at least one); 1: all.
  double top_p = 1.0;

  bool greedy() const { return temperature == 0 || top_k == 1; }
  // ValueError naming the field: temperature >= 0, top_k >= 0, 0 < top_p <= 1.
  void validate() const;
};

// Draws ids from logits rows; uses a Generator of its own (Philox, counter
// based), so a seed reproduces the draws whatever else uses randomness.
class TokenSampler {
 public:
  explicit TokenSampler(const SamplingOptions& o = {}, uint64_t seed = 0);

  // An id in [0, n) from the f32 logits[0..n). Greedy takes the first
  // largest. Throws ValueError on NaN logits.
  int64_t sample(const float* logits, int64_t n);
  // The ids sample() can return with their probabilities, most likely first
  // (equal logits: lower id first); the probabilities sum to 1.
  std::vector<std::pair<int64_t, double>> candidates(const float* logits, int64_t n);

  const SamplingOptions& options() const { return options_; }
  Generator& generator() { return generator_; }

 private:
  // Fills kept_ with the (id, unnormalised weight) pairs top-k/top-p keep,
  // in no particular order, and returns their weight; all_ids: no filter,
  // weights_ holds every id's weight in id order.
  double keep(const float* logits, int64_t n, bool& all_ids);
  double uniform();

  SamplingOptions options_;
  Generator generator_;
  std::vector<int64_t> order_;
  std::vector<std::pair<int64_t, double>> kept_;
  std::vector<double> weights_;
};

enum class FinishReason {
  length,    // max_new_tokens, or the context (max_position_embeddings) is full
  stop,      // produced a stop token
  callback,  // on_token returned false
};
const char* to_string(FinishReason r);

struct GenerateOptions {
  int64_t max_new_tokens = 64;
  SamplingOptions sampling = {};
  uint64_t seed = 1234;
  // A row ends when it samples one of these (the tokenizer's EOD, config.json's
  // eos ids); the stop token is not part of the output.
  std::vector<int64_t> stop_tokens = {};
  // Sample among ids [0, vocab_size) (0: the config's unpadded vocab_size;
  // the padding rows of the output layer are never sampled).
  int64_t vocab_size = 0;
  // Called with each new token as soon as it is sampled; false ends that row.
  std::function<bool(int64_t row, int64_t token)> on_token = {};
};

struct GenerateResult {
  std::vector<std::vector<int64_t>> tokens;  // the new tokens of each prompt
  std::vector<FinishReason> finish;
  int64_t prompt_tokens = 0;   // all rows
  int64_t new_tokens = 0;      // all rows
  int64_t decode_tokens = 0;   // new tokens from the one-token steps (all but each row's first)
  double prefill_seconds = 0;  // the prompt step and the first tokens (time to first token)
  double decode_seconds = 0;   // every later step

  double seconds() const { return prefill_seconds + decode_seconds; }
  // New tokens per second, end to end.
  double tokens_per_second() const { return seconds() > 0 ? static_cast<double>(new_tokens) / seconds() : 0; }
  // The steady one-token-per-step rate.
  double decode_tokens_per_second() const {
    return decode_seconds > 0 ? static_cast<double>(decode_tokens) / decode_seconds : 0;
  }
};

// Continues each prompt (token ids, at least one each). The model must be in
// eval() mode if its config has dropout. Positions are limited to
// max_position_embeddings (Megatron's generation limit too).
GenerateResult generate(GPTModelImpl& model, const std::vector<std::vector<int64_t>>& prompts,
                        const GenerateOptions& o = {});

}  // namespace qk::transformer
