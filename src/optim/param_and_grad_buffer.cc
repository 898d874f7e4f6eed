// ParamAndGradBuffer: the layout (buckets, padding, this rank's shard), the
// parameters moved into the buffer, the gradient hooks and the bucket
// reductions and all-gathers.
#include "qk/optim/param_and_grad_buffer.h"

#include <chrono>
#include <numeric>
#include <set>

#include "grad_kernels.h"
#include "qk/autograd/autograd.h"
#include "qk/base/error.h"
#include "qk/tensor/ops/elementwise.h"
#include "qk/tensor/ops/view.h"

namespace qk::optim {

namespace {

// Points every handle of `param` at `slot` (same shape and dtype), keeping
// its autograd identity, as PyTorch's param.data = slot.
void rebind(const Tensor& param, const Tensor& slot) {
  TensorImpl* p = param.impl();
  p->storage = slot.storage();
  p->offset = slot.storage_offset();
  p->sizes = slot.sizes();
  p->strides = slot.strides();
  ++p->version;
}

int64_t round_up(int64_t n, int64_t m) { return (n + m - 1) / m * m; }

}  // namespace

struct ParamAndGradBuffer::State {
  ParamAndGradBufferOptions o;
  dist::ProcessGroup* group = nullptr;
  int size = 1, rank = 0;
  dist::ProcessGroup* expert_group = nullptr;
  int expert_size = 1, expert_rank = 0;
  std::vector<Tensor> params;
  std::vector<int64_t> offset;     // per param, in the buffers
  std::vector<size_t> bucket_of;   // per param
  std::vector<Bucket> buckets;
  std::vector<ShardPiece> pieces;
  Tensor param_data, grad_data;

  // Per step.
  bool last_microbatch = true;
  std::vector<char> ready;          // per param: its last gradient of the step arrived
  std::vector<int> pending;         // per bucket: parameters still to arrive
  std::vector<dist::WorkPtr> grad_work;
  size_t next_launch = 0;
  GradSyncStats stats, last;
  std::vector<dist::WorkPtr> param_work;  // per bucket, null when none pending

  bool communicates() const { return group != nullptr && size > 1; }
  dist::ProcessGroup* group_of(const Bucket& b) const { return b.expert ? expert_group : group; }
  bool communicates(const Bucket& b) const { return b.expert ? expert_group && expert_size > 1 : communicates(); }

  Tensor flat(const Tensor& buffer, int64_t offset, int64_t numel) const {
    return ops::narrow(buffer, 0, offset, numel);
  }

  void launch(size_t b, bool in_backward) {
    const Bucket& bk = buckets[b];
    if (communicates(bk)) {
      dist::ProcessGroup* g = group_of(bk);
      const Tensor whole = flat(grad_data, bk.offset, bk.numel);
      grad_work[b] = o.shard ? g->reduce_scatter_async(flat(grad_data, bk.shard_offset, bk.shard_numel), whole,
                                                       dist::ReduceOp::avg)
                             : g->all_reduce_async(whole, dist::ReduceOp::avg);
    }
    if (in_backward) ++stats.launched_in_backward;
  }

  void launch_ready() {
    while (next_launch < buckets.size() && pending[next_launch] == 0) launch(next_launch++, /*in_backward=*/true);
  }

  void on_grad(size_t i) {
    NoGradGuard no_grad;
    const Tensor& p = params[i];
    const Tensor g = p.grad();
    if (!g.defined()) return;
    const size_t b = bucket_of[i];
    QK_CHECK(b >= next_launch, "ParamAndGradBuffer: a gradient of shape ", shape_str(p.shape()),
             " arrived after its bucket's reduction started; is the parameter used in two backward passes of "
             "one micro-batch?");
    const Tensor src = ops::contiguous(g);
    if (o.grad_dtype == DType::f32) {
      kernels::add_into_f32(flat(grad_data, offset[i], p.numel()), src);
    } else {
      Tensor slot = flat(grad_data, offset[i], p.numel());
      ops::add_(slot, ops::reshape(src.dtype() == o.grad_dtype ? src : ops::cast(src, o.grad_dtype), {p.numel()}));
    }
    p.set_grad(Tensor());  // the buffer holds it now (Megatron's param.grad = None)
    if (o.overlap_grad_reduce && last_microbatch && !ready[i]) {
      ready[i] = 1;
      if (--pending[b] == 0) launch_ready();
    }
  }

  void arm() {
    std::fill(ready.begin(), ready.end(), 0);
    for (size_t b = 0; b < buckets.size(); ++b) pending[b] = static_cast<int>(buckets[b].params.size());
    std::fill(grad_work.begin(), grad_work.end(), nullptr);
    next_launch = 0;
    stats = {};
    stats.buckets = static_cast<int>(buckets.size());
  }
};

ParamAndGradBuffer::ParamAndGradBuffer(std::vector<Tensor> params, dist::ProcessGroup* group,
                                       ParamAndGradBufferOptions o)
    : s_(std::make_shared<State>()) {
  State& s = *s_;
  s.o = o;
  s.group = group;
  s.size = group ? group->size() : 1;
  s.rank = group ? group->rank() : 0;
  s.expert_group = o.expert_group;
  s.expert_size = o.expert_group ? o.expert_group->size() : 1;
  s.expert_rank = o.expert_group ? o.expert_group->rank() : 0;
  QK_CHECK_AS(ValueError, !params.empty(), "ParamAndGradBuffer: no parameters");
  QK_CHECK_AS(ValueError, o.bucket_size >= 0, "ParamAndGradBuffer: bucket_size must be >= 0, got ", o.bucket_size);
  const DType dtype = params.front().dtype();
  QK_CHECK_AS(ValueError, is_floating(dtype) && is_floating(o.grad_dtype),
              "ParamAndGradBuffer: parameters and gradients must be floating, got ", dtype_name(dtype), " and ",
              dtype_name(o.grad_dtype));
  const Device device = params.front().device();
  std::set<const TensorImpl*> seen;
  for (const Tensor& p : params) {
    QK_CHECK_AS(ValueError, p.dtype() == dtype, "ParamAndGradBuffer: every parameter must have one dtype (",
                dtype_name(dtype), "); got one of ", dtype_name(p.dtype()), " and shape ", shape_str(p.shape()));
    QK_CHECK_DEVICE(p.device() == device, "ParamAndGradBuffer: every parameter must be on one device (",
                    device.str(), "); got one on ", p.device().str(), " of shape ", shape_str(p.shape()));
    QK_CHECK_AS(ValueError, seen.insert(p.impl()).second, "ParamAndGradBuffer: a parameter of shape ",
                shape_str(p.shape()), " is listed twice");
  }
  s.params = std::move(params);
  const size_t n = s.params.size();

  // Reverse order; a bucket closes once it holds bucket_size elements.
  // Expert parameters after all others, in buckets of their own.
  std::vector<char> is_expert(n, 0);
  for (size_t k : o.expert_params) {
    QK_CHECK_AS(ValueError, k < n, "ParamAndGradBuffer: expert_params index ", k, " is not one of the ", n,
                " parameters");
    is_expert[k] = 1;
  }
  s.offset.assign(n, 0);
  s.bucket_of.assign(n, 0);
  int64_t at = 0;
  Bucket open;
  bool expert_pass = false;
  auto close = [&] {
    if (open.params.empty()) return;
    open.expert = expert_pass;
    const int size = expert_pass ? s.expert_size : s.size, rank = expert_pass ? s.expert_rank : s.rank;
    const int64_t pad = o.shard ? std::lcm<int64_t>(size, 128) : 1;
    open.numel = round_up(at - open.offset, pad);
    at = open.offset + open.numel;
    if (o.shard) {
      open.shard_numel = open.numel / size;
      open.shard_offset = open.offset + rank * open.shard_numel;
    } else {
      open.shard_numel = open.numel;
      open.shard_offset = open.offset;
    }
    s.buckets.push_back(open);
    open = Bucket{};
    open.offset = at;
  };
  std::vector<char> alone(n, 0);
  for (size_t k : o.own_bucket) {
    QK_CHECK_AS(ValueError, k < n, "ParamAndGradBuffer: own_bucket index ", k, " is not one of the ", n,
                " parameters");
    alone[k] = 1;
  }
  for (int pass = 0; pass < 2; ++pass) {
    expert_pass = pass == 1;
    for (size_t k = n; k-- > 0;) {
      if (is_expert[k] != expert_pass) continue;
      if (alone[k]) close();
      s.offset[k] = at;
      s.bucket_of[k] = s.buckets.size();
      open.params.push_back(k);
      at += s.params[k].numel();
      if (alone[k] || (o.bucket_size > 0 && at - open.offset >= o.bucket_size)) close();
    }
    close();
  }

  // This rank's pieces: each parameter's overlap with its bucket's shard.
  for (size_t b = 0; b < s.buckets.size(); ++b) {
    const Bucket& bk = s.buckets[b];
    for (size_t k : bk.params) {
      const int64_t begin = std::max(s.offset[k], bk.shard_offset);
      const int64_t end = std::min(s.offset[k] + s.params[k].numel(), bk.shard_offset + bk.shard_numel);
      if (begin < end) s.pieces.push_back({k, b, begin - s.offset[k], end - begin, begin});
    }
  }

  // The parameters move into the buffer.
  s.param_data = zeros({at}, TensorOptions(dtype).device(device));
  s.grad_data = zeros({at}, TensorOptions(o.grad_dtype).device(device));
  {
    NoGradGuard no_grad;
    for (size_t k = 0; k < n; ++k) {
      const Tensor& p = s.params[k];
      Tensor slot = ops::reshape(s.flat(s.param_data, s.offset[k], p.numel()), p.shape());
      ops::copy_(slot, p);
      rebind(p, slot);
    }
  }

  s.ready.assign(n, 0);
  s.pending.assign(s.buckets.size(), 0);
  s.grad_work.assign(s.buckets.size(), nullptr);
  s.param_work.assign(s.buckets.size(), nullptr);
  s.arm();
  std::weak_ptr<State> weak = s_;
  for (size_t k = 0; k < n; ++k)
    s.params[k].register_post_accumulate_grad_hook([weak, k](const Tensor&) {
      if (auto st = weak.lock()) st->on_grad(k);
    });
}

ParamAndGradBuffer::~ParamAndGradBuffer() {
  // Collectives in flight still write into the buffers.
  for (auto& w : s_->grad_work)
    if (w) w->wait();
  for (auto& w : s_->param_work)
    if (w) w->wait();
}

const std::vector<Tensor>& ParamAndGradBuffer::params() const { return s_->params; }
const std::vector<ParamAndGradBuffer::Bucket>& ParamAndGradBuffer::buckets() const { return s_->buckets; }
const std::vector<ParamAndGradBuffer::ShardPiece>& ParamAndGradBuffer::shard_pieces() const { return s_->pieces; }
int64_t ParamAndGradBuffer::param_offset(size_t param) const { return s_->offset.at(param); }
size_t ParamAndGradBuffer::bucket_of(size_t param) const { return s_->bucket_of.at(param); }
const Tensor& ParamAndGradBuffer::param_data() const { return s_->param_data; }
const Tensor& ParamAndGradBuffer::grad_data() const { return s_->grad_data; }
const ParamAndGradBufferOptions& ParamAndGradBuffer::options() const { return s_->o; }
dist::ProcessGroup* ParamAndGradBuffer::group() const { return s_->group; }
int ParamAndGradBuffer::group_size() const { return s_->size; }
int ParamAndGradBuffer::group_rank() const { return s_->rank; }
dist::ProcessGroup* ParamAndGradBuffer::group_of(size_t bucket) const { return s_->group_of(s_->buckets.at(bucket)); }
int ParamAndGradBuffer::group_rank_of(size_t bucket) const {
  return s_->buckets.at(bucket).expert ? s_->expert_rank : s_->rank;
}
const ParamAndGradBuffer::GradSyncStats& ParamAndGradBuffer::last_grad_sync() const { return s_->last; }

Tensor ParamAndGradBuffer::main_grad(size_t param) const {
  const Tensor& p = s_->params.at(param);
  return ops::reshape(s_->flat(s_->grad_data, s_->offset[param], p.numel()), p.shape());
}

void ParamAndGradBuffer::zero_grad() {
  State& s = *s_;
  for (auto& w : s.grad_work)
    if (w) w->wait();
  ops::fill_(s.grad_data, 0.0);
  s.grad_data.bump_version();
  s.last_microbatch = true;
  s.arm();
}

void ParamAndGradBuffer::set_is_last_microbatch(bool last) { s_->last_microbatch = last; }

void ParamAndGradBuffer::finish_grad_sync() {
  State& s = *s_;
  while (s.next_launch < s.buckets.size()) s.launch(s.next_launch++, /*in_backward=*/false);
  const auto t0 = std::chrono::steady_clock::now();
  for (auto& w : s.grad_work)
    if (w) w->wait();
  s.stats.wait_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  if (s.o.expert_grad_scale != 1.0)
    for (const Bucket& bk : s.buckets)
      if (bk.expert) ops::mul_(s.flat(s.grad_data, bk.shard_offset, bk.shard_numel), s.o.expert_grad_scale);
  s.grad_data.bump_version();
  s.last = s.stats;
}

void ParamAndGradBuffer::start_param_sync() {
  State& s = *s_;
  if (!s.o.shard) return;
  finish_param_sync();  // one round at a time
  for (size_t b = s.buckets.size(); b-- > 0;) {
    const Bucket& bk = s.buckets[b];
    if (!s.communicates(bk)) continue;
    s.param_work[b] = s.group_of(bk)->all_gather_async(s.flat(s.param_data, bk.offset, bk.numel),
                                                       s.flat(s.param_data, bk.shard_offset, bk.shard_numel));
  }
}

void ParamAndGradBuffer::finish_param_sync(size_t bucket) {
  dist::WorkPtr& w = s_->param_work.at(bucket);
  if (!w) return;
  w->wait();
  w.reset();
  for (size_t k : s_->buckets[bucket].params) s_->params[k].bump_version();
}

void ParamAndGradBuffer::finish_param_sync() {
  for (size_t b = s_->buckets.size(); b-- > 0;) finish_param_sync(b);
}

bool ParamAndGradBuffer::param_sync_pending() const {
  for (const auto& w : s_->param_work)
    if (w) return true;
  return false;
}

}  // namespace qk::optim
