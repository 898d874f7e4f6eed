// The upper layers' device paths on a complete loopback device (every CPU
// kernel behind a second backend, on host memory; harness/loopback_backend.h)
// where there is no GPU: the CIFAR-10 trainer with --device on that device,
// in f32 and under bf16 and fp16 autocast (GradScaler's device path), ends
// with the CPU run's weights bit for bit, and pinned batches move without a
// wait. Tensors on two devices in one op raise, so a step that builds a
// tensor on the wrong device fails here before it does on a GPU.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <string>

#include "common/device_compare.h"
#include "common/scratch_dir.h"
#include "common/tiny_cifar.h"
#include "common/tiny_gpt.h"
#include "harness/loopback_backend.h"
#include "harness/quiet_pretrain.h"
#include "qk/base/file_io.h"
#include "qk/recipes/cifar10_trainer.h"
#include "qk/optim/adam.h"
#include "qk/tensor/backend.h"
#include "qk/tensor/generator.h"
#include "qk/recipes/gpt_pretrain.h"
#include "qk/recipes/megatron_args.h"
#include "qk/autograd/functions.h"
#include "qk/models/cifar10.h"
#include "qk/optim/mixed_precision_optimizer.h"
#include "qk/optim/sgd.h"
#include "qk/tensor/ops/elementwise.h"
#include "qk/tensor/ops/reduce.h"
#include "qk/tensor/ops/view.h"
#include "qk/tensor/sync_debug.h"
#include "qk/train/step_runner.h"
#include "qk/transformer/gpt_model.h"

namespace {

namespace fs = std::filesystem;

// Folders under build/test_tmp, removed at exit when every test passed (a run's checkpoints are
// hundreds of megabytes: left in /tmp they had filled the disk).
const qk::test::ScratchRoot kScratch("loopback_device");

std::string fresh_dir(const std::string& name) { return kScratch.fresh(name); }

qk::recipes::TrainCifarOptions tiny(const std::string& data, const std::string& out, const std::string& device,
                                   const std::string& amp) {
  qk::recipes::TrainCifarOptions o = qk::test::tiny_cifar(data, out, 1);
  o.device = device;
  o.amp = amp;
  return o;
}

TEST(LoopbackDevice, CifarTrainingOnTheDeviceEndsWithTheCpusWeights) {
  qk::harness::install_complete_loopback();
  const std::string data = fresh_dir("data");
  for (const char* amp : {"off", "bf16", "fp16"}) {
    SCOPED_TRACE(amp);
    const std::string cpu = fresh_dir(std::string("cpu_") + amp), dev = fresh_dir(std::string("dev_") + amp);
    auto device_allocs = [] { return qk::backend(qk::DeviceType::privateuse1).memory_stats(0).num_allocs; };
    testing::internal::CaptureStdout();
    const uint64_t a0 = device_allocs();
    qk::recipes::train_cifar10(tiny(data, cpu, "cpu", amp));
    const uint64_t a1 = device_allocs();
    qk::recipes::train_cifar10(tiny(data, dev, "privateuse1:0", amp));
    const uint64_t a2 = device_allocs();
    const std::string out = testing::internal::GetCapturedStdout();
    EXPECT_EQ(a1, a0) << "the CPU run touched the device";
    EXPECT_GT(a2 - a1, 100u) << "the device run did not run on the device\n" << out;
    EXPECT_TRUE(qk::read_file(cpu + "/checkpoints/latest.safetensors") ==
                qk::read_file(dev + "/checkpoints/latest.safetensors"))
        << "the device run's weights differ from the CPU run's\n" << out;
  }
}

// A GPT-2 and a Llama layout (learned positions and RoPE, LayerNorm and
// RMSNorm, GELU and SwiGLU, grouped-query attention, QK layernorm, tied and
// untied output)
// moved onto the device: the loss and every gradient equal the CPU's bit
// for bit, and an AdamW step there lands on the CPU's weights.
TEST(LoopbackDevice, GptForwardBackwardAndStepOnTheDeviceEqualTheCpus) {
  qk::harness::install_complete_loopback();
  using namespace qk::transformer;
  const TransformerConfig gpt2 = qk::test::tiny_gpt2(), llama = qk::test::tiny_llama();
  const qk::Device dev = qk::harness::kLoopback;
  for (const TransformerConfig& c : {gpt2, llama}) {
    SCOPED_TRACE(c.normalization == Normalization::RMSNorm ? "llama" : "gpt2");
    qk::Generator g(3);
    const qk::Tensor tokens = qk::randint(0, 100, {2, 16}, qk::DType::i64, g);
    const qk::Tensor labels = qk::randint(0, 100, {2, 16}, qk::DType::i64, g);
    qk::manual_seed(11);
    GPTModel cpu(c);
    qk::manual_seed(11);
    GPTModel on_dev(c);
    on_dev->to(dev);
    const qk::Tensor lc = cpu->forward(tokens, qk::Tensor(), labels);
    const qk::Tensor ld = on_dev->forward(tokens.to(dev), qk::Tensor(), labels.to(dev));
    EXPECT_EQ(ld.device(), dev);
    EXPECT_EQ(lc.item<float>(), ld.item<float>());
    lc.backward();
    ld.backward();
    qk::optim::AdamW oc(cpu->parameters(), qk::optim::AdamWOptions(1e-2));
    qk::optim::AdamW od(on_dev->parameters(), qk::optim::AdamWOptions(1e-2));
    oc.step();
    od.step();
    const auto pc = cpu->named_parameters(), pd = on_dev->named_parameters();
    ASSERT_EQ(pc.size(), pd.size());
    for (size_t i = 0; i < pc.size(); ++i) {
      EXPECT_EQ(pd[i].value().device(), dev) << pd[i].key();
      EXPECT_EQ(qk::devtest::max_abs_diff(pc[i].value().grad(), pd[i].value().grad()), 0.0) << pd[i].key();
      EXPECT_EQ(qk::devtest::max_abs_diff(pc[i].value(), pd[i].value()), 0.0) << pd[i].key();
    }
  }
}

// `qk pretrain-gpt`'s library call with the model on the device: three of
// five iterations (a checkpoint after each, --exit-interval 3) in f32,
// --bf16 and --fp16 (the loss scaler), then the run resumed from the second
// checkpoint to its end, land on the CPU run's weights and optimizer state
// bit for bit, and the final validation loss is the CPU's.
std::vector<std::string> tiny_pretrain_args(const std::string& save, const std::string& precision, int iters) {
  std::vector<std::string> a = {"--num-layers", "2", "--hidden-size", "32", "--num-attention-heads", "4",
                                "--seq-length", "16", "--max-position-embeddings", "16", "--micro-batch-size", "2",
                                "--global-batch-size", "4", "--train-iters", "5", "--lr", "1e-2",
                                "--mock-data", "--tokenizer-type", "NullTokenizer", "--vocab-size", "4096",
                                "--eval-iters", "1", "--eval-interval", "2", "--save", save, "--load", save,
                                "--save-interval", "1", "--position-embedding-type", "rope", "--swiglu",
                                "--normalization", "RMSNorm", "--clip-grad", "0.5", "--lr-decay-iters", "10"};
  if (precision == "moe")
    a.insert(a.end(), {"--bf16", "--num-experts", "4", "--moe-router-topk", "2", "--moe-ffn-hidden-size", "32",
                       "--moe-expert-capacity-factor", "1.0", "--moe-aux-loss-coeff", "1e-2", "--moe-z-loss-coeff",
                       "1e-3"});
  else if (precision == "dist-opt")
    a.insert(a.end(), {"--bf16", "--use-distributed-optimizer", "--overlap-grad-reduce", "--overlap-param-gather"});
  else if (precision != "f32")
    a.push_back("--" + precision);
  if (iters < 5) a.insert(a.end(), {"--exit-interval", std::to_string(iters)});
  return a;
}

qk::recipes::PretrainGptResult tiny_pretrain(const std::string& save, const std::string& precision, int iters,
                                           const std::string& device) {
  return qk::harness::quiet_pretrain(tiny_pretrain_args(save, precision, iters), device);
}

TEST(LoopbackDevice, PretrainGptOnTheDeviceEqualsTheCpuRunAndResumes) {
  qk::harness::install_complete_loopback();
  // "dist-opt": --bf16 with Megatron's buffers and the distributed optimizer (one rank: no sharding).
  for (const char* precision : {"moe", "f32", "bf16", "fp16", "dist-opt"}) {
    SCOPED_TRACE(precision);
    const std::string cpu = fresh_dir(std::string("gpt_cpu_") + precision);
    const std::string dev = fresh_dir(std::string("gpt_dev_") + precision);
    auto device_allocs = [] { return qk::backend(qk::DeviceType::privateuse1).memory_stats(0).num_allocs; };
    for (int iters : {3, 5}) {
      if (iters == 5)  // resume from the second checkpoint, not the third
        for (const std::string& d : {cpu, dev}) qk::atomic_write_file(d + "/latest_checkpointed_iteration.txt", "2");
      const qk::recipes::PretrainGptResult rc = tiny_pretrain(cpu, precision, iters, "cpu");
      const uint64_t a0 = device_allocs();
      const qk::recipes::PretrainGptResult rd = tiny_pretrain(dev, precision, iters, "privateuse1:0");
      EXPECT_GT(device_allocs() - a0, 100u) << "the device run did not run on the device";
      EXPECT_EQ(rc.train.progress.iteration, iters);
      EXPECT_EQ(rd.train.progress.iteration, iters);
      char it[32];
      std::snprintf(it, sizeof it, "/iter_%010d/", iters);
      for (const char* file : {"model.safetensors", "optim.safetensors"})
        EXPECT_TRUE(qk::read_file(cpu + it + file) == qk::read_file(dev + it + file))
            << file << " after " << iters << " iterations differs from the CPU run's";
      if (iters < 5) continue;
      ASSERT_TRUE(rc.final_valid && rd.final_valid);
      EXPECT_EQ(rc.final_valid->metrics.at("lm loss"), rd.final_valid->metrics.at("lm loss"));
    }
  }
}

// Host syncs and device allocations of a steady-state GPT training step on
// the device (every copy to the host counts, as a GPU's would stall the
// host; every raw allocation, as a GPU's cudaMalloc): none of the latter,
// the pools serve it; with the loss kept
// on the device, two per step whatever the number of micro-batches (the
// step's metrics in one read, the optimizer's inf/NaN check and gradient
// norm in one read), and none while a forward runs. QK_SYNC_DEBUG=error
// shows where a new one comes from.
TEST(LoopbackDevice, AGptTrainingStepWaitsForTheDeviceTwice) {
  qk::harness::install_complete_loopback();
  const qk::Device dev = qk::harness::kLoopback;
  qk::manual_seed(5);
  qk::transformer::GPTModel model(qk::test::tiny_llama());
  model->to(dev);
  qk::optim::MixedPrecisionOptimizer opt(qk::optim::megatron_param_groups(*model),
                                         qk::optim::adamw(qk::optim::AdamWOptions(1e-3)), nullptr, {.clip_grad = 1.0});
  for (int64_t micro : {int64_t{1}, int64_t{3}}) {
    SCOPED_TRACE(micro);
    qk::train::StepRunner runner(opt, {}, {.num_microbatches = micro});
    const qk::Tensor tokens = qk::ops::to_device(qk::randint(0, 100, {2, 16}), dev);
    const qk::Tensor labels = qk::ops::to_device(qk::randint(0, 100, {2, 16}), dev);
    int64_t in_forward = 0;
    auto forward = [&](int64_t) {
      const int64_t before = qk::host_sync_count();
      qk::Tensor loss = model->forward(tokens, qk::Tensor(), labels, qk::Tensor());
      in_forward += qk::host_sync_count() - before;
      qk::train::Metric lm;
      lm.count = 32;
      lm.device_sum = qk::ops::binary_scalar(qk::BinaryOp::mul, qk::ops::cast(loss.detach(), qk::DType::f64), 32.0);
      return qk::train::MicroBatchOutput{loss, {{"lm loss", lm}}};
    };
    // Warm-up: the optimizer's state is made in the first step, from blocks
    // the pools held, so the second still takes new ones (as torch's
    // caching allocator does); from the third on the pools serve every block.
    runner.step(forward);
    runner.step(forward);
    in_forward = 0;
    const int64_t before = qk::host_sync_count(), raw_before = qk::harness::loopback_counts().raw_allocs;
    const qk::train::StepStats st = runner.step(forward);
    EXPECT_EQ(qk::host_sync_count() - before, 2);
    // Every block the step asks for comes from the caching allocator's pools.
    EXPECT_EQ(qk::harness::loopback_counts().raw_allocs - raw_before, 0) << "device allocations in a steady step";
    EXPECT_EQ(in_forward, 0);
    EXPECT_TRUE(std::isfinite(st.metrics.at("lm loss")));
    EXPECT_FALSE(st.skipped);
  }
}

// The same for a CNN with batch norm (the CIFAR-10 recipe's step: the loss
// and the count of right answers read with the step's metrics): batch
// norm's counter of batches stays on the device.
TEST(LoopbackDevice, ACnnTrainingStepWithBatchNormWaitsForTheDeviceTwice) {
  qk::harness::install_complete_loopback();
  const qk::Device dev = qk::harness::kLoopback;
  qk::manual_seed(6);
  const qk::models::CifarModel m = qk::models::make_cifar_model("simple_resnet");
  m.module->to(dev);
  qk::optim::MixedPrecisionOptimizer opt(qk::optim::single_param_group(*m.module),
                                         qk::optim::sgd(qk::optim::SGDOptions(0.01)), nullptr, {.clip_grad = 0});
  qk::train::StepRunner runner(opt, {}, {.num_microbatches = 1});
  const qk::Tensor images = qk::ops::to_device(qk::randn({4, 3, 32, 32}), dev);
  const qk::Tensor labels = qk::ops::to_device(qk::randint(0, 10, {4}), dev);
  auto forward = [&](int64_t) {
    const qk::Tensor logits = m.forward(images);
    const qk::Tensor loss = qk::cross_entropy(logits, labels);
    const qk::Tensor right = qk::ops::sum(qk::ops::cast(
        qk::ops::binary(qk::BinaryOp::eq, qk::ops::argmax(logits.detach(), 1), labels), qk::DType::f64));
    return qk::train::MicroBatchOutput{loss, {{"loss", {0.0, 1.0, loss}}, {"correct", {0.0, 4.0, right}}}};
  };
  runner.step(forward);
  runner.step(forward);  // warm-up, as above
  const int64_t before = qk::host_sync_count(), raw_before = qk::harness::loopback_counts().raw_allocs;
  runner.step(forward);
  EXPECT_EQ(qk::host_sync_count() - before, 2);
  EXPECT_EQ(qk::harness::loopback_counts().raw_allocs - raw_before, 0) << "device allocations in a steady step";
}

}  // namespace
