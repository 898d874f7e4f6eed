// Differentiable joining, splitting and indexing. Each backward is the
// adjoint indexing op: cat <-> narrow, index_select -> index_add,
// gather -> scatter_add, scatter_add -> gather, topk -> scatter_add.
#include "qk/autograd/functions.h"
#include "qk/tensor/ops/index.h"
#include "qk/tensor/ops/view.h"

namespace qk {

using autograd::record;
using V = std::vector<Tensor>;

namespace {

// a with zeros except `part` in its leading corner (part may be smaller in any dim).
Tensor embed_corner(const Tensor& part, const Shape& shape, DType dt) {
  if (part.shape() == shape) return part;
  Tensor full = zeros(shape, TensorOptions(dt).device(part.device()));
  Tensor region = full;
  for (int64_t d = 0; d < part.dim(); ++d) region = ops::narrow(region, d, 0, part.size(d));
  ops::copy_(region, part);
  return full;
}

// Records the pieces of a split along d; the backward concatenates their
// gradients (zeros for pieces no gradient reached, supplied by the engine).
std::vector<Tensor> record_split(const Tensor& a, std::vector<Tensor> pieces, int64_t d,
                                 const char* name) {
  if (autograd::needs_grad({a}))
    record(name, {a}, pieces, [d](const V& g) -> V { return {ops::cat(g, d)}; });
  return pieces;
}

}  // namespace

Tensor cat(const std::vector<Tensor>& tensors, int64_t dim) {
  Tensor out = ops::cat(tensors, dim);
  if (autograd::needs_grad(tensors)) {
    const int64_t d = out.wrap_dim(dim, "cat");
    Shape sizes;
    for (const auto& t : tensors) sizes.push_back(t.size(d));
    record("CatBackward", tensors, {out}, [d, sizes](const V& g) -> V {
      V grads;
      int64_t at = 0;
      for (int64_t s : sizes) {
        grads.push_back(ops::contiguous(ops::narrow(g[0], d, at, s)));
        at += s;
      }
      return grads;
    });
  }
  return out;
}

Tensor stack(const std::vector<Tensor>& tensors, int64_t dim) {
  Tensor out = ops::stack(tensors, dim);
  if (autograd::needs_grad(tensors)) {
    const int64_t d = out.wrap_dim(dim, "stack");
    const size_t n = tensors.size();
    record("StackBackward", tensors, {out}, [d, n](const V& g) -> V {
      V grads;
      for (size_t i = 0; i < n; ++i)
        grads.push_back(ops::contiguous(ops::select(g[0], d, static_cast<int64_t>(i))));
      return grads;
    });
  }
  return out;
}

std::vector<Tensor> split(const Tensor& a, int64_t split_size, int64_t dim) {
  return record_split(a, ops::split(a, split_size, dim), a.wrap_dim(dim, "split"), "SplitBackward");
}

std::vector<Tensor> chunk(const Tensor& a, int64_t chunks, int64_t dim) {
  return record_split(a, ops::chunk(a, chunks, dim), a.wrap_dim(dim, "chunk"), "ChunkBackward");
}

Tensor index_select(const Tensor& a, int64_t dim, const Tensor& index) {
  Tensor out = ops::index_select(a, dim, index);
  if (autograd::needs_grad({a})) {
    Tensor idx = index.detach();
    const Shape shape = a.shape();
    const DType dt = a.dtype();
    record("IndexSelectBackward", {a}, {out}, [idx, dim, shape, dt](const V& g) -> V {
      return {ops::index_add(zeros(shape, TensorOptions(dt).device(g[0].device())), dim, idx, g[0])};
    });
  }
  return out;
}

Tensor gather(const Tensor& a, int64_t dim, const Tensor& index) {
  Tensor out = ops::gather(a, dim, index);
  if (autograd::needs_grad({a})) {
    Tensor idx = index.detach();
    const Shape shape = a.shape();
    const DType dt = a.dtype();
    record("GatherBackward", {a}, {out}, [idx, dim, shape, dt](const V& g) -> V {
      return {ops::scatter_add(zeros(shape, TensorOptions(dt).device(g[0].device())), dim, idx, g[0])};
    });
  }
  return out;
}

Tensor scatter_add(const Tensor& a, int64_t dim, const Tensor& index, const Tensor& src) {
  Tensor out = ops::scatter_add(a, dim, index, src);
  if (autograd::needs_grad({a, src})) {
    Tensor idx = index.detach();
    const Shape src_shape = src.shape();
    const bool gsrc = src.requires_grad();
    record("ScatterAddBackward", {a, src}, {out}, [idx, dim, src_shape, gsrc](const V& g) -> V {
      // da = g; dsrc = g gathered at the scattered positions (0 outside index's extent).
      Tensor dsrc =
          gsrc ? embed_corner(ops::gather(g[0], dim, idx), src_shape, g[0].dtype()) : Tensor();
      return {g[0], dsrc};
    });
  }
  return out;
}

Tensor index_add(const Tensor& a, int64_t dim, const Tensor& index, const Tensor& src) {
  Tensor out = ops::index_add(a, dim, index, src);
  if (autograd::needs_grad({a, src})) {
    Tensor idx = index.detach();
    const bool gsrc = src.requires_grad();
    record("IndexAddBackward", {a, src}, {out}, [idx, dim, gsrc](const V& g) -> V {
      // da = g; dsrc = g's slices at the indexed positions.
      return {g[0], gsrc ? ops::index_select(g[0], dim, idx) : Tensor()};
    });
  }
  return out;
}

std::pair<Tensor, Tensor> topk(const Tensor& a, int64_t k, int64_t dim, bool largest, bool sorted) {
  auto [values, indices] = ops::topk(a, k, dim, largest, sorted);
  if (autograd::needs_grad({a})) {
    Tensor idx = indices;
    const Shape shape = a.shape();
    const DType dt = a.dtype();
    record("TopkBackward", {a}, {values, indices}, [idx, dim, shape, dt](const V& g) -> V {
      return {ops::scatter_add(zeros(shape, TensorOptions(dt).device(g[0].device())), dim, idx, g[0])};
    });
  }
  return {values, indices};
}

}  // namespace qk
