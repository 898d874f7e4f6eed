// Memory formats of 4-D [N, C, H, W] tensors, PyTorch's torch.channels_last:
// the same logical tensor stored [N, H, W, C] (strides [HWC, 1, WC, C]), the
// layout cuDNN's and oneDNN's fastest convolutions want. Parameters keep
// their layout; activations take the input's: conv2d, batch_norm, pooling
// and elementwise results of a channels-last input are channels-last
// (docs/tensor.md, "Channels last").
#pragma once

#include <cstdint>

#include "qk/tensor/tensor.h"

namespace qk::ops {

enum class MemoryFormat : uint8_t { contiguous, channels_last };

const char* memory_format_name(MemoryFormat f);

// Strides of a channels-last tensor of `sizes` (4 dims).
Shape channels_last_strides(const Shape& sizes);

// Whether `a` is 4-D, stored channels last, and not also plain contiguous
// (C == 1 or H * W == 1 make the two layouts the same memory; such a tensor
// counts as contiguous).
bool is_channels_last(const Tensor& a);

// channels_last where is_channels_last(a), else contiguous.
MemoryFormat suggest_memory_format(const Tensor& a);

// An uninitialised tensor of `shape` (4 dims) in `format`.
Tensor empty(const Shape& shape, TensorOptions opts, MemoryFormat format);

// `a` in `format`: itself when it already is, else a copy. channels_last
// needs a 4-D tensor; where C == 1 or H * W == 1 the result is plain
// contiguous (the same memory).
Tensor contiguous(const Tensor& a, MemoryFormat format);

// For results of the same shape as an operand: channels_last when one of
// `operands` (undefined ones skipped) has `shape` and is channels last, as
// PyTorch's preserve_format.
MemoryFormat result_format(const Shape& shape, std::initializer_list<const Tensor*> operands);

}  // namespace qk::ops
