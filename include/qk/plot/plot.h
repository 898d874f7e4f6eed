// PNG figures of training runs, drawn with cairo: loss/LR curves of the
// trainer, the CIFAR-10 train/validation curves and image grids.
//
//   qk::plot::plot_curves("run/curves.png", "GPT on docs",
//       {{"Loss", "iteration", "lm loss", {{"train", its, losses}, {"validation", vits, vlosses}}},
//        {"Learning rate", "iteration", "lr", {{"lr", its, lrs}}}});
//   qk::plot::plot_training_curves("out/training_curves.png", "SimpleCNN on CIFAR-10",
//                                   {train_loss, val_loss, train_acc, val_acc});
//   qk::plot::plot_image_grid("inference_results.png", "...", tiles, 4);
//   qk::plot::plot_heatmaps("out/moe_expert_load.png", "Expert load", "iteration", "expert",
//                            "share of routed tokens", {{"layer 2", iterations, load_rows}});
//
// Files are written to PATH.tmp and renamed, so a reader never sees half a
// PNG; a cairo failure throws qk::IoError naming the file.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace qk::plot {

struct CurveSeries {
  std::string label;
  std::vector<double> x, y;  // same length; non-finite y values are left out
};

struct CurvePanel {
  std::string title, x_label, y_label;
  std::vector<CurveSeries> series;  // up to 6, each its own colour
};

// Panels side by side, each with axes, ticks, a grid and a legend.
void plot_curves(const std::string& path, const std::string& title, const std::vector<CurvePanel>& panels);

struct TrainingCurves {
  std::vector<double> train_loss, val_loss;  // one per epoch
  std::vector<double> train_acc, val_acc;    // fractions 0..1
};

// Two panels (loss, accuracy in %) against epoch, train vs validation.
void plot_training_curves(const std::string& path, const std::string& title, const TrainingCurves& c);

struct ImageTile {
  const uint8_t* chw = nullptr;  // [3, 32, 32] u8, channel-major
  std::string caption1;          // e.g. "true: cat"
  std::string caption2;          // e.g. "pred: dog 55.7%"
  bool correct = true;           // caption colour: green / red
};

// A grid of upscaled 32x32 images with two caption lines under each.
void plot_image_grid(const std::string& path, const std::string& title, const std::vector<ImageTile>& tiles,
                     int columns);

struct HeatmapPanel {
  std::string title;
  std::vector<double> x;                  // one label per column (e.g. the iteration)
  std::vector<std::vector<double>> rows;  // rows[r][c]: row r (drawn top to bottom) at column c
};

// Heat maps stacked top to bottom, one colour scale (viridis, 0 to the
// largest value of all panels) with its bar on the right.
void plot_heatmaps(const std::string& path, const std::string& title, const std::string& x_label,
                   const std::string& y_label, const std::string& value_label, const std::vector<HeatmapPanel>& panels);

}  // namespace qk::plot
