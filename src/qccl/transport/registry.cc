#include "transport/registry.h"

#include <fcntl.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <new>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "core/debug.h"
#include "qk/base/env.h"
#include "qk/base/error.h"

namespace qccl {

namespace {

QK_ENV_BOOL(env_register, "QCCL_REGISTER", true,
            "Register plain buffers that all-reduces see again (their whole pages move onto shared "
            "memory at the same address) so peers on the host reach them directly.");

// Ranges kept at most; the least recently used give their pages back first.
constexpr size_t kMaxRegistrations = 64;
constexpr size_t kMaxSeen = 1024;

struct Reg {
  uintptr_t hi;
  int fd;
  uint64_t id;
  uint64_t last_use;
  dev_t dev;  // the memfd's identity: its name is not unique (a peer's
  ino_t ino;  // allocation mapped here may carry the same one)
};

struct Registry {
  std::shared_mutex pin;  // shared: calls in flight; exclusive: fork, unregister_all
  std::mutex mu;          // the maps
  std::map<uintptr_t, Reg> regs;       // by lo
  std::map<uintptr_t, uintptr_t> seen;  // lo -> hi, seen once
  uint64_t uses = 0;
  std::atomic<uint64_t> generation{0};  // bumped whenever a registration goes
};

Registry& registry();

size_t page_size() {
  static const size_t p = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  return p;
}

// Whether [lo, hi) is still exactly one mapping of the file (dev, ino): a
// freed range mapped anew is private memory, or another file. By identity,
// not by name: a peer's allocation that this process maps can carry the
// same memfd name and land on the very addresses a freed registration left
// (DirectCma.ForcedOnPlainBuffersIsExactForEveryOp caught a name check
// taking one for the other).
// The file mapped exactly at [lo, hi), through /proc/self/map_files (false:
// no one mapping has that range, or anonymous memory).
bool stat_mapping(uintptr_t lo, uintptr_t hi, struct stat* st) {
  char path[96];
  std::snprintf(path, sizeof path, "/proc/self/map_files/%lx-%lx", static_cast<unsigned long>(lo),
                static_cast<unsigned long>(hi));
  return ::stat(path, st) == 0;
}

bool still_mapped(uintptr_t lo, uintptr_t hi, dev_t dev, ino_t ino) {
  struct stat st {};
  return stat_mapping(lo, hi, &st) && st.st_dev == dev && st.st_ino == ino;
}

// Whether every page of [lo, hi) is private anonymous read-write memory
// (malloc's heap and mappings, thread stacks, tensors), per /proc/self/maps.
bool private_anonymous(uintptr_t lo, uintptr_t hi) {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  uintptr_t covered = lo;
  while (std::getline(maps, line) && covered < hi) {
    unsigned long a = 0, b = 0, off = 0, inode = 0;
    char perms[8] = {0}, dev[16] = {0};
    int path_at = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx %7s %lx %15s %lu %n", &a, &b, perms, &off, dev, &inode, &path_at) < 6)
      continue;
    if (b <= covered || a >= hi) continue;
    if (a > covered) return false;  // a hole
    std::string path = path_at > 0 && path_at <= static_cast<int>(line.size()) ? line.substr(path_at) : "";
    bool anon = inode == 0 && (path.empty() || path == "[heap]");
    if (!anon || std::strncmp(perms, "rw-p", 4) != 0) return false;
    covered = b;
  }
  return covered >= hi;
}

// Moves [lo, hi) onto a new memfd; -1 (and nothing changed) where it cannot.
int move_to_memfd(uintptr_t lo, uintptr_t hi, uint64_t id) {
  size_t len = hi - lo;
  int fd = ::memfd_create(shared_memfd_name(id).c_str(), MFD_CLOEXEC);
  if (fd < 0) return -1;
  void* tmp = MAP_FAILED;
  if (::ftruncate(fd, static_cast<off_t>(len)) == 0)
    tmp = ::mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  if (tmp == MAP_FAILED) {
    ::close(fd);
    return -1;
  }
  std::memcpy(tmp, reinterpret_cast<void*>(lo), len);
  // Moves the copy over the private pages in one step (mremap replaces
  // whatever is mapped at the target).
  void* at = ::mremap(tmp, len, len, MREMAP_MAYMOVE | MREMAP_FIXED, reinterpret_cast<void*>(lo));
  if (at == MAP_FAILED) {
    int err = errno;
    ::munmap(tmp, len);
    ::close(fd);
    // The kernel checks what it can (limits, sizes) before it touches the
    // target; what fails there leaves the private pages as they were.
    QCCL_WARN("SHM", "registering [{:#x}, {:#x}) failed: {}", lo, hi, qk::detail::errno_string(err));
    return -1;
  }
  return fd;
}

// Private pages back under [lo, hi), contents kept.
void move_to_private(uintptr_t lo, uintptr_t hi) {
  size_t len = hi - lo;
  void* tmp = ::mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (tmp == MAP_FAILED) return;  // stays shared: correct for this process, shared with a child
  std::memcpy(tmp, reinterpret_cast<void*>(lo), len);
  if (::mremap(tmp, len, len, MREMAP_MAYMOVE | MREMAP_FIXED, reinterpret_cast<void*>(lo)) == MAP_FAILED)
    ::munmap(tmp, len);
}

// Private pages back under whatever is still mapped from memfd `id` (all of
// the range, or what is left of it after the program unmapped a part).
void give_back(const Reg& g, uintptr_t lo) {
  if (still_mapped(lo, g.hi, g.dev, g.ino)) {
    move_to_private(lo, g.hi);
    return;
  }
  // What is left of it after the program unmapped a part: lines of
  // /proc/self/maps with its inode, checked by identity one by one.
  std::ifstream maps("/proc/self/maps");
  std::string line;
  std::vector<std::pair<uintptr_t, uintptr_t>> left;
  while (std::getline(maps, line)) {
    unsigned long a = 0, b = 0, off = 0, inode = 0;
    char perms[8] = {0}, dev[16] = {0};
    if (std::sscanf(line.c_str(), "%lx-%lx %7s %lx %15s %lu", &a, &b, perms, &off, dev, &inode) == 6 &&
        inode == g.ino && still_mapped(a, b, g.dev, g.ino))
      left.emplace_back(a, b);
  }
  for (auto [a, b] : left) move_to_private(a, b);
}

void drop_locked(Registry& r, std::map<uintptr_t, Reg>::iterator it) {
  r.generation.fetch_add(1);
  give_back(it->second, it->first);
  ::close(it->second.fd);
  r.regs.erase(it);
}

void unregister_all_locked(Registry& r) {
  std::lock_guard<std::mutex> g(r.mu);
  while (!r.regs.empty()) drop_locked(r, r.regs.begin());
  r.seen.clear();
}

void atfork_prepare() {
  Registry& r = registry();
  r.pin.lock();
  unregister_all_locked(r);
}
void atfork_parent() { registry().pin.unlock(); }
// The child is one thread, not the one that locked: a fresh lock (unlocking
// the parent's would take glibc's reader path, since the writer's thread id
// differs, and leave the lock held for good).
void atfork_child() { new (&registry().pin) std::shared_mutex(); }

Registry& registry() {
  static Registry* r = [] {
    auto* reg = new Registry;  // never destroyed: calls may run at exit
    ::pthread_atfork(atfork_prepare, atfork_parent, atfork_child);
    return reg;
  }();
  return *r;
}

}  // namespace

std::shared_lock<std::shared_mutex> pin_registrations() { return std::shared_lock<std::shared_mutex>(registry().pin); }

std::optional<Registration> registered(const void* p, size_t n, bool register_if_reused) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  const uintptr_t lo = (a + page_size() - 1) & ~(page_size() - 1);
  const uintptr_t hi = (a + n) & ~(page_size() - 1);
  if (hi <= lo || !env_register.get()) return std::nullopt;
  Registry& r = registry();
  std::lock_guard<std::mutex> g(r.mu);
  // A registration holding the range (the largest buffer of several views).
  auto it = r.regs.upper_bound(lo);
  if (it != r.regs.begin()) {
    --it;
    if (it->second.hi >= hi) {
      if (still_mapped(it->first, it->second.hi, it->second.dev, it->second.ino)) {
        it->second.last_use = ++r.uses;
        Registration reg;
        reg.ref.id = it->second.id;
        reg.ref.fd = it->second.fd;
        reg.ref.offset = lo - it->first;
        reg.ref.region_bytes = it->second.hi - it->first;
        reg.head = lo - a;
        reg.mapped = hi - lo;
        return reg;
      }
      drop_locked(r, it);  // freed or remapped since: what is there now is not ours
    }
  }
  if (!register_if_reused) return std::nullopt;
  auto s = r.seen.find(lo);
  if (s == r.seen.end() || s->second != hi) {
    if (r.seen.size() >= kMaxSeen) r.seen.clear();
    r.seen[lo] = hi;
    return std::nullopt;
  }
  r.seen.erase(s);
  // Registrations this one overlaps are replaced by it, and the ones the
  // program has freed since (their memfd would otherwise live on) go.
  for (auto j = r.regs.begin(); j != r.regs.end();) {
    if ((j->first < hi && lo < j->second.hi) || !still_mapped(j->first, j->second.hi, j->second.dev, j->second.ino)) {
      auto next = std::next(j);
      drop_locked(r, j);
      j = next;
    } else {
      ++j;
    }
  }
  if (!private_anonymous(lo, hi)) return std::nullopt;
  if (r.regs.size() >= kMaxRegistrations) {
    auto lru = r.regs.begin();
    for (auto j = r.regs.begin(); j != r.regs.end(); ++j)
      if (j->second.last_use < lru->second.last_use) lru = j;
    drop_locked(r, lru);
  }
  uint64_t id = new_shared_id();
  int fd = move_to_memfd(lo, hi, id);
  if (fd < 0) return std::nullopt;
  struct stat st {};
  if (::fstat(fd, &st) != 0) {  // cannot happen on a memfd we hold; keep the pages private then
    move_to_private(lo, hi);
    ::close(fd);
    return std::nullopt;
  }
  r.regs[lo] = Reg{hi, fd, id, ++r.uses, st.st_dev, st.st_ino};
  QCCL_TRACE("SHM", "registered [{:#x}, {:#x}) ({} KiB) as shared memory {}", lo, hi, (hi - lo) >> 10, id);
  Registration reg;
  reg.ref.id = id;
  reg.ref.fd = fd;
  reg.ref.offset = 0;
  reg.ref.region_bytes = hi - lo;
  reg.head = lo - a;
  reg.mapped = hi - lo;
  return reg;
}

void unregister_all() {
  Registry& r = registry();
  std::unique_lock<std::shared_mutex> pin(r.pin);
  unregister_all_locked(r);
}

bool registration_still_holds(const void* p, size_t n) {
  struct stat st {};
  const auto lo = reinterpret_cast<uintptr_t>(p);
  return stat_mapping(lo, lo + n, &st) && st.st_nlink == 0;  // a memfd: no name in any directory
}

uint64_t generation() { return registry().generation.load(); }

size_t registration_count() {
  Registry& r = registry();
  std::lock_guard<std::mutex> g(r.mu);
  return r.regs.size();
}

}  // namespace qccl
