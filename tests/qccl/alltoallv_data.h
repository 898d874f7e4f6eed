// Test cases of qcclAllToAllv (forked-rank and MPI-backend suites): who sends
// whom how many elements, blocks at scattered displacements, the values each
// block carries and the receive buffer a rank must end with.
//
//   VCase c(VPattern::kUneven, me.rank, me.nranks, qcclFloat16);
//   qcclAllToAllv(c.send_ptr(), c.send_counts.data(), c.send_displs.data(), c.recv_ptr(),
//                 c.recv_counts.data(), c.recv_displs.data(), c.dtype, comm, nullptr);
//   std::string d = c.check();   // "" when recv holds exactly c.want
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "data.h"

namespace qccl_test {

enum class VPattern {
  kUneven,      // counts 0-44 that differ per pair, some zero, self included
  kSilentRank,  // the last rank sends nothing and rank 0 receives nothing (NULL buffers)
  kLarge,       // 20k-30k elements per pair: single copy (CMA) and ring wrap-around
};
inline const VPattern kAllVPatterns[] = {VPattern::kUneven, VPattern::kSilentRank, VPattern::kLarge};
inline const char* pattern_name(VPattern p) {
  return p == VPattern::kUneven ? "uneven" : p == VPattern::kSilentRank ? "silent-rank" : "large";
}

// Elements rank s sends rank d.
inline size_t v_count(VPattern p, int n, int s, int d) {
  switch (p) {
    case VPattern::kUneven: return static_cast<size_t>((s * 7 + d * 3 + 2) % 5) * 11;
    case VPattern::kSilentRank: return s == n - 1 || d == 0 ? 0 : static_cast<size_t>((s + 2 * d) % 3 + 1);
    case VPattern::kLarge: return s == d ? 5 : static_cast<size_t>(20000 + 3001 * s + 7 * d);
  }
  return 0;
}

// Element i of the block from s to d: a small integer, exact in every type.
inline double v_value(int s, int d, size_t i) { return static_cast<double>((s * 37 + d * 11 + i) % 101); }
constexpr double kGapValue = 127;  // what the gaps of a receive buffer hold (no block value is)

// Places blocks of `counts` in a buffer: in reverse rank order or in rank
// order, with a gap of a few elements before each; returns the buffer's size.
inline size_t scatter_blocks(const std::vector<size_t>& counts, bool reverse, std::vector<size_t>& displs) {
  const int n = static_cast<int>(counts.size());
  displs.assign(n, 0);
  size_t pos = 0;
  for (int k = 0; k < n; ++k) {
    const int j = reverse ? n - 1 - k : k;
    pos += 1 + static_cast<size_t>(j % 3) * 2;
    displs[j] = pos;
    pos += counts[j];
  }
  return pos + 2;
}

struct VCase {
  qcclDataType_t dtype;
  int rank, nranks;
  std::vector<size_t> send_counts, send_displs, recv_counts, recv_displs;
  std::vector<char> send, recv, want;
  bool sends_nothing = true, receives_nothing = true;

  VCase(VPattern p, int me, int n, qcclDataType_t t) : dtype(t), rank(me), nranks(n) {
    const size_t es = qccl::dtype_size(t);
    for (int j = 0; j < n; ++j) {
      send_counts.push_back(v_count(p, n, me, j));
      recv_counts.push_back(v_count(p, n, j, me));
      sends_nothing = sends_nothing && send_counts.back() == 0;
      receives_nothing = receives_nothing && recv_counts.back() == 0;
    }
    const size_t send_size = scatter_blocks(send_counts, true, send_displs);
    const size_t recv_size = scatter_blocks(recv_counts, false, recv_displs);
    send.assign(send_size * es, 0);
    recv.assign(recv_size * es, 0);
    want.assign(recv_size * es, 0);
    for (size_t i = 0; i < recv_size; ++i) {
      set(recv.data(), t, i, kGapValue);
      set(want.data(), t, i, kGapValue);
    }
    for (int j = 0; j < n; ++j) {
      for (size_t i = 0; i < send_counts[j]; ++i) set(send.data(), t, send_displs[j] + i, v_value(me, j, i));
      for (size_t i = 0; i < recv_counts[j]; ++i) set(want.data(), t, recv_displs[j] + i, v_value(j, me, i));
    }
  }
  // A rank with no elements to move passes NULL, as the API allows.
  const void* send_ptr() const { return sends_nothing ? nullptr : send.data(); }
  void* recv_ptr() { return receives_nothing ? nullptr : recv.data(); }
  size_t bytes_to_peers() const {
    size_t b = 0;
    for (int j = 0; j < nranks; ++j)
      if (j != rank) b += send_counts[j] * qccl::dtype_size(dtype);
    return b;
  }
  size_t bytes_from_peers() const {
    size_t b = 0;
    for (int j = 0; j < nranks; ++j)
      if (j != rank) b += recv_counts[j] * qccl::dtype_size(dtype);
    return b;
  }
  qcclResult_t run(qcclComm_t comm) {
    return qcclAllToAllv(send_ptr(), send_counts.data(), send_displs.data(), recv_ptr(),
                         recv_counts.data(), recv_displs.data(), dtype, comm, nullptr);
  }
  // "" when the receive buffer, gaps included, holds exactly the reference.
  std::string check() const {
    return diff(recv.data(), want.data(), recv.size() / qccl::dtype_size(dtype), dtype);
  }
};

}  // namespace qccl_test
