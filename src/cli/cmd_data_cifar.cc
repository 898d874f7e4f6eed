// `qk data synth-cifar | cifar-info | download-cifar`: CIFAR-10 data tools.
//
//   qk data synth-cifar --out data                        # 50000 + 10000 synthetic images
//   qk data synth-cifar --out /tmp/c --num-train 500 --num-test 100 --seed 3
//   qk data cifar-info data                               # validate and summarise
//   qk data download-cifar --data-dir data                # the official release
#include <fmt/format.h>

#include <memory>

#include "command.h"
#include "data_cli.h"
#include "qk/base/timer.h"
#include "qk/data/cifar10.h"
#include "qk/data/download.h"

namespace qk::cli {
namespace {

void setup_synth_cifar(CLI::App& app) {
  struct Args {
    std::string out;
    qk::data::SynthCifarOptions o;
  };
  auto a = std::make_shared<Args>();
  app.add_option("--out", a->out, "Data folder; the files go to OUT/cifar-10-batches-bin/")->required();
  app.add_option("--num-train", a->o.num_train, "Training images (split over data_batch_1..5.bin)")
      ->check(CLI::Range(int64_t{5}, int64_t{50000}))
      ->capture_default_str();
  app.add_option("--num-test", a->o.num_test, "Test images (test_batch.bin)")
      ->check(CLI::Range(int64_t{1}, int64_t{10000}))
      ->capture_default_str();
  app.add_option("--seed", a->o.seed, "Random seed: the same seed writes the same bytes")->capture_default_str();
  app.callback([a] {
    const Timer t;
    const std::string dir = qk::data::synth_cifar(a->out, a->o);
    fmt::print("wrote a SYNTHETIC CIFAR-10 ({} training + {} test images, seed {}) to {} in {}\n", a->o.num_train,
               a->o.num_test, a->o.seed, dir, format_duration(t.seconds()));
    fmt::print("classes: shape (disk, square, triangle, cross, ring) x surface (solid, striped); "
               "train with --data-dir {}\n",
               a->out);
  });
}

QK_REGISTER_DATA_COMMAND(synth_cifar, "synth-cifar",
                         "Write a deterministic synthetic CIFAR-10 in the official binary format",
                         setup_synth_cifar);

void setup_cifar_info(CLI::App& app) {
  auto dir = std::make_shared<std::string>();
  app.add_option("data_dir", *dir, "Data folder (holding cifar-10-batches-bin/) or the batches folder")
      ->required();
  app.callback([dir] {
    const Timer t;
    const auto d = qk::data::load_cifar10(*dir);
    fmt::print("folder      {}{}\n", d.dir, d.synthetic ? "  (SYNTHETIC data written by qk data synth-cifar)" : "");
    fmt::print("train       {} images [3, 32, 32] u8\ntest        {} images\n", d.train.size(), d.test.size());
    for (auto* split : {&d.train, &d.test}) {
      std::vector<int64_t> count(static_cast<size_t>(qk::data::kCifarNumClasses), 0);
      const int64_t* l = split->labels.data_ptr<int64_t>();
      for (int64_t i = 0; i < split->size(); ++i) ++count[static_cast<size_t>(l[i])];
      std::string row;
      for (size_t c = 0; c < count.size(); ++c) row += fmt::format("{}{} {}", c ? ", " : "", d.classes[c], count[c]);
      fmt::print("{} classes {}\n", split == &d.train ? "train" : "test ", row);
    }
    fmt::print("valid: every file checked in {}\n", format_duration(t.seconds()));
  });
}

QK_REGISTER_DATA_COMMAND(cifar_info, "cifar-info", "Validate a CIFAR-10 binary folder and count its classes",
                         setup_cifar_info);

void setup_download_cifar(CLI::App& app) {
  struct Args {
    std::string dir = "data";
    qk::data::DownloadOptions o;
  };
  auto a = std::make_shared<Args>();
  app.add_option("--data-dir", a->dir, "Data folder; the release unpacks to DATA_DIR/cifar-10-batches-bin/")
      ->capture_default_str();
  app.add_option("--url", a->o.url, "Archive URL (default: $QK_CIFAR10_URL, else the official one)");
  app.add_option("--md5", a->o.md5, "Expected MD5 of the archive (default: $QK_CIFAR10_MD5, else the official one)");
  app.add_option("--stall-timeout", a->o.stall_timeout_s, "Give up after this many seconds below 1 KiB/s")
      ->check(CLI::Range(1, 3600))
      ->capture_default_str();
  app.callback([a] {
    const std::string dir = qk::data::download_cifar10(a->dir, a->o);
    fmt::print("CIFAR-10 ready in {}\n", dir);
  });
}

QK_REGISTER_DATA_COMMAND(download_cifar, "download-cifar",
                         "Download, verify (MD5) and unpack the official CIFAR-10 binary release",
                         setup_download_cifar);

}  // namespace
}  // namespace qk::cli
