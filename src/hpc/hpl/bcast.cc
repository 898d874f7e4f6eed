// Panel broadcast along a process row (HPL_bcast with 1ring, 1rM, 2ring, 2rM).
//
// Note [panel broadcast]: positions are relative to the root (rel = 0 .. Q-1).
// Each topology is a set of chains; the root sends to every chain's head and
// each member forwards to the next member of its chain:
//   1ring  [1 2 .. Q-1]                 increasing ring
//   1rM    [1] [2 .. Q-1]               modified: rel 1, which factors the next
//                                       panel under look-ahead, gets it first
//                                       and does not forward
//   2ring  [1 .. h] [h+1 .. Q-1]        two rings of half the row each
//   2rM    [1] [2 .. m] [m+1 .. Q-1]    modified two rings
// Sends are nonblocking so the root goes on with its update (look-ahead).
// Open MPI moves a large message only while both ends are inside MPI calls,
// so receivers post their receive early and both sides call progress()
// between slices of the trailing update: the panel travels during the DGEMM
// instead of after it. Receivers block only when they need the panel.
#include <vector>

#include "hpl/panel.h"
#include "qk/base/error.h"

namespace qk::hpc::hpl {
namespace {

constexpr int kPanelTag = 7001;

std::vector<std::vector<int>> chains(HplBcast algo, int q) {
  std::vector<std::vector<int>> c;
  auto range = [](int lo, int hi) {  // [lo, hi]
    std::vector<int> v;
    for (int i = lo; i <= hi; ++i) v.push_back(i);
    return v;
  };
  if (q <= 1) return c;
  switch (algo) {
    case HplBcast::kRing:
      c.push_back(range(1, q - 1));
      break;
    case HplBcast::kRingM:
      c.push_back({1});
      if (q > 2) c.push_back(range(2, q - 1));
      break;
    case HplBcast::kTwoRing: {
      const int h = q / 2;  // chain one: 1..h, chain two: h+1..q-1
      c.push_back(range(1, h));
      if (h + 1 <= q - 1) c.push_back(range(h + 1, q - 1));
      break;
    }
    case HplBcast::kTwoRingM: {
      c.push_back({1});
      if (q > 2) {
        const int m = 1 + (q - 1) / 2;  // rel 2..m, then m+1..q-1
        c.push_back(range(2, m));
        if (m + 1 <= q - 1) c.push_back(range(m + 1, q - 1));
      }
      break;
    }
  }
  return c;
}

// My source and my forward targets (relative positions) in the topology.
void links(HplBcast algo, int q, int rel, int* from, std::vector<int>* to) {
  *from = -1;
  to->clear();
  for (const auto& ch : chains(algo, q)) {
    if (rel == 0) {
      to->push_back(ch.front());
      continue;
    }
    for (size_t i = 0; i < ch.size(); ++i) {
      if (ch[i] != rel) continue;
      *from = i == 0 ? 0 : ch[i - 1];
      if (i + 1 < ch.size()) to->push_back(ch[i + 1]);
    }
  }
}

}  // namespace

void panel_bcast_start(Panel& pan, const Grid& g, HplBcast algo) {
  const int q = g.npcol;
  if (q == 1 || g.mycol != pan.pcol) return;
  int from;
  std::vector<int> to;
  links(algo, q, 0, &from, &to);
  for (int rel : to)
    pan.sends.push_back(g.row.isend(pan.buf.data(), pan.bytes(), (pan.pcol + rel) % q, kPanelTag));
}

void panel_bcast_post(Panel& pan, const Grid& g, HplBcast algo) {
  const int q = g.npcol;
  if (q == 1 || g.mycol == pan.pcol || pan.recv != MPI_REQUEST_NULL || pan.have) return;
  const int rel = (g.mycol - pan.pcol + q) % q;
  int from;
  std::vector<int> to;
  links(algo, q, rel, &from, &to);
  QK_INTERNAL_ASSERT(from >= 0);
  pan.recv = g.row.irecv(pan.buf.data(), pan.bytes(), (pan.pcol + from) % q, kPanelTag);
}

namespace {
// The panel is here: mark it and pass it on along my chain.
void forward(Panel& pan, const Grid& g, HplBcast algo) {
  const int q = g.npcol;
  const int rel = (g.mycol - pan.pcol + q) % q;
  int from;
  std::vector<int> to;
  links(algo, q, rel, &from, &to);
  pan.have = true;
  for (int r : to)
    pan.sends.push_back(g.row.isend(pan.buf.data(), pan.bytes(), (pan.pcol + r) % q, kPanelTag));
}
}  // namespace

void panel_bcast_progress(Panel& pan, const Grid& g, HplBcast algo) {
  if (pan.recv != MPI_REQUEST_NULL) {
    int done = 0;
    QK_MPI_CHECK(MPI_Test(&pan.recv, &done, MPI_STATUS_IGNORE));
    if (done) forward(pan, g, algo);
  }
  for (auto& r : pan.sends) {
    if (r == MPI_REQUEST_NULL) continue;
    int done = 0;
    QK_MPI_CHECK(MPI_Test(&r, &done, MPI_STATUS_IGNORE));
  }
}

void panel_bcast_finish(Panel& pan, const Grid& g, HplBcast algo) {
  const int q = g.npcol;
  if (q == 1 || g.mycol == pan.pcol || pan.have) return;
  if (pan.recv == MPI_REQUEST_NULL) panel_bcast_post(pan, g, algo);
  Comm::wait(&pan.recv);
  pan.recv = MPI_REQUEST_NULL;
  forward(pan, g, algo);
}

void panel_bcast_wait_sends(Panel& pan) {
  for (auto& r : pan.sends)
    if (r != MPI_REQUEST_NULL) Comm::wait(&r);
  pan.sends.clear();
}

}  // namespace qk::hpc::hpl
