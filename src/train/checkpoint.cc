// Training checkpoints: files by name, the state JSON, restore rules of
// Megatron's load_checkpoint (finetune, no_load_optim, no_load_rng).
#include "qk/train/checkpoint.h"

#include <fmt/format.h>

#include <cstdio>
#include <nlohmann/json.hpp>

#include "checkpoint_pipeline.h"
#include "qk/base/error.h"
#include "qk/base/file_io.h"
#include "qk/base/log.h"
#include "qk/nn/serialize.h"
#include "qk/tensor/generator.h"
#include "qk/tensor/ops/view.h"

namespace qk::train {

namespace {

using nlohmann::json;

json parse_json(const std::string& text, const std::string& what) {
  try {
    return json::parse(text);
  } catch (const json::exception& e) {
    QK_THROW(ValueError, what, " is not valid JSON: ", e.what());
  }
}

void rename_or_throw(const std::string& from, const std::string& to) {
  QK_CHECK_AS(IoError, std::rename(from.c_str(), to.c_str()) == 0, "Cannot rename '", from, "' to '", to,
              "'; is the folder writable?");
}

json scheduler_json(const optim::ParamSchedulerState& s) {
  return {{"max_lr", s.max_lr},         {"min_lr", s.min_lr},
          {"lr_warmup_steps", s.lr_warmup_steps}, {"lr_decay_steps", s.lr_decay_steps},
          {"num_steps", s.num_steps},   {"lr_decay_style", s.lr_decay_style},
          {"start_wd", s.start_wd},     {"end_wd", s.end_wd},
          {"wd_incr_steps", s.wd_incr_steps}, {"wd_incr_style", s.wd_incr_style}};
}

optim::ParamSchedulerState scheduler_state(const json& j) {
  optim::ParamSchedulerState s;
  s.max_lr = j.at("max_lr").get<double>();
  s.min_lr = j.at("min_lr").get<double>();
  s.lr_warmup_steps = j.at("lr_warmup_steps").get<double>();
  s.lr_decay_steps = j.at("lr_decay_steps").get<int64_t>();
  s.num_steps = j.at("num_steps").get<int64_t>();
  s.lr_decay_style = j.at("lr_decay_style").get<std::string>();
  s.start_wd = j.at("start_wd").get<double>();
  s.end_wd = j.at("end_wd").get<double>();
  s.wd_incr_steps = j.at("wd_incr_steps").get<int64_t>();
  s.wd_incr_style = j.at("wd_incr_style").get<std::string>();
  return s;
}

// The parameter a state entry belongs to: the weights are named by it,
// optimizer entries "KEY/NAME" after it.
std::string param_of(const std::string& key, bool optimizer) {
  if (!optimizer) return key;
  const size_t slash = key.find('/');
  return slash == std::string::npos ? std::string() : key.substr(slash + 1);
}

// The shard spec of every entry of `m` that belongs to a sharded parameter.
parallel::ShardSpecs entry_specs(const nn::TensorMap& m, const parallel::TensorParallel& tp, bool optimizer) {
  parallel::ShardSpecs specs;
  for (const auto& [k, t] : m)
    if (auto it = tp.shard_specs.find(param_of(k, optimizer)); it != tp.shard_specs.end()) specs[k] = it->second;
  return specs;
}

nn::TensorMap gather_entries(const nn::TensorMap& local, const parallel::TensorParallel& tp, bool optimizer) {
  nn::NamedTensors named;
  for (const auto& [k, t] : local) named.insert(k, t);  // sorted: the same order on every rank
  nn::TensorMap whole;
  for (const auto& item : parallel::gather_shards(named, entry_specs(local, tp, optimizer), *tp.group))
    whole.emplace(item.key(), item.value());
  return whole;
}

nn::TensorMap shard_entries(const nn::TensorMap& whole, const parallel::TensorParallel& tp, bool optimizer,
                            const std::string& where) {
  nn::NamedTensors named;
  for (const auto& [k, t] : whole) named.insert(k, t);
  nn::TensorMap local;
  try {
    for (const auto& item : parallel::shard_full(named, entry_specs(whole, tp, optimizer), tp.rank(), tp.size()))
      local.emplace(item.key(), item.value());
  } catch (const ValueError& e) {
    QK_THROW(ValueError, "loading '", where, "' at --tensor-model-parallel-size ", tp.size(), ": ", e.message());
  }
  return local;
}

}  // namespace

std::string iteration_folder(int64_t iteration) { return fmt::format("iter_{:010d}", iteration); }

std::vector<RngState> gather_rng_states(const DataParallel& dp) {
  const Generator& g = default_generator();
  if (dp.size() == 1) return {{g.seed(), g.offset()}};
  Tensor mine = from_vector<int64_t>({static_cast<int64_t>(g.seed()), static_cast<int64_t>(g.offset())}, {2});
  Tensor all = empty({2 * static_cast<int64_t>(dp.size())}, DType::i64);
  dp.group->all_gather(all, mine);
  std::vector<RngState> out;
  const int64_t* a = all.data_ptr<int64_t>();
  for (int r = 0; r < dp.size(); ++r)
    out.push_back({static_cast<uint64_t>(a[2 * r]), static_cast<uint64_t>(a[2 * r + 1])});
  return out;
}

std::vector<RngState> gather_tensor_parallel_rng_states(const parallel::TensorParallel& tp) {
  if (!tp.generator) return {};
  const Generator& g = *tp.generator;
  if (tp.size() == 1) return {{g.seed(), g.offset()}};
  Tensor mine = from_vector<int64_t>({static_cast<int64_t>(g.seed()), static_cast<int64_t>(g.offset())}, {2});
  Tensor all = empty({2 * static_cast<int64_t>(tp.size())}, DType::i64);
  tp.group->all_gather(all, mine);
  std::vector<RngState> out;
  const int64_t* a = all.data_ptr<int64_t>();
  for (int r = 0; r < tp.size(); ++r)
    out.push_back({static_cast<uint64_t>(a[2 * r]), static_cast<uint64_t>(a[2 * r + 1])});
  return out;
}

TrainTensors train_tensors(const TrainState& s, const parallel::TensorParallel& tp) {
  QK_CHECK_AS(ValueError, s.model != nullptr, "train_tensors: no model");
  TrainTensors t;
  for (const auto& item : s.model->state_dict()) t.weights.emplace(item.key(), item.value());
  if (s.optimizer) t.optimizer = s.optimizer->state_by_name();
  if (!tp.active()) return t;
  t.weights = gather_entries(t.weights, tp, false);
  if (t.optimizer) t.optimizer->tensors = gather_entries(t.optimizer->tensors, tp, true);
  return t;
}

namespace {

// A tensor of the snapshot: a host copy that later steps cannot change.
Tensor host_copy(const Tensor& t) { return t.device().is_cpu() ? ops::clone(t) : ops::to_device(t, kCPU); }

nn::TensorMap host_copies(const nn::TensorMap& m) {
  nn::TensorMap out;
  for (const auto& [name, t] : m) out.emplace(name, host_copy(t));
  return out;
}

CheckpointSnapshot describe(const TrainState& s, const CheckpointMeta& m, const TrainTensors* tensors, bool copy) {
  QK_CHECK_AS(ValueError, s.model != nullptr, "write_train_state: no model");
  CheckpointSnapshot snap;
  snap.meta = m;
  snap.tensors = tensors ? *tensors : train_tensors(s);
  snap.with_optimizer = s.optimizer && !m.optimizer_file.empty();
  if (snap.with_optimizer) {
    QK_CHECK_AS(ValueError, snap.tensors.optimizer.has_value(), "write_train_state: the tensors hold no optimizer state");
    if (const optim::LossScaler* scaler = s.optimizer->scaler()) snap.grad_scaler_json = json(scaler->state_dict()).dump();
  }
  if (s.scheduler) snap.scheduler_json = scheduler_json(s.scheduler->state_dict()).dump();
  if (copy) {
    snap.tensors.weights = host_copies(snap.tensors.weights);
    if (snap.tensors.optimizer) snap.tensors.optimizer->tensors = host_copies(snap.tensors.optimizer->tensors);
  }
  return snap;
}

}  // namespace

CheckpointSnapshot snapshot_train_state(const TrainState& s, const CheckpointMeta& m, const TrainTensors* tensors) {
  return describe(s, m, tensors, /*copy=*/true);
}

std::string write_snapshot(const std::string& dir, const CheckpointSnapshot& snap) {
  const CheckpointMeta& m = snap.meta;
  json j;
  j["format"] = m.format;
  j["iteration"] = m.progress.iteration;
  j["consumed_train_samples"] = m.progress.consumed_train_samples;
  j["consumed_valid_samples"] = m.progress.consumed_valid_samples;
  j["weights"] = m.weights_file;
  const std::string weights = dir + m.weights_file;
  nn::save_safetensors(weights + ".tmp", snap.tensors.weights, m.weights_metadata);
  rename_or_throw(weights + ".tmp", weights);
  if (snap.with_optimizer) {
    const std::string optim_path = dir + m.optimizer_file;
    nn::save_safetensors(optim_path + ".tmp", snap.tensors.optimizer->tensors, snap.tensors.optimizer->metadata);
    rename_or_throw(optim_path + ".tmp", optim_path);
    j["optimizer_state"] = m.optimizer_file;
    if (!snap.grad_scaler_json.empty()) j["grad_scaler"] = json::parse(snap.grad_scaler_json);
  }
  if (!snap.scheduler_json.empty()) j["scheduler"] = json::parse(snap.scheduler_json);
  auto rng_json = [](const std::vector<RngState>& states) {
    json a = json::array();
    for (const RngState& r : states) a.push_back({{"seed", r.seed}, {"offset", r.offset}});
    return a;
  };
  j["rng"] = rng_json(m.rng);
  if (!m.tp_rng.empty()) j["tp_rng"] = rng_json(m.tp_rng);
  if (!m.pp_rng.empty()) j["pp_rng"] = rng_json(m.pp_rng);
  j["args"] = parse_json(m.args_json, "The checkpoint's arguments");
  j["user"] = parse_json(m.user_json, "The checkpoint's user state");
  return j.dump(1);
}

std::string write_train_state(const std::string& dir, const TrainState& s, const CheckpointMeta& m,
                              const TrainTensors* tensors) {
  return write_snapshot(dir, describe(s, m, tensors, /*copy=*/false));
}

CheckpointInfo save_snapshot(const CheckpointDir& ckpts, const std::string& name, const CheckpointSnapshot& snap) {
  CheckpointWriter w = ckpts.begin(name);
  const std::string weights_path = w.file(snap.meta.weights_file);
  // The writer's private folder, with its trailing '/'.
  const std::string folder = weights_path.substr(0, weights_path.size() - snap.meta.weights_file.size());
  return w.commit(write_snapshot(folder, snap));
}

CheckpointInfo save_checkpoint(const CheckpointDir& ckpts, const std::string& name, const TrainState& s,
                               const CheckpointMeta& m, const TrainTensors* tensors) {
  return save_snapshot(ckpts, name, describe(s, m, tensors, /*copy=*/false));
}

LoadedCheckpoint load_train_state(const std::string& dir, const std::string& json_text, const std::string& where,
                                  const TrainState& s, const LoadOptions& o) {
  LoadedCheckpoint out;
  out.where = where;
  const json j = parse_json(json_text, "Checkpoint '" + where + "'");
  try {
    CheckpointMeta& m = out.meta;
    m.format = j.at("format").get<std::string>();
    m.progress.iteration = j.value("iteration", int64_t{0});
    m.progress.consumed_train_samples = j.value("consumed_train_samples", int64_t{0});
    m.progress.consumed_valid_samples = j.value("consumed_valid_samples", int64_t{0});
    m.weights_file = j.at("weights").get<std::string>();
    m.optimizer_file = j.value("optimizer_state", std::string());
    m.args_json = j.contains("args") ? j.at("args").dump() : "{}";
    m.user_json = j.contains("user") ? j.at("user").dump() : "null";
    for (const json& r : j.value("rng", json::array()))
      m.rng.push_back({r.at("seed").get<uint64_t>(), r.at("offset").get<uint64_t>()});
    for (const json& r : j.value("tp_rng", json::array()))
      m.tp_rng.push_back({r.at("seed").get<uint64_t>(), r.at("offset").get<uint64_t>()});
    for (const json& r : j.value("pp_rng", json::array()))
      m.pp_rng.push_back({r.at("seed").get<uint64_t>(), r.at("offset").get<uint64_t>()});
    const bool tp_sharded = o.tp && o.tp->active();
    const parallel::PipelineParallel* pp = o.pp && o.pp->active() ? o.pp : nullptr;
    // Expert parallelism: this rank's experts only (picked by name as a stage's parameters).
    const bool by_name = pp || (o.ep && o.ep->active());
    const parallel::PipelineParallel none;
    const bool sharded = tp_sharded || by_name;
    // Under pipeline (or expert) parallelism this rank's entries, then
    // (tensor parallelism) this rank's shards of them.
    auto local_entries = [&](const nn::TensorMap& whole, const std::set<std::string>& names, bool optimizer,
                             const std::string& file) {
      const nn::TensorMap mine = by_name ? stage_entries(whole, names, pp ? *pp : none, optimizer) : whole;
      return tp_sharded ? shard_entries(mine, *o.tp, optimizer, file) : mine;
    };
    QK_CHECK_AS(IoError, m.progress.iteration >= 0 && m.progress.consumed_train_samples >= 0,
                "Checkpoint '", where, "' is inconsistent: iteration ", m.progress.iteration, ", consumed samples ",
                m.progress.consumed_train_samples);

    if (o.load_model && s.model) {
      const std::string weights = dir + m.weights_file;
      QK_CHECK_AS(IoError, file_exists(weights), "Checkpoint '", where, "' names weights '", weights,
                  "', which do not exist");
      if (sharded) {
        nn::NamedTensors local;
        for (auto& [k, t] :
             local_entries(nn::load_safetensors(weights).tensors, stage_parameter_names(*s.model), false, weights))
          local.insert(k, t);
        try {
          s.model->load_state_dict(local);
        } catch (const Error& e) {
          QK_THROW(ValueError, "loading '", weights, "': ", e.message());
        }
      } else {
        nn::load(*s.model, weights);
      }
    }
    if (o.finetune) {
      // Megatron's --finetune: the weights only, counting from zero.
      m.progress = {};
      if (s.optimizer) s.optimizer->reload_model_params();
      return out;
    }
    if (!o.no_load_optim) {
      if (s.optimizer) {
        QK_CHECK_AS(IoError, !m.optimizer_file.empty(), "Checkpoint '", where,
                    "' holds no optimizer state (saved with --no-save-optim?); pass --no-load-optim");
        const std::string optim_path = dir + m.optimizer_file;
        if (sharded) {
          nn::SafetensorsFile f = nn::load_safetensors(optim_path);
          const std::set<std::string> names(s.optimizer->names().begin(), s.optimizer->names().end());
          nn::Metadata metadata = f.metadata;
          if (by_name) {  // this stage's (this rank's) parameters of each group
            metadata = stage_metadata(f.metadata, names, pp ? *pp : none);
            set_group_sizes(metadata, optimizer_group_sizes(*s.optimizer));
          }
          s.optimizer->load_state_by_name({local_entries(f.tensors, names, true, optim_path), metadata}, optim_path);
        } else {
          s.optimizer->load_state(optim_path);
        }
        if (optim::LossScaler* scaler = s.optimizer->scaler(); scaler && j.contains("grad_scaler"))
          scaler->load_state_dict(j.at("grad_scaler").get<std::map<std::string, double>>());
        out.optimizer_loaded = true;
      }
      if (s.scheduler && j.contains("scheduler")) s.scheduler->load_state_dict(scheduler_state(j.at("scheduler")));
    } else if (s.optimizer) {
      s.optimizer->reload_model_params();
    }
    if (!o.no_load_rng && !m.rng.empty()) {
      // Megatron restores rank 0's generator on every rank (without
      // --data-parallel-random-init): ranks draw the same dropout masks.
      // Under pipeline parallelism each stage has its own (Megatron seeds
      // seed + 100 x pipeline rank), when saved at this pipeline size.
      const bool per_stage = pp && m.pp_rng.size() == static_cast<size_t>(pp->size());
      const RngState& r = per_stage ? m.pp_rng[static_cast<size_t>(pp->rank())] : m.rng.front();
      default_generator().set_state(r.seed, r.offset);
      out.rng_loaded = true;
    }
    if (!o.no_load_rng && o.tp && o.tp->generator) {
      // Each tensor-parallel rank's own generator (Megatron's model-parallel
      // RNG state); from another tensor-parallel size there is no matching
      // one, and this rank's stays as seeded (dropout masks differ per layout anyway).
      const size_t stages = pp ? static_cast<size_t>(pp->size()) : 1;
      if (m.tp_rng.size() == stages * static_cast<size_t>(o.tp->size())) {
        const size_t stage = pp ? static_cast<size_t>(pp->rank()) : 0;
        const RngState& r = m.tp_rng[stage * static_cast<size_t>(o.tp->size()) + static_cast<size_t>(o.tp->rank())];
        o.tp->generator->set_state(r.seed, r.offset);
      } else if (o.tp->rank() == 0 && o.rank == 0) {
        QK_INFO("checkpoint '{}' holds tensor-parallel dropout generators for {} ranks, this run has {}: they start "
                "from their seeds", where, m.tp_rng.size(), o.tp->size());
      }
    }
  } catch (const json::exception& e) {
    QK_THROW(IoError, "Cannot read checkpoint '", where, "': ", e.what(),
             "; it should be a folder written by qk::train::save_checkpoint");
  }
  return out;
}

std::optional<CheckpointInfo> find_checkpoint(const std::string& load, std::vector<std::string>* skipped) {
  QK_CHECK_AS(ValueError, !load.empty(), "find_checkpoint: empty path");
  if (file_exists(load + "/manifest.json")) {
    std::string root = load;
    while (root.size() > 1 && root.back() == '/') root.pop_back();
    const size_t slash = root.find_last_of('/');
    const CheckpointDir parent(slash == std::string::npos ? "." : root.substr(0, slash));
    return parent.verify(root.substr(slash == std::string::npos ? 0 : slash + 1));
  }
  return CheckpointDir(load).latest_valid(skipped);
}

}  // namespace qk::train
