// The multi-tensor passes (qk/tensor/ops/optimizer.h): the loss-scaling pass
// (scale in place, sum of squares, inf/NaN count) and the clipping scale,
// over tensors of several shapes (one longer than a CUDA block's chunk), in
// each floating dtype, at scale 1 and below; the optimizer list steps (SGD,
// Adam, AdamW with AMSGrad) over parameters of those shapes.
#include "harness/case_builders.h"
#include "qk/tensor/ops/elementwise.h"
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

// The optimizer list steps over kShapes' parameters: inputs are, per shape,
// the parameter, its gradient and two state tensors (the second squared, so
// Adam's second moment is not negative); results are the updated
// parameters and states.
Case make_step(std::string op, const std::string& what, DType t, Values& v, OpFn fn) {
  Case c;
  c.op = std::move(op);
  c.shape = label({"4 parameters", what});
  c.dtype = t;
  for (const Shape& s : kShapes)
    for (int k = 0; k < 4; ++k) c.inputs.push_back({v.uniform(s, t), View{}, false});
  c.fn = std::move(fn);
  c.gradcheck = false;
  return c;
}

// Input i's role r (0 param, 1 grad, 2 and 3 state) for each parameter.
V role(const V& a, int r) {
  V out;
  for (size_t i = static_cast<size_t>(r); i < a.size(); i += 4) out.push_back(ops::contiguous(ops::clone(a[i])));
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
  for (DType t : {DType::f32, DType::f64}) {
    for (bool nesterov : {false, true})
      out.push_back(make_step("ops::multi_tensor_sgd_step_", nesterov ? "nesterov" : "momentum", t, v,
                              [nesterov](const V& a) {
                                ops::SgdStepLists l{role(a, 0), role(a, 1), role(a, 2)};
                                ops::multi_tensor_sgd_step_(l, {0.1, 0.9, 0.0, 0.01, nesterov, false});
                                V r = l.params;
                                r.insert(r.end(), l.momentum_bufs.begin(), l.momentum_bufs.end());
                                return r;
                              }));
    for (bool amsgrad : {false, true})
      out.push_back(make_step("ops::multi_tensor_adam_step_", amsgrad ? "adamw amsgrad" : "adam", t, v,
                              [amsgrad](const V& a) {
                                ops::AdamStepLists l{role(a, 0), role(a, 1), role(a, 2), role(a, 3), {}};
                                for (Tensor& sq : l.exp_avg_sqs) sq = ops::binary(BinaryOp::mul, sq, sq);
                                if (amsgrad) l.max_exp_avg_sqs = l.exp_avg_sqs;
                                if (amsgrad)
                                  for (Tensor& m : l.max_exp_avg_sqs) m = ops::clone(m);
                                ops::AdamStepArgs s;
                                s.lr = 1e-2, s.beta1 = 0.9, s.beta2 = 0.99, s.eps = 1e-8, s.weight_decay = 0.1;
                                s.step = 3, s.decoupled = amsgrad, s.amsgrad = amsgrad;
                                ops::multi_tensor_adam_step_(l, s);
                                V r = l.params;
                                r.insert(r.end(), l.exp_avgs.begin(), l.exp_avgs.end());
                                r.insert(r.end(), l.exp_avg_sqs.begin(), l.exp_avg_sqs.end());
                                return r;
                              }));
  }
}

}  // namespace qk::harness
