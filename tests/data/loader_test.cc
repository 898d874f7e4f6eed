// The DataLoader: normalisation, augmentation, shuffling, resuming,
// distribution, worker determinism, prefetch bound, errors and shutdown.
#include "qk/data/loader.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <set>
#include <thread>

#include "qk/base/error.h"

namespace {

using qk::data::Batch;
using qk::data::DataLoader;
using qk::data::DataLoaderOptions;
using qk::data::ImageDataset;

// n images of [3, h, w] whose pixels encode (sample, channel, y, x), and
// label = sample index, so a batch tells which samples it holds.
std::shared_ptr<ImageDataset> numbered(int64_t n, int64_t h = 32, int64_t w = 32) {
  std::vector<uint8_t> px(static_cast<size_t>(n * 3 * h * w));
  for (int64_t i = 0; i < n; ++i)
    for (int64_t c = 0; c < 3; ++c)
      for (int64_t y = 0; y < h; ++y)
        for (int64_t x = 0; x < w; ++x)
          px[static_cast<size_t>(((i * 3 + c) * h + y) * w + x)] = static_cast<uint8_t>((i * 31 + c * 50 + y * 7 + x * 3 + 1) & 0xff);
  std::vector<int64_t> labels(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) labels[static_cast<size_t>(i)] = i;
  return std::make_shared<ImageDataset>(qk::from_vector(px, {n, 3, h, w}), qk::from_vector(labels, {n}));
}

std::vector<Batch> pass(DataLoader& l) {
  std::vector<Batch> out;
  for (const Batch& b : l) out.push_back(b);
  return out;
}

std::vector<int64_t> labels_of(const std::vector<Batch>& bs) {
  std::vector<int64_t> v;
  for (const auto& b : bs)
    for (int64_t l : b.labels.to_vector<int64_t>()) v.push_back(l);
  return v;
}

void expect_same(const std::vector<Batch>& a, const std::vector<Batch>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].index, b[i].index);
    EXPECT_EQ(a[i].labels.to_vector<int64_t>(), b[i].labels.to_vector<int64_t>()) << "batch " << i;
    EXPECT_EQ(a[i].images.to_vector<float>(), b[i].images.to_vector<float>()) << "batch " << i;
  }
}

TEST(DataLoader, NormalisesToMinusOneOne) {
  std::vector<uint8_t> px(3 * 2 * 2, 0);
  px[1] = 255;
  px[2] = 128;
  px[4] = 51;  // channel 1
  auto ds = std::make_shared<ImageDataset>(qk::from_vector(px, {1, 3, 2, 2}), qk::from_vector(std::vector<int64_t>{7}, {1}));
  DataLoaderOptions o;
  o.shuffle = false;
  DataLoader l(ds, o);
  auto bs = pass(l);
  ASSERT_EQ(bs.size(), 1u);
  EXPECT_EQ(bs[0].images.shape(), (qk::Shape{1, 3, 2, 2}));
  EXPECT_EQ(bs[0].images.dtype(), qk::DType::f32);
  const auto v = bs[0].images.to_vector<float>();
  EXPECT_FLOAT_EQ(v[0], -1.0f);
  EXPECT_FLOAT_EQ(v[1], 1.0f);
  EXPECT_NEAR(v[2], (128.0 / 255 - 0.5) / 0.5, 1e-6);
  EXPECT_NEAR(v[4], (51.0 / 255 - 0.5) / 0.5, 1e-6);
  EXPECT_EQ(bs[0].labels.to_vector<int64_t>(), std::vector<int64_t>{7});
  // Other mean/std, torchvision's formula (x/255 - mean) / std.
  o.transform.mean = {0.4914f, 0.4822f, 0.4465f};
  o.transform.std = {0.247f, 0.243f, 0.261f};
  DataLoader l2(ds, o);
  EXPECT_NEAR(l2.build_batch(0).images.to_vector<float>()[4], (51.0 / 255 - 0.4822) / 0.243, 1e-5);
}

TEST(DataLoader, BatchSizesAndDropLast) {
  auto ds = numbered(10, 4, 4);
  DataLoaderOptions o;
  o.batch_size = 4;
  o.shuffle = false;
  DataLoader l(ds, o);
  EXPECT_EQ(l.num_batches(), 3);
  auto bs = pass(l);
  ASSERT_EQ(bs.size(), 3u);
  EXPECT_EQ(bs[2].images.shape(), (qk::Shape{2, 3, 4, 4}));
  EXPECT_EQ(labels_of(bs), (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));
  o.drop_last = true;
  DataLoader d(ds, o);
  EXPECT_EQ(d.num_batches(), 2);
  EXPECT_EQ(labels_of(pass(d)), (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7}));
}

TEST(DataLoader, ShufflesEveryEpochAndCoversEverySample) {
  auto ds = numbered(100, 4, 4);
  DataLoaderOptions o;
  o.batch_size = 16;
  o.seed = 5;
  DataLoader l(ds, o);
  std::vector<int64_t> e0 = labels_of(pass(l));
  std::vector<int64_t> e0_again = labels_of(pass(l));
  EXPECT_EQ(e0, e0_again);  // same epoch, same order
  l.set_epoch(1);
  std::vector<int64_t> e1 = labels_of(pass(l));
  EXPECT_NE(e0, e1);
  for (auto* e : {&e0, &e1}) {
    std::set<int64_t> s(e->begin(), e->end());
    EXPECT_EQ(s.size(), 100u);
  }
  o.seed = 6;
  DataLoader other(ds, o);
  EXPECT_NE(labels_of(pass(other)), e0);
}

TEST(DataLoader, SameBatchesWhateverTheWorkerCount) {
  auto ds = numbered(75);
  std::vector<std::vector<Batch>> runs;
  for (int workers : {0, 1, 2, 3}) {
    DataLoaderOptions o;
    o.batch_size = 8;
    o.seed = 123;
    o.num_workers = workers;
    o.prefetch_factor = 1 + workers % 2;
    o.transform.augment(true);
    DataLoader l(ds, o);
    l.set_epoch(2);
    runs.push_back(pass(l));
  }
  EXPECT_EQ(runs[0].size(), 10u);
  for (size_t k = 1; k < runs.size(); ++k) expect_same(runs[0], runs[k]);
}

TEST(DataLoader, CropAndFlipMatchAReferenceAndVary) {
  auto ds = numbered(64);
  DataLoaderOptions o;
  o.batch_size = 64;
  o.shuffle = false;
  o.seed = 9;
  o.transform.augment(true);
  DataLoader l(ds, o);
  l.set_epoch(3);
  const Batch b = l.build_batch(0);
  const auto got = b.images.to_vector<float>();
  std::set<int> dys, dxs;
  int flips = 0;
  qk::data::TransformOptions to = o.transform;
  to.seed = o.seed;
  const qk::data::ImageTransform ref(to);
  for (int64_t i = 0; i < 64; ++i) {
    const auto ch = ref.choice(3, static_cast<uint64_t>(i));
    dys.insert(ch.dy);
    dxs.insert(ch.dx);
    flips += ch.flip;
    ASSERT_TRUE(ch.dy >= 0 && ch.dy <= 8 && ch.dx >= 0 && ch.dx <= 8);
    const uint8_t* src = ds->image(i);
    for (int64_t c = 0; c < 3; ++c)
      for (int64_t y = 0; y < 32; ++y)
        for (int64_t x = 0; x < 32; ++x) {
          // Pad 4 zeros around, take the window at (dy, dx), then mirror it.
          const int64_t xw = ch.flip ? 31 - x : x;
          const int64_t sy = y + ch.dy - 4, sx = xw + ch.dx - 4;
          const int p = (sy < 0 || sy >= 32 || sx < 0 || sx >= 32) ? 0 : src[(c * 32 + sy) * 32 + sx];
          ASSERT_NEAR(got[static_cast<size_t>(((i * 3 + c) * 32 + y) * 32 + x)], (p / 255.0 - 0.5) / 0.5, 1e-6)
              << "sample " << i << " c " << c << " y " << y << " x " << x;
        }
  }
  EXPECT_GE(dys.size(), 7u);  // 64 draws from 9 offsets
  EXPECT_GE(dxs.size(), 7u);
  EXPECT_GT(flips, 16);
  EXPECT_LT(flips, 48);
  // Another epoch draws other crops.
  l.set_epoch(4);
  EXPECT_NE(l.build_batch(0).images.to_vector<float>(), got);
  // Without augmentation the image is only normalised.
  qk::data::TransformOptions none;
  EXPECT_EQ(qk::data::ImageTransform(none).choice(3, 0).dy, 4);
  EXPECT_FALSE(qk::data::ImageTransform(none).choice(3, 0).flip);
}

TEST(DataLoader, ResumesFromABatchWithTheSameBatches) {
  auto ds = numbered(50, 8, 8);
  for (int workers : {0, 2}) {
    DataLoaderOptions o;
    o.batch_size = 6;
    o.seed = 77;
    o.num_workers = workers;
    o.transform.augment(true);
    DataLoader full(ds, o), resumed(ds, o);
    full.set_epoch(5);
    auto all = pass(full);
    ASSERT_EQ(all.size(), 9u);
    resumed.set_epoch(5);
    resumed.set_start_batch(4);
    auto tail = pass(resumed);
    expect_same(std::vector<Batch>(all.begin() + 4, all.end()), tail);
    // The start batch applies to one pass only.
    expect_same(all, pass(resumed));
    resumed.set_start_batch(9);  // == num_batches: an empty pass
    EXPECT_TRUE(pass(resumed).empty());
    EXPECT_THROW(resumed.set_start_batch(10), qk::ValueError);
  }
}

TEST(DataLoader, RanksReadDisjointShards) {
  auto ds = numbered(23, 4, 4);
  std::multiset<int64_t> seen;
  for (int64_t rank = 0; rank < 3; ++rank) {
    DataLoaderOptions o;
    o.batch_size = 4;
    o.seed = 1;
    o.num_replicas = 3;
    o.rank = rank;
    o.num_workers = 1;
    DataLoader l(ds, o);
    EXPECT_EQ(l.num_samples(), 8);  // ceil(23 / 3)
    EXPECT_EQ(l.num_batches(), 2);
    for (int64_t s : labels_of(pass(l))) seen.insert(s);
  }
  EXPECT_EQ(seen.size(), 24u);  // 23 + 1 wrap-around pad
  EXPECT_EQ(std::set<int64_t>(seen.begin(), seen.end()).size(), 23u);
}

TEST(DataLoader, WorkerExceptionSurfacesAtItsBatch) {
  auto ds = numbered(40, 4, 4);
  for (int workers : {0, 1, 3}) {
    DataLoaderOptions o;
    o.batch_size = 4;
    o.shuffle = false;
    o.num_workers = workers;
    o.on_batch = [](Batch& b) {
      if (b.index == 3) QK_THROW(qk::IoError, "disk on fire at batch ", b.index);
    };
    DataLoader l(ds, o);
    std::vector<int64_t> got;
    try {
      for (const Batch& b : l) got.push_back(b.index);
      ADD_FAILURE() << "expected the worker's error";
    } catch (const qk::IoError& e) {
      EXPECT_NE(std::string(e.what()).find("disk on fire at batch 3"), std::string::npos);
    }
    EXPECT_EQ(got, (std::vector<int64_t>{0, 1, 2})) << workers << " workers";
    // The loader is still usable: a new pass starts from the beginning.
    auto b0 = l.next();
    ASSERT_TRUE(b0.has_value());
    EXPECT_EQ(b0->index, 0);
  }
}

TEST(DataLoader, PrefetchIsBoundedAndShutdownIsClean) {
  auto ds = numbered(200, 4, 4);
  std::atomic<int> built{0};
  DataLoaderOptions o;
  o.batch_size = 2;
  o.num_workers = 2;
  o.prefetch_factor = 1;  // at most 2 batches ahead of the consumer
  o.on_batch = [&](Batch&) { built.fetch_add(1); };
  {
    DataLoader l(ds, o);
    auto b = l.next();
    ASSERT_TRUE(b.has_value());
    // Give the workers time to run ahead as far as they are allowed.
    for (int i = 0; i < 200 && built.load() < 3; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    EXPECT_EQ(built.load(), 3);  // batch 0 consumed, 1 and 2 waiting
    ASSERT_TRUE(l.next().has_value());
    for (int i = 0; i < 200 && built.load() < 4; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    EXPECT_EQ(built.load(), 4);
    // Destroyed mid-epoch with 98 batches to go: joins without building them.
  }
  EXPECT_LE(built.load(), 5);
  // Changing the epoch mid-pass stops the pass too.
  DataLoader l(ds, o);
  ASSERT_TRUE(l.next().has_value());
  l.set_epoch(1);
  EXPECT_EQ(l.next()->index, 0);
}

TEST(DataLoader, RejectsBadOptionsAndData) {
  auto ds = numbered(4, 2, 2);
  DataLoaderOptions o;
  o.batch_size = 0;
  EXPECT_THROW(DataLoader(ds, o), qk::ValueError);
  o.batch_size = 1;
  o.num_workers = -1;
  EXPECT_THROW(DataLoader(ds, o), qk::ValueError);
  o.num_workers = 0;
  o.transform.std = {0.5f, 0.0f, 0.5f};
  EXPECT_THROW(DataLoader(ds, o), qk::ValueError);
  EXPECT_THROW(DataLoader(nullptr, DataLoaderOptions()), qk::ValueError);
  EXPECT_THROW(ImageDataset(qk::zeros({2, 3, 4, 4}), qk::zeros({2}, qk::DType::i64)), qk::TypeError);
  EXPECT_THROW(ImageDataset(qk::zeros({2, 3, 4, 4}, qk::DType::u8), qk::zeros({3}, qk::DType::i64)), qk::ValueError);
  DataLoader l(ds, DataLoaderOptions());
  EXPECT_THROW(l.build_batch(1), qk::IndexError);
}

}  // namespace
