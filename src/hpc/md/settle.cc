#include "settle.h"

#include <algorithm>
#include <cmath>

#include "qk/base/error.h"
#include "qk/base/thread_pool.h"

namespace qk::md {

SettleConstraints::SettleConstraints(const Topology& top, bool unit_masses) {
  for (const Settle& s : top.settles) {
    Water w;
    w.ow = s.ow;
    w.mO = unit_masses ? 1.0 : top.mass[s.ow];
    w.mH = unit_masses ? 1.0 : top.mass[s.ow + 1];
    QK_CHECK(unit_masses || top.mass[s.ow + 2] == w.mH, "SETTLE: the two hydrogens of the water at atom ", s.ow + 1,
             " have different masses (", w.mH, ", ", top.mass[s.ow + 2], ")");
    // The canonical triangle (GROMACS's SettleParameters): O at ra from the centre of mass, H at rb, rc = dHH/2.
    const double wohh = w.mO + 2 * w.mH;
    w.wh = w.mH / wohh;
    w.rc = s.dhh / 2;
    const double height = std::sqrt(s.doh * s.doh - w.rc * w.rc);
    w.ra = 2 * w.mH * height / wohh;
    w.rb = height - w.ra;
    w.irc2 = 1 / s.dhh;
    water_.push_back(w);
  }
}

bool SettleConstraints::apply(const RectBox& box, const std::vector<Vec3>& x, std::vector<Vec3>* xprime,
                              std::vector<Vec3>* v, double invdt, Mat3* r_m_dx) const {
  // Waters are independent: chunks of them in parallel, each chunk's virial summed in chunk order.
  const int64_t nw = static_cast<int64_t>(water_.size());
  const int nchunks = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(nw / 256, num_threads())));
  std::vector<Mat3> chunk_vir(nchunks, Mat3{});
  std::vector<char> chunk_ok(nchunks, 1);
  qk::parallel_for(0, nchunks, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t ch = lo; ch < hi; ++ch)
      chunk_ok[ch] = apply_range(box, x, xprime, v, invdt, r_m_dx ? &chunk_vir[ch] : nullptr, nw * ch / nchunks,
                                 nw * (ch + 1) / nchunks);
  });
  bool ok = true;
  for (int ch = 0; ch < nchunks; ++ch) {
    ok = ok && chunk_ok[ch];
    if (r_m_dx)
      for (int a = 0; a < 3; ++a)
        for (int b = 0; b < 3; ++b) (*r_m_dx)[a][b] += chunk_vir[ch][a][b];
  }
  return ok;
}

bool SettleConstraints::apply_range(const RectBox& box, const std::vector<Vec3>& x, std::vector<Vec3>* xprime,
                                    std::vector<Vec3>* v, double invdt, Mat3* r_m_dx, int64_t w0, int64_t w1) const {
  bool ok = true;
  for (int64_t wi = w0; wi < w1; ++wi) {
    const Water& w = water_[wi];
    const int o = w.ow, h2 = o + 1, h3 = o + 2;
    const Vec3 dist21 = box.delta(x[h2], x[o]), dist31 = box.delta(x[h3], x[o]);
    const Vec3 doh2 = box.delta((*xprime)[h2], (*xprime)[o]), doh3 = box.delta((*xprime)[h3], (*xprime)[o]);
    Vec3 a1, b1, c1;  // new positions relative to the new centre of mass
    for (int d = 0; d < 3; ++d) {
      a1[d] = -(doh2[d] + doh3[d]) * w.wh;
      b1[d] = doh2[d] + a1[d];
      c1[d] = doh3[d] + a1[d];
    }
    // A frame with z normal to the old plane and x normal to z and a1.
    const double xakszd = dist21[1] * dist31[2] - dist21[2] * dist31[1];
    const double yakszd = dist21[2] * dist31[0] - dist21[0] * dist31[2];
    const double zakszd = dist21[0] * dist31[1] - dist21[1] * dist31[0];
    const double xaksxd = a1[1] * zakszd - a1[2] * yakszd;
    const double yaksxd = a1[2] * xakszd - a1[0] * zakszd;
    const double zaksxd = a1[0] * yakszd - a1[1] * xakszd;
    const double xaksyd = yakszd * zaksxd - zakszd * yaksxd;
    const double yaksyd = zakszd * xaksxd - xakszd * zaksxd;
    const double zaksyd = xakszd * yaksxd - yakszd * xaksxd;
    const double axlng = 1 / std::sqrt(xaksxd * xaksxd + yaksxd * yaksxd + zaksxd * zaksxd);
    const double aylng = 1 / std::sqrt(xaksyd * xaksyd + yaksyd * yaksyd + zaksyd * zaksyd);
    const double azlng = 1 / std::sqrt(xakszd * xakszd + yakszd * yakszd + zakszd * zakszd);
    const Vec3 t1{xaksxd * axlng, xaksyd * aylng, xakszd * azlng};  // trns1: x components of the frame axes
    const Vec3 t2{yaksxd * axlng, yaksyd * aylng, yakszd * azlng};
    const Vec3 t3{zaksxd * axlng, zaksyd * aylng, zakszd * azlng};
    double b0d[2], c0d[2];
    for (int d = 0; d < 2; ++d) {
      b0d[d] = t1[d] * dist21[0] + t2[d] * dist21[1] + t3[d] * dist21[2];
      c0d[d] = t1[d] * dist31[0] + t2[d] * dist31[1] + t3[d] * dist31[2];
    }
    const double a1d_z = t1[2] * a1[0] + t2[2] * a1[1] + t3[2] * a1[2];
    Vec3 b1d, c1d;
    for (int d = 0; d < 3; ++d) {
      b1d[d] = t1[d] * b1[0] + t2[d] * b1[1] + t3[d] * b1[2];
      c1d[d] = t1[d] * c1[0] + t2[d] * c1[1] + t3[d] * c1[2];
    }
    const double sinphi = a1d_z / w.ra;
    double tmp2 = 1 - sinphi * sinphi;
    if (!(tmp2 > 1e-12)) {  // as GROMACS: flag it and go on with the clamped value
      ok = false;
      tmp2 = 1e-12;
    }
    const double cosphi = std::sqrt(tmp2);
    const double sinpsi = (b1d[2] - c1d[2]) * w.irc2 / cosphi;
    const double cospsi = std::sqrt(1 - sinpsi * sinpsi);
    const double a2d_y = w.ra * cosphi, b2d_x = -w.rc * cospsi;
    const double tt1 = -w.rb * cosphi, tt2 = w.rc * sinpsi * sinphi;
    const double b2d_y = tt1 - tt2, c2d_y = tt1 + tt2;
    const double alpha = b2d_x * (b0d[0] - c0d[0]) + b0d[1] * b2d_y + c0d[1] * c2d_y;
    const double beta = b2d_x * (c0d[1] - b0d[1]) + b0d[0] * b2d_y + c0d[0] * c2d_y;
    const double gamma = b0d[0] * b1d[1] - b1d[0] * b0d[1] + c0d[0] * c1d[1] - c1d[0] * c0d[1];
    const double al2be2 = alpha * alpha + beta * beta;
    tmp2 = al2be2 - gamma * gamma;
    const double sinthe = (alpha * gamma - beta * std::sqrt(tmp2)) / al2be2;
    const double costhe = std::sqrt(1 - sinthe * sinthe);
    const Vec3 a3d{-a2d_y * sinthe, a2d_y * costhe, a1d_z};
    const Vec3 b3d{b2d_x * costhe - b2d_y * sinthe, b2d_x * sinthe + b2d_y * costhe, b1d[2]};
    const Vec3 c3d{-b2d_x * costhe - c2d_y * sinthe, -b2d_x * sinthe + c2d_y * costhe, c1d[2]};
    Vec3 dxo, dxh2, dxh3;  // displacements by the constraint
    for (int d = 0; d < 3; ++d) {
      const Vec3& row = d == 0 ? t1 : d == 1 ? t2 : t3;
      dxo[d] = dot(row, a3d) - a1[d];
      dxh2[d] = dot(row, b3d) - b1[d];
      dxh3[d] = dot(row, c3d) - c1[d];
      (*xprime)[o][d] += dxo[d];
      (*xprime)[h2][d] += dxh2[d];
      (*xprime)[h3][d] += dxh3[d];
      if (v) {
        (*v)[o][d] += dxo[d] * invdt;
        (*v)[h2][d] += dxh2[d] * invdt;
        (*v)[h3][d] += dxh3[d] * invdt;
      }
    }
    if (r_m_dx) {
      for (int a = 0; a < 3; ++a)
        for (int b = 0; b < 3; ++b) {
          const double mdb = w.mH * dxh2[b], mdc = w.mH * dxh3[b], mdo = w.mO * dxo[b] + mdb + mdc;
          (*r_m_dx)[a][b] += x[o][a] * mdo + dist21[a] * mdb + dist31[a] * mdc;
        }
    }
    if (!std::isfinite(dxo[0] + dxo[1] + dxo[2] + dxh2[0] + dxh2[1] + dxh2[2] + dxh3[0] + dxh3[1] + dxh3[2]))
      ok = false;
  }
  return ok;
}

void SettleConstraints::project(const RectBox& box, const std::vector<Vec3>& x, std::vector<Vec3>* d) const {
  for (const Water& w : water_) {
    const int o = w.ow, h2 = o + 1, h3 = o + 2;
    const double imO = 1 / w.mO, imH = 1 / w.mH;
    // Unit vectors of the three constraints: O-H2, O-H3, H2-H3 (each from its first atom's side).
    Vec3 r[3] = {box.delta(x[o], x[h2]), box.delta(x[o], x[h3]), box.delta(x[h2], x[h3])};
    for (Vec3& u : r) {
      const double inv = 1 / std::sqrt(dot(u, u));
      for (double& c : u) c *= inv;
    }
    // The relative components along each constraint, which a step x += c d must not change.
    auto rel = [&](int a, int b, const Vec3& u) {
      double s = 0;
      for (int c = 0; c < 3; ++c) s += ((*d)[a][c] - (*d)[b][c]) * u[c];
      return s;
    };
    const double dc[3] = {rel(o, h2, r[0]), rel(o, h3, r[1]), rel(h2, h3, r[2])};
    // Coupling of the constraints through their shared atoms, solved for the three multipliers.
    const double m[3][3] = {{imO + imH, imO * dot(r[0], r[1]), -imH * dot(r[0], r[2])},
                            {imO * dot(r[0], r[1]), imO + imH, imH * dot(r[1], r[2])},
                            {-imH * dot(r[0], r[2]), imH * dot(r[1], r[2]), 2 * imH}};
    const double det = m[0][0] * (m[1][1] * m[2][2] - m[1][2] * m[2][1]) -
                       m[0][1] * (m[1][0] * m[2][2] - m[1][2] * m[2][0]) +
                       m[0][2] * (m[1][0] * m[2][1] - m[1][1] * m[2][0]);
    double fc[3];
    for (int k = 0; k < 3; ++k) {  // Cramer's rule
      double a[3][3];
      for (int i = 0; i < 3; ++i)
        for (int j = 0; j < 3; ++j) a[i][j] = j == k ? dc[i] : m[i][j];
      fc[k] = (a[0][0] * (a[1][1] * a[2][2] - a[1][2] * a[2][1]) - a[0][1] * (a[1][0] * a[2][2] - a[1][2] * a[2][0]) +
               a[0][2] * (a[1][0] * a[2][1] - a[1][1] * a[2][0])) /
              det;
    }
    // Mass-weighted corrections: d_a -= sum_k s_ka fc_k r_k / m_a (s = +1 for the constraint's first atom, -1
    // for its second), as constraint forces would move the atoms.
    for (int c = 0; c < 3; ++c) {
      (*d)[o][c] -= imO * (fc[0] * r[0][c] + fc[1] * r[1][c]);
      (*d)[h2][c] -= imH * (-fc[0] * r[0][c] + fc[2] * r[2][c]);
      (*d)[h3][c] -= imH * (-fc[1] * r[1][c] - fc[2] * r[2][c]);
    }
  }
}

}  // namespace qk::md
