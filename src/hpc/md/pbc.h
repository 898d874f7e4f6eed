// Rectangular periodic boundaries: the minimum-image vector between atoms.
#pragma once

#include <cmath>

#include "qk/hpc/md/units.h"

namespace qk::md {

struct RectBox {
  Vec3 length{};
  Vec3 inverse{};
  explicit RectBox(const Vec3& l) : length(l), inverse{1 / l[0], 1 / l[1], 1 / l[2]} {}
  double volume() const { return length[0] * length[1] * length[2]; }
  // a - b, wrapped to the nearest image (valid while |a - b| < half the box per dimension after wrapping).
  Vec3 delta(const Vec3& a, const Vec3& b) const {
    Vec3 d;
    for (int k = 0; k < 3; ++k) {
      double x = a[k] - b[k];
      d[k] = x - length[k] * std::nearbyint(x * inverse[k]);
    }
    return d;
  }
};

inline double dot(const Vec3& a, const Vec3& b) { return a[0] * b[0] + a[1] * b[1] + a[2] * b[2]; }
inline Vec3 cross(const Vec3& a, const Vec3& b) {
  return {a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2], a[0] * b[1] - a[1] * b[0]};
}

// t -= 0.5 * r (x) f : one pair's (or atom's) share of GROMACS's virial, -1/2 sum r (x) f.
inline void add_virial(Mat3* t, const Vec3& r, const Vec3& f) {
  for (int a = 0; a < 3; ++a)
    for (int b = 0; b < 3; ++b) (*t)[a][b] -= 0.5 * r[a] * f[b];
}

}  // namespace qk::md
