// Elementwise ops: validation, output allocation, dispatch.
#include "qk/tensor/ops/elementwise.h"

#include "qk/tensor/kernel_tables.h"
#include "qk/tensor/ops/memory_format.h"
#include "qk/tensor/ops/view.h"
#include "op_kernel_tables.h"
#include "cpu/kernels.h"

namespace qk {

const char* binary_op_name(BinaryOp op) {
  static const char* names[] = {"add", "sub", "mul", "div", "pow", "maximum", "minimum",
                                "eq",  "ne",  "lt",  "le",  "gt",  "ge"};
  return names[static_cast<int>(op)];
}

const char* unary_op_name(UnaryOp op) {
  static const char* names[] = {"neg",  "exp",  "log",     "sqrt",    "rsqrt",      "relu",
                                "gelu", "gelu_tanh", "silu", "tanh", "sigmoid", "abs",
                                "sign", "square", "reciprocal", "sin", "cos", "erf"};
  return names[static_cast<int>(op)];
}

namespace ops {

QK_DEFINE_KERNEL(binary_kernel, BinaryFn);
QK_DEFINE_KERNEL(binary_scalar_kernel, BinaryScalarFn);
QK_DEFINE_KERNEL(unary_kernel, UnaryFn);
QK_DEFINE_KERNEL(unary_backward_kernel, UnaryBwdFn);
QK_DEFINE_KERNEL(clamp_kernel, ClampFn);
QK_DEFINE_KERNEL(clamp_backward_kernel, ClampBwdFn);
QK_DEFINE_KERNEL(where_kernel, WhereFn);
QK_DEFINE_KERNEL(add_inplace_kernel, AddInplaceFn);
QK_REGISTER_KERNEL(binary_kernel, cpu, cpu::binary);
QK_REGISTER_KERNEL(unary_kernel, cpu, cpu::unary);
QK_REGISTER_KERNEL(unary_backward_kernel, cpu, cpu::unary_backward);
QK_REGISTER_KERNEL(clamp_kernel, cpu, cpu::clamp);
QK_REGISTER_KERNEL(clamp_backward_kernel, cpu, cpu::clamp_backward);
QK_REGISTER_KERNEL(where_kernel, cpu, cpu::where);
QK_REGISTER_KERNEL(add_inplace_kernel, cpu, cpu::add_inplace);

namespace {
void check_same(const char* op, const Tensor& a, const Tensor& b) {
  QK_CHECK_DEVICE(a.device() == b.device(), op, ": tensors are on different devices: ",
                  a.device().str(), " and ", b.device().str(), "; move one with .to(device)");
  QK_CHECK_TYPE(a.dtype() == b.dtype(), op, ": dtypes differ: ", dtype_name(a.dtype()), " ",
                shape_str(a.shape()), " and ", dtype_name(b.dtype()), " ", shape_str(b.shape()),
                "; convert one with .to(dtype)");
}
TensorOptions like(const Tensor& t, DType dt) { return TensorOptions().dtype(dt).device(t.device()); }
// A result of `shape` in a channels-last operand's layout (memory_format.h).
Tensor empty_result(const Shape& shape, TensorOptions o, std::initializer_list<const Tensor*> operands) {
  return empty(shape, o, result_format(shape, operands));
}
}  // namespace

namespace {
// What `op` refuses of a's dtype.
void check_binary_dtype(BinaryOp op, DType t) {
  const char* name = binary_op_name(op);
  if (op >= BinaryOp::eq) return;
  QK_CHECK_TYPE(t != DType::boolean, name, ": not defined for bool tensors");
  QK_CHECK_TYPE(op != BinaryOp::div || is_floating(t), name,
                ": integer division is not supported; convert to a floating dtype first (got ", dtype_name(t), ")");
}
}  // namespace

Tensor binary(BinaryOp op, const Tensor& a, const Tensor& b) {
  const char* name = binary_op_name(op);
  check_same(name, a, b);
  Shape shape = broadcast_shapes(a.shape(), b.shape(), name);
  check_binary_dtype(op, a.dtype());
  Tensor out = empty_result(shape, like(a, op >= BinaryOp::eq ? DType::boolean : a.dtype()), {&a, &b});
  if (out.numel() > 0) binary_kernel.get(a.device())(op, out, a, b);
  return out;
}

// With a device's scalar kernel, one launch; else the binary kernel with a
// 0-d tensor of a's dtype (the same values: b is converted to a's dtype first).
Tensor binary_scalar(BinaryOp op, const Tensor& a, double b) {
  if (!binary_scalar_kernel.supports(a.device().type)) return binary(op, a, scalar_tensor(b, like(a, a.dtype())));
  check_binary_dtype(op, a.dtype());
  Tensor out = empty_result(a.shape(), like(a, op >= BinaryOp::eq ? DType::boolean : a.dtype()), {&a});
  if (out.numel() > 0) binary_scalar_kernel.get(a.device())(op, out, a, b);
  return out;
}

void binary_scalar_(BinaryOp op, const Tensor& self, double b) {
  QK_CHECK(op < BinaryOp::eq, "binary_scalar_: ", binary_op_name(op),
           " gives bool values, which cannot be stored in place; use binary_scalar");
  check_binary_dtype(op, self.dtype());
  if (self.numel() == 0) return;
  self.bump_version();
  // In place: out and a alias element for element.
  if (binary_scalar_kernel.supports(self.device().type)) return binary_scalar_kernel.get(self.device())(op, self, self, b);
  binary_kernel.get(self.device())(op, self, self, scalar_tensor(b, like(self, self.dtype())));
}

Tensor unary(UnaryOp op, const Tensor& a) {
  bool integer_ok = op == UnaryOp::neg || op == UnaryOp::abs || op == UnaryOp::sign ||
                    op == UnaryOp::square || op == UnaryOp::relu;
  QK_CHECK_TYPE(is_floating(a.dtype()) || (integer_ok && a.dtype() != DType::boolean),
                unary_op_name(op), ": expected a floating-point tensor, got ", dtype_name(a.dtype()));
  Tensor out = empty_result(a.shape(), like(a, a.dtype()), {&a});
  if (out.numel() > 0) unary_kernel.get(a.device())(op, out, a);
  return out;
}

Tensor unary_backward(UnaryOp op, const Tensor& grad, const Tensor& x, const Tensor& y) {
  const Tensor& ref = x.defined() ? x : y;
  QK_CHECK(ref.defined(), unary_op_name(op), " backward: needs the input or the output");
  Tensor dx = empty_result(ref.shape(), like(ref, grad.dtype()), {&grad, &ref});
  if (dx.numel() > 0) unary_backward_kernel.get(grad.device())(op, dx, grad, x, y);
  return dx;
}

Tensor clamp(const Tensor& a, std::optional<double> lo, std::optional<double> hi) {
  QK_CHECK(lo || hi, "clamp: give at least one of min and max");
  QK_CHECK(!lo || !hi || *lo <= *hi, "clamp: min ", *lo, " is greater than max ", *hi);
  Tensor out = empty_result(a.shape(), like(a, a.dtype()), {&a});
  if (out.numel() > 0) clamp_kernel.get(a.device())(out, a, lo, hi);
  return out;
}

Tensor clamp_backward(const Tensor& grad, const Tensor& x, std::optional<double> lo,
                      std::optional<double> hi) {
  Tensor dx = empty_result(x.shape(), like(x, grad.dtype()), {&grad, &x});
  if (dx.numel() > 0) clamp_backward_kernel.get(x.device())(dx, grad, x, lo, hi);
  return dx;
}

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  check_same("where", a, b);
  QK_CHECK_TYPE(cond.dtype() == DType::boolean, "where: condition must be bool, got ",
                dtype_name(cond.dtype()));
  QK_CHECK_DEVICE(cond.device() == a.device(), "where: condition on ", cond.device().str(),
                  ", values on ", a.device().str());
  Shape shape = broadcast_shapes(broadcast_shapes(a.shape(), b.shape(), "where"), cond.shape(), "where");
  Tensor out = empty_result(shape, like(a, a.dtype()), {&a, &b, &cond});
  if (out.numel() > 0) where_kernel.get(a.device())(out, cond, a, b);
  return out;
}

Tensor masked_fill(const Tensor& a, const Tensor& mask, double value) {
  return where(mask, scalar_tensor(value, like(a, a.dtype())), a);
}

void add_(const Tensor& self, const Tensor& other, double alpha) {
  check_same("add_", self, other);
  Shape bs = broadcast_shapes(self.shape(), other.shape(), "add_");
  QK_CHECK(bs == self.shape(), "add_: cannot add shape ", shape_str(other.shape()),
           " into shape ", shape_str(self.shape()), " in place");
  if (self.numel() == 0) return;
  self.bump_version();
  add_inplace_kernel.get(self.device())(self, other, alpha);
}

void mul_(const Tensor& self, double s) { binary_scalar_(BinaryOp::mul, self, s); }

void mul_(const Tensor& self, const Tensor& other) {
  check_same("mul_", self, other);
  Shape bs = broadcast_shapes(self.shape(), other.shape(), "mul_");
  QK_CHECK(bs == self.shape(), "mul_: cannot multiply shape ", shape_str(other.shape()),
           " into shape ", shape_str(self.shape()), " in place");
  if (self.numel() == 0) return;
  self.bump_version();
  binary_kernel.get(self.device())(BinaryOp::mul, self, self, other);
}

}  // namespace ops
}  // namespace qk
