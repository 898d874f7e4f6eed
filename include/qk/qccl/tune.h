// qccl's tuning file: the four sizes no cheap probe at init predicts (the
// shared-memory publication slice, the receive-and-reduce slice, the chain's
// chunk, the single-copy receive's piece; docs/qccl.md "Tuning"), measured by
// timing the collectives that use them on this machine, per count of ranks on
// the host. `qk perf --tune` writes one; QCCL_TUNE_FILE names it, and every
// communicator made afterwards takes the entry nearest its ranks on the host.
//
//   qcclComm_t comm = ...;                               // ranks on one host
//   qk::qccl::TuneEntry e = qk::qccl::tune_communicator(comm);   // collective
//   qk::qccl::TuneFile f = qk::qccl::tune_file_for_this_machine();
//   qk::qccl::merge_entry(f, e);
//   if (rank == 0) qk::qccl::write_tune_file("qccl-tune.json", f);
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "qccl.h"

namespace qk::qccl {

// qccl's own values where no tuning file says otherwise.
struct TunedSizes {
  size_t shm_slice = 64 << 10;
  size_t reduce_slice = 64 << 10;
  size_t chain_chunk = 256 << 10;
  size_t cma_copy_chunk = 4 << 20;
};

// One candidate value of one size: the geometric mean, over the sizes timed,
// of its median time divided by the current value's (below 1: faster).
struct TuneTrial {
  std::string knob;  // "shm_slice", "reduce_slice", "chain_chunk" or "cma_copy_chunk"
  size_t value = 0;
  double relative_time = 1;
};

struct TuneEntry {
  int ranks_on_host = 0;
  TunedSizes sizes;
  double seconds = 0;  // how long the tuning took
  std::vector<TuneTrial> trials;
};

struct TuneFile {
  std::string cpu;      // the CPU model the entries were measured on
  int cpus = 0;         // CPUs online there
  std::string written;  // UTC time, ISO 8601
  std::vector<TuneEntry> entries;
};

// The bounds a size must lie in (a file outside them is refused).
struct SizeBounds {
  size_t lo, hi;
};
SizeBounds tune_bounds(const std::string& knob);

// Throws IoError (cannot read) or ValueError (not a qccl tuning file, a value
// out of bounds), naming the file and what is wrong.
TuneFile read_tune_file(const std::string& path);
// All or nothing (a temporary file renamed over `path`).
void write_tune_file(const std::string& path, const TuneFile& file);
// An empty file for this machine: its CPU model, CPU count and the time now.
TuneFile tune_file_for_this_machine();
// The file at `path` to add entries to: its entries when it was measured on
// this CPU model (*replaced false), else a fresh one for this machine
// (*replaced true when a file of another model is there). ValueError when
// something there is not a tuning file: it is never overwritten.
TuneFile tune_file_to_extend(const std::string& path, bool* replaced = nullptr);
// tune_file_to_extend, merge_entry, write_tune_file: what `qk perf --tune`
// does with each count of ranks it tuned.
void add_to_tune_file(const std::string& path, const TuneEntry& entry);
// Replaces the entry for the same ranks_on_host, else adds it (kept sorted).
void merge_entry(TuneFile& file, const TuneEntry& entry);
// The entry for ranks_on_host, else the one with the nearest count (the
// smaller on a tie); null when the file has none.
const TuneEntry* nearest_entry(const TuneFile& file, int ranks_on_host);

struct TuneOptions {
  int rounds = 7;        // each candidate timed this many times, interleaved; the median counts
  double min_ms = 10;    // a timing runs enough calls to last this long
  double min_gain = 0.03;  // a candidate replaces the current value only when this much faster
  std::function<void(const std::string&)> progress;  // a line per size tuned (rank 0 only)
};

// Collective: every rank of `comm` calls it with the same options; all must
// share one host. Times each size's candidates (coordinate descent, the
// others held at their best so far) on the collectives that use it, with
// plain malloc'd buffers, and leaves the communicator at the chosen values.
// Every rank returns the same entry.
TuneEntry tune_communicator(qcclComm_t comm, const TuneOptions& options = {});

}  // namespace qk::qccl
