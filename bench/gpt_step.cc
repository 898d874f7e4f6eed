// Training-step throughput of qk::transformer::GPTModel: forward + loss +
// backward + AdamW on random tokens, the figure compared with llm.c and
// PyTorch (the GPT-2 124M benchmark: 12 layers, hidden 768, 12 heads,
// vocabulary 50257, sequence 64, micro batch 4).
//
//   gpt_step --layout gpt2 --layers 12 --hidden 768 --heads 12 --vocab 50257 --seq 64 --batch 4
//            --threads 2 --steps 10 --warmup 2 [--dtype f32|bf16] [--flash 0|1]
//   gpt_step --layout llama --layers 6 --hidden 512 --heads 8 --groups 8 --seq 1024 --batch 1
//
// llama: RoPE, RMSNorm, SwiGLU, no biases, untied output (--groups for GQA).
// Prints one JSON line: tokens_per_s, ms_per_step (the median step), achieved GFLOP/s by
// Megatron's num_floating_point_operations, peak_rss_mb, peak_tensor_mb.
#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <vector>
#include <string>

#include "qk/autograd/autograd.h"
#include "qk/base/thread_pool.h"
#include "qk/base/timer.h"
#include "qk/optim/adam.h"
#include "qk/tensor/backend.h"
#include "qk/transformer/gpt_model.h"

int main(int argc, char** argv) {
  int threads = 1, steps = 10, warmup = 2;
  int64_t layers = 12, hidden = 768, heads = 12, groups = 0, vocab = 50257, seq = 64, batch = 4;
  std::string layout = "gpt2", dtype = "f32";
  bool flash = false;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    const char* v = argv[i + 1];
    if (k == "--threads") threads = std::atoi(v);
    else if (k == "--steps") steps = std::atoi(v);
    else if (k == "--warmup") warmup = std::atoi(v);
    else if (k == "--layers") layers = std::atoll(v);
    else if (k == "--hidden") hidden = std::atoll(v);
    else if (k == "--heads") heads = std::atoll(v);
    else if (k == "--groups") groups = std::atoll(v);
    else if (k == "--vocab") vocab = std::atoll(v);
    else if (k == "--seq") seq = std::atoll(v);
    else if (k == "--batch") batch = std::atoll(v);
    else if (k == "--layout") layout = v;
    else if (k == "--dtype") dtype = v;
    else if (k == "--flash") flash = std::atoi(v) != 0;
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
  c.seq_length = seq;
  c.hidden_dropout = c.attention_dropout = 0.0;
  c.params_dtype = qk::parse_dtype(dtype);
  c.use_flash_attn = flash;
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
  qk::optim::AdamW opt(model->parameters(), qk::optim::AdamWOptions(3e-4).weight_decay(0.1));
  const qk::Tensor tokens = qk::randint(0, vocab, {batch, seq});
  const qk::Tensor labels = qk::randint(0, vocab, {batch, seq});
  double loss_val = 0;
  auto step = [&] {
    opt.zero_grad();
    qk::Tensor loss = model(tokens, qk::Tensor(), labels);
    loss.backward();
    opt.step();
    loss_val = loss.item<double>();
  };
  for (int i = 0; i < warmup; ++i) step();
  qk::reset_peak_memory(qk::kCPU);
  std::vector<double> times;
  for (int i = 0; i < steps; ++i) {
    qk::Timer t;
    step();
    times.push_back(t.seconds());
  }
  std::sort(times.begin(), times.end());
  const double s = times[times.size() / 2];  // the median step, as the peers report
  const double flops = qk::transformer::num_floating_point_operations(model->config(), batch);
  fmt::print("{{\"impl\": \"qianka\", \"layout\": \"{}\", \"dtype\": \"{}\", \"flash\": {}, \"threads\": {}, "
             "\"layers\": {}, \"hidden\": {}, \"seq\": {}, \"batch\": {}, \"tokens_per_s\": {:.1f}, "
             "\"ms_per_step\": {:.1f}, \"gflops\": {:.1f}, \"peak_rss_mb\": {:.1f}, \"peak_tensor_mb\": {:.1f}, "
             "\"loss\": {:.4f}}}\n",
             layout, dtype, flash, threads, layers, hidden, seq, batch, batch * seq / s, 1e3 * s, flops / s / 1e9,
             qk::peak_rss_bytes() / 1048576.0, qk::memory_stats(qk::kCPU).peak_allocated / 1048576.0, loss_val);
  return 0;
}
