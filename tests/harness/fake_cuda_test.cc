// The CUDA backend's host side on a machine without a GPU: the real backend
// (dispatch, caching allocator, streams, events, cuBLASLt and cuDNN plans)
// over the counting fake runtime (fake_cuda/fake_cuda_runtime.h). What a
// steady-state training step asks of the runtime is counted and held to
// what a GPU step must not do: no device or pinned allocations, no cuBLASLt
// or cuDNN descriptor or heuristic work, as few host waits as the step's
// metrics need. The values computed are meaningless (the fake device
// computes nothing); the counts are what matters.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <tuple>

#include "common/tiny_gpt.h"
#include "harness/fake_cuda/fake_cuda_runtime.h"
#include "qk/base/log.h"
#include "qk/autograd/autocast.h"
#include "qk/autograd/autograd.h"
#include "qk/autograd/functions.h"
#include "qk/autograd/llm_ops.h"
#include "qk/models/cifar10.h"
#include "qk/optim/adam.h"
#include "qk/optim/mixed_precision_optimizer.h"
#include "qk/optim/sgd.h"
#include "qk/tensor/backend.h"
#include "qk/tensor/cuda.h"
#include "qk/tensor/generator.h"
#include "qk/tensor/ops/attention.h"
#include "qk/tensor/ops/elementwise.h"
#include "qk/tensor/ops/linalg.h"
#include "qk/tensor/ops/memory_format.h"
#include "qk/tensor/ops/nn.h"
#include "qk/tensor/ops/reduce.h"
#include "qk/tensor/ops/view.h"
#include "qk/train/step_runner.h"
#include "qk/transformer/gpt_model.h"

namespace {

using qk::fake_cuda::Counts;

const qk::Device kGpu("cuda:0");

void print(const char* what, const Counts& c) {
  std::printf(
      "%s: %lld kernels (%lld ours, %lld cuBLASLt, %lld cuDNN), %lld runtime calls, %lld host waits, "
      "%lld copies to the host, %lld to the device, %lld events made, %lld device allocations\n%s",
      what, static_cast<long long>(c.device_work()), static_cast<long long>(c.launches),
      static_cast<long long>(c.blaslt_matmuls), static_cast<long long>(c.cudnn_calls),
      static_cast<long long>(c.runtime_calls), static_cast<long long>(c.syncs),
      static_cast<long long>(c.copies_to_host), static_cast<long long>(c.copies_to_device),
      static_cast<long long>(c.events_created), static_cast<long long>(c.device_allocs),
      qk::fake_cuda::kernel_table(c, 12).c_str());
}

// Launches of the kernels whose (demangled) name holds `part`.
int64_t launches_of(const Counts& c, const std::string& part) {
  int64_t n = 0;
  for (const auto& [name, count] : c.kernels)
    if (name.find(part) != std::string::npos) n += count;
  return n;
}

// What a warm step must not ask of the runtime, and what it may once.
void expect_steady(const Counts& step, int64_t host_waits) {
  EXPECT_EQ(step.device_allocs, 0) << "cudaMalloc in a warm step (the caching allocator's pools should serve it)";
  EXPECT_EQ(step.device_frees, 0);
  EXPECT_EQ(step.pinned_allocs, 0) << "cudaHostAlloc in a warm step (the pinned cache should serve it)";
  EXPECT_EQ(step.blaslt_setup, 0) << "cuBLASLt descriptors made in a warm step (the plan cache should hold them)";
  EXPECT_EQ(step.blaslt_heuristics, 0) << "cuBLASLt heuristics asked in a warm step";
  EXPECT_EQ(step.cudnn_setup, 0) << "cuDNN descriptors made in a warm step";
  EXPECT_EQ(step.cudnn_algorithm_queries, 0) << "cuDNN algorithms chosen again in a warm step";
  EXPECT_EQ(step.streams_created, 0);
  EXPECT_EQ(step.syncs, host_waits) << "host waits for the device in a warm step";
}

TEST(FakeCuda, TheBackendRunsOnTheFakeDevice) {
  ASSERT_TRUE(qk::cuda::is_available());
  EXPECT_EQ(qk::cuda::device_count(), 1);
  const Counts before = qk::fake_cuda::counts();
  const qk::Tensor a = qk::ops::to_device(qk::ones({4, 4}), kGpu);
  const qk::Tensor b = qk::ops::binary(qk::BinaryOp::add, a, a);
  const qk::Tensor c = qk::ops::matmul(b, a);
  const Counts d = qk::fake_cuda::counts() - before;
  EXPECT_EQ(d.copies_to_device, 1);
  EXPECT_EQ(d.blaslt_matmuls, 1);
  EXPECT_GE(d.launches, 1);
  // Reading back waits for the device once; the fake device computed nothing.
  const Counts r0 = qk::fake_cuda::counts();
  EXPECT_EQ(qk::ops::to_device(c, qk::Device("cpu")).to_vector<float>(), std::vector<float>(16, 0.0f));
  EXPECT_EQ(qk::ops::to_device(a, qk::Device("cpu")).to_vector<float>(), std::vector<float>(16, 1.0f));
  const Counts r = qk::fake_cuda::counts() - r0;
  EXPECT_EQ(r.copies_to_host, 2);
  EXPECT_EQ(r.syncs, 2);
}

// The GPT step of the loopback test (LoopbackDevice.AGptTrainingStepWaitsForTheDeviceTwice)
// through the CUDA backend itself: nothing made or chosen once warm, and two
// host waits whatever the number of micro-batches (the step's metrics; the
// optimizer's inf/NaN check and norm): the embedding's and the fused loss's
// input checks are read with them (deferred_checks.h), not each on its own.
// The tiny Llama on the fake device with AdamW and clipping, two
// micro-batches a step, and its forward on given tokens.
struct TinyGptOnTheFake {
  qk::transformer::GPTModel model{nullptr};
  std::unique_ptr<qk::optim::MixedPrecisionOptimizer> opt;
  std::unique_ptr<qk::train::StepRunner> runner;
  TinyGptOnTheFake() {
    qk::manual_seed(5);
    model = qk::transformer::GPTModel(qk::test::tiny_llama());
    model->to(kGpu);
    // The fake computes nothing, so the norm and inf check it reads back are
    // whatever bytes the pool's block held: the step must not be skipped for them.
    opt = std::make_unique<qk::optim::MixedPrecisionOptimizer>(
        qk::optim::megatron_param_groups(*model), qk::optim::adamw(qk::optim::AdamWOptions(1e-3)), nullptr,
        qk::optim::MixedPrecisionOptions{.clip_grad = 1.0, .skip_nonfinite = false});
    runner = std::make_unique<qk::train::StepRunner>(*opt, qk::train::DataParallel{},
                                                     qk::train::StepRunnerOptions{.num_microbatches = 2});
  }
  qk::train::MicroBatchOutput forward(const qk::Tensor& tokens, const qk::Tensor& labels) {
    qk::Tensor loss = model->forward(tokens, qk::Tensor(), labels, qk::Tensor());
    qk::train::Metric lm;
    lm.count = 32;
    lm.device_sum = qk::ops::binary_scalar(qk::BinaryOp::mul, qk::ops::cast(loss.detach(), qk::DType::f64), 32.0);
    return qk::train::MicroBatchOutput{loss, {{"lm loss", lm}}};
  }
};

TEST(FakeCuda, AWarmGptTrainingStepMakesNoAllocationsPlansOrHeuristics) {
  TinyGptOnTheFake gpt;
  qk::train::StepRunner& runner = *gpt.runner;
  const qk::Tensor tokens = qk::ops::to_device(qk::randint(0, 100, {2, 16}), kGpu);
  const qk::Tensor labels = qk::ops::to_device(qk::randint(0, 100, {2, 16}), kGpu);
  auto forward = [&](int64_t) { return gpt.forward(tokens, labels); };
  runner.step(forward);
  runner.step(forward);  // the optimizer's state is made in the first step (as on the loopback device)
  const Counts s0 = qk::fake_cuda::counts();
  runner.step(forward);
  const Counts s1 = qk::fake_cuda::counts();
  runner.step(forward);
  const Counts third = s1 - s0, fourth = qk::fake_cuda::counts() - s1;
  print("GPT step (tiny Llama, 2 micro-batches)", third);
  expect_steady(third, 2);
  EXPECT_EQ(third.device_work(), fourth.device_work())
      << "a warm step's kernels differ from the next one's:\n"
      << qk::fake_cuda::kernel_table(third - fourth, 10) << "(third minus fourth)";
  EXPECT_GT(third.blaslt_matmuls, 0);
  // AdamW over 19 parameters in two groups (with and without weight decay):
  // one list launch per group, none per parameter.
  EXPECT_EQ(launches_of(third, ")::adam_kernel<"), 0);
  EXPECT_EQ(launches_of(third, ")::multi_adam_kernel<"), 2);
}

// The same GPT step graphed (StepRunner::step(GraphedForwardStep)): the
// CUDA backend's own capture path (its stream, the allocator's graph pool,
// the input checks re-armed at replay) records the micro-batches' work
// without a host wait, and a replayed step is one graph launch: the host
// launches only the optimizer's kernels and the loads' copies, with the same
// two waits and no allocation.
TEST(FakeCuda, AGraphedGptStepIsOneGraphLaunchPlusTheOptimizer) {
  TinyGptOnTheFake gpt;
  qk::train::StepRunner& runner = *gpt.runner;
  const qk::Tensor batch = qk::ops::to_device(qk::randint(0, 100, {2, 16}), kGpu);
  const qk::Tensor tokens = qk::ops::to_device(qk::zeros({2, 16}, qk::DType::i64), kGpu);
  const qk::Tensor labels = qk::ops::to_device(qk::zeros({2, 16}, qk::DType::i64), kGpu);
  qk::train::GraphedForwardStep g;
  g.device = kGpu;
  g.load = [&](int64_t) {
    qk::ops::copy_(tokens, batch);
    qk::ops::copy_(labels, batch);
    return std::map<std::string, qk::train::Metric>{};
  };
  g.forward = [&](int64_t) { return gpt.forward(tokens, labels); };
  runner.step(g);
  runner.step(g);  // the two eager warm-up steps
  const Counts c0 = qk::fake_cuda::counts();
  runner.step(g);  // the capture, then its first replay
  const Counts capture = qk::fake_cuda::counts() - c0;
  EXPECT_EQ(capture.graph_launches, 1);
  EXPECT_GT(runner.graph_nodes(), 100);
  const Counts s0 = qk::fake_cuda::counts();
  runner.step(g);
  const Counts replay = qk::fake_cuda::counts() - s0;
  print("graphed GPT step (tiny Llama, 2 micro-batches)", replay);
  expect_steady(replay, 2);
  EXPECT_EQ(replay.graph_launches, 1);
  // What the host still launches: the loads' copies and the optimizer (list
  // kernels, unscale/norm, the metric sums), not the forward and backward.
  EXPECT_LT(replay.runtime_calls, 60) << "runtime calls of a replayed step (1,336 eager)";
  EXPECT_EQ(launches_of(replay, ")::multi_adam_kernel<"), 2);
  EXPECT_GT(replay.blaslt_matmuls, 0) << "the graph's GEMMs run at its launch";
}

// The CUDA backend's capture: kernels queued in it run at each replay, not
// at the capture; a read-back inside it is refused (naming it) and ends the
// capture cleanly, so the device works as before afterwards.
TEST(FakeCuda, ACaptureRecordsKernelsAndRefusesAReadBack) {
  const qk::Tensor x = qk::ops::to_device(qk::ones({8}), kGpu);
  const qk::Tensor y = qk::ops::to_device(qk::zeros({8}), kGpu);
  const Counts c0 = qk::fake_cuda::counts();
  auto g = qk::capture_graph(kGpu, [&] { qk::ops::add_(y, x); });
  const Counts captured = qk::fake_cuda::counts() - c0;
  EXPECT_EQ(captured.launches, 0) << "a captured kernel ran at the capture";
  EXPECT_EQ(g->num_nodes(), 1);
  const Counts r0 = qk::fake_cuda::counts();
  g->replay();
  g->replay();
  const Counts replays = qk::fake_cuda::counts() - r0;
  EXPECT_EQ(replays.graph_launches, 2);
  EXPECT_EQ(replays.launches, 2);
  try {
    qk::capture_graph(kGpu, [&] { (void)qk::ops::sum(x).item<float>(); });
    ADD_FAILURE() << "a read-back inside a capture did not raise";
  } catch (const qk::DeviceError& e) {
    EXPECT_NE(std::string(e.what()).find("a copy to the host cannot be recorded in a graph"), std::string::npos)
        << e.what();
  }
  EXPECT_FALSE(qk::capturing(kGpu));
  const Counts e0 = qk::fake_cuda::counts();
  qk::ops::add_(y, x);
  EXPECT_EQ((qk::fake_cuda::counts() - e0).launches, 1) << "the device no longer runs eager work";
  // Dropout records against a counter base: each replay sets it first (one
  // fill launched by the host), then the graph's dropout kernel reads it.
  auto dg = qk::capture_graph(kGpu, [&] { (void)qk::ops::dropout(x, 0.5, qk::default_generator(kGpu)); });
  const Counts d0 = qk::fake_cuda::counts();
  dg->replay();
  const Counts d = qk::fake_cuda::counts() - d0;
  EXPECT_EQ(d.graph_launches, 1);
  EXPECT_EQ(launches_of(d, "fill_kernel<unsigned long>"), 1);
  EXPECT_EQ(launches_of(d, "dropout_kernel"), 1);
}

// Flash attention's dropout, forward and backward, recorded on the CUDA
// backend: the tensor-core kernels take the counter base (a capture does not
// refuse them), and a replay is the base's fill plus the graph's kernels.
TEST(FakeCuda, FlashAttentionDropoutIsRecordedWithACounterBase) {
  const qk::Tensor q = qk::ops::to_device(qk::ops::cast(qk::randn({1, 128, 4, 64}), qk::DType::bf16), kGpu)
                           .requires_grad_();
  auto g = qk::capture_graph(kGpu, [&] {
    const qk::Tensor out = qk::flash_attention(q, q, q, {.causal = true, .dropout_p = 0.1, .training = true});
    qk::sum(out).backward();
  });
  const Counts r0 = qk::fake_cuda::counts();
  g->replay();
  const Counts r = qk::fake_cuda::counts() - r0;
  EXPECT_EQ(r.graph_launches, 1);
  EXPECT_EQ(launches_of(r, "fill_kernel<unsigned long>"), 1) << "the counter base is set before the replay";
  EXPECT_EQ(launches_of(r, "tiled_fwd<__nv_bfloat16, 64>"), 1);
  EXPECT_EQ(launches_of(r, "tiled_dq<__nv_bfloat16, 64>"), 1);
  EXPECT_EQ(launches_of(r, "tiled_dkv<__nv_bfloat16, 64>"), 1);
}

// What the third step of the CIFAR-10 ResNet (batch 4, SGD) asks of the
// runtime, under bf16 autocast or not.
Counts warm_resnet_step(bool bf16_autocast, bool channels_last = false) {
  qk::manual_seed(6);
  const qk::models::CifarModel m = qk::models::make_cifar_model("simple_resnet");
  m.module->to(kGpu);
  qk::optim::MixedPrecisionOptimizer opt(qk::optim::single_param_group(*m.module),
                                         qk::optim::sgd(qk::optim::SGDOptions(0.01)), nullptr,
                                         {.clip_grad = 0, .skip_nonfinite = false});
  qk::train::StepRunner runner(opt, {}, {.num_microbatches = 1});
  qk::Tensor images = qk::ops::to_device(qk::randn({4, 3, 32, 32}), kGpu);
  if (channels_last) images = qk::ops::contiguous(images, qk::ops::MemoryFormat::channels_last);
  const qk::Tensor labels = qk::ops::to_device(qk::randint(0, 10, {4}), kGpu);
  auto forward = [&](int64_t) {
    qk::autocast::Guard low(qk::DType::bf16, bf16_autocast);
    const qk::Tensor logits = m.forward(images);
    const qk::Tensor loss = qk::cross_entropy(logits, labels);
    return qk::train::MicroBatchOutput{loss, {{"loss", {0.0, 1.0, loss}}}};
  };
  runner.step(forward);
  runner.step(forward);
  const Counts s0 = qk::fake_cuda::counts();
  runner.step(forward);
  return qk::fake_cuda::counts() - s0;
}

// The ResNet's step: convolutions through cuDNN with their plans cached,
// batch norm's counter on the device; the same two host waits (cross
// entropy's target check is read with the metrics).
TEST(FakeCuda, AWarmCnnTrainingStepMakesNoAllocationsPlansOrAlgorithmChoices) {
  const Counts step = warm_resnet_step(false);
  print("ResNet step (batch 4)", step);
  expect_steady(step, 2);
  EXPECT_GT(step.cudnn_calls, 0);
  // SGD over 62 parameters: two list launches (48 tensors a launch).
  EXPECT_EQ(launches_of(step, ")::sgd_kernel<"), 0);
  EXPECT_EQ(launches_of(step, ")::multi_sgd_kernel<"), 2);
  // Batch norm's counter (an i64 scalar per layer) is bumped by one scalar
  // kernel, not a fill of a 0-d operand and an add (21 i64 fills before;
  // one, not batch norm's, is left).
  EXPECT_LE(launches_of(step, "fill_kernel<unsigned long>"), 1);
  EXPECT_EQ(launches_of(step, "ArithScalarFn<0, long>"), 20);
}

// The same step under bf16 autocast (qk train cifar10 --amp bf16, 108 img/s
// against 2,050 in f32 on the first GPU run): no more waits, allocations
// or plans than in f32.
TEST(FakeCuda, AWarmCnnStepUnderBf16AutocastMakesNoAllocationsPlansOrExtraWaits) {
  const Counts step = warm_resnet_step(true);
  print("ResNet step under bf16 autocast (batch 4)", step);
  expect_steady(step, 2);
}

// Channels last (qk train cifar10 --channels-last): every convolution of the
// step, forward and both backwards, is described to cuDNN as NHWC (with the
// filter as KRSC), and a warm step is as steady as the contiguous one.
// Batch norm takes its NHWC kernels: three launches each way per layer.
TEST(FakeCuda, AWarmChannelsLastCnnStepRunsEveryConvolutionNhwc) {
  const Counts plain = warm_resnet_step(false);
  EXPECT_EQ(plain.cudnn_nhwc_convolutions, 0);
  const int64_t layers = launches_of(plain, "bn_train_forward");
  EXPECT_EQ(layers, 20) << "SimpleResNet's batch norms";
  for (bool bf16 : {false, true}) {
    const Counts step = warm_resnet_step(bf16, /*channels_last=*/true);
    print(bf16 ? "ResNet step, channels last, bf16 autocast" : "ResNet step, channels last", step);
    expect_steady(step, 2);
    // The ResNet's convolutions have no bias: every cuDNN call is a convolution.
    EXPECT_GT(step.cudnn_calls, 0);
    EXPECT_EQ(step.cudnn_nhwc_convolutions, step.cudnn_calls) << (bf16 ? "bf16" : "f32");
    for (const char* k : {"bn_nhwc_moments", "bn_nhwc_train_finalize", "bn_nhwc_apply", "bn_nhwc_grad_sums",
                          "bn_nhwc_backward_finalize", "bn_nhwc_backward_apply"})
      EXPECT_EQ(launches_of(step, k), layers) << k;
    EXPECT_EQ(launches_of(step, "bn_train_forward"), 0);
  }
}

// An index out of range still raises the CPU's IndexError, from the next
// wait for the device rather than from the op (the fake plays the kernel's
// part: it sets the flag as embedding_rows would for position 3).
// Benchmark mode (torch.backends.cudnn.benchmark): each convolution shape's
// algorithms are timed once (cudnnFind*), in the first step; a warm step
// searches nothing and plans nothing.
TEST(FakeCuda, CudnnBenchmarkModeTimesEachShapeOnceThenReusesIt) {
  qk::cuda::set_cudnn_benchmark(true);
  const Counts before = qk::fake_cuda::counts();
  const Counts warm = warm_resnet_step(false);
  const Counts all = qk::fake_cuda::counts() - before;
  qk::cuda::set_cudnn_benchmark(false);
  EXPECT_GT(all.cudnn_finds, 0) << "no timed search in benchmark mode";
  EXPECT_EQ(warm.cudnn_finds, 0);
  expect_steady(warm, 2);
}

TEST(FakeCuda, AnEmbeddingIndexOutOfRangeRaisesAtTheNextReadBack) {
  const qk::Tensor weight = qk::ops::to_device(qk::randn({10, 4}), kGpu);
  const qk::Tensor ids = qk::ops::to_device(qk::from_vector<int64_t>({1, 2, 3, 12, 4}, {5}), kGpu);
  qk::fake_cuda::set_launch_hook([](const std::string& name, void** args) {
    if (name.find("embedding_rows") != std::string::npos) **static_cast<unsigned long long**>(args[6]) = 3 + 1;
  });
  const Counts before = qk::fake_cuda::counts();
  qk::Tensor out;
  EXPECT_NO_THROW(out = qk::ops::embedding(weight, ids));
  qk::fake_cuda::set_launch_hook(nullptr);
  EXPECT_EQ((qk::fake_cuda::counts() - before).syncs, 0) << "the op waited for its check";
  try {
    (void)qk::ops::to_device(out, qk::Device("cpu"));
    ADD_FAILURE() << "no IndexError at the read-back";
  } catch (const qk::IndexError& e) {
    EXPECT_NE(e.message().find("embedding: index 12 at position 3 is out of range for 10 embeddings"),
              std::string::npos)
        << e.message();
    EXPECT_NE(e.message().find("found when the host next waited for cuda:0"), std::string::npos) << e.message();
  }
  // Raised once: the next read-back is clean.
  EXPECT_NO_THROW((void)qk::ops::to_device(out, qk::Device("cpu")));
}

// Which attention kernels a call takes: the tensor-core ones for 16-bit
// heads of 32, 64 or 128 with 16-byte aligned rows (forward, the delta
// pass, dq and dk/dv), the simple ones for f32, other head dims and
// misaligned rows. (The fake runs their host side: grid, shared-memory
// opt-in, dispatch; the op harness checks the values on a GPU.)
TEST(FakeCuda, FlashAttentionTakesTheTensorCoreKernelsWhereTheyFit) {
  auto kernels_of = [](qk::DType t, int64_t D, int64_t offset) {
    auto dev = [&](const qk::Shape& s) {
      // `offset` elements into a larger buffer: misaligned rows when it is not a multiple of 8.
      qk::Tensor whole = qk::ops::to_device(qk::ops::cast(qk::randn({s[0] * s[1] * s[2] * s[3] + offset}), t), kGpu);
      return qk::ops::reshape(qk::ops::slice(whole, 0, offset, offset + s[0] * s[1] * s[2] * s[3]), s);
    };
    const qk::Tensor q = dev({1, 130, 4, D}), k = dev({1, 130, 2, D}), v = dev({1, 130, 2, D}), g = dev({1, 130, 4, D});
    const Counts before = qk::fake_cuda::counts();
    const qk::ops::FlashAttentionParams p;
    const qk::ops::FlashAttentionResult r = qk::ops::flash_attention(q, k, v, p);
    (void)qk::ops::flash_attention_backward(g, q, k, v, r.out, r.lse, p);
    std::string names;
    for (const auto& [name, n] : (qk::fake_cuda::counts() - before).kernels) names += name + "\n";
    return names;
  };
  const std::string bf16 = kernels_of(qk::DType::bf16, 64, 0);
  EXPECT_NE(bf16.find("tiled_fwd<__nv_bfloat16, 64>"), std::string::npos) << bf16;
  EXPECT_NE(bf16.find("tiled_dq<__nv_bfloat16, 64>"), std::string::npos) << bf16;
  EXPECT_NE(bf16.find("tiled_dkv<__nv_bfloat16, 64>"), std::string::npos) << bf16;
  EXPECT_EQ(bf16.find("attention_fwd<"), std::string::npos) << bf16;
  const std::string f16 = kernels_of(qk::DType::f16, 128, 0);
  EXPECT_NE(f16.find("tiled_fwd<__half, 128>"), std::string::npos) << f16;
  for (const auto& [t, D, offset] : {std::tuple{qk::DType::f32, 64, 0}, std::tuple{qk::DType::bf16, 48, 0},
                                     std::tuple{qk::DType::bf16, 64, 4}}) {
    const std::string simple = kernels_of(t, D, offset);
    EXPECT_EQ(simple.find("tiled_"), std::string::npos) << simple;
    EXPECT_NE(simple.find("attention_fwd<"), std::string::npos) << simple;
    EXPECT_NE(simple.find("attention_dkv<"), std::string::npos) << simple;
  }
}

// cuDNN's fused attention is asked first (attention_cudnn.cc): the fake's
// cuDNN has no engines, so it refuses every graph and the call falls back
// to qk's kernels, as on a GPU whose cuDNN has no engine for a shape. What
// this checks without a GPU: cudnn-frontend accepts qk's graphs (a layout
// or uid mistake fails its validation, which the log line would name) for
// 4-D and grouped 5-D queries, GQA, causal or not, T != S; cuDNN is asked
// once per shape and direction; dropout and f32 never reach it.
TEST(FakeCuda, FlashAttentionAsksCudnnOncePerShapeThenFallsBack) {
  auto dev = [](const qk::Shape& s, qk::DType t) { return qk::ops::to_device(qk::ops::cast(qk::randn(s), t), kGpu); };
  struct Case {
    const char* name;
    qk::Shape q, kv, out;
    qk::DType t;
    bool causal;
  };
  const Case cases[] = {
      {"4-D q, GQA, causal", {2, 96, 4, 64}, {2, 96, 2, 64}, {2, 96, 4, 64}, qk::DType::bf16, true},
      {"grouped 5-D q", {1, 80, 2, 3, 64}, {1, 80, 2, 64}, {1, 80, 6, 64}, qk::DType::bf16, true},
      {"f16, D 128, T != S, not causal", {1, 48, 2, 128}, {1, 112, 2, 128}, {1, 48, 2, 128}, qk::DType::f16, false}};
  const qk::logging::Level level = qk::logging::level();
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const qk::Tensor q = dev(c.q, c.t), k = dev(c.kv, c.t), v = dev(c.kv, c.t), g = dev(c.out, c.t);
    qk::ops::FlashAttentionParams p;
    p.causal = c.causal;
    auto both = [&] {
      const qk::ops::FlashAttentionResult r = qk::ops::flash_attention(q, k, v, p);
      (void)qk::ops::flash_attention_backward(g, q, k, v, r.out, r.lse, p);
    };
    qk::logging::set_level(qk::logging::Level::debug);
    testing::internal::CaptureStderr();
    const Counts c0 = qk::fake_cuda::counts();
    both();
    const Counts first = qk::fake_cuda::counts() - c0;
    const std::string log = testing::internal::GetCapturedStderr();
    qk::logging::set_level(level);
    EXPECT_NE(log.find("cuDNN refused the forward graph"), std::string::npos) << log;
    EXPECT_NE(log.find("cuDNN refused the backward graph"), std::string::npos) << log;
    EXPECT_EQ(log.find("rejects"), std::string::npos) << "cudnn-frontend finds qk's graph invalid:\n" << log;
    EXPECT_GT(first.cudnn_setup, 0) << "cuDNN's graph API was not asked";
    EXPECT_GT(first.cudnn_algorithm_queries, 0) << "cuDNN's heuristics were not asked";
    EXPECT_EQ(first.cudnn_calls, 0);
    EXPECT_GT(launches_of(first, "tiled_fwd<"), 0) << "the refused call falls back to qk's tensor-core kernels";
    const Counts c1 = qk::fake_cuda::counts();
    both();
    const Counts again = qk::fake_cuda::counts() - c1;
    EXPECT_EQ(again.cudnn_setup, 0) << "the refusal is kept per shape";
    EXPECT_EQ(again.cudnn_algorithm_queries, 0);
    EXPECT_EQ(launches_of(again, "tiled_fwd<"), launches_of(first, "tiled_fwd<"));
  }
  // Never offered to cuDNN: dropout (qk's own Philox stream) and f32.
  for (const auto& [t, dropout] : {std::pair{qk::DType::bf16, 0.1}, std::pair{qk::DType::f32, 0.0}}) {
    const qk::Tensor q = dev({1, 72, 2, 64}, t);
    qk::ops::FlashAttentionParams p;
    p.dropout_p = dropout;
    p.seed = 1;
    const Counts c0 = qk::fake_cuda::counts();
    const qk::ops::FlashAttentionResult r = qk::ops::flash_attention(q, q, q, p);
    (void)qk::ops::flash_attention_backward(q, q, q, q, r.out, r.lse, p);
    EXPECT_EQ((qk::fake_cuda::counts() - c0).cudnn_setup, 0) << qk::dtype_name(t) << " dropout " << dropout;
  }
}

// Inside a CUDA-graph capture cuDNN's set-up must not run: a shape first met there goes to qk's kernels
// (cuDNN not asked, nothing set up during the capture); met eagerly first, its graph (here its refusal)
// is only looked up.
TEST(FakeCuda, FlashAttentionBuildsNoCudnnGraphInsideACapture) {
  const qk::Tensor q = qk::ops::to_device(qk::ops::cast(qk::randn({1, 104, 2, 64}), qk::DType::bf16), kGpu);
  const qk::ops::FlashAttentionParams p;
  Counts during{};
  auto g = qk::capture_graph(kGpu, [&] {
    const Counts c0 = qk::fake_cuda::counts();
    const qk::ops::FlashAttentionResult r = qk::ops::flash_attention(q, q, q, p);
    (void)qk::ops::flash_attention_backward(q, q, q, q, r.out, r.lse, p);
    during = qk::fake_cuda::counts() - c0;
  });
  EXPECT_EQ(during.cudnn_setup, 0) << "cuDNN was set up inside the capture";
  EXPECT_EQ(during.cudnn_algorithm_queries, 0);
  const Counts r0 = qk::fake_cuda::counts();
  g->replay();
  EXPECT_EQ(launches_of(qk::fake_cuda::counts() - r0, "tiled_fwd<__nv_bfloat16, 64>"), 1);
  // Eagerly the same shape builds (asks cuDNN) as usual.
  const Counts e0 = qk::fake_cuda::counts();
  (void)qk::ops::flash_attention(q, q, q, p);
  EXPECT_GT((qk::fake_cuda::counts() - e0).cudnn_setup, 0);
}

// Host time per kernel of ResNet inference at batch 1 (the first GPU run:
// 27 ms a step for 1.4 ms of GPU work): with the fake, launches cost
// nothing, so what is timed is qianka's own host work per kernel. Printed,
// not asserted (no timing in tests).
TEST(FakeCuda, ResnetInferenceAtBatchOneHostTimePerKernel) {
  qk::manual_seed(8);
  const qk::models::CifarModel m = qk::models::make_cifar_model("simple_resnet");
  m.module->to(kGpu);
  m.module->eval();
  qk::NoGradGuard off;
  const qk::Tensor image = qk::ops::to_device(qk::randn({1, 3, 32, 32}), kGpu);
  for (int i = 0; i < 3; ++i) (void)m.forward(image);
  const Counts c0 = qk::fake_cuda::counts();
  const auto t0 = std::chrono::steady_clock::now();
  constexpr int kSteps = 20;
  for (int i = 0; i < kSteps; ++i) (void)m.forward(image);
  const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / kSteps;
  const Counts c = qk::fake_cuda::counts() - c0;
  const double kernels = static_cast<double>(c.device_work()) / kSteps;
  std::printf("ResNet inference, batch 1: %.0f kernels a step, %.0f us of host time a step, %.1f us a kernel, "
              "%.1f runtime calls a kernel\n",
              kernels, us, us / kernels, static_cast<double>(c.runtime_calls) / kSteps / kernels);
  print("ResNet inference, batch 1, 20 steps", c);
  EXPECT_EQ(c.device_allocs, 0);
  EXPECT_EQ(c.syncs, 0) << "inference waits for the device";
}

}  // namespace
