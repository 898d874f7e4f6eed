// GPTModel and its pipeline chunks with MoE layers (and multi-latent
// attention): the layer spec puts an MoELayer in the layers the MoE pattern
// names and the dense MLP elsewhere; moe_layers finds them in layer order;
// the chunks of a 2- and 4-stage split (MoE and dense layers, MLA, skipped
// pieces of every kind) hold the unsplit model's weights by name and chained
// give its loss. Expert parallelism over ranks is tested end to end in
// tests/cli/pretrain_gpt_moe_test.cc.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "qk/tensor/generator.h"
#include "qk/transformer/gpt_pipeline.h"
#include "qk/transformer/mla.h"

namespace qk::transformer {
namespace {

constexpr int64_t kBatch = 2, kSeq = 16;

// 4 layers, the first and third dense (Megatron's --moe-layer-freq [0,1,0,1]).
TransformerConfig tiny_moe(bool mla) {
  TransformerConfig c;
  c.num_layers = 4;
  c.hidden_size = 32;
  c.num_attention_heads = 4;
  c.seq_length = kSeq;
  c.vocab_size = 96;
  c.position_embedding_type = PositionEmbeddingType::rope;
  c.hidden_dropout = 0;
  c.attention_dropout = 0;
  c.num_moe_experts = 4;
  c.moe_router_topk = 2;
  c.moe_ffn_hidden_size = 16;
  c.moe_shared_expert_intermediate_size = 16;
  c.moe_layer_pattern = {0, 1, 0, 1};
  c.moe_expert_capacity_factor = 1.0;
  c.moe_aux_loss_coeff = 1e-2;
  if (mla) {
    c.multi_latent_attention = true;
    c.q_lora_rank = 16;
    c.kv_lora_rank = 8;
    c.qk_head_dim = 8;
    c.qk_pos_emb_head_dim = 4;
    c.v_head_dim = 8;
  }
  return c;
}

bool same(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.contiguous().to_vector<float>() == b.contiguous().to_vector<float>();
}

Tensor tokens(int64_t offset) {
  std::vector<int64_t> v;
  for (int64_t i = 0; i < kBatch * kSeq; ++i) v.push_back((i * 7 + offset) % 96);
  return from_vector<int64_t>(v, {kBatch, kSeq});
}

TEST(GPTMoeModel, MoeLayersWhereThePatternSaysDenseMlpElsewhere) {
  manual_seed(1);
  GPTModel model(tiny_moe(false));
  const std::vector<MoELayerImpl*> moe = moe_layers(*model);
  ASSERT_EQ(moe.size(), 2u);
  for (size_t i = 0; i < 4; ++i) {
    const auto* layer = dynamic_cast<const TransformerLayerImpl*>(model->decoder->layers->ptr(i).get());
    ASSERT_NE(layer, nullptr);
    const bool is_moe = dynamic_cast<const MoELayerImpl*>(layer->mlp.get()) != nullptr;
    EXPECT_EQ(is_moe, i % 2 == 1) << "layer " << i;
    if (is_moe) {
      EXPECT_EQ(layer->mlp.get(), moe[i / 2]) << "moe_layers in layer order";
    }
  }
  const auto params = model->named_parameters();
  EXPECT_TRUE(params.contains("decoder.layers.0.mlp.linear_fc1.weight"));
  EXPECT_TRUE(params.contains("decoder.layers.1.mlp.router.weight"));
  EXPECT_TRUE(params.contains("decoder.layers.3.mlp.experts.local_experts.3.linear_fc2.weight"));
  EXPECT_TRUE(params.contains("decoder.layers.3.mlp.shared_experts.linear_fc1.weight"));
  EXPECT_TRUE(is_expert_parameter("decoder.layers.3.mlp.experts.local_experts.3.linear_fc2.weight"));
  EXPECT_FALSE(is_expert_parameter("decoder.layers.3.mlp.shared_experts.linear_fc1.weight"));
  // The group constructor without groups is the local model, draw for draw.
  manual_seed(1);
  GPTModel again(tiny_moe(false), GPTModelParallel{});
  for (const auto& item : model->named_parameters())
    EXPECT_TRUE(same(again->named_parameters()[item.key()], item.value())) << item.key();
  // An expert-parallel size without its group is refused.
  TransformerConfig ep2 = tiny_moe(false);
  ep2.expert_model_parallel_size = 2;
  EXPECT_THROW(GPTModel(ep2, GPTModelParallel{}), Error);
}

// Each rank's chunks, built from the same seed as that rank would.
std::vector<GPTModelChunk> chunks_in_order(const TransformerConfig& c, int pp) {
  parallel::PipelineSplitOptions so;
  so.num_layers = c.num_layers;
  so.pipeline_model_parallel_size = pp;
  const auto split = parallel::PipelineLayerSplit::make(so);
  std::vector<GPTModelChunk> out;
  for (int r = 0; r < pp; ++r) {
    manual_seed(1234);
    for (auto& ch : build_gpt_model_chunks(c, split, r)) out.push_back(ch);
  }
  return out;
}

void expect_chunks_are_the_unsplit_model(bool mla, int pp) {
  const TransformerConfig c = tiny_moe(mla);
  manual_seed(1234);
  GPTModel model(c);
  model->train();
  const std::vector<GPTModelChunk> chunks = chunks_in_order(c, pp);
  size_t seen = 0;
  const auto whole = model->named_parameters();
  for (const auto& ch : chunks)
    for (const auto& item : ch->named_parameters()) {
      if (ch->holds_embedding_copy() && item.key() == "output_layer.weight") continue;  // the tied copy
      ASSERT_TRUE(whole.contains(item.key())) << item.key();
      EXPECT_TRUE(same(whole[item.key()], item.value())) << item.key();
      ++seen;
    }
  EXPECT_EQ(seen, whole.size());
  const Tensor x = tokens(0), y = tokens(1);
  const Tensor want = model->forward(x, Tensor(), y);
  Tensor h;
  for (size_t i = 0; i < chunks.size(); ++i) {
    chunks[i]->train();
    GPTChunkInput in;
    if (i == 0) in.tokens = x;
    else in.hidden = h;
    if (i + 1 == chunks.size()) in.labels = y;
    h = chunks[i]->forward(in);
  }
  EXPECT_NEAR(h.item<double>(), want.item<double>(), 1e-6 * std::abs(want.item<double>()));
}

TEST(GPTMoeModel, TwoStageChunksAreTheUnsplitModel) { expect_chunks_are_the_unsplit_model(false, 2); }
TEST(GPTMoeModel, FourStageChunksWithMultiLatentAttentionAreTheUnsplitModel) {
  expect_chunks_are_the_unsplit_model(true, 4);
}

}  // namespace
}  // namespace qk::transformer
