// Raw fused LLM ops (rotary embedding, SwiGLU, linear + cross entropy):
// validation, then the device's kernel.
#include "qk/tensor/ops/llm.h"

#include "qk/tensor/dispatch.h"
#include "qk/tensor/ops/view.h"
#include "op_kernel_tables.h"
#include "cpu/linear_cross_entropy.h"
#include "cpu/rotary.h"
#include "cpu/swiglu.h"

namespace qk::ops {

QK_DEFINE_KERNEL(rotary_embedding_kernel, RotaryFn);
QK_DEFINE_KERNEL(swiglu_kernel, SwigluFn);
QK_DEFINE_KERNEL(swiglu_backward_kernel, SwigluBwdFn);
QK_DEFINE_KERNEL(linear_cross_entropy_kernel, LinearCrossEntropyFn);

namespace {

QK_REGISTER_KERNEL(rotary_embedding_kernel, cpu, cpu::rotary_embedding);
QK_REGISTER_KERNEL(swiglu_kernel, cpu, cpu::swiglu);
QK_REGISTER_KERNEL(swiglu_backward_kernel, cpu, cpu::swiglu_backward);
QK_REGISTER_KERNEL(linear_cross_entropy_kernel, cpu, cpu::linear_cross_entropy);


void check_defined(const char* op, std::initializer_list<std::pair<const char*, Tensor>> ts) {
  for (const auto& [name, t] : ts) QK_CHECK(t.defined(), op, ": ", name, " is undefined");
}

void check_same_device(const char* op, const Tensor& a, const char* an, const Tensor& b,
                       const char* bn) {
  QK_CHECK_DEVICE(a.device() == b.device(), op, ": ", an, " is on ", a.device().str(), " but ",
                  bn, " is on ", b.device().str());
}

// x (or its gradient) [B,T,H,D] with a contiguous last dim, and its angles.
Tensor check_rotary(const char* op, const Tensor& x, const Tensor& cos, const Tensor& sin) {
  check_defined(op, {{"x", x}, {"cos", cos}, {"sin", sin}});
  QK_CHECK_TYPE(is_floating(x.dtype()), op, ": expected a floating-point x, got ",
                dtype_name(x.dtype()));
  QK_CHECK(x.dim() == 4, op, ": expected x of shape [B, T, H, D], got ", shape_str(x.shape()));
  QK_CHECK(cos.dim() == 2 && cos.shape() == sin.shape(), op,
           ": expected cos and sin of one shape [T, R], got ", shape_str(cos.shape()), " and ",
           shape_str(sin.shape()));
  const bool f32 = cos.dtype() == DType::f32 && sin.dtype() == DType::f32;
  const bool f64 = cos.dtype() == DType::f64 && sin.dtype() == DType::f64 && x.dtype() == DType::f64;
  QK_CHECK_TYPE(f32 || f64, op, ": cos and sin must be f32 (f64 only with an f64 x), got ",
                dtype_name(cos.dtype()), " and ", dtype_name(sin.dtype()), " for x ",
                dtype_name(x.dtype()));
  const int64_t T = x.size(1), D = x.size(3), R = cos.size(1);
  QK_CHECK(cos.size(0) == T, op, ": cos/sin have ", cos.size(0), " rows but x ",
           shape_str(x.shape()), " has T = ", T, " positions; pass the rows of these positions");
  QK_CHECK(R % 2 == 0 && R <= D, op, ": the rotary dims R = ", R,
           " must be even and at most the head dim D = ", D);
  check_same_device(op, x, "x", cos, "cos");
  check_same_device(op, x, "x", sin, "sin");
  return x.numel() > 0 && x.stride(3) != 1 ? contiguous(x) : x;
}

void check_swiglu_input(const char* op, const Tensor& x) {
  QK_CHECK(x.defined(), op, ": x is undefined");
  QK_CHECK_TYPE(is_floating(x.dtype()), op, ": expected a floating-point x, got ",
                dtype_name(x.dtype()));
  QK_CHECK(x.dim() >= 1 && x.size(-1) % 2 == 0, op,
           ": the last dim of x must be even (2F: gate then up projection), got ",
           shape_str(x.shape()));
}

}  // namespace

Tensor rotary_embedding(const Tensor& x, const Tensor& cos, const Tensor& sin) {
  Tensor xs = check_rotary("rotary_embedding", x, cos, sin);
  return rotary_embedding_kernel.get(x.device())(xs, contiguous(cos), contiguous(sin), false);
}

Tensor rotary_embedding_backward(const Tensor& grad, const Tensor& cos, const Tensor& sin) {
  Tensor g = check_rotary("rotary_embedding_backward", grad, cos, sin);
  return rotary_embedding_kernel.get(grad.device())(g, contiguous(cos), contiguous(sin), true);
}

Tensor swiglu(const Tensor& x) {
  check_swiglu_input("swiglu", x);
  return swiglu_kernel.get(x.device())(contiguous(x));
}

Tensor swiglu_backward(const Tensor& grad, const Tensor& x) {
  check_swiglu_input("swiglu_backward", x);
  QK_CHECK(grad.defined(), "swiglu_backward: grad is undefined");
  Shape want = x.shape();
  want.back() /= 2;
  QK_CHECK(grad.shape() == want, "swiglu_backward: grad must have shape ", shape_str(want),
           " for x ", shape_str(x.shape()), ", got ", shape_str(grad.shape()));
  QK_CHECK_TYPE(grad.dtype() == x.dtype(), "swiglu_backward: grad is ", dtype_name(grad.dtype()),
                " but x is ", dtype_name(x.dtype()));
  check_same_device("swiglu_backward", grad, "grad", x, "x");
  return swiglu_backward_kernel.get(x.device())(contiguous(grad), contiguous(x));
}

LinearCrossEntropyResult linear_cross_entropy(const Tensor& hidden, const Tensor& weight,
                                              const Tensor& target, const Tensor& token_weight,
                                              const LinearCrossEntropyOptions& o) {
  const char* op = "linear_cross_entropy";
  check_defined(op, {{"hidden", hidden}, {"weight", weight}, {"target", target}});
  QK_CHECK(hidden.dim() == 2 && weight.dim() == 2, op,
           ": expected hidden [N, C] and weight [V, C], got ", shape_str(hidden.shape()), " and ",
           shape_str(weight.shape()), "; flatten the tokens first");
  QK_CHECK(hidden.size(1) == weight.size(1), op, ": hidden ", shape_str(hidden.shape()),
           " has ", hidden.size(1), " features but weight ", shape_str(weight.shape()), " has ",
           weight.size(1));
  QK_CHECK(hidden.size(1) > 0 && weight.size(0) > 0, op,
           ": need a hidden size and a vocabulary of at least 1, got hidden ",
           shape_str(hidden.shape()), " and weight ", shape_str(weight.shape()));
  QK_CHECK_TYPE(hidden.dtype() == weight.dtype(), op, ": hidden is ", dtype_name(hidden.dtype()),
                " but weight is ", dtype_name(weight.dtype()), "; convert one with .to(dtype)");
  QK_CHECK_TYPE(hidden.dtype() == DType::f32 || hidden.dtype() == DType::bf16 ||
                    hidden.dtype() == DType::f64,
                op, ": expected f32, bf16 or f64 hidden and weight, got ",
                dtype_name(hidden.dtype()));
  QK_CHECK_TYPE(target.dtype() == DType::i64 || target.dtype() == DType::i32, op,
                ": expected an i64 (or i32) target, got ", dtype_name(target.dtype()));
  QK_CHECK(target.dim() == 1 && target.size(0) == hidden.size(0), op, ": target must be [",
           hidden.size(0), "] for hidden ", shape_str(hidden.shape()), ", got ",
           shape_str(target.shape()));
  check_same_device(op, hidden, "hidden", weight, "weight");
  check_same_device(op, hidden, "hidden", target, "target");
  if (token_weight.defined()) {
    QK_CHECK_TYPE(is_floating(token_weight.dtype()), op,
                  ": expected a floating-point token_weight, got ",
                  dtype_name(token_weight.dtype()));
    QK_CHECK(token_weight.shape() == target.shape(), op, ": token_weight must be [",
             hidden.size(0), "] like target, got ", shape_str(token_weight.shape()));
    check_same_device(op, hidden, "hidden", token_weight, "token_weight");
  }
  QK_CHECK(o.chunk_rows >= 0, op, ": chunk_rows must be >= 0 (0: automatic), got ",
           o.chunk_rows);
  return linear_cross_entropy_kernel.get(hidden.device())(
      contiguous(hidden), contiguous(weight), contiguous(target),
      token_weight.defined() ? contiguous(token_weight) : Tensor(), o);
}

}  // namespace qk::ops
