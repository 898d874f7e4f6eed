// plot_heatmaps: the PNG's cells carry the colour of their value on one
// scale (viridis from 0 to the largest value), and bad input is an error.
#include <cairo.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <memory>

#include "qk/base/error.h"
#include "qk/plot/plot.h"

namespace qk::plot {
namespace {

struct Pixel {
  int r, g, b;
};

Pixel pixel_at(const std::string& path, int x, int y) {
  std::unique_ptr<cairo_surface_t, decltype(&cairo_surface_destroy)> s(
      cairo_image_surface_create_from_png(path.c_str()), cairo_surface_destroy);
  EXPECT_EQ(cairo_surface_status(s.get()), CAIRO_STATUS_SUCCESS);
  cairo_surface_flush(s.get());
  const unsigned char* d = cairo_image_surface_get_data(s.get());
  const uint32_t v = *reinterpret_cast<const uint32_t*>(d + y * cairo_image_surface_get_stride(s.get()) + x * 4);
  return {static_cast<int>((v >> 16) & 255), static_cast<int>((v >> 8) & 255), static_cast<int>(v & 255)};
}

TEST(PlotHeatmaps, CellsTakeTheirValuesColour) {
  const std::string path = (std::filesystem::temp_directory_path() / "qk_heatmap_test.png").string();
  // Two experts over four iterations; expert 1 takes everything at iteration 3.
  HeatmapPanel p{"layer 1", {1, 2, 3, 4}, {{0.5, 0.5, 0.0, 0.5}, {0.5, 0.5, 1.0, 0.5}}};
  plot_heatmaps(path, "Expert load", "iteration", "expert", "share", {p});
  // Layout as drawn: left 90, width 720 (180 per column), top 60, rows 24 px.
  const Pixel zero = pixel_at(path, 90 + 2 * 180 + 90, 60 + 12);   // row 0, column 2: 0
  const Pixel full = pixel_at(path, 90 + 2 * 180 + 90, 60 + 36);   // row 1, column 2: the maximum
  const Pixel half = pixel_at(path, 90 + 0 * 180 + 90, 60 + 12);   // 0.5
  EXPECT_NEAR(zero.r, 68, 2);  // viridis(0) = (0.267, 0.005, 0.329)
  EXPECT_NEAR(zero.b, 84, 2);
  EXPECT_NEAR(full.r, 253, 2);  // viridis(1) = (0.993, 0.906, 0.144)
  EXPECT_NEAR(full.g, 231, 2);
  EXPECT_NEAR(half.g, 145, 2);  // viridis(0.5) = (0.128, 0.567, 0.551)
  std::filesystem::remove(path);
}

TEST(PlotHeatmaps, BadInputIsAnError) {
  const std::string path = (std::filesystem::temp_directory_path() / "qk_heatmap_bad.png").string();
  EXPECT_THROW(plot_heatmaps(path, "t", "x", "y", "v", {}), Error);
  EXPECT_THROW(plot_heatmaps(path, "t", "x", "y", "v", {{"ragged", {1, 2}, {{1.0}}}}), Error);
  EXPECT_THROW(plot_heatmaps("/nonexistent-dir/x.png", "t", "x", "y", "v", {{"ok", {1}, {{1.0}}}}), IoError);
}

}  // namespace
}  // namespace qk::plot
