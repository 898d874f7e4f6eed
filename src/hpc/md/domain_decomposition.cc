#include "domain_decomposition.h"

#include <algorithm>
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

// Where every molecule goes: its rank (the slab holding its centre along the axis) and its atoms' positions
// whole, in that domain's frame (the centre moved into [0, L) along the axis); per rank the lowest and highest
// coordinate of its atoms along it; and the farthest any atom reaches along it from its molecule's centre.
struct Layout {
  std::vector<int> rank_of_molecule;
  std::vector<Vec3> x;
  std::vector<double> lo, hi;
  double reach = 0;
};

Layout lay_out(const std::vector<int>& molecule_start, const std::vector<Vec3>& x, const RectBox& box, int ranks,
               int axis) {
  Layout l;
  const int nmol = static_cast<int>(molecule_start.size()) - 1;
  const double lx = box.length[axis];
  l.rank_of_molecule.resize(nmol);
  l.x.resize(x.size());
  l.lo.assign(ranks, HUGE_VAL);
  l.hi.assign(ranks, -HUGE_VAL);
  for (int m = 0; m < nmol; ++m) {
    const int a0 = molecule_start[m], a1 = molecule_start[m + 1];
    double centre = 0;
    for (int a = a0; a < a1; ++a) {
      const Vec3 d = box.delta(x[a], x[a0]);  // whole: each atom at its image nearest the first
      for (int k = 0; k < 3; ++k) l.x[a][k] = x[a0][k] + d[k];
      centre += l.x[a][axis];
    }
    centre /= std::max(a1 - a0, 1);
    const double shift = -std::floor(centre / lx) * lx;
    centre += shift;
    const int r = std::clamp(static_cast<int>(centre * ranks / lx), 0, ranks - 1);
    l.rank_of_molecule[m] = r;
    for (int a = a0; a < a1; ++a) {
      l.x[a][axis] += shift;
      l.reach = std::max(l.reach, std::abs(l.x[a][axis] - centre));
      l.lo[r] = std::min(l.lo[r], l.x[a][axis]);
      l.hi[r] = std::max(l.hi[r], l.x[a][axis]);
    }
  }
  return l;
}

std::string fit_problem(const Layout& l, const Vec3& box, double rlist, int ranks, int axis) {
  char why[400];
  const double slab = box[axis] / ranks, need = rlist + 2 * l.reach;
  if (ranks < 2) return "domain decomposition needs at least 2 ranks";
  for (int d = 0; d < 3; ++d)
    if (d != axis && 2 * rlist >= box[d]) {
      std::snprintf(why, sizeof why, "the pair-list radius %.3f nm is not below half the box's %c (%.3f nm)", rlist,
                    "xyz"[d], box[d]);
      return why;
    }
  if (slab < need) {
    std::snprintf(why, sizeof why,
                  "%d slabs of a %.3f nm box are %.3f nm wide, under the %.3f nm they need (the pair-list radius "
                  "%.3f nm and twice the %.3f nm a molecule reaches along %c from its centre): at most %d ranks",
                  ranks, box[axis], slab, need, rlist, l.reach, "xyz"[axis],
                  std::max(1, static_cast<int>(box[axis] / need)));
    return why;
  }
  return {};
}

}  // namespace

int DomainDecomposition::slab_axis(const Vec3& box) {
  int axis = 0;
  for (int d = 1; d < 3; ++d)
    if (box[d] > box[axis] * (1 + 1e-9)) axis = d;
  return axis;
}

std::string DomainDecomposition::why_not(const Topology& top, const std::vector<Vec3>& x, const Vec3& box,
                                         double rlist, int ranks) {
  if (ranks < 2) return "domain decomposition needs at least 2 ranks";
  const int axis = slab_axis(box);
  return fit_problem(lay_out(molecule_starts(top), x, RectBox(box), ranks, axis), box, rlist, ranks, axis);
}

DomainDecomposition::DomainDecomposition(const Topology& top, const ForceShare& share)
    : top_(top), share_(share), rank_(share.rank), size_(share.size), molecule_start_(molecule_starts(top)) {
  QK_CHECK(size_ >= 2 && rank_ >= 0 && rank_ < size_ && share.allreduce_sum && share.exchange,
           "domain decomposition: rank ", rank_, " of ", size_, " needs at least 2 ranks, its sum and its exchange");
}

std::string DomainDecomposition::partition(const std::vector<Vec3>& x, const Vec3& box, double rlist) {
  QK_CHECK(static_cast<int>(x.size()) == top_.num_atoms(), "domain decomposition: ", x.size(),
           " positions for a topology of ", top_.num_atoms(), " atoms");
  if (axis_ < 0) axis_ = slab_axis(box);  // kept for the run (pressure coupling scales the box evenly)
  const Layout l = lay_out(molecule_start_, x, RectBox(box), size_, axis_);
  const std::string problem = fit_problem(l, box, rlist, size_, axis_);
  if (!problem.empty()) return problem;
  const int nmol = static_cast<int>(molecule_start_.size()) - 1;
  auto atoms_of = [&](int r) {
    std::vector<int> atoms;
    for (int m = 0; m < nmol; ++m)
      if (l.rank_of_molecule[m] == r)
        for (int a = molecule_start_[m]; a < molecule_start_[m + 1]; ++a) atoms.push_back(a);
    return atoms;
  };
  // The atoms of rank `from` that rank `to` (the one below it) needs: up to rlist above to's highest atom,
  // with `from`'s x moved up by the box where it wraps.
  auto border = [&](const std::vector<int>& from_atoms, int to, double shift) {
    std::vector<int> picked;  // indices into from_atoms
    for (size_t k = 0; k < from_atoms.size(); ++k)
      if (l.x[from_atoms[k]][axis_] + shift < l.hi[to] + rlist) picked.push_back(static_cast<int>(k));
    return picked;
  };
  const int next = (rank_ + 1) % size_, prev = (rank_ + size_ - 1) % size_;
  home_ = atoms_of(rank_);
  home_x_.resize(home_.size());
  for (size_t k = 0; k < home_.size(); ++k) home_x_[k] = l.x[home_[k]];
  send_shift_ = rank_ == 0 ? box[axis_] : 0.0;
  send_ = border(home_, prev, send_shift_);
  const std::vector<int> next_atoms = atoms_of(next);
  halo_.clear();
  for (int k : border(next_atoms, rank_, next == 0 ? box[axis_] : 0.0)) halo_.push_back(next_atoms[k]);
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
  send_buf_.resize(3 * send_.size());
  for (size_t k = 0; k < send_.size(); ++k) {
    const Vec3& x = x_home[send_[k]];
    for (int d = 0; d < 3; ++d) send_buf_[3 * k + d] = x[d] + (d == axis_ ? send_shift_ : 0.0);
  }
  recv_buf_.resize(3 * halo_.size());
  share_.exchange((rank_ + size_ - 1) % size_, send_buf_.data(), static_cast<int64_t>(send_buf_.size()),
                  (rank_ + 1) % size_, recv_buf_.data(), static_cast<int64_t>(recv_buf_.size()));
  for (size_t k = 0; k < halo_.size(); ++k)
    for (int d = 0; d < 3; ++d) x_halo[k][d] = recv_buf_[3 * k + d];
}

void DomainDecomposition::return_halo_forces(const Vec3* f_halo, Vec3* f_home) {
  recv_buf_.resize(3 * halo_.size());
  for (size_t k = 0; k < halo_.size(); ++k)
    for (int d = 0; d < 3; ++d) recv_buf_[3 * k + d] = f_halo[k][d];
  send_buf_.resize(3 * send_.size());
  share_.exchange((rank_ + 1) % size_, recv_buf_.data(), static_cast<int64_t>(recv_buf_.size()),
                  (rank_ + size_ - 1) % size_, send_buf_.data(), static_cast<int64_t>(send_buf_.size()));
  for (size_t k = 0; k < send_.size(); ++k)
    for (int d = 0; d < 3; ++d) f_home[send_[k]][d] += send_buf_[3 * k + d];
}

}  // namespace qk::md
