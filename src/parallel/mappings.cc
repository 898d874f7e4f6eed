// Tensor- and sequence-parallel mappings: a collective forward, its conjugate
// backward (Megatron's _CopyToModelParallelRegion and friends).
#include "qk/parallel/mappings.h"

#include <vector>

#include "qk/autograd/autograd.h"
#include "qk/base/error.h"
#include "qk/tensor/ops/index.h"
#include "qk/tensor/ops/view.h"

namespace qk::parallel {

namespace {

// A contiguous copy the collectives may write into: never the caller's buffer.
Tensor fresh_copy(const Tensor& t) {
  Tensor c = empty(t.shape(), TensorOptions(t.dtype()).device(t.device()));
  ops::copy_(c, t);
  return c;
}

void check_divisible(const Tensor& x, int64_t dim, int n, const char* what) {
  QK_CHECK(x.size(dim) % n == 0, what, ": dim ", dim, " of ", shape_str(x.shape()),
           " does not split evenly over the ", n, " ranks of the tensor-parallel group");
}

}  // namespace

Tensor all_gather_along(const Tensor& x, dist::ProcessGroup& g, int64_t dim) {
  const int n = g.size();
  if (n == 1) return x;
  dim = x.wrap_dim(dim, "all_gather_along");
  const Tensor in = x.is_contiguous() ? x : ops::contiguous(x);
  Shape stacked = in.shape();
  stacked.insert(stacked.begin(), n);
  Tensor buf = empty(stacked, TensorOptions(in.dtype()).device(in.device()));
  g.all_gather(buf, in);
  if (dim == 0) {
    Shape s = in.shape();
    s[0] *= n;
    return ops::view(buf, s);
  }
  std::vector<Tensor> parts;
  for (int r = 0; r < n; ++r) parts.push_back(ops::select(buf, 0, r));
  return ops::cat(parts, dim);
}

Tensor reduce_scatter_along(const Tensor& x, dist::ProcessGroup& g, int64_t dim) {
  const int n = g.size();
  if (n == 1) return x;
  dim = x.wrap_dim(dim, "reduce_scatter_along");
  check_divisible(x, dim, n, "reduce_scatter_along");
  // Block r of the input is rank r's slice of `dim`: stack the slices first
  // (free along dim 0, one copy otherwise).
  Tensor in = dim == 0 ? (x.is_contiguous() ? x : ops::contiguous(x)) : ops::stack(ops::chunk(x, n, dim), 0);
  Shape out_shape = x.shape();
  out_shape[dim] /= n;
  Tensor out = empty(out_shape, TensorOptions(x.dtype()).device(x.device()));
  g.reduce_scatter(out, in);
  return out;
}

Tensor slice_along(const Tensor& x, dist::ProcessGroup& g, int64_t dim) {
  const int n = g.size();
  if (n == 1) return x;
  dim = x.wrap_dim(dim, "slice_along");
  check_divisible(x, dim, n, "slice_along");
  const int64_t len = x.size(dim) / n;
  return ops::contiguous(ops::narrow(x, dim, g.rank() * len, len));
}

Tensor copy_to_tensor_model_parallel_region(const Tensor& x, dist::ProcessGroup& tp) {
  if (tp.size() == 1) return x;
  Tensor out = x.detach();
  dist::ProcessGroup* g = &tp;
  autograd::record("CopyToTensorParallelRegionBackward", {x}, {out}, [g](const std::vector<Tensor>& grads) {
    Tensor sum = fresh_copy(grads[0]);
    g->all_reduce(sum);
    return std::vector<Tensor>{sum};
  });
  return out;
}

Tensor reduce_from_tensor_model_parallel_region(const Tensor& x, dist::ProcessGroup& tp) {
  if (tp.size() == 1) return x;
  Tensor out = fresh_copy(x);
  tp.all_reduce(out);
  autograd::record("ReduceFromTensorParallelRegionBackward", {x}, {out},
                   [](const std::vector<Tensor>& grads) { return std::vector<Tensor>{grads[0]}; });
  return out;
}

Tensor scatter_to_tensor_model_parallel_region(const Tensor& x, dist::ProcessGroup& tp) {
  return scatter_to_sequence_parallel_region(x, tp, -1);
}

Tensor gather_from_tensor_model_parallel_region(const Tensor& x, dist::ProcessGroup& tp) {
  return gather_from_sequence_parallel_region(x, tp, -1, /*tensor_parallel_output_grad=*/false);
}

Tensor scatter_to_sequence_parallel_region(const Tensor& x, dist::ProcessGroup& tp, int64_t dim) {
  if (tp.size() == 1) return x;
  dim = x.wrap_dim(dim, "scatter_to_parallel_region");
  Tensor out = slice_along(x, tp, dim);
  dist::ProcessGroup* g = &tp;
  autograd::record("ScatterToParallelRegionBackward", {x}, {out}, [g, dim](const std::vector<Tensor>& grads) {
    return std::vector<Tensor>{all_gather_along(grads[0], *g, dim)};
  });
  return out;
}

Tensor gather_from_sequence_parallel_region(const Tensor& x, dist::ProcessGroup& tp, int64_t dim,
                                            bool tensor_parallel_output_grad) {
  if (tp.size() == 1) return x;
  dim = x.wrap_dim(dim, "gather_from_parallel_region");
  Tensor out = all_gather_along(x, tp, dim);
  dist::ProcessGroup* g = &tp;
  autograd::record("GatherFromParallelRegionBackward", {x}, {out},
                   [g, dim, tensor_parallel_output_grad](const std::vector<Tensor>& grads) {
                     return std::vector<Tensor>{tensor_parallel_output_grad ? reduce_scatter_along(grads[0], *g, dim)
                                                                            : slice_along(grads[0], *g, dim)};
                   });
  return out;
}

Tensor reduce_scatter_to_sequence_parallel_region(const Tensor& x, dist::ProcessGroup& tp, int64_t dim) {
  if (tp.size() == 1) return x;
  dim = x.wrap_dim(dim, "reduce_scatter_to_sequence_parallel_region");
  Tensor out = reduce_scatter_along(x, tp, dim);
  dist::ProcessGroup* g = &tp;
  autograd::record("ReduceScatterToSequenceParallelRegionBackward", {x}, {out},
                   [g, dim](const std::vector<Tensor>& grads) {
                     return std::vector<Tensor>{all_gather_along(grads[0], *g, dim)};
                   });
  return out;
}

}  // namespace qk::parallel
