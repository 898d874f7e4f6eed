// Full activation recompute inside pipeline chunks (Megatron's
// --recompute-granularity full with the uniform and block methods, applied
// by each chunk to its own layers): recompute_num_layers counts layers per
// chunk (the checkpointed regions of each chunk's graph are counted), the
// loss and every gradient equal the run that keeps all activations bit for
// bit with dropout on, also when a second micro-batch's forward runs between
// a micro-batch's forward and backward (as 1F1B does), and the forward
// pre-hook sees every part of a chunk once, in order. Both stages' chunks
// run in one process, chained in the unsplit model's order.
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "qk/autograd/autograd.h"
#include "qk/tensor/generator.h"
#include "qk/transformer/gpt_pipeline.h"

namespace qk::transformer {
namespace {

constexpr int64_t kBatch = 2, kSeq = 16;

TransformerConfig tiny(int64_t layers, RecomputeGranularity g = RecomputeGranularity::none,
                       RecomputeMethod m = RecomputeMethod::none, int64_t n = 0) {
  TransformerConfig c;
  c.num_layers = layers;
  c.hidden_size = 32;
  c.num_attention_heads = 4;
  c.seq_length = kSeq;
  c.vocab_size = 96;
  c.position_embedding_type = PositionEmbeddingType::rope;
  c.hidden_dropout = 0.1;  // the re-run must draw the forward's masks
  c.attention_dropout = 0.1;
  c.recompute_granularity = g;
  c.recompute_method = m;
  c.recompute_num_layers = n;
  return c;
}

// The whole model as chunks in forward order: virtual stage 0 of every
// pipeline rank, then virtual stage 1, ... (each rank's chunks built as
// that rank would, from the same seed).
std::vector<GPTModelChunk> chunks_in_order(const TransformerConfig& c, int pp, int vp) {
  parallel::PipelineSplitOptions so;
  so.num_layers = c.num_layers;
  so.pipeline_model_parallel_size = pp;
  so.num_virtual_stages_per_pipeline_rank = vp > 1 ? vp : 0;
  const auto split = parallel::PipelineLayerSplit::make(so);
  std::vector<std::vector<GPTModelChunk>> by_rank;
  for (int r = 0; r < pp; ++r) {
    manual_seed(1234);
    by_rank.push_back(build_gpt_model_chunks(c, split, r));
  }
  std::vector<GPTModelChunk> out;
  for (int v = 0; v < vp; ++v)
    for (int r = 0; r < pp; ++r) out.push_back(by_rank[static_cast<size_t>(r)][static_cast<size_t>(v)]);
  return out;
}

struct Tokens {
  Tensor tokens, labels;
};

Tokens sample(int64_t i, int64_t vocab) {
  Generator g(7 + static_cast<uint64_t>(i));
  return {randint(0, vocab, {kBatch, kSeq}, DType::i64, g), randint(0, vocab, {kBatch, kSeq}, DType::i64, g)};
}

Tensor chained_loss(std::vector<GPTModelChunk>& chunks, const Tokens& t) {
  Tensor h;
  for (auto& ch : chunks) {
    GPTChunkInput in;
    if (ch->pre_process()) in.tokens = t.tokens;
    else in.hidden = h;
    if (ch->post_process()) in.labels = t.labels;
    h = ch->forward(in);
  }
  return h;
}

struct Result {
  std::vector<float> losses;
  std::vector<std::pair<std::string, std::vector<float>>> grads;
};

// Two micro-batches as 1F1B runs them on one rank: both forwards, then both
// backwards (dropout on: the second forward moves the generator on).
Result train_step(const TransformerConfig& c, int pp, int vp) {
  std::vector<GPTModelChunk> chunks = chunks_in_order(c, pp, vp);
  manual_seed(99);  // the dropout masks' stream
  std::vector<Tensor> losses;
  for (int64_t i = 0; i < 2; ++i) losses.push_back(chained_loss(chunks, sample(i, c.vocab_size)));
  Result r;
  for (Tensor& l : losses) {
    l.backward();
    r.losses.push_back(l.item<float>());
  }
  for (auto& ch : chunks)
    for (const auto& p : ch->named_parameters())
      r.grads.emplace_back(std::to_string(ch->vp_stage()) + ":" + p.key(), p.value().grad().to_vector<float>());
  return r;
}

void expect_identical(const Result& want, const Result& got, const std::string& what) {
  EXPECT_EQ(want.losses, got.losses) << what;
  ASSERT_EQ(want.grads.size(), got.grads.size()) << what;
  for (size_t i = 0; i < want.grads.size(); ++i)
    EXPECT_EQ(want.grads[i].second, got.grads[i].second) << what << ": " << want.grads[i].first;
}

// Checkpointed regions in the graph above t (down to the chunk's inputs).
int checkpoint_regions(const Tensor& t) {
  std::vector<std::shared_ptr<autograd::Node>> stack{t.grad_fn()};
  std::set<const autograd::Node*> seen;
  int n = 0;
  while (!stack.empty()) {
    auto node = stack.back();
    stack.pop_back();
    if (!node || !seen.insert(node.get()).second) continue;
    n += node->name() == "CheckpointBackward";
    for (const auto& e : node->next_edges) stack.push_back(e.fn);
  }
  return n;
}

// Each chunk's regions, its input a fresh leaf (as the schedule gives it).
std::vector<int> regions_per_chunk(const TransformerConfig& c, int pp, int vp) {
  std::vector<GPTModelChunk> chunks = chunks_in_order(c, pp, vp);
  const Tokens t = sample(0, c.vocab_size);
  std::vector<int> out;
  Tensor h;
  for (auto& ch : chunks) {
    GPTChunkInput in;
    if (ch->pre_process()) in.tokens = t.tokens;
    else in.hidden = h.detach().requires_grad_(true);
    if (ch->post_process()) in.labels = t.labels;
    h = ch->forward(in);
    out.push_back(checkpoint_regions(h));
  }
  return out;
}

// 8 layers over 2 stages: 4 per chunk, or 2 per chunk with 2 virtual stages.
TEST(GPTPipelineRecompute, NumLayersCountsLayersPerChunk) {
  using G = RecomputeGranularity;
  using M = RecomputeMethod;
  EXPECT_EQ(regions_per_chunk(tiny(8), 2, 1), (std::vector<int>{0, 0}));
  EXPECT_EQ(regions_per_chunk(tiny(8, G::full, M::uniform, 1), 2, 1), (std::vector<int>{4, 4}));
  EXPECT_EQ(regions_per_chunk(tiny(8, G::full, M::uniform, 2), 2, 1), (std::vector<int>{2, 2}));
  EXPECT_EQ(regions_per_chunk(tiny(8, G::full, M::uniform, 3), 2, 1), (std::vector<int>{2, 2}))
      << "groups of 3 over 4 layers: [0-2] [3]";
  EXPECT_EQ(regions_per_chunk(tiny(8, G::full, M::block, 1), 2, 1), (std::vector<int>{1, 1}));
  EXPECT_EQ(regions_per_chunk(tiny(8, G::full, M::block, 3), 2, 1), (std::vector<int>{3, 3}));
  EXPECT_EQ(regions_per_chunk(tiny(8, G::full, M::block, 6), 2, 1), (std::vector<int>{4, 4}))
      << "block beyond the chunk's layers checkpoints all of them";
  EXPECT_EQ(regions_per_chunk(tiny(8, G::full, M::uniform, 2), 2, 2), (std::vector<int>{1, 1, 1, 1}));
  EXPECT_EQ(regions_per_chunk(tiny(8, G::full, M::block, 1), 2, 2), (std::vector<int>{1, 1, 1, 1}));
  EXPECT_EQ(regions_per_chunk(tiny(8, G::selective), 2, 1), (std::vector<int>{4, 4}))
      << "selective: the attention core of each layer";
}

TEST(GPTPipelineRecompute, GradientsEqualKeepingActivationsBitwiseWithDropout) {
  using G = RecomputeGranularity;
  using M = RecomputeMethod;
  for (const auto& [pp, vp] : {std::pair{2, 1}, std::pair{2, 2}}) {
    const std::string layout = "pp " + std::to_string(pp) + " vp " + std::to_string(vp);
    const Result plain = train_step(tiny(4), pp, vp);
    expect_identical(plain, train_step(tiny(4, G::full, M::uniform, 1), pp, vp), layout + ", full uniform 1");
    expect_identical(plain, train_step(tiny(4, G::full, M::uniform, 2), pp, vp), layout + ", full uniform 2");
    expect_identical(plain, train_step(tiny(4, G::full, M::block, 1), pp, vp), layout + ", full block 1");
  }
  // The comparisons could not fail if dropout were off.
  TransformerConfig off = tiny(4);
  off.hidden_dropout = off.attention_dropout = 0.0;
  EXPECT_NE(train_step(tiny(4), 2, 1).losses, train_step(off, 2, 1).losses);
}

TEST(GPTPipelineRecompute, ForwardPreHookSeesEveryPartOfAChunkInOrder) {
  const TransformerConfig c = tiny(4, RecomputeGranularity::full, RecomputeMethod::uniform, 2);
  std::vector<GPTModelChunk> chunks = chunks_in_order(c, 2, 1);
  std::vector<const nn::Module*> seen;
  for (auto& ch : chunks) ch->set_forward_pre_hook([&](const nn::Module& m) { seen.push_back(&m); });
  chained_loss(chunks, sample(0, c.vocab_size)).backward();  // the re-runs in backward call no hooks
  const auto layers0 = chunks[0]->decoder->named_children()["layers"];
  const auto layers1 = chunks[1]->decoder->named_children()["layers"];
  const std::vector<const nn::Module*> want{
      chunks[0]->embedding.get(),
      layers0->named_children()["0"].get(),
      layers0->named_children()["1"].get(),
      layers1->named_children()["2"].get(),
      layers1->named_children()["3"].get(),
      chunks[1]->final_layernorm.get(),
      chunks[1]->named_children()["output_layer"].get(),  // the tied copy's holder
  };
  EXPECT_EQ(seen, want);
}

}  // namespace
}  // namespace qk::transformer
