// CIFAR-10 input pipeline: synthetic-data generation and DataLoader images/s
// (normalise + random crop + flip, batch 64) with 0, 1 and 2 worker threads.
//
//   build/release/bench/cifar_loader_bench
//
// The loader's batches are first checked to be the same for every worker
// count (the pipeline is deterministic), then timed over whole epochs.
#include <benchmark/benchmark.h>

#include <memory>

#include "qk/base/error.h"
#include "qk/data/cifar10.h"
#include "qk/data/loader.h"

namespace {

// 10000 synthetic images in memory (the test-set size).
std::shared_ptr<qk::data::ImageDataset> dataset() {
  static auto ds = [] {
    const int64_t n = 10000;
    qk::Tensor images = qk::empty({n, 3, 32, 32}, qk::DType::u8);
    qk::Tensor labels = qk::empty({n}, qk::DType::i64);
    auto* px = images.data_ptr<uint8_t>();
    auto* lab = labels.data_ptr<int64_t>();
    for (int64_t i = 0; i < n; ++i) {
      lab[i] = i % 10;
      qk::data::synth_cifar_image(lab[i], static_cast<uint64_t>(i), px + i * 3072);
    }
    return std::make_shared<qk::data::ImageDataset>(images, labels);
  }();
  return ds;
}

qk::data::DataLoaderOptions options(int workers) {
  qk::data::DataLoaderOptions o;
  o.batch_size = 64;
  o.num_workers = workers;
  o.seed = 1;
  o.transform.augment(true);
  return o;
}

void check_deterministic() {
  qk::data::DataLoader a(dataset(), options(0)), b(dataset(), options(2));
  auto ia = a.begin();
  auto ib = b.begin();
  for (int k = 0; k < 5; ++k, ++ia, ++ib)
    QK_CHECK(ia->images.to_vector<float>() == ib->images.to_vector<float>(),
             "loader batches differ between 0 and 2 workers at batch ", k);
}

void BM_LoaderEpoch(benchmark::State& state) {
  static bool checked = (check_deterministic(), true);
  (void)checked;
  qk::data::DataLoader loader(dataset(), options(static_cast<int>(state.range(0))));
  uint64_t epoch = 0;
  int64_t images = 0;
  for (auto _ : state) {
    loader.set_epoch(epoch++);
    for (const auto& b : loader) {
      benchmark::DoNotOptimize(b.images.raw_data());
      images += b.images.size(0);
    }
  }
  state.counters["images/s"] = benchmark::Counter(static_cast<double>(images), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_LoaderEpoch)->Arg(0)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_SynthImages(benchmark::State& state) {
  std::vector<uint8_t> img(3072);
  uint64_t key = 0;
  for (auto _ : state) {
    qk::data::synth_cifar_image(static_cast<int64_t>(key % 10), key, img.data());
    ++key;
    benchmark::DoNotOptimize(img.data());
  }
  state.counters["images/s"] = benchmark::Counter(static_cast<double>(key), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_SynthImages);

}  // namespace

BENCHMARK_MAIN();
