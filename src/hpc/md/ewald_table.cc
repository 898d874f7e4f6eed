#include "ewald_table.h"

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "qk/base/error.h"

namespace qk::md {

EwaldTable::EwaldTable(double beta, double rmax) : scale_(1000.0) {
  const int n = static_cast<int>(rmax * scale_) + 3;  // the last interval's right node, and one spare
  nodes_.resize(static_cast<size_t>(n) * 4);
  const long double b = beta, b2 = b * b, a = 2 * b / std::sqrt(3.14159265358979323846264338327950288L);
  const long double h = 1.0L / scale_;
  for (int i = 0; i < n; ++i) {
    const long double r = i * h;
    long double e, de, g, dg;
    if (i == 0) {  // the limits at r = 0 (E and G are even in r)
      e = a;
      de = 0;
      g = -2 * a * b2 / 3;
      dg = 0;
    } else {
      const long double erf_br = std::erf(b * r), ex = std::exp(-b2 * r * r);
      e = erf_br / r;
      g = (a * r * ex - erf_br) / (r * r * r);
      de = r * g;                                 // dE/dr = r G
      dg = -2 * a * b2 * ex / r - 3 * g / r;      // from G = (a r e^{-b^2 r^2} - erf(b r)) / r^3
    }
    double* node = &nodes_[static_cast<size_t>(i) * 4];
    node[0] = static_cast<double>(e);
    node[1] = static_cast<double>(h * de);
    node[2] = static_cast<double>(g);
    node[3] = static_cast<double>(h * dg);
  }
  nodes_float_.assign(nodes_.begin(), nodes_.end());
}

namespace {

// E and G (ewald_table.h) at r, in long double, with their r = 0 limits.
void exact_e_g(long double b, long double r, long double* e, long double* g) {
  const long double a = 2 * b / std::sqrt(3.14159265358979323846264338327950288L), b2 = b * b;
  if (r < 1e-4L / b) {  // the series: E = a (1 - b^2 r^2 / 3), G = (1/r) dE/dr = -2 a b^2 / 3 + (4/5) a b^4 r^2 / ...
    *e = a * (1 - b2 * r * r / 3);
    *g = -2 * a * b2 / 3 + 2 * a * b2 * b2 * r * r / 5;
    return;
  }
  const long double erf_br = std::erf(b * r);
  *e = erf_br / r;
  *g = (a * r * std::exp(-b2 * r * r) - erf_br) / (r * r * r);
}

}  // namespace

EwaldPolynomial::EwaldPolynomial(double beta, double rmax) : u_scale_(2 / (rmax * rmax)) {
  constexpr int n = kDegree + 1;
  const long double pi = 3.14159265358979323846264338327950288L;
  // Chebyshev interpolation at the n Chebyshev nodes of u in [-1, 1] (t = r^2 / rmax^2 = (u + 1) / 2) ...
  long double ce[n] = {};
  for (int k = 0; k < n; ++k) {
    const long double th = pi * (k + 0.5L) / n, t = 0.5L * (std::cos(th) + 1);
    long double e, g;
    exact_e_g(beta, std::sqrt(t) * rmax, &e, &g);
    for (int j = 0; j < n; ++j) ce[j] += e * std::cos(j * th) * (j == 0 ? 1.0L : 2.0L) / n;
  }
  // ... to monomials in u: T_0 = 1, T_1 = u, T_j = 2 u T_{j-1} - T_{j-2}.
  long double me[n] = {}, tp[n] = {}, tc[n] = {}, tn[n];
  tp[0] = 1;
  tc[1] = 1;
  for (int j = 0; j < n; ++j) {
    const long double* tj = j == 0 ? tp : tc;
    for (int i = 0; i < n; ++i) me[i] += ce[j] * tj[i];
    if (j == 0) continue;
    for (int i = 0; i < n; ++i) tn[i] = -tp[i] + (i > 0 ? 2 * tc[i - 1] : 0);
    std::copy(tc, tc + n, tp);
    std::copy(tn, tn + n, tc);
  }
  for (int i = 0; i < n; ++i) e_[i] = static_cast<float>(me[i]);
  // The fit's error on a fine grid, with the float coefficients, evaluated in long double.
  double worst_e = 0, worst_g = 0, max_e = 0, max_g = 0;
  for (int i = 0; i <= 4000; ++i) {
    const long double t = i / 4000.0L, u = 2 * t - 1;
    long double e, g, pe = 0;
    exact_e_g(beta, std::sqrt(t) * rmax, &e, &g);
    for (int k = kDegree; k >= 0; --k) pe = pe * u + e_[k];
    worst_e = std::max(worst_e, static_cast<double>(std::fabs(pe - e)));
    max_e = std::max(max_e, static_cast<double>(std::fabs(e)));
    max_g = std::max(max_g, static_cast<double>(std::fabs(g)));
  }
  // G = P / Q: minimize sum_i w_i (P(u_i) - G_i Q(u_i))^2 with w_i = 1 / Q_previous(u_i)^2, a few times
  // over (Sanathanan-Koerner), by normal equations in long double.
  {
    constexpr int np = kNum + 1, nq = kDen, nu = np + nq, ns = 400;
    std::vector<long double> us(ns), gs(ns), w(ns, 1.0L);
    for (int i = 0; i < ns; ++i) {
      const long double t = 0.5L * (1 - std::cos(pi * i / (ns - 1)));
      long double e, g;
      exact_e_g(beta, std::sqrt(t) * rmax, &e, &g);
      us[i] = 2 * t - 1;
      gs[i] = g;
    }
    long double coef[nu] = {};
    for (int iter = 0; iter < 20; ++iter) {
      long double m[nu][nu + 1] = {};
      for (int i = 0; i < ns; ++i) {
        long double row[nu], pw = 1;
        for (int k = 0; k < np; ++k, pw *= us[i]) row[k] = pw;
        pw = us[i];
        for (int k = 0; k < nq; ++k, pw *= us[i]) row[np + k] = -gs[i] * pw;
        for (int a = 0; a < nu; ++a) {
          for (int b = 0; b < nu; ++b) m[a][b] += w[i] * row[a] * row[b];
          m[a][nu] += w[i] * row[a] * gs[i];
        }
      }
      for (int c = 0; c < nu; ++c) {  // Gauss-Jordan with partial pivoting
        int piv = c;
        for (int r = c + 1; r < nu; ++r)
          if (std::fabs(m[r][c]) > std::fabs(m[piv][c])) piv = r;
        for (int k = 0; k <= nu; ++k) std::swap(m[c][k], m[piv][k]);
        for (int r = 0; r < nu; ++r) {
          if (r == c) continue;
          const long double f = m[r][c] / m[c][c];
          for (int k = c; k <= nu; ++k) m[r][k] -= f * m[c][k];
        }
      }
      for (int a = 0; a < nu; ++a) coef[a] = m[a][nu] / m[a][a];
      for (int i = 0; i < ns; ++i) {
        long double q = 1, pw = us[i];
        for (int k = 0; k < nq; ++k, pw *= us[i]) q += coef[np + k] * pw;
        w[i] = 1 / (q * q);
      }
    }
    for (int k = 0; k < np; ++k) gp_[k] = static_cast<float>(coef[k]);
    gq_[0] = 1;
    for (int k = 0; k < nq; ++k) gq_[k + 1] = static_cast<float>(coef[np + k]);
  }
  double worst_r = 0;
  for (int i = 0; i <= 4000; ++i) {
    const long double t = i / 4000.0L, u = 2 * t - 1;
    long double e, g, p = 0, q = 0;
    exact_e_g(beta, std::sqrt(t) * rmax, &e, &g);
    for (int k = kNum; k >= 0; --k) p = p * u + gp_[k];
    for (int k = kDen; k >= 0; --k) q = q * u + gq_[k];
    worst_r = std::max(worst_r, q > 0 ? static_cast<double>(std::fabs(p / q - g)) : HUGE_VAL);
  }
  worst_g = worst_r;
  QK_CHECK(worst_e <= 1e-6 * max_e && worst_g <= 1e-6 * max_g, "the single-precision Ewald correction (degree ",
           kDegree, " in r^2) misses erf by ", std::max(worst_e / max_e, worst_g / max_g), " at beta * rc = ",
           beta * rmax, "; use a larger ewald-rtol, or -double");
}

}  // namespace qk::md
