// Graphed training steps (StepRunner::step(GraphedForwardStep), docs/cuda.md
// "CUDA graphs") on the complete loopback device, whose graphs record each
// kernel call and copy and replay them without the host code that queued
// them, as a CUDA graph does: a GPT (tiny Llama, AdamW, clipping, two
// micro-batches) and a ResNet with batch norm (SGD with momentum) trained
// graphed end with the eager run's weights bit for bit, step by step the
// same losses; the forward's host code runs only at the capture; what a
// graph cannot record is refused, naming it.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "common/device_compare.h"
#include "common/scratch_dir.h"
#include "common/tiny_cifar.h"
#include "common/tiny_gpt.h"
#include "harness/loopback_backend.h"
#include "harness/quiet_pretrain.h"
#include "qk/autograd/autocast.h"
#include "qk/autograd/functions.h"
#include "qk/autograd/llm_ops.h"
#include "qk/base/error.h"
#include "qk/base/file_io.h"
#include "qk/recipes/cifar10_trainer.h"
#include "qk/recipes/gpt_pretrain.h"
#include "qk/recipes/megatron_args.h"
#include "qk/models/cifar10.h"
#include "qk/optim/adam.h"
#include "qk/optim/mixed_precision_optimizer.h"
#include "qk/optim/sgd.h"
#include "qk/tensor/backend.h"
#include "qk/tensor/generator.h"
#include "qk/tensor/ops/elementwise.h"
#include "qk/tensor/ops/reduce.h"
#include "qk/tensor/ops/view.h"
#include "qk/train/step_runner.h"
#include "qk/transformer/gpt_model.h"

namespace {

namespace fs = std::filesystem;
using qk::Tensor;
const qk::Device kDev = qk::harness::kLoopback;
constexpr int64_t kSteps = 6, kMicro = 2;

// Each step's micro-batches (tokens, labels), on the device.
std::vector<std::vector<std::pair<Tensor, Tensor>>> gpt_batches() {
  qk::manual_seed(11);
  std::vector<std::vector<std::pair<Tensor, Tensor>>> b(kSteps);
  for (auto& step : b)
    for (int64_t i = 0; i < kMicro; ++i)
      step.emplace_back(qk::ops::to_device(qk::randint(0, 100, {2, 16}), kDev),
                        qk::ops::to_device(qk::randint(0, 100, {2, 16}), kDev));
  return b;
}

struct GptRun {
  std::vector<double> losses;
  std::vector<Tensor> params;
  int64_t forward_calls = 0;
};

qk::train::MicroBatchOutput gpt_output(const Tensor& loss) {
  qk::train::Metric lm;
  lm.count = 32;
  lm.device_sum = qk::ops::binary_scalar(qk::BinaryOp::mul, qk::ops::cast(loss.detach(), qk::DType::f64), 32.0);
  return {loss, {{"lm loss", lm}}};
}

GptRun train_gpt(bool graphed) {
  qk::manual_seed(5);
  qk::transformer::GPTModel model(qk::test::tiny_llama());
  model->to(kDev);
  qk::optim::MixedPrecisionOptimizer opt(qk::optim::megatron_param_groups(*model),
                                         qk::optim::adamw(qk::optim::AdamWOptions(1e-2)), nullptr,
                                         {.clip_grad = 0.5});
  qk::train::StepRunner runner(opt, {}, {.num_microbatches = kMicro});
  const auto batches = gpt_batches();
  GptRun run;
  // The graph's inputs: the same device tensors every step.
  std::vector<Tensor> tokens, labels;
  for (int64_t i = 0; i < kMicro; ++i) {
    tokens.push_back(qk::ops::to_device(qk::zeros({2, 16}, qk::DType::i64), kDev));
    labels.push_back(qk::ops::to_device(qk::zeros({2, 16}, qk::DType::i64), kDev));
  }
  for (int64_t s = 0; s < kSteps; ++s) {
    qk::train::StepStats st;
    if (graphed) {
      qk::train::GraphedForwardStep g;
      g.device = kDev;
      g.load = [&](int64_t i) {
        qk::ops::copy_(tokens[i], batches[s][i].first);
        qk::ops::copy_(labels[i], batches[s][i].second);
        return std::map<std::string, qk::train::Metric>{};
      };
      g.forward = [&](int64_t i) {
        ++run.forward_calls;
        return gpt_output(model->forward(tokens[i], Tensor(), labels[i], Tensor()));
      };
      st = runner.step(g);
    } else {
      st = runner.step([&](int64_t i) {
        ++run.forward_calls;
        return gpt_output(model->forward(batches[s][i].first, Tensor(), batches[s][i].second, Tensor()));
      });
    }
    run.losses.push_back(st.metrics.at("lm loss"));
  }
  for (const Tensor& p : model->parameters()) run.params.push_back(qk::ops::to_device(p, qk::kCPU));
  return run;
}

TEST(LoopbackGraph, GraphedGptStepsEqualEagerStepsBitForBit) {
  qk::harness::install_complete_loopback();
  const GptRun eager = train_gpt(false), graphed = train_gpt(true);
  EXPECT_EQ(graphed.losses, eager.losses);
  ASSERT_EQ(graphed.params.size(), eager.params.size());
  for (size_t i = 0; i < eager.params.size(); ++i)
    EXPECT_EQ(qk::devtest::max_abs_diff(graphed.params[i], eager.params[i]), 0.0) << "parameter " << i;
  // Two warm-up steps and the capture run the forward's host code; the
  // three replays do not.
  EXPECT_EQ(eager.forward_calls, kSteps * kMicro);
  EXPECT_EQ(graphed.forward_calls, 3 * kMicro);
  // The losses moved: the replays trained.
  EXPECT_NE(eager.losses.front(), eager.losses.back());
}

// A ResNet with batch norm under SGD with momentum: running statistics and
// the batch counter are updated by the replays as by eager steps.
std::pair<std::vector<double>, std::vector<Tensor>> train_resnet(bool graphed) {
  qk::manual_seed(6);
  const qk::models::CifarModel m = qk::models::make_cifar_model("simple_resnet");
  m.module->to(kDev);
  qk::optim::MixedPrecisionOptimizer opt(qk::optim::single_param_group(*m.module),
                                         qk::optim::sgd(qk::optim::SGDOptions(0.05).momentum(0.9)), nullptr,
                                         {.clip_grad = 0});
  qk::train::StepRunner runner(opt, {}, {.num_microbatches = 1});
  qk::manual_seed(12);
  std::vector<std::pair<Tensor, Tensor>> data;
  for (int64_t s = 0; s < 4; ++s)
    data.emplace_back(qk::ops::to_device(qk::randn({4, 3, 32, 32}), kDev),
                      qk::ops::to_device(qk::randint(0, 10, {4}), kDev));
  const Tensor images = qk::ops::to_device(qk::zeros({4, 3, 32, 32}), kDev);
  const Tensor labels = qk::ops::to_device(qk::zeros({4}, qk::DType::i64), kDev);
  auto out = [&](const Tensor& x, const Tensor& y) {
    const Tensor loss = qk::cross_entropy(m.forward(x), y);
    return qk::train::MicroBatchOutput{loss, {{"loss", {0.0, 1.0, loss}}}};
  };
  std::vector<double> losses;
  for (int64_t s = 0; s < 4; ++s) {
    qk::train::StepStats st;
    if (graphed) {
      qk::train::GraphedForwardStep g;
      g.device = kDev;
      g.load = [&](int64_t) {
        qk::ops::copy_(images, data[s].first);
        qk::ops::copy_(labels, data[s].second);
        return std::map<std::string, qk::train::Metric>{};
      };
      g.forward = [&](int64_t) { return out(images, labels); };
      st = runner.step(g);
    } else {
      st = runner.step([&](int64_t) { return out(data[s].first, data[s].second); });
    }
    losses.push_back(st.metrics.at("loss"));
  }
  std::vector<Tensor> state;
  for (const auto& item : m.module->state_dict()) state.push_back(qk::ops::to_device(item.value(), qk::kCPU));
  return {losses, state};
}

TEST(LoopbackGraph, GraphedResnetStepsEqualEagerStepsWithBatchNormState) {
  qk::harness::install_complete_loopback();
  const auto eager = train_resnet(false), graphed = train_resnet(true);
  EXPECT_EQ(graphed.first, eager.first);
  ASSERT_EQ(graphed.second.size(), eager.second.size());
  for (size_t i = 0; i < eager.second.size(); ++i)
    EXPECT_EQ(qk::devtest::max_abs_diff(graphed.second[i], eager.second[i]), 0.0) << "state tensor " << i;
}

// Graphed inference (bench/simple_cnn_step --mode infer --cuda-graph 1): a
// ResNet's eval-mode forward recorded once, in f32 and under bf16 autocast,
// gives for each new image copied into its input the eager forward's logits
// bit for bit, and a replay runs none of the forward's host code.
TEST(LoopbackGraph, GraphedInferenceEqualsTheEagerForward) {
  qk::harness::install_complete_loopback();
  for (const bool bf16 : {false, true}) {
    qk::manual_seed(3);
    const qk::models::CifarModel m = qk::models::make_cifar_model("simple_resnet");
    m.module->to(kDev);
    m.module->eval();
    auto forward = [&](const Tensor& x) {
      qk::NoGradGuard no_grad;
      qk::autocast::Guard guard(qk::DType::bf16, bf16);
      return m.forward(x);
    };
    const Tensor image = qk::ops::to_device(qk::zeros({1, 3, 32, 32}), kDev);
    forward(image);  // warm-up, as the bench's
    int64_t forwards = 0;
    Tensor logits;
    const auto graph = qk::capture_graph(kDev, [&] {
      ++forwards;
      logits = forward(image);
    });
    ASSERT_GT(graph->num_nodes(), 10);
    qk::manual_seed(4);
    for (int i = 0; i < 3; ++i) {
      const Tensor x = qk::ops::to_device(qk::randn({1, 3, 32, 32}), kDev);
      qk::ops::copy_(image, x);
      graph->replay();
      EXPECT_EQ(qk::devtest::max_abs_diff(logits, forward(x)), 0.0) << (bf16 ? "bf16 " : "f32 ") << "image " << i;
    }
    EXPECT_EQ(forwards, 1);
  }
}

// `qk pretrain-gpt --enable-cuda-graph` (the library call) on the device:
// six iterations (evaluation after the third, between replays) in f32,
// --bf16, --fp16 (the loss scaler: a new scale, a new capture) and with
// Megatron's default dropout (hidden and flash attention's: every replay
// draws the eager step's masks) end with the eager run's weights and
// optimizer state bit for bit.
qk::recipes::PretrainGptResult pretrain(const std::string& save, const std::string& precision, bool graphed,
                                        const std::string& device = "privateuse1:0") {
  std::vector<std::string> a = {"--num-layers", "2", "--hidden-size", "32", "--num-attention-heads", "4",
                                "--seq-length", "16", "--max-position-embeddings", "16", "--micro-batch-size", "2",
                                "--global-batch-size", "4", "--train-iters", "6", "--lr", "1e-2",
                                "--mock-data", "--tokenizer-type", "NullTokenizer", "--vocab-size", "4096",
                                "--eval-iters", "1", "--eval-interval", "3", "--save", save, "--save-interval", "6",
                                "--position-embedding-type", "rope", "--swiglu", "--normalization", "RMSNorm",
                                "--clip-grad", "0.5"};
  // "dropout": Megatron's default dropouts (0.1); else none.
  a.push_back("--use-flash-attn");
  if (precision == "dropout")
    a.insert(a.end(), {"--bf16"});
  else
    a.insert(a.end(), {"--attention-dropout", "0", "--hidden-dropout", "0"});
  if (precision != "f32" && precision != "dropout") a.push_back("--" + precision);
  if (graphed) a.insert(a.end(), {"--enable-cuda-graph", "--cuda-graph-warmup-steps", "2"});
  return qk::harness::quiet_pretrain(a, device);
}

// Folders under build/test_tmp, removed at exit when every test passed (a run's checkpoints are
// hundreds of megabytes: left in /tmp they had filled the disk).
const qk::test::ScratchRoot kScratch("loopback_graph");

std::string fresh_dir(const std::string& name) { return kScratch.fresh(name); }

TEST(LoopbackGraph, PretrainGptWithCudaGraphEqualsTheEagerRun) {
  qk::harness::install_complete_loopback();
  for (const char* precision : {"f32", "bf16", "fp16", "dropout"}) {
    SCOPED_TRACE(precision);
    const std::string eager = fresh_dir(std::string("eager_") + precision);
    const std::string graphed = fresh_dir(std::string("graphed_") + precision);
    const qk::recipes::PretrainGptResult re = pretrain(eager, precision, false);
    const qk::recipes::PretrainGptResult rg = pretrain(graphed, precision, true);
    EXPECT_EQ(rg.train.progress.iteration, 6);
    for (const char* file : {"model.safetensors", "optim.safetensors"})
      EXPECT_TRUE(qk::read_file(eager + "/iter_0000000006/" + file) == qk::read_file(graphed + "/iter_0000000006/" + file))
          << file << " of the graphed run differs from the eager run's";
    ASSERT_TRUE(re.final_valid && rg.final_valid);
    EXPECT_EQ(re.final_valid->metrics.at("lm loss"), rg.final_valid->metrics.at("lm loss"));
  }
}

TEST(LoopbackGraph, PretrainGptRefusesWhatAGraphCannotHold) {
  qk::harness::install_complete_loopback();
  const std::string dir = fresh_dir("refused");
  try {
    pretrain(dir, "f32", true, "cpu");
    ADD_FAILURE() << "--enable-cuda-graph on the CPU did not raise";
  } catch (const qk::DeviceError& e) {
    EXPECT_NE(std::string(e.what()).find("needs a GPU"), std::string::npos) << e.what();
  }
  qk::recipes::MegatronArgsOptions mo;
  mo.check_data_files = false;
  mo.world_size = 2;
  try {
    qk::recipes::parse_megatron_args({"--num-layers", "2", "--hidden-size", "32", "--num-attention-heads", "4",
                                      "--seq-length", "16", "--max-position-embeddings", "16", "--micro-batch-size",
                                      "2", "--train-iters", "6", "--lr", "1e-2", "--mock-data", "--tokenizer-type",
                                      "NullTokenizer", "--vocab-size", "4096", "--enable-cuda-graph"},
                                     mo);
    ADD_FAILURE() << "--enable-cuda-graph on 2 ranks did not raise";
  } catch (const qk::Error& e) {
    EXPECT_NE(std::string(e.what()).find("runs on one GPU"), std::string::npos) << e.what();
  }
}

// `qk train cifar10 --cuda-graph` (the library call) under bf16 autocast,
// 40 images in batches of 16 (the last of 8 runs eagerly and drops the
// graph; the next epoch records it again): simple_cnn (dropout: each replay
// draws the eager step's mask) and the ResNet (batch norm) end with the
// eager runs' weights bit for bit.
TEST(LoopbackGraph, CifarTrainingWithCudaGraphEqualsTheEagerRun) {
  qk::harness::install_complete_loopback();
  const std::string data = fresh_dir("cifar_data");
  for (const char* model : {"simple_cnn", "simple_resnet"}) {
    SCOPED_TRACE(model);
    auto options = [&](const std::string& out, bool graphed) {
      qk::recipes::TrainCifarOptions o = qk::test::tiny_cifar(data, out, 2);
      o.synth_train = 40;
      o.model = model;
      o.device = "privateuse1:0";
      o.amp = "bf16";
      o.cuda_graph = graphed;
      return o;
    };
    const std::string eager = fresh_dir(std::string("cifar_eager_") + model);
    const std::string graphed = fresh_dir(std::string("cifar_graphed_") + model);
    testing::internal::CaptureStdout();
    qk::recipes::train_cifar10(options(eager, false));
    qk::recipes::train_cifar10(options(graphed, true));
    const std::string out = testing::internal::GetCapturedStdout();
    EXPECT_TRUE(qk::read_file(eager + "/checkpoints/latest.safetensors") ==
                qk::read_file(graphed + "/checkpoints/latest.safetensors"))
        << "the graphed run's weights differ from the eager run's\n" << out;
  }
}

// What the host cannot do inside a capture, refused with what and why;
// dropout (plain and flash attention's) in a graph draws at each replay what
// eager calls would draw.
TEST(LoopbackGraph, ACaptureRefusesHostReadsAndReplaysDropoutsDraws) {
  qk::harness::install_complete_loopback();
  const Tensor x = qk::ops::to_device(qk::ones({8}), kDev);
  try {
    qk::capture_graph(kDev, [&] { (void)qk::ops::sum(x).item<float>(); });
    ADD_FAILURE() << "a read-back inside a capture did not raise";
  } catch (const qk::DeviceError& e) {
    EXPECT_NE(std::string(e.what()).find("cannot be recorded in a graph"), std::string::npos) << e.what();
  }
  qk::Generator& gen = qk::default_generator(kDev);
  const uint64_t start = gen.offset();
  std::vector<std::vector<float>> eager;
  for (int i = 0; i < 3; ++i)
    eager.push_back(qk::ops::to_device(qk::ops::dropout(x, 0.5, gen).first, qk::kCPU).to_vector<float>());
  const uint64_t after = gen.offset();
  gen.set_state(gen.seed(), start);
  Tensor out;
  auto dg = qk::capture_graph(kDev, [&] { out = qk::ops::dropout(x, 0.5, gen).first; });
  EXPECT_EQ(gen.offset(), start) << "the capture left the generator moved";
  for (int i = 0; i < 3; ++i) {
    dg->replay();
    EXPECT_EQ(qk::ops::to_device(out, qk::kCPU).to_vector<float>(), eager[i]) << "replay " << i;
  }
  EXPECT_EQ(gen.offset(), after);
  EXPECT_NE(eager[0], eager[1]);
  gen.manual_seed(99);
  EXPECT_THROW(dg->replay(), qk::DeviceError);  // reseeded since the capture
  // Flash attention's dropout the same way: each replay draws the eager call's.
  const Tensor q = qk::ops::to_device(qk::randn({1, 4, 2, 8}), kDev);
  gen.manual_seed(7);
  auto attend = [&] { return qk::flash_attention(q, q, q, {.causal = true, .dropout_p = 0.3, .training = true}); };
  const std::vector<float> a1 = qk::ops::to_device(attend(), qk::kCPU).to_vector<float>();
  const std::vector<float> a2 = qk::ops::to_device(attend(), qk::kCPU).to_vector<float>();
  gen.manual_seed(7);
  Tensor attended;
  auto ag = qk::capture_graph(kDev, [&] { attended = attend(); });
  ag->replay();
  EXPECT_EQ(qk::ops::to_device(attended, qk::kCPU).to_vector<float>(), a1);
  ag->replay();
  EXPECT_EQ(qk::ops::to_device(attended, qk::kCPU).to_vector<float>(), a2);
  EXPECT_NE(a1, a2);
  EXPECT_FALSE(qk::capturing(kDev));  // the failed captures left nothing open
  // A graph replays its kernels on the memory they were recorded with.
  const Tensor y = qk::ops::to_device(qk::zeros({8}), kDev);
  auto g = qk::capture_graph(kDev, [&] { qk::ops::add_(y, x); });
  EXPECT_EQ(qk::ops::to_device(y, qk::kCPU).to_vector<float>(), std::vector<float>(8, 0.0f));  // nothing ran
  g->replay();
  g->replay();
  EXPECT_EQ(qk::ops::to_device(y, qk::kCPU).to_vector<float>(), std::vector<float>(8, 2.0f));
  EXPECT_EQ(g->num_nodes(), 1);
  EXPECT_THROW(qk::capture_graph(qk::kCPU, [] {}), qk::DeviceError);
}

}  // namespace
