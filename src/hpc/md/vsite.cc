#include "vsite.h"

namespace qk::md {

void construct_virtual_sites(const Topology& top, const RectBox& box, std::vector<Vec3>* x) {
  std::vector<Vec3>& p = *x;
  for (const VirtualSite3& v : top.vsites3) {
    const Vec3 dj = box.delta(p[v.j], p[v.i]), dk = box.delta(p[v.k], p[v.i]);
    for (int d = 0; d < 3; ++d) p[v.site][d] = p[v.i][d] + v.a * dj[d] + v.b * dk[d];
  }
}

void spread_virtual_site_forces(const Topology& top, std::vector<Vec3>* f) {
  std::vector<Vec3>& g = *f;
  for (const VirtualSite3& v : top.vsites3) {
    const Vec3 fv = g[v.site];
    for (int d = 0; d < 3; ++d) {
      g[v.i][d] += (1 - v.a - v.b) * fv[d];
      g[v.j][d] += v.a * fv[d];
      g[v.k][d] += v.b * fv[d];
      g[v.site][d] = 0;
    }
  }
}

void virtual_site_velocities(const Topology& top, const RectBox& box, const std::vector<Vec3>& x_old,
                             const std::vector<Vec3>& x_new, double dt, std::vector<Vec3>* v) {
  for (const VirtualSite3& s : top.vsites3) {
    const Vec3 dx = box.delta(x_new[s.site], x_old[s.site]);
    for (int d = 0; d < 3; ++d) (*v)[s.site][d] = dx[d] / dt;
  }
}

}  // namespace qk::md
