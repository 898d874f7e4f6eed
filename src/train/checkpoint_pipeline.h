// Each pipeline stage's share of a checkpoint's whole tensors (see
// checkpoint_pipeline.cc; gather_pipeline_stages is in qk/train/checkpoint.h).
#pragma once

#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "qk/train/checkpoint.h"

namespace qk::train {

// The names of the stage's state dict (its parameters and buffers).
std::set<std::string> stage_parameter_names(const nn::Module& model);

// The entries of `whole` that belong to `names` ("KEY/NAME" for optimizer
// entries), plus pp.tied_source's under pp.tied_parameter's name on the
// stage that holds the tied copy.
nn::TensorMap stage_entries(const nn::TensorMap& whole, const std::set<std::string>& names,
                            const parallel::PipelineParallel& pp, bool optimizer);
// The same for the optimizer's metadata ("step/NAME"; entries without a
// parameter kept).
nn::Metadata stage_metadata(const nn::Metadata& whole, const std::set<std::string>& names,
                            const parallel::PipelineParallel& pp);

// Parameters per optimizer group, `leave_out` not counted.
std::vector<int64_t> optimizer_group_sizes(const optim::MixedPrecisionOptimizer& opt,
                                           const std::string& leave_out = "");
// optimizer_group_sizes plus the parameters of other expert-parallel ranks
// that gather_expert_parallel counted into `metadata`'s group sizes.
std::vector<int64_t> gathered_group_sizes(const optim::MixedPrecisionOptimizer& opt, const nn::Metadata& metadata,
                                          const std::string& leave_out = "");
// "group.G.num_params" of the optimizer state's metadata set to sizes[G].
void set_group_sizes(nn::Metadata& metadata, const std::vector<int64_t>& sizes);

// The wire format of a checkpoint gather (pipeline stages, expert-parallel
// ranks): a JSON header whose "entries" list [kind, name, dtype, shape]
// (kind 0: a weight, 1: an optimizer tensor), then the tensors in order.
// add_parcel_entry appends one tensor; send_checkpoint_parcel sends the
// header and tensors to rank 0 of `group`; on rank 0,
// recv_checkpoint_parcel stores rank `from`'s tensors in `t` by name and
// returns its header (errors name `who`, e.g. "gather_pipeline_stages: stage").
void add_parcel_entry(nlohmann::json& entries, std::vector<Tensor>& payload, int kind, const std::string& name,
                      const Tensor& x);
void send_checkpoint_parcel(dist::ProcessGroup& group, const nlohmann::json& header,
                            const std::vector<Tensor>& payload);
nlohmann::json recv_checkpoint_parcel(dist::ProcessGroup& group, int from, TrainTensors& t, const char* who);

}  // namespace qk::train
