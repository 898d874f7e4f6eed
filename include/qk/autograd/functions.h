// The differentiable tensor API: what models are written with.
//
//   using namespace qk;
//   Tensor h = relu(conv2d(x, w, b, {.padding = {1, 1}}));
//   Tensor loss = cross_entropy(linear(h.flatten(1), fc_w, fc_b), labels);
//   loss.backward();
//
// Each function computes with the raw kernels (qk/tensor/ops/*.h) and, when
// an input requires grad, records its backward (qk/autograd/autograd.h).
#pragma once

#include <optional>
#include <string_view>
#include <utility>
#include <vector>

#include "qk/autograd/autograd.h"
#include "qk/tensor/generator.h"
#include "qk/tensor/ops/conv.h"
#include "qk/tensor/ops/nn.h"
#include "qk/tensor/tensor.h"

namespace qk {

// ---- elementwise (functions_elementwise.cc) ----
Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor pow(const Tensor& a, const Tensor& b);
Tensor pow(const Tensor& a, double exponent);
Tensor maximum(const Tensor& a, const Tensor& b);
Tensor minimum(const Tensor& a, const Tensor& b);
Tensor add(const Tensor& a, double b);
Tensor mul(const Tensor& a, double b);
Tensor neg(const Tensor& a);
Tensor exp(const Tensor& a);
Tensor log(const Tensor& a);
Tensor sqrt(const Tensor& a);
Tensor rsqrt(const Tensor& a);
Tensor square(const Tensor& a);
Tensor abs(const Tensor& a);
Tensor relu(const Tensor& a);
// approximate: "none" (erf) or "tanh".
Tensor gelu(const Tensor& a, std::string_view approximate = "none");
Tensor silu(const Tensor& a);
Tensor tanh(const Tensor& a);
Tensor sigmoid(const Tensor& a);
Tensor clamp(const Tensor& a, std::optional<double> lo, std::optional<double> hi);
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);
Tensor masked_fill(const Tensor& a, const Tensor& mask, double value);
// Comparisons (not differentiable; return bool tensors).
Tensor eq(const Tensor& a, const Tensor& b);
Tensor ne(const Tensor& a, const Tensor& b);
Tensor lt(const Tensor& a, const Tensor& b);
Tensor le(const Tensor& a, const Tensor& b);
Tensor gt(const Tensor& a, const Tensor& b);
Tensor ge(const Tensor& a, const Tensor& b);

Tensor operator+(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a, const Tensor& b);
Tensor operator*(const Tensor& a, const Tensor& b);
Tensor operator/(const Tensor& a, const Tensor& b);
Tensor operator+(const Tensor& a, double b);
Tensor operator-(const Tensor& a, double b);
Tensor operator*(const Tensor& a, double b);
Tensor operator/(const Tensor& a, double b);
Tensor operator+(double a, const Tensor& b);
Tensor operator-(double a, const Tensor& b);
Tensor operator*(double a, const Tensor& b);
Tensor operator/(double a, const Tensor& b);
Tensor operator-(const Tensor& a);

// ---- reductions (functions_reduce.cc) ----
Tensor sum(const Tensor& a, const Shape& dims = {}, bool keepdim = false);
Tensor mean(const Tensor& a, const Shape& dims = {}, bool keepdim = false);
Tensor var(const Tensor& a, const Shape& dims = {}, bool unbiased = true, bool keepdim = false);
Tensor amax(const Tensor& a, const Shape& dims = {}, bool keepdim = false);
Tensor amin(const Tensor& a, const Shape& dims = {}, bool keepdim = false);
// (values, indices); the gradient flows to the selected elements.
std::pair<Tensor, Tensor> max(const Tensor& a, int64_t dim, bool keepdim = false);
std::pair<Tensor, Tensor> min(const Tensor& a, int64_t dim, bool keepdim = false);
Tensor argmax(const Tensor& a, int64_t dim, bool keepdim = false);
Tensor argmin(const Tensor& a, int64_t dim, bool keepdim = false);

// ---- linear algebra (functions_linalg.cc) ----
Tensor matmul(const Tensor& a, const Tensor& b);
Tensor mm(const Tensor& a, const Tensor& b);
Tensor bmm(const Tensor& a, const Tensor& b);
Tensor linear(const Tensor& x, const Tensor& w, const Tensor& b = Tensor());

// ---- convolution and pooling (functions_conv.cc) ----
Tensor conv2d(const Tensor& x, const Tensor& w, const Tensor& b = Tensor(),
              const ops::Conv2dParams& p = {});
Tensor max_pool2d(const Tensor& x, const ops::Pool2dParams& p);
Tensor avg_pool2d(const Tensor& x, const ops::Pool2dParams& p);
Tensor adaptive_avg_pool2d(const Tensor& x, std::array<int64_t, 2> out_size);

// ---- normalisation (functions_norm.cc) ----
// running_mean/var may be undefined; in training they are updated in place.
Tensor batch_norm(const Tensor& x, const Tensor& weight, const Tensor& bias,
                  const Tensor& running_mean, const Tensor& running_var, bool training,
                  double momentum = 0.1, double eps = 1e-5);
Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight = Tensor(),
                  const Tensor& bias = Tensor(), double eps = 1e-5);
Tensor rms_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight = Tensor(),
                double eps = 1e-6);

// ---- softmax, losses, dropout, embedding (functions_nn.cc) ----
Tensor softmax(const Tensor& x, int64_t dim);
Tensor log_softmax(const Tensor& x, int64_t dim);
Tensor cross_entropy(const Tensor& logits, const Tensor& target, int64_t ignore_index = -100,
                     double label_smoothing = 0.0, ops::Reduction reduction = ops::Reduction::mean);
Tensor mse_loss(const Tensor& input, const Tensor& target,
                ops::Reduction reduction = ops::Reduction::mean);
// Identity when !training or p == 0.
Tensor dropout(const Tensor& x, double p, bool training, Generator& gen = default_generator());
Tensor embedding(const Tensor& weight, const Tensor& indices, int64_t padding_idx = -1);

// ---- joining and indexing (functions_index.cc) ----
Tensor cat(const std::vector<Tensor>& tensors, int64_t dim = 0);
Tensor stack(const std::vector<Tensor>& tensors, int64_t dim = 0);
std::vector<Tensor> split(const Tensor& a, int64_t split_size, int64_t dim = 0);
std::vector<Tensor> chunk(const Tensor& a, int64_t chunks, int64_t dim = 0);
Tensor index_select(const Tensor& a, int64_t dim, const Tensor& index);
Tensor gather(const Tensor& a, int64_t dim, const Tensor& index);
Tensor scatter_add(const Tensor& a, int64_t dim, const Tensor& index, const Tensor& src);
// a with src's slices along dim added at `index` (a 1-D index, one entry per slice of src): whole rows,
// where scatter_add with the index expanded to src's shape walks element by element.
Tensor index_add(const Tensor& a, int64_t dim, const Tensor& index, const Tensor& src);
std::pair<Tensor, Tensor> topk(const Tensor& a, int64_t k, int64_t dim = -1, bool largest = true,
                               bool sorted = true);

}  // namespace qk
