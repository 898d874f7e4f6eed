#include "domain_decomposition.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>

#include "qk/base/error.h"

namespace qk::md {
namespace {

std::vector<int> molecule_starts(const Topology& top) {
  std::vector<int> start{0};
  for (const Topology::MoleculeBlock& b : top.molecules)
    for (int m = 0; m < b.count; ++m) start.push_back(start.back() + b.atoms_per_molecule);
  QK_CHECK(start.back() == top.num_atoms(), "domain decomposition: the [ molecules ] hold ", start.back(),
           " atoms, the topology ", top.num_atoms());
  return start;
}

// Where every molecule goes: its rank (the cell holding its centre) and its atoms' positions whole, in that
// domain's frame (the centre moved into [0, L) along each cut axis); per rank and cut axis the lowest and
// highest coordinate of its atoms; and per cut axis the farthest any atom reaches from its molecule's centre.
struct Layout {
  std::vector<int> rank_of_molecule;
  std::vector<Vec3> x;
  std::vector<std::array<double, 2>> lo, hi;
  std::array<double, 2> reach{0, 0};
};

Layout lay_out(const std::vector<int>& molecule_start, const std::vector<Vec3>& x, const RectBox& box,
               const DomainGrid& g) {
  Layout l;
  const int nmol = static_cast<int>(molecule_start.size()) - 1;
  const int ranks = g.cells[0] * g.cells[1];
  l.rank_of_molecule.resize(nmol);
  l.x.resize(x.size());
  l.lo.assign(ranks, {HUGE_VAL, HUGE_VAL});
  l.hi.assign(ranks, {-HUGE_VAL, -HUGE_VAL});
  for (int m = 0; m < nmol; ++m) {
    const int a0 = molecule_start[m], a1 = molecule_start[m + 1];
    Vec3 centre{0, 0, 0};
    for (int a = a0; a < a1; ++a) {
      const Vec3 d = box.delta(x[a], x[a0]);  // whole: each atom at its image nearest the first
      for (int k = 0; k < 3; ++k) {
        l.x[a][k] = x[a0][k] + d[k];
        centre[k] += l.x[a][k];
      }
    }
    int cell[2] = {0, 0};
    for (int c = 0; c < 2; ++c) {
      if (g.cells[c] == 1) continue;
      const int k = g.axes[c];
      const double len = box.length[k];
      double mid = centre[k] / std::max(a1 - a0, 1);
      const double shift = -std::floor(mid / len) * len;
      mid += shift;
      cell[c] = std::clamp(static_cast<int>(mid * g.cells[c] / len), 0, g.cells[c] - 1);
      for (int a = a0; a < a1; ++a) {
        l.x[a][k] += shift;
        l.reach[c] = std::max(l.reach[c], std::abs(l.x[a][k] - mid));
      }
    }
    const int r = cell[0] * g.cells[1] + cell[1];
    l.rank_of_molecule[m] = r;
    for (int a = a0; a < a1; ++a)
      for (int c = 0; c < 2; ++c) {
        l.lo[r][c] = std::min(l.lo[r][c], l.x[a][g.axes[c]]);
        l.hi[r][c] = std::max(l.hi[r][c], l.x[a][g.axes[c]]);
      }
  }
  return l;
}

std::string fit_problem(const Layout& l, const Vec3& box, double rlist, const DomainGrid& g) {
  char why[512];
  for (int d = 0; d < 3; ++d) {
    const bool cut = (g.cells[0] > 1 && g.axes[0] == d) || (g.cells[1] > 1 && g.axes[1] == d);
    if (!cut && 2 * rlist >= box[d]) {
      std::snprintf(why, sizeof why, "the pair-list radius %.3f nm is not below half the box's %c (%.3f nm)", rlist,
                    "xyz"[d], box[d]);
      return why;
    }
  }
  for (int c = 0; c < 2; ++c) {
    if (g.cells[c] == 1) continue;
    const int k = g.axes[c];
    const double width = box[k] / g.cells[c], need = rlist + 2 * l.reach[c];
    if (width >= need) continue;
    if (g.cells[1] == 1) {
      std::snprintf(why, sizeof why,
                    "%d slabs of a %.3f nm box are %.3f nm wide, under the %.3f nm they need (the pair-list radius "
                    "%.3f nm and twice the %.3f nm a molecule reaches along %c from its centre): at most %d ranks",
                    g.cells[0], box[k], width, need, rlist, l.reach[c], "xyz"[k],
                    std::max(1, static_cast<int>(box[k] / need)));
    } else {
      std::snprintf(why, sizeof why,
                    "a %d x %d grid cuts the box's %.3f nm along %c into %.3f nm, under the %.3f nm needed (the "
                    "pair-list radius %.3f nm and twice the %.3f nm a molecule reaches along %c)",
                    g.cells[0], g.cells[1], box[k], "xyz"[k], width, need, rlist, l.reach[c], "xyz"[k]);
    }
    return why;
  }
  return {};
}

// The grids `ranks` can form over this box, fewest halo atoms first (cells' widths summed inversely; slabs
// first among equals): slabs across the longest axis, then p0 x p1 grids across the two longest.
std::vector<DomainGrid> candidate_grids(const Vec3& box, int ranks) {
  int order[3] = {0, 1, 2};
  std::stable_sort(order, order + 3, [&](int a, int b) { return box[a] > box[b] * (1 + 1e-9); });
  std::vector<DomainGrid> grids;
  grids.push_back(DomainGrid{{ranks, 1}, {order[0], order[1]}});
  for (int p1 = 2; p1 * p1 <= ranks; ++p1)
    if (ranks % p1 == 0) grids.push_back(DomainGrid{{ranks / p1, p1}, {order[0], order[1]}});
  auto halo = [&](const DomainGrid& g) {
    double h = 0;
    for (int c = 0; c < 2; ++c)
      if (g.cells[c] > 1) h += g.cells[c] / box[g.axes[c]];
    return h;
  };
  std::stable_sort(grids.begin(), grids.end(),
                   [&](const DomainGrid& a, const DomainGrid& b) { return halo(a) < halo(b) * (1 - 1e-9); });
  return grids;
}

// The first candidate grid that fits, or (cells 0) why none does.
DomainGrid fitting_grid(const std::vector<int>& molecule_start, const std::vector<Vec3>& x, const Vec3& box,
                        double rlist, int ranks, std::string* why) {
  std::string slabs_problem;
  for (const DomainGrid& g : candidate_grids(box, ranks)) {
    const std::string problem = fit_problem(lay_out(molecule_start, x, RectBox(box), g), box, rlist, g);
    if (problem.empty()) return g;
    if (g.cells[1] == 1) slabs_problem = problem;
  }
  *why = slabs_problem;
  return DomainGrid{{0, 0}, {0, 1}};
}

}  // namespace

std::string DomainDecomposition::why_not(const Topology& top, const std::vector<Vec3>& x, const Vec3& box,
                                         double rlist, int ranks) {
  if (ranks < 2) return "domain decomposition needs at least 2 ranks";
  std::string why;
  fitting_grid(molecule_starts(top), x, box, rlist, ranks, &why);
  return why;
}

DomainGrid DomainDecomposition::grid_for(const Topology& top, const std::vector<Vec3>& x, const Vec3& box,
                                         double rlist, int ranks) {
  std::string why;
  return fitting_grid(molecule_starts(top), x, box, rlist, ranks, &why);
}

DomainDecomposition::DomainDecomposition(const Topology& top, const ForceShare& share)
    : top_(top), share_(share), rank_(share.rank), size_(share.size), molecule_start_(molecule_starts(top)) {
  QK_CHECK(size_ >= 2 && rank_ >= 0 && rank_ < size_ && share.allreduce_sum && share.exchange,
           "domain decomposition: rank ", rank_, " of ", size_, " needs at least 2 ranks, its sum and its exchange");
}

unsigned DomainDecomposition::open_axes() const {
  unsigned open = 0;
  for (int c = 0; c < 2; ++c)
    if (grid_.cells[c] > 1) open |= 1u << grid_.axes[c];
  return open;
}

void DomainDecomposition::set_box(const Vec3& box) {
  for (Zone& z : zones_)
    for (int c = 0; c < 2; ++c) z.send_shift[grid_.axes[c]] = z.send_wrap[c] * box[grid_.axes[c]];
}

std::string DomainDecomposition::partition(const std::vector<Vec3>& x, const Vec3& box, double rlist) {
  QK_CHECK(static_cast<int>(x.size()) == top_.num_atoms(), "domain decomposition: ", x.size(),
           " positions for a topology of ", top_.num_atoms(), " atoms");
  if (grid_.cells[0] == 0) {  // the first: the grid is kept for the run (pressure coupling scales evenly)
    std::string why;
    const DomainGrid g = fitting_grid(molecule_start_, x, box, rlist, size_, &why);
    if (g.cells[0] == 0) return why;
    grid_ = g;
  }
  const Layout l = lay_out(molecule_start_, x, RectBox(box), grid_);
  const std::string problem = fit_problem(l, box, rlist, grid_);
  if (!problem.empty()) return problem;
  const int nmol = static_cast<int>(molecule_start_.size()) - 1;
  auto atoms_of = [&](int r) {
    std::vector<int> atoms;
    for (int m = 0; m < nmol; ++m)
      if (l.rank_of_molecule[m] == r)
        for (int a = molecule_start_[m]; a < molecule_start_[m + 1]; ++a) atoms.push_back(a);
    return atoms;
  };
  const int p0 = grid_.cells[0], p1 = grid_.cells[1];
  auto cell_rank = [&](int i, int j) { return ((i % p0 + p0) % p0) * p1 + (j % p1 + p1) % p1; };
  // The half shell: the next cell along each cut axis and, on a grid, the two diagonal ones ahead along the
  // first axis; each pair of neighbouring cells meets in exactly one of them.
  std::vector<std::array<int, 2>> dirs = {{1, 0}};
  if (p1 > 1) dirs = {{1, 0}, {0, 1}, {1, 1}, {1, -1}};
  // Rank `from`'s atoms that its neighbour `to` (from = to + d) needs, from's positions moved by `shift`
  // (the box where they wrap): up to rlist past to's atoms in the direction d, within rlist of them across it.
  auto border = [&](const std::vector<int>& from_atoms, int to, const std::array<int, 2>& d, const Vec3& shift) {
    std::vector<int> picked;  // indices into from_atoms
    for (size_t k = 0; k < from_atoms.size(); ++k) {
      bool in = true;
      for (int c = 0; c < 2 && in; ++c) {
        if (grid_.cells[c] == 1) continue;
        const double v = l.x[from_atoms[k]][grid_.axes[c]] + shift[grid_.axes[c]];
        if (d[c] >= 0) in = v < l.hi[to][c] + rlist;
        if (d[c] <= 0) in = in && v > l.lo[to][c] - rlist;
      }
      if (in) picked.push_back(static_cast<int>(k));
    }
    return picked;
  };
  // The wrap from a sender at cell s to its neighbour s - d: the box along each axis where it crosses.
  auto wrap = [&](const int s[2], const std::array<int, 2>& d, int c) {
    if (d[c] == 1 && s[c] == 0) return 1;
    if (d[c] == -1 && s[c] == grid_.cells[c] - 1) return -1;
    return 0;
  };
  const int me[2] = {rank_ / p1, rank_ % p1};
  home_ = atoms_of(rank_);
  home_x_.resize(home_.size());
  for (size_t k = 0; k < home_.size(); ++k) home_x_[k] = l.x[home_[k]];
  zones_.clear();
  halo_.clear();
  for (const std::array<int, 2>& d : dirs) {
    Zone z;
    z.to = cell_rank(me[0] - d[0], me[1] - d[1]);
    z.from = cell_rank(me[0] + d[0], me[1] + d[1]);
    const int from_cell[2] = {(me[0] + d[0] + p0) % p0, (me[1] + d[1] + p1) % p1};
    Vec3 from_shift{0, 0, 0};
    for (int c = 0; c < 2; ++c) {
      if (grid_.cells[c] == 1) continue;
      z.send_wrap[c] = wrap(me, d, c);
      z.send_shift[grid_.axes[c]] = z.send_wrap[c] * box[grid_.axes[c]];
      from_shift[grid_.axes[c]] = wrap(from_cell, d, c) * box[grid_.axes[c]];
    }
    z.send = border(home_, z.to, d, z.send_shift);
    const std::vector<int> from_atoms = atoms_of(z.from);
    z.halo_begin = static_cast<int>(halo_.size());
    for (int k : border(from_atoms, rank_, d, from_shift)) halo_.push_back(from_atoms[k]);
    z.halo_end = static_cast<int>(halo_.size());
    zones_.push_back(std::move(z));
  }
  ++version_;
  return {};
}

void DomainDecomposition::gather(const std::vector<Vec3>& local, std::vector<Vec3>* global) const {
  QK_CHECK(local.size() == home_.size(), "domain decomposition: ", local.size(), " values for ", home_.size(),
           " home atoms");
  const size_t n = static_cast<size_t>(top_.num_atoms());
  gather_buf_.assign(3 * n, 0.0);
  for (size_t k = 0; k < home_.size(); ++k)
    for (int d = 0; d < 3; ++d) gather_buf_[3 * static_cast<size_t>(home_[k]) + d] = local[k][d];
  share_.allreduce_sum(gather_buf_.data(), static_cast<int64_t>(gather_buf_.size()));
  global->resize(n);
  for (size_t a = 0; a < n; ++a)
    for (int d = 0; d < 3; ++d) (*global)[a][d] = gather_buf_[3 * a + d];
}

void DomainDecomposition::exchange_positions(const Vec3* x_home, Vec3* x_halo) {
  for (const Zone& z : zones_) {
    send_buf_.resize(3 * z.send.size());
    for (size_t k = 0; k < z.send.size(); ++k)
      for (int d = 0; d < 3; ++d) send_buf_[3 * k + d] = x_home[z.send[k]][d] + z.send_shift[d];
    const int nrecv = z.halo_end - z.halo_begin;
    recv_buf_.resize(3 * static_cast<size_t>(nrecv));
    share_.exchange(z.to, send_buf_.data(), static_cast<int64_t>(send_buf_.size()), z.from, recv_buf_.data(),
                    static_cast<int64_t>(recv_buf_.size()));
    for (int k = 0; k < nrecv; ++k)
      for (int d = 0; d < 3; ++d) x_halo[z.halo_begin + k][d] = recv_buf_[3 * k + d];
  }
}

void DomainDecomposition::return_halo_forces(const Vec3* f_halo, Vec3* f_home) {
  for (const Zone& z : zones_) {
    const int nback = z.halo_end - z.halo_begin;
    recv_buf_.resize(3 * static_cast<size_t>(nback));
    for (int k = 0; k < nback; ++k)
      for (int d = 0; d < 3; ++d) recv_buf_[3 * k + d] = f_halo[z.halo_begin + k][d];
    send_buf_.resize(3 * z.send.size());
    share_.exchange(z.from, recv_buf_.data(), static_cast<int64_t>(recv_buf_.size()), z.to, send_buf_.data(),
                    static_cast<int64_t>(send_buf_.size()));
    for (size_t k = 0; k < z.send.size(); ++k)
      for (int d = 0; d < 3; ++d) f_home[z.send[k]][d] += send_buf_[3 * k + d];
  }
}

}  // namespace qk::md
