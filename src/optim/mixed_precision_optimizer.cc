// MixedPrecisionOptimizer: where gradients live in each mode, the step of
// Megatron's MixedPrecisionOptimizer, and its state by parameter name.
#include "qk/optim/mixed_precision_optimizer.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <map>
#include <set>

#include "grad_kernels.h"
#include "qk/autograd/autograd.h"
#include "qk/base/error.h"
#include "qk/tensor/ops/elementwise.h"
#include "qk/tensor/ops/view.h"

namespace qk::optim {

namespace {

constexpr const char* kStateFormat = "qk.train.optim.v1";

std::vector<NamedParam> trainable(const nn::Module& model) {
  std::vector<NamedParam> out;
  for (const auto& item : model.named_parameters())
    if (item.value().requires_grad()) out.emplace_back(item.key(), item.value());
  return out;
}

std::string number(double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", v);  // round-trips every double
  return buf;
}

}  // namespace

std::vector<ParamGroupSpec> megatron_param_groups(const nn::Module& model) {
  ParamGroupSpec decay, no_decay;
  no_decay.wd_mult = 0;
  for (auto& [name, p] : trainable(model)) {
    const bool bias = name.size() >= 5 && name.compare(name.size() - 5, 5, ".bias") == 0;
    (bias || p.dim() == 1 ? no_decay : decay).params.emplace_back(name, p);
  }
  std::vector<ParamGroupSpec> out;
  if (!decay.params.empty()) out.push_back(std::move(decay));
  if (!no_decay.params.empty()) out.push_back(std::move(no_decay));
  return out;
}

std::vector<ParamGroupSpec> single_param_group(const nn::Module& model) {
  ParamGroupSpec g;
  g.params = trainable(model);
  return {std::move(g)};
}

namespace {
template <typename Opt, typename Options>
OptimizerFactory factory(Options o) {
  return [o](std::vector<std::vector<Tensor>> groups) -> std::unique_ptr<optim::Optimizer> {
    std::vector<typename Opt::ParamGroup> pg;
    for (auto& g : groups) pg.push_back({std::move(g), o});
    return std::make_unique<Opt>(std::move(pg));
  };
}
}  // namespace

OptimizerFactory adamw(optim::AdamWOptions o) { return factory<optim::AdamW>(o); }
OptimizerFactory adam(optim::AdamOptions o) { return factory<optim::Adam>(o); }
OptimizerFactory sgd(optim::SGDOptions o) { return factory<optim::SGD>(o); }

MixedPrecisionOptimizer::MixedPrecisionOptimizer(std::vector<ParamGroupSpec> groups, std::unique_ptr<LossScaler> scaler,
                                                 MixedPrecisionOptions o, NoMainParams)
    : groups_(std::move(groups)), scaler_(std::move(scaler)), o_(o) {
  QK_CHECK_AS(ValueError, !groups_.empty(), "MixedPrecisionOptimizer: no parameter groups");
  QK_CHECK_AS(ValueError, o_.clip_grad >= 0, "clip_grad (--clip-grad) must be >= 0, got ", o_.clip_grad);
  std::set<std::string> seen;
  for (const ParamGroupSpec& g : groups_) {
    for (const auto& [name, p] : g.params) {
      QK_CHECK_AS(ValueError, p.defined() && is_floating(p.dtype()), "MixedPrecisionOptimizer: parameter '", name,
                  "' is not a floating tensor");
      QK_CHECK_AS(ValueError, seen.insert(name).second, "MixedPrecisionOptimizer: parameter '", name,
                  "' appears twice");
      QK_CHECK_AS(ValueError, p.is_contiguous(), "MixedPrecisionOptimizer: parameter '", name,
                  "' is not contiguous");
      names_.push_back(name);
      model_.push_back(p);
      copies_ = copies_ || is_reduced_float(p.dtype());
    }
  }
}

MixedPrecisionOptimizer::MixedPrecisionOptimizer(std::vector<ParamGroupSpec> groups, const OptimizerFactory& make,
                                                 std::unique_ptr<LossScaler> scaler, MixedPrecisionOptions o)
    : MixedPrecisionOptimizer(std::move(groups), std::move(scaler), o, NoMainParams{}) {
  std::vector<std::vector<Tensor>> main_groups;
  size_t i = 0;
  for (const ParamGroupSpec& g : groups_) {
    std::vector<Tensor> mg;
    for (size_t k = 0; k < g.params.size(); ++k, ++i) {
      const Tensor& p = model_[i];
      // bf16/f16: a fresh fp32 leaf; fp32: the model's own parameter.
      main_.push_back(is_reduced_float(p.dtype()) ? ops::cast(p.detach(), DType::f32) : p);
      mg.push_back(main_.back());
    }
    main_groups.push_back(std::move(mg));
  }
  init_inner(make, std::move(main_groups));
  int64_t total = 0;
  for (const Tensor& p : model_) {
    offsets_.push_back(total);
    total += p.numel();
  }
  offsets_.push_back(total);
  accumulated_.assign(model_.size(), 0);
}

MixedPrecisionOptimizer::~MixedPrecisionOptimizer() = default;

void MixedPrecisionOptimizer::init_inner(const OptimizerFactory& make, std::vector<std::vector<Tensor>> main_groups) {
  inner_ = make(std::move(main_groups));
  QK_CHECK_AS(ValueError, inner_ && inner_->num_param_groups() == groups_.size(),
              "MixedPrecisionOptimizer: the optimizer factory must make one group per parameter group (",
              groups_.size(), ")");
}

std::vector<GroupSchedule> MixedPrecisionOptimizer::group_schedules() const {
  std::vector<GroupSchedule> out;
  for (const ParamGroupSpec& g : groups_) out.push_back({.max_lr = g.max_lr, .min_lr = g.min_lr, .wd_mult = g.wd_mult});
  return out;
}

void MixedPrecisionOptimizer::ensure_flat_grads() {
  // On the parameters' device: the gradients are added into it there.
  const Device d = model_.empty() ? kCPU : model_.front().device();
  if (!flat_grads_.defined()) flat_grads_ = zeros({offsets_.back()}, TensorOptions(DType::f32).device(d));
}

Tensor MixedPrecisionOptimizer::flat_grad_view(size_t i) const {
  return ops::reshape(ops::narrow(flat_grads_, 0, offsets_[i], model_[i].numel()), model_[i].shape());
}

void MixedPrecisionOptimizer::zero_grad() {
  for (size_t i = 0; i < model_.size(); ++i) {
    model_[i].set_grad(Tensor());
    if (copies_) main_[i].set_grad(Tensor());
  }
  if (flat_grads_.defined()) ops::fill_(flat_grads_, 0.0);
  std::fill(accumulated_.begin(), accumulated_.end(), 0);
  collected_ = false;
}

void MixedPrecisionOptimizer::accumulate_grads() {
  if (!o_.accumulate_allreduce_grads_in_fp32 || !copies_) return;
  NoGradGuard no_grad;
  for (size_t i = 0; i < model_.size(); ++i) {
    const Tensor g = model_[i].grad();
    if (!g.defined() || model_[i].dtype() == DType::f32) continue;
    ensure_flat_grads();
    kernels::add_into_f32(ops::narrow(flat_grads_, 0, offsets_[i], g.numel()), ops::contiguous(g));
    accumulated_[i] = 1;
    model_[i].set_grad(Tensor());
  }
}

// Main gradients for bf16/f16 parameters: views of the fp32 buffer (the
// accumulated sums, or a converted copy of this step's gradient).
void MixedPrecisionOptimizer::collect_grads() {
  if (collected_) return;
  collected_ = true;
  if (!copies_) return;
  accumulate_grads();
  NoGradGuard no_grad;
  for (size_t i = 0; i < model_.size(); ++i) {
    if (model_[i].dtype() == DType::f32) continue;
    const Tensor g = model_[i].grad();
    if (g.defined()) {
      ensure_flat_grads();
      kernels::copy_into_f32(ops::narrow(flat_grads_, 0, offsets_[i], g.numel()), ops::contiguous(g));
      accumulated_[i] = 1;
    }
    main_[i].set_grad(accumulated_[i] ? flat_grad_view(i) : Tensor());
  }
}

void MixedPrecisionOptimizer::finish_grad_sync(dist::ProcessGroup* dp) {
  if (dp && dp->size() > 1) all_reduce_grads(*dp);
}

OptimizerMemory MixedPrecisionOptimizer::memory() const {
  OptimizerMemory m;
  for (size_t i = 0; i < model_.size(); ++i) {
    m.weights += static_cast<int64_t>(model_[i].nbytes());
    if (!main_[i].is_same(model_[i])) m.main_params += static_cast<int64_t>(main_[i].nbytes());
    if (!flat_grads_.defined() && model_[i].grad().defined())
      m.grads += static_cast<int64_t>(model_[i].grad().nbytes());
  }
  if (flat_grads_.defined()) m.grads = static_cast<int64_t>(flat_grads_.nbytes());
  for (const auto& [k, t] : inner_->state_dict().tensors) m.optimizer_state += static_cast<int64_t>(t.nbytes());
  return m;
}

void MixedPrecisionOptimizer::all_reduce_grads(dist::ProcessGroup& pg) {
  collect_grads();
  ensure_flat_grads();
  NoGradGuard no_grad;
  for (size_t i = 0; i < model_.size(); ++i) {
    if (model_[i].dtype() != DType::f32) {
      if (!accumulated_[i]) ops::fill_(flat_grad_view(i), 0.0);  // none this step: counts as zero, as DDP's
      continue;
    }
    const Tensor g = model_[i].grad();
    Tensor view = flat_grad_view(i);
    if (g.defined()) ops::copy_(view, g);
    else ops::fill_(view, 0.0);
  }
  if (dense_numel_ < 0) {
    if (pg.size() > 1) pg.all_reduce(flat_grads_, dist::ReduceOp::avg);
  } else {
    // Megatron's expert gradient scaling: summed over the expert-data-parallel
    // ranks (the others hold other experts), divided by the data-parallel size.
    const Tensor dense = ops::narrow(flat_grads_, 0, 0, dense_numel_);
    const Tensor experts = ops::narrow(flat_grads_, 0, dense_numel_, flat_grads_.numel() - dense_numel_);
    if (pg.size() > 1 && dense_numel_ > 0) pg.all_reduce(dense, dist::ReduceOp::avg);
    if (ep_.expert_dp_size() > 1) ep_.expert_dp->all_reduce(experts, dist::ReduceOp::sum);
    ops::mul_(experts, 1.0 / pg.size());
  }
  flat_grads_.bump_version();
  for (size_t i = 0; i < model_.size(); ++i) {
    accumulated_[i] = 1;
    main_[i].set_grad(flat_grad_view(i));  // for an fp32 parameter main_ is the model's own
  }
}

void MixedPrecisionOptimizer::set_tensor_parallel(parallel::TensorParallel tp) {
  std::map<std::string, size_t> index;
  for (size_t i = 0; i < names_.size(); ++i) index[names_[i]] = i;
  std::vector<char> shard(names_.size(), 0), partial(names_.size(), 0);
  for (const auto& [name, spec] : tp.shard_specs)
    if (auto it = index.find(name); it != index.end()) shard[it->second] = 1;  // frozen shards: not ours
  for (const std::string& name : tp.partial_gradients) {
    const auto it = index.find(name);
    QK_CHECK_AS(ValueError, it != index.end(), "MixedPrecisionOptimizer::set_tensor_parallel: '", name,
                "' has a partial gradient but is not a parameter of this optimizer");
    partial[it->second] = 1;
  }
  // By main parameter (the distributed optimizer's are pieces of its
  // data-parallel shard: every tensor-parallel rank of a data-parallel rank
  // holds the same pieces, its buffers being laid out alike).
  sharded_.assign(main_.size(), 0);
  partial_.clear();
  for (size_t i = 0; i < main_.size(); ++i) {
    const size_t n = name_index_of_main(i);
    sharded_[i] = shard[n];
    if (partial[n]) partial_.push_back(i);
  }
  tp_ = std::move(tp);
}

void MixedPrecisionOptimizer::set_expert_parallel(parallel::ExpertParallel ep) {
  QK_CHECK_AS(ValueError, !flat_grads_.defined(), "MixedPrecisionOptimizer::set_expert_parallel: call it before "
              "the first step");
  for (const std::string& name : ep.params)
    QK_CHECK_AS(ValueError, std::find(names_.begin(), names_.end(), name) != names_.end(),
                "MixedPrecisionOptimizer::set_expert_parallel: '", name, "' is not a parameter of this optimizer");
  expert_.assign(main_.size(), 0);
  for (size_t i = 0; i < main_.size(); ++i) expert_[i] = ep.is_expert(names_[name_index_of_main(i)]);
  // The flat gradient buffer (this class's own, not the distributed
  // optimizer's): dense parameters first, so each part is reduced in one call.
  if (!offsets_.empty() && !ep.params.empty()) {
    int64_t at = 0;
    for (int pass = 0; pass < 2; ++pass) {
      if (pass == 1) dense_numel_ = at;
      for (size_t i = 0; i < model_.size(); ++i)
        if (ep.is_expert(names_[i]) == (pass == 1)) {
          offsets_[i] = at;
          at += model_[i].numel();
        }
    }
    offsets_.back() = at;
  }
  ep_ = std::move(ep);
}

// Megatron's _allreduce_layernorm_grads on the fp32 main gradients (after
// the data-parallel reduction; sums commute with its average). A parameter
// without a gradient here adds zeros, so every rank reduces the same buffer.
void MixedPrecisionOptimizer::sum_partial_grads() {
  if (!tp_.active() || partial_.empty()) return;
  int64_t total = 0;
  for (size_t i : partial_) total += main_[i].numel();
  Tensor flat = zeros({total}, TensorOptions(DType::f32).device(main_[partial_.front()].device()));
  int64_t at = 0;
  for (size_t i : partial_) {
    const Tensor g = main_[i].grad();
    if (g.defined()) ops::copy_(ops::narrow(flat, 0, at, g.numel()), ops::reshape(g, {g.numel()}));
    at += main_[i].numel();
  }
  tp_.group->all_reduce(flat);
  at = 0;
  for (size_t i : partial_) {
    const Tensor part = ops::reshape(ops::narrow(flat, 0, at, main_[i].numel()), main_[i].shape());
    if (Tensor g = main_[i].grad(); g.defined()) {
      ops::copy_(g, part);
      g.bump_version();
    } else {
      main_[i].set_grad(ops::contiguous(part));
    }
    at += main_[i].numel();
  }
}

void MixedPrecisionOptimizer::set_pipeline_parallel(parallel::PipelineParallel pp) {
  tied_main_ = -1;
  if (!pp.tied_parameter.empty()) {
    QK_CHECK_AS(ValueError, std::find(names_.begin(), names_.end(), pp.tied_parameter) != names_.end(),
                "MixedPrecisionOptimizer::set_pipeline_parallel: the tied weight '", pp.tied_parameter,
                "' is not a parameter of this optimizer");
    // The distributed optimizer's rank may hold no piece of it (then
    // neither does its partner on the other stage, the shards being alike).
    for (size_t i = 0; i < main_.size(); ++i)
      if (names_[name_index_of_main(i)] == pp.tied_parameter) tied_main_ = static_cast<int64_t>(i);
  }
  pp_ = std::move(pp);
}

// Megatron's _allreduce_word_embedding_grads on the fp32 main gradient: the
// first stage's embedding and the last stage's copy take the same step. It
// runs after the data-parallel reduction (a sum commutes with its average);
// the distributed optimizer's main gradient is this rank's averaged piece,
// which both stages cut alike (the tied weight's own bucket).
void MixedPrecisionOptimizer::sum_embedding_grads() {
  if (tied_main_ < 0 || !pp_.embedding || pp_.embedding->size() < 2) return;
  Tensor& p = main_[static_cast<size_t>(tied_main_)];
  if (!p.grad().defined()) p.set_grad(zeros(p.shape(), TensorOptions(DType::f32).device(p.device())));
  Tensor g = p.grad();
  pp_.embedding->all_reduce(g);
  g.bump_version();
}

OptimizerStepResult MixedPrecisionOptimizer::step() {
  collect_grads();
  NoGradGuard no_grad;
  sum_partial_grads();
  sum_embedding_grads();
  std::vector<Tensor> grads;
  std::vector<char> shard, uncounted, expert;
  for (size_t i = 0; i < main_.size(); ++i) {
    Tensor g = main_[i].grad();
    if (!g.defined()) continue;
    QK_CHECK_AS(ValueError, g.dtype() == DType::f32 && g.is_contiguous(),
                "MixedPrecisionOptimizer: gradients of fp32 parameters must be contiguous f32");
    grads.push_back(g);
    shard.push_back(tp_.active() && sharded_[i]);
    uncounted.push_back(pp_.tied_copy && static_cast<int64_t>(i) == tied_main_);
    expert.push_back(!expert_.empty() && expert_[i]);
  }
  OptimizerStepResult r;
  collected_ = false;
  // The last stage's copy of the tied embedding is unscaled, checked and
  // clipped, but its squares are the first stage's (counted there). Routed
  // experts' squares are counted apart: summed over the expert-parallel group.
  // Tensors, not raw spans: on an accelerator the passes run on the device.
  struct Part {
    std::vector<Tensor> shards, replicated;
  };
  Part dense, experts;
  std::vector<Tensor> copy_spans;
  for (size_t i = 0; i < grads.size(); ++i) {
    const Tensor& s = grads[i];
    if (uncounted[i]) {
      copy_spans.push_back(s);
      continue;
    }
    Part& part = expert[i] ? experts : dense;
    (shard[i] ? part.shards : part.replicated).push_back(s);
  }
  // One pass: unscale, look for inf/NaN, sum the squares for the norm.
  // Shards: squares and inf/NaN summed over the tensor-parallel group;
  // replicated parameters (equal on every rank) counted once.
  const float inv = scaler_ ? scaler_->inv_scale() : 1.0f;
  const bool copy_inf = kernels::unscale_check_and_norm(copy_spans, inv).found_inf;
  auto measure = [&](const Part& p, bool inf) {
    const kernels::UnscaleResult sh = kernels::unscale_check_and_norm(p.shards, inv);
    kernels::UnscaleResult u = kernels::unscale_check_and_norm(p.replicated, inv);
    u.found_inf = u.found_inf || sh.found_inf || inf;
    if (!tp_.active()) {
      u.sum_squares += sh.sum_squares;
      return u;
    }
    Tensor both = from_vector<double>({sh.sum_squares, u.found_inf ? 1.0 : 0.0}, {2});
    tp_.group->all_reduce(both);
    u.sum_squares += both.data_ptr<double>()[0];
    u.found_inf = both.data_ptr<double>()[1] > 0;
    return u;
  };
  // Each expert-parallel rank holds other experts (the distributed
  // optimizer's data-parallel sum covers them: its pieces are cut over expert_dp).
  const bool sum_experts = ep_.active() && !sums_pieces_over_data_parallel();
  auto over_experts = [&](std::vector<double> v) {
    if (!sum_experts) return v;
    Tensor t = from_vector<double>(v, {static_cast<int64_t>(v.size())});
    ep_.ep->all_reduce(t);
    return t.to_vector<double>();
  };
  kernels::UnscaleResult u = measure(dense, copy_inf);
  if (ep_.active()) {
    const kernels::UnscaleResult e = measure(experts, false);
    const std::vector<double> ev = over_experts({e.found_inf ? 1.0 : 0.0, e.sum_squares});
    u.found_inf = u.found_inf || ev[0] > 0;
    u.sum_squares += ev[1];
  }
  // The distributed optimizer's shards: the inf check and the norm are global.
  std::vector<double> sums{u.found_inf ? 1.0 : 0.0, u.sum_squares};
  sum_over_data_parallel(sums);
  sum_over_pipeline(sums);
  if (scaler_ || o_.skip_nonfinite) {
    r.found_inf = sums[0] > 0;
    if (scaler_) scaler_->update(r.found_inf);
    if (r.found_inf) {
      r.grad_norm = std::numeric_limits<double>::quiet_NaN();
      return r;
    }
  }
  r.grad_norm = std::sqrt(sums[1]);
  if (o_.clip_grad > 0) {
    const double coeff = o_.clip_grad / (r.grad_norm + 1.0e-6);
    if (coeff < 1.0) kernels::scale(grads, static_cast<float>(coeff));
  }
  if (o_.log_num_zeros_in_grad) {
    auto count = [&](const Part& p) -> double {
      int64_t zeros = kernels::count_zeros(p.replicated);
      if (!tp_.active()) return static_cast<double>(zeros + kernels::count_zeros(p.shards));
      Tensor z = from_vector<int64_t>({kernels::count_zeros(p.shards)}, {1});
      tp_.group->all_reduce(z);
      return static_cast<double>(zeros + z.data_ptr<int64_t>()[0]);
    };
    std::vector<double> zeros_count{count(dense)};
    if (ep_.active()) zeros_count[0] += over_experts({count(experts)})[0];
    sum_over_data_parallel(zeros_count);
    sum_over_pipeline(zeros_count);
    r.num_zeros_in_grad = static_cast<int64_t>(zeros_count[0]);
  }
  for (const Tensor& g : grads) g.bump_version();
  inner_->step();
  update_model_params();
  r.updated = true;
  return r;
}

// Every stage's [found_inf, squares] (or zero count): Megatron's norm and
// inf check over the model-parallel group (tensor-parallel sums came first).
void MixedPrecisionOptimizer::sum_over_pipeline(std::vector<double>& sums) {
  if (!pp_.active()) return;
  Tensor t = from_vector<double>(sums, {static_cast<int64_t>(sums.size())});
  pp_.group->all_reduce(t);
  sums.assign(t.data_ptr<double>(), t.data_ptr<double>() + sums.size());
}

void MixedPrecisionOptimizer::update_model_params() {
  if (!copies_) return;
  NoGradGuard no_grad;
  for (size_t i = 0; i < model_.size(); ++i) {
    if (main_[i].is_same(model_[i])) continue;
    ops::copy_(model_[i], main_[i]);  // round to nearest even
    model_[i].bump_version();
  }
}

void MixedPrecisionOptimizer::reload_model_params() {
  NoGradGuard no_grad;
  for (size_t i = 0; i < model_.size(); ++i) {
    if (main_[i].is_same(model_[i])) continue;
    ops::copy_(main_[i], model_[i]);
    main_[i].bump_version();
  }
}

void MixedPrecisionOptimizer::save_state(const std::string& path, const nn::Metadata& extra) const {
  const StateByName s = state_by_name(extra);
  nn::save_safetensors(path, s.tensors, s.metadata);
}

void MixedPrecisionOptimizer::load_state(const std::string& path) {
  const nn::SafetensorsFile f = nn::load_safetensors(path);
  load_state_by_name({f.tensors, f.metadata}, path);
}

MixedPrecisionOptimizer::StateByName MixedPrecisionOptimizer::to_state_by_name(const NamedState& st,
                                                                               const nn::Metadata& extra) const {
  nn::Metadata meta = extra;
  meta["format"] = kStateFormat;
  for (const auto& [k, v] : st.scalars) meta[k] = number(v);
  return {st.tensors, std::move(meta)};
}

MixedPrecisionOptimizer::NamedState MixedPrecisionOptimizer::to_named_state(const StateByName& f,
                                                                            const std::string& path) const {
  const auto fmt = f.metadata.find("format");
  QK_CHECK_AS(IoError, fmt != f.metadata.end() && fmt->second == kStateFormat, "'", path,
              "' is not an optimizer state written by qk::train (no format=", kStateFormat, " metadata)");
  const std::set<std::string> known(names_.begin(), names_.end());
  auto check_name = [&](const std::string& key) {
    const size_t slash = key.find('/');
    QK_CHECK_AS(IoError, slash != std::string::npos, "'", path, "': unexpected entry '", key, "'");
    QK_CHECK_AS(ValueError, known.count(key.substr(slash + 1)), "'", path, "' holds optimizer state for parameter '",
                key.substr(slash + 1), "', which this model does not have; was it saved from another model?");
  };
  NamedState st;
  for (const auto& [k, t] : f.tensors) {
    check_name(k);
    st.tensors[k] = t;
  }
  for (const auto& [k, v] : f.metadata) {
    if (k == "format" || (k.find('/') == std::string::npos && k.rfind("group.", 0) != 0)) continue;
    if (k.rfind("group.", 0) != 0) check_name(k);
    char* end = nullptr;
    const double d = std::strtod(v.c_str(), &end);
    QK_CHECK_AS(IoError, !v.empty() && end && *end == '\0', "'", path, "': metadata '", k, "' = '", v,
                "' is not a number");
    st.scalars[k] = d;
  }
  return st;
}

MixedPrecisionOptimizer::StateByName MixedPrecisionOptimizer::state_by_name(const nn::Metadata& extra) const {
  const optim::OptimizerState s = inner_->state_dict();
  NamedState st;
  // "state.12.exp_avg" -> ("exp_avg", names_[12])
  auto split = [this](const std::string& key, std::string* what) -> const std::string& {
    const size_t dot = key.find('.', 6);
    const size_t i = std::strtoull(key.c_str() + 6, nullptr, 10);
    QK_CHECK_AS(InternalError, key.rfind("state.", 0) == 0 && dot != std::string::npos && i < names_.size(),
                "MixedPrecisionOptimizer: unexpected optimizer state key '", key, "'");
    *what = key.substr(dot + 1);
    return names_[i];
  };
  for (const auto& [k, t] : s.tensors) {
    std::string what;
    const std::string& name = split(k, &what);
    st.tensors[what + "/" + name] = t;
  }
  for (const auto& [k, v] : s.scalars) {
    if (k.rfind("param_groups.", 0) == 0) {
      st.scalars["group." + k.substr(13)] = v;
    } else {
      std::string what;
      const std::string& name = split(k, &what);
      st.scalars[what + "/" + name] = v;
    }
  }
  for (size_t i = 0; i < names_.size(); ++i)
    if (!main_[i].is_same(model_[i])) st.tensors["main_param/" + names_[i]] = main_[i];
  return to_state_by_name(st, extra);
}

void MixedPrecisionOptimizer::load_state_by_name(const StateByName& f, const std::string& path) {
  const NamedState st = to_named_state(f, path);
  std::map<std::string, size_t> index;
  for (size_t i = 0; i < names_.size(); ++i) index[names_[i]] = i;
  // "exp_avg/decoder.weight" -> ("exp_avg", index of decoder.weight)
  auto key_for = [&](const std::string& key) {
    const size_t slash = key.find('/');
    return std::make_pair(key.substr(0, slash), index.at(key.substr(slash + 1)));
  };
  optim::OptimizerState s;
  std::map<size_t, Tensor> mains;
  for (const auto& [k, t] : st.tensors) {
    const auto [what, i] = key_for(k);
    if (what == "main_param") {
      QK_CHECK_AS(ValueError, t.shape() == model_[i].shape(), "'", path, "': main parameter '", names_[i],
                  "' has shape ", shape_str(t.shape()), ", the model's has ", shape_str(model_[i].shape()));
      mains[i] = t;
    } else {
      s.tensors["state." + std::to_string(i) + "." + what] = t;
    }
  }
  for (const auto& [k, d] : st.scalars) {
    if (k.rfind("group.", 0) == 0) {
      s.scalars["param_groups." + k.substr(6)] = d;
    } else {
      const auto [what, i] = key_for(k);
      s.scalars["state." + std::to_string(i) + "." + what] = d;
    }
  }
  inner_->load_state_dict(s);
  reload_model_params();
  NoGradGuard no_grad;
  for (const auto& [i, t] : mains) {
    ops::copy_(main_[i], t);  // an fp32 model resuming from a bf16 run takes the fp32 weights
    main_[i].bump_version();
  }
}

}  // namespace qk::optim
