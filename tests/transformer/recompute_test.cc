// Activation recompute in the transformer (Megatron's --recompute-granularity
// full with --recompute-method uniform or block, and selective): the loss and
// every gradient equal the run that keeps all activations, bit for bit, with
// dropout on (f32 and bf16: the re-run computes the same thing in the same
// order); the tensor allocator's high-water mark over forward and backward
// drops; evaluation and no-grad forwards run plainly; Megatron's rules.
#include <gtest/gtest.h>

#include <cstdio>
#include <set>

#include "qk/autograd/autograd.h"
#include "qk/tensor/backend.h"
#include "qk/tensor/generator.h"
#include "qk/transformer/gpt_model.h"

namespace qk::transformer {
namespace {

TransformerConfig tiny(int64_t layers = 3, int64_t seq = 16) {
  TransformerConfig c;
  c.num_layers = layers;
  c.hidden_size = 32;
  c.num_attention_heads = 4;
  c.seq_length = seq;
  c.vocab_size = 96;
  c.position_embedding_type = PositionEmbeddingType::rope;
  c.hidden_dropout = 0.1;
  c.attention_dropout = 0.1;
  return c;
}

TransformerConfig with(TransformerConfig c, RecomputeGranularity g, RecomputeMethod m = RecomputeMethod::none,
                       int64_t n = 0) {
  c.recompute_granularity = g;
  c.recompute_method = m;
  c.recompute_num_layers = n;
  return c;
}

struct Result {
  float loss = 0;
  std::vector<std::pair<std::string, std::vector<float>>> grads;
  uint64_t peak_bytes = 0;  // allocator high-water mark above the start, forward + backward
};

Result train_step(const TransformerConfig& c, int64_t batch = 2) {
  manual_seed(1234);
  GPTModel model(c);
  Generator g(7);
  const Tensor tokens = randint(0, c.vocab_size, {batch, c.seq_length}, DType::i64, g);
  const Tensor labels = randint(0, c.vocab_size, {batch, c.seq_length}, DType::i64, g);
  manual_seed(99);  // the dropout masks' stream
  const uint64_t base = memory_stats(kCPU).allocated;
  reset_peak_memory(kCPU);
  Tensor loss = model->forward(tokens, Tensor(), labels);
  loss.backward();
  Result r;
  r.peak_bytes = memory_stats(kCPU).peak_allocated - base;
  r.loss = loss.item<float>();
  for (const auto& p : model->named_parameters())
    r.grads.emplace_back(p.key(), p.value().grad().to(DType::f32).to_vector<float>());
  return r;
}

void expect_identical(const Result& want, const Result& got, const std::string& what) {
  EXPECT_EQ(want.loss, got.loss) << what;
  ASSERT_EQ(want.grads.size(), got.grads.size());
  for (size_t i = 0; i < want.grads.size(); ++i)
    EXPECT_EQ(want.grads[i].second, got.grads[i].second) << what << ": " << want.grads[i].first;
}

void expect_recompute_is_exact(const TransformerConfig& base) {
  const Result plain = train_step(base);
  expect_identical(plain, train_step(with(base, RecomputeGranularity::full, RecomputeMethod::uniform, 1)),
                   "full uniform 1");
  expect_identical(plain, train_step(with(base, RecomputeGranularity::full, RecomputeMethod::uniform, 2)),
                   "full uniform 2 (groups of layers 0-1 and 2)");
  expect_identical(plain, train_step(with(base, RecomputeGranularity::full, RecomputeMethod::block, 2)),
                   "full block 2");
  expect_identical(plain, train_step(with(base, RecomputeGranularity::full, RecomputeMethod::block, 3)),
                   "full block 3");
  expect_identical(plain, train_step(with(base, RecomputeGranularity::selective)), "selective");
}

TEST(Recompute, GradientsEqualKeepingActivationsBitwiseWithDropoutF32) { expect_recompute_is_exact(tiny()); }

TEST(Recompute, GradientsEqualKeepingActivationsBitwiseWithDropoutBf16) {
  TransformerConfig c = tiny();
  c.params_dtype = DType::bf16;
  expect_recompute_is_exact(c);
}

TEST(Recompute, LlamaLayoutWithFlashAttentionIsExactToo) {
  TransformerConfig c = tiny();
  c.normalization = Normalization::RMSNorm;
  c.set_swiglu();
  c.num_query_groups = 2;
  c.qk_layernorm = true;
  c.add_bias_linear = false;
  c.share_embeddings_and_output_weights = false;
  c.use_flash_attn = true;
  expect_recompute_is_exact(c);
}

// The comparisons above could not fail if dropout were off.
TEST(Recompute, DropoutIsOnInThoseRuns) {
  TransformerConfig off = tiny();
  off.hidden_dropout = off.attention_dropout = 0.0;
  EXPECT_NE(train_step(tiny()).loss, train_step(off).loss);
}

// Long sequences, where the [T x T] attention probabilities dominate: full
// recompute keeps one layer's activations at a time, selective drops the
// attention matrices (scores, probabilities, dropout masks) of every layer.
TEST(Recompute, LowersThePeakOfTheTensorAllocator) {
  const TransformerConfig c = tiny(4, 128);
  const uint64_t plain = train_step(c, 4).peak_bytes;
  const uint64_t full = train_step(with(c, RecomputeGranularity::full, RecomputeMethod::uniform, 1), 4).peak_bytes;
  const uint64_t block = train_step(with(c, RecomputeGranularity::full, RecomputeMethod::block, 2), 4).peak_bytes;
  const uint64_t selective = train_step(with(c, RecomputeGranularity::selective), 4).peak_bytes;
  std::printf("allocator peak over forward+backward: plain %.2f MiB, full uniform 1 %.2f, block 2 %.2f, "
              "selective %.2f\n",
              plain / 1048576.0, full / 1048576.0, block / 1048576.0, selective / 1048576.0);
  EXPECT_LT(full, plain * 6 / 10) << "full " << full << " vs " << plain;
  EXPECT_LT(block, plain * 85 / 100) << "block " << block << " vs " << plain;
  EXPECT_GT(block, full) << "block keeps two layers' activations";
  EXPECT_LT(selective, plain * 8 / 10) << "selective " << selective << " vs " << plain;
}

// Whether the graph above t has a node called `name`.
bool graph_has(const Tensor& t, const std::string& name) {
  std::vector<std::shared_ptr<autograd::Node>> stack{t.grad_fn()};
  std::set<const autograd::Node*> seen;
  while (!stack.empty()) {
    auto n = stack.back();
    stack.pop_back();
    if (!n || !seen.insert(n.get()).second) continue;
    if (n->name() == name) return true;
    for (const auto& e : n->next_edges) stack.push_back(e.fn);
  }
  return false;
}

TEST(Recompute, OnlyTrainingWithGradientsCheckpoints) {
  for (const TransformerConfig& c : {with(tiny(), RecomputeGranularity::full, RecomputeMethod::uniform, 1),
                                     with(tiny(), RecomputeGranularity::selective)}) {
    manual_seed(1);
    GPTModel model(c);
    const Tensor tokens = randint(0, c.vocab_size, {1, c.seq_length}, DType::i64);
    EXPECT_TRUE(graph_has(model->hidden_states(tokens), "CheckpointBackward"));
    model->eval();
    EXPECT_FALSE(graph_has(model->hidden_states(tokens), "CheckpointBackward"));
    auto cache = model->make_kv_cache(1, c.seq_length);
    EXPECT_NO_THROW(model->forward_step(tokens, cache));
  }
  TransformerConfig flash = with(tiny(), RecomputeGranularity::selective);
  flash.use_flash_attn = true;  // nothing to recompute
  manual_seed(1);
  GPTModel model(flash);
  EXPECT_FALSE(graph_has(model->hidden_states(randint(0, 96, {1, 16}, DType::i64)), "CheckpointBackward"));
}

TEST(Recompute, ForwardPreHookSeesEveryPartInOrder) {
  TransformerConfig c = with(tiny(2), RecomputeGranularity::full, RecomputeMethod::uniform, 2);
  c.share_embeddings_and_output_weights = false;
  manual_seed(1);
  GPTModel model(c);
  std::vector<const nn::Module*> seen;
  model->set_forward_pre_hook([&](const nn::Module& m) { seen.push_back(&m); });
  const Tensor tokens = randint(0, c.vocab_size, {1, c.seq_length}, DType::i64);
  model->forward(tokens, Tensor(), tokens).backward();  // the re-runs in backward call no hooks
  const std::vector<const nn::Module*> want{model->embedding.get(), model->decoder->layers->ptr(0).get(),
                                            model->decoder->layers->ptr(1).get(),
                                            model->decoder->final_layernorm.get(), model->output_layer.get()};
  EXPECT_EQ(seen, want);
}

TEST(Recompute, MegatronsRulesAreChecked) {
  auto error = [](TransformerConfig c) {
    try {
      c.validate();
    } catch (const ValueError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(error(with(tiny(), RecomputeGranularity::full)).find("needs recompute_method"), std::string::npos);
  EXPECT_NE(error(with(tiny(), RecomputeGranularity::full, RecomputeMethod::block, 4)).find("between 1 and"),
            std::string::npos);
  EXPECT_NE(error(with(tiny(), RecomputeGranularity::selective, RecomputeMethod::uniform)).find("not supported"),
            std::string::npos);
  EXPECT_NE(error(with(tiny(), RecomputeGranularity::selective, RecomputeMethod::none, 1)).find("must be unset"),
            std::string::npos);
  EXPECT_EQ(error(with(tiny(), RecomputeGranularity::full, RecomputeMethod::uniform, 3)), "");
  EXPECT_EQ(parse_recompute_granularity("selective"), RecomputeGranularity::selective);
  EXPECT_EQ(parse_recompute_method(""), RecomputeMethod::none);
  EXPECT_THROW(parse_recompute_method("every"), ValueError);
}

}  // namespace
}  // namespace qk::transformer
