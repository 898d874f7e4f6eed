// An in-memory labelled image set: the source a DataLoader reads from.
//
//   auto d = qk::data::load_cifar10("data");
//   qk::data::ImageDataset train(d.train.images, d.train.labels);  // u8 [N,C,H,W], i64 [N]
//   train.size();          // N
//   train.image(7);        // pointer to C*H*W bytes, channel-major
//   train.label(7);        // 0..9
//
// The dataset shares the tensors' storage (no copy) and never changes, so
// any number of loader threads may read it at once.
#pragma once

#include <cstdint>

#include "qk/data/cifar10.h"
#include "qk/tensor/tensor.h"

namespace qk::data {

class ImageDataset {
 public:
  // images: u8 [N, C, H, W] (made contiguous if it is not); labels: i64 [N].
  ImageDataset(const Tensor& images, const Tensor& labels);
  explicit ImageDataset(const Cifar10Split& split) : ImageDataset(split.images, split.labels) {}

  int64_t size() const { return n_; }
  int64_t channels() const { return c_; }
  int64_t height() const { return h_; }
  int64_t width() const { return w_; }
  int64_t image_bytes() const { return c_ * h_ * w_; }
  const uint8_t* image(int64_t i) const { return pixels_ + i * image_bytes(); }
  int64_t label(int64_t i) const { return labels_[i]; }
  const Tensor& images() const { return images_; }
  const Tensor& labels() const { return label_tensor_; }

 private:
  Tensor images_, label_tensor_;
  const uint8_t* pixels_ = nullptr;
  const int64_t* labels_ = nullptr;
  int64_t n_ = 0, c_ = 0, h_ = 0, w_ = 0;
};

}  // namespace qk::data
