// KV cache for generation: each layer's keys (after RoPE) and values for the
// positions seen so far, so a new token attends to them without recomputing.
//
//   qk::transformer::KVCache cache = model->make_kv_cache(/*batch=*/1, /*max_length=*/256);
//   qk::Tensor logits = model->forward_step(prompt, cache);     // [1, P, V], cache.length() == P
//   for (...) logits = model->forward_step(next_token, cache);  // [1, 1, V]
//   cache.reset();                                              // reuse for a new prompt
//
// Storage is allocated once: per layer, key and value [B, max_length, Hkv, D]
// in the model's dtype. A layer appends its new keys/values at positions
// length() .. length()+T-1 and reads the views [B, length()+T, Hkv, D]; the
// model advances length() once every layer has appended.
//
// Multi-latent attention (qk/transformer/mla.h) caches the compressed latent
// instead: per layer one tensor [B, max_length, latent_dim] holding, per
// position, the normalised kv latent (kv_lora_rank) and the rotated shared
// RoPE key (qk_pos_emb_head_dim); the layer up-projects (absorbs) it each step.
//
//   KVCache cache = KVCache::latent(num_layers, 1, 256, kv_lora_rank + qk_pos_emb_head_dim, DType::f32);
//   Tensor all = cache.append_latent(layer, latent);   // [B, length()+T, latent_dim]
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "qk/tensor/tensor.h"

namespace qk::transformer {

class KVCache {
 public:
  KVCache(int64_t num_layers, int64_t batch_size, int64_t max_length, int64_t kv_heads,
          int64_t head_dim, DType dtype);
  // A cache of latents: per layer [batch_size, max_length, latent_dim].
  static KVCache latent(int64_t num_layers, int64_t batch_size, int64_t max_length, int64_t latent_dim,
                        DType dtype);

  int64_t num_layers() const { return static_cast<int64_t>(keys_.size()); }
  int64_t batch_size() const { return batch_size_; }
  int64_t max_length() const { return max_length_; }
  // Positions already cached (the absolute position of the next token).
  int64_t length() const { return length_; }

  // Writes layer `layer`'s new key and value [B, T, Hkv, D] at positions
  // length() .. length()+T-1 (no autograd) and returns that layer's cached
  // keys and values [B, length()+T, Hkv, D] (views of the storage).
  std::pair<Tensor, Tensor> append(int64_t layer, const Tensor& key, const Tensor& value);
  // A latent cache's append: writes latent [B, T, latent_dim] at positions
  // length() .. length()+T-1 and returns the layer's cached latents
  // [B, length()+T, latent_dim] (a view of the storage).
  Tensor append_latent(int64_t layer, const Tensor& latent);
  bool is_latent() const { return latent_; }
  // Elements stored per position of one layer and one sequence:
  // 2 * kv_heads * head_dim, or latent_dim.
  int64_t values_per_position() const;
  // Marks T more positions as cached (after every layer appended them).
  void advance(int64_t t);
  // Forgets every position (keeps the storage).
  void reset() { length_ = 0; }

 private:
  KVCache(int64_t batch_size, int64_t max_length) : batch_size_(batch_size), max_length_(max_length) {}

  int64_t batch_size_, max_length_, length_ = 0;
  bool latent_ = false;
  std::vector<Tensor> keys_, values_;  // a latent cache: the latents in keys_, values_ empty
};

}  // namespace qk::transformer
