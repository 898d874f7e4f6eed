// A synthetic CIFAR-10 in the official binary format (see qk/data/cifar10.h).
//
// Class = shape (disk, square, triangle, cross, ring) x surface (solid,
// striped), plus a weak colour cue: the object's colour is the class's palette
// colour jittered by up to +-80 per channel, so neighbouring classes overlap
// in colour. The colour gets a network off the ground in the first epoch;
// telling shapes apart under clutter and noise takes several more. Position,
// scale, rotation, background and the distractor carry no class.
//
// Note [integer geometry]: every pixel is computed with integer arithmetic
// (rotations are Pythagorean triples, so a rotated coordinate is exact), so
// the bytes do not depend on the compiler's floating-point contraction, the
// libm or the CPU: the same seed writes the same files everywhere.
#include <algorithm>
#include <array>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "qk/base/error.h"
#include "qk/base/file_io.h"
#include "qk/base/log.h"
#include "qk/base/thread_pool.h"
#include "qk/data/cifar10.h"

namespace qk::data {
namespace {

namespace fs = std::filesystem;

uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// splitmix64: small, fast and fully specified (std:: distributions are not).
struct Rng {
  uint64_t s;
  explicit Rng(uint64_t key) : s(mix64(key ^ 0x243f6a8885a308d3ULL)) {}
  uint64_t next() { return mix64(s += 0x9e3779b97f4a7c15ULL); }
  // Uniform integer in [lo, hi].
  int64_t range(int64_t lo, int64_t hi) { return lo + static_cast<int64_t>(next() % static_cast<uint64_t>(hi - lo + 1)); }
};

// Rotations as integer vectors (a, b) with a^2 + b^2 = m^2: the Pythagorean
// triples and the axes, each in all 8 sign/swap variants.
struct Rot {
  int64_t a, b, m;
};
const std::vector<Rot>& rotations() {
  static const std::vector<Rot> rots = [] {
    const int64_t triples[][3] = {{1, 0, 1},   {3, 4, 5},   {5, 12, 13},  {8, 15, 17},
                                  {7, 24, 25}, {20, 21, 29}, {12, 35, 37}, {9, 40, 41}};
    std::vector<Rot> v;
    for (const auto& t : triples)
      for (int sw = 0; sw < 2; ++sw)
        for (int sa = -1; sa <= 1; sa += 2)
          for (int sb = -1; sb <= 1; sb += 2)
            v.push_back({sa * (sw ? t[1] : t[0]), sb * (sw ? t[0] : t[1]), t[2]});
    return v;
  }();
  return rots;
}

enum Shape : int { kDisk, kSquare, kTriangle, kCross, kRing, kNumShapes };

// One shape placed in the image: centre (half-pixel units), radius R
// (half-pixel units), rotation.
struct Placed {
  int shape;
  int64_t cx, cy, r;
  Rot rot;
  int64_t mr;  // m * R: the radius in rotated units
};

Placed place(Rng& g, int shape, int64_t r_lo, int64_t r_hi) {
  Placed p;
  p.shape = shape;
  p.r = g.range(r_lo, r_hi);
  const int64_t margin = p.r * 6 / 10;  // up to 40% of the shape may leave the frame
  p.cx = g.range(margin, 64 - margin);
  p.cy = g.range(margin, 64 - margin);
  const auto& rots = rotations();
  p.rot = rots[g.next() % rots.size()];
  p.mr = p.rot.m * p.r;
  return p;
}

// Whether the pixel centre (X, Y), in half-pixel units, is inside p.
bool inside(const Placed& p, int64_t X, int64_t Y) {
  const int64_t dx = X - p.cx, dy = Y - p.cy;
  const int64_t u = p.rot.a * dx + p.rot.b * dy;  // rotated, scaled by m
  const int64_t v = -p.rot.b * dx + p.rot.a * dy;
  const int64_t au = u < 0 ? -u : u, av = v < 0 ? -v : v;
  const int64_t mr = p.mr, mr2 = mr * mr;
  switch (p.shape) {
    case kDisk: return u * u + v * v <= mr2;
    case kSquare: return 5 * au <= 4 * mr && 5 * av <= 4 * mr;
    case kTriangle: return 2 * v >= -mr && 1000 * v <= 1000 * mr - 1732 * au;
    case kCross: return (10 * au <= 3 * mr && av <= mr) || (10 * av <= 3 * mr && au <= mr);
    case kRing: { const int64_t d = u * u + v * v; return d <= mr2 && 100 * d >= 36 * mr2; }
    default: return false;
  }
}

using Rgb = std::array<int64_t, 3>;

Rgb random_colour(Rng& g) { return {g.range(0, 255), g.range(0, 255), g.range(0, 255)}; }
int64_t colour_distance(const Rgb& a, const Rgb& b) {
  int64_t d = 0;
  for (int c = 0; c < 3; ++c) d += a[c] > b[c] ? a[c] - b[c] : b[c] - a[c];
  return d;
}
// A colour at least `min_dist` (L1) from `avoid`; gives up after a few draws
// (then the object is faint, which some images may well be).
Rgb contrasting_colour(Rng& g, const Rgb& avoid, int64_t min_dist) {
  Rgb c = random_colour(g);
  for (int t = 0; t < 8 && colour_distance(c, avoid) < min_dist; ++t) c = random_colour(g);
  return c;
}

int64_t floor_div(int64_t a, int64_t b) { return a / b - ((a % b != 0) && ((a < 0) != (b < 0))); }

}  // namespace

void synth_cifar_image(int64_t label, uint64_t key, uint8_t* dst) {
  QK_CHECK(label >= 0 && label < kCifarNumClasses, "synth_cifar_image: label must be 0..9, got ", label);
  Rng g(key);
  const int shape = static_cast<int>(label % kNumShapes);
  const bool striped = label >= kNumShapes;

  // Background: a linear gradient between two colours.
  const Rgb bg0 = random_colour(g), bg1 = random_colour(g);
  const int64_t ga = g.range(-8, 8), gb = g.range(-8, 8);
  int64_t pmin = 0, pmax = 0;
  for (int64_t X : {int64_t{1}, int64_t{63}})
    for (int64_t Y : {int64_t{1}, int64_t{63}}) {
      const int64_t p = ga * X + gb * Y;
      pmin = std::min(pmin, p);
      pmax = std::max(pmax, p);
    }

  // A distractor: a small solid shape of another kind, behind the object.
  const bool distract = g.range(0, 1) == 1;
  const Placed d = place(g, static_cast<int>((shape + g.range(1, kNumShapes - 1)) % kNumShapes), 5, 9);
  const Rgb dcol = random_colour(g);

  // The object: radius 6..14 px, i.e. 12..28 half-pixels.
  const Placed obj = place(g, shape, 12, 28);
  static constexpr int64_t kPalette[10][3] = {{220, 60, 60},  {60, 200, 60},  {60, 90, 220},  {230, 210, 50},
                                              {200, 70, 200}, {60, 210, 210}, {240, 140, 40}, {140, 80, 40},
                                              {150, 150, 150}, {120, 60, 200}};
  Rgb fg;
  for (int ch = 0; ch < 3; ++ch) fg[ch] = std::clamp<int64_t>(kPalette[label][ch] + g.range(-80, 80), 0, 255);
  // Stripes: period 4..7 px across a random direction; the off-stripes are a
  // second contrasting colour.
  const Rgb fg2 = contrasting_colour(g, fg, 140);
  const Rot srot = rotations()[g.next() % rotations().size()];
  const int64_t period = g.range(8, 14);  // half-pixels
  const int64_t noise = g.range(8, 40);   // amplitude of the pixel noise

  uint64_t bits = 0;
  int nbits = 0;
  for (int64_t y = 0; y < kCifarHeight; ++y) {
    for (int64_t x = 0; x < kCifarWidth; ++x) {
      const int64_t X = 2 * x + 1, Y = 2 * y + 1;
      Rgb c;
      if (inside(obj, X, Y)) {
        c = fg;
        if (striped && (floor_div(srot.a * X + srot.b * Y, srot.m * period) & 1)) c = fg2;
      } else if (distract && inside(d, X, Y)) {
        c = dcol;
      } else {
        const int64_t p = ga * X + gb * Y, span = pmax - pmin;
        for (int ch = 0; ch < 3; ++ch)
          c[ch] = span == 0 ? bg0[ch] : bg0[ch] + (bg1[ch] - bg0[ch]) * (p - pmin) / span;
      }
      for (int ch = 0; ch < 3; ++ch) {
        if (nbits < 16) {
          bits = g.next();
          nbits = 64;
        }
        // A triangular-ish noise: the sum of two uniform bytes, centred.
        const int64_t n2 = static_cast<int64_t>(bits & 0xff) + static_cast<int64_t>((bits >> 8) & 0xff) - 255;
        bits >>= 16;
        nbits -= 16;
        const int64_t v = c[ch] + n2 * noise / 255;
        dst[ch * kCifarHeight * kCifarWidth + y * kCifarWidth + x] =
            static_cast<uint8_t>(v < 0 ? 0 : v > 255 ? 255 : v);
      }
    }
  }
}

std::string synth_cifar(const std::string& out_dir, const SynthCifarOptions& o) {
  QK_CHECK(o.num_train >= kCifarNumTrainBatches && o.num_train <= kCifarNumTrainBatches * kCifarRecordsPerBatch,
           "synth_cifar: num_train must be 5..50000 (five training files of at most 10000 images), got ",
           o.num_train);
  QK_CHECK(o.num_test >= 1 && o.num_test <= kCifarRecordsPerBatch,
           "synth_cifar: num_test must be 1..10000 (one test file), got ", o.num_test);
  const std::string dir = (fs::path(out_dir) / kCifarBatchesDirName).string();
  make_dirs(dir);

  // Writes `n` records of split `split` starting at `first` into `name`.
  // Labels are balanced per split (i % 10) and shuffled by a seeded
  // Fisher-Yates, so files are in random class order like the real ones.
  auto write_split = [&](uint64_t split, int64_t total, const std::vector<std::pair<std::string, int64_t>>& files) {
    std::vector<uint8_t> labels(static_cast<size_t>(total));
    for (int64_t i = 0; i < total; ++i) labels[static_cast<size_t>(i)] = static_cast<uint8_t>(i % kCifarNumClasses);
    Rng g(mix64(o.seed) ^ (split * 0x9e3779b97f4a7c15ULL) ^ 0x4c4142454c53ULL);
    for (int64_t i = total - 1; i > 0; --i)
      std::swap(labels[static_cast<size_t>(i)], labels[static_cast<size_t>(g.range(0, i))]);
    int64_t first = 0;
    for (const auto& [name, n] : files) {
      std::vector<uint8_t> buf(static_cast<size_t>(n * kCifarRecordBytes));
      qk::parallel_for(0, n, 64, [&](int64_t lo, int64_t hi) {
        for (int64_t i = lo; i < hi; ++i) {
          const int64_t gi = first + i;
          uint8_t* rec = buf.data() + i * kCifarRecordBytes;
          rec[0] = labels[static_cast<size_t>(gi)];
          const uint64_t key = mix64(o.seed * 0x100000001b3ULL + split) ^ mix64(static_cast<uint64_t>(gi) + 1);
          synth_cifar_image(rec[0], key, rec + 1);
        }
      });
      atomic_write_file((fs::path(dir) / name).string(),
                        std::string_view(reinterpret_cast<const char*>(buf.data()), buf.size()));
      first += n;
    }
  };

  // The marker first: a writer killed half-way leaves a set that
  // cifar10_present() rejects (files missing) and the next run rewrites,
  // never one that passes for the real CIFAR-10.
  atomic_write_file((fs::path(dir) / kCifarSyntheticMarker).string(),
                    "Synthetic CIFAR-10 written by qianka (qk data synth-cifar), not the real data set.\n"
                    "seed " + std::to_string(o.seed) + ", " + std::to_string(o.num_train) + " training and " +
                        std::to_string(o.num_test) + " test images.\n"
                        "Class = shape (disk, square, triangle, cross, ring) x surface (solid, striped);\n"
                        "the CIFAR-10 names in batches.meta.txt are kept only for the format.\n");

  std::vector<std::pair<std::string, int64_t>> train_files;
  for (int k = 0; k < kCifarNumTrainBatches; ++k)
    train_files.emplace_back("data_batch_" + std::to_string(k + 1) + ".bin",
                             o.num_train / kCifarNumTrainBatches + (k < o.num_train % kCifarNumTrainBatches));
  write_split(0, o.num_train, train_files);
  write_split(1, o.num_test, {{"test_batch.bin", o.num_test}});

  std::string meta;
  for (const auto& n : cifar10_class_names()) meta += n + "\n";
  meta += "\n";  // the official file ends with an empty line
  atomic_write_file((fs::path(dir) / "batches.meta.txt").string(), meta);
  return dir;
}

}  // namespace qk::data
