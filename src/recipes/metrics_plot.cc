#include "qk/recipes/metrics_plot.h"

#include <map>
#include <utility>

#include "qk/plot/plot.h"
#include "qk/train/trainer.h"

namespace qk::recipes {

void plot_metrics(const std::string& path, const std::string& title, const train::MetricsLog& log) {
  std::map<std::string, plot::CurveSeries> train, valid;
  plot::CurveSeries lr{"learning rate", {}, {}};
  for (const train::MetricsLog::Record& r : log.records()) {
    const double x = static_cast<double>(r.iteration);
    for (const auto& [k, v] : r.values) {
      if (r.kind == "train" && train::is_loss_field(k)) {
        train[k].label = k;
        train[k].x.push_back(x), train[k].y.push_back(v);
      } else if (r.kind == "valid" && k != "consumed_valid_samples" && k != "seconds") {
        valid[k].label = "validation " + k;
        valid[k].x.push_back(x), valid[k].y.push_back(v);
      }
    }
    if (r.kind == "train" && r.values.count("learning_rate"))
      lr.x.push_back(x), lr.y.push_back(r.values.at("learning_rate"));
  }
  plot::CurvePanel loss{"Loss", "iteration", "loss", {}};
  for (auto& [k, s] : train) loss.series.push_back(std::move(s));
  for (auto& [k, s] : valid) loss.series.push_back(std::move(s));
  plot::CurvePanel rate{"Learning rate", "iteration", "learning rate", {std::move(lr)}};
  plot::plot_curves(path, title, {std::move(loss), std::move(rate)});
}

}  // namespace qk::recipes
