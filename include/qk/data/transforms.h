// Per-image transforms: u8 pixels -> normalised f32, with optional
// augmentation (random crop with zero padding, horizontal flip).
//
//   qk::data::TransformOptions t;          // mean = std = (0.5, 0.5, 0.5): [-1, 1]
//   t.random_crop = t.hflip = true;        // the usual CIFAR augmentation
//   t.seed = 42;
//   qk::data::ImageTransform tf(t);
//   tf.apply(ds.image(i), 3, 32, 32, out, /*epoch=*/e, /*index=*/i);   // out: f32 [3,32,32]
//
// out = (pixel / 255 - mean[c]) / std[c], as torchvision's ToTensor() then
// Normalize(mean, std).
//
// Note [augmentation randomness]: the crop offset and the flip of a sample
// are drawn from Philox (qk::philox4x32, the generator behind qk::Generator)
// with key `seed` and counter (epoch, index), so they depend only on which
// sample in which epoch: never on the worker thread, the batch size, the
// rank or the order in which batches are built. Same seed, same images.
#pragma once

#include <array>
#include <cstdint>

namespace qk::data {

struct TransformOptions {
  std::array<float, 3> mean{0.5f, 0.5f, 0.5f};
  std::array<float, 3> std{0.5f, 0.5f, 0.5f};
  bool random_crop = false;  // pad by `padding` zeros on each side, take a random HxW window
  int padding = 4;
  bool hflip = false;        // mirror left-right with probability 1/2
  uint64_t seed = 0;         // Note [augmentation randomness]

  TransformOptions& augment(bool on) { random_crop = hflip = on; return *this; }
  bool augmenting() const { return random_crop || hflip; }
};

class ImageTransform {
 public:
  // Checks the options (std > 0, padding 0..64); the image size is given per call.
  explicit ImageTransform(const TransformOptions& o = {});
  const TransformOptions& options() const { return o_; }

  // src: u8 [C, H, W]; dst: f32 [C, H, W]. C must be 1..3 (mean/std per channel).
  void apply(const uint8_t* src, int64_t c, int64_t h, int64_t w, float* dst, uint64_t epoch,
             uint64_t index) const;

  // The augmentation chosen for (epoch, index): crop offsets in [0, 2*padding]
  // (padding when not cropping) and the flip. Exposed for tests.
  struct Choice {
    int dy, dx;
    bool flip;
  };
  Choice choice(uint64_t epoch, uint64_t index) const;

 private:
  TransformOptions o_;
  std::array<float, 3> scale_{}, shift_{};  // out = pixel * scale + shift
};

}  // namespace qk::data
