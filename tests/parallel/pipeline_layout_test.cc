// The pipeline's layer split against Megatron's examples and formulas
// (get_transformer_layer_offset, get_num_layers_to_build, the arguments'
// and TransformerConfig's checks), worked by hand.
#include "qk/parallel/pipeline_layout.h"

#include <gtest/gtest.h>

#include "qk/base/error.h"

namespace qk::parallel {
namespace {

PipelineSplitOptions options(int64_t layers, int64_t pp) {
  PipelineSplitOptions o;
  o.num_layers = layers;
  o.pipeline_model_parallel_size = pp;
  return o;
}

// (offset, count) of every (pp rank, vp stage).
std::vector<std::vector<std::pair<int64_t, int64_t>>> chunks_of(const PipelineLayerSplit& s) {
  std::vector<std::vector<std::pair<int64_t, int64_t>>> out(static_cast<size_t>(s.pipeline_size()));
  for (int r = 0; r < s.pipeline_size(); ++r)
    for (int vp = 0; vp < s.virtual_pipeline_size(); ++vp) out[r].push_back({s.layer_offset(r, vp), s.num_layers(r, vp)});
  return out;
}

void expect_error(const PipelineSplitOptions& o, const std::vector<std::string>& words) {
  try {
    PipelineLayerSplit::make(o);
    ADD_FAILURE() << "no error";
  } catch (const ValueError& e) {
    for (const auto& w : words) EXPECT_NE(std::string(e.what()).find(w), std::string::npos) << e.what();
  }
}

TEST(PipelineLayerSplit, EvenStagesHoldConsecutiveLayers) {
  const auto s = PipelineLayerSplit::make(options(8, 2));
  EXPECT_FALSE(s.interleaved());
  EXPECT_EQ(chunks_of(s), (std::vector<std::vector<std::pair<int64_t, int64_t>>>{{{0, 4}}, {{4, 4}}}));
  EXPECT_TRUE(s.is_first_stage(0, 0));
  EXPECT_FALSE(s.is_first_stage(1, 0));
  EXPECT_TRUE(s.is_last_stage(1, 0));
  EXPECT_EQ(s.format(), "pp 0: [0-3]; pp 1: [4-7]");
}

// Megatron's comments: 8 layers, 2 stages, 4 (2) model chunks.
TEST(PipelineLayerSplit, VirtualStagesFollowMegatronsExamples) {
  PipelineSplitOptions o = options(8, 2);
  o.num_layers_per_virtual_pipeline_stage = 1;
  const auto four = PipelineLayerSplit::make(o);
  EXPECT_EQ(four.virtual_pipeline_size(), 4);
  EXPECT_EQ(four.format(), "pp 0: [0] [2] [4] [6]; pp 1: [1] [3] [5] [7]");
  o.num_layers_per_virtual_pipeline_stage = 0;
  o.num_virtual_stages_per_pipeline_rank = 2;
  const auto two = PipelineLayerSplit::make(o);
  EXPECT_EQ(two.format(), "pp 0: [0-1] [4-5]; pp 1: [2-3] [6-7]");
  EXPECT_TRUE(two.is_last_stage(1, 1));
  EXPECT_FALSE(two.is_last_stage(1, 0));
  EXPECT_EQ(two.owner(5), (std::pair<int, int>{0, 1}));
  EXPECT_EQ(two.owner(2), (std::pair<int, int>{1, 0}));
}

TEST(PipelineLayerSplit, UnevenFirstAndLastStages) {
  PipelineSplitOptions o = options(10, 4);
  o.decoder_first_pipeline_num_layers = 1;
  o.decoder_last_pipeline_num_layers = 3;
  // Megatron: offset (r - 1) x 3 + 1 for r > 0.
  EXPECT_EQ(PipelineLayerSplit::make(o).format(), "pp 0: [0]; pp 1: [1-3]; pp 2: [4-6]; pp 3: [7-9]");
  PipelineSplitOptions last_only = options(7, 3);
  last_only.decoder_last_pipeline_num_layers = 1;
  EXPECT_EQ(PipelineLayerSplit::make(last_only).format(), "pp 0: [0-2]; pp 1: [3-5]; pp 2: [6]");
  PipelineSplitOptions two = options(5, 2);
  two.decoder_first_pipeline_num_layers = 2;
  two.decoder_last_pipeline_num_layers = 3;
  EXPECT_EQ(PipelineLayerSplit::make(two).format(), "pp 0: [0-1]; pp 1: [2-4]");
}

// Megatron's interleaved uneven offset: vp x (L / v) + first / v + (r - 1) x (middle / v).
TEST(PipelineLayerSplit, UnevenStagesWithVirtualStages) {
  PipelineSplitOptions o = options(12, 3);
  o.num_virtual_stages_per_pipeline_rank = 2;
  o.decoder_first_pipeline_num_layers = 2;
  o.decoder_last_pipeline_num_layers = 2;
  const auto s = PipelineLayerSplit::make(o);
  EXPECT_EQ(s.format(), "pp 0: [0] [6]; pp 1: [1-4] [7-10]; pp 2: [5] [11]");
  EXPECT_EQ(s.num_layers_on_rank(1), 8);
  for (int64_t l = 0; l < 12; ++l) {
    const auto [r, vp] = s.owner(l);
    EXPECT_GE(l, s.layer_offset(r, vp));
    EXPECT_LT(l, s.layer_offset(r, vp) + s.num_layers(r, vp));
  }
}

// Megatron's standalone embedding and loss (--account-for-embedding-in-
// pipeline-split, --account-for-loss-in-pipeline-split): Llama 3 405B's 126
// layers over 16 stages of 8 one-slot chunks, the first chunk holding only
// the embedding and the last only the loss.
TEST(PipelineLayerSplit, EmbeddingAndLossTakeALayersSlot) {
  PipelineSplitOptions o = options(126, 16);
  o.num_virtual_stages_per_pipeline_rank = 8;
  o.account_for_embedding = true;
  o.account_for_loss = true;
  const PipelineLayerSplit s = PipelineLayerSplit::make(o);
  EXPECT_EQ(s.num_layers(0, 0), 0);
  EXPECT_EQ(s.num_layers(15, 7), 0);
  EXPECT_EQ(s.num_layers(1, 0), 1);
  EXPECT_EQ(s.layer_offset(1, 0), 0);    // the first layer is on stage 1
  EXPECT_EQ(s.layer_offset(0, 1), 15);   // after chunk 0 of stages 1..15
  EXPECT_EQ(s.layer_offset(14, 7), 125);  // the last layer
  EXPECT_EQ(s.num_layers_on_rank(0), 7);
  EXPECT_EQ(s.num_layers_on_rank(15), 7);
  EXPECT_EQ(s.num_layers_on_rank(7), 8);
  EXPECT_EQ(s.owner(0), std::make_pair(1, 0));
  EXPECT_EQ(s.owner(125), std::make_pair(14, 7));
  // Without interleaving: 6 layers and the two slots over 2 stages of 4.
  PipelineSplitOptions plain = options(6, 2);
  plain.account_for_embedding = true;
  plain.account_for_loss = true;
  const PipelineLayerSplit t = PipelineLayerSplit::make(plain);
  EXPECT_EQ(t.num_layers(0, 0), 3);
  EXPECT_EQ(t.num_layers(1, 0), 3);
  EXPECT_EQ(t.format(), "pp 0: [0-2]; pp 1: [3-5]");
  PipelineSplitOptions odd = options(126, 16);
  odd.account_for_embedding = true;
  expect_error(odd, {"--num-layers (126) plus the embedding and loss slots (1)"});
}

TEST(PipelineLayerSplit, SplitsThatDoNotFitNameTheFlags) {
  expect_error(options(7, 2), {"--num-layers (7)", "--pipeline-model-parallel-size (2)",
                               "--decoder-first-pipeline-num-layers"});
  PipelineSplitOptions both = options(8, 2);
  both.num_layers_per_virtual_pipeline_stage = 2;
  both.num_virtual_stages_per_pipeline_rank = 2;
  expect_error(both, {"only one of --num-layers-per-virtual-pipeline-stage and --num-virtual-stages-per-pipeline-rank"});
  PipelineSplitOptions per = options(8, 2);
  per.num_layers_per_virtual_pipeline_stage = 3;
  expect_error(per, {"layers per pipeline stage (4", "--num-layers-per-virtual-pipeline-stage (3)"});
  PipelineSplitOptions one_stage = options(8, 1);
  one_stage.num_virtual_stages_per_pipeline_rank = 2;
  expect_error(one_stage, {"--pipeline-model-parallel-size > 1"});
  PipelineSplitOptions left = options(10, 4);
  left.decoder_first_pipeline_num_layers = 1;
  left.decoder_last_pipeline_num_layers = 2;
  expect_error(left, {"2 other pipeline stages (7", "--decoder-first/last-pipeline-num-layers"});
  PipelineSplitOptions sum = options(8, 2);
  sum.decoder_first_pipeline_num_layers = 3;
  sum.decoder_last_pipeline_num_layers = 3;
  expect_error(sum, {"must equal --num-layers (8)"});
  PipelineSplitOptions zero = options(8, 2);
  zero.decoder_first_pipeline_num_layers = 0;
  expect_error(zero, {"--decoder-first-pipeline-num-layers must be > 0"});
  PipelineSplitOptions chunks = options(12, 3);
  chunks.num_virtual_stages_per_pipeline_rank = 2;
  chunks.decoder_first_pipeline_num_layers = 3;
  expect_error(chunks, {"--decoder-first-pipeline-num-layers (3 layers)", "virtual stages per rank (2"});
  PipelineSplitOptions uneven_per = options(8, 2);
  uneven_per.num_layers_per_virtual_pipeline_stage = 1;
  uneven_per.decoder_last_pipeline_num_layers = 2;
  expect_error(uneven_per, {"need --num-virtual-stages-per-pipeline-rank"});
  expect_error(options(0, 1), {"--num-layers must be > 0"});
}

}  // namespace
}  // namespace qk::parallel
