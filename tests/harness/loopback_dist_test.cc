// Process groups, DDP and the CIFAR-10 trainer on device tensors, with two
// forked ranks on the complete loopback device (harness/loopback_backend.h).
// Its memory cannot be read by the host (PROT_NONE), and qccl has no backend
// for it, so every call must go through host copies (dist/buffer_route.h):
// a pointer handed to qccl directly faults the rank. Each result is compared
// with the same call on CPU tensors in the same rank: equal bit for bit.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "common/device_ddp_run.h"
#include "common/tiny_cifar.h"
#include "dist/dist_ranks.h"
#include "harness/loopback_backend.h"
#include "qk/autograd/functions.h"
#include "qk/base/file_io.h"
#include "qk/dist/ddp.h"
#include "qk/recipes/cifar10_trainer.h"
#include "qk/nn/nn.h"
#include "qk/optim/optim.h"
#include "qk/tensor/backend.h"
#include "qk/tensor/ops/elementwise.h"
#include "qk/nn/safetensors.h"
#include "qk/parallel/cross_entropy.h"
#include "qk/recipes/gpt_pretrain.h"
#include "qk/recipes/megatron_args.h"

namespace {

using namespace qk;
using qccl_test::Rank;
const Device kDev = harness::kLoopback;

// The loopback device's allocations so far: a run that should use it must move them.
uint64_t device_allocs() { return backend(DeviceType::privateuse1).memory_stats(0).num_allocs; }

template <typename T>
std::vector<T> host_values(const Tensor& t) {
  return t.to(kCPU).to_vector<T>();
}

// `make(device)` builds fresh tensors on that device; `call` runs the
// collective on them; the device run's tensors must end equal to the CPU's.
template <typename T, typename Make, typename Call>
void same_on_both(const char* what, Make make, Call call) {
  std::vector<Tensor> cpu = make(kCPU), dev = make(kDev);
  REQUIRE(dev.front().device() == kDev, what, ": not on the device");
  call(cpu);
  call(dev);
  for (size_t i = 0; i < cpu.size(); ++i) {
    REQUIRE(dev[i].device() == kDev, what, ": tensor ", i, " left the device");
    REQUIRE(host_values<T>(cpu[i]) == host_values<T>(dev[i]), what, ": tensor ", i, " differs from the CPU run's");
  }
}

Tensor ramp(int64_t n, double start, DType dt, Device d) {
  return (arange(0, n, 1, TensorOptions(DType::f64)) + start).to(dt).to(d);
}

TEST(LoopbackDist, EveryCollectiveOnDeviceTensorsEqualsTheHostOne) {
  auto r = qk_dist_test::on_ranks(2, "loopback-dist", [](const Rank& me, dist::ProcessGroup& pg) {
    harness::install_complete_loopback();
    const uint64_t a0 = device_allocs();
    const double base = 10.0 * (me.rank + 1);
    same_on_both<float>("all_reduce", [&](Device d) { return std::vector<Tensor>{ramp(7, base, DType::f32, d)}; },
                        [&](std::vector<Tensor>& t) { pg.all_reduce(t[0]); });
    same_on_both<float>("all_reduce_async avg",
                        [&](Device d) { return std::vector<Tensor>{ramp(1000, base, DType::f32, d)}; },
                        [&](std::vector<Tensor>& t) { pg.all_reduce_async(t[0], dist::ReduceOp::avg)->wait(); });
    same_on_both<int64_t>("broadcast from 1",
                          [&](Device d) { return std::vector<Tensor>{ramp(5, base, DType::i64, d)}; },
                          [&](std::vector<Tensor>& t) { pg.broadcast(t[0], 1); });
    same_on_both<float>("all_gather",
                        [&](Device d) {
                          return std::vector<Tensor>{zeros({6}, TensorOptions().device(d)),
                                                     ramp(3, base, DType::f32, d)};
                        },
                        [&](std::vector<Tensor>& t) { pg.all_gather(t[0], t[1]); });
    same_on_both<float>("reduce_scatter",
                        [&](Device d) {
                          return std::vector<Tensor>{zeros({4}, TensorOptions().device(d)),
                                                     ramp(8, base, DType::f32, d)};
                        },
                        [&](std::vector<Tensor>& t) { pg.reduce_scatter(t[0], t[1]); });
    same_on_both<float>("all_to_all",
                        [&](Device d) {
                          return std::vector<Tensor>{zeros({6}, TensorOptions().device(d)),
                                                     ramp(6, base, DType::f32, d)};
                        },
                        [&](std::vector<Tensor>& t) { pg.all_to_all(t[0], t[1]); });
    // Rank 0 keeps 1 row and sends 2; rank 1 sends 3 and keeps 1.
    const std::vector<int64_t> in_splits = me.rank == 0 ? std::vector<int64_t>{1, 2} : std::vector<int64_t>{3, 1};
    const std::vector<int64_t> out_splits = me.rank == 0 ? std::vector<int64_t>{1, 3} : std::vector<int64_t>{2, 1};
    same_on_both<float>("all_to_all_v",
                        [&](Device d) {
                          const int64_t in_rows = in_splits[0] + in_splits[1];
                          const int64_t out_rows = out_splits[0] + out_splits[1];
                          return std::vector<Tensor>{zeros({out_rows, 2}, TensorOptions().device(d)),
                                                     ramp(2 * in_rows, base, DType::f32, d).reshape({in_rows, 2})};
                        },
                        [&](std::vector<Tensor>& t) { pg.all_to_all_v(t[0], t[1], out_splits, in_splits); });
    same_on_both<float>(
        "batch_isend_irecv",
        [&](Device d) {
          return std::vector<Tensor>{ramp(4, base, DType::f32, d), zeros({4}, TensorOptions().device(d))};
        },
        [&](std::vector<Tensor>& t) {
          const int peer = 1 - me.rank;
          pg.batch_isend_irecv({dist::P2POp::send(t[0], peer), dist::P2POp::recv(t[1], peer)})->wait();
        });
    REQUIRE(device_allocs() > a0, "nothing was allocated on the device");
    // One call, two devices: refused before anything moves, on every rank alike.
    bool refused = false;
    try {
      pg.all_gather(zeros({6}), ramp(3, base, DType::f32, kDev));
    } catch (const DeviceError&) {
      refused = true;
    }
    REQUIRE(refused, "an all_gather from the device into a host tensor was not refused");
  });
  EXPECT_TRUE(r.ok()) << r.summary();
}

// DDP's run (common/device_ddp_run.h) from each rank's own weights, so rank
// 0's broadcast matters too.
std::vector<Tensor> ddp_run(dist::ProcessGroup& pg, Device d, std::optional<DType> compress) {
  test::DeviceDdpRun r;
  r.device = d;
  r.group = &pg;
  r.compress = compress;
  r.weight_scale = pg.rank() == 1 ? 0.5 : 1.0;
  return test::device_ddp_run(r);
}

TEST(LoopbackDist, DdpOnTheDeviceEndsWithTheCpuRunsWeights) {
  auto r = qk_dist_test::on_ranks(2, "loopback-ddp", [](const Rank&, dist::ProcessGroup& pg) {
    harness::install_complete_loopback();
    for (std::optional<DType> compress : {std::optional<DType>(), std::optional<DType>(DType::bf16)}) {
      const char* what = compress ? "bf16 compression" : "f32 buckets";
      const std::vector<Tensor> cpu = ddp_run(pg, kCPU, compress);
      const uint64_t a0 = device_allocs();
      const std::vector<Tensor> dev = ddp_run(pg, kDev, compress);
      REQUIRE(device_allocs() > a0 + 50, what, ": the device run did not run on the device");
      for (size_t i = 0; i < cpu.size(); ++i)
        REQUIRE(cpu[i].to_vector<float>() == dev[i].to_vector<float>(), what, ": parameter ", i,
                " differs from the CPU run's");
    }
  });
  EXPECT_TRUE(r.ok()) << r.summary();
}

// The trainer's own `qk run` path (it joins the group from the environment,
// DDP, metrics and checkpoints) with --device on the loopback device.
TEST(LoopbackDist, CifarTrainerOnTwoRanksOnTheDeviceEndsWithTheCpuRunsWeights) {
  namespace fs = std::filesystem;
  const fs::path root = fs::path(::testing::TempDir()) / ("qk_loopback_dist_" + std::to_string(::getpid()));
  fs::remove_all(root);
  const std::string data = (root / "data").string(), cpu = (root / "cpu").string(), dev = (root / "dev").string();
  qk::qccl::StoreServer server(0, "loopback-cifar");
  const int port = server.port();
  auto r = qccl_test::run_ranks(2, [&](const Rank& me) {
    ::setenv("RANK", std::to_string(me.rank).c_str(), 1);
    ::setenv("WORLD_SIZE", "2", 1);
    ::setenv("LOCAL_RANK", "0", 1);  // one loopback device: both ranks name privateuse1:0
    ::setenv("MASTER_ADDR", "127.0.0.1", 1);
    ::setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
    ::setenv("QK_STORE_TOKEN", "loopback-cifar", 1);
    ::setenv("QK_RUN", "1", 1);
    harness::install_complete_loopback();
    testing::internal::CaptureStdout();
    for (const char* amp : {"off", "bf16"}) {
      recipes::TrainCifarOptions o = test::tiny_cifar(data, cpu + amp, 1);
      o.amp = amp;
      recipes::train_cifar10(o);
      const uint64_t a0 = device_allocs();
      o.out = dev + amp;
      o.device = "privateuse1:0";
      recipes::train_cifar10(o);
      REQUIRE(device_allocs() > a0 + 100, amp, ": the device run did not run on the device");
    }
    const std::string log = testing::internal::GetCapturedStdout();
    if (me.rank != 0) return;
    for (const char* amp : {"off", "bf16"})
      REQUIRE(read_file(cpu + amp + "/checkpoints/latest.safetensors") ==
                  read_file(dev + amp + "/checkpoints/latest.safetensors"),
              amp, ": the device run's weights differ from the CPU run's\n", log);
  });
  EXPECT_TRUE(r.ok()) << r.summary();
  fs::remove_all(root);
}

// The vocabulary-parallel cross entropy's device path (whole-tensor ops)
// against its CPU loops on two ranks: loss and gradient within f32
// rounding, ignored targets giving 0 for both.
TEST(LoopbackDist, VocabParallelCrossEntropyOnTheDeviceMatchesTheCpu) {
  auto r = qk_dist_test::on_ranks(2, "loopback-ce", [](const Rank&, dist::ProcessGroup& pg) {
    harness::install_complete_loopback();
    Generator g(3 + pg.rank());
    const Tensor logits = randn({2, 5, 7}, {}, g) * 3.0;  // this rank's 7 of 14 columns
    const Tensor target = from_vector<int64_t>({0, 13, 6, 7, -100, 3, 12, 8, -100, 1}, {2, 5});
    const Tensor gout = randn({2, 5}, {}, g);
    auto run = [&](Device d) {
      Tensor x = logits.to(d).detach();
      x.requires_grad_();
      const Tensor loss = parallel::vocab_parallel_cross_entropy(x, target.to(d), pg, -100);
      REQUIRE(loss.device() == d, "the loss left the device");
      loss.backward(gout.to(d));
      return std::pair{loss.to(kCPU).to_vector<float>(), x.grad().to(kCPU).to_vector<float>()};
    };
    const auto [lc, gc] = run(kCPU);
    const auto [ld, gd] = run(kDev);
    for (size_t i = 0; i < lc.size(); ++i)
      REQUIRE(std::fabs(lc[i] - ld[i]) <= 1e-5f * (1 + std::fabs(lc[i])), "loss ", i, ": ", lc[i], " vs ", ld[i]);
    REQUIRE(lc[4] == 0.0f && ld[4] == 0.0f, "an ignored target has a loss");
    for (size_t i = 0; i < gc.size(); ++i)
      REQUIRE(std::fabs(gc[i] - gd[i]) <= 1e-5f, "gradient ", i, ": ", gc[i], " vs ", gd[i]);
  });
  EXPECT_TRUE(r.ok()) << r.summary();
}

// `qk pretrain-gpt` over two ranks (--bf16) with the model on the device,
// one layout per test (each its own pair of ranks and watchdog): data
// parallelism (the gradient all-reduce over the flat fp32 buffer, then
// Megatron's buffers with the distributed optimizer: reduce-scatter, sharded
// state, all-gather) and two pipeline stages give rank 0's checkpoint of the
// CPU run; tensor and sequence parallelism, and MoE layers (data-parallel,
// then expert-parallel with the all-to-all dispatcher), within a bf16 rounding.
enum class Layout { kAllReduce, kDistributedOptimizer, kTensorParallel, kPipeline, kMoe, kExpertParallel };

std::vector<std::string> layout_flags(Layout layout) {
  switch (layout) {
    case Layout::kAllReduce: return {};
    case Layout::kDistributedOptimizer:
      return {"--use-distributed-optimizer", "--overlap-grad-reduce", "--overlap-param-gather"};
    // SGD: the weights then differ from the CPU's as little as the gradients
    // (Adam's first steps are about sign(g), which rounding flips for a
    // gradient near 0).
    case Layout::kTensorParallel:
      return {"--tensor-model-parallel-size", "2", "--sequence-parallel", "--optimizer", "sgd"};
    case Layout::kPipeline: return {"--pipeline-model-parallel-size", "2"};
    case Layout::kMoe:
    case Layout::kExpertParallel: {
      std::vector<std::string> f = {"--num-experts", "4", "--moe-router-topk", "2", "--moe-ffn-hidden-size", "32",
                                    "--moe-expert-capacity-factor", "1.0", "--moe-aux-loss-coeff", "1e-2",
                                    "--moe-z-loss-coeff", "1e-3", "--optimizer", "sgd"};
      if (layout == Layout::kExpertParallel)
        f.insert(f.end(), {"--expert-model-parallel-size", "2", "--moe-token-dispatcher-type", "alltoall"});
      return f;
    }
  }
  return {};
}

class LoopbackPretrain : public ::testing::TestWithParam<Layout> {};

TEST_P(LoopbackPretrain, TwoRanksOnTheDeviceEqualTheCpuRun) {
  namespace fs = std::filesystem;
  const Layout layout = GetParam();
  const bool exact = layout == Layout::kAllReduce || layout == Layout::kDistributedOptimizer ||
                     layout == Layout::kPipeline;
  const fs::path root = fs::path(::testing::TempDir()) /
                        ("qk_loopback_gpt_" + std::to_string(::getpid()) + "_" + std::to_string(int(layout)));
  fs::remove_all(root);
  auto r = qk_dist_test::on_ranks(2, "loopback-gpt", [&](const Rank& me, dist::ProcessGroup&) {
    harness::install_complete_loopback();
    auto run = [&](const std::string& device) {
      const std::string save = (root / device).string();
      std::vector<std::string> argv = {
          "--num-layers", "2", "--hidden-size", "32", "--num-attention-heads", "4", "--seq-length", "16",
          "--max-position-embeddings", "16", "--micro-batch-size", "2", "--global-batch-size", "8",
          "--train-iters", "2", "--lr", "1e-2", "--mock-data", "--tokenizer-type", "NullTokenizer",
          "--vocab-size", "4096", "--eval-iters", "0", "--save", save, "--save-interval", "2", "--bf16"};
      const std::vector<std::string> extra = layout_flags(layout);
      argv.insert(argv.end(), extra.begin(), extra.end());
      recipes::MegatronArgsOptions mo;
      mo.world_size = 2;
      mo.rank = me.rank;
      mo.check_data_files = false;
      recipes::PretrainGptOptions o;
      o.print = [](const std::string&) {};
      o.measure_gemm_peak = false;
      o.device = device;
      recipes::pretrain_gpt(recipes::parse_megatron_args(argv, mo).args, o);
      return save + "/iter_0000000002/";
    };
    const std::string cpu = run("cpu");
    const uint64_t a0 = device_allocs();
    const std::string dev = run("privateuse1:0");
    REQUIRE(device_allocs() > a0 + 100, "the device run did not run on the device");
    if (me.rank != 0) return;
    if (exact) {
      for (const char* file : {"model.safetensors", "optim.safetensors"})
        REQUIRE(read_file(cpu + file) == read_file(dev + file), file, " differs from the CPU run's");
      return;
    }
    // The vocabulary-parallel loss and the MoE permutation's unfused form
    // (the device's) sum in other orders: close, not equal.
    const nn::TensorMap wc = nn::load_safetensors(cpu + "model.safetensors").tensors;
    const nn::TensorMap wd = nn::load_safetensors(dev + "model.safetensors").tensors;
    REQUIRE(wc.size() == wd.size() && !wc.empty(), "the checkpoints hold different tensors");
    for (const auto& [name, t] : wc) {
      const auto a = t.to(DType::f32).to_vector<float>(), b = wd.at(name).to(DType::f32).to_vector<float>();
      REQUIRE(a.size() == b.size(), name, " has another size");
      for (size_t i = 0; i < a.size(); ++i)
        REQUIRE(std::fabs(a[i] - b[i]) <= 1e-2f * (std::fabs(a[i]) + 1e-2f), name, "[", i, "] is ", b[i],
                " on the device, ", a[i], " on the CPU");
    }
  });
  EXPECT_TRUE(r.ok()) << r.summary();
  fs::remove_all(root);
}

INSTANTIATE_TEST_SUITE_P(Layouts, LoopbackPretrain,
                         ::testing::Values(Layout::kAllReduce, Layout::kDistributedOptimizer,
                                           Layout::kTensorParallel, Layout::kPipeline, Layout::kMoe,
                                           Layout::kExpertParallel),
                         [](const ::testing::TestParamInfo<Layout>& i) {
                           switch (i.param) {
                             case Layout::kAllReduce: return std::string("AllReduce");
                             case Layout::kDistributedOptimizer: return std::string("DistributedOptimizer");
                             case Layout::kTensorParallel: return std::string("TensorSequenceParallel");
                             case Layout::kPipeline: return std::string("Pipeline");
                             case Layout::kMoe: return std::string("Moe");
                             case Layout::kExpertParallel: return std::string("ExpertParallel");
                           }
                           return std::string("Unknown");
                         });

}  // namespace
