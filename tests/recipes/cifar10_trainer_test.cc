// The CIFAR-10 trainer as a library call: a checkpoint in the format written
// before the trainer moved onto qk/train (qk-cifar10-checkpoint-v1: the
// optimizer state by index, the state at the JSON's top level) resumes to
// the weights of an uninterrupted run, bit for bit.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "common/scratch_dir.h"
#include "common/tiny_cifar.h"
#include "qk/base/error.h"
#include "qk/base/file_io.h"
#include "qk/models/cifar10.h"
#include "qk/recipes/cifar10_trainer.h"
#include "qk/optim/optimizer.h"
#include "qk/optim/mixed_precision_optimizer.h"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// build/test_tmp/cifar10_trainer/<pid>, removed at exit when every test passed.
const qk::test::ScratchRoot kScratch("cifar10_trainer");
std::string fresh_dir(const std::string& name) { return kScratch.fresh(name); }

qk::recipes::TrainCifarOptions tiny(const std::string& data, const std::string& out, int epochs) {
  return qk::test::tiny_cifar(data, out, epochs);
}

// Rewrites the v2 sidecar DIR/latest.json as the v1 trainer wrote it:
// optim::save by index, RNG as one object, the CIFAR state at the top.
std::string as_v1(const std::string& dir) {
  const json v2 = json::parse(qk::read_file(dir + "/latest.json"));
  EXPECT_EQ(v2.at("format"), "qk-cifar10-checkpoint-v2");
  const qk::models::CifarModel m = qk::models::make_cifar_model("simple_cnn");
  qk::optim::MixedPrecisionOptimizer opt(qk::optim::single_param_group(*m.module),
                                         qk::optim::adam(qk::optim::AdamOptions(1e-3)));
  opt.load_state(dir + "/" + v2.at("optimizer_state").get<std::string>());
  qk::optim::save(opt.optimizer(), dir + "/v1.optim.safetensors");
  json v1 = v2.at("user");
  v1["format"] = "qk-cifar10-checkpoint-v1";
  v1["weights"] = v2.at("weights");
  v1["optimizer_state"] = "v1.optim.safetensors";
  v1["rng"] = v2.at("rng").at(0);
  v1["hparams"] = v2.at("args");
  const std::string path = dir + "/v1.json";
  qk::atomic_write_file(path, v1.dump(2));
  return path;
}

TEST(Cifar10Trainer, Version1CheckpointsStillResumeBitIdentical) {
  const std::string data = fresh_dir("data");
  const std::string full = fresh_dir("full"), part = fresh_dir("part");
  qk::recipes::train_cifar10(tiny(data, full, 2));
  qk::recipes::train_cifar10(tiny(data, part, 1));
  const std::string sidecar = as_v1(part + "/checkpoints");
  qk::recipes::TrainCifarOptions resumed = tiny(data, part, 2);
  resumed.resume = sidecar;
  testing::internal::CaptureStdout();
  qk::recipes::train_cifar10(resumed);
  const std::string out = testing::internal::GetCapturedStdout();
  EXPECT_NE(out.find("resumed from " + sidecar + ": 1 epochs done"), std::string::npos) << out;
  EXPECT_NE(out.find("continuing at epoch 2/2"), std::string::npos) << out;
  EXPECT_TRUE(qk::read_file(part + "/checkpoints/latest.safetensors") ==
              qk::read_file(full + "/checkpoints/latest.safetensors"))
      << "a v1 resume must continue exactly\n" << out;
  const json latest = json::parse(qk::read_file(part + "/checkpoints/latest.json"));
  EXPECT_EQ(latest.at("format"), "qk-cifar10-checkpoint-v2");
  EXPECT_EQ(latest.at("user").at("epoch"), 2);
}

TEST(Cifar10Trainer, UnknownFormatIsRefused) {
  const std::string data = fresh_dir("data_bad"), out = fresh_dir("bad");
  qk::recipes::train_cifar10(tiny(data, out, 1));
  json j = json::parse(qk::read_file(out + "/checkpoints/latest.json"));
  j["format"] = "qk-cifar10-checkpoint-v9";
  qk::atomic_write_file(out + "/checkpoints/odd.json", j.dump());
  qk::recipes::TrainCifarOptions o = tiny(data, out, 2);
  o.resume = out + "/checkpoints/odd.json";
  try {
    qk::recipes::train_cifar10(o);
    ADD_FAILURE() << "an unknown format must be refused";
  } catch (const qk::IoError& e) {
    EXPECT_NE(std::string(e.what()).find("qk-cifar10-checkpoint-v9"), std::string::npos) << e.what();
  }
}

// The stages one by one train as train_cifar10() does; out of order, each
// says which stage is missing.
TEST(Cifar10Trainer, StagesOneByOneTrainAsTrainCifar10) {
  const std::string data = fresh_dir("data_stages"), whole = fresh_dir("whole"), staged = fresh_dir("staged");
  qk::recipes::train_cifar10(tiny(data, whole, 1));
  qk::recipes::Cifar10Training run(tiny(data, staged, 1));
  auto message = [](auto&& f) {
    try {
      f();
    } catch (const qk::Error& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  EXPECT_NE(message([&] { run.train(); }).find("needs build_data_loader() first"), std::string::npos);
  EXPECT_NE(message([&] { run.model(); }).find("needs setup_model_and_optimizer() first"), std::string::npos);
  run.initialize();
  run.setup_model_and_optimizer();
  EXPECT_GT(run.model().parameters().size(), 0u);
  EXPECT_EQ(run.epochs_done(), 0);
  run.build_data_loader();
  run.train();
  EXPECT_EQ(run.epochs_done(), 1);
  EXPECT_GE(run.best_val_acc(), 0.0);
  EXPECT_NE(message([&] { run.train(); }).find("already run"), std::string::npos);
  run.finish();
  EXPECT_TRUE(fs::exists(staged + "/training_curves.png"));
  EXPECT_EQ(qk::read_file(staged + "/checkpoints/latest.safetensors"),
            qk::read_file(whole + "/checkpoints/latest.safetensors"));
}

}  // namespace
