// Domain decomposition (GROMACS's, in one or two dimensions): each of P ranks
// owns the molecules whose centre lies in its cell of the box, whole: a slab
// across the box's longest axis, [r, r + 1) L / P, or where slabs would be too
// thin a cell of a p x q grid across its two longest axes. It integrates and
// constrains them, and computes their interactions with each other and with
// a halo from the neighbours of its half shell (the next cell along each cut
// axis, and on a grid the two diagonal ones ahead along the first: each pair
// of neighbouring cells meets in exactly one of them): their atoms up to the
// list radius past its own. The halo's positions come from those ranks every
// step and the forces on them go back. Molecules stay whole on one rank, so
// bonded terms, exclusions and constraints are all local. A domain's
// coordinates are one frame along the cut axes, a neighbour's atoms moved by
// the box where they wrap; its pair list is open along them (pair_list.h)
// and periodic along the others.
//
// Partitioning, when the pair list is built (every nstlist steps), starts from
// every atom's position on every rank (gathered: each rank contributes its
// home atoms; sums with zeros are exact, so all ranks hold the same bits) and
// is a function of them alone, so each rank knows what its neighbours send
// without asking. GROMACS instead migrates the atoms that left a domain to the
// neighbour: a gather of 3N values every nstlist steps here, against the
// replicated-data scheme's 3N every step (ForceShare without exchange).
//
// It fits when a cell is at least the list radius plus twice the largest
// molecule's reach from its centre wide along each cut axis: a rank's atoms
// then meet only its neighbours' (why_not says why not).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "pbc.h"
#include "qk/hpc/md/forces.h"
#include "qk/hpc/md/topology.h"

namespace qk::md {

// How the ranks cut the box: cells[0] x cells[1] along axes[0] and axes[1] (cells[1] 1: slabs).
struct DomainGrid {
  int cells[2] = {0, 1};
  int axes[2] = {0, 1};
};

class DomainDecomposition {
 public:
  // Empty when `ranks` domains fit this system at positions x for a list radius rlist (slabs across the
  // box's longest axis, else a grid across its two longest); otherwise why not (the slabs' reason), as a
  // sentence to show the user.
  static std::string why_not(const Topology& top, const std::vector<Vec3>& x, const Vec3& box, double rlist,
                             int ranks);
  // The grid partition() would choose there (cells[0] 0 where none fits).
  static DomainGrid grid_for(const Topology& top, const std::vector<Vec3>& x, const Vec3& box, double rlist,
                             int ranks);
  // share: this rank of share.size (at least 2), with allreduce_sum and exchange.
  DomainDecomposition(const Topology& top, const ForceShare& share);

  // Every rank with the same x (all atoms, any images): new home molecules and halos (version() changes).
  // Where the slabs no longer fit (a shrunk box, a stretched molecule) nothing changes and it returns why
  // (every rank alike); empty otherwise.
  [[nodiscard]] std::string partition(const std::vector<Vec3>& x, const Vec3& box, double rlist);
  int64_t version() const { return version_; }
  // The box scaled between partitions (pressure coupling): the first rank's atoms go to the last one's halo
  // moved up by the new length.
  void set_box(const Vec3& box);
  unsigned open_axes() const;                       // the cut axes, as bits (pair_list.h's PairListDomain)
  int rank() const { return rank_; }
  int size() const { return size_; }
  const Topology& topology() const { return top_; }
  const ForceShare& share() const { return share_; }
  // This rank's atoms (global indices, molecule by molecule) and their positions at the partition, whole
  // molecules in this domain's frame.
  const std::vector<int>& home() const { return home_; }
  const std::vector<Vec3>& home_positions() const { return home_x_; }
  // The atoms the neighbours send (global indices, in the order they arrive).
  const std::vector<int>& halo() const { return halo_; }

  // Every rank's home values (`local`: this rank's, in home() order) into `global` (num_atoms), the same bits
  // on every rank. Collective.
  void gather(const std::vector<Vec3>& local, std::vector<Vec3>* global) const;
  // The halo's positions (halo().size() of them, this domain's frame) from the neighbours ahead, while this one
  // sends those behind its border atoms. Collective between neighbours.
  void exchange_positions(const Vec3* x_home, Vec3* x_halo);
  // The forces on the halo back to the neighbours ahead, while this one adds those behind's forces on its
  // border atoms to f_home. Collective between neighbours.
  void return_halo_forces(const Vec3* f_halo, Vec3* f_home);

 private:
  const Topology& top_;
  ForceShare share_;
  int rank_, size_;
  std::vector<int> molecule_start_;  // first atom of each molecule, and num_atoms at the end
  DomainGrid grid_;
  int64_t version_ = 0;
  std::vector<int> home_, halo_;
  std::vector<Vec3> home_x_;
  // Per neighbour of the half shell: this domain's border atoms go to `to` (home() indices, moved by the box
  // where they wrap), its halo atoms [halo_begin, halo_end) come from `from`.
  struct Zone {
    int to = 0, from = 0;
    std::vector<int> send;
    int send_wrap[2] = {0, 0};  // -1, 0 or 1 box lengths along each cut axis
    Vec3 send_shift{0, 0, 0};
    int halo_begin = 0, halo_end = 0;
  };
  std::vector<Zone> zones_;
  std::vector<double> send_buf_, recv_buf_;
  mutable std::vector<double> gather_buf_;
};

}  // namespace qk::md
