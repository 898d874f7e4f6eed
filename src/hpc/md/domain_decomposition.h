// Domain decomposition in slabs (GROMACS's, in one dimension), across the
// box's longest axis (x where it is a cube; "x" below): each of P ranks owns
// the molecules whose centre lies in its slab of the box, [r, r + 1) Lx / P,
// integrates and constrains them, and computes their interactions with each
// other and with a halo of the next rank's atoms (up to the list radius above
// its own highest atom: the half shell, so each pair has one owner); the
// halo's positions come from that rank every step and the forces on them go
// back to it. Molecules stay whole on one rank, so bonded terms, exclusions and
// constraints are all local. A domain's coordinates are one frame along x,
// the next rank's atoms moved up by the box where they wrap (the last rank's
// halo is the first rank's atoms, Lx above them); its pair list is open along
// x (pair_list.h) and periodic in y and z.
//
// Partitioning, when the pair list is built (every nstlist steps), starts from
// every atom's position on every rank (gathered: each rank contributes its
// home atoms; sums with zeros are exact, so all ranks hold the same bits) and
// is a function of them alone, so each rank knows what its neighbours send
// without asking. GROMACS instead migrates the atoms that left a domain to the
// neighbour: a gather of 3N values every nstlist steps here, against the
// replicated-data scheme's 3N every step (ForceShare without exchange).
//
// It fits when a slab is at least the list radius plus twice the largest
// molecule's reach along x from its centre: a rank's atoms then meet only its
// neighbours' (why_not says why not).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "pbc.h"
#include "qk/hpc/md/forces.h"
#include "qk/hpc/md/topology.h"

namespace qk::md {

class DomainDecomposition {
 public:
  // The axis the slabs cut: the box's longest (the first of equals).
  static int slab_axis(const Vec3& box);
  // Empty when share.size slabs along slab_axis(box) fit this system at positions x for a list radius rlist; otherwise
  // why not, as a sentence to show the user.
  static std::string why_not(const Topology& top, const std::vector<Vec3>& x, const Vec3& box, double rlist,
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
  void set_box(const Vec3& box) { send_shift_ = rank_ == 0 && axis_ >= 0 ? box[axis_] : 0.0; }
  int axis() const { return axis_; }  // slab_axis of the first partition's box
  int rank() const { return rank_; }
  int size() const { return size_; }
  const Topology& topology() const { return top_; }
  const ForceShare& share() const { return share_; }
  // This rank's atoms (global indices, molecule by molecule) and their positions at the partition, whole
  // molecules in this domain's frame.
  const std::vector<int>& home() const { return home_; }
  const std::vector<Vec3>& home_positions() const { return home_x_; }
  // The atoms the next rank sends (global indices, in the order they arrive).
  const std::vector<int>& halo() const { return halo_; }

  // Every rank's home values (`local`: this rank's, in home() order) into `global` (num_atoms), the same bits
  // on every rank. Collective.
  void gather(const std::vector<Vec3>& local, std::vector<Vec3>* global) const;
  // The halo's positions (halo().size() of them, this domain's frame) from the next rank, while this one
  // sends the previous rank its border atoms. Collective between neighbours.
  void exchange_positions(const Vec3* x_home, Vec3* x_halo);
  // The forces on the halo back to the next rank, while this one adds the previous rank's forces on its
  // border atoms to f_home. Collective between neighbours.
  void return_halo_forces(const Vec3* f_halo, Vec3* f_home);

 private:
  const Topology& top_;
  ForceShare share_;
  int rank_, size_;
  std::vector<int> molecule_start_;  // first atom of each molecule, and num_atoms at the end
  int axis_ = -1;
  int64_t version_ = 0;
  std::vector<int> home_, halo_;
  std::vector<Vec3> home_x_;
  std::vector<int> send_;  // home() indices of the atoms the previous rank's halo holds
  double send_shift_ = 0;  // added to their x: the box, where the previous rank is the last one
  std::vector<double> send_buf_, recv_buf_;
  mutable std::vector<double> gather_buf_;
};

}  // namespace qk::md
