#include "qk/plot/plot.h"

#include <cairo.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>

#include "qk/base/error.h"

namespace qk::plot {
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

constexpr double kColours[6][3] = {{0.12, 0.47, 0.71}, {1.0, 0.5, 0.05},  {0.17, 0.63, 0.17},
                                   {0.84, 0.15, 0.16}, {0.58, 0.40, 0.74}, {0.55, 0.34, 0.29}};

// Ticks at 1, 2 or 5 times a power of ten, about `target` of them over [lo, hi].
double tick_step(double lo, double hi, int target) {
  const double raw = (hi - lo) / target;
  const double p = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0})
    if (raw <= m * p) return m * p;
  return 10 * p;
}

std::string tick_label(double v, double step) {
  if (std::fabs(v) >= 1e5 || (v != 0 && std::fabs(v) < 1e-3)) return fmt::format("{:.2g}", v);
  const int digits = std::clamp(static_cast<int>(std::ceil(-std::log10(step))), 0, 6);
  return fmt::format("{:.{}f}", v, digits);
}

// One panel: a frame at (x, y, w, h), ticks, the series as lines (with dots
// when they are few points).
void panel(cairo_t* cr, double x, double y, double w, double h, const CurvePanel& p) {
  double xlo = 1e300, xhi = -1e300, lo = 1e300, hi = -1e300;
  for (const auto& s : p.series) {
    QK_CHECK(s.x.size() == s.y.size(), "plot_curves: series '", s.label, "' has ", s.x.size(), " x and ",
             s.y.size(), " y values");
    for (size_t i = 0; i < s.y.size(); ++i) {
      if (!std::isfinite(s.y[i]) || !std::isfinite(s.x[i])) continue;
      xlo = std::min(xlo, s.x[i]), xhi = std::max(xhi, s.x[i]);
      lo = std::min(lo, s.y[i]), hi = std::max(hi, s.y[i]);
    }
  }
  if (xlo > xhi) xlo = 0, xhi = 1;
  if (xhi - xlo < 1e-12) xlo -= 0.5, xhi += 0.5;
  if (lo > hi) lo = 0, hi = 1;
  if (hi - lo < 1e-12 * std::max(1.0, std::fabs(hi))) {  // a flat line: open the range around it
    const double half = 0.5 * std::max(1e-9, std::fabs(hi));
    lo -= half, hi += half;
  }
  const double pad = (hi - lo) * 0.08;
  lo -= pad, hi += pad;
  auto px = [&](double v) { return x + (v - xlo) / (xhi - xlo) * w; };
  auto py = [&](double v) { return y + h - (v - lo) / (hi - lo) * h; };

  cairo_set_source_rgb(cr, 0, 0, 0);
  text(cr, x + w / 2, y - 12, p.title, 16, 0.5);
  cairo_set_line_width(cr, 1);
  const double ys = tick_step(lo, hi, 5);
  for (double v = std::ceil(lo / ys) * ys; v <= hi; v += ys) {  // horizontal grid and y ticks
    cairo_set_source_rgb(cr, 0.88, 0.88, 0.88);
    cairo_move_to(cr, x, py(v)), cairo_line_to(cr, x + w, py(v)), cairo_stroke(cr);
    cairo_set_source_rgb(cr, 0, 0, 0);
    text(cr, x - 6, py(v) + 4, tick_label(std::fabs(v) < ys * 1e-9 ? 0.0 : v, ys), 11, 1);
  }
  const double xs = std::max(tick_step(xlo, xhi, 8), (xhi - xlo) > 2 && xlo == std::floor(xlo) ? 1.0 : 0.0);
  for (double v = std::ceil(xlo / xs) * xs; v <= xhi + xs * 1e-9; v += xs)
    text(cr, px(v), y + h + 16, tick_label(v, xs), 11, 0.5);
  cairo_rectangle(cr, x, y, w, h), cairo_stroke(cr);
  text(cr, x + w / 2, y + h + 34, p.x_label, 12, 0.5);
  cairo_save(cr);
  cairo_translate(cr, x - 52, y + h / 2);
  cairo_rotate(cr, -M_PI / 2);
  text(cr, 0, 0, p.y_label, 12, 0.5);
  cairo_restore(cr);

  double ly = y + 18;
  for (size_t si = 0; si < p.series.size(); ++si) {
    const CurveSeries& s = p.series[si];
    const double* c = kColours[si % 6];
    cairo_set_source_rgb(cr, c[0], c[1], c[2]);
    cairo_set_line_width(cr, 2);
    bool pen_down = false;
    size_t points = 0;
    for (size_t i = 0; i < s.y.size(); ++i) {
      if (!std::isfinite(s.y[i])) {
        pen_down = false;
        continue;
      }
      ++points;
      if (pen_down) cairo_line_to(cr, px(s.x[i]), py(s.y[i]));
      else cairo_move_to(cr, px(s.x[i]), py(s.y[i]));
      pen_down = true;
    }
    cairo_stroke(cr);
    if (points <= 60) {
      for (size_t i = 0; i < s.y.size(); ++i) {
        if (!std::isfinite(s.y[i])) continue;
        cairo_arc(cr, px(s.x[i]), py(s.y[i]), 3.5, 0, 2 * M_PI);
        cairo_fill(cr);
      }
    }
    // legend entry in the top-right corner
    cairo_move_to(cr, x + w - 130, ly - 4), cairo_line_to(cr, x + w - 105, ly - 4), cairo_stroke(cr);
    cairo_set_source_rgb(cr, 0, 0, 0);
    text(cr, x + w - 98, ly, s.label, 12);
    ly += 18;
  }
}

// Viridis at t in [0, 1], by linear interpolation between five of its stops.
void viridis(double t, double rgb[3]) {
  static constexpr double kStops[5][3] = {{0.267, 0.005, 0.329},
                                          {0.229, 0.322, 0.546},
                                          {0.128, 0.567, 0.551},
                                          {0.369, 0.789, 0.383},
                                          {0.993, 0.906, 0.144}};
  t = std::clamp(std::isfinite(t) ? t : 0.0, 0.0, 1.0) * 4.0;
  const int i = std::min(static_cast<int>(t), 3);
  const double f = t - i;
  for (int k = 0; k < 3; ++k) rgb[k] = kStops[i][k] * (1 - f) + kStops[i + 1][k] * f;
}

}  // namespace

void plot_heatmaps(const std::string& path, const std::string& title, const std::string& x_label,
                   const std::string& y_label, const std::string& value_label,
                   const std::vector<HeatmapPanel>& panels) {
  QK_CHECK(!panels.empty(), "plot_heatmaps: no panels");
  double vmax = 0;
  for (const auto& p : panels) {
    QK_CHECK(!p.rows.empty() && !p.x.empty(), "plot_heatmaps: panel '", p.title, "' has no cells");
    for (const auto& r : p.rows) {
      QK_CHECK(r.size() == p.x.size(), "plot_heatmaps: panel '", p.title, "' has a row of ", r.size(),
               " cells for ", p.x.size(), " columns");
      for (double v : r)
        if (std::isfinite(v)) vmax = std::max(vmax, v);
    }
  }
  if (vmax <= 0) vmax = 1;
  // Rows get at least 6 px, at most 24; the image stays under ~4000 px tall.
  size_t total_rows = 0;
  for (const auto& p : panels) total_rows += p.rows.size();
  const double row_h = std::clamp(3200.0 / static_cast<double>(total_rows), 6.0, 24.0);
  const int left = 90, plot_w = 720, bar_w = 18, top = 60, panel_gap = 56;
  int H = top + 40;
  for (const auto& p : panels) H += static_cast<int>(std::ceil(row_h * static_cast<double>(p.rows.size()))) + panel_gap;
  const int W = left + plot_w + 180;  // room for the colour bar and its label
  Surface s(cairo_image_surface_create(CAIRO_FORMAT_RGB24, W, H), cairo_surface_destroy);
  Context cr(cairo_create(s.get()), cairo_destroy);
  cairo_t* c = cr.get();
  cairo_set_source_rgb(c, 1, 1, 1);
  cairo_paint(c);
  cairo_select_font_face(c, "sans-serif", CAIRO_FONT_SLANT_NORMAL, CAIRO_FONT_WEIGHT_NORMAL);
  cairo_set_source_rgb(c, 0, 0, 0);
  text(c, W / 2.0, 30, title, 20, 0.5);
  double y = top;
  for (const auto& p : panels) {
    const double h = row_h * static_cast<double>(p.rows.size());
    const double cell_w = static_cast<double>(plot_w) / static_cast<double>(p.x.size());
    cairo_set_source_rgb(c, 0, 0, 0);
    text(c, left, y - 6, p.title, 13);
    for (size_t r = 0; r < p.rows.size(); ++r)
      for (size_t k = 0; k < p.x.size(); ++k) {
        double rgb[3];
        viridis(p.rows[r][k] / vmax, rgb);
        cairo_set_source_rgb(c, rgb[0], rgb[1], rgb[2]);
        // Cells overlap by a pixel so no background seam shows between them.
        cairo_rectangle(c, left + static_cast<double>(k) * cell_w, y + static_cast<double>(r) * row_h, cell_w + 1,
                        row_h + 1);
        cairo_fill(c);
      }
    cairo_set_source_rgb(c, 0, 0, 0);
    cairo_set_line_width(c, 1);
    cairo_rectangle(c, left, y, plot_w, h);
    cairo_stroke(c);
    // Row labels: every row when they fit, else about 8 of them.
    const size_t row_step = std::max<size_t>(1, static_cast<size_t>(std::ceil(12.0 / row_h)));
    for (size_t r = 0; r < p.rows.size(); r += row_step)
      text(c, left - 6, y + (static_cast<double>(r) + 0.5) * row_h + 4, fmt::format("{}", r), 10, 1.0);
    // Column labels: about 8, at the first column of each step.
    const size_t col_step = std::max<size_t>(1, p.x.size() / 8);
    for (size_t k = 0; k < p.x.size(); k += col_step)
      text(c, left + (static_cast<double>(k) + 0.5) * cell_w, y + h + 14, fmt::format("{:g}", p.x[k]), 10, 0.5);
    y += h + panel_gap;
  }
  text(c, left + plot_w / 2.0, H - 14, x_label, 13, 0.5);
  cairo_save(c);
  cairo_translate(c, 22, top + (y - top) / 2);
  cairo_rotate(c, -M_PI / 2);
  text(c, 0, 0, y_label, 13, 0.5);
  cairo_restore(c);
  // The colour bar: 0 at the bottom, vmax at the top.
  const double bar_x = left + plot_w + 24, bar_h = std::min(300.0, y - top - panel_gap);
  for (int i = 0; i < 100; ++i) {
    double rgb[3];
    viridis((i + 0.5) / 100.0, rgb);
    cairo_set_source_rgb(c, rgb[0], rgb[1], rgb[2]);
    cairo_rectangle(c, bar_x, top + bar_h * (1 - (i + 1) / 100.0), bar_w, bar_h / 100.0 + 1);
    cairo_fill(c);
  }
  cairo_set_source_rgb(c, 0, 0, 0);
  text(c, bar_x + bar_w + 4, top + 10, fmt::format("{:.3g}", vmax), 10);
  text(c, bar_x + bar_w + 4, top + bar_h, "0", 10);
  text(c, bar_x, top + bar_h + 18, value_label, 10);
  write_png(s.get(), path);
}

void plot_curves(const std::string& path, const std::string& title, const std::vector<CurvePanel>& panels) {
  QK_CHECK(!panels.empty(), "plot_curves: no panels");
  const int panel_w = 430, gap = 110;
  const int W = 80 + static_cast<int>(panels.size()) * (panel_w + gap) - gap + 50, H = 480;
  Surface s(cairo_image_surface_create(CAIRO_FORMAT_RGB24, W, H), cairo_surface_destroy);
  Context cr(cairo_create(s.get()), cairo_destroy);
  cairo_set_source_rgb(cr.get(), 1, 1, 1);
  cairo_paint(cr.get());
  cairo_select_font_face(cr.get(), "sans-serif", CAIRO_FONT_SLANT_NORMAL, CAIRO_FONT_WEIGHT_NORMAL);
  cairo_set_source_rgb(cr.get(), 0, 0, 0);
  text(cr.get(), W / 2.0, 28, title, 20, 0.5);
  for (size_t i = 0; i < panels.size(); ++i)
    panel(cr.get(), 80 + static_cast<double>(i) * (panel_w + gap), 80, panel_w, 320, panels[i]);
  write_png(s.get(), path);
}

void plot_training_curves(const std::string& path, const std::string& title, const TrainingCurves& c) {
  auto epochs = [](const std::vector<double>& v, double scale) {
    CurveSeries s;
    for (size_t i = 0; i < v.size(); ++i) s.x.push_back(static_cast<double>(i + 1)), s.y.push_back(v[i] * scale);
    return s;
  };
  CurveSeries tl = epochs(c.train_loss, 1), vl = epochs(c.val_loss, 1);
  CurveSeries ta = epochs(c.train_acc, 100), va = epochs(c.val_acc, 100);
  tl.label = ta.label = "train";
  vl.label = va.label = "validation";
  plot_curves(path, title,
              {{"Loss", "epoch", "cross-entropy", {tl, vl}}, {"Accuracy", "epoch", "accuracy (%)", {ta, va}}});
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

}  // namespace qk::plot
