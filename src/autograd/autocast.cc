// Autocast state (per thread) and the cast helpers the functions call.
#include "qk/autograd/autocast.h"

#include <unordered_map>

#include "qk/base/error.h"
#include "tensor_hooks.h"

namespace qk::autocast {

namespace {

struct State {
  bool enabled = false;
  DType dtype = DType::bf16;
  int depth = 0;  // live Guards, enabled or not
  // Weight casts, keyed by the source tensor's impl; the source is kept
  // alive with its cast so the key cannot be reused by a new tensor, and its
  // version is kept so an in-place update (an optimizer step inside a long
  // Guard) invalidates the cast.
  struct Cached {
    Tensor source, cast;
    uint64_t version;
  };
  std::unordered_map<const TensorImpl*, Cached> cache;
};

State& state() {
  thread_local State s;
  return s;
}

bool is_float(DType dt) { return dt == DType::f32 || dt == DType::f16 || dt == DType::bf16; }

}  // namespace

bool is_enabled() { return state().enabled; }
DType low_dtype() { return state().dtype; }

Guard::Guard(DType dtype, bool enabled) {
  autograd::install_tensor_hooks();  // Tensor::sum/mean must see the autocast state
  State& s = state();
  QK_CHECK(!enabled || dtype == DType::bf16 || dtype == DType::f16,
           "autocast: the low-precision dtype must be bf16 or f16, got ", dtype_name(dtype));
  prev_enabled_ = s.enabled;
  prev_dtype_ = s.dtype;
  s.enabled = enabled;
  if (enabled) s.dtype = dtype;
  ++s.depth;
}

Guard::~Guard() {
  State& s = state();
  s.enabled = prev_enabled_;
  s.dtype = prev_dtype_;
  if (--s.depth == 0) s.cache.clear();
}

Tensor to_low(const Tensor& t) {
  State& s = state();
  if (!s.enabled || !t.defined() || !is_float(t.dtype()) || t.dtype() == s.dtype) return t;
  const bool cacheable = t.is_leaf() && t.requires_grad();
  if (cacheable) {
    auto it = s.cache.find(t.impl());
    if (it != s.cache.end() && it->second.cast.dtype() == s.dtype &&
        it->second.version == t.impl()->version)
      return it->second.cast;
  }
  Tensor low = t.to(s.dtype);
  if (cacheable) s.cache[t.impl()] = {t, low, t.impl()->version};
  return low;
}

Tensor to_f32(const Tensor& t) {
  if (!state().enabled || !t.defined() || !is_reduced_float(t.dtype())) return t;
  return t.to(DType::f32);
}

size_t cache_size() { return state().cache.size(); }

}  // namespace qk::autocast
