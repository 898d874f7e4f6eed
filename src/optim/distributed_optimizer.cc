// DistributedOptimizer: this rank's shard pieces as the inner optimizer's
// parameters, the step's global sums, the all-gather, and whole-tensor
// checkpoints gathered and re-sliced by parameter name.
#include "qk/optim/distributed_optimizer.h"

#include <algorithm>
#include <map>
#include <set>

#include "grad_kernels.h"
#include "qk/autograd/autograd.h"
#include "qk/base/error.h"
#include "qk/tensor/ops/view.h"

namespace qk::optim {

namespace {

// The per-parameter tensors the built-in optimizers keep (Adam, AdamW, SGD).
const std::vector<std::string>& state_keys() {
  static const std::vector<std::string> k = {"exp_avg", "exp_avg_sq", "max_exp_avg_sq", "momentum_buffer"};
  return k;
}

Tensor flat_slice(const Tensor& t, int64_t offset, int64_t numel) {
  return ops::narrow(ops::reshape(t, {t.numel()}), 0, offset, numel);
}

}  // namespace

DistributedOptimizer::DistributedOptimizer(const nn::Module& model, std::vector<ParamGroupSpec> groups,
                                           const OptimizerFactory& make, std::unique_ptr<LossScaler> scaler,
                                           MixedPrecisionOptions o, DistributedOptimizerOptions d)
    : MixedPrecisionOptimizer(std::move(groups), std::move(scaler), o, NoMainParams{}), d_(d) {
  QK_CHECK_AS(ValueError, !d_.overlap_param_gather || d_.shard,
              "overlap_param_gather (--overlap-param-gather) needs the sharded distributed optimizer");
  QK_CHECK_AS(ValueError, d_.bucket_size >= 0, "bucket_size (--ddp-bucket-size) must be >= 0, got ", d_.bucket_size);
  // The model's registration order (the buffer lays them out reversed).
  std::unordered_map<const TensorImpl*, size_t> by_impl;
  for (size_t i = 0; i < model_.size(); ++i) by_impl[model_[i].impl()] = i;
  std::vector<Tensor> ordered;
  for (const Tensor& p : model.parameters()) {
    const auto it = by_impl.find(p.impl());
    if (it == by_impl.end()) continue;
    name_index_.push_back(it->second);
    ordered.push_back(p);
  }
  QK_CHECK_AS(ValueError, ordered.size() == model_.size(), "DistributedOptimizer: ", model_.size() - ordered.size(),
              " parameters of the groups are not the model's");
  buffer_index_.assign(model_.size(), 0);
  for (size_t k = 0; k < name_index_.size(); ++k) buffer_index_[name_index_[k]] = k;

  const int dp = d_.data_parallel_group ? d_.data_parallel_group->size() : 1;
  ParamAndGradBufferOptions bo;
  bo.grad_dtype = o_.accumulate_allreduce_grads_in_fp32 ? DType::f32 : model_.front().dtype();
  bo.shard = d_.shard;
  bo.overlap_grad_reduce = d_.overlap_grad_reduce;
  // Megatron's DistributedDataParallel: max(40M, 1M x DP) elements, and
  // one bucket when nothing overlaps the reduction.
  bo.bucket_size = d_.bucket_size > 0 ? d_.bucket_size : 0;
  if (d_.bucket_size == 0 && d_.overlap_grad_reduce) bo.bucket_size = std::max<int64_t>(40000000, 1000000LL * dp);
  if (d_.shard && !d_.shared_embedding.empty()) {
    const auto at = std::find(names_.begin(), names_.end(), d_.shared_embedding);
    QK_CHECK_AS(ValueError, at != names_.end(), "DistributedOptimizer: the shared embedding '", d_.shared_embedding,
                "' is not a parameter of this optimizer");
    bo.own_bucket.push_back(buffer_index_[static_cast<size_t>(at - names_.begin())]);
  }
  if (d_.expert.active()) {
    for (size_t k = 0; k < name_index_.size(); ++k)
      if (d_.expert.is_expert(names_[name_index_[k]])) bo.expert_params.push_back(k);
    bo.expert_group = d_.expert.expert_dp_size() > 1 ? d_.expert.expert_dp : nullptr;
    bo.expert_grad_scale = static_cast<double>(d_.expert.expert_dp_size()) / dp;
  }
  buffer_ = std::make_unique<ParamAndGradBuffer>(std::move(ordered), d_.data_parallel_group, bo);

  // This rank's piece of each parameter (at most one: a parameter lies in
  // one bucket, the rank's part of a bucket is one range), group by group.
  std::vector<int> piece_of(model_.size(), -1);
  const auto& pieces = buffer_->shard_pieces();
  for (size_t j = 0; j < pieces.size(); ++j) piece_of[name_index_[pieces[j].param]] = static_cast<int>(j);
  std::vector<std::vector<Tensor>> main_groups;
  size_t i = 0;
  NoGradGuard no_grad;
  for (const ParamGroupSpec& g : groups_) {
    std::vector<Tensor> mg;
    for (size_t k = 0; k < g.params.size(); ++k, ++i) {
      if (piece_of[i] < 0) continue;
      const auto& pc = pieces[static_cast<size_t>(piece_of[i])];
      const Tensor in_buffer = ops::narrow(buffer_->param_data(), 0, pc.buffer_offset, pc.numel);
      // bf16/f16: an fp32 copy; fp32: the buffer itself, stepped in place.
      main_.push_back(copies_ ? ops::cast(in_buffer, DType::f32) : in_buffer);
      pieces_.push_back(pc);
      mg.push_back(main_.back());
    }
    main_groups.push_back(std::move(mg));
  }
  init_inner(make, std::move(main_groups));
  if (d_.expert.active()) set_expert_parallel(d_.expert);
}

DistributedOptimizer::~DistributedOptimizer() = default;

void DistributedOptimizer::zero_grad() {
  if (!pre_hook_installed_) buffer_->finish_param_sync();
  buffer_->zero_grad();
  for (const Tensor& m : main_) m.set_grad(Tensor());
  grads_synced_ = false;
}

void DistributedOptimizer::begin_microbatch(bool last) { buffer_->set_is_last_microbatch(last); }

void DistributedOptimizer::finish_grad_sync(dist::ProcessGroup* dp) {
  const int mine = buffer_->group_size(), theirs = dp ? dp->size() : 1;
  QK_CHECK_AS(ValueError, dp == buffer_->group() || (mine == 1 && theirs == 1),
              "DistributedOptimizer: the step's data-parallel group (", theirs,
              " ranks) is not the optimizer's (", mine, " ranks)");
  buffer_->finish_grad_sync();
  grads_synced_ = true;
}

void DistributedOptimizer::finish_param_sync() { buffer_->finish_param_sync(); }

void DistributedOptimizer::set_pipeline_parallel(parallel::PipelineParallel pp) {
  // The embedding group sums each stage's averaged shard piece of the tied
  // weight: both stages must cut it alike, i.e. into a bucket of its own.
  const bool sharded = d_.shard && buffer_->group_size() > 1;
  QK_CHECK_AS(ValueError, pp.tied_parameter.empty() || !sharded || pp.tied_parameter == d_.shared_embedding,
              "DistributedOptimizer::set_pipeline_parallel: the tied weight '", pp.tied_parameter,
              "' is sharded without a bucket of its own; build the optimizer with shared_embedding = '",
              pp.tied_parameter, "'");
  MixedPrecisionOptimizer::set_pipeline_parallel(std::move(pp));
}

// The shard of the averaged gradients as each piece's fp32 gradient.
void DistributedOptimizer::collect_grads() {
  if (!grads_synced_) finish_grad_sync(buffer_->group());
  NoGradGuard no_grad;
  const Tensor& grads = buffer_->grad_data();
  const bool f32 = grads.dtype() == DType::f32;
  if (!f32 && !shard_grads_.defined()) {
    int64_t n = 0;
    for (const auto& pc : pieces_) n += pc.numel;
    shard_grads_ = zeros({n}, TensorOptions(DType::f32).device(grads.device()));
  }
  int64_t at = 0;
  for (size_t i = 0; i < main_.size(); ++i) {
    const auto& pc = pieces_[i];
    const Tensor g = ops::narrow(grads, 0, pc.buffer_offset, pc.numel);
    if (f32) {
      main_[i].set_grad(g);
    } else {
      kernels::copy_into_f32(ops::narrow(shard_grads_, 0, at, pc.numel), g);
      main_[i].set_grad(ops::narrow(shard_grads_, 0, at, pc.numel));
      at += pc.numel;
    }
  }
}

void DistributedOptimizer::sum_over_data_parallel(std::vector<double>& sums) {
  dist::ProcessGroup* g = buffer_->group();
  if (!d_.shard || !g || g->size() == 1) return;
  Tensor t = from_vector<double>(sums, {static_cast<int64_t>(sums.size())});
  g->all_reduce(t);
  sums = t.to_vector<double>();
}

void DistributedOptimizer::update_model_params() {
  NoGradGuard no_grad;
  buffer_->finish_param_sync();  // a gather still reading our shard must end first
  if (copies_)
    for (size_t i = 0; i < main_.size(); ++i)
      ops::copy_(ops::narrow(buffer_->param_data(), 0, pieces_[i].buffer_offset, pieces_[i].numel), main_[i]);
  for (const Tensor& p : model_) p.bump_version();
  buffer_->start_param_sync();
  if (!d_.overlap_param_gather) buffer_->finish_param_sync();
}

std::function<void(const nn::Module&)> DistributedOptimizer::forward_pre_hook() {
  pre_hook_installed_ = true;
  return [this](const nn::Module& part) { wait_for_part(part); };
}

void DistributedOptimizer::wait_for_part(const nn::Module& part) {
  auto it = part_buckets_.find(&part);
  if (it == part_buckets_.end()) {
    std::unordered_map<const TensorImpl*, size_t> where;
    for (size_t k = 0; k < buffer_->params().size(); ++k) where[buffer_->params()[k].impl()] = buffer_->bucket_of(k);
    std::set<size_t> buckets;
    for (const Tensor& p : part.parameters())
      if (auto w = where.find(p.impl()); w != where.end()) buckets.insert(w->second);
    it = part_buckets_.emplace(&part, std::vector<size_t>(buckets.begin(), buckets.end())).first;
  }
  for (size_t b : it->second) buffer_->finish_param_sync(b);
}

OptimizerMemory DistributedOptimizer::memory() const {
  OptimizerMemory m;
  m.weights = static_cast<int64_t>(buffer_->param_data().nbytes());
  m.grads = static_cast<int64_t>(buffer_->grad_data().nbytes()) +
            (shard_grads_.defined() ? static_cast<int64_t>(shard_grads_.nbytes()) : 0);
  if (copies_)
    for (const Tensor& t : main_) m.main_params += static_cast<int64_t>(t.nbytes());
  for (const auto& [k, t] : inner_->state_dict().tensors) m.optimizer_state += static_cast<int64_t>(t.nbytes());
  return m;
}

// ---- checkpoints

MixedPrecisionOptimizer::NamedState DistributedOptimizer::gather_named_state(int writer_rank) const {
  dist::ProcessGroup* group = buffer_->group();
  const bool gather = d_.shard && group && group->size() > 1;
  const optim::OptimizerState local = inner_->state_dict();
  // Which state tensors exist anywhere, and the step count (every piece steps together).
  std::vector<double> have(state_keys().size() + 1, 0.0);
  for (size_t i = 0; i < main_.size(); ++i) {
    const std::string pre = "state." + std::to_string(i) + ".";
    for (size_t k = 0; k < state_keys().size(); ++k)
      if (local.tensors.count(pre + state_keys()[k])) have[k] = 1;
    if (auto s = local.scalars.find(pre + "step"); s != local.scalars.end())
      have.back() = std::max(have.back(), s->second);
  }
  if (gather) {
    Tensor t = from_vector<double>(have, {static_cast<int64_t>(have.size())});
    group->all_reduce(t, dist::ReduceOp::max);
    have = t.to_vector<double>();
  }
  std::vector<std::string> keys;
  if (copies_) keys.push_back("main_param");
  for (size_t k = 0; k < state_keys().size(); ++k)
    if (have[k] > 0) keys.push_back(state_keys()[k]);

  NamedState st;
  NoGradGuard no_grad;
  for (size_t b = 0; b < buffer_->buckets().size(); ++b) {
    const auto& bk = buffer_->buckets()[b];
    // Expert buckets are cut over the expert-data-parallel group.
    dist::ProcessGroup* bucket_group = buffer_->group_of(b);
    const bool bucket_gather = d_.shard && bucket_group && bucket_group->size() > 1;
    const bool writer = !bucket_gather || buffer_->group_rank_of(b) == writer_rank;
    for (const std::string& key : keys) {
      Tensor mine = zeros({bk.shard_numel}, TensorOptions(DType::f32).device(buffer_->param_data().device()));
      for (size_t i = 0; i < main_.size(); ++i) {
        if (pieces_[i].bucket != b) continue;
        Tensor src = key == "main_param" ? main_[i] : Tensor();
        if (key != "main_param")
          if (auto t = local.tensors.find("state." + std::to_string(i) + "." + key); t != local.tensors.end())
            src = t->second;
        if (src.defined())
          ops::copy_(ops::narrow(mine, 0, pieces_[i].buffer_offset - bk.shard_offset, pieces_[i].numel), src);
      }
      Tensor whole = mine;
      if (bucket_gather) {
        whole = empty({bk.numel}, TensorOptions(DType::f32).device(mine.device()));
        bucket_group->all_gather(whole, mine);
      }
      if (!writer) continue;
      for (size_t k : bk.params) {
        const Tensor& p = buffer_->params()[k];
        const Tensor slice = ops::narrow(whole, 0, buffer_->param_offset(k) - bk.offset, p.numel());
        st.tensors[key + "/" + names_[name_index_[k]]] = ops::clone(ops::reshape(slice, p.shape()));
      }
    }
  }
  if (!writes_state(writer_rank)) return st;
  for (const auto& [k, v] : local.scalars) {
    if (k.rfind("param_groups.", 0) != 0) continue;
    st.scalars["group." + k.substr(13)] = v;
  }
  for (size_t g = 0; g < groups_.size(); ++g)
    st.scalars["group." + std::to_string(g) + ".num_params"] = static_cast<double>(groups_[g].params.size());
  if (have.back() > 0)
    for (const std::string& name : names_) st.scalars["step/" + name] = have.back();
  return st;
}

void DistributedOptimizer::gather_state_for_save(int writer_rank) {
  finish_param_sync();
  gathered_ = gather_named_state(writer_rank);
  if (!writes_state(writer_rank)) gathered_.reset();
}

bool DistributedOptimizer::writes_state(int writer_rank) const {
  if (!d_.shard) return true;
  for (size_t b = 0; b < buffer_->buckets().size(); ++b) {
    dist::ProcessGroup* g = buffer_->group_of(b);
    if (!g || g->size() == 1 || buffer_->group_rank_of(b) == writer_rank) return true;
  }
  return false;
}

MixedPrecisionOptimizer::StateByName DistributedOptimizer::state_by_name(const nn::Metadata& extra) const {
  if (!gathered_) {
    QK_CHECK_AS(ValueError, !d_.shard || buffer_->group_size() == 1,
                "DistributedOptimizer::state_by_name: call gather_state_for_save on every data-parallel rank first "
                "(the shards are gathered collectively)");
    return to_state_by_name(gather_named_state(0), extra);
  }
  StateByName out = to_state_by_name(*gathered_, extra);
  gathered_.reset();
  return out;
}

void DistributedOptimizer::reload_model_params() {
  if (!copies_) return;  // the pieces are views of the parameters
  NoGradGuard no_grad;
  for (size_t i = 0; i < main_.size(); ++i) {
    ops::copy_(main_[i], ops::narrow(buffer_->param_data(), 0, pieces_[i].buffer_offset, pieces_[i].numel));
    main_[i].bump_version();
  }
}

void DistributedOptimizer::load_state_by_name(const StateByName& state, const std::string& path) {
  const NamedState st = to_named_state(state, path);
  std::map<std::string, size_t> index;
  for (size_t i = 0; i < names_.size(); ++i) index[names_[i]] = i;
  std::map<size_t, size_t> main_of;  // names_ index -> main_ index
  for (size_t i = 0; i < main_.size(); ++i) main_of[name_index_[pieces_[i].param]] = i;
  auto slot = [&](const std::string& key) {
    const size_t slash = key.find('/');
    return std::make_pair(key.substr(0, slash), index.at(key.substr(slash + 1)));
  };
  optim::OptimizerState s;
  std::map<size_t, Tensor> mains;
  for (const auto& [k, t] : st.tensors) {
    const auto [what, n] = slot(k);
    QK_CHECK_AS(ValueError, t.numel() == model_[n].numel(), "'", path, "': ", what, " of '", names_[n], "' has shape ",
                shape_str(t.shape()), ", the model's parameter ", shape_str(model_[n].shape()));
    if (what == "main_param") {
      mains[n] = t;
      continue;
    }
    if (auto m = main_of.find(n); m != main_of.end())
      s.tensors["state." + std::to_string(m->second) + "." + what] =
          flat_slice(t, pieces_[m->second].param_offset, pieces_[m->second].numel);
  }
  for (const auto& [k, d] : st.scalars) {
    if (k.rfind("group.", 0) == 0) {
      s.scalars["param_groups." + k.substr(6)] = d;
      continue;
    }
    const auto [what, n] = slot(k);
    if (auto m = main_of.find(n); m != main_of.end()) s.scalars["state." + std::to_string(m->second) + "." + what] = d;
  }
  for (size_t g = 0; g < groups_.size(); ++g)
    s.scalars["param_groups." + std::to_string(g) + ".num_params"] = static_cast<double>(inner_->params(g).size());
  inner_->load_state_dict(s);
  reload_model_params();
  NoGradGuard no_grad;
  for (const auto& [n, t] : mains) {
    if (!copies_) {
      // fp32 parameters (resuming a bf16 run's main weights): the whole
      // tensor on every rank, so no gather is needed.
      ops::copy_(model_[n], ops::reshape(t, model_[n].shape()));
      model_[n].bump_version();
    } else if (auto m = main_of.find(n); m != main_of.end()) {
      ops::copy_(main_[m->second], flat_slice(t, pieces_[m->second].param_offset, pieces_[m->second].numel));
      main_[m->second].bump_version();
    }
  }
}

OptimizerMemory theoretical_optimizer_memory(int64_t num_parameters, DType params_dtype, DType grad_dtype,
                                             int state_tensors_per_parameter, int data_parallel_size,
                                             bool distributed_optimizer) {
  const int64_t n = num_parameters;
  const int64_t shard = distributed_optimizer ? (n + data_parallel_size - 1) / data_parallel_size : n;
  OptimizerMemory m;
  m.weights = n * static_cast<int64_t>(dtype_size(params_dtype));
  m.grads = n * static_cast<int64_t>(dtype_size(grad_dtype));
  m.main_params = params_dtype == DType::f32 ? 0 : shard * 4;
  m.optimizer_state = shard * 4 * state_tensors_per_parameter;
  return m;
}

}  // namespace qk::optim
