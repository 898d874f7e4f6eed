// Generation throughput of qk::transformer::generate (KV cache) on a random
// GPTModel: time to first token for the prompt, then decode tokens/s, and
// the sampler's share of a step.
//
//   gpt_generate --layout gpt2 --layers 12 --hidden 768 --heads 12 --vocab 50257 --prompt 32 --new 64 --threads 2
//   gpt_generate --layout llama --layers 6 --hidden 512 --heads 8 --vocab 32000 --batch 4 --top-p 0.9
//
// Prints one JSON line.
#include <fmt/format.h>

#include <cstdlib>
#include <string>

#include "qk/autograd/functions.h"
#include "qk/base/thread_pool.h"
#include "qk/base/timer.h"
#include "qk/transformer/generate.h"

int main(int argc, char** argv) {
  int threads = 1;
  int64_t layers = 12, hidden = 768, heads = 12, groups = 0, vocab = 50257, prompt = 32, new_tokens = 64, batch = 1;
  int64_t top_k = 0;
  double temperature = 1.0, top_p = 1.0;
  std::string layout = "gpt2", dtype = "f32";
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    const char* v = argv[i + 1];
    if (k == "--threads")
      threads = std::atoi(v);
    else if (k == "--layers")
      layers = std::atoll(v);
    else if (k == "--hidden")
      hidden = std::atoll(v);
    else if (k == "--heads")
      heads = std::atoll(v);
    else if (k == "--groups")
      groups = std::atoll(v);
    else if (k == "--vocab")
      vocab = std::atoll(v);
    else if (k == "--prompt")
      prompt = std::atoll(v);
    else if (k == "--new")
      new_tokens = std::atoll(v);
    else if (k == "--batch")
      batch = std::atoll(v);
    else if (k == "--top-k")
      top_k = std::atoll(v);
    else if (k == "--top-p")
      top_p = std::atof(v);
    else if (k == "--temperature")
      temperature = std::atof(v);
    else if (k == "--layout")
      layout = v;
    else if (k == "--dtype")
      dtype = v;
    else {
      fmt::print(stderr, "unknown flag {}\n", k);
      return 2;
    }
  }
  if ((layout != "gpt2" && layout != "llama") || (dtype != "f32" && dtype != "bf16")) {
    fmt::print(stderr, "expected --layout gpt2|llama --dtype f32|bf16\n");
    return 2;
  }
  qk::set_num_threads(threads);
  qk::manual_seed(0);

  qk::transformer::TransformerConfig c;
  c.num_layers = layers;
  c.hidden_size = hidden;
  c.num_attention_heads = heads;
  c.num_query_groups = groups;
  c.vocab_size = vocab;
  c.seq_length = prompt + new_tokens;
  c.hidden_dropout = c.attention_dropout = 0.0;
  c.params_dtype = qk::parse_dtype(dtype);
  if (layout == "gpt2") {
    c.activation_func = qk::transformer::Activation::openai_gelu;
  } else {
    c.position_embedding_type = qk::transformer::PositionEmbeddingType::rope;
    c.normalization = qk::transformer::Normalization::RMSNorm;
    c.set_swiglu();
    c.add_bias_linear = false;
    c.share_embeddings_and_output_weights = false;
  }
  qk::transformer::GPTModel model(c);
  model->eval();
  qk::Generator g(1);
  const std::vector<int64_t> ids = qk::randint(0, vocab, {prompt}, qk::DType::i64, g).to_vector<int64_t>();
  qk::transformer::GenerateOptions o;
  o.max_new_tokens = new_tokens;
  o.sampling = {.temperature = temperature, .top_k = top_k, .top_p = top_p};
  qk::transformer::generate(*model, {ids}, {.max_new_tokens = 2});  // warm-up
  const qk::transformer::GenerateResult r =
      qk::transformer::generate(*model, std::vector<std::vector<int64_t>>(batch, ids), o);

  // The sampler alone on logits of the model's vocabulary size.
  const std::vector<float> logits = (qk::randn({vocab}, {}, g) * 3.0).to_vector<float>();
  qk::transformer::TokenSampler sampler(o.sampling, 2);
  qk::Timer t;
  for (int i = 0; i < 200; ++i) sampler.sample(logits.data(), vocab);
  const double sample_ms = t.millis() / 200;

  fmt::print(
      "{{\"impl\": \"qianka\", \"layout\": \"{}\", \"dtype\": \"{}\", \"threads\": {}, \"layers\": {}, "
      "\"hidden\": {}, \"vocab\": {}, \"batch\": {}, \"prompt\": {}, \"new_tokens\": {}, "
      "\"first_token_s\": {:.3f}, \"decode_tokens_per_s\": {:.1f}, \"tokens_per_s\": {:.1f}, "
      "\"ms_per_decode_step\": {:.2f}, \"sample_ms\": {:.3f}}}\n",
      layout, dtype, threads, layers, hidden, vocab, batch, prompt, r.new_tokens, r.prefill_seconds,
      r.decode_tokens_per_second(), r.tokens_per_second(),
      r.decode_tokens > 0 ? 1e3 * r.decode_seconds * batch / r.decode_tokens : 0.0, sample_ms);
  return 0;
}
