// Flight recorder: the last operations of a communicator (sequence number,
// collective, bytes, peers, algorithm, state, time), kept in a small ring so
// that when a call times out or fails the dump shows which rank stopped where.
//
//   size_t i = fr.begin(seq, "allreduce", bytes, -1, "ring");
//   ... fr.waiting(i, "recv from rank 2") ...
//   fr.end(i, FlightRecorder::kDone);
//   std::string text = fr.dump();   // one line per entry, oldest first
#pragma once

#include <cstdint>
#include <atomic>
#include <mutex>
#include <string>
#include <vector>

namespace qccl {

class FlightRecorder {
 public:
  enum State : uint8_t { kStarted, kDone, kFailed };
  explicit FlightRecorder(int capacity = 64);

  size_t begin(uint64_t seq, const char* what, size_t bytes, int peer, const char* algo);
  void note(size_t slot, std::string text);  // what the op is waiting for
  void set_algo(size_t slot, const char* algo);  // decided inside the call
  void end(size_t slot, State s);
  std::string dump() const;
  // Writes dump() to the log at WARN and, when QCCL_FR_DUMP_DIR is set, to a file there.
  void dump_on_error(const std::string& comm_name, int rank, const std::string& reason) const;

 private:
  struct Entry {
    uint64_t seq = 0;
    uint64_t id = 0;  // order of begin() calls; 0 = empty
    const char* what = "";
    const char* algo = "";
    size_t bytes = 0;
    int peer = -1;
    State state = kStarted;
    double t_start = 0, t_end = 0;
    std::string note;
  };
  // A spin lock, not a mutex: the calling thread takes it twice per call and
  // only a dump (on an error, from any thread) ever contends.
  class SpinLock {
   public:
    void lock() {
      while (flag_.test_and_set(std::memory_order_acquire))
        while (flag_.test(std::memory_order_relaxed)) {}
    }
    void unlock() { flag_.clear(std::memory_order_release); }

   private:
    std::atomic_flag flag_;
  };
  mutable SpinLock mu_;
  std::vector<Entry> ring_;
  uint64_t next_id_ = 1;
};

}  // namespace qccl
