// Differentiable matrix products. For C = A . B: dA = dC . B^T, dB = A^T . dC.
// Transposes are views; the GEMM kernels take them as BLAS flags, no copies.
#include "qk/autograd/autocast.h"
#include "qk/autograd/functions.h"
#include "qk/tensor/ops/linalg.h"
#include "qk/tensor/ops/reduce.h"
#include "qk/tensor/ops/view.h"

namespace qk {

using autograd::record;
using V = std::vector<Tensor>;

namespace {
// The transpose of the last two dims (a view).
Tensor mT(const Tensor& t) { return ops::transpose(t, t.dim() - 2, t.dim() - 1); }
}  // namespace

Tensor mm(const Tensor& a_in, const Tensor& b_in) {
  const Tensor a = autocast::to_low(a_in);
  const Tensor b = autocast::to_low(b_in);
  // a [M,K], b [K,N] -> out [M,N]
  Tensor out = ops::mm(a, b);
  bool ga = a.requires_grad(), gb = b.requires_grad();
  record("MmBackward", {a, b}, {out}, [a, b, ga, gb](const V& g) -> V {
    return {ga ? ops::mm(g[0], mT(b)) : Tensor(),   // da [M,K] = dout [M,N] . b^T [N,K]
            gb ? ops::mm(mT(a), g[0]) : Tensor()};  // db [K,N] = a^T [K,M] . dout [M,N]
  });
  return out;
}

Tensor bmm(const Tensor& a_in, const Tensor& b_in) {
  const Tensor a = autocast::to_low(a_in);
  const Tensor b = autocast::to_low(b_in);
  // a [B,M,K], b [B,K,N] -> out [B,M,N]
  Tensor out = ops::bmm(a, b);
  bool ga = a.requires_grad(), gb = b.requires_grad();
  record("BmmBackward", {a, b}, {out}, [a, b, ga, gb](const V& g) -> V {
    return {ga ? ops::bmm(g[0], mT(b)) : Tensor(), gb ? ops::bmm(mT(a), g[0]) : Tensor()};
  });
  return out;
}

Tensor matmul(const Tensor& a_in, const Tensor& b_in) {
  const Tensor a = autocast::to_low(a_in);
  const Tensor b = autocast::to_low(b_in);
  Tensor out = ops::matmul(a, b);
  bool ga = a.requires_grad(), gb = b.requires_grad();
  record("MatmulBackward", {a, b}, {out}, [a, b, ga, gb](const V& g) -> V {
    // Work on the promoted operands: a 1-D a is [1,K], a 1-D b is [K,1], and
    // dout gets those unit dims back: a1 [..,M,K], b1 [..,K,N], g1 [..,M,N].
    Tensor a1 = a.dim() == 1 ? ops::unsqueeze(a, 0) : a;
    Tensor b1 = b.dim() == 1 ? ops::unsqueeze(b, 1) : b;
    Tensor g1 = g[0];
    if (a.dim() == 1) g1 = ops::unsqueeze(g1, g1.dim() - (b.dim() == 1 ? 0 : 1));
    if (b.dim() == 1) g1 = ops::unsqueeze(g1, g1.dim());
    Tensor da, db;
    if (ga) {
      // da1 [..,M,K] = g1 . b1^T, summed over batch dims a was broadcast along.
      da = ops::reshape(ops::sum_to(ops::matmul(g1, mT(b1)), a1.shape()), a.shape());
    }
    if (gb) {
      const int64_t k = b1.size(-2), n = b1.size(-1);
      if (b1.dim() == 2) {
        // One GEMM over every row of the batch: db [K,N] = a^T [K,R] . g [R,N].
        Tensor a2 = ops::reshape(a1, {a1.numel() / std::max<int64_t>(k, 1), k});
        Tensor g2 = ops::reshape(g1, {g1.numel() / std::max<int64_t>(n, 1), n});
        db = ops::reshape(ops::mm(mT(a2), g2), b.shape());
      } else {
        db = ops::reshape(ops::sum_to(ops::matmul(mT(a1), g1), b1.shape()), b.shape());
      }
    }
    return {da, db};
  });
  return out;
}

Tensor linear(const Tensor& x_in, const Tensor& w_in, const Tensor& b_in) {
  const Tensor x = autocast::to_low(x_in);
  const Tensor w = autocast::to_low(w_in);
  const Tensor b = autocast::to_low(b_in);
  // x [..,in], w [out,in], b [out] -> y [..,out]
  Tensor y = ops::linear(x, w, b);
  bool gx = x.requires_grad(), gw = w.requires_grad(), gbias = b.defined() && b.requires_grad();
  std::vector<Tensor> inputs{x, w};
  if (b.defined()) inputs.push_back(b);
  record("LinearBackward", inputs, {y}, [x, w, gx, gw, gbias, has_b = b.defined()](const V& g) -> V {
    const int64_t in = w.size(1), out = w.size(0);
    Tensor g2 = ops::reshape(g[0], {g[0].numel() / std::max<int64_t>(out, 1), out});  // [R,out]
    V grads(has_b ? 3 : 2);
    if (gx) grads[0] = ops::reshape(ops::mm(g2, w), x.shape());  // dx [R,in] = g . w
    if (gw) {
      Tensor x2 = ops::reshape(x, {x.numel() / std::max<int64_t>(in, 1), in});
      grads[1] = ops::mm(mT(g2), x2);  // dw [out,in] = g^T . x
    }
    if (gbias) grads[2] = ops::sum(g2, {0});  // db [out]
    return grads;
  });
  return y;
}

}  // namespace qk
