#include "nonbonded.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#endif

#include "qk/base/error.h"
#include "qk/base/thread_pool.h"
#include "qk/hpc/md/units.h"

namespace qk::md {

void NonbondedParams::finish() {
  coulomb_factor = units::kCoulombFactor / epsilon_r;
  if (!ewald) {
    // eps_rf = 0 is a conducting (infinite-dielectric) boundary.
    krf = epsilon_rf == 0 ? 1 / (2 * rc * rc * rc)
                          : (epsilon_rf - epsilon_r) / ((2 * epsilon_rf + epsilon_r) * rc * rc * rc);
    crf = 1 / rc + krf * rc * rc;
  } else {
    ewald_shift = std::erfc(beta * rc) / rc;
    ewald_table = EwaldTable(beta, rc);
  }
  lj_shift6 = std::pow(rc, -6);
  lj_shift12 = lj_shift6 * lj_shift6;
}

namespace {

constexpr int kC = kClusterSize, kP = kClusterPairSize;
// Lane k's bit of a cluster pair's mask, as a table: GCC does not vectorize `(mask >> k) & 1`.
alignas(64) constexpr unsigned kLaneBit[kP] = {1u << 0,  1u << 1,  1u << 2,  1u << 3,  1u << 4,  1u << 5,
                                               1u << 6,  1u << 7,  1u << 8,  1u << 9,  1u << 10, 1u << 11,
                                               1u << 12, 1u << 13, 1u << 14, 1u << 15};

// out[jj] -= sum_ii lanes[kC ii + jj] for the kP = 16 lanes of a cluster pair.
template <typename Real>
inline void reduce_j(const Real* lanes, Real* out) {
  typedef Real V8 __attribute__((vector_size(8 * sizeof(Real))));
  typedef Real V4 __attribute__((vector_size(4 * sizeof(Real))));
  V8 lo, hi;
  std::memcpy(&lo, lanes, sizeof lo);
  std::memcpy(&hi, lanes + 8, sizeof hi);
  const V8 h = lo + hi;  // lanes l and l + 8: i-slots 0 + 2 and 1 + 3
  V4 a, b, o;
  std::memcpy(&a, &h, sizeof a);
  std::memcpy(&b, reinterpret_cast<const char*>(&h) + sizeof a, sizeof b);
  std::memcpy(&o, out, sizeof o);
  o -= a + b;
  std::memcpy(out, &o, sizeof o);
}

// 1/sqrt(r2) and 1/Q(u), u = uscale r2 - 1, for the 16 lanes of a float Ewald cluster pair. The
// divider is the float kernel's bottleneck (a sqrt and a division per pair: on AVX2 each takes the
// unit 5-6 cycles a vector, ~20 of a cluster pair's ~60), so, as GROMACS's single-precision SIMD
// kernels do, the hardware's 12-bit estimates are refined by one Newton step each (relative error
// ~1e-7, a float's rounding; the last bit depends on the CPU's estimate tables). Without AVX2/FMA:
// exact sqrt and division.
inline void ewald_reciprocals(const float* r2, float uscale, const float* gq, float* rinv, float* inv_q,
                             float* u) {
#if defined(__AVX2__) && defined(__FMA__)
  const __m256 one = _mm256_set1_ps(1.0f), half = _mm256_set1_ps(0.5f), three_halves = _mm256_set1_ps(1.5f),
               two = _mm256_set1_ps(2.0f), us = _mm256_set1_ps(uscale);
  for (int h = 0; h < kP; h += 8) {
    const __m256 x = _mm256_load_ps(r2 + h);
    __m256 y = _mm256_rsqrt_ps(x);
    // y (3/2 - x y^2 / 2)
    y = _mm256_mul_ps(y, _mm256_fnmadd_ps(_mm256_mul_ps(_mm256_mul_ps(half, x), y), y, three_halves));
    const __m256 uu = _mm256_fmsub_ps(us, x, one), u2 = _mm256_mul_ps(uu, uu);
    // Q = (g0 + g1 u) + (g2 + g3 u) u^2 + g4 u^4, as EwaldPolynomial::eval_den
    const __m256 q = _mm256_fmadd_ps(
        _mm256_set1_ps(gq[4]), _mm256_mul_ps(u2, u2),
        _mm256_fmadd_ps(_mm256_fmadd_ps(_mm256_set1_ps(gq[3]), uu, _mm256_set1_ps(gq[2])), u2,
                        _mm256_fmadd_ps(_mm256_set1_ps(gq[1]), uu, _mm256_set1_ps(gq[0]))));
    __m256 z = _mm256_rcp_ps(q);
    z = _mm256_mul_ps(z, _mm256_fnmadd_ps(q, z, two));  // z (2 - q z)
    _mm256_store_ps(rinv + h, y);
    _mm256_store_ps(inv_q + h, z);
    _mm256_store_ps(u + h, uu);
  }
#else
  for (int k = 0; k < kP; ++k) {
    u[k] = uscale * r2[k] - 1.0f;
    rinv[k] = 1.0f / std::sqrt(r2[k]);
    inv_q[k] = 1.0f / EwaldPolynomial::eval_den(gq, u[k]);
  }
#endif
}

// Whether any of the kP weights (0 or 1) is 1: a test of the lanes' bits where AVX has it (a min or
// or-reduction across the lanes took ~15% of the kernel).
inline bool any_lane(const float* w) {
#if defined(__AVX2__)
  const __m256i v = _mm256_castps_si256(_mm256_or_ps(_mm256_load_ps(w), _mm256_load_ps(w + 8)));
  return !_mm256_testz_si256(v, v);  // any bit (testz_ps would read the sign bits only)
#else
  float s = 0;
  for (int k = 0; k < kP; ++k) s += w[k];
  return s != 0;
#endif
}
inline bool any_lane(const double* w) {
  double s = 0;
  for (int k = 0; k < kP; ++k) s += w[k];
  return s != 0;
}

// 1/sqrt(r2) for the 16 lanes of a float cluster pair without Ewald (reaction field, cut-off), the
// same way.
inline void inverse_sqrt(const float* r2, float* rinv) {
#if defined(__AVX2__) && defined(__FMA__)
  const __m256 half = _mm256_set1_ps(0.5f), three_halves = _mm256_set1_ps(1.5f);
  for (int h = 0; h < kP; h += 8) {
    const __m256 x = _mm256_load_ps(r2 + h);
    const __m256 y = _mm256_rsqrt_ps(x);
    _mm256_store_ps(rinv + h,
                    _mm256_mul_ps(y, _mm256_fnmadd_ps(_mm256_mul_ps(_mm256_mul_ps(half, x), y), y, three_halves)));
  }
#else
  for (int k = 0; k < kP; ++k) rinv[k] = 1.0f / std::sqrt(r2[k]);
#endif
}

// What one chunk of list entries adds up.
struct ChunkSums {
  double lj = 0, coulomb = 0;
  std::array<Vec3, 27> shift_force{};  // per shift, the sum of the i-forces of its entries
};

}  // namespace

struct NonbondedKernel::Impl {
  const Topology* topology;  // set_topology may swap it
  NonbondedParams p;
  bool single;
  EwaldPolynomial poly;    // the float kernel's Ewald correction
  bool geometric = false;  // c6_ij = sqrt(c6_ii c6_jj) and the same for c12, for every pair of types
  int64_t list_build = -1;  // the PairList::build_count() the slot parameters are for
  int ntypes;

  template <typename Real>
  struct Data {
    // Per cluster c, the "j layout": [kP c + kC ii + jj] holds slot kC c + jj, so a cluster pair's j side is kP
    // contiguous values and slot ii of an i-cluster sits at [kP c + ii].
    std::vector<Real> x, y, z, q;
    std::vector<Real> s6, s12;         // geometric: sqrt(6 c6_ii), sqrt(12 c12_ii) per slot
    std::vector<int> t;                // else: the type, for c6, c12 below
    std::vector<Real> c6, c12;         // ntypes x ntypes: 6 c6, 12 c12
    std::vector<std::vector<Real>> f;  // per chunk and cluster c: [3 kC c + kC dim + k]
  };
  Data<double> d64;
  Data<float> d32;

  Impl(const Topology& t, const NonbondedParams& params, bool single_precision)
      : p(params), single(single_precision) {
    if (single && p.ewald) poly = EwaldPolynomial(p.beta, p.rc);
    set_types(t);
  }

  // The topology and its type tables.
  void set_types(const Topology& top) {
    topology = &top;
    ntypes = top.num_types();
    list_build = -1;  // the slots' charges and types anew at the next call
    d64.c6.clear();
    d64.c12.clear();
    d32.c6.clear();
    d32.c12.clear();
    // 6 c6 and 12 c12 (GROMACS's nbfp scaling): the force needs no further factors.
    for (size_t k = 0; k < top.pair_c6.size(); ++k) {
      d64.c6.push_back(6 * top.pair_c6[k]);
      d64.c12.push_back(12 * top.pair_c12[k]);
      d32.c6.push_back(static_cast<float>(6 * top.pair_c6[k]));
      d32.c12.push_back(static_cast<float>(12 * top.pair_c12[k]));
    }
    // GROMACS's geometric-combination kernels take per-atom parameters instead of a table lookup per pair.
    geometric = true;
    for (int a = 0; a < ntypes && geometric; ++a)
      for (int b = 0; b < ntypes; ++b) {
        const double c6 = std::sqrt(top.c6(a, a) * top.c6(b, b)), c12 = std::sqrt(top.c12(a, a) * top.c12(b, b));
        if (std::abs(top.c6(a, b) - c6) > 1e-12 * c6 || std::abs(top.c12(a, b) - c12) > 1e-12 * c12) {
          geometric = false;
          break;
        }
      }
  }

  template <typename Real>
  NonbondedEnergies run(Data<Real>& d, const PairList& list, const std::vector<Vec3>& x, bool energies,
                        std::vector<Vec3>* f, EntryRange range);
  template <typename Real, bool kEwald, bool kEnergy, bool kGeometric>
  void kernel(const Data<Real>& d, const PairList& list, int64_t e0, int64_t e1, Real* F,
              ChunkSums* sums) const;
  template <typename Real, bool kEwald, bool kEnergy>
  void kernel(bool geom, const Data<Real>& d, const PairList& list, int64_t e0, int64_t e1, Real* F,
              ChunkSums* sums) const {
    if (geom) {
      kernel<Real, kEwald, kEnergy, true>(d, list, e0, e1, F, sums);
    } else {
      kernel<Real, kEwald, kEnergy, false>(d, list, e0, e1, F, sums);
    }
  }
};

// The cluster-pair kernel over entries [e0, e1): plain loops over kP lanes that the compiler vectorizes.
// Without kEnergy only forces (GROMACS's force-only kernels on steps that report no energies).
template <typename Real, bool kEwald, bool kEnergy, bool kGeometric>
void NonbondedKernel::Impl::kernel(const Data<Real>& d, const PairList& list, int64_t e0, int64_t e1, Real* F,
                                   ChunkSums* sums) const {
  constexpr bool kFloat = sizeof(Real) == sizeof(float);
  constexpr int kDeg = EwaldPolynomial::kDegree;
  const Real rc2 = static_cast<Real>(p.rc * p.rc), masked_r2 = static_cast<Real>(0.25 * p.rc * p.rc);
  const Real sh6 = static_cast<Real>(p.lj_shift6), sh12 = static_cast<Real>(p.lj_shift12);
  const Real eshift = static_cast<Real>(p.ewald_shift), krf = static_cast<Real>(p.krf), crf = static_cast<Real>(p.crf);
  const Real tscale = static_cast<Real>(p.ewald_table.scale()), qfac = static_cast<Real>(p.coulomb_factor);
  const Real* tab = kEwald ? p.ewald_table.template nodes<Real>() : nullptr;
  const Real uscale = static_cast<Real>(poly.u_scale());
  alignas(64) Real ce[kDeg + 1], gp[EwaldPolynomial::kNum + 1], gq[EwaldPolynomial::kDen + 1];
  for (int k = 0; k <= kDeg; ++k) ce[k] = static_cast<Real>(poly.e()[k]);
  for (int k = 0; k <= EwaldPolynomial::kNum; ++k) gp[k] = static_cast<Real>(poly.g_num()[k]);
  for (int k = 0; k <= EwaldPolynomial::kDen; ++k) gq[k] = static_cast<Real>(poly.g_den()[k]);
  const Real* X = d.x.data();
  const Real* Y = d.y.data();
  const Real* Z = d.z.data();
  const Real* Q = d.q.data();
  const Real* S6 = d.s6.data();
  const Real* S12 = d.s12.data();
  const int* T = d.t.data();
  const Real* C6 = d.c6.data();
  const Real* C12 = d.c12.data();
  const std::vector<PairList::Entry>& entries = list.entries();
  const int* cjs = list.j_clusters().data();
  const uint16_t* masks = list.masks().data();
  const std::vector<Vec3>& shifts = list.shifts();
  for (int64_t e = e0; e < e1; ++e) {
    const PairList::Entry& en = entries[e];
    const size_t ib = static_cast<size_t>(en.ci) * kP;
    const Vec3& sv = shifts[en.shift];
    // The i side, one value per lane (i-slot = lane / kC); the shift moves the j-clusters, so x_i - S.
    alignas(64) Real xi[kP], yi[kP], zi[kP], qi[kP], s6i[kP], s12i[kP];
    alignas(64) int ti[kP];
    for (int k = 0; k < kP; ++k) {
      xi[k] = X[ib + k / kC] - static_cast<Real>(sv[0]);
      yi[k] = Y[ib + k / kC] - static_cast<Real>(sv[1]);
      zi[k] = Z[ib + k / kC] - static_cast<Real>(sv[2]);
      qi[k] = qfac * Q[ib + k / kC];
      if constexpr (kGeometric) {
        s6i[k] = S6[ib + k / kC];
        s12i[k] = S12[ib + k / kC];
      } else {
        ti[k] = T[ib + k / kC] * ntypes;
      }
    }
    alignas(64) Real fix[kP] = {}, fiy[kP] = {}, fiz[kP] = {}, vlj[kP] = {}, vc[kP] = {};
    for (int64_t pr = en.begin; pr < en.end; ++pr) {
      const size_t jb = static_cast<size_t>(cjs[pr]) * kP;
      const unsigned mask = masks[pr];
      const Real* xj = X + jb;
      const Real* yj = Y + jb;
      const Real* zj = Z + jb;
      const Real* qj = Q + jb;
      const Real* s6j = S6 + jb;
      const Real* s12j = S12 + jb;
      const int* tj = T + jb;
      // A pruned list still holds cluster pairs with no atom pair inside the cut-off at this step (about a
      // quarter in water): they add exactly zero, so they are skipped after a cheap distance pass.
      // r^2 per lane, masked lanes (and those beyond the cut-off) moved to a harmless radius, and each
      // lane's weight: 1 for a pair inside the cut-off, else 0.
      alignas(64) Real r2m[kP], wm[kP];
#pragma omp simd
      for (int k = 0; k < kP; ++k) {
        const Real dx = xi[k] - xj[k], dy = yi[k] - yj[k], dz = zi[k] - zj[k];
        const Real r2raw = dx * dx + dy * dy + dz * dz;
        const bool in = ((mask & kLaneBit[k]) != 0) & (r2raw < rc2);
        r2m[k] = in ? r2raw : masked_r2;  // keeps masked lanes finite and inside the table
        wm[k] = in ? Real(1) : Real(0);
      }
      if (!any_lane(wm)) continue;
      // In float: 1/r (with Ewald also 1/Q of the correction's ratio), 16 lanes at once.
      alignas(64) Real rinv_l[kP], inv_q_l[kP], u_l[kP];
      if constexpr (kEwald && kFloat) ewald_reciprocals(r2m, uscale, gq, rinv_l, inv_q_l, u_l);
      if constexpr (!kEwald && kFloat) inverse_sqrt(r2m, rinv_l);
      alignas(64) Real fxk[kP], fyk[kP], fzk[kP];
#pragma omp simd
      for (int k = 0; k < kP; ++k) {
        const Real dx = xi[k] - xj[k], dy = yi[k] - yj[k], dz = zi[k] - zj[k];
        const Real r2 = r2m[k], w = wm[k];
        Real rinv, inv_q = 0, u = 0;
        if constexpr (kEwald && kFloat) {
          rinv = rinv_l[k];
          inv_q = inv_q_l[k];
          u = u_l[k];
        } else if constexpr (kFloat) {
          rinv = rinv_l[k];
        } else {
          rinv = Real(1) / std::sqrt(r2);
        }
        const Real rinv2 = rinv * rinv, rinv6 = rinv2 * rinv2 * rinv2;
        Real c6, c12;
        if constexpr (kGeometric) {
          c6 = s6i[k] * s6j[k];
          c12 = s12i[k] * s12j[k];
        } else {
          c6 = C6[ti[k] + tj[k]];
          c12 = C12[ti[k] + tj[k]];
        }
        Real fscal = (c12 * rinv6 - c6) * rinv6 * rinv2;  // c6, c12 hold 6 c6 and 12 c12
        const Real qq = qi[k] * qj[k];
        if constexpr (kEwald && kFloat) {
          // erf(beta r)/r and its force / r in r^2 (ewald_table.h): G = P / Q, E a polynomial.
          fscal += qq * (rinv * rinv2 + EwaldPolynomial::eval_num(gp, u) * inv_q);
          if constexpr (kEnergy) vc[k] += w * qq * (rinv - EwaldPolynomial::eval(ce, u) - eshift);
        } else if constexpr (kEwald) {
          // erf(beta r)/r and its force / r from the Hermite table (ewald_table.h).
          const Real tr = r2 * rinv * tscale;
          const int i = static_cast<int>(tr);
          const Real a = tr - static_cast<Real>(i), a2 = a * a, am = Real(1) - a, am2 = am * am;
          const Real h00 = (Real(1) + Real(2) * a) * am2, h10 = a * am2, h01 = a2 * (Real(3) - Real(2) * a),
                     h11 = -a2 * am;
          const int n = 4 * i;
          const Real gcorr = h00 * tab[n + 2] + h10 * tab[n + 3] + h01 * tab[n + 6] + h11 * tab[n + 7];
          fscal += qq * (rinv * rinv2 + gcorr);
          if constexpr (kEnergy) {
            const Real ecorr = h00 * tab[n] + h10 * tab[n + 1] + h01 * tab[n + 4] + h11 * tab[n + 5];
            vc[k] += w * qq * (rinv - ecorr - eshift);
          }
        } else {
          fscal += qq * (rinv * rinv2 - Real(2) * krf);
          if constexpr (kEnergy) vc[k] += w * qq * (rinv + krf * r2 - crf);
        }
        if constexpr (kEnergy)
          vlj[k] += w * (c12 * Real(1.0 / 12) * (rinv6 * rinv6 - sh12) - c6 * Real(1.0 / 6) * (rinv6 - sh6));
        fscal *= w;
        fxk[k] = fscal * dx;
        fyk[k] = fscal * dy;
        fzk[k] = fscal * dz;
        fix[k] += fxk[k];
        fiy[k] += fyk[k];
        fiz[k] += fzk[k];
      }
      // The j-cluster's forces: minus the sum over its column of i-slots, as two halvings of the lanes in
      // GCC's generic vectors (written as loops, GCC did them one float at a time).
      static_assert(kC == 4, "the reduction below halves 16 lanes twice");
      Real* fj = F + static_cast<size_t>(cjs[pr]) * 3 * kC;
      reduce_j(fxk, fj);
      reduce_j(fyk, fj + kC);
      reduce_j(fzk, fj + 2 * kC);
    }
    Real* fi = F + static_cast<size_t>(en.ci) * 3 * kC;
    double elj = 0, ec = 0;
    Vec3& fs = sums->shift_force[en.shift];
    for (int ii = 0; ii < kC; ++ii) {
      Real sx = 0, sy = 0, sz = 0;
      for (int jj = 0; jj < kC; ++jj) {
        sx += fix[ii * kC + jj];
        sy += fiy[ii * kC + jj];
        sz += fiz[ii * kC + jj];
        if constexpr (kEnergy) {
          elj += vlj[ii * kC + jj];
          ec += vc[ii * kC + jj];
        }
      }
      fi[ii] += sx;
      fi[kC + ii] += sy;
      fi[2 * kC + ii] += sz;
      fs[0] += sx;
      fs[1] += sy;
      fs[2] += sz;
    }
    sums->lj += elj;
    sums->coulomb += ec;
  }
}

template <typename Real>
NonbondedEnergies NonbondedKernel::Impl::run(Data<Real>& d, const PairList& list, const std::vector<Vec3>& x,
                                             bool energies, std::vector<Vec3>* f, EntryRange range) {
  const std::vector<int>& slot_atom = list.slot_atom();
  const std::vector<Vec3>& offset = list.slot_offset();
  const int nclusters = list.num_clusters();
  const size_t nslots = slot_atom.size(), nlanes = static_cast<size_t>(nclusters) * kP;
  if (list.build_count() != list_build) {  // new cluster order: charges and types per slot
    list_build = list.build_count();
    const Topology& top = *topology;
    d.q.assign(nlanes, 0);
    d.t.assign(nlanes, 0);
    d.s6.assign(nlanes, 0);
    d.s12.assign(nlanes, 0);
    for (int c = 0; c < nclusters; ++c)
      for (int k = 0; k < kP; ++k) {
        const int a = slot_atom[static_cast<size_t>(c) * kC + k % kC];
        if (a < 0) continue;
        d.q[static_cast<size_t>(c) * kP + k] = static_cast<Real>(top.charge[a]);
        d.t[static_cast<size_t>(c) * kP + k] = top.type[a];
        d.s6[static_cast<size_t>(c) * kP + k] = static_cast<Real>(std::sqrt(6 * top.c6(top.type[a], top.type[a])));
        d.s12[static_cast<size_t>(c) * kP + k] =
            static_cast<Real>(std::sqrt(12 * top.c12(top.type[a], top.type[a])));
      }
    d.x.assign(nlanes, 0);
    d.y.assign(nlanes, 0);
    d.z.assign(nlanes, 0);
  }
  qk::parallel_for(0, nclusters, 4096, [&](int64_t lo, int64_t hi) {
    for (int64_t c = lo; c < hi; ++c)
      for (int jj = 0; jj < kC; ++jj) {
        const size_t s = static_cast<size_t>(c) * kC + jj;
        if (slot_atom[s] < 0) continue;
        const Vec3& xa = x[slot_atom[s]];
        const Real px = static_cast<Real>(xa[0] - offset[s][0]), py = static_cast<Real>(xa[1] - offset[s][1]),
                   pz = static_cast<Real>(xa[2] - offset[s][2]);
        for (int ii = 0; ii < kC; ++ii) {
          const size_t l = static_cast<size_t>(c) * kP + ii * kC + jj;
          d.x[l] = px;
          d.y[l] = py;
          d.z[l] = pz;
        }
      }
  });
  // Blocks of entries with about equal numbers of cluster pairs, each with its own force buffer, summed in
  // block order: the forces do not depend on which thread ran a block. Threads claim blocks as they come
  // free (a thread held up elsewhere on a shared machine does not hold the step up), so there are a few
  // per thread.
  // Entries [r0, r1) only: this rank's share when several compute the forces (ForceShare).
  const std::vector<PairList::Entry>& entries = list.entries();
  const int64_t all = static_cast<int64_t>(entries.size());
  const int64_t r0 = std::clamp<int64_t>(range.begin, 0, all), r1 = std::clamp<int64_t>(range.end, r0, all);
  const int64_t ne = r1 - r0, p0 = r0 < all ? entries[r0].begin : list.num_cluster_pairs();
  const int64_t npairs = (r1 < all ? entries[r1].begin : list.num_cluster_pairs()) - p0;
  const int nthreads = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(ne, num_threads())));
  const int nchunks = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(ne, nthreads == 1 ? 1 : 4 * nthreads)));
  std::vector<int64_t> bounds(nchunks + 1, r1);
  bounds[0] = r0;
  for (int64_t e = r0, ch = 1; e < r1 && ch < nchunks; ++e)
    if (entries[e].begin - p0 >= npairs * ch / nchunks) bounds[ch++] = e;
  d.f.resize(nchunks);
  std::vector<ChunkSums> sums(nchunks);
  std::atomic<int> next_chunk{0};
  qk::parallel_for(0, nthreads, 1, [&](int64_t, int64_t) {
    for (int ch = next_chunk.fetch_add(1); ch < nchunks; ch = next_chunk.fetch_add(1)) {
      std::vector<Real>& fc = d.f[ch];
      fc.assign(3 * nslots, Real(0));
      const int64_t e0 = bounds[ch], e1 = bounds[ch + 1];
      if (p.ewald && energies) {
        kernel<Real, true, true>(geometric, d, list, e0, e1, fc.data(), &sums[ch]);
      } else if (p.ewald) {
        kernel<Real, true, false>(geometric, d, list, e0, e1, fc.data(), &sums[ch]);
      } else if (energies) {
        kernel<Real, false, true>(geometric, d, list, e0, e1, fc.data(), &sums[ch]);
      } else {
        kernel<Real, false, false>(geometric, d, list, e0, e1, fc.data(), &sums[ch]);
      }
    }
  });
  // Forces back to atoms, chunk by chunk in order; the virial as -1/2 (sum_slots x (x) F - sum_shifts S (x) F_S).
  NonbondedEnergies total;
  Mat3& vir = total.virial;
  auto slot_force = [&](size_t s) {
    Vec3 fa{0, 0, 0};
    for (int ch = 0; ch < nchunks; ++ch)
      for (int c = 0; c < 3; ++c) fa[c] += static_cast<double>(d.f[ch][(s / kC) * 3 * kC + c * kC + s % kC]);
    return fa;
  };
  if (!energies) {  // forces only: slots are atoms of their own, so in parallel
    qk::parallel_for(0, static_cast<int64_t>(nslots), 2048, [&](int64_t lo, int64_t hi) {
      for (int64_t s = lo; s < hi; ++s) {
        const int a = slot_atom[s];
        if (a < 0) continue;
        const Vec3 fa = slot_force(s);
        for (int c = 0; c < 3; ++c) (*f)[a][c] += fa[c];
      }
    });
  }
  for (size_t s = 0; s < nslots && energies; ++s) {
    const int a = slot_atom[s];
    if (a < 0) continue;
    const Vec3 fa = slot_force(s);
    for (int c = 0; c < 3; ++c) (*f)[a][c] += fa[c];
    const Vec3 xs{x[a][0] - offset[s][0], x[a][1] - offset[s][1], x[a][2] - offset[s][2]};
    for (int r = 0; r < 3; ++r)
      for (int c = 0; c < 3; ++c) vir[r][c] -= 0.5 * xs[r] * fa[c];
  }
  for (int ch = 0; ch < nchunks && energies; ++ch) {
    total.lj += sums[ch].lj;
    total.coulomb += sums[ch].coulomb;
    for (int sh = 0; sh < 27; ++sh)
      for (int r = 0; r < 3; ++r)
        for (int c = 0; c < 3; ++c) vir[r][c] += 0.5 * list.shifts()[sh][r] * sums[ch].shift_force[sh][c];
  }
  return total;
}

NonbondedKernel::NonbondedKernel(const Topology& top, const NonbondedParams& p, bool single_precision)
    : impl_(std::make_unique<Impl>(top, p, single_precision)) {}
NonbondedKernel::~NonbondedKernel() = default;

void NonbondedKernel::set_topology(const Topology& top) { impl_->set_types(top); }

NonbondedEnergies NonbondedKernel::compute(const PairList& list, const std::vector<Vec3>& x, bool energies,
                                           std::vector<Vec3>* f, EntryRange range) {
  return impl_->single ? impl_->run(impl_->d32, list, x, energies, f, range)
                       : impl_->run(impl_->d64, list, x, energies, f, range);
}

EntryRange entry_share(const PairList& list, int rank, int size) {
  const std::vector<PairList::Entry>& entries = list.entries();
  const int64_t ne = static_cast<int64_t>(entries.size()), npairs = list.num_cluster_pairs();
  // The first entry whose cluster pairs start at or past k/size of them.
  auto start = [&](int k) -> int64_t {
    if (k <= 0) return 0;
    if (k >= size) return ne;
    const int64_t target = npairs * k / size;
    const auto it = std::lower_bound(entries.begin(), entries.end(), target,
                                     [](const PairList::Entry& e, int64_t t) { return e.begin < t; });
    return it - entries.begin();
  };
  return {start(rank), start(rank + 1)};
}

std::vector<int> exclusion_chunks(const Topology& top, int max_chunks) {
  const int n = top.num_atoms();
  std::vector<int> bounds{0};
  int reach = 0;  // the highest atom an atom before here excludes
  for (int a = 0; a < n; ++a) {
    if (a > reach && a - bounds.back() >= std::max(1, n / std::max(1, max_chunks))) bounds.push_back(a);
    for (int j : top.exclusions[a]) reach = std::max(reach, j);
  }
  bounds.push_back(n);
  return bounds;
}

namespace {

// One range of atoms: corrections of the pairs (i, j > i) with i in [a0, a1) (so j too) and the self terms.
NonbondedEnergies exclusions_in(const std::vector<Vec3>& x, const RectBox& box, const Topology& top,
                                const NonbondedParams& p, std::vector<Vec3>* f, int a0, int a1) {
  const double rc2 = p.rc * p.rc;
  NonbondedEnergies e;
  Mat3& vir = e.virial;
  for (int i = a0; i < a1; ++i) {
    const double qi = p.coulomb_factor * top.charge[i];
    if (qi == 0) continue;
    // The self term (GROMACS: the nbnxm kernel's "do_self" part).
    e.coulomb -= qi * top.charge[i] * (p.ewald ? p.beta / std::sqrt(units::kPi) : 0.5 * p.crf);
    for (int j : top.exclusions[i]) {
      if (j <= i) continue;
      const double qq = qi * top.charge[j];
      if (qq == 0) continue;
      const Vec3 d = box.delta(x[i], x[j]);
      const double r2 = dot(d, d);
      if (r2 >= rc2) continue;  // GROMACS masks excluded pairs beyond the cut-off too
      double fscal;
      if (p.ewald) {
        // -qq erf(beta r)/r: the mesh's interaction of the pair, taken out again (E and G of ewald_table.h).
        double e_corr, g_corr;
        p.ewald_table.lookup(std::sqrt(r2), &e_corr, &g_corr);
        e.coulomb -= qq * e_corr;
        fscal = qq * g_corr;
      } else {
        e.coulomb += qq * (p.krf * r2 - p.crf);
        fscal = -2 * qq * p.krf;
      }
      const Vec3 fij{fscal * d[0], fscal * d[1], fscal * d[2]};
      for (int c = 0; c < 3; ++c) {
        (*f)[i][c] += fij[c];
        (*f)[j][c] -= fij[c];
      }
      add_virial(&vir, d, fij);
    }
  }
  return e;
}

}  // namespace

NonbondedEnergies coulomb_exclusions_and_self(const std::vector<Vec3>& x, const RectBox& box, const Topology& top,
                                              const NonbondedParams& p, std::vector<Vec3>* f,
                                              const std::vector<int>& chunks) {
  if (chunks.size() < 2) return exclusions_in(x, box, top, p, f, 0, top.num_atoms());
  const int nchunks = static_cast<int>(chunks.size()) - 1;
  std::vector<NonbondedEnergies> parts(nchunks);
  qk::parallel_for(0, nchunks, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t c = lo; c < hi; ++c) parts[c] = exclusions_in(x, box, top, p, f, chunks[c], chunks[c + 1]);
  });
  NonbondedEnergies e;
  for (const NonbondedEnergies& part : parts) {
    e.coulomb += part.coulomb;
    for (int a = 0; a < 3; ++a)
      for (int b = 0; b < 3; ++b) e.virial[a][b] += part.virial[a][b];
  }
  return e;
}

}  // namespace qk::md
