// One panel of HPL: columns [k, k + jb) of [A | b], factored by the process
// column that owns them and then broadcast along every process row.
//
// During factorization the panel is a stacked matrix: the jb x jb top block
// (rows k..k+jb, owned by process row prow) is copied to every process of the
// column, which updates it redundantly, while each process updates only its
// own rows below it in place. A pivot search is then one MPI_Allreduce per
// column carrying (|value|, global row, the candidate row): every process gets
// the pivot row and can swap it into the top block itself (HPL_pdmxswp does
// the same). Note [stacked panel].
#pragma once

#include <cstdint>
#include <vector>

#include "hpl/grid.h"

namespace qk::hpc::hpl {

struct Panel {
  int64_t k = 0;          // first global row/column
  int jb = 0;             // width
  int prow = 0, pcol = 0; // owners of the top block / of the columns
  int64_t ii = 0;         // my first local row with global index >= k
  int64_t jj = 0;         // local column of the panel on the owning process column
  int64_t below_l0 = 0;   // my first local row below the top block
  int64_t mbelow = 0;     // my local rows below the top block
  // Broadcast buffer: top (jb x jb, ld jb) | ipiv (jb doubles) | below (mbelow x jb).
  std::vector<double> buf;
  std::vector<MPI_Request> sends;  // outstanding forwards of this panel
  MPI_Request recv = MPI_REQUEST_NULL;  // posted early by panel_bcast_post
  bool have = false;               // buf holds the factored panel

  double* top() { return buf.data(); }
  double* ipiv() { return buf.data() + int64_t(jb) * jb; }
  double* below() { return buf.data() + int64_t(jb) * jb + jb; }
  const double* top() const { return buf.data(); }
  const double* ipiv() const { return buf.data() + int64_t(jb) * jb; }
  const double* below() const { return buf.data() + int64_t(jb) * jb + jb; }
  int64_t ld_below() const { return mbelow > 0 ? mbelow : 1; }
  size_t bytes() const { return buf.size() * sizeof(double); }
};

// Sizes `pan` for the panel starting at global column k.
void panel_init(Panel& pan, const Grid& g, const LocalMatrix& a, int64_t k);

// Factors the panel in A (collective over the owning process column; call only
// there) and fills pan.buf. A's panel columns hold L\U afterwards.
void panel_factor(Panel& pan, const Grid& g, LocalMatrix& a, const HplParams& p);

// Broadcast along the process row (Note [panel broadcast] in bcast.cc):
// start() on the owner posts its sends; post() on the others posts the receive
// as soon as `pan` is sized; progress() (called between slices of the
// trailing update) tests the receive, forwards once it arrived and lets the
// sends move; finish() waits for the receive and forwards; wait_sends()
// completes the forwards before `pan` is reused.
void panel_bcast_start(Panel& pan, const Grid& g, HplBcast algo);
void panel_bcast_post(Panel& pan, const Grid& g, HplBcast algo);
void panel_bcast_progress(Panel& pan, const Grid& g, HplBcast algo);
void panel_bcast_finish(Panel& pan, const Grid& g, HplBcast algo);
void panel_bcast_wait_sends(Panel& pan);

// Frees MPI objects cached by the panel code (call before MPI_Finalize).
void panel_release_mpi_types();

}  // namespace qk::hpc::hpl
