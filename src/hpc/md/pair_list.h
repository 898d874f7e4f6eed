// The Verlet pair list in GROMACS's cluster layout (nbnxm, 4x4): atoms are
// binned into columns of an x-y grid, sorted along z within each column and
// cut into clusters of kClusterSize; the list holds pairs of clusters whose
// bounding boxes are closer than rlist. The kernel (nonbonded.h) computes all
// 4 x 4 atom pairs of a cluster pair at once, masked by the exact cut-off,
// so energies do not depend on the buffer.
//
// rlist = cut-off + buffer. ForceCalculator (forces.cc) keeps the list on
// GROMACS's schedule, its buffers sized from verlet-buffer-tolerance by an
// estimate of how far atoms diffuse (verlet_buffer.h), or exactly: rebuilt
// (and pruned, below) as soon as the two largest displacements since the
// list was made add up to the buffer, so no pair inside the cut-off is ever
// missed. Bounding-box distance is a lower bound of every atom pair's
// distance, so that test is exact for clusters too.
//
// Dynamic pruning (GROMACS's "inner list"): prune() keeps, at the current
// positions, only the cluster pairs of the built list within a shorter
// radius rc + inner buffer; the kernel runs over the pruned pairs, which stay
// valid while the displacements since the prune stay under the inner buffer,
// and the built list can be pruned again until its own buffer runs out.
//
// Each list entry is an i-cluster and one periodic shift S (a box multiple
// per dimension applied to the j-clusters), so the kernel computes
// x_i - (x_j + S) with no rounding per pair and the virial comes from
// sum_a x_a (x) F_a and the entries' force sums (GROMACS's shift forces).
// Positions are wrapped into the box at each build; slot_offset() is what was
// subtracted from each atom, kept until the next build.
#pragma once

#include <cstdint>
#include <climits>
#include <vector>

#include "pbc.h"

namespace qk::md {

inline constexpr int kClusterSize = 4;
inline constexpr int kClusterPairSize = kClusterSize * kClusterSize;

// A domain's list (domain_decomposition.h): its home atoms first, then the halo it received.
struct PairListDomain {
  // Atoms from here on are the halo: their pairs with each other belong to another domain's list.
  int first_halo = INT32_MAX;
  // The dimensions (bit d for dimension d) that are not periodic: the domain's atoms are in one frame along
  // them, with no images there (the others stay periodic), and the grid spans them along them.
  unsigned open_axes = 0;
};

class PairList {
 public:
  struct Entry {
    int ci;              // i-cluster
    int shift;           // index into shifts()
    int64_t begin, end;  // into j_clusters() / masks()
  };

  // x: positions (any image); exclusions: per atom, sorted. Needs 2 rc < every box length (but open ones').
  void build(const std::vector<Vec3>& x, const RectBox& box, double rlist,
             const std::vector<std::vector<int>>& exclusions, const PairListDomain& domain = {});
  // Keeps the built list's cluster pairs whose bounding boxes are closer than r at positions x.
  void prune(const std::vector<Vec3>& x, double r);
  // The box scaled while the list stands (pressure coupling): the shifts and the offsets of the wrapped
  // positions follow it; the cluster pairs stay, the buffer covering the scaling as GROMACS's does.
  void set_box(const RectBox& box);

  int num_clusters() const { return static_cast<int>(slot_atom_.size()) / kClusterSize; }
  // Atom in cluster slot s = kClusterSize * cluster + k; -1 for padding.
  const std::vector<int>& slot_atom() const { return slot_atom_; }
  // What was subtracted from the atom in slot s at the build (padding: 0).
  const std::vector<Vec3>& slot_offset() const { return slot_offset_; }
  const std::vector<Vec3>& shifts() const { return shifts_; }
  // The pruned list the kernel runs over (after build: the whole list).
  const std::vector<Entry>& entries() const { return entries_; }
  const std::vector<int>& j_clusters() const { return cj_; }
  // Per cluster pair, bit kClusterSize * ii + jj set where i-slot ii and j-slot jj interact
  // (both atoms real, not excluded, each pair once).
  const std::vector<uint16_t>& masks() const { return mask_; }
  int64_t num_cluster_pairs() const { return static_cast<int64_t>(cj_.size()); }
  int64_t num_built_cluster_pairs() const { return static_cast<int64_t>(all_cj_.size()); }
  double rlist() const { return rlist_; }
  int64_t build_count() const { return builds_; }  // changes whenever the cluster order may have
  // Changes whenever entries(), j_clusters(), masks(), shifts() or slot_offset() may have (a build, a
  // prune, a new box): a device copy of the list is current while this is.
  int64_t version() const { return version_; }

 private:
  struct Box {
    Vec3 lo, hi;
  };
  // Per cluster, of its real atoms at positions x less slot_offset().
  void bounding_boxes(const std::vector<Vec3>& x, std::vector<Box>* bb) const;
  // Appends to (entries, cj, mask) the cluster pairs of entries [e0, e1) of the built list closer than r.
  void prune_range(const std::vector<Box>& bb, double r, int64_t e0, int64_t e1, std::vector<Entry>* entries,
                   std::vector<int>* cj, std::vector<uint16_t>* mask) const;

  RectBox box_{Vec3{1, 1, 1}};
  double rlist_ = 0;
  int64_t builds_ = 0;
  int64_t version_ = 0;
  std::vector<int> slot_atom_;
  std::vector<Vec3> slot_offset_;
  std::vector<Vec3> shifts_;
  // As built.
  std::vector<Entry> all_entries_;
  std::vector<int> all_cj_;
  std::vector<uint16_t> all_mask_;
  std::vector<float> bbf_;  // prune()'s boxes in float
  // As pruned.
  std::vector<Entry> entries_;
  std::vector<int> cj_;
  std::vector<uint16_t> mask_;
};

}  // namespace qk::md
