// PNG figures for the CIFAR-10 commands, drawn with cairo.
//
//   plot_training_curves("out/training_curves.png", "SimpleCNN on CIFAR-10",
//                        {train_loss, val_loss, train_acc, val_acc});
//   plot_image_grid("inference_results.png", tiles, 4);
//
// Files are written to PATH.tmp and renamed, so a reader never sees half a
// PNG; a cairo failure throws qk::IoError naming the file.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace qk::cli {

struct TrainingCurves {
  std::vector<double> train_loss, val_loss;  // one per epoch
  std::vector<double> train_acc, val_acc;    // fractions 0..1
};

// Two panels (loss, accuracy) against epoch, train vs validation, with axes,
// ticks, a legend and a title.
void plot_training_curves(const std::string& path, const std::string& title, const TrainingCurves& c);

struct ImageTile {
  const uint8_t* chw = nullptr;  // [3, 32, 32] u8, channel-major
  std::string caption1;          // e.g. "true: cat"
  std::string caption2;          // e.g. "pred: dog 55.7%"
  bool correct = true;           // caption colour: green / red
};

// A grid of upscaled images with two caption lines under each.
void plot_image_grid(const std::string& path, const std::string& title, const std::vector<ImageTile>& tiles,
                     int columns);

}  // namespace qk::cli
