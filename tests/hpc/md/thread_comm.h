// Ranks played by threads for qk md's tests: an all-reduce (sums in rank
// order, the same bits everywhere) and a pairwise exchange between `n`
// threads, as qk::md::ForceShare's (forces.h).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <barrier>
#include <cstdint>
#include <vector>

#include "qk/hpc/md/forces.h"

namespace qk::md::test {

class ThreadComm {
 public:
  explicit ThreadComm(int n) : n_(n), sync_(n), posts_(n) {}
  qk::md::ForceShare share(int rank) {
    qk::md::ForceShare s;
    s.rank = rank;
    s.size = n_;
    s.allreduce_sum = [this, rank](double* p, int64_t count) { allreduce(rank, p, count); };
    s.exchange = [this, rank](int to, const double* send, int64_t ns, int from, double* recv, int64_t nr) {
      exchange(rank, to, send, ns, from, recv, nr);
    };
    return s;
  }

 private:
  struct Post {
    const double* data = nullptr;
    int64_t count = 0;
    int to = -1;
  };
  void allreduce(int rank, double* data, int64_t count) {
    posts_[rank] = {data, count, -1};
    sync_.arrive_and_wait();
    std::vector<double> total(static_cast<size_t>(count), 0.0);
    for (int r = 0; r < n_; ++r)
      for (int64_t i = 0; i < count; ++i) total[i] += posts_[r].data[i];
    sync_.arrive_and_wait();
    std::copy(total.begin(), total.end(), data);
    sync_.arrive_and_wait();
  }
  void exchange(int rank, int to, const double* send, int64_t ns, int from, double* recv, int64_t nr) {
    posts_[rank] = {send, ns, to};
    sync_.arrive_and_wait();
    const Post& p = posts_[from];
    if (p.to != rank || p.count != nr) {
      ADD_FAILURE() << "rank " << rank << " expected " << nr << " values from " << from << ", which sent " << p.count
                    << " to " << p.to;
    } else {
      std::copy(p.data, p.data + nr, recv);
    }
    sync_.arrive_and_wait();
  }
  int n_;
  std::barrier<> sync_;
  std::vector<Post> posts_;
};

}  // namespace qk::md::test
