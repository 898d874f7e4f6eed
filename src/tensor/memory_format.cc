#include "qk/tensor/ops/memory_format.h"

#include "qk/base/error.h"
#include "qk/tensor/ops/view.h"

namespace qk::ops {

const char* memory_format_name(MemoryFormat f) {
  return f == MemoryFormat::channels_last ? "channels_last" : "contiguous";
}

Shape channels_last_strides(const Shape& s) {
  QK_CHECK(s.size() == 4, "channels_last: expected 4 dims [N, C, H, W], got ", shape_str(s));
  return {s[1] * s[2] * s[3], 1, s[3] * s[1], s[1]};
}

bool is_channels_last(const Tensor& a) {
  if (!a.defined() || a.dim() != 4 || a.is_contiguous()) return false;
  const Shape expected = channels_last_strides(a.shape());
  for (int d = 0; d < 4; ++d)
    if (a.size(d) != 1 && a.strides()[d] != expected[d]) return false;
  return true;
}

MemoryFormat suggest_memory_format(const Tensor& a) {
  return is_channels_last(a) ? MemoryFormat::channels_last : MemoryFormat::contiguous;
}

namespace {
// C == 1 or H * W == 1: channels last is the contiguous layout.
bool formats_coincide(const Shape& s) { return s[1] == 1 || s[2] * s[3] == 1; }
}  // namespace

Tensor empty(const Shape& shape, TensorOptions opts, MemoryFormat format) {
  if (format == MemoryFormat::contiguous) return qk::empty(shape, opts);
  QK_CHECK(shape.size() == 4, "empty: channels_last needs 4 dims [N, C, H, W], got ",
           shape_str(shape));
  if (formats_coincide(shape)) return qk::empty(shape, opts);
  // Stored [N, H, W, C], seen as [N, C, H, W].
  return permute(qk::empty({shape[0], shape[2], shape[3], shape[1]}, opts), {0, 3, 1, 2});
}

Tensor contiguous(const Tensor& a, MemoryFormat format) {
  if (format == MemoryFormat::contiguous || !a.defined()) return contiguous(a);
  QK_CHECK(a.dim() == 4, "contiguous: channels_last needs a 4-D tensor [N, C, H, W], got ",
           shape_str(a.shape()));
  if (is_channels_last(a) || (formats_coincide(a.shape()) && a.is_contiguous())) return a;
  Tensor out = empty(a.shape(), TensorOptions().dtype(a.dtype()).device(a.device()), format);
  copy_(out, a);
  return out;
}

MemoryFormat result_format(const Shape& shape, std::initializer_list<const Tensor*> operands) {
  for (const Tensor* t : operands)
    if (t->defined() && t->shape() == shape && is_channels_last(*t)) return MemoryFormat::channels_last;
  return MemoryFormat::contiguous;
}

}  // namespace qk::ops
