// Raw elementwise ops with numpy broadcasting. Both operands must have the
// same dtype and device (a clear TypeError/DeviceError otherwise); comparison
// ops return bool tensors. f16/bf16 compute in f32.
#pragma once

#include <optional>

#include "qk/tensor/tensor.h"

namespace qk {

enum class BinaryOp : uint8_t { add, sub, mul, div, pow, maximum, minimum, eq, ne, lt, le, gt, ge };
enum class UnaryOp : uint8_t {
  neg, exp, log, sqrt, rsqrt, relu, gelu, gelu_tanh, silu, tanh, sigmoid, abs, sign, square,
  reciprocal, sin, cos, erf
};
const char* binary_op_name(BinaryOp op);
const char* unary_op_name(UnaryOp op);

namespace ops {

Tensor binary(BinaryOp op, const Tensor& a, const Tensor& b);
Tensor binary_scalar(BinaryOp op, const Tensor& a, double b);  // a op b
// self = self op b in place (the arithmetic ops: add to minimum).
void binary_scalar_(BinaryOp op, const Tensor& self, double b);
Tensor unary(UnaryOp op, const Tensor& a);
// grad * d(op)/dx, given the op's input x and output y (either may be used).
Tensor unary_backward(UnaryOp op, const Tensor& grad, const Tensor& x, const Tensor& y);

inline Tensor add(const Tensor& a, const Tensor& b) { return binary(BinaryOp::add, a, b); }
inline Tensor sub(const Tensor& a, const Tensor& b) { return binary(BinaryOp::sub, a, b); }
inline Tensor mul(const Tensor& a, const Tensor& b) { return binary(BinaryOp::mul, a, b); }
inline Tensor div(const Tensor& a, const Tensor& b) { return binary(BinaryOp::div, a, b); }

Tensor clamp(const Tensor& a, std::optional<double> lo, std::optional<double> hi);
// grad where lo <= x <= hi, else 0.
Tensor clamp_backward(const Tensor& grad, const Tensor& x, std::optional<double> lo,
                      std::optional<double> hi);
// cond ? a : b, broadcasting all three; cond is bool.
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);
Tensor masked_fill(const Tensor& a, const Tensor& mask, double value);

// In place, for optimizers and accumulation: self += alpha * other (other broadcast).
void add_(const Tensor& self, const Tensor& other, double alpha = 1.0);
void mul_(const Tensor& self, double s);
void mul_(const Tensor& self, const Tensor& other);

}  // namespace ops
}  // namespace qk
