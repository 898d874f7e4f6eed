// pretrain_gpt's hooks into the model's MoE layers (Megatron's MoE parts of
// training.py and schedules.py): the auxiliary losses' backward scale, the
// expert-bias update after each step, and the statistics it logs (the
// load-balancing and z losses in the iteration line, per-layer lines with
// --moe-per-layer-logging, and the expert-load heat map).
//
//   GptMoeLayers moe({gpt.get()}, cfg);               // or a pipeline stage's chunks
//   moe.set_aux_loss_scale(opt.loss_scale() / num_microbatches);
//   ... after each training micro-batch's forward: moe.record();
//   ... after each step: moe.update_expert_bias(dp);
//   ... at each log (every rank): auto log = moe.take_interval(dp, pp, ep_size);
//   moe.write_heatmap("out/moe_expert_load.png");
#pragma once

#include <map>
#include <string>
#include <vector>

#include "qk/dist/process_group.h"
#include "qk/nn/module.h"
#include "qk/transformer/config.h"
#include "qk/transformer/moe.h"

namespace qk::recipes {

// One MoE layer's statistics over a log interval, over every rank's tokens.
struct MoeLayerLog {
  int64_t layer = 0;                        // 1-based, as Megatron's layer_number
  double load_balancing_loss = 0, z_loss = 0;  // means over the interval's training micro-batches
  std::vector<double> tokens_per_expert;    // kept routes per expert, summed over the interval
  double dropped_routes = 0;                // summed over the interval
};

class GptMoeLayers {
 public:
  // The MoE layers of `parts` (modules named as the unsplit model:
  // "decoder.layers.{i}.mlp"), the model's config.
  GptMoeLayers(const std::vector<nn::Module*>& parts, const transformer::TransformerConfig& config);
  bool empty() const { return layers_.empty(); }

  // Megatron's MoEAuxLossAutoScaler.set_loss_scale(loss_scale / num_microbatches).
  void set_aux_loss_scale(double scale);
  // DeepSeek-V3's expert-bias update (with moe_router_enable_expert_bias)
  // from the tokens every data-parallel rank routed this step.
  void update_expert_bias(dist::ProcessGroup* dp);
  // After a training micro-batch's forward: its layers' statistics into the interval.
  void record();
  // The interval's statistics of every MoE layer of the model, on every
  // rank (collective over dp and pp, each when given); resets the interval.
  // ep_size: the statistics' tokens already count the expert-parallel group's.
  std::vector<MoeLayerLog> take_interval(dist::ProcessGroup* dp, dist::ProcessGroup* pp, int ep_size);

  // Heat map of the expert load: one column per logged interval (share of
  // each expert in the layer's kept routes), one panel per MoE layer.
  void add_heatmap_column(int64_t iteration, const std::vector<MoeLayerLog>& logs);
  void write_heatmap(const std::string& path) const;
  // One JSON line per MoE layer appended to `path`: {"iteration", "layer",
  // "load_balancing_loss", "z_loss", "tokens_per_expert", "dropped_routes"}.
  static void append_jsonl(const std::string& path, int64_t iteration, const std::vector<MoeLayerLog>& logs);
  // Before a run appends: a fresh run (resume_iteration < 0) starts `path`
  // empty; a resumed one keeps the lines up to its checkpoint's iteration,
  // so iterations a killed run logged past it are not there twice (as
  // MetricsLog does with metrics.jsonl). A last line cut short by a kill is
  // dropped; any other line that is not a record is an IoError naming it.
  static void start_jsonl(const std::string& path, int64_t resume_iteration);

 private:
  struct Layer {
    int64_t number = 0;
    transformer::MoELayerImpl* moe = nullptr;
  };
  transformer::TransformerConfig config_;
  std::vector<Layer> layers_;
  // Per global layer (index number-1): lb sum, z sum, micro-batches, dropped, tokens x E.
  std::vector<double> sums_;
  std::vector<double> heat_x_;
  std::map<int64_t, std::vector<std::vector<double>>> heat_;  // layer -> rows (experts) x columns
};

// The iteration line's MoE losses (Megatron's track_moe_metrics names):
// "load_balancing_loss" and "z_loss", each the mean over the MoE layers
// (left out when its coefficient is 0).
std::map<std::string, double> moe_line_losses(const std::vector<MoeLayerLog>& logs,
                                              const transformer::TransformerConfig& config);
// " [qk] MoE layer 2 | load_balancing_loss: ... | z_loss: ... | tokens per expert: [...] | dropped routes: N |"
std::string moe_layer_line(const MoeLayerLog& log);

}  // namespace qk::recipes
