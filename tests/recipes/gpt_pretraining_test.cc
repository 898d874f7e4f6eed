// GptPretraining, pretrain_gpt() in Megatron's stages: run one stage at a
// time, with a look between them, it trains exactly as pretrain_gpt() does;
// a stage called out of order or twice says which one is missing.
#include "qk/recipes/gpt_pretraining.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "data/test_util.h"
#include "megatron_args_test_util.h"
#include "qk/base/error.h"
#include "qk/base/file_io.h"

namespace qk::test {
namespace {

Argv tiny(const std::string& save) {
  return {"--num-layers", "2", "--hidden-size", "32", "--num-attention-heads", "4", "--seq-length", "16",
          "--max-position-embeddings", "16", "--micro-batch-size", "2", "--global-batch-size", "4",
          "--train-iters", "3", "--lr", "1e-2", "--mock-data", "--tokenizer-type", "NullTokenizer",
          "--vocab-size", "4096", "--eval-iters", "1", "--eval-interval", "2", "--log-interval", "1",
          "--save", save, "--save-interval", "3"};
}

recipes::PretrainGptOptions quiet(std::vector<std::string>* lines) {
  recipes::PretrainGptOptions o;
  o.print = [lines](const std::string& l) { lines->push_back(l); };
  o.measure_gemm_peak = false;
  return o;
}

std::vector<std::string> lines_with(const std::vector<std::string>& lines, const std::string& what) {
  std::vector<std::string> out;
  for (const std::string& l : lines)
    if (l.find(what) != std::string::npos) out.push_back(l.substr(l.find(what)));  // past the timestamp
  return out;
}

TEST(GptPretraining, StagesOneByOneTrainAsPretrainGpt) {
  TempDir whole("gpt_stages_whole"), staged("gpt_stages_staged");
  std::vector<std::string> a_lines, b_lines;
  const recipes::PretrainGptResult a =
      recipes::pretrain_gpt(recipes::parse_megatron_args(tiny(whole.path()), options()).args, quiet(&a_lines));

  recipes::GptPretraining run(recipes::parse_megatron_args(tiny(staged.path()), options()).args, quiet(&b_lines));
  run.initialize();
  EXPECT_EQ(run.job().size, 1);
  EXPECT_EQ(run.job().output_dir, staged.path());
  run.setup_model_and_optimizer();
  EXPECT_EQ(run.config().num_layers, 2);
  EXPECT_NE(run.gpt().get(), nullptr);
  EXPECT_EQ(run.pipeline_stage(), nullptr);
  EXPECT_EQ(run.result().num_parameters, a.num_parameters);
  EXPECT_EQ(run.trainer().progress().iteration, 0);
  run.build_data_iterators();
  EXPECT_NE(run.datasets().train, nullptr);
  ASSERT_EQ(run.train(), train::ExitReason::finished);
  run.evaluate();
  const recipes::PretrainGptResult& b = run.result();

  EXPECT_EQ(b.train.progress.iteration, 3);
  ASSERT_TRUE(a.final_valid && b.final_valid && a.final_test && b.final_test);
  EXPECT_EQ(b.final_valid->metrics, a.final_valid->metrics);
  EXPECT_EQ(b.final_test->metrics, a.final_test->metrics);
  EXPECT_EQ(lines_with(b_lines, "lm loss:"), lines_with(a_lines, "lm loss:"));
  EXPECT_EQ(read_file(staged.path() + "/iter_0000000003/model.safetensors"),
            read_file(whole.path() + "/iter_0000000003/model.safetensors"));
  EXPECT_TRUE(file_exists(staged.path() + "/training_curves.png"));
}

TEST(GptPretraining, StagesOutOfOrderSayWhatIsMissing) {
  TempDir dir("gpt_stages_order");
  std::vector<std::string> lines;
  recipes::GptPretraining run(recipes::parse_megatron_args(tiny(dir.path()), options()).args, quiet(&lines));
  auto message = [](auto&& f) {
    try {
      f();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  EXPECT_NE(message([&] { run.setup_model_and_optimizer(); }).find("needs initialize() first"), std::string::npos);
  EXPECT_NE(message([&] { run.trainer(); }).find("needs setup_model_and_optimizer() first"), std::string::npos);
  run.initialize();
  EXPECT_NE(message([&] { run.initialize(); }).find("already run"), std::string::npos);
  EXPECT_NE(message([&] { run.train(); }).find("needs build_data_iterators() first"), std::string::npos);
  run.setup_model_and_optimizer();
  run.build_data_iterators();
  EXPECT_NE(message([&] { run.evaluate(); }).find("needs train() first"), std::string::npos);
}

}  // namespace
}  // namespace qk::test
