#include "transport/cma.h"

#include <sys/mman.h>
#include <sys/uio.h>

#include <cerrno>
#include <map>
#include <mutex>

#include "core/debug.h"
#include "core/errors.h"
#include "qk/base/env.h"

#ifndef MADV_COLLAPSE
#define MADV_COLLAPSE 25  // Linux 6.1; older kernels answer EINVAL, which is fine
#endif

namespace qccl {

namespace {

QK_ENV_BOOL(env_huge, "QCCL_CMA_HUGE_PAGES", true,
            "Ask for transparent huge pages on large buffers that peers read and write with "
            "single-copy CMA (the kernel pins every page it copies; 2 MiB pages make that ~3x cheaper).");

void cma_copy(Conn& c, bool write, void* local, uint64_t remote, size_t n) {
  size_t got = 0;
  while (got < n) {
    iovec l{static_cast<char*>(local) + got, n - got};
    iovec r{reinterpret_cast<void*>(remote + got), n - got};
    ssize_t k = write ? ::process_vm_writev(c.peer_pid(), &l, 1, &r, 1, 0)
                      : ::process_vm_readv(c.peer_pid(), &l, 1, &r, 1, 0);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) {
      const int err = errno;
      // A peer that gave up (and may have exited since) left its reason in
      // the connection: report that, naming the first failure, not our copy.
      c.check_alive();
      QCCL_REMOTE_ERROR("single-copy ", write ? "write" : "read", " of ", n - got, " bytes ",
                        write ? "to " : "from ", c.peer_name(), " failed: ",
                        k < 0 ? qk::detail::errno_string(err) : std::string("no progress"),
                        err == ESRCH ? " (the process is gone)" : " (QCCL_CMA=0 disables single copy)");
    }
    got += static_cast<size_t>(k);
  }
}

constexpr uintptr_t kHuge = uintptr_t(2) << 20;

}  // namespace

void cma_read(Conn& c, void* local, uint64_t remote, size_t n) { cma_copy(c, false, local, remote, n); }

void cma_write(Conn& c, uint64_t remote, const void* local, size_t n) {
  cma_copy(c, true, const_cast<void*>(local), remote, n);
}

bool cma_probe(int pid, uint64_t addr, uint64_t expect) {
  uint64_t v = 0;
  iovec l{&v, sizeof v};
  iovec r{reinterpret_cast<void*>(addr), sizeof v};
  if (::process_vm_readv(pid, &l, 1, &r, 1, 0) != sizeof v || v != expect) return false;
  return ::process_vm_writev(pid, &l, 1, &r, 1, 0) == sizeof v;
}

void advise_huge_pages(const void* p, size_t n) {
  uintptr_t lo = (reinterpret_cast<uintptr_t>(p) + kHuge - 1) & ~(kHuge - 1);
  uintptr_t hi = (reinterpret_cast<uintptr_t>(p) + n) & ~(kHuge - 1);
  if (hi <= lo || !env_huge.get()) return;
  // Ranges seen so far and how often. A range freed and allocated again at
  // the same place keeps its entry and loses the advice: slower copies,
  // never wrong ones.
  struct Seen {
    uintptr_t hi;
    int times;
  };
  static std::mutex mu;
  static auto* seen = new std::map<uintptr_t, Seen>;  // never destroyed: used at exit
  constexpr size_t kMaxRanges = 4096;
  std::lock_guard<std::mutex> g(mu);
  auto it = seen->find(lo);
  if (it == seen->end() || it->second.hi != hi) {
    if (seen->size() >= kMaxRanges) seen->clear();
    (*seen)[lo] = Seen{hi, 1};
    // New pages of the range come huge; the ones already there stay small.
    ::madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_HUGEPAGE);
    return;
  }
  if (it->second.times >= 2) return;
  it->second.times = 2;
  // Seen twice: a buffer the program reuses (gradient buckets, a benchmark
  // loop), worth one copy of its pages into huge ones (64 MiB: ~150 ms on the
  // 2-core EPYC VM, then single-copy reads at 10 GB/s instead of 4).
  int rc = ::madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_COLLAPSE);
  QCCL_TRACE("SHM", "huge pages for [{:#x}, {:#x}) ({} MiB): {}", lo, hi, (hi - lo) >> 20,
             rc == 0 ? "collapsed" : "collapse refused");
}

}  // namespace qccl
