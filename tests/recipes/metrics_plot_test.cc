// plot_metrics: the trainer's metrics file as a PNG of its losses and
// learning rate; a file that cannot be written is an IoError naming it.
#include "qk/recipes/metrics_plot.h"

#include <gtest/gtest.h>

#include <string>

#include "data/test_util.h"
#include "qk/base/error.h"
#include "qk/base/file_io.h"

namespace qk::test {
namespace {

TEST(MetricsPlot, DrawsTheLossesAndLearningRateOfAMetricsFile) {
  TempDir dir("metrics_plot");
  {
    train::MetricsLog log(dir.path() + "/metrics.jsonl", -1);
    for (int64_t it = 1; it <= 4; ++it)
      log.write("train", it, {{"lm loss", 5.0 - static_cast<double>(it)}, {"learning_rate", 1e-3 * it},
                              {"grad_norm", 1.0}, {"comm/dp", 2.0}});
    log.write("valid", 4, {{"lm loss", 1.5}, {"seconds", 0.1}});
    recipes::plot_metrics(dir.path() + "/curves.png", "tiny", log);
  }
  const std::string png = read_file(dir.path() + "/curves.png");
  ASSERT_GT(png.size(), 8u);
  EXPECT_EQ(png.substr(1, 3), "PNG");
  EXPECT_FALSE(file_exists(dir.path() + "/curves.png.tmp"));

  train::MetricsLog log(dir.path() + "/metrics.jsonl", 4);
  EXPECT_THROW(recipes::plot_metrics(dir.path() + "/no/such/folder/curves.png", "tiny", log), IoError);
}

}  // namespace
}  // namespace qk::test
