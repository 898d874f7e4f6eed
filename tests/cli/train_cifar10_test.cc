// End to end: `qk train cifar10` and `qk infer cifar10` on a tiny synthetic
// CIFAR-10 (each test writes its own data and output folders).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <vector>

#include "common/scratch_dir.h"
#include "run_qk.h"

namespace {

namespace fs = std::filesystem;
using qk::test::run_qk;

// Per process, removed at exit when every test passed (they write 2.5 GB of data, checkpoints and models).
const qk::test::ScratchRoot kScratch("train_cifar10");

std::string fresh_dir(const std::string& name) { return kScratch.fresh(name); }

struct EpochLine {
  int epoch = 0, epochs = 0;
  double train_loss = 0, train_acc = 0, val_loss = 0, val_acc = 0;
  std::string val_acc_text;  // as printed, e.g. "41.80"
};

std::vector<EpochLine> epoch_lines(const std::string& out) {
  static const std::regex re(
      R"(Epoch (\d+)/(\d+)  train loss ([0-9.]+) acc ([0-9.]+)%  val loss ([0-9.]+) acc ([0-9.]+)%)");
  std::vector<EpochLine> v;
  for (std::sregex_iterator it(out.begin(), out.end(), re), end; it != end; ++it) {
    const std::smatch& m = *it;
    v.push_back({std::stoi(m[1]), std::stoi(m[2]), std::stod(m[3]), std::stod(m[4]), std::stod(m[5]),
                 std::stod(m[6]), m[6]});
  }
  return v;
}

void expect_png(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  ASSERT_TRUE(f.good()) << path << " missing";
  std::string head(8, '\0');
  f.read(head.data(), 8);
  EXPECT_EQ(head, std::string("\x89PNG\r\n\x1a\n", 8)) << path;
  EXPECT_GT(fs::file_size(path), 5000u) << path << " is suspiciously small";
}

// Tiny data, small batches: seconds per run on two cores. The synthetic set
// needs thousands of steps to generalise, far beyond a unit test, so the
// learning test checks that a 100-image set is being fitted (training loss
// and accuracy), not validation accuracy (see docs/cifar10_training.md for
// full-size runs).
std::string train_args(const std::string& dir, int epochs, const std::string& extra = "",
                       const std::string& out = "run") {
  return "train cifar10 --data-dir " + dir + "/data --out " + dir + "/" + out + " --synth-train 100 --synth-test 100 " +
         "--batch-size 20 --lr 0.002 --epochs " + std::to_string(epochs) + " --threads 2 --num-workers 1 --seed 7 " +
         extra;
}

TEST(TrainCifar10, LossFallsAndInferAgreesWithTrainer) {
  const std::string dir = fresh_dir("basic");
  const int n = 12;
  const auto r = run_qk(train_args(dir, n));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("SYNTHETIC"), std::string::npos) << "the logs must say the data are synthetic";
  const auto ep = epoch_lines(r.output);
  ASSERT_EQ(ep.size(), static_cast<size_t>(n)) << r.output;
  for (int i = 0; i < n; ++i) EXPECT_EQ(ep[static_cast<size_t>(i)].epoch, i + 1);
  // ln(10) = 2.303 and 10% are chance; the fit must have clearly started.
  EXPECT_LT(ep.back().train_loss, ep.front().train_loss - 0.1) << r.output;
  EXPECT_GE(ep.back().train_acc, 15.0) << r.output;
  EXPECT_NE(r.output.find("best validation accuracy"), std::string::npos);
  EXPECT_NE(r.output.find("mean epoch time"), std::string::npos);
  for (const char* f : {"latest.safetensors", "latest.json", "latest.optim.safetensors", "best.safetensors",
                        "best.json"}) {
    EXPECT_TRUE(fs::exists(dir + "/run/checkpoints/" + f)) << f;
  }
  expect_png(dir + "/run/training_curves.png");

  // infer on the last epoch's weights reports the trainer's last validation accuracy
  const auto inf = run_qk("infer cifar10 --model simple_cnn --checkpoint " + dir +
                          "/run/checkpoints/latest.safetensors --data-dir " + dir + "/data --visualize --out " + dir +
                          "/run --threads 2");
  ASSERT_EQ(inf.exit_code, 0) << inf.output;
  EXPECT_NE(inf.output.find("accuracy: " + ep.back().val_acc_text + "%"), std::string::npos)
      << "trainer said " << ep.back().val_acc_text << "%\n" << inf.output;
  EXPECT_NE(inf.output.find("single-image latency"), std::string::npos);
  EXPECT_NE(inf.output.find("confusion matrix"), std::string::npos);
  EXPECT_NE(inf.output.find("peak memory"), std::string::npos);
  expect_png(dir + "/run/inference_results.png");
}

// The slowest test here (about 15-25 s on two cores): enough steps (2 x 94) for
// SimpleCNN to generalise on held-out synthetic images.
TEST(TrainCifar10, ValidationAccuracyClearlyBeatsChance) {
  const std::string dir = fresh_dir("learn");
  const auto r = run_qk("train cifar10 --data-dir " + dir + "/data --out " + dir +
                        "/run --synth-train 3000 --synth-test 200 --batch-size 32 --epochs 2 --threads 2 "
                        "--num-workers 1 --seed 7");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto ep = epoch_lines(r.output);
  ASSERT_EQ(ep.size(), 2u) << r.output;
  EXPECT_LT(ep[1].train_loss, ep[0].train_loss) << r.output;
  EXPECT_LT(ep[1].val_loss, ep[0].val_loss) << r.output;
  EXPECT_LT(ep[1].val_loss, 2.0) << r.output;  // chance: ln(10) = 2.303
  EXPECT_GT(ep[1].val_acc, 25.0) << "chance is 10%\n" << r.output;
}

TEST(TrainCifar10, ResumeKeepsEpochNumberingAndDataOrder) {
  const std::string dir = fresh_dir("resume");
  const auto full = run_qk(train_args(dir, 2, "", "full"));
  ASSERT_EQ(full.exit_code, 0) << full.output;
  const auto first = run_qk(train_args(dir, 1));
  ASSERT_EQ(first.exit_code, 0) << first.output;
  const auto resumed = run_qk(train_args(dir, 2, "--resume"));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("continuing at epoch 2/2"), std::string::npos) << resumed.output;
  const auto ep = epoch_lines(resumed.output);
  ASSERT_EQ(ep.size(), 1u) << resumed.output;
  EXPECT_EQ(ep[0].epoch, 2);
  // Same weights, optimizer, dropout RNG and batches: epoch 2 as if never stopped.
  const auto ref = epoch_lines(full.output);
  ASSERT_EQ(ref.size(), 2u) << full.output;
  EXPECT_DOUBLE_EQ(ep[0].train_loss, ref[1].train_loss) << resumed.output << "\n---\n" << full.output;
  EXPECT_DOUBLE_EQ(ep[0].val_acc, ref[1].val_acc);
  // A finished run resumed again has nothing left to do, and says so; in the
  // spelling of torchrun-style scripts (`--resume auto`) too, and with the
  // value before other flags.
  for (const char* flag : {"--resume", "--resume auto", "--resume=auto"}) {
    const auto again = run_qk(train_args(dir, 2, flag));
    ASSERT_EQ(again.exit_code, 0) << flag << "\n" << again.output;
    EXPECT_TRUE(epoch_lines(again.output).empty()) << flag << "\n" << again.output;
    EXPECT_NE(again.output.find("resumed from"), std::string::npos) << flag << "\n" << again.output;
  }
  const std::string rest = train_args(dir, 2).substr(std::string("train cifar10 ").size());
  const auto before_flags = run_qk("train cifar10 --resume auto " + rest);
  ASSERT_EQ(before_flags.exit_code, 0) << before_flags.output;
  EXPECT_NE(before_flags.output.find("resumed from"), std::string::npos) << before_flags.output;
}

TEST(TrainCifar10, ResnetCheckpointIntoSimpleCnnFailsClearly) {
  const std::string dir = fresh_dir("mismatch");
  const auto r = run_qk("train cifar10 --model simple_resnet --data-dir " + dir + "/data --out " + dir +
                        "/run --synth-train 16 --synth-test 16 --batch-size 16 --epochs 1 --threads 2 --num-workers 0");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto bad = run_qk("infer cifar10 --model simple_cnn --checkpoint " + dir +
                          "/run/checkpoints/latest.safetensors --data-dir " + dir + "/data");
  EXPECT_EQ(bad.exit_code, 1) << bad.output;
  EXPECT_NE(bad.output.find("model 'simple_resnet'"), std::string::npos) << bad.output;
  EXPECT_NE(bad.output.find("--model simple_cnn"), std::string::npos) << bad.output;
  EXPECT_NE(bad.output.find("keys missing"), std::string::npos) << bad.output;
  EXPECT_NE(bad.output.find("conv1.bias"), std::string::npos) << "names a key\n" << bad.output;
  // --resume with the wrong --model names both models too.
  const auto res = run_qk("train cifar10 --model simple_cnn --data-dir " + dir + "/data --out " + dir +
                          "/run --epochs 2 --resume");
  EXPECT_EQ(res.exit_code, 1) << res.output;
  EXPECT_NE(res.output.find("--model simple_resnet"), std::string::npos) << res.output;
}

TEST(TrainCifar10, BadInputsGiveClearErrors) {
  const std::string dir = fresh_dir("bad");
  const auto missing = run_qk("infer cifar10 --checkpoint " + dir + "/nope.safetensors --data-dir " + dir);
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_NE(missing.output.find("No CIFAR-10 in"), std::string::npos) << missing.output;
  const auto bad_model = run_qk("train cifar10 --model vgg --data-dir " + dir);
  EXPECT_NE(bad_model.exit_code, 0);
  EXPECT_NE(bad_model.output.find("simple_cnn"), std::string::npos) << bad_model.output;
  std::ofstream(dir + "/garbage.json") << "{not json";
  const auto bad_resume = run_qk(train_args(dir, 1, "--resume=" + dir + "/garbage.json"));
  EXPECT_EQ(bad_resume.exit_code, 1) << bad_resume.output;
  EXPECT_NE(bad_resume.output.find("garbage.json"), std::string::npos) << bad_resume.output;
  // CUDA graphs need a GPU; --help says what the flag does.
  const auto graph_cpu = run_qk("train cifar10 --cuda-graph --data-dir " + dir);
  EXPECT_EQ(graph_cpu.exit_code, 1);
  EXPECT_NE(graph_cpu.output.find("--cuda-graph records each step as a CUDA graph: it needs a GPU"),
            std::string::npos) << graph_cpu.output;
  const auto help = run_qk("train cifar10 --help");
  EXPECT_NE(help.output.find("--cuda-graph"), std::string::npos) << help.output;
}

}  // namespace

// --channels-last (activations stored NHWC) trains SimpleCNN as the
// contiguous layout: the same losses, epoch by epoch. (The ResNet's tiny
// run here is chaotic, its eval-mode losses in the tens after ten steps:
// one step of it is compared in SimpleResNet.ChannelsLastTrainsAsTheContiguousLayout.)
TEST(TrainCifar10, ChannelsLastTrainsAsTheContiguousLayout) {
  const std::string dir = fresh_dir("channels_last");
  const auto plain = run_qk(train_args(dir, 2, "", "plain"));
  ASSERT_EQ(plain.exit_code, 0) << plain.output;
  const auto cl = run_qk(train_args(dir, 2, "--channels-last", "cl"));
  ASSERT_EQ(cl.exit_code, 0) << cl.output;
  EXPECT_NE(cl.output.find(", channels last"), std::string::npos) << cl.output;
  const auto a = epoch_lines(plain.output), b = epoch_lines(cl.output);
  ASSERT_EQ(a.size(), 2u) << plain.output;
  ASSERT_EQ(b.size(), 2u) << cl.output;
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_NEAR(b[i].train_loss, a[i].train_loss, 2e-3) << "epoch " << i + 1;
    EXPECT_NEAR(b[i].val_loss, a[i].val_loss, 2e-3) << "epoch " << i + 1;
  }
  const auto help = run_qk("train cifar10 --help");
  EXPECT_NE(help.output.find("--channels-last"), std::string::npos) << help.output;
}

// bf16 autocast (convs and linears in bf16, AMX kernels where present)
// learns like f32: both validation figures clearly beat chance.
TEST(TrainCifar10, Bf16AutocastConverges) {
  const std::string dir = fresh_dir("amp_bf16");
  const auto r = run_qk("train cifar10 --amp bf16 --data-dir " + dir + "/data --out " + dir +
                        "/run --synth-train 3000 --synth-test 200 --batch-size 32 --epochs 2 --threads 2 "
                        "--num-workers 1 --seed 7");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("amp bf16"), std::string::npos) << r.output;
  const auto ep = epoch_lines(r.output);
  ASSERT_EQ(ep.size(), 2u) << r.output;
  EXPECT_LT(ep[1].train_loss, ep[0].train_loss) << r.output;
  EXPECT_LT(ep[1].val_loss, 2.0) << r.output;
  EXPECT_GT(ep[1].val_acc, 25.0) << "chance is 10%\n" << r.output;
}

// fp16 autocast with loss scaling trains, and its scaler state reaches the
// checkpoint sidecar.
TEST(TrainCifar10, Fp16WithLossScalingTrainsAndCheckpointsTheScaler) {
  const std::string dir = fresh_dir("amp_fp16");
  const auto r = run_qk(train_args(dir, 2, "--amp fp16"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto ep = epoch_lines(r.output);
  ASSERT_EQ(ep.size(), 2u) << r.output;
  EXPECT_LT(ep[1].train_loss, ep[0].train_loss) << r.output;
  std::ifstream side(dir + "/run/checkpoints/latest.json");
  std::string json((std::istreambuf_iterator<char>(side)), std::istreambuf_iterator<char>());
  EXPECT_NE(json.find("\"grad_scaler\""), std::string::npos) << json;
  EXPECT_NE(json.find("\"amp\": \"fp16\""), std::string::npos) << json;
}

// Data-parallel under `qk run`: two ranks share the data, rank 0 alone logs
// and checkpoints, the DDP line and the per-step communication time appear.
TEST(TrainCifar10, DataParallelUnderQkRun) {
  const std::string dir = fresh_dir("ddp");
  std::string args = train_args(dir, 2, "--bucket-cap-mb 1");
  args.replace(args.find("--threads 2"), 11, "--threads 1");  // one core per rank
  const auto r = run_qk("run --nproc-per-node 2 -- " + std::string(QK_BIN) + " " + args);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("data-parallel: 2 ranks, batch 20 per rank (global 40)"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("comm wait"), std::string::npos) << r.output;
  const auto ep = epoch_lines(r.output);
  ASSERT_EQ(ep.size(), 2u) << "only rank 0 logs epochs\n" << r.output;
  EXPECT_LT(ep[1].train_loss, ep[0].train_loss) << r.output;
  EXPECT_TRUE(fs::exists(dir + "/run/checkpoints/latest.safetensors")) << r.output;
  EXPECT_EQ(r.output.find("[rank1]: Epoch"), std::string::npos) << r.output;
}

// --sync-bn under qk run: every BatchNorm of the ResNet is converted and the
// synced layers train (their collectives run in forward and backward).
TEST(TrainCifar10, SyncBatchNormUnderQkRun) {
  const std::string dir = fresh_dir("syncbn");
  std::string args = train_args(dir, 1, "--model simple_resnet --sync-bn");
  args.replace(args.find("--threads 2"), 11, "--threads 1");
  const auto r = run_qk("run --nproc-per-node 2 -- " + std::string(QK_BIN) + " " + args);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("SyncBatchNorm: 20 BatchNorm layers normalise over all 2 ranks' batches"),
            std::string::npos)
      << r.output;
  EXPECT_EQ(epoch_lines(r.output).size(), 1u) << r.output;
}

namespace {

// --device: a device this machine lacks, or no device at all, stops a
// training or inference run before any data is read or written, naming the flag (cuda:7: no machine here has
// eight GPUs; without the CUDA backend or a GPU the reason says so).
TEST(TrainCifar10, UnusableDeviceFailsClearlyBeforeAnyWork) {
  const std::string dir = fresh_dir("device");
  const std::string rest = " --data-dir " + dir + "/data --out " + dir + "/run --epochs 1";
  const auto gpu = run_qk("train cifar10 --device cuda:7" + rest);
  EXPECT_EQ(gpu.exit_code, 1) << gpu.output;
  EXPECT_NE(gpu.output.find("--device cuda:7"), std::string::npos) << gpu.output;
  const auto bad = run_qk("train cifar10 --device tpu" + rest);
  EXPECT_EQ(bad.exit_code, 1) << bad.output;
  EXPECT_NE(bad.output.find("unknown device 'tpu'"), std::string::npos) << bad.output;
  EXPECT_FALSE(std::filesystem::exists(dir + "/data")) << "nothing written before the flags are checked";
  const auto infer = run_qk("infer cifar10 --device cuda:7 --data-dir " + dir + "/data");
  EXPECT_EQ(infer.exit_code, 1) << infer.output;
  EXPECT_NE(infer.output.find("--device cuda:7"), std::string::npos) << infer.output;
}

}  // namespace
