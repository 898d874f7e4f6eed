// `tune_communicator` (qk/qccl/tune.h): the four sizes no probe at init
// predicts, chosen by timing the collectives that use them at candidate
// values. One size at a time (coordinate descent: the others held at their
// best so far), candidates in powers of two from a quarter to four times the
// current value, rounds interleaved (each round visits the candidates in a
// rotated order) so a burst of load from elsewhere hits all of them, the
// median of the rounds per size timed, and a candidate taken only when its
// geometric-mean time is min_gain below the current value's: noise alone
// leaves the defaults; so does a candidate that does not win at least 70%
// of its timings paired with the current value's (same round). Timings are the slowest rank's (a max all-reduce), so
// every rank sees the same figures and makes the same choice.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "algo/tuning.h"
#include "backend/backend.h"
#include "comm.h"
#include "comm_init.h"
#include "transport/shm.h"
#include "qk/base/error.h"
#include "qk/base/timer.h"
#include "qk/qccl/tune.h"

namespace qk::qccl {

namespace internal = ::qccl;  // the engine (src/qccl), beside the public qk::qccl

namespace {

using Clock = std::chrono::steady_clock;

enum class Op { kAllReduce, kAllGather, kBroadcast };

// One timed call: a collective and its size (all_gather: the whole output).
struct TimedCase {
  Op op;
  size_t bytes;
};

struct TunedKnob {  // a tuned size and the collectives that time it
  const char* name;
  size_t internal::Tuning::*field;
  std::vector<TimedCase> cases;  // collectives whose time depends on the size
};

const char* op_name(Op op) {
  switch (op) {
    case Op::kAllReduce: return "all_reduce";
    case Op::kAllGather: return "all_gather";
    case Op::kBroadcast: return "broadcast";
  }
  return "?";
}

std::string size_str(size_t b) {
  if (b >= (1 << 20) && b % (1 << 20) == 0) return fmt::format("{} MiB", b >> 20);
  if (b >= 1024 && b % 1024 == 0) return fmt::format("{} KiB", b >> 10);
  return fmt::format("{} B", b);
}

void ok(qcclResult_t rc, qcclComm_t comm, const char* what) {
  QK_CHECK_AS(IoError, rc == qcclSuccess, "qccl tuning: ", what, " failed: ", qcclGetErrorString(rc), ": ",
              qcclGetLastError(comm));
}

class Tuner {
 public:
  Tuner(qcclComm_t comm, const TuneOptions& o) : comm_(comm), c_(*comm), o_(o) {}

  TuneEntry run() {
    Timer timer;
    const int n = c_.nranks;
    // Sizes chosen to land on the paths each knob governs on any host: the
    // rings below the single-copy threshold (Tuning::cma_min_bytes is at
    // least 1 MiB + 1 with more ranks than cores, a few MiB otherwise), the
    // chain from 1 MiB, single copy for the 16-64 MiB gathers.
    const TunedKnob knobs[] = {
        {"shm_slice", &internal::Tuning::shm_slice,
         {{Op::kAllGather, 1 << 20}, {Op::kAllGather, 4 << 20}, {Op::kAllReduce, 1 << 20}}},
        {"reduce_slice", &internal::Tuning::reduce_slice,
         {{Op::kAllReduce, 256 << 10}, {Op::kAllReduce, 1 << 20}, {Op::kAllReduce, 4 << 20}}},
        {"chain_chunk", &internal::Tuning::chain_chunk,
         {{Op::kBroadcast, 1 << 20}, {Op::kBroadcast, 4 << 20}, {Op::kBroadcast, 16 << 20}}},
        {"cma_copy_chunk", &internal::Tuning::cma_copy_chunk,
         {{Op::kAllGather, 16 << 20}, {Op::kAllGather, 64 << 20}}},
    };
    size_t most = 0;
    for (const TunedKnob& k : knobs)
      for (const TimedCase& cs : k.cases) most = std::max(most, cs.bytes);
    send_ = buffer(most);
    recv_ = buffer(most);
    TuneEntry entry;
    entry.ranks_on_host = n;
    for (const TunedKnob& k : knobs) tune(k, entry);
    entry.sizes = TunedSizes{c_.tuning.shm_slice, c_.tuning.reduce_slice, c_.tuning.chain_chunk,
                             c_.tuning.cma_copy_chunk};
    entry.seconds = timer.seconds();
    return entry;
  }

 private:
  using Buffer = std::unique_ptr<char, void (*)(void*)>;
  static Buffer buffer(size_t bytes) {
    void* p = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
    QK_CHECK_AS(IoError, p, "qccl tuning: out of memory allocating ", bytes, " bytes");
    std::memset(p, 1, bytes);  // pages faulted in before anything is timed
    return Buffer(static_cast<char*>(p), std::free);
  }

  void set(size_t internal::Tuning::*field, size_t v) {
    c_.tuning.*field = v;
    ::qccl::use_tuned_sizes(c_);
  }

  void call(const TimedCase& cs) {
    const int n = c_.nranks;
    switch (cs.op) {
      case Op::kAllReduce:
        ok(qcclAllReduce(send_.get(), recv_.get(), cs.bytes / 4, qcclFloat32, qcclSum, comm_, nullptr), comm_,
           "all_reduce");
        break;
      case Op::kAllGather:
        ok(qcclAllGather(send_.get(), recv_.get(), cs.bytes / n, qcclInt8, comm_, nullptr), comm_, "all_gather");
        break;
      case Op::kBroadcast:
        ok(qcclBroadcast(send_.get(), recv_.get(), cs.bytes, qcclInt8, 0, comm_, nullptr), comm_, "broadcast");
        break;
    }
  }

  double slowest(double v) {
    double out = 0;
    ok(qcclAllReduce(&v, &out, 1, qcclFloat64, qcclMax, comm_, nullptr), comm_, "timing reduction");
    return out;
  }

  // Microseconds per call of `calls` calls after one warm-up, the slowest rank's.
  double time_us(const TimedCase& cs, int calls) {
    call(cs);
    slowest(0);  // a barrier: all start together
    auto t0 = Clock::now();
    for (int i = 0; i < calls; ++i) call(cs);
    return slowest(std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / calls);
  }

  void tune(const TunedKnob& k, TuneEntry& entry) {
    Timer timer;
    const size_t current = c_.tuning.*k.field;
    SizeBounds b = tune_bounds(k.name);
    if (std::string(k.name) == "shm_slice") b.hi = std::min(b.hi, ::qccl::shm_ring_bytes());
    std::vector<size_t> cand;
    for (size_t v = std::max(current / 4, b.lo); v <= std::min(current * 4, b.hi); v *= 2) cand.push_back(v);
    if (std::find(cand.begin(), cand.end(), current) == cand.end()) cand.push_back(current);
    std::sort(cand.begin(), cand.end());
    // Calls per timing, from the current value's time (the same on every rank).
    std::vector<int> calls;
    for (const TimedCase& cs : k.cases) {
      double us = time_us(cs, 1);
      calls.push_back(static_cast<int>(std::clamp(std::ceil(o_.min_ms * 1e3 / std::max(us, 1.0)), 1.0, 1000.0)));
    }
    const int rounds = std::max(o_.rounds, 1);
    // samples[candidate][case][round]
    std::vector<std::vector<std::vector<double>>> samples(
        cand.size(), std::vector<std::vector<double>>(k.cases.size()));
    for (int r = 0; r < rounds; ++r)
      for (size_t j = 0; j < cand.size(); ++j) {
        size_t ci = (j + r) % cand.size();
        set(k.field, cand[ci]);
        for (size_t i = 0; i < k.cases.size(); ++i) samples[ci][i].push_back(time_us(k.cases[i], calls[i]));
      }
    auto median = [](std::vector<double> v) {
      std::sort(v.begin(), v.end());
      return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
    };
    const size_t cur = std::find(cand.begin(), cand.end(), current) - cand.begin();
    std::vector<double> rel(cand.size(), 0.0);
    for (size_t j = 0; j < cand.size(); ++j) {
      double log_sum = 0;
      for (size_t i = 0; i < k.cases.size(); ++i)
        log_sum += std::log(median(samples[j][i]) / std::max(median(samples[cur][i]), 1e-9));
      rel[j] = std::exp(log_sum / static_cast<double>(k.cases.size()));
    }
    // A candidate must also win most of its paired timings (same round, same
    // case, against the current value): a geometric mean alone moves with
    // one burst of load elsewhere (5-10% on a shared 2-core VM).
    auto wins = [&](size_t j) {
      int w = 0;
      for (size_t i = 0; i < k.cases.size(); ++i)
        for (int r = 0; r < rounds; ++r) w += samples[j][i][r] < samples[cur][i][r];
      return w;
    };
    const int pairs = rounds * static_cast<int>(k.cases.size());
    size_t best = cur;
    for (size_t j = 0; j < cand.size(); ++j)
      if (j != cur && rel[j] < 1 - o_.min_gain && rel[j] < rel[best] && wins(j) * 10 >= pairs * 7) best = j;
    set(k.field, cand[best]);
    std::string line = fmt::format("{} for {} ranks:", k.name, c_.nranks);
    for (size_t j = 0; j < cand.size(); ++j) {
      entry.trials.push_back({k.name, cand[j], rel[j]});
      line += fmt::format(" {}{}{} {:.3f}", j == best ? "[" : "", size_str(cand[j]), j == best ? "]" : "", rel[j]);
      if (j != cur) line += fmt::format(" ({}/{})", wins(j), pairs);
    }
    std::string cases;
    for (const TimedCase& cs : k.cases) cases += fmt::format("{}{} {}", cases.empty() ? "" : ", ", op_name(cs.op), size_str(cs.bytes));
    line += fmt::format(" (time relative to {}, and timings won against it; {}; {:.1f} s)", size_str(current), cases,
                        timer.seconds());
    if (o_.progress && c_.rank == 0) o_.progress(line);
  }

  qcclComm_t comm_;
  qcclComm& c_;
  const TuneOptions& o_;
  Buffer send_{nullptr, std::free}, recv_{nullptr, std::free};
};

}  // namespace

TuneEntry tune_communicator(qcclComm_t comm, const TuneOptions& options) {
  QK_CHECK(comm && comm->magic == qcclComm::kMagic, "qccl tuning: expected a communicator, got ",
           comm ? "a pointer that is not one" : "null");
  comm->check_usable();
  QK_CHECK(comm->nranks >= 2, "qccl tuning: needs at least 2 ranks, the communicator has ", comm->nranks);
  for (const auto& p : comm->peers)
    QK_CHECK(p.host_hash == comm->peers[0].host_hash, "qccl tuning: the ranks span several hosts; tune one "
             "host's ranks (the file's entries are per count of ranks on a host): `qk perf --tune` on each kind of machine");
  QK_CHECK(std::string(comm->backend->name()) == "native", "qccl tuning: the communicator runs on the '",
           comm->backend->name(), "' backend (QCCL_BACKEND); the sizes tuned are the native engine's");
  QK_CHECK(options.rounds >= 1 && options.min_ms > 0 && options.min_gain >= 0 && options.min_gain < 1,
           "qccl tuning: expected rounds >= 1, min_ms > 0 and min_gain in [0, 1)");
  return Tuner(comm, options).run();
}

}  // namespace qk::qccl
