// Contiguous parameter and gradient buffers cut into buckets, and their
// data-parallel reductions: Megatron-core's _ParamAndGradBuffer and its
// buckets (megatron/core/distributed/param_and_grad_buffer.py), what the
// distributed optimizer (distributed_optimizer.h) runs on.
//
//   qk::optim::ParamAndGradBuffer buf(params, dp_group,
//       {.grad_dtype = qk::DType::f32, .bucket_size = 1 << 20, .shard = true, .overlap_grad_reduce = true});
//   buf.zero_grad();
//   for (micro-batch k of n) {
//     buf.set_is_last_microbatch(k == n - 1);
//     loss.backward();         // hooks add each .grad into its slot; the last micro-batch's
//   }                          // hooks reduce-scatter a bucket as soon as it is complete
//   buf.finish_grad_sync();    // this rank's shard of each bucket: the average over the group
//   ... update this rank's shard of buf.param_data() ...
//   buf.start_param_sync();    // all-gather the shards (asynchronously)
//   buf.finish_param_sync();   // or finish_param_sync(bucket) right before a bucket's params are used
//
// Layout: parameters in reverse order (the order backward produces their
// gradients), back to back; a bucket closes once it holds bucket_size
// elements (0: one bucket), and before and after each own_bucket parameter.
// With `shard` (Megatron's use_distributed_optimizer) each bucket is padded
// to a multiple of lcm(group size, 128) and rank r owns elements
// [r, r+1) x numel/size of it, cutting across parameter boundaries. Each
// parameter's data moves into the parameter buffer: its tensor handles stay
// valid and now view the buffer (Megatron's param.data = buffer view), so an
// all-gather into the buffer updates the model. The gradient buffer holds each parameter's "main_grad":
// a post-accumulate hook adds every .grad into it (in grad_dtype) and drops
// .grad, micro-batch after micro-batch.
//
// Reductions average over the group: a reduce-scatter per bucket in place
// (shard) or an all-reduce. With overlap_grad_reduce the last micro-batch's
// hooks launch a bucket once all its parameters' gradients arrived, buckets
// in index order (every rank issues the same collectives in the same order);
// finish_grad_sync launches the rest (a parameter without a gradient counts
// as zero) and waits. A gradient arriving for a bucket already launched is
// an error (a parameter used in two separate backward passes of one
// micro-batch). Without a group, or with one rank, nothing is communicated.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "qk/dist/process_group.h"
#include "qk/tensor/tensor.h"

namespace qk::optim {

struct ParamAndGradBufferOptions {
  DType grad_dtype = DType::f32;  // Megatron's grad_reduce_in_fp32: f32; else the parameters' dtype
  int64_t bucket_size = 0;        // elements; 0: one bucket
  bool shard = true;              // reduce-scatter + all-gather (distributed optimizer); false: all-reduce
  bool overlap_grad_reduce = false;
  // Indices into params that get a bucket of their own (Megatron's
  // shared embedding under the distributed optimizer: the first and last
  // pipeline stage then cut it into the same shards).
  std::vector<size_t> own_bucket{};
  // Expert parallelism (Megatron's separate expert buffers): these
  // parameters (indices into params) are laid out after all others in
  // buckets of their own, reduced and sharded over expert_group (the
  // expert-data-parallel ranks; null: one rank) and multiplied by
  // expert_grad_scale after the average (Megatron: expert-DP size / DP size).
  std::vector<size_t> expert_params{};
  dist::ProcessGroup* expert_group = nullptr;
  double expert_grad_scale = 1.0;
};

class ParamAndGradBuffer {
 public:
  // params: the model's trainable parameters in registration order, one
  // floating dtype, distinct. group: the data-parallel group (null: one rank).
  ParamAndGradBuffer(std::vector<Tensor> params, dist::ProcessGroup* group, ParamAndGradBufferOptions o = {});
  ~ParamAndGradBuffer();
  ParamAndGradBuffer(const ParamAndGradBuffer&) = delete;
  ParamAndGradBuffer& operator=(const ParamAndGradBuffer&) = delete;

  struct Bucket {
    int64_t offset = 0, numel = 0;              // in the buffers, padding included
    std::vector<size_t> params;                 // indices into params(), in buffer order
    int64_t shard_offset = 0, shard_numel = 0;  // this rank's part (the whole bucket without shard)
    bool expert = false;                        // reduced over options().expert_group
  };
  // A run of a parameter's elements inside this rank's shard.
  struct ShardPiece {
    size_t param = 0;          // index into params()
    size_t bucket = 0;
    int64_t param_offset = 0;  // first element, in the flattened parameter
    int64_t numel = 0;
    int64_t buffer_offset = 0;
  };

  const std::vector<Tensor>& params() const;
  const std::vector<Bucket>& buckets() const;
  // This rank's pieces, in buffer order.
  const std::vector<ShardPiece>& shard_pieces() const;
  int64_t param_offset(size_t param) const;  // in the buffers
  size_t bucket_of(size_t param) const;
  const Tensor& param_data() const;          // flat, the parameters' dtype
  const Tensor& grad_data() const;           // flat, grad_dtype
  Tensor main_grad(size_t param) const;      // a view shaped like the parameter
  const ParamAndGradBufferOptions& options() const;
  dist::ProcessGroup* group() const;
  int group_size() const;
  int group_rank() const;
  // The group a bucket is reduced and gathered over (the expert group for
  // expert buckets), and this rank's place in it.
  dist::ProcessGroup* group_of(size_t bucket) const;
  int group_rank_of(size_t bucket) const;

  // ---- gradients
  // Zeroes the gradient buffer and re-arms the buckets (start of a step).
  void zero_grad();
  // overlap_grad_reduce: only the last micro-batch's backward launches reductions.
  void set_is_last_microbatch(bool last);
  // Launches the buckets not launched yet and waits for every one.
  void finish_grad_sync();

  // ---- parameters (shard only; no-ops otherwise)
  // All-gathers every bucket's shards into the parameter buffer, the last
  // bucket first (the embedding's, which forward uses first). Asynchronous.
  void start_param_sync();
  void finish_param_sync();               // every bucket
  void finish_param_sync(size_t bucket);  // this bucket
  bool param_sync_pending() const;

  // What the last finish_grad_sync saw, for tests and logs.
  struct GradSyncStats {
    int buckets = 0;
    int launched_in_backward = 0;  // by hooks, overlapping backward
    double wait_ms = 0;            // finish_grad_sync's wait
  };
  const GradSyncStats& last_grad_sync() const;

  struct State;  // shared with the hooks (which hold a weak_ptr)

 private:
  std::shared_ptr<State> s_;
};

}  // namespace qk::optim
