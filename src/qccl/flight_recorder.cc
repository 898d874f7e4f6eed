#include "flight_recorder.h"

#include <fmt/format.h>

#include <algorithm>
#include <ctime>

#include "core/debug.h"
#include "core/settings.h"
#include "qk/base/file_io.h"

namespace qccl {

namespace {
// The coarse clock (a few ms resolution) is a memory read, not a clock
// read: every call records two times, and a small all-reduce lasts ~1 us.
// The recorder explains stalls of seconds, where milliseconds are plenty.
double now_s() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}
const char* state_name(FlightRecorder::State s) {
  switch (s) {
    case FlightRecorder::kStarted: return "STARTED";
    case FlightRecorder::kDone: return "done";
    case FlightRecorder::kFailed: return "FAILED";
  }
  return "?";
}
}  // namespace

FlightRecorder::FlightRecorder(int capacity) : ring_(std::max(1, capacity)) {}

size_t FlightRecorder::begin(uint64_t seq, const char* what, size_t bytes, int peer,
                             const char* algo) {
  std::lock_guard<SpinLock> g(mu_);
  size_t slot = next_id_ % ring_.size();
  Entry& e = ring_[slot];
  e = Entry{};
  e.seq = seq;
  e.id = next_id_++;
  e.what = what;
  e.algo = algo;
  e.bytes = bytes;
  e.peer = peer;
  e.t_start = now_s();
  return slot;
}

void FlightRecorder::note(size_t slot, std::string text) {
  std::lock_guard<SpinLock> g(mu_);
  ring_[slot].note = std::move(text);
}

void FlightRecorder::set_algo(size_t slot, const char* algo) {
  std::lock_guard<SpinLock> g(mu_);
  ring_[slot].algo = algo;
}

void FlightRecorder::end(size_t slot, State s) {
  std::lock_guard<SpinLock> g(mu_);
  ring_[slot].state = s;
  ring_[slot].t_end = now_s();
}

std::string FlightRecorder::dump() const {
  std::lock_guard<SpinLock> g(mu_);
  std::vector<const Entry*> live;
  for (const auto& e : ring_)
    if (e.id) live.push_back(&e);
  std::sort(live.begin(), live.end(), [](auto* a, auto* b) { return a->id < b->id; });
  double now = now_s();
  std::string out = fmt::format("{:>6} {:<14} {:>12} {:>5} {:<6} {:<8} {:>10}  {}\n", "seq", "op",
                                "bytes", "peer", "algo", "state", "time_ms", "note");
  for (const Entry* e : live) {
    double t = ((e->state == kStarted ? now : e->t_end) - e->t_start) * 1e3;
    out += fmt::format("{:>6} {:<14} {:>12} {:>5} {:<6} {:<8} {:>10.3f}  {}\n", e->seq, e->what,
                       e->bytes, e->peer < 0 ? std::string("-") : std::to_string(e->peer), e->algo,
                       state_name(e->state), t, e->note);
  }
  return out;
}

void FlightRecorder::dump_on_error(const std::string& comm_name, int rank,
                                   const std::string& reason) const {
  std::string text = dump();
  QCCL_WARN("COLL", "flight recorder of comm '{}' rank {} ({}):\n{}", comm_name, rank, reason, text);
  std::string dir = flight_recorder_dir();
  if (dir.empty()) return;
  std::string path = fmt::format("{}/qccl_fr_{}_rank{}.txt", dir, comm_name, rank);
  try {
    qk::make_dirs(dir);
    qk::atomic_write_file(path, "# " + reason + "\n" + text);
  } catch (const std::exception& e) {
    QCCL_WARN("COLL", "could not write the flight recorder to {}: {}", path, e.what());
  }
}

}  // namespace qccl
