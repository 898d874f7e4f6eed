// Matrix products: validation, numpy matmul shape rules, dispatch to kernels.
#include "qk/tensor/ops/linalg.h"

#include "qk/tensor/kernel_tables.h"
#include "qk/tensor/ops/view.h"
#include "cpu/gemm.h"

namespace qk::ops {

QK_DEFINE_KERNEL(mm_kernel, MmFn);
QK_DEFINE_KERNEL(bmm_kernel, MmFn);
QK_DEFINE_KERNEL(linear_kernel, LinearFn);
QK_REGISTER_KERNEL(mm_kernel, cpu, cpu::mm);
QK_REGISTER_KERNEL(bmm_kernel, cpu, cpu::bmm);
QK_REGISTER_KERNEL(linear_kernel, cpu, cpu::linear);

namespace {

// Product of every dim but the last: the rows of a [.., K] tensor folded to 2-D.
int64_t leading_rows(const Tensor& t) {
  int64_t r = 1;
  for (int64_t d = 0; d + 1 < t.dim(); ++d) r *= t.size(d);
  return r;
}

void check_pair(const char* op, const Tensor& a, const Tensor& b) {
  QK_CHECK(a.defined() && b.defined(), op, ": got an undefined tensor");
  QK_CHECK_TYPE(is_floating(a.dtype()), op, ": expected floating-point tensors, got ",
                dtype_name(a.dtype()), " with shape ", shape_str(a.shape()));
  QK_CHECK_TYPE(a.dtype() == b.dtype(), op, ": dtypes differ: ", dtype_name(a.dtype()), " ",
                shape_str(a.shape()), " vs ", dtype_name(b.dtype()), " ", shape_str(b.shape()),
                "; convert one with .to(dtype)");
  QK_CHECK_DEVICE(a.device() == b.device(), op, ": tensors are on different devices: ",
                  a.device().str(), " vs ", b.device().str());
}

}  // namespace

Tensor mm(const Tensor& a, const Tensor& b) {
  check_pair("mm", a, b);
  QK_CHECK(a.dim() == 2 && b.dim() == 2, "mm: expected two 2-D tensors, got ",
           shape_str(a.shape()), " and ", shape_str(b.shape()), "; use matmul for other ranks");
  QK_CHECK(a.size(1) == b.size(0), "mm: inner dimensions differ: ", shape_str(a.shape()), " x ",
           shape_str(b.shape()), " (", a.size(1), " != ", b.size(0), ")");
  return mm_kernel.get(a.device())(a, b);
}

Tensor bmm(const Tensor& a, const Tensor& b) {
  check_pair("bmm", a, b);
  QK_CHECK(a.dim() == 3 && b.dim() == 3, "bmm: expected two 3-D tensors [B,M,K] and [B,K,N], got ",
           shape_str(a.shape()), " and ", shape_str(b.shape()));
  QK_CHECK(a.size(0) == b.size(0), "bmm: batch sizes differ: ", shape_str(a.shape()), " x ",
           shape_str(b.shape()));
  QK_CHECK(a.size(2) == b.size(1), "bmm: inner dimensions differ: ", shape_str(a.shape()), " x ",
           shape_str(b.shape()), " (", a.size(2), " != ", b.size(1), ")");
  return bmm_kernel.get(a.device())(a, b);
}

Tensor matmul(const Tensor& a, const Tensor& b) {
  check_pair("matmul", a, b);
  const int64_t da = a.dim(), db = b.dim();
  QK_CHECK(da >= 1 && db >= 1, "matmul: both arguments need at least 1 dimension, got ",
           shape_str(a.shape()), " and ", shape_str(b.shape()));
  const int64_t ka = a.size(-1), kb = db == 1 ? b.size(0) : b.size(-2);
  QK_CHECK(ka == kb, "matmul: inner dimensions differ: ", shape_str(a.shape()), " x ",
           shape_str(b.shape()), " (", ka, " != ", kb, ")");
  if (da == 1 && db == 1) return reshape(mm(reshape(a, {1, ka}), reshape(b, {kb, 1})), {});
  if (da == 2 && db == 2) return mm(a, b);
  if (da == 1 && db == 2) return squeeze(mm(unsqueeze(a, 0), b), 0);
  if (da >= 2 && db == 1) {
    // [.., M, K] x [K] -> [.., M]: fold the batch into M.
    Shape out = a.shape();
    out.pop_back();
    return reshape(mm(reshape(a, {leading_rows(a), ka}), unsqueeze(b, 1)), out);
  }
  if (db == 2) {
    // [.., M, K] x [K, N]: one GEMM with the batch folded into M (linear layers).
    Shape out = a.shape();
    out.back() = b.size(1);
    if (da == 1) out.pop_back();
    return reshape(mm(reshape(a, {leading_rows(a), ka}), b), out);
  }
  // Batched: a 1-D side becomes a matrix and loses that dim again at the end.
  Tensor a3 = da == 1 ? unsqueeze(a, 0) : a;
  Tensor b3 = db == 1 ? unsqueeze(b, 1) : b;
  Shape ba(a3.shape().begin(), a3.shape().end() - 2);
  Shape bb(b3.shape().begin(), b3.shape().end() - 2);
  Shape batch = broadcast_shapes(ba, bb, "matmul");
  const int64_t m = a3.size(-2), n = b3.size(-1);
  Shape ea = batch, eb = batch;
  ea.insert(ea.end(), {m, ka});
  eb.insert(eb.end(), {kb, n});
  // reshape() keeps views where it can: a broadcast batch stays stride 0 when
  // it collapses cleanly, which bmm takes without copying.
  int64_t nb = shape_numel(batch);
  Tensor out = bmm(reshape(expand(a3, ea), {nb, m, ka}), reshape(expand(b3, eb), {nb, kb, n}));
  Shape out_shape = batch;
  if (da > 1) out_shape.push_back(m);
  if (db > 1) out_shape.push_back(n);
  return reshape(out, out_shape);
}

Tensor linear(const Tensor& x, const Tensor& w, const Tensor& b) {
  check_pair("linear", x, w);
  QK_CHECK(x.dim() >= 1 && w.dim() == 2, "linear: expected x [.., in] and weight [out, in], got ",
           shape_str(x.shape()), " and ", shape_str(w.shape()));
  const int64_t in = x.size(-1), out = w.size(0);
  QK_CHECK(w.size(1) == in, "linear: x has ", in, " features but weight ", shape_str(w.shape()),
           " expects ", w.size(1), " (x ", shape_str(x.shape()), ")");
  if (b.defined()) {
    check_pair("linear", x, b);
    QK_CHECK(b.dim() == 1 && b.size(0) == out, "linear: bias must be [", out, "] for weight ",
             shape_str(w.shape()), ", got ", shape_str(b.shape()));
  }
  Shape out_shape = x.shape();
  out_shape.back() = out;
  Tensor y = linear_kernel.get(x.device())(reshape(x, {leading_rows(x), in}), w, b);
  return reshape(y, out_shape);
}

}  // namespace qk::ops
