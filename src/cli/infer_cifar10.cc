#include "infer_cifar10.h"

#include <fmt/format.h>

#include <algorithm>
#include <memory>
#include <vector>

#include "qk/autograd/autograd.h"
#include "qk/base/error.h"
#include "qk/base/file_io.h"
#include "qk/base/thread_pool.h"
#include "qk/base/timer.h"
#include "qk/data/dataset.h"
#include "qk/data/loader.h"
#include "qk/models/cifar10.h"
#include "qk/tensor/backend.h"
#include "qk/plot/plot.h"

namespace qk::cli {
namespace {

using models::CifarModel;
using models::EvalResult;
using models::kCifarEvalBatch;
using plot::ImageTile;

struct Timing {
  double mean_ms = 0, p50_ms = 0, p90_ms = 0;
  int iters = 0;
};

// Times fn() after `warmup` calls, for at least min_iters calls and until
// `budget_s` seconds have passed (at most max_iters calls).
template <typename F>
Timing time_it(F&& fn, int warmup, int min_iters, int max_iters, double budget_s) {
  for (int i = 0; i < warmup; ++i) fn();
  std::vector<double> ms;
  const Timer all;
  while (static_cast<int>(ms.size()) < max_iters &&
         (static_cast<int>(ms.size()) < min_iters || all.seconds() < budget_s)) {
    const Timer t;
    fn();
    ms.push_back(t.millis());
  }
  Timing r;
  r.iters = static_cast<int>(ms.size());
  for (double v : ms) r.mean_ms += v;
  r.mean_ms /= static_cast<double>(ms.size());
  std::sort(ms.begin(), ms.end());
  r.p50_ms = ms[ms.size() / 2];
  r.p90_ms = ms[std::min(ms.size() - 1, ms.size() * 9 / 10)];
  return r;
}

int64_t count_correct(const Tensor& logits, const Tensor& labels) {
  const Tensor l = logits.contiguous();
  const float* p = l.data_ptr<float>();
  const int64_t* y = labels.data_ptr<int64_t>();
  const int64_t k = l.size(1);
  int64_t c = 0;
  for (int64_t i = 0; i < l.size(0); ++i) c += std::max_element(p + i * k, p + (i + 1) * k) - (p + i * k) == y[i];
  return c;
}

void print_accuracy(const data::Cifar10& d, const EvalResult& r) {
  const int64_t k = data::kCifarNumClasses;
  std::vector<int64_t> conf(static_cast<size_t>(k * k), 0);
  const int64_t* y = d.test.labels.data_ptr<int64_t>();
  for (int64_t i = 0; i < r.total; ++i) ++conf[static_cast<size_t>(y[i] * k + r.predicted[static_cast<size_t>(i)])];
  fmt::print("\naccuracy: {:.2f}% ({}/{}), mean loss {:.4f}\n", 100 * r.accuracy, r.correct, r.total, r.loss);
  fmt::print("per-class accuracy:\n");
  for (int64_t c = 0; c < k; ++c) {
    int64_t n = 0;
    for (int64_t j = 0; j < k; ++j) n += conf[static_cast<size_t>(c * k + j)];
    const int64_t ok = conf[static_cast<size_t>(c * k + c)];
    fmt::print("  {:<11} {:6.2f}% ({}/{})\n", d.classes[static_cast<size_t>(c)], n ? 100.0 * ok / n : 0.0, ok, n);
  }
  fmt::print("confusion matrix (rows: true class, columns: predicted):\n{:>11}", "");
  for (int64_t j = 0; j < k; ++j) fmt::print(" {:>6.6}", d.classes[static_cast<size_t>(j)]);
  fmt::print("\n");
  for (int64_t c = 0; c < k; ++c) {
    fmt::print("  {:<9.9}", d.classes[static_cast<size_t>(c)]);
    for (int64_t j = 0; j < k; ++j) fmt::print(" {:>6}", conf[static_cast<size_t>(c * k + j)]);
    fmt::print("\n");
  }
}

}  // namespace

void infer_cifar10(const InferCifarOptions& o) {
  if (o.threads > 0) set_num_threads(o.threads);
  QK_CHECK_AS(ValueError, o.grid >= 1 && o.grid <= 100, "--grid must be 1..100, got ", o.grid);
  const Device dev = models::usable_device(o.device);
  const data::Cifar10 d = models::open_cifar10(o.data_dir, false, 0, 0, 0);
  const CifarModel m = models::make_cifar_model(o.model);
  models::load_cifar_weights(m, o.checkpoint);
  if (!dev.is_cpu()) m.module->to(dev);
  m.module->eval();
  fmt::print("model {} ({} parameters) from {}, {}\n", m.name, models::count_parameters(*m.module), o.checkpoint,
             dev.is_cpu() ? fmt::format("{} threads", num_threads()) : dev.str());
  // A device's work is asynchronous: each timed call waits for it.
  auto forward = [&](const Tensor& x) {
    Tensor y = m.forward(x);
    if (!dev.is_cpu()) backend(dev.type).synchronize(dev.index);
    return y;
  };
  NoGradGuard no_grad;

  // Up to 256 normalised test images, exactly as the evaluation pass sees them.
  data::DataLoaderOptions lo;
  lo.batch_size = kCifarEvalBatch;
  lo.shuffle = false;
  data::DataLoader loader(std::make_shared<data::ImageDataset>(d.test), lo);
  const data::Batch first = loader.build_batch(0);
  const int64_t avail = first.labels.numel();

  // The inputs on the model's device before the clock starts.
  const Tensor images = dev.is_cpu() ? first.images : first.images.to(dev);
  const Tensor one = images.narrow(0, 0, 1).contiguous();
  const Timing lat = time_it([&] { forward(one); }, 3, 10, 2000, o.benchmark ? 2.0 : 0.5);
  fmt::print("\nsingle-image latency: mean {:.3f} ms, p50 {:.3f} ms, p90 {:.3f} ms ({} runs)\n", lat.mean_ms,
             lat.p50_ms, lat.p90_ms, lat.iters);

  if (avail >= 64) {  // the seed's one-batch line
    const Tensor x = images.narrow(0, 0, 64).contiguous();
    const Tensor y = first.labels.narrow(0, 0, 64).contiguous();
    const Timer t;
    const Tensor logits = forward(x);
    const double s = t.seconds();
    const int64_t c = count_correct(logits.to(kCPU), y);
    fmt::print("batch size 64: {:.4f} s, {:.3f} ms per image, batch accuracy {:.2f}% ({}/64)\n", s, s * 1e3 / 64,
               100.0 * c / 64, c);
  }

  std::vector<int64_t> sizes = o.benchmark ? std::vector<int64_t>{1, 2, 4, 8, 16, 32, 64, 128, 256}
                                           : std::vector<int64_t>{1, 16, 64, 256};
  fmt::print("\nthroughput by batch size{}:\n  {:>5} {:>12} {:>12} {:>12}\n",
             o.benchmark ? " (--benchmark)" : " (--benchmark for the full table)", "batch", "ms/batch", "ms/image",
             "images/s");
  for (int64_t b : sizes) {
    if (b > avail) {
      fmt::print("  {:>5} skipped: the test set has only {} images\n", b, avail);
      continue;
    }
    const Tensor x = images.narrow(0, 0, b).contiguous();
    const Timing t = time_it([&] { forward(x); }, 1, 3, 1000, o.benchmark ? 1.0 : 0.3);
    fmt::print("  {:>5} {:>12.3f} {:>12.4f} {:>12.1f}\n", b, t.mean_ms, t.mean_ms / static_cast<double>(b),
               1e3 * static_cast<double>(b) / t.mean_ms);
  }

  const Timer full;
  const EvalResult r = models::evaluate_cifar(m, d.test, true);
  const double full_s = full.seconds();
  fmt::print("\nfull test set: {} images in {:.3f} s, {:.1f} images/s (batch {}, including normalisation)\n",
             r.total, full_s, static_cast<double>(r.total) / full_s, kCifarEvalBatch);
  fmt::print("peak memory (RSS): {}\n", format_bytes(peak_rss_bytes()));
  print_accuracy(d, r);

  if (o.visualize) {
    std::vector<ImageTile> tiles;
    const int64_t n = std::min<int64_t>(o.grid, r.total);
    const int64_t* y = d.test.labels.data_ptr<int64_t>();
    const uint8_t* px = d.test.images.contiguous().data_ptr<uint8_t>();
    for (int64_t i = 0; i < n; ++i) {
      const auto pred = r.predicted[static_cast<size_t>(i)];
      tiles.push_back({px + i * data::kCifarImageBytes, "true: " + d.classes[static_cast<size_t>(y[i])],
                       fmt::format("pred: {} {:.1f}%", d.classes[static_cast<size_t>(pred)],
                                   100 * r.confidence[static_cast<size_t>(i)]),
                       pred == y[i]});
    }
    make_dirs(o.out);
    const std::string png = o.out + "/inference_results.png";
    plot::plot_image_grid(png,
                    fmt::format("{} predictions on {}CIFAR-10 test images (green: right, red: wrong)", m.name,
                                d.synthetic ? "SYNTHETIC " : ""),
                    tiles, 4);
    fmt::print("\ninference results saved to {}\n", png);
  }
}

}  // namespace qk::cli
