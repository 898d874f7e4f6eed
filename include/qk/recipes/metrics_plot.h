// The trainer's metrics file drawn as a PNG: the losses (training and
// validation) and the learning rate against the iteration.
//
//   cb.on_metrics = [](const qk::train::MetricsLog& log) {
//     qk::recipes::plot_metrics("run/training_curves.png", "GPT on docs", log);
//   };
#pragma once

#include <string>

#include "qk/train/metrics_log.h"

namespace qk::recipes {

void plot_metrics(const std::string& path, const std::string& title, const train::MetricsLog& log);

}  // namespace qk::recipes
