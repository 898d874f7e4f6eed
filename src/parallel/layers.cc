// Column- and row-parallel linear layers and the vocabulary-parallel
// embedding, initialised from the full master weight (Megatron's CPU init).
#include "qk/parallel/layers.h"

#include "qk/autograd/functions.h"
#include "qk/base/error.h"
#include "qk/nn/embedding.h"
#include "qk/nn/linear.h"
#include "qk/parallel/mappings.h"
#include "qk/tensor/ops/view.h"

namespace qk::parallel {

namespace {

void check_group(const std::shared_ptr<dist::ProcessGroup>& tp, const char* what) {
  QK_CHECK(tp != nullptr, what, ": needs a tensor-parallel process group (a group of size 1 for none)");
}

void check_divides(int64_t n, int64_t parts, const char* what, const char* dim_name) {
  QK_CHECK(n % parts == 0, what, ": ", dim_name, " ", n, " does not split evenly over ", parts,
           " (tensor-parallel size x partition stride)");
}

// The full master weight and bias with nn::Linear's draws and then `init`.
std::pair<Tensor, Tensor> master_linear(int64_t in, int64_t out, bool bias, const InitMethod& init) {
  NoGradGuard no_grad;
  nn::Linear full(nn::LinearOptions(in, out).bias(bias));
  if (init) init(full->weight, full->bias);
  return {full->weight.detach(), bias ? full->bias.detach() : Tensor()};
}

}  // namespace

// ---- ColumnParallelLinear ----

ColumnParallelLinearImpl::ColumnParallelLinearImpl(int64_t in, int64_t out, std::shared_ptr<dist::ProcessGroup> tp,
                                                   ColumnParallelLinearOptions o)
    : options(std::move(o)), in_features(in), out_features(out), tp_(std::move(tp)) {
  check_group(tp_, "ColumnParallelLinear");
  check_divides(out, tp_->size() * options.stride(), "ColumnParallelLinear", "output size");
  auto [w, b] = master_linear(in, out, options.bias(), options.init());
  const ShardSpec rows{0, options.stride()};
  weight = register_parameter("weight", shard_tensor(w, rows, tp_->rank(), tp_->size()));
  bias = register_parameter("bias", b.defined() ? shard_tensor(b, rows, tp_->rank(), tp_->size()) : Tensor());
}

Tensor ColumnParallelLinearImpl::forward(const Tensor& x) { return forward(x, weight); }

Tensor ColumnParallelLinearImpl::forward(const Tensor& x, const Tensor& w) {
  QK_CHECK(x.dim() >= 1 && x.size(-1) == in_features, "ColumnParallelLinear: expected input [.., ", in_features,
           "], got ", shape_str(x.shape()));
  QK_CHECK(w.dim() == 2 && w.size(1) == in_features && w.size(0) * tp_->size() == out_features,
           "ColumnParallelLinear: expected a weight shard [", out_features / tp_->size(), ", ", in_features, "], got ",
           shape_str(w.shape()));
  const Tensor input = options.sequence_parallel()
                           ? gather_from_sequence_parallel_region(x, *tp_, options.sequence_dim())
                           : copy_to_tensor_model_parallel_region(x, *tp_);
  Tensor y = linear(input, w, bias);
  if (options.gather_output()) {
    QK_CHECK(options.stride() == 1, "ColumnParallelLinear: gather_output with a partition stride of ",
             options.stride(), " would interleave the halves; gather the shards with unshard_tensor instead");
    y = gather_from_tensor_model_parallel_region(y, *tp_);
  }
  return y;
}

std::vector<std::pair<std::string, ShardSpec>> ColumnParallelLinearImpl::shard_specs() const {
  std::vector<std::pair<std::string, ShardSpec>> s{{"weight", {0, options.stride()}}};
  if (bias.defined()) s.push_back({"bias", {0, options.stride()}});
  return s;
}

void ColumnParallelLinearImpl::pretty_print(std::ostream& os) const {
  os << "ColumnParallelLinear(in_features=" << in_features << ", out_features=" << out_features << " (" << weight.size(0)
     << " on this rank of " << tp_->size() << "), bias=" << (bias.defined() ? "true" : "false")
     << (options.gather_output() ? ", gather_output" : "") << (options.sequence_parallel() ? ", sequence_parallel" : "")
     << (options.stride() > 1 ? ", stride=" + std::to_string(options.stride()) : "") << ")";
}

// ---- RowParallelLinear ----

RowParallelLinearImpl::RowParallelLinearImpl(int64_t in, int64_t out, std::shared_ptr<dist::ProcessGroup> tp,
                                             RowParallelLinearOptions o)
    : options(std::move(o)), in_features(in), out_features(out), tp_(std::move(tp)) {
  check_group(tp_, "RowParallelLinear");
  check_divides(in, tp_->size(), "RowParallelLinear", "input size");
  QK_CHECK(!options.sequence_parallel() || options.input_is_parallel(),
           "RowParallelLinear: sequence parallelism needs input_is_parallel (Megatron's rule)");
  auto [w, b] = master_linear(in, out, options.bias(), options.init());
  weight = register_parameter("weight", shard_tensor(w, {1, 1}, tp_->rank(), tp_->size()));
  bias = register_parameter("bias", b);
}

Tensor RowParallelLinearImpl::forward(const Tensor& x) {
  const int64_t local_in = in_features / tp_->size();
  const Tensor input = options.input_is_parallel() ? x : scatter_to_tensor_model_parallel_region(x, *tp_);
  QK_CHECK(input.dim() >= 1 && input.size(-1) == local_in, "RowParallelLinear: expected input [.., ",
           options.input_is_parallel() ? local_in : in_features, "], got ", shape_str(x.shape()));
  const Tensor partial = linear(input, weight);
  Tensor y = options.sequence_parallel()
                 ? reduce_scatter_to_sequence_parallel_region(partial, *tp_, options.sequence_dim())
                 : reduce_from_tensor_model_parallel_region(partial, *tp_);
  return bias.defined() ? y + bias : y;
}

std::vector<std::pair<std::string, ShardSpec>> RowParallelLinearImpl::shard_specs() const {
  return {{"weight", {1, 1}}};
}

std::vector<std::string> RowParallelLinearImpl::partial_gradient_parameters() const {
  if (options.sequence_parallel() && bias.defined() && tp_->size() > 1) return {"bias"};
  return {};
}

void RowParallelLinearImpl::pretty_print(std::ostream& os) const {
  os << "RowParallelLinear(in_features=" << in_features << " (" << weight.size(1) << " on this rank of "
     << tp_->size() << "), out_features=" << out_features << ", bias=" << (bias.defined() ? "true" : "false")
     << (options.input_is_parallel() ? ", input_is_parallel" : "")
     << (options.sequence_parallel() ? ", sequence_parallel" : "") << ")";
}

// ---- VocabParallelEmbedding ----

VocabParallelEmbeddingImpl::VocabParallelEmbeddingImpl(int64_t num, int64_t dim, std::shared_ptr<dist::ProcessGroup> tp,
                                                       VocabParallelEmbeddingOptions o)
    : options(std::move(o)), num_embeddings(num), embedding_dim(dim), tp_(std::move(tp)) {
  check_group(tp_, "VocabParallelEmbedding");
  check_divides(num, tp_->size(), "VocabParallelEmbedding", "vocabulary size");
  const int64_t per = num / tp_->size();
  vocab_start_index = per * tp_->rank();
  vocab_end_index = vocab_start_index + per;
  Tensor full;
  {
    NoGradGuard no_grad;
    nn::Embedding table(num, dim);
    if (options.init()) options.init()(table->weight, Tensor());
    full = table->weight.detach();
  }
  weight = register_parameter("weight", shard_tensor(full, {0, 1}, tp_->rank(), tp_->size()));
}

Tensor VocabParallelEmbeddingImpl::forward(const Tensor& ids) {
  QK_CHECK_TYPE(ids.dtype() == DType::i64, "VocabParallelEmbedding: ids must be i64, got ", dtype_name(ids.dtype()));
  // Ids of other ranks look up row 0 here and are zeroed after. The ids
  // (a micro-batch's tokens: small) are checked and mapped on the host.
  const Tensor in = ops::contiguous(ids).to(kCPU);
  Tensor local = empty(in.shape(), TensorOptions(DType::i64));
  Tensor keep = empty(in.shape(), TensorOptions(DType::f32));
  const int64_t* src = in.data_ptr<int64_t>();
  int64_t* dst = local.data_ptr<int64_t>();
  float* k = keep.data_ptr<float>();
  bool any_outside = false;
  for (int64_t i = 0, n = in.numel(); i < n; ++i) {
    QK_CHECK_AS(IndexError, src[i] >= 0 && src[i] < num_embeddings, "VocabParallelEmbedding: id ", src[i],
                " is outside the vocabulary [0, ", num_embeddings, ")");
    const bool mine = src[i] >= vocab_start_index && src[i] < vocab_end_index;
    dst[i] = mine ? src[i] - vocab_start_index : 0;
    k[i] = mine ? 1.0f : 0.0f;
    any_outside |= !mine;
  }
  const Device dev = weight.device();
  Tensor out = embedding(weight, local.to(dev));
  if (any_outside) out = out * ops::unsqueeze(ops::cast(keep.to(dev), out.dtype()), -1);
  return options.reduce_scatter_embeddings()
             ? reduce_scatter_to_sequence_parallel_region(out, *tp_, options.sequence_dim())
             : reduce_from_tensor_model_parallel_region(out, *tp_);
}

std::vector<std::pair<std::string, ShardSpec>> VocabParallelEmbeddingImpl::shard_specs() const {
  return {{"weight", {0, 1}}};
}

void VocabParallelEmbeddingImpl::pretty_print(std::ostream& os) const {
  os << "VocabParallelEmbedding(" << num_embeddings << ", " << embedding_dim << ", rows [" << vocab_start_index << ", "
     << vocab_end_index << ") of " << tp_->size() << " ranks)";
}

}  // namespace qk::parallel
