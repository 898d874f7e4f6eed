// The public ops the harness must have cases for, kept next to the case
// tables: harness_test.cc reads the public headers and fails when a function
// there is neither listed here nor in not_ops() (so a new op cannot arrive
// without a case), and fails when a name here has no case.
#include "harness/op_harness.h"

namespace qk::harness {

const std::vector<std::string>& public_ops() {
  static const std::vector<std::string> names = {
    // qk/tensor/ops/attention.h
    "ops::flash_attention", "ops::flash_attention_backward",
    // qk/tensor/ops/conv.h
    "ops::conv2d", "ops::conv2d_backward", "ops::conv2d_fused", "ops::max_pool2d",
    "ops::max_pool2d_backward", "ops::avg_pool2d", "ops::avg_pool2d_backward",
    "ops::adaptive_avg_pool2d", "ops::adaptive_avg_pool2d_backward",
    // qk/tensor/ops/elementwise.h
    "ops::binary", "ops::binary_scalar", "ops::unary", "ops::unary_backward", "ops::add",
    "ops::sub", "ops::mul", "ops::div", "ops::clamp", "ops::clamp_backward", "ops::where",
    "ops::masked_fill", "ops::add_", "ops::mul_",
    // qk/tensor/ops/index.h
    "ops::cat", "ops::stack", "ops::split", "ops::split_with_sizes", "ops::chunk",
    "ops::index_select", "ops::index_add", "ops::gather", "ops::scatter_add", "ops::topk",
    "ops::one_hot",
    // qk/tensor/ops/linalg.h
    "ops::mm", "ops::bmm", "ops::matmul", "ops::linear",
    // qk/tensor/ops/llm.h
    "ops::rotary_embedding", "ops::rotary_embedding_backward", "ops::swiglu",
    "ops::swiglu_backward", "ops::linear_cross_entropy",
    // qk/tensor/ops/nn.h
    "ops::softmax", "ops::log_softmax", "ops::softmax_backward", "ops::log_softmax_backward",
    "ops::cross_entropy", "ops::cross_entropy_backward", "ops::dropout", "ops::embedding",
    "ops::embedding_backward",
    // qk/tensor/ops/norm.h
    "ops::batch_norm", "ops::batch_norm_backward", "ops::layer_norm", "ops::layer_norm_backward",
    "ops::rms_norm", "ops::rms_norm_backward",
    // qk/tensor/ops/reduce.h
    "ops::sum", "ops::mean", "ops::var", "ops::amax", "ops::amin", "ops::max_dim", "ops::min_dim",
    "ops::argmax", "ops::argmin", "ops::sum_to",
    // qk/tensor/ops/view.h
    "ops::as_strided", "ops::view", "ops::reshape", "ops::permute", "ops::transpose",
    "ops::expand", "ops::slice", "ops::narrow", "ops::select", "ops::unsqueeze", "ops::squeeze",
    "ops::flatten", "ops::contiguous", "ops::clone", "ops::cast", "ops::to_device", "ops::copy_",
    "ops::fill_",
    // qk/tensor/generator.h
    "rand", "randn", "randint", "randperm", "uniform_", "normal_", "bernoulli_",
    // qk/autograd/functions.h
    "add", "sub", "mul", "div", "pow", "maximum", "minimum", "neg", "exp", "log", "sqrt", "rsqrt",
    "square", "abs", "relu", "gelu", "silu", "tanh", "sigmoid", "clamp", "where", "masked_fill",
    "eq", "ne", "lt", "le", "gt", "ge", "operator+", "operator-", "operator*", "operator/", "sum",
    "mean", "var", "amax", "amin", "max", "min", "argmax", "argmin", "matmul", "mm", "bmm",
    "linear", "conv2d", "max_pool2d", "avg_pool2d", "adaptive_avg_pool2d", "batch_norm",
    "layer_norm", "rms_norm", "softmax", "log_softmax", "cross_entropy", "mse_loss", "dropout",
    "embedding", "cat", "stack", "split", "chunk", "index_select", "gather", "scatter_add", "topk",
    // qk/autograd/llm_ops.h
    "flash_attention", "rotary_embedding", "swiglu", "linear_cross_entropy",
    // qk/tensor/tensor.h: factories and the differentiable methods (not read
    // by the header test: tensor.h declares much else)
    "zeros", "ones", "full", "arange", "scalar_tensor", "empty", "Tensor::view",
    "Tensor::reshape", "Tensor::flatten", "Tensor::permute", "Tensor::transpose", "Tensor::t",
    "Tensor::unsqueeze", "Tensor::squeeze", "Tensor::expand", "Tensor::slice", "Tensor::narrow",
    "Tensor::select", "Tensor::contiguous", "Tensor::clone", "Tensor::to", "Tensor::sum",
    "Tensor::mean", "Tensor::fill_", "Tensor::copy_",
  };
  return names;
}

const std::map<std::string, std::string>& not_ops() {
  static const std::map<std::string, std::string> names = {
      {"binary_op_name", "a name for printing"},
      {"unary_op_name", "a name for printing"},
      {"default_generator", "returns a generator object"},
      {"manual_seed", "sets generator state"},
      {"philox4x32", "the host Philox function; rand/dropout cases check its streams on each device"},
      {"ops::attention_query_heads", "a shape helper"},
      {"ops::broadcast_shapes", "a shape helper"},
      {"ops::infer_shape", "a shape helper"},
      {"ops::flash_attention_counters", "counts Philox counters"},
      {"ops::flash_attention_cpu_variants", "lists the CPU kernel's SIMD variants"},
      {"ops::set_flash_attention_cpu_variant", "picks the CPU kernel's SIMD variant"},
  };
  return names;
}

}  // namespace qk::harness
