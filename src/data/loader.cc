// ImageDataset and the threaded DataLoader (see qk/data/loader.h).
#include "qk/data/loader.h"

#include <algorithm>

#include "qk/base/error.h"
#include "qk/base/log.h"
#include "qk/tensor/ops/view.h"

namespace qk::data {

ImageDataset::ImageDataset(const Tensor& images, const Tensor& labels) {
  QK_CHECK(images.defined() && labels.defined(), "ImageDataset: images and labels must be defined tensors");
  QK_CHECK(images.dim() == 4, "ImageDataset: expected images of shape [N, C, H, W], got ", shape_str(images.shape()));
  QK_CHECK_TYPE(images.dtype() == qk::DType::u8, "ImageDataset: expected u8 images, got ", dtype_name(images.dtype()));
  QK_CHECK(labels.dim() == 1 && labels.size(0) == images.size(0), "ImageDataset: expected labels of shape [",
           images.size(0), "], got ", shape_str(labels.shape()));
  QK_CHECK_TYPE(labels.dtype() == qk::DType::i64, "ImageDataset: expected i64 labels, got ", dtype_name(labels.dtype()));
  QK_CHECK_DEVICE(images.device() == kCPU && labels.device() == kCPU,
                  "ImageDataset: images and labels must be on the CPU");
  images_ = images.is_contiguous() ? images : ops::contiguous(images);
  label_tensor_ = labels.is_contiguous() ? labels : ops::contiguous(labels);
  pixels_ = images_.data_ptr<uint8_t>();
  labels_ = label_tensor_.data_ptr<int64_t>();
  n_ = images_.size(0);
  c_ = images_.size(1);
  h_ = images_.size(2);
  w_ = images_.size(3);
  QK_CHECK(c_ >= 1 && c_ <= 3, "ImageDataset: expected 1 to 3 channels, got ", c_);
}

namespace {

TransformOptions seeded(TransformOptions t, uint64_t seed) {
  t.seed = seed;
  return t;
}

// One batch: samples order[b*B, min((b+1)*B, n)) of `epoch`.
Batch make_batch(const ImageDataset& ds, const ImageTransform& tf, const std::vector<int64_t>& order,
                 int64_t batch_size, uint64_t epoch, int64_t b, const std::function<void(Batch&)>& on_batch) {
  const int64_t n = static_cast<int64_t>(order.size());
  const int64_t lo = b * batch_size, hi = std::min(n, lo + batch_size);
  QK_INTERNAL_ASSERT(lo < hi, "batch ", b, " is empty");
  Batch out;
  out.index = b;
  out.images = empty({hi - lo, ds.channels(), ds.height(), ds.width()}, qk::DType::f32);
  out.labels = empty({hi - lo}, qk::DType::i64);
  float* img = out.images.data_ptr<float>();
  int64_t* lab = out.labels.data_ptr<int64_t>();
  const int64_t per = ds.image_bytes();
  for (int64_t i = lo; i < hi; ++i) {
    const int64_t s = order[static_cast<size_t>(i)];
    QK_CHECK_INDEX(s >= 0 && s < ds.size(), "DataLoader: sample index ", s, " out of range for a data set of ",
                   ds.size());
    tf.apply(ds.image(s), ds.channels(), ds.height(), ds.width(), img + (i - lo) * per, epoch,
             static_cast<uint64_t>(s));
    lab[i - lo] = ds.label(s);
  }
  if (on_batch) on_batch(out);
  return out;
}

}  // namespace

DataLoader::DataLoader(std::shared_ptr<const ImageDataset> dataset, const DataLoaderOptions& o)
    : ds_(std::move(dataset)),
      o_(o),
      sampler_(ds_ ? ds_->size() : 0, o.num_replicas, o.rank, o.shuffle, o.seed, /*drop_last=*/false),
      transform_(seeded(o.transform, o.seed)) {
  QK_CHECK(ds_ != nullptr, "DataLoader: the dataset must not be null");
  QK_CHECK(o.batch_size >= 1, "DataLoader: batch_size must be >= 1, got ", o.batch_size);
  QK_CHECK(o.num_workers >= 0 && o.num_workers <= 256, "DataLoader: num_workers must be 0..256, got ",
           o.num_workers);
  QK_CHECK(o.prefetch_factor >= 1, "DataLoader: prefetch_factor must be >= 1, got ", o.prefetch_factor);
  QK_CHECK(ds_->channels() <= 3, "DataLoader: images with ", ds_->channels(), " channels are not supported");
}

DataLoader::~DataLoader() { stop_workers(); }

int64_t DataLoader::num_batches() const {
  const int64_t n = sampler_.num_samples();
  return o_.drop_last ? n / o_.batch_size : (n + o_.batch_size - 1) / o_.batch_size;
}

void DataLoader::set_epoch(uint64_t epoch) {
  stop_workers();
  sampler_.set_epoch(epoch);
}

void DataLoader::set_start_batch(int64_t batch) {
  QK_CHECK(batch >= 0 && batch <= num_batches(), "DataLoader: start batch must be in [0, ", num_batches(),
           "] (batches per epoch), got ", batch);
  stop_workers();
  start_batch_ = batch;
}

Batch DataLoader::build_batch(int64_t b) const {
  QK_CHECK_INDEX(b >= 0 && b < num_batches(), "DataLoader: batch ", b, " out of range [0, ", num_batches(), ")");
  return make_batch(*ds_, transform_, sampler_.indices(), o_.batch_size, sampler_.epoch(), b, o_.on_batch);
}

void DataLoader::stop_workers() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stopping_ = true;
  }
  cv_work_.notify_all();
  for (auto& t : workers_) t.join();
  workers_.clear();
  std::lock_guard<std::mutex> lk(mu_);
  ready_.clear();
  failed_.clear();
  // No pass is active: next() starts one.
  next_yield_ = end_batch_ = 0;
  active_ = false;
}

void DataLoader::start() {
  stop_workers();
  order_ = sampler_.indices();
  pass_epoch_ = sampler_.epoch();
  end_batch_ = num_batches();
  next_yield_ = next_claim_ = start_batch_;
  start_batch_ = 0;
  stopping_ = false;
  active_ = true;
  for (int i = 0; i < o_.num_workers; ++i) workers_.emplace_back([this] { worker_loop(); });
}

void DataLoader::worker_loop() {
  const int64_t window = static_cast<int64_t>(o_.num_workers) * o_.prefetch_factor;
  std::unique_lock<std::mutex> lk(mu_);
  for (;;) {
    cv_work_.wait(lk, [&] { return stopping_ || next_claim_ >= end_batch_ || next_claim_ < next_yield_ + window; });
    if (stopping_ || next_claim_ >= end_batch_) return;
    const int64_t b = next_claim_++;
    lk.unlock();
    std::optional<Batch> batch;
    std::exception_ptr err;
    try {
      batch = make_batch(*ds_, transform_, order_, o_.batch_size, pass_epoch_, b, o_.on_batch);
    } catch (...) {
      err = std::current_exception();
    }
    lk.lock();
    if (err) failed_.emplace(b, err);
    else ready_.emplace(b, std::move(*batch));
    cv_ready_.notify_all();
  }
}

std::optional<Batch> DataLoader::next() {
  if (!active_) start();
  if (next_yield_ >= end_batch_) {
    stop_workers();  // the pass is over; the next call starts another
    return std::nullopt;
  }
  if (workers_.empty()) {
    const int64_t b = next_yield_++;
    try {
      return make_batch(*ds_, transform_, order_, o_.batch_size, pass_epoch_, b, o_.on_batch);
    } catch (...) {
      stop_workers();  // as with workers: a failed batch ends the pass
      throw;
    }
  }
  std::unique_lock<std::mutex> lk(mu_);
  const int64_t b = next_yield_;
  cv_ready_.wait(lk, [&] { return ready_.count(b) > 0 || failed_.count(b) > 0; });
  if (auto f = failed_.find(b); f != failed_.end()) {
    const std::exception_ptr err = f->second;
    lk.unlock();
    stop_workers();  // the pass cannot go on past a batch it could not build
    std::rethrow_exception(err);
  }
  auto it = ready_.find(b);
  Batch out = std::move(it->second);
  ready_.erase(it);
  ++next_yield_;
  lk.unlock();
  cv_work_.notify_all();
  return out;
}

}  // namespace qk::data
