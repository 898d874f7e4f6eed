// Raw view ops: new geometry over the same storage.
#include "qk/tensor/ops/view.h"

#include <algorithm>

namespace qk::ops {

Tensor as_strided(const Tensor& a, const Shape& sizes, const Shape& strides, int64_t offset) {
  return make_tensor(a.storage(), a.dtype(), sizes, strides, offset);
}

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op) {
  size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    QK_CHECK(da == db || da == 1 || db == 1, op, ": shapes ", shape_str(a), " and ", shape_str(b),
             " cannot be broadcast together (dim ", i, ": ", da, " vs ", db, ")");
    out[i] = da == 1 ? db : da;
  }
  return out;
}

Shape infer_shape(const Shape& shape, int64_t numel, const char* op) {
  Shape out = shape;
  int64_t known = 1, infer = -1;
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i] == -1) {
      QK_CHECK(infer < 0, op, ": only one dimension can be -1, got ", shape_str(shape));
      infer = static_cast<int64_t>(i);
    } else {
      QK_CHECK(out[i] >= 0, op, ": invalid dimension ", out[i], " in ", shape_str(shape));
      known *= out[i];
    }
  }
  if (infer >= 0) {
    QK_CHECK(known != 0 && numel % known == 0, op, ": shape ", shape_str(shape),
             " is invalid for input of size ", numel);
    out[infer] = numel / known;
  } else {
    QK_CHECK(known == numel, op, ": shape ", shape_str(shape), " is invalid for input of size ",
             numel);
  }
  return out;
}

namespace {
// Strides for viewing `a` as `shape` without copying, if possible (PyTorch's computeStride).
bool view_strides(const Tensor& a, const Shape& shape, Shape& out) {
  const Shape& old_sz = a.shape();
  const Shape& old_st = a.strides();
  out.assign(shape.size(), 0);
  if (a.numel() == 0 || old_sz.empty()) {  // nothing, or one element: any strides do
    out = contiguous_strides(shape);
    return true;
  }
  int64_t view_d = static_cast<int64_t>(shape.size()) - 1;
  int64_t chunk_base_stride = old_st.empty() ? 1 : old_st.back();
  int64_t tensor_numel = 1, view_numel = 1;
  for (int64_t d = static_cast<int64_t>(old_sz.size()) - 1; d >= 0; --d) {
    tensor_numel *= old_sz[d];
    if (d == 0 || (old_sz[d - 1] != 1 && old_st[d - 1] != tensor_numel * chunk_base_stride)) {
      while (view_d >= 0 && (view_numel < tensor_numel || shape[view_d] == 1)) {
        out[view_d] = view_numel * chunk_base_stride;
        view_numel *= shape[view_d];
        --view_d;
      }
      if (view_numel != tensor_numel) return false;
      if (d > 0) {
        chunk_base_stride = old_st[d - 1];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  return view_d == -1;
}
}  // namespace

Tensor view(const Tensor& a, const Shape& shape) {
  Shape s = infer_shape(shape, a.numel(), "view");
  Shape st;
  QK_CHECK(view_strides(a, s, st), "view: cannot view a tensor of shape ", shape_str(a.shape()),
           " with strides ", shape_str(a.strides()), " as ", shape_str(s),
           "; its memory is not laid out for it: use reshape() (which copies) or .contiguous() first");
  return as_strided(a, s, st, a.storage_offset());
}

Tensor reshape(const Tensor& a, const Shape& shape) {
  Shape s = infer_shape(shape, a.numel(), "reshape");
  Shape st;
  if (view_strides(a, s, st)) return as_strided(a, s, st, a.storage_offset());
  return view(contiguous(a), s);
}

Tensor permute(const Tensor& a, const Shape& dims) {
  int64_t nd = a.dim();
  QK_CHECK(static_cast<int64_t>(dims.size()) == nd, "permute: expected ", nd, " dims, got ",
           shape_str(dims));
  Shape sz(nd), st(nd);
  std::vector<bool> seen(nd, false);
  for (int64_t i = 0; i < nd; ++i) {
    int64_t d = a.wrap_dim(dims[i], "permute");
    QK_CHECK(!seen[d], "permute: dim ", d, " repeated in ", shape_str(dims));
    seen[d] = true;
    sz[i] = a.shape()[d];
    st[i] = a.strides()[d];
  }
  return as_strided(a, sz, st, a.storage_offset());
}

Tensor transpose(const Tensor& a, int64_t d0, int64_t d1) {
  d0 = a.wrap_dim(d0, "transpose");
  d1 = a.wrap_dim(d1, "transpose");
  Shape sz = a.shape(), st = a.strides();
  if (a.dim() == 0) return a;
  std::swap(sz[d0], sz[d1]);
  std::swap(st[d0], st[d1]);
  return as_strided(a, sz, st, a.storage_offset());
}

Tensor expand(const Tensor& a, const Shape& shape) {
  QK_CHECK(shape.size() >= static_cast<size_t>(a.dim()), "expand: cannot expand shape ",
           shape_str(a.shape()), " to fewer dims ", shape_str(shape));
  size_t off = shape.size() - static_cast<size_t>(a.dim());
  Shape sz(shape.size()), st(shape.size(), 0);
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i < off) {
      QK_CHECK(shape[i] >= 0, "expand: -1 not allowed in new leading dim of ", shape_str(shape));
      sz[i] = shape[i];
      continue;
    }
    int64_t cur = a.shape()[i - off];
    int64_t want = shape[i] == -1 ? cur : shape[i];
    QK_CHECK(cur == want || cur == 1, "expand: shape ", shape_str(a.shape()),
             " cannot be expanded to ", shape_str(shape), " (dim ", i, ": ", cur, " vs ", want, ")");
    sz[i] = want;
    st[i] = cur == want ? a.strides()[i - off] : 0;
  }
  return as_strided(a, sz, st, a.storage_offset());
}

Tensor slice(const Tensor& a, int64_t dim, int64_t start, int64_t end, int64_t step) {
  dim = a.wrap_dim(dim, "slice");
  QK_CHECK(step > 0, "slice: step must be positive, got ", step);
  int64_t n = a.shape()[dim];
  if (start < 0) start += n;
  if (end < 0) end += n;
  start = std::clamp<int64_t>(start, 0, n);
  end = std::clamp<int64_t>(end, start, n);
  Shape sz = a.shape(), st = a.strides();
  sz[dim] = (end - start + step - 1) / step;
  st[dim] *= step;
  return as_strided(a, sz, st, a.storage_offset() + start * a.strides()[dim]);
}

Tensor narrow(const Tensor& a, int64_t dim, int64_t start, int64_t length) {
  dim = a.wrap_dim(dim, "narrow");
  int64_t n = a.shape()[dim];
  if (start < 0) start += n;
  QK_CHECK_INDEX(start >= 0 && length >= 0 && start + length <= n, "narrow: range [", start, ", ",
                 start + length, ") out of bounds for dim ", dim, " of size ", n);
  return slice(a, dim, start, start + length, 1);
}

Tensor select(const Tensor& a, int64_t dim, int64_t index) {
  dim = a.wrap_dim(dim, "select");
  int64_t n = a.shape()[dim];
  QK_CHECK_INDEX(index >= -n && index < n, "select: index ", index, " out of range for dim ", dim,
                 " of size ", n);
  if (index < 0) index += n;
  Shape sz = a.shape(), st = a.strides();
  int64_t off = a.storage_offset() + index * st[dim];
  sz.erase(sz.begin() + dim);
  st.erase(st.begin() + dim);
  return as_strided(a, sz, st, off);
}

Tensor unsqueeze(const Tensor& a, int64_t dim) {
  int64_t nd = a.dim();
  QK_CHECK_INDEX(dim >= -(nd + 1) && dim <= nd, "unsqueeze: dim ", dim, " out of range for a ", nd,
                 "-d tensor");
  if (dim < 0) dim += nd + 1;
  Shape sz = a.shape(), st = a.strides();
  int64_t s = dim < nd ? sz[dim] * st[dim] : 1;
  sz.insert(sz.begin() + dim, 1);
  st.insert(st.begin() + dim, s);
  return as_strided(a, sz, st, a.storage_offset());
}

Tensor squeeze(const Tensor& a, int64_t dim) {
  dim = a.wrap_dim(dim, "squeeze");
  if (a.dim() == 0 || a.shape()[dim] != 1) return as_strided(a, a.shape(), a.strides(), a.storage_offset());
  Shape sz = a.shape(), st = a.strides();
  sz.erase(sz.begin() + dim);
  st.erase(st.begin() + dim);
  return as_strided(a, sz, st, a.storage_offset());
}

Tensor flatten(const Tensor& a, int64_t start_dim, int64_t end_dim) {
  if (a.dim() == 0) return reshape(a, {1});
  start_dim = a.wrap_dim(start_dim, "flatten");
  end_dim = a.wrap_dim(end_dim, "flatten");
  QK_CHECK(start_dim <= end_dim, "flatten: start_dim ", start_dim, " after end_dim ", end_dim);
  Shape s;
  for (int64_t i = 0; i < start_dim; ++i) s.push_back(a.shape()[i]);
  int64_t m = 1;
  for (int64_t i = start_dim; i <= end_dim; ++i) m *= a.shape()[i];
  s.push_back(m);
  for (int64_t i = end_dim + 1; i < a.dim(); ++i) s.push_back(a.shape()[i]);
  return reshape(a, s);
}

}  // namespace qk::ops
