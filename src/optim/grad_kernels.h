// Fused passes over fp32 gradients for the mixed-precision optimizer: each
// reads (and at most writes) every gradient once, all tensors of a step in
// one parallel region (a region per tensor costs more than the work on a
// loaded machine). Reductions add fixed-size chunks in order, so results do
// not depend on the thread count.
#pragma once

#include <cstdint>
#include <vector>

#include "qk/tensor/tensor.h"

namespace qk::optim::kernels {

struct Span {
  float* data;
  int64_t n;
};

struct UnscaleResult {
  bool found_inf = false;
  double sum_squares = 0;  // of the unscaled values, in double
};

// g *= inv (skipped when inv == 1), noting inf/NaN and summing squares.
UnscaleResult unscale_check_and_norm(const std::vector<Span>& grads, float inv);
void scale(const std::vector<Span>& grads, float s);
int64_t count_zeros(const std::vector<Span>& grads);
// The same passes over contiguous f32 gradients as tensors: the fused loops
// above where all are on the CPU, else the device's own kernels (a read back
// of two scalars per call): an accelerator's memory is not the host's.
UnscaleResult unscale_check_and_norm(const std::vector<Tensor>& grads, float inv);
void scale(const std::vector<Tensor>& grads, float s);
int64_t count_zeros(const std::vector<Tensor>& grads);

// dst (fp32, n = src.numel()) += src (f32, bf16 or f16, contiguous).
void add_into_f32(float* dst, const Tensor& src);
// dst (fp32) = src converted (f32, bf16 or f16, contiguous).
void copy_into_f32(float* dst, const Tensor& src);
// The same into a contiguous fp32 tensor (a slice of a flat buffer): the
// loops above on the CPU, the device's cast and add (or copy) elsewhere.
void add_into_f32(const Tensor& dst, const Tensor& src);
void copy_into_f32(const Tensor& dst, const Tensor& src);

}  // namespace qk::optim::kernels
