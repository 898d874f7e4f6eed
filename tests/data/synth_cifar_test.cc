// The synthetic CIFAR-10: format, determinism, balance, and that the classes
// differ in the way the generator claims (shape and surface, not colour).
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <filesystem>

#include "data/test_util.h"
#include "qk/base/error.h"
#include "qk/base/file_io.h"
#include "qk/data/cifar10.h"

namespace {

namespace fs = std::filesystem;
using qk::test::TempDir;

TEST(SynthCifar, SameSeedSameBytesOtherSeedOtherBytes) {
  TempDir a("synth_a"), b("synth_b"), c("synth_c");
  qk::data::synth_cifar(a.path(), {.num_train = 40, .num_test = 10, .seed = 3});
  qk::data::synth_cifar(b.path(), {.num_train = 40, .num_test = 10, .seed = 3});
  qk::data::synth_cifar(c.path(), {.num_train = 40, .num_test = 10, .seed = 4});
  for (const auto& f : qk::data::cifar10_file_names()) {
    const std::string rel = std::string("/cifar-10-batches-bin/") + f;
    EXPECT_EQ(qk::read_file(a.path() + rel), qk::read_file(b.path() + rel)) << f;
    if (f.ends_with(".bin")) {
      EXPECT_NE(qk::read_file(a.path() + rel), qk::read_file(c.path() + rel)) << f;
    }
  }
}

TEST(SynthCifar, ImageBytesArePinned) {
  // Note [integer geometry] in synth_cifar.cc: the bytes are the same on every
  // machine. A change here changes every synthetic data set; do it knowingly.
  std::array<uint8_t, 3072> img{};
  uint64_t h = 1469598103934665603ULL;  // FNV-1a over a few images
  for (int64_t label = 0; label < 10; ++label) {
    qk::data::synth_cifar_image(label, 1000 + static_cast<uint64_t>(label), img.data());
    for (uint8_t v : img) h = (h ^ v) * 1099511628211ULL;
  }
  EXPECT_EQ(h, 2107970250066202733ULL) << "pinned hash; if intended, update to " << h;
}

TEST(SynthCifar, FullSizeMatchesOfficialFileSizesAndIsBalanced) {
  // The official layout: 5 x 10000 training records, 10000 test records.
  // Generating 60000 images also measures the speed the docs quote.
  TempDir t("synth_full");
  const std::string dir = qk::data::synth_cifar(t.path(), {.seed = 1});
  for (int k = 1; k <= 5; ++k)
    EXPECT_EQ(fs::file_size(dir + "/data_batch_" + std::to_string(k) + ".bin"), 30730000u);
  EXPECT_EQ(fs::file_size(dir + "/test_batch.bin"), 30730000u);
  const auto d = qk::data::load_cifar10(t.path());
  std::array<int64_t, 10> train{}, test{};
  for (int64_t l : d.train.labels.to_vector<int64_t>()) ++train[static_cast<size_t>(l)];
  for (int64_t l : d.test.labels.to_vector<int64_t>()) ++test[static_cast<size_t>(l)];
  for (int c = 0; c < 10; ++c) {
    EXPECT_EQ(train[static_cast<size_t>(c)], 5000);
    EXPECT_EQ(test[static_cast<size_t>(c)], 1000);
  }
  // Files are in random class order, not sorted by class.
  const auto l = d.train.labels.to_vector<int64_t>();
  int64_t runs = 0;
  for (size_t i = 1; i < 1000; ++i) runs += l[i] != l[i - 1];
  EXPECT_GT(runs, 800);
}

TEST(SynthCifar, StripedClassesHaveSharpStripes) {
  // Striped classes (5..9) must have clearly more sharp
  // left-right jumps (> 60 levels, well above the pixel noise) than the solid
  // class (0..4) of the same shape.
  constexpr int kPer = 400;
  std::array<double, 10> mean{}, jumps{};
  std::array<uint8_t, 3072> img{};
  for (int64_t label = 0; label < 10; ++label) {
    for (int i = 0; i < kPer; ++i) {
      qk::data::synth_cifar_image(label, static_cast<uint64_t>(label * 100003 + i), img.data());
      double s = 0, j = 0;
      for (int c = 0; c < 3; ++c)
        for (int y = 0; y < 32; ++y)
          for (int x = 0; x < 32; ++x) {
            const int v = img[static_cast<size_t>(c * 1024 + y * 32 + x)];
            s += v;
            if (x > 0) j += std::abs(v - img[static_cast<size_t>(c * 1024 + y * 32 + x - 1)]) > 60;
          }
      mean[static_cast<size_t>(label)] += s / 3072 / kPer;
      jumps[static_cast<size_t>(label)] += j / kPer;
    }
  }
  // The image mean stays mid-grey for every class: the background dominates.
  for (int c = 0; c < 10; ++c) EXPECT_NEAR(mean[static_cast<size_t>(c)], 127.5, 15.0) << "class " << c;
  for (int s = 0; s < 5; ++s)
    EXPECT_GT(jumps[static_cast<size_t>(s + 5)], jumps[static_cast<size_t>(s)] * 1.2) << "shape " << s;
}

TEST(SynthCifar, RejectsSizesOutsideTheFormat) {
  TempDir t("synth_bad");
  EXPECT_THROW(qk::data::synth_cifar(t.path(), {.num_train = 4, .num_test = 1}), qk::ValueError);
  EXPECT_THROW(qk::data::synth_cifar(t.path(), {.num_train = 50001, .num_test = 1}), qk::ValueError);
  EXPECT_THROW(qk::data::synth_cifar(t.path(), {.num_train = 5, .num_test = 0}), qk::ValueError);
  EXPECT_THROW(qk::data::synth_cifar(t.path(), {.num_train = 5, .num_test = 10001}), qk::ValueError);
  EXPECT_THROW(qk::data::synth_cifar_image(10, 0, nullptr), qk::ValueError);
}

}  // namespace
