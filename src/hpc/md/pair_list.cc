#include "pair_list.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>

#include "qk/base/error.h"
#include "qk/base/thread_pool.h"

namespace qk::md {
namespace {

constexpr int kZeroShift = 13;  // (0, 0, 0) among the 27 shifts (sx + 1) * 9 + (sy + 1) * 3 + (sz + 1)

// Squared distance between box a and box b moved by s (0 where they overlap).
template <typename Box>
double box_distance2(const Box& a, const Box& b, const Vec3& s) {
  double d2 = 0;
  for (int d = 0; d < 3; ++d) {
    const double gap = std::max({0.0, b.lo[d] + s[d] - a.hi[d], a.lo[d] - (b.hi[d] + s[d])});
    d2 += gap * gap;
  }
  return d2;
}

// Per-chunk output, concatenated in chunk order so the list does not depend on the thread count.
struct ChunkList {
  std::vector<PairList::Entry> entries;
  std::vector<int> cj;
  std::vector<uint16_t> mask;
};

void concatenate(std::vector<ChunkList>& chunks, std::vector<PairList::Entry>* entries, std::vector<int>* cj,
                 std::vector<uint16_t>* mask) {
  entries->clear();
  cj->clear();
  mask->clear();
  for (ChunkList& c : chunks) {
    const int64_t offset = static_cast<int64_t>(cj->size());
    for (PairList::Entry e : c.entries) {
      e.begin += offset;
      e.end += offset;
      entries->push_back(e);
    }
    cj->insert(cj->end(), c.cj.begin(), c.cj.end());
    mask->insert(mask->end(), c.mask.begin(), c.mask.end());
  }
}

int num_chunks(int64_t work) {
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(work, 8 * num_threads())));
}

// Runs fn(chunk) for every chunk in [0, nchunks), each thread claiming the next chunk as it comes free:
// chunks differ in cost (a half list gives the first i-clusters the most pairs), so a static split would
// leave one thread waiting. Outputs go per chunk, so results do not depend on who ran what.
template <typename Fn>
void for_each_chunk(int nchunks, Fn&& fn) {
  std::atomic<int> next{0};
  qk::parallel_for(0, std::min(nchunks, num_threads()), 1, [&](int64_t, int64_t) {
    for (int ch = next.fetch_add(1); ch < nchunks; ch = next.fetch_add(1)) fn(ch);
  });
}

}  // namespace

void PairList::bounding_boxes(const std::vector<Vec3>& x, std::vector<Box>* bb) const {
  const int nc = num_clusters();
  bb->resize(nc);
  qk::parallel_for(0, nc, 4096, [&](int64_t lo, int64_t hi) {
    for (int64_t c = lo; c < hi; ++c) {
      Box b{{HUGE_VAL, HUGE_VAL, HUGE_VAL}, {-HUGE_VAL, -HUGE_VAL, -HUGE_VAL}};
      for (int k = 0; k < kClusterSize; ++k) {
        const int64_t s = c * kClusterSize + k;
        const int a = slot_atom_[s];
        if (a < 0) continue;
        for (int d = 0; d < 3; ++d) {
          const double v = x[a][d] - slot_offset_[s][d];
          b.lo[d] = std::min(b.lo[d], v);
          b.hi[d] = std::max(b.hi[d], v);
        }
      }
      (*bb)[c] = b;
    }
  });
}

void PairList::build(const std::vector<Vec3>& x, const RectBox& box, double rlist,
                     const std::vector<std::vector<int>>& exclusions, const PairListDomain& domain) {
  const int n = static_cast<int>(x.size());
  const unsigned open = domain.open_axes;
  QK_CHECK(open < 8u, "PairList: open axes ", open);
  for (int d = 0; d < 3; ++d)
    QK_CHECK((open >> d & 1u) || 2 * rlist < box.length[d], "the pair-list radius ", rlist, " nm (cut-off + buffer) is not below ",
             "half the box (", box.length[d], " nm); use a larger box or a shorter cut-off");
  box_ = box;
  rlist_ = rlist;
  ++builds_;
  ++version_;
  // Wrap into [0, L) and bin into columns about as wide as a cluster is tall (GROMACS: cubic clusters).
  // Along an open axis the grid runs from the lowest atom to the highest, nothing wrapped.
  std::vector<Vec3> xw(n), offset(n);
  Vec3 grid = box.length;
  for (int d = 0; d < 3; ++d) {
    if (!(open >> d & 1u)) continue;
    double lo = 0, hi = 0;
    if (n > 0) {
      lo = hi = x[0][d];
      for (int i = 1; i < n; ++i) {
        lo = std::min(lo, x[i][d]);
        hi = std::max(hi, x[i][d]);
      }
    }
    grid[d] = std::max(hi - lo, 1e-3 * box.length[d]) * (1 + 1e-12);
    for (int i = 0; i < n; ++i) {
      xw[i][d] = x[i][d] - lo;
      offset[i][d] = lo;
    }
  }
  for (int i = 0; i < n; ++i)
    for (int d = 0; d < 3; ++d) {
      if (open >> d & 1u) continue;
      double o = std::floor(x[i][d] * box.inverse[d]) * box.length[d];
      double v = x[i][d] - o;
      if (v >= box.length[d]) {  // rounding
        v -= box.length[d];
        o += box.length[d];
      }
      if (v < 0) v = 0;
      xw[i][d] = v;
      offset[i][d] = o;
    }
  const double side = std::cbrt(kClusterSize * grid[0] * grid[1] * grid[2] / std::max(n, 1));
  const int ncx = std::max(1, static_cast<int>(std::lround(grid[0] / side)));
  const int ncy = std::max(1, static_cast<int>(std::lround(grid[1] / side)));
  const double cw[2] = {grid[0] / ncx, grid[1] / ncy};
  const int ncol = ncx * ncy;
  std::vector<int> col_of(n), col_count(ncol, 0);
  for (int i = 0; i < n; ++i) {
    const int cx = std::min(ncx - 1, static_cast<int>(xw[i][0] / cw[0]));
    const int cy = std::min(ncy - 1, static_cast<int>(xw[i][1] / cw[1]));
    col_of[i] = cx * ncy + cy;
    ++col_count[col_of[i]];
  }
  std::vector<int> col_atom_start(ncol + 1, 0), col_cluster_start(ncol + 1, 0);
  for (int c = 0; c < ncol; ++c) {
    col_atom_start[c + 1] = col_atom_start[c] + col_count[c];
    col_cluster_start[c + 1] = col_cluster_start[c] + (col_count[c] + kClusterSize - 1) / kClusterSize;
  }
  std::vector<int> sorted(n);
  {
    std::vector<int> fill(col_atom_start.begin(), col_atom_start.end() - 1);
    for (int i = 0; i < n; ++i) sorted[fill[col_of[i]]++] = i;
  }
  const int nclusters = col_cluster_start[ncol];
  slot_atom_.assign(static_cast<size_t>(nclusters) * kClusterSize, -1);
  slot_offset_.assign(slot_atom_.size(), Vec3{0, 0, 0});
  for (int c = 0; c < ncol; ++c) {
    int* first = sorted.data() + col_atom_start[c];
    int* last = sorted.data() + col_atom_start[c + 1];
    std::sort(first, last, [&](int a, int b) { return xw[a][2] < xw[b][2] || (xw[a][2] == xw[b][2] && a < b); });
    for (int k = 0; k < last - first; ++k) {
      const size_t s = static_cast<size_t>(col_cluster_start[c]) * kClusterSize + k;
      slot_atom_[s] = first[k];
      slot_offset_[s] = offset[first[k]];
    }
  }
  shifts_.resize(27);
  for (int s = 0; s < 27; ++s)
    shifts_[s] = {(s / 9 - 1) * box.length[0], (s / 3 % 3 - 1) * box.length[1], (s % 3 - 1) * box.length[2]};
  std::vector<Box> bb;
  bounding_boxes(x, &bb);
  // Per cluster: which slots hold atoms (bit k), and the clusters holding an atom that one of its atoms
  // excludes (the cluster pairs that need the slow mask below; a handful per cluster).
  // And which slots hold halo atoms (a domain's list leaves their pairs with each other out).
  std::vector<unsigned> real(nclusters, 0), halo(nclusters, 0);
  std::vector<int> cluster_of(n, 0), meet_start(nclusters + 1, 0), meets;
  for (size_t s = 0; s < slot_atom_.size(); ++s)
    if (slot_atom_[s] >= 0) {
      cluster_of[slot_atom_[s]] = static_cast<int>(s / kClusterSize);
      real[s / kClusterSize] |= 1u << (s % kClusterSize);
      if (slot_atom_[s] >= domain.first_halo) halo[s / kClusterSize] |= 1u << (s % kClusterSize);
    }
  for (int c = 0; c < nclusters; ++c) {
    for (int k = 0; k < kClusterSize; ++k) {
      const int a = slot_atom_[static_cast<size_t>(c) * kClusterSize + k];
      if (a < 0) continue;
      for (int b : exclusions[a]) meets.push_back(cluster_of[b]);
    }
    std::sort(meets.begin() + meet_start[c], meets.end());
    meets.erase(std::unique(meets.begin() + meet_start[c], meets.end()), meets.end());
    meet_start[c + 1] = static_cast<int>(meets.size());
  }
  const double r2 = rlist * rlist;
  const int nchunks = num_chunks(nclusters);
  std::vector<ChunkList> chunks(nchunks);
  for_each_chunk(nchunks, [&](int ch) {
    std::vector<int> meets_ci(nclusters, -1);  // meets_ci[cj] == ci: an atom of ci excludes one of cj
    {
      ChunkList& out = chunks[ch];
      const int c0 = static_cast<int>(static_cast<int64_t>(nclusters) * ch / nchunks);
      const int c1 = static_cast<int>(static_cast<int64_t>(nclusters) * (ch + 1) / nchunks);
      for (int ci = c0; ci < c1; ++ci) {
        const Box& bi = bb[ci];
        if (bi.lo[0] > bi.hi[0]) continue;  // no real atoms (cannot happen: clusters fill from the bottom)
        for (int m = meet_start[ci]; m < meet_start[ci + 1]; ++m) meets_ci[meets[m]] = ci;
        for (int s = 0; s < 27; ++s) {
          if (((open & 1u) && s / 9 != 1) || ((open & 2u) && s / 3 % 3 != 1) || ((open & 4u) && s % 3 != 1))
            continue;  // no images along an open axis
          const Vec3& sv = shifts_[s];
          // Columns whose x-y cells, moved by S, come within rlist of the i-cluster's box.
          int range[2][2];
          bool empty = false;
          for (int d = 0; d < 2; ++d) {
            const int nd = d == 0 ? ncx : ncy;
            const double lo_d = bi.lo[d] - sv[d] - rlist, hi_d = bi.hi[d] - sv[d] + rlist;
            range[d][0] = std::max(0, static_cast<int>(std::floor(lo_d / cw[d])));
            range[d][1] = std::min(nd - 1, static_cast<int>(std::floor(hi_d / cw[d])));
            empty |= range[d][0] > range[d][1];
          }
          if (empty) continue;
          const int64_t begin = static_cast<int64_t>(out.cj.size());
          for (int cx = range[0][0]; cx <= range[0][1]; ++cx)
            for (int cy = range[1][0]; cy <= range[1][1]; ++cy) {
              const int col = cx * ncy + cy;
              // A column's clusters are sorted along z (their boxes' lo and hi both grow), so only a window
              // of them can come within rlist in z: skip those below it, stop above it.
              const double zlo = bi.lo[2] - sv[2] - rlist, zhi = bi.hi[2] - sv[2] + rlist;
              // Each pair of clusters once: (ci, cj, S) and (cj, ci, -S) are the same atom pairs.
              for (int cj = std::max(col_cluster_start[col], ci); cj < col_cluster_start[col + 1]; ++cj) {
                if (bb[cj].hi[2] < zlo) continue;
                if (bb[cj].lo[2] > zhi) break;
                if (cj == ci && s < kZeroShift) continue;
                if (box_distance2(bi, bb[cj], sv) >= r2) continue;
                uint16_t mask = 0;
                if (cj != ci && meets_ci[cj] != ci) {  // all real i-slots with all real j-slots
                  for (int ii = 0; ii < kClusterSize; ++ii)
                    if (real[ci] >> ii & 1u) mask |= static_cast<uint16_t>(real[cj] << (ii * kClusterSize));
                } else {
                  for (int ii = 0; ii < kClusterSize; ++ii) {
                    const int a = slot_atom_[static_cast<size_t>(ci) * kClusterSize + ii];
                    if (a < 0) continue;
                    for (int jj = 0; jj < kClusterSize; ++jj) {
                      const int b = slot_atom_[static_cast<size_t>(cj) * kClusterSize + jj];
                      if (b < 0) continue;
                      if (cj == ci && (s == kZeroShift ? jj <= ii : jj == ii)) continue;
                      if (std::binary_search(exclusions[a].begin(), exclusions[a].end(), b)) continue;
                      mask |= static_cast<uint16_t>(1u << (ii * kClusterSize + jj));
                    }
                  }
                }
                if (halo[ci] != 0 && halo[cj] != 0)
                  for (int ii = 0; ii < kClusterSize; ++ii)
                    if (halo[ci] >> ii & 1u) mask &= static_cast<uint16_t>(~(halo[cj] << (ii * kClusterSize)));
                if (mask == 0) continue;
                out.cj.push_back(cj);
                out.mask.push_back(mask);
              }
            }
          const int64_t end = static_cast<int64_t>(out.cj.size());
          if (end > begin) out.entries.push_back(Entry{ci, s, begin, end});
        }
      }
    }
  });
  concatenate(chunks, &all_entries_, &all_cj_, &all_mask_);
  entries_ = all_entries_;
  cj_ = all_cj_;
  mask_ = all_mask_;
}

void PairList::set_box(const RectBox& box) {
  Vec3 scale;
  for (int d = 0; d < 3; ++d) scale[d] = box.length[d] * box_.inverse[d];
  for (Vec3& o : slot_offset_)
    for (int d = 0; d < 3; ++d) o[d] *= scale[d];  // an offset is a whole number of box lengths
  for (int s = 0; s < static_cast<int>(shifts_.size()); ++s)
    shifts_[s] = {(s / 9 - 1) * box.length[0], (s / 3 % 3 - 1) * box.length[1], (s % 3 - 1) * box.length[2]};
  box_ = box;
  ++version_;
}

void PairList::prune_range(const std::vector<Box>& bb, double r, int64_t e0, int64_t e1, std::vector<Entry>* entries,
                           std::vector<int>* cj, std::vector<uint16_t>* mask) const {
  // Boxes in float, 8 to a cluster (lo xyz, hi xyz, 2 unused): half the memory of the doubles. Rounding
  // widens each box by one float ulp of the box length, so no pair within r is lost.
  const float r2 = static_cast<float>(r * r) * (1 + 1e-6f);
  const int64_t first = all_entries_[e0].begin, last = all_entries_[e1 - 1].end;
  cj->resize(static_cast<size_t>(last - first));
  mask->resize(cj->size());
  int64_t n = 0;
  for (int64_t e = e0; e < e1; ++e) {
    const Entry& in = all_entries_[e];
    // The i-cluster's box moved by -S, so each test is of two unshifted boxes.
    const Vec3& sv = shifts_[in.shift];
    const Box& b = bb[in.ci];
    // One box as GCC's generic 4-float vectors (x, y, z, 0): the test is a few vector operations.
    typedef float V4 __attribute__((vector_size(16)));
    V4 lo = {0, 0, 0, 0}, hi = {0, 0, 0, 0};
    for (int d = 0; d < 3; ++d) {
      const float slack = 1e-6f * static_cast<float>(box_.length[d]);
      lo[d] = static_cast<float>(b.lo[d] - sv[d]) - slack;
      hi[d] = static_cast<float>(b.hi[d] - sv[d]) + slack;
    }
    const V4 zero = {0, 0, 0, 0};
    const int64_t begin = n;
    int* out_cj = cj->data();
    uint16_t* out_mask = mask->data();
    for (int64_t k = in.begin; k < in.end; ++k) {
      V4 jlo, jhi;
      std::memcpy(&jlo, &bbf_[static_cast<size_t>(all_cj_[k]) * 8], sizeof jlo);
      std::memcpy(&jhi, &bbf_[static_cast<size_t>(all_cj_[k]) * 8 + 4], sizeof jhi);
      const V4 a = jlo - hi, c = lo - jhi;
      V4 g = a > c ? a : c;
      g = g > zero ? g : zero;
      g *= g;
      out_cj[n] = all_cj_[k];
      out_mask[n] = all_mask_[k];
      n += g[0] + g[1] + g[2] < r2 ? 1 : 0;  // written always, kept when within r
    }
    if (n > begin) entries->push_back(Entry{in.ci, in.shift, begin, n});
  }
  cj->resize(n);
  mask->resize(n);
}

void PairList::prune(const std::vector<Vec3>& x, double r) {
  ++version_;
  std::vector<Box> bb;
  bounding_boxes(x, &bb);
  bbf_.assign(bb.size() * 8, 0.0f);
  for (size_t c = 0; c < bb.size(); ++c)
    for (int d = 0; d < 3; ++d) {
      bbf_[c * 8 + d] = static_cast<float>(bb[c].lo[d]);
      bbf_[c * 8 + 4 + d] = static_cast<float>(bb[c].hi[d]);
    }
  const int64_t ne = static_cast<int64_t>(all_entries_.size());
  const int nchunks = num_chunks(ne);
  std::vector<ChunkList> chunks(nchunks);
  for_each_chunk(nchunks, [&](int ch) {
    const int64_t e0 = ne * ch / nchunks, e1 = ne * (ch + 1) / nchunks;
    if (e1 > e0) prune_range(bb, r, e0, e1, &chunks[ch].entries, &chunks[ch].cj, &chunks[ch].mask);
  });
  concatenate(chunks, &entries_, &cj_, &mask_);
}

}  // namespace qk::md
