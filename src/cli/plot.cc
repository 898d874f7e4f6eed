#include "plot.h"

#include <cairo.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>

#include "qk/base/error.h"

namespace qk::cli {
namespace {

using Surface = std::unique_ptr<cairo_surface_t, decltype(&cairo_surface_destroy)>;
using Context = std::unique_ptr<cairo_t, decltype(&cairo_destroy)>;

void write_png(cairo_surface_t* s, const std::string& path) {
  const std::string tmp = path + ".tmp";
  const cairo_status_t st = cairo_surface_write_to_png(s, tmp.c_str());
  if (st != CAIRO_STATUS_SUCCESS) {
    std::remove(tmp.c_str());
    QK_THROW(IoError, "Cannot write PNG '", path, "': ", cairo_status_to_string(st),
             "; check that the folder exists and is writable");
  }
  QK_CHECK_AS(IoError, std::rename(tmp.c_str(), path.c_str()) == 0, "Cannot rename '", tmp, "' to '", path, "'");
}

void text(cairo_t* cr, double x, double y, const std::string& s, double size, double align = 0) {
  cairo_set_font_size(cr, size);
  cairo_text_extents_t e;
  cairo_text_extents(cr, s.c_str(), &e);
  cairo_move_to(cr, x - align * e.width, y);
  cairo_show_text(cr, s.c_str());
}

struct Series {
  const std::vector<double>* v;
  double r, g, b;
  const char* label;
};

// One panel: a frame at (x, y, w, h), ticks, the series as lines with dots.
void panel(cairo_t* cr, double x, double y, double w, double h, const std::string& title, const std::string& ylabel,
           const std::vector<Series>& series, double scale) {
  size_t n = 0;
  double lo = 1e300, hi = -1e300;
  for (const auto& s : series) {
    n = std::max(n, s.v->size());
    for (double v : *s.v) lo = std::min(lo, v * scale), hi = std::max(hi, v * scale);
  }
  if (n == 0) lo = 0, hi = 1;
  if (hi - lo < 1e-9) lo -= 0.5, hi += 0.5;
  const double pad = (hi - lo) * 0.08;
  lo -= pad, hi += pad;
  const double xmax = std::max<double>(2, static_cast<double>(n));
  auto px = [&](double e) { return x + (e - 1) / (xmax - 1) * w; };
  auto py = [&](double v) { return y + h - (v - lo) / (hi - lo) * h; };

  cairo_set_source_rgb(cr, 0, 0, 0);
  text(cr, x + w / 2, y - 12, title, 16, 0.5);
  cairo_set_line_width(cr, 1);
  for (int i = 0; i <= 5; ++i) {  // horizontal grid and y ticks
    const double v = lo + (hi - lo) * i / 5;
    cairo_set_source_rgb(cr, 0.88, 0.88, 0.88);
    cairo_move_to(cr, x, py(v)), cairo_line_to(cr, x + w, py(v)), cairo_stroke(cr);
    cairo_set_source_rgb(cr, 0, 0, 0);
    // enough decimals that neighbouring ticks differ
    const int digits = std::clamp(static_cast<int>(std::ceil(-std::log10((hi - lo) / 5))) + 1, 0, 5);
    text(cr, x - 6, py(v) + 4, fmt::format("{:.{}f}", v, digits), 11, 1);
  }
  const size_t step = std::max<size_t>(1, (static_cast<size_t>(xmax) + 9) / 10);
  for (size_t e = 1; e <= static_cast<size_t>(xmax); e += step) {
    text(cr, px(static_cast<double>(e)), y + h + 16, std::to_string(e), 11, 0.5);
  }
  cairo_rectangle(cr, x, y, w, h), cairo_stroke(cr);
  text(cr, x + w / 2, y + h + 34, "epoch", 12, 0.5);
  cairo_save(cr);
  cairo_translate(cr, x - 46, y + h / 2);
  cairo_rotate(cr, -M_PI / 2);
  text(cr, 0, 0, ylabel, 12, 0.5);
  cairo_restore(cr);

  double ly = y + 18;
  for (const auto& s : series) {
    cairo_set_source_rgb(cr, s.r, s.g, s.b);
    cairo_set_line_width(cr, 2);
    for (size_t i = 0; i < s.v->size(); ++i) {
      const double X = px(static_cast<double>(i + 1)), Y = py((*s.v)[i] * scale);
      if (i == 0) cairo_move_to(cr, X, Y); else cairo_line_to(cr, X, Y);
    }
    cairo_stroke(cr);
    for (size_t i = 0; i < s.v->size(); ++i) {
      cairo_arc(cr, px(static_cast<double>(i + 1)), py((*s.v)[i] * scale), 3.5, 0, 2 * M_PI);
      cairo_fill(cr);
    }
    // legend entry in the top-right corner
    cairo_move_to(cr, x + w - 130, ly - 4), cairo_line_to(cr, x + w - 105, ly - 4), cairo_stroke(cr);
    cairo_set_source_rgb(cr, 0, 0, 0);
    text(cr, x + w - 98, ly, s.label, 12);
    ly += 18;
  }
}

}  // namespace

void plot_training_curves(const std::string& path, const std::string& title, const TrainingCurves& c) {
  const int W = 1100, H = 480;
  Surface s(cairo_image_surface_create(CAIRO_FORMAT_RGB24, W, H), cairo_surface_destroy);
  Context cr(cairo_create(s.get()), cairo_destroy);
  cairo_set_source_rgb(cr.get(), 1, 1, 1);
  cairo_paint(cr.get());
  cairo_select_font_face(cr.get(), "sans-serif", CAIRO_FONT_SLANT_NORMAL, CAIRO_FONT_WEIGHT_NORMAL);
  cairo_set_source_rgb(cr.get(), 0, 0, 0);
  text(cr.get(), W / 2.0, 28, title, 20, 0.5);
  const double blue[3] = {0.12, 0.47, 0.71}, orange[3] = {1.0, 0.5, 0.05};
  panel(cr.get(), 80, 80, 430, 320, "Loss", "cross-entropy",
        {{&c.train_loss, blue[0], blue[1], blue[2], "train"},
         {&c.val_loss, orange[0], orange[1], orange[2], "validation"}},
        1.0);
  panel(cr.get(), 620, 80, 430, 320, "Accuracy", "accuracy (%)",
        {{&c.train_acc, blue[0], blue[1], blue[2], "train"},
         {&c.val_acc, orange[0], orange[1], orange[2], "validation"}},
        100.0);
  write_png(s.get(), path);
}

void plot_image_grid(const std::string& path, const std::string& title, const std::vector<ImageTile>& tiles,
                     int columns) {
  QK_CHECK(columns > 0 && !tiles.empty(), "plot_image_grid: expected tiles and columns > 0");
  const int scale = 4, img = 32 * scale, cell_w = img + 40, cell_h = img + 50, top = 50;
  const int rows = (static_cast<int>(tiles.size()) + columns - 1) / columns;
  const int W = columns * cell_w + 20, H = top + rows * cell_h + 10;
  Surface s(cairo_image_surface_create(CAIRO_FORMAT_RGB24, W, H), cairo_surface_destroy);
  Context cr(cairo_create(s.get()), cairo_destroy);
  cairo_set_source_rgb(cr.get(), 1, 1, 1);
  cairo_paint(cr.get());
  cairo_select_font_face(cr.get(), "sans-serif", CAIRO_FONT_SLANT_NORMAL, CAIRO_FONT_WEIGHT_NORMAL);
  cairo_set_source_rgb(cr.get(), 0, 0, 0);
  double size = 18;  // shrink a long title to fit the grid's width
  cairo_set_font_size(cr.get(), size);
  cairo_text_extents_t e;
  cairo_text_extents(cr.get(), title.c_str(), &e);
  if (e.width > W - 20) size *= (W - 20) / e.width;
  text(cr.get(), W / 2.0, 32, title, size, 0.5);
  for (size_t t = 0; t < tiles.size(); ++t) {
    const int cx = 10 + static_cast<int>(t % columns) * cell_w + 20;
    const int cy = top + static_cast<int>(t / columns) * cell_h;
    // Each image as its own 32x32 surface, upscaled with nearest neighbour.
    Surface im(cairo_image_surface_create(CAIRO_FORMAT_RGB24, 32, 32), cairo_surface_destroy);
    cairo_surface_flush(im.get());
    unsigned char* d = cairo_image_surface_get_data(im.get());
    const int stride = cairo_image_surface_get_stride(im.get());
    const uint8_t* p = tiles[t].chw;
    for (int yy = 0; yy < 32; ++yy) {
      auto* row = reinterpret_cast<uint32_t*>(d + yy * stride);
      for (int xx = 0; xx < 32; ++xx) {
        const int i = yy * 32 + xx;
        row[xx] = (uint32_t{p[i]} << 16) | (uint32_t{p[1024 + i]} << 8) | uint32_t{p[2048 + i]};
      }
    }
    cairo_surface_mark_dirty(im.get());
    cairo_save(cr.get());
    cairo_translate(cr.get(), cx, cy);
    cairo_scale(cr.get(), scale, scale);
    cairo_set_source_surface(cr.get(), im.get(), 0, 0);
    cairo_pattern_set_filter(cairo_get_source(cr.get()), CAIRO_FILTER_NEAREST);
    cairo_paint(cr.get());
    cairo_restore(cr.get());
    cairo_set_source_rgb(cr.get(), 0, 0, 0);
    text(cr.get(), cx + img / 2.0, cy + img + 16, tiles[t].caption1, 12, 0.5);
    if (tiles[t].correct) cairo_set_source_rgb(cr.get(), 0.0, 0.5, 0.0);
    else cairo_set_source_rgb(cr.get(), 0.8, 0.0, 0.0);
    text(cr.get(), cx + img / 2.0, cy + img + 32, tiles[t].caption2, 12, 0.5);
  }
  write_png(s.get(), path);
}

}  // namespace qk::cli
