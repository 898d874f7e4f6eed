// pretrain_gpt's MoE hooks: aux-loss scale, expert-bias updates, interval
// statistics reduced over the ranks, the expert-load heat map.
#include "qk/recipes/gpt_pretrain_moe.h"

#include <fmt/format.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>

#include "qk/base/error.h"
#include "qk/base/file_io.h"
#include "qk/plot/plot.h"

namespace qk::recipes {

namespace {

// "decoder.layers.{i}.mlp" -> i + 1; 0 when the name is not a layer's MLP.
int64_t layer_number_of(const std::string& name) {
  constexpr std::string_view kPrefix = "decoder.layers.";
  if (name.rfind(kPrefix, 0) != 0) return 0;
  const size_t dot = name.find('.', kPrefix.size());
  if (dot == std::string::npos || name.substr(dot) != ".mlp") return 0;
  return std::stoll(name.substr(kPrefix.size(), dot - kPrefix.size())) + 1;
}

}  // namespace

GptMoeLayers::GptMoeLayers(const std::vector<nn::Module*>& parts, const transformer::TransformerConfig& config)
    : config_(config) {
  for (nn::Module* part : parts)
    for (const auto& item : part->named_modules())
      if (auto* moe = dynamic_cast<transformer::MoELayerImpl*>(item.value().get())) {
        const int64_t number = layer_number_of(item.key());
        QK_CHECK(number > 0, "GptMoeLayers: an MoE layer at '", item.key(), "' is not a decoder layer's MLP");
        layers_.push_back({number, moe});
      }
  sums_.assign(static_cast<size_t>(config_.num_layers * (4 + config_.num_moe_experts)), 0.0);
}

void GptMoeLayers::set_aux_loss_scale(double scale) {
  for (const Layer& l : layers_) l.moe->router->set_aux_loss_backward_scale(scale);
}

void GptMoeLayers::update_expert_bias(dist::ProcessGroup* dp) {
  if (!config_.moe_router_enable_expert_bias) return;
  for (const Layer& l : layers_) l.moe->router->update_expert_bias(dp && dp->size() > 1 ? dp : nullptr);
}

void GptMoeLayers::record() {
  const size_t width = 4 + static_cast<size_t>(config_.num_moe_experts);
  for (const Layer& l : layers_) {
    const transformer::MoELayerStats& s = l.moe->last_stats();
    double* v = sums_.data() + static_cast<size_t>(l.number - 1) * width;
    v[0] += s.load_balancing_loss;
    v[1] += s.z_loss;
    v[2] += 1;
    v[3] += static_cast<double>(s.dropped_routes);
    for (size_t e = 0; e < s.tokens_per_expert.size() && e + 4 < width; ++e)
      v[4 + e] += static_cast<double>(s.tokens_per_expert[e]);
  }
}

std::vector<MoeLayerLog> GptMoeLayers::take_interval(dist::ProcessGroup* dp, dist::ProcessGroup* pp, int ep_size) {
  Tensor t = from_vector<double>(sums_, {static_cast<int64_t>(sums_.size())});
  // Data-parallel ranks routed other tokens; pipeline stages hold other layers.
  if (dp && dp->size() > 1) dp->all_reduce(t);
  if (pp && pp->size() > 1) pp->all_reduce(t);
  const std::vector<double> v = t.to_vector<double>();
  std::fill(sums_.begin(), sums_.end(), 0.0);
  const size_t width = 4 + static_cast<size_t>(config_.num_moe_experts);
  std::vector<MoeLayerLog> out;
  for (int64_t l = 1; l <= config_.num_layers; ++l) {
    if (!config_.is_moe_layer(l)) continue;
    const double* row = v.data() + static_cast<size_t>(l - 1) * width;
    MoeLayerLog log;
    log.layer = l;
    const double n = std::max(row[2], 1.0);
    log.load_balancing_loss = row[0] / n;
    log.z_loss = row[1] / n;
    // Each expert-parallel rank's statistics count the whole group's tokens.
    log.dropped_routes = row[3] / ep_size;
    for (size_t e = 4; e < width; ++e) log.tokens_per_expert.push_back(row[e] / ep_size);
    out.push_back(std::move(log));
  }
  return out;
}

void GptMoeLayers::add_heatmap_column(int64_t iteration, const std::vector<MoeLayerLog>& logs) {
  heat_x_.push_back(static_cast<double>(iteration));
  for (const MoeLayerLog& log : logs) {
    auto& rows = heat_[log.layer];
    rows.resize(log.tokens_per_expert.size());
    const double total = std::accumulate(log.tokens_per_expert.begin(), log.tokens_per_expert.end(), 0.0);
    for (size_t e = 0; e < rows.size(); ++e) {
      rows[e].resize(heat_x_.size() - 1, 0.0);  // a layer missing from earlier columns
      rows[e].push_back(total > 0 ? log.tokens_per_expert[e] / total : 0.0);
    }
  }
}

void GptMoeLayers::write_heatmap(const std::string& path) const {
  if (heat_.empty() || heat_x_.empty()) return;
  std::vector<plot::HeatmapPanel> panels;
  for (const auto& [layer, rows] : heat_) panels.push_back({fmt::format("layer {}", layer), heat_x_, rows});
  plot::plot_heatmaps(path,
                fmt::format("Expert load: {} experts, top-{} routing", config_.num_moe_experts,
                            config_.moe_router_topk),
                "iteration", "expert", "share of routed tokens", panels);
}

void GptMoeLayers::start_jsonl(const std::string& path, int64_t resume_iteration) {
  std::string kept;
  if (resume_iteration >= 0 && file_exists(path)) {
    const std::string text = read_file(path);
    size_t begin = 0;
    for (int n = 1; begin < text.size(); ++n) {
      const size_t end = text.find('\n', begin);
      const bool torn = end == std::string::npos;  // the last line, unfinished
      const std::string line = text.substr(begin, torn ? std::string::npos : end - begin);
      begin = torn ? text.size() : end + 1;
      if (line.empty()) continue;
      int64_t iteration = 0;
      try {
        iteration = nlohmann::json::parse(line).at("iteration").get<int64_t>();
      } catch (const nlohmann::json::exception& e) {
        if (torn) break;
        QK_THROW(IoError, "MoE statistics file '", path, "' line ", n, " is not a record: ", e.what(),
                 " (move the file away to start it afresh)");
      }
      if (iteration <= resume_iteration) kept += line + "\n";
    }
  }
  atomic_write_file(path, kept);
}

void GptMoeLayers::append_jsonl(const std::string& path, int64_t iteration, const std::vector<MoeLayerLog>& logs) {
  std::ofstream out(path, std::ios::app);
  QK_CHECK_AS(IoError, out.good(), "cannot append MoE statistics to '", path, "'");
  for (const MoeLayerLog& l : logs)
    out << nlohmann::json{{"iteration", iteration},
                          {"layer", l.layer},
                          {"load_balancing_loss", l.load_balancing_loss},
                          {"z_loss", l.z_loss},
                          {"tokens_per_expert", l.tokens_per_expert},
                          {"dropped_routes", l.dropped_routes}}
               .dump()
        << "\n";
}

std::map<std::string, double> moe_line_losses(const std::vector<MoeLayerLog>& logs,
                                              const transformer::TransformerConfig& config) {
  std::map<std::string, double> out;
  if (logs.empty()) return out;
  double lb = 0, z = 0;
  for (const MoeLayerLog& l : logs) lb += l.load_balancing_loss, z += l.z_loss;
  const auto n = static_cast<double>(logs.size());
  if (config.moe_aux_loss_coeff > 0) out["load_balancing_loss"] = lb / n;
  if (config.moe_z_loss_coeff > 0) out["z_loss"] = z / n;
  return out;
}

std::string moe_layer_line(const MoeLayerLog& log) {
  std::string tokens;
  for (double t : log.tokens_per_expert) tokens += fmt::format("{}{:.0f}", tokens.empty() ? "" : ", ", t);
  return fmt::format(" [qk] MoE layer {} | load_balancing_loss: {:.6E} | z_loss: {:.6E} | tokens per expert: [{}] | "
                     "dropped routes: {:.0f} |",
                     log.layer, log.load_balancing_loss, log.z_loss, tokens, log.dropped_routes);
}

}  // namespace qk::recipes
