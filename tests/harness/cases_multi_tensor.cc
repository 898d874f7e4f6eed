// The multi-tensor passes (qk/tensor/ops/optimizer.h): the loss-scaling pass
// (scale in place, sum of squares, inf/NaN count) and the clipping scale,
// over tensors of several shapes (one longer than a CUDA block's chunk), in
// each floating dtype, at scale 1 and below.
#include "harness/case_builders.h"
#include "qk/tensor/ops/optimizer.h"
#include "qk/tensor/ops/view.h"

namespace qk::harness {

namespace {

using V = std::vector<Tensor>;

const std::vector<Shape> kShapes = {{7, 13}, {5}, {3, 4, 6}, {20000}};

Case make(std::string op, double scale, DType t, Values& v, OpFn fn) {
  Case c;
  c.op = std::move(op);
  c.shape = label({"4 tensors", "scale=" + std::to_string(scale)});
  c.dtype = t;
  for (const Shape& s : kShapes) c.inputs.push_back({v.uniform(s, t), View{}, false});
  c.fn = std::move(fn);
  c.gradcheck = false;
  return c;
}

// The op works in place: on copies, so each run sees the case's inputs.
V copies(const V& a) {
  V out;
  for (const Tensor& t : a) out.push_back(ops::contiguous(ops::clone(t)));
  return out;
}

}  // namespace

void add_multi_tensor_cases(std::vector<Case>& out) {
  Values v(707);
  for (DType t : {DType::f32, DType::f64, DType::bf16, DType::f16})
    for (double scale : {1.0, 0.25}) {
      out.push_back(make("ops::multi_tensor_unscale_norm_", scale, t, v, [scale](const V& a) {
        V ts = copies(a);
        V r{ops::multi_tensor_unscale_norm_(ts, scale)};
        r.insert(r.end(), ts.begin(), ts.end());
        return r;
      }));
      out.push_back(make("ops::multi_tensor_scale_", scale, t, v, [scale](const V& a) {
        V ts = copies(a);
        ops::multi_tensor_scale_(ts, scale);
        return ts;
      }));
    }
}

}  // namespace qk::harness
