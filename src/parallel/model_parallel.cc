// The training loop's view of a tensor-parallel model.
#include "qk/parallel/model_parallel.h"

namespace qk::parallel {

TensorParallel tensor_parallel_of(nn::Module& model, dist::ProcessGroup* group, Generator* generator) {
  TensorParallel tp;
  tp.group = group;
  tp.generator = generator;
  if (!group) return tp;
  tp.shard_specs = parallel::tensor_parallel_shard_specs(model);
  tp.partial_gradients = parallel::partial_gradient_parameter_names(model);
  return tp;
}

}  // namespace qk::parallel
