#include "qk/transformer/kv_cache.h"

#include "qk/base/error.h"
#include "qk/tensor/ops/view.h"

namespace qk::transformer {

KVCache::KVCache(int64_t num_layers, int64_t batch_size, int64_t max_length, int64_t kv_heads,
                 int64_t head_dim, DType dtype)
    : batch_size_(batch_size), max_length_(max_length) {
  QK_CHECK(num_layers > 0 && batch_size > 0 && max_length > 0 && kv_heads > 0 && head_dim > 0,
           "KVCache: num_layers (", num_layers, "), batch_size (", batch_size, "), max_length (", max_length,
           "), kv_heads (", kv_heads, ") and head_dim (", head_dim, ") must be positive");
  for (int64_t i = 0; i < num_layers; ++i) {
    keys_.push_back(empty({batch_size, max_length, kv_heads, head_dim}, dtype));
    values_.push_back(empty({batch_size, max_length, kv_heads, head_dim}, dtype));
  }
}

KVCache KVCache::latent(int64_t num_layers, int64_t batch_size, int64_t max_length, int64_t latent_dim,
                        DType dtype) {
  QK_CHECK(num_layers > 0 && batch_size > 0 && max_length > 0 && latent_dim > 0, "KVCache::latent: num_layers (",
           num_layers, "), batch_size (", batch_size, "), max_length (", max_length, ") and latent_dim (", latent_dim,
           ") must be positive");
  KVCache c(batch_size, max_length);
  c.latent_ = true;
  for (int64_t i = 0; i < num_layers; ++i) c.keys_.push_back(empty({batch_size, max_length, latent_dim}, dtype));
  return c;
}

int64_t KVCache::values_per_position() const {
  const Tensor& k = keys_.front();
  return latent_ ? k.size(2) : 2 * k.size(2) * k.size(3);
}

Tensor KVCache::append_latent(int64_t layer, const Tensor& latent) {
  QK_CHECK(latent_, "KVCache::append_latent: this cache holds keys and values; multi-latent attention needs "
           "KVCache::latent (GPTModel::make_kv_cache makes it for an MLA model)");
  QK_CHECK(layer >= 0 && layer < num_layers(), "KVCache::append_latent: layer ", layer, " out of range [0, ",
           num_layers(), ")");
  const Tensor& store = keys_[layer];
  QK_CHECK(latent.dim() == 3 && latent.size(0) == batch_size_ && latent.size(2) == store.size(2),
           "KVCache::append_latent: expected latent [", batch_size_, ", T, ", store.size(2), "], got ",
           shape_str(latent.shape()));
  const int64_t t = latent.size(1);
  QK_CHECK(length_ + t <= max_length_, "KVCache: ", length_, " cached + ", t, " new positions exceed max_length ",
           max_length_, "; make a larger cache");
  ops::copy_(ops::narrow(store, 1, length_, t), latent);
  return ops::narrow(store, 1, 0, length_ + t);
}

std::pair<Tensor, Tensor> KVCache::append(int64_t layer, const Tensor& key, const Tensor& value) {
  QK_CHECK(!latent_, "KVCache::append: this cache holds multi-latent attention latents (append_latent); "
           "make the cache with the model's make_kv_cache");
  QK_CHECK(layer >= 0 && layer < num_layers(), "KVCache::append: layer ", layer, " out of range [0, ",
           num_layers(), ")");
  const Tensor& kc = keys_[layer];
  const Tensor& vc = values_[layer];
  QK_CHECK(key.dim() == 4 && key.shape() == value.shape() && key.size(0) == batch_size_ &&
               key.size(2) == kc.size(2) && key.size(3) == kc.size(3),
           "KVCache::append: expected key and value [", batch_size_, ", T, ", kc.size(2), ", ", kc.size(3),
           "], got ", shape_str(key.shape()), " and ", shape_str(value.shape()));
  const int64_t t = key.size(1);
  QK_CHECK(length_ + t <= max_length_, "KVCache: ", length_, " cached + ", t, " new positions exceed max_length ",
           max_length_, "; make a larger cache");
  ops::copy_(ops::narrow(kc, 1, length_, t), key);
  ops::copy_(ops::narrow(vc, 1, length_, t), value);
  return {ops::narrow(kc, 1, 0, length_ + t), ops::narrow(vc, 1, 0, length_ + t)};
}

void KVCache::advance(int64_t t) {
  QK_CHECK(t >= 0 && length_ + t <= max_length_, "KVCache::advance: ", length_, " + ", t,
           " positions exceed max_length ", max_length_);
  length_ += t;
}

}  // namespace qk::transformer
