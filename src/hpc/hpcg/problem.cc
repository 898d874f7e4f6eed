// Problem generation and halo exchange for HPCG (see problem.h).
#include "hpcg/problem.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <unordered_map>

#include "qk/base/error.h"

namespace qk::hpc::hpcg {

Geometry make_geometry(int size, int rank, int nx, int ny, int nz, int npx, int npy, int npz) {
  Geometry g;
  g.size = size;
  g.rank = rank;
  if (npx <= 0 || npy <= 0 || npz <= 0) {
    // The most cubic factorization a <= b <= c; the largest factor goes to z.
    int best = -1;
    for (int a = 1; a * a * a <= size; ++a) {
      if (size % a) continue;
      for (int b2 = a; a * b2 * b2 <= size; ++b2) {
        if ((size / a) % b2) continue;
        const int c = size / a / b2;
        if (best < 0 || c - a < best) best = c - a, npx = a, npy = b2, npz = c;
      }
    }
  }
  QK_CHECK(int64_t(npx) * npy * npz == size, "HPCG: the process grid ", npx, " x ", npy, " x ",
           npz, " needs ", int64_t(npx) * npy * npz, " ranks, but this job has ", size);
  g.npx = npx, g.npy = npy, g.npz = npz;
  g.ipx = rank % npx;
  g.ipy = (rank / npx) % npy;
  g.ipz = rank / (npx * npy);
  g.nx = nx, g.ny = ny, g.nz = nz;
  g.gnx = int64_t(nx) * npx, g.gny = int64_t(ny) * npy, g.gnz = int64_t(nz) * npz;
  g.gx0 = int64_t(g.ipx) * nx, g.gy0 = int64_t(g.ipy) * ny, g.gz0 = int64_t(g.ipz) * nz;
  return g;
}

namespace {

int64_t global_index(const Geometry& g, int64_t x, int64_t y, int64_t z) {
  return x + g.gnx * (y + g.gny * z);
}

void generate_level(const Comm& world, Level& a) {
  const Geometry& g = a.geo;
  const int64_t nrow = int64_t(g.nx) * g.ny * g.nz;
  QK_CHECK(nrow < (int64_t(1) << 31) / 2, "HPCG: local grid ", g.nx, "x", g.ny, "x", g.nz,
           " is too large for 32-bit column indices; use more ranks");
  a.nrow = nrow;
  a.cols.assign(nrow * kSlots, 0);
  a.vals.assign(nrow * kSlots, 0.0);
  a.nnz.assign(nrow, 0);
  a.diag_slot.assign(nrow, 0);
  a.diag.assign(nrow, 0.0);

  // Externals: per owner rank, the sorted global indices we read.
  std::map<int, std::vector<int64_t>> ext_by_rank;
  auto owner_of = [&](int64_t x, int64_t y, int64_t z) {
    return g.rank_of(static_cast<int>(x / g.nx), static_cast<int>(y / g.ny),
                     static_cast<int>(z / g.nz));
  };
  auto for_each_neighbor = [&](int64_t i, auto&& fn) {
    const int ix = static_cast<int>(i % g.nx), iy = static_cast<int>((i / g.nx) % g.ny),
              iz = static_cast<int>(i / (int64_t(g.nx) * g.ny));
    const int64_t gx = g.gx0 + ix, gy = g.gy0 + iy, gz = g.gz0 + iz;
    for (int sz = -1; sz <= 1; ++sz)
      for (int sy = -1; sy <= 1; ++sy)
        for (int sx = -1; sx <= 1; ++sx) {
          const int64_t x = gx + sx, y = gy + sy, z = gz + sz;
          if (x < 0 || y < 0 || z < 0 || x >= g.gnx || y >= g.gny || z >= g.gnz) continue;
          fn(x, y, z, sx == 0 && sy == 0 && sz == 0);
        }
  };
  for (int64_t i = 0; i < nrow; ++i)
    for_each_neighbor(i, [&](int64_t x, int64_t y, int64_t z, bool) {
      if (x >= g.gx0 && x < g.gx0 + g.nx && y >= g.gy0 && y < g.gy0 + g.ny && z >= g.gz0 &&
          z < g.gz0 + g.nz)
        return;
      ext_by_rank[owner_of(x, y, z)].push_back(global_index(g, x, y, z));
    });
  std::unordered_map<int64_t, int32_t> ext_index;
  int64_t next = nrow;
  Halo& h = a.halo;
  for (auto& [r, v] : ext_by_rank) {
    std::sort(v.begin(), v.end());
    v.erase(std::unique(v.begin(), v.end()), v.end());
    h.neighbors.push_back(r);
    h.recv_count.push_back(static_cast<int64_t>(v.size()));
    for (int64_t gi : v) ext_index[gi] = static_cast<int32_t>(next++);
  }
  a.ncol = next;

  // The rows. The stencil is symmetric, so what a neighbour reads from me is
  // exactly my points next to its box, sorted by global index (as it sorted).
  int64_t nnz_total = 0;
  for (int64_t i = 0; i < nrow; ++i) {
    int n = 0;
    for_each_neighbor(i, [&](int64_t x, int64_t y, int64_t z, bool self) {
      int64_t col;
      if (x >= g.gx0 && x < g.gx0 + g.nx && y >= g.gy0 && y < g.gy0 + g.ny && z >= g.gz0 &&
          z < g.gz0 + g.nz)
        col = (x - g.gx0) + g.nx * ((y - g.gy0) + int64_t(g.ny) * (z - g.gz0));
      else
        col = ext_index.at(global_index(g, x, y, z));
      a.cols[i * kSlots + n] = static_cast<int32_t>(col);
      a.vals[i * kSlots + n] = self ? 26.0 : -1.0;
      if (self) a.diag_slot[i] = static_cast<uint8_t>(n), a.diag[i] = 26.0;
      ++n;
    });
    for (int s = n; s < kSlots; ++s) a.cols[i * kSlots + s] = static_cast<int32_t>(i);
    a.nnz[i] = static_cast<uint8_t>(n);
    nnz_total += n;
  }
  a.local_nnz = nnz_total;
  for (size_t k = 0; k < h.neighbors.size(); ++k) {
    const int r = h.neighbors[k];
    const int rx = r % g.npx, ry = (r / g.npx) % g.npy, rz = r / (g.npx * g.npy);
    // r's box, grown by one point: my points inside it are what r reads.
    const int64_t x0 = int64_t(rx) * g.nx - 1, x1 = int64_t(rx + 1) * g.nx;
    const int64_t y0 = int64_t(ry) * g.ny - 1, y1 = int64_t(ry + 1) * g.ny;
    const int64_t z0 = int64_t(rz) * g.nz - 1, z1 = int64_t(rz + 1) * g.nz;
    int64_t count = 0;
    for (int64_t i = 0; i < nrow; ++i) {  // local order == global order within my box
      const int64_t gx = g.gx0 + i % g.nx, gy = g.gy0 + (i / g.nx) % g.ny,
                    gz = g.gz0 + i / (int64_t(g.nx) * g.ny);
      if (gx >= x0 && gx <= x1 && gy >= y0 && gy <= y1 && gz >= z0 && gz <= z1) {
        h.send_index.push_back(static_cast<int32_t>(i));
        ++count;
      }
    }
    h.send_count.push_back(count);
  }
  h.send_buf.resize(h.send_index.size());
  a.global_rows = static_cast<int64_t>(world.allreduce_sum(static_cast<double>(nrow)));
  a.global_nnz = static_cast<int64_t>(world.allreduce_sum(static_cast<double>(nnz_total)));
}

}  // namespace

std::unique_ptr<Level> generate_problem(const Comm& world, const Geometry& geo, int levels,
                                        std::vector<double>* b) {
  const int f = 1 << (levels - 1);
  QK_CHECK(geo.nx % f == 0 && geo.ny % f == 0 && geo.nz % f == 0, "HPCG: local dimensions ",
           geo.nx, " x ", geo.ny, " x ", geo.nz, " must be multiples of ", f, " for a ", levels,
           "-level multigrid");
  auto fine = std::make_unique<Level>();
  fine->geo = geo;
  generate_level(world, *fine);
  b->assign(fine->nrow, 0.0);
  for (int64_t i = 0; i < fine->nrow; ++i) (*b)[i] = 26.0 - (fine->nnz[i] - 1);

  Level* a = fine.get();
  for (int l = 1; l < levels; ++l) {
    auto c = std::make_unique<Level>();
    c->geo = a->geo;
    c->geo.nx /= 2, c->geo.ny /= 2, c->geo.nz /= 2;
    c->geo.gnx /= 2, c->geo.gny /= 2, c->geo.gnz /= 2;
    c->geo.gx0 /= 2, c->geo.gy0 /= 2, c->geo.gz0 /= 2;
    generate_level(world, *c);
    const Geometry& cg = c->geo;
    a->f2c.resize(c->nrow);
    for (int z = 0; z < cg.nz; ++z)
      for (int y = 0; y < cg.ny; ++y)
        for (int x = 0; x < cg.nx; ++x) {
          const int64_t ic = x + int64_t(cg.nx) * (y + int64_t(cg.ny) * z);
          a->f2c[ic] = static_cast<int32_t>(2 * x + int64_t(a->geo.nx) *
                                                        (2 * y + int64_t(a->geo.ny) * 2 * z));
        }
    a->axf.assign(a->ncol, 0.0);
    a->rc.assign(c->nrow, 0.0);
    a->xc.assign(c->ncol, 0.0);
    a->coarse = std::move(c);
    a = a->coarse.get();
  }
  return fine;
}

void exchange_halo(Level& a, const Comm& world, double* x) {
  Halo& h = a.halo;
  if (h.neighbors.empty()) return;
  constexpr int kTag = 8101;
  std::vector<MPI_Request> reqs;
  reqs.reserve(2 * h.neighbors.size());
  int64_t roff = a.nrow;
  for (size_t k = 0; k < h.neighbors.size(); ++k) {
    reqs.push_back(world.irecv(x + roff, sizeof(double) * h.recv_count[k], h.neighbors[k], kTag));
    roff += h.recv_count[k];
  }
  for (size_t i = 0; i < h.send_index.size(); ++i) h.send_buf[i] = x[h.send_index[i]];
  int64_t soff = 0;
  for (size_t k = 0; k < h.neighbors.size(); ++k) {
    reqs.push_back(world.isend(h.send_buf.data() + soff, sizeof(double) * h.send_count[k],
                               h.neighbors[k], kTag));
    soff += h.send_count[k];
  }
  QK_MPI_CHECK(MPI_Waitall(static_cast<int>(reqs.size()), reqs.data(), MPI_STATUSES_IGNORE));
}

// Note [line stencil]: a point whose neighbours are all local reads column
// i + offsets[slot] for stencil slot (dz, dy, dx) (z, then y, then x, each
// -1..1; a neighbour outside the global grid has value 0 there). So with the
// values of an x-line stored slot-major, the optimized kernels need no column
// indices (8 instead of 12 bytes per nonzero) and, slot by slot, the points of
// a line are consecutive: the loops over x vectorize. A line qualifies whole
// (kLineFull) when none of its points has a halo neighbour and all its offset
// reads stay in [0, nrow) (reads of a missing neighbour are multiplied by 0);
// otherwise its inner points qualify when its four neighbour lines are local
// (kLineInner); otherwise (faces next to another rank) the general rows serve.
void optimize_problem(Level& a, bool recursive) {
  const Geometry& g = a.geo;
  const int64_t nx = g.nx, ny = g.ny, nxy = nx * ny;
  int64_t min_off = 0, max_off = 0;
  for (int dz = -1, s = 0; dz <= 1; ++dz)
    for (int dy = -1; dy <= 1; ++dy)
      for (int dx = -1; dx <= 1; ++dx, ++s) {
        a.offsets[s] = dx + nx * dy + nxy * dz;
        min_off = std::min(min_off, a.offsets[s]);
        max_off = std::max(max_off, a.offsets[s]);
      }
  const int64_t nlines = ny * g.nz;
  a.line_vals.assign(static_cast<size_t>(nlines * kSlots * nx), 0.0);
  a.line_mode.assign(static_cast<size_t>(nlines), kLineGeneral);
  a.inv_diag.assign(a.nrow, 0.0);
  a.left_over_diag.assign(a.nrow, 0.0);
  a.right_over_diag.assign(a.nrow, 0.0);
  for (int64_t l = 0; l < nlines; ++l) {
    const int64_t y = l % ny, z = l / ny;
    bool full = nx >= 3 && ny >= 3 && l * nx + min_off >= 0 && (l + 1) * nx - 1 + max_off < a.nrow;
    double* lv = &a.line_vals[l * kSlots * nx];
    for (int64_t x = 0; x < nx; ++x) {
      const int64_t i = l * nx + x;
      for (int j = 0; j < a.nnz[i]; ++j) {
        const int64_t c = a.cols[i * kSlots + j];
        if (c >= a.nrow) {
          full = false;
          continue;
        }
        const int64_t cx = c % nx, cy = (c / nx) % ny, cz = c / nxy;
        const int s = int((cz - z + 1) * 9 + (cy - y + 1) * 3 + (cx - x + 1));
        QK_INTERNAL_ASSERT(s >= 0 && s < kSlots && c == i + a.offsets[s]);
        lv[s * nx + x] = a.vals[i * kSlots + j];
      }
      a.inv_diag[i] = 1.0 / a.diag[i];
      a.left_over_diag[i] = lv[12 * nx + x] / a.diag[i];
      a.right_over_diag[i] = lv[14 * nx + x] / a.diag[i];
    }
    const bool inner = nx >= 3 && y >= 1 && y < ny - 1 && z >= 1 && z < g.nz - 1;
    a.line_mode[l] = full ? kLineFull : inner ? kLineInner : kLineGeneral;
  }
  if (recursive && a.coarse) optimize_problem(*a.coarse, true);
}

}  // namespace qk::hpc::hpcg
