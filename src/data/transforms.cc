// Normalisation and augmentation of one image (see qk/data/transforms.h).
#include "qk/data/transforms.h"

#include <cstring>

#include "qk/base/error.h"
#include "qk/tensor/generator.h"

namespace qk::data {

ImageTransform::ImageTransform(const TransformOptions& o) : o_(o) {
  QK_CHECK(o.padding >= 0 && o.padding <= 64, "ImageTransform: padding must be 0..64, got ", o.padding);
  for (int c = 0; c < 3; ++c) {
    QK_CHECK(o.std[c] > 0.0f, "ImageTransform: std[", c, "] must be > 0, got ", o.std[c]);
    // (p / 255 - mean) / std == p * scale + shift
    scale_[c] = 1.0f / (255.0f * o.std[c]);
    shift_[c] = -o.mean[c] / o.std[c];
  }
}

ImageTransform::Choice ImageTransform::choice(uint64_t epoch, uint64_t index) const {
  Choice ch{o_.padding, o_.padding, false};
  if (!o_.augmenting()) return ch;
  uint32_t r[4];
  // Counter (epoch, index): index in the low 40 bits, ample for any data set.
  philox4x32(o_.seed, (epoch << 40) ^ index, r);
  const auto span = static_cast<uint32_t>(2 * o_.padding + 1);
  if (o_.random_crop) {
    ch.dy = static_cast<int>(r[0] % span);
    ch.dx = static_cast<int>(r[1] % span);
  }
  if (o_.hflip) ch.flip = (r[2] & 1u) != 0;
  return ch;
}

void ImageTransform::apply(const uint8_t* src, int64_t c, int64_t h, int64_t w, float* dst, uint64_t epoch,
                           uint64_t index) const {
  QK_CHECK(c >= 1 && c <= 3, "ImageTransform: expected 1 to 3 channels, got ", c);
  if (!o_.augmenting()) {
    for (int64_t ch = 0; ch < c; ++ch) {
      const float s = scale_[ch], b = shift_[ch];
      const uint8_t* in = src + ch * h * w;
      float* out = dst + ch * h * w;
      for (int64_t i = 0; i < h * w; ++i) out[i] = static_cast<float>(in[i]) * s + b;
    }
    return;
  }
  // Crop window (dy, dx) of the zero-padded image: output (y, x) reads input
  // (y + dy - pad, x + dx - pad), zero (before normalising) outside it. The
  // flip mirrors the cropped window, as RandomCrop then RandomHorizontalFlip.
  const Choice ch_ = choice(epoch, index);
  const int64_t oy = ch_.dy - o_.padding, ox = ch_.dx - o_.padding;
  for (int64_t ch = 0; ch < c; ++ch) {
    const float s = scale_[ch], b = shift_[ch];
    const uint8_t* in = src + ch * h * w;
    float* out = dst + ch * h * w;
    for (int64_t y = 0; y < h; ++y) {
      const int64_t sy = y + oy;
      float* row = out + y * w;
      if (sy < 0 || sy >= h) {
        for (int64_t x = 0; x < w; ++x) row[x] = b;  // a padding row: pixel 0
        continue;
      }
      const uint8_t* irow = in + sy * w;
      for (int64_t x = 0; x < w; ++x) {
        const int64_t xx = ch_.flip ? w - 1 - x : x;
        const int64_t sx = xx + ox;
        row[x] = (sx < 0 || sx >= w) ? b : static_cast<float>(irow[sx]) * s + b;
      }
    }
  }
}

}  // namespace qk::data
