// Host memory that peers on the same host can map (qcclMemAlloc, the
// analogue of ncclMemAlloc): each allocation is a memfd mapped shared, so a
// peer opens /proc/<pid>/fd/<fd> once, maps it, and from then on reads and
// writes our buffer with plain loads and stores. Collectives on such buffers
// skip the rings and the single-copy syscalls (algo/direct.cc).
//
//   void* p = shared_alloc(bytes);              // qcclMemAlloc
//   if (auto ref = find_shared(p, n)) ...        // inside one allocation?
//   PeerMappings maps;                           // per communicator
//   char* peer = maps.map(peer_pid, ref_from_peer, "rank 1 (pid ..)");
//   shared_free(p);                              // qcclMemFree
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>

namespace qccl {

// Where a buffer lies inside a shared allocation, as a peer needs to find it.
struct SharedRef {
  uint64_t id = 0;            // unique per allocation in its process (never reused)
  int32_t fd = -1;            // the memfd, in the owner's fd table
  uint32_t pad = 0;           // explicit: the struct goes over the wire
  uint64_t offset = 0;        // of the buffer within the allocation
  uint64_t region_bytes = 0;  // size of the allocation
};
static_assert(sizeof(SharedRef) == 32);

// Allocates `bytes` (> 0) of shareable memory, page aligned; throws
// ValueError (size 0) or IoError with the reason.
void* shared_alloc(size_t bytes);
// Frees an allocation made by shared_alloc; throws ValueError for any other pointer.
void shared_free(void* p);
// The allocation holding [p, p + n), if any.
std::optional<SharedRef> find_shared(const void* p, size_t n);

// Allocation ids (never reused in a process) and the memfd name that carries
// one, so a peer can tell it opened the right file (registry.h uses them too).
uint64_t new_shared_id();
std::string shared_memfd_name(uint64_t id);

// A peer's allocations, mapped into this process on first use and kept until
// the communicator goes (a freed one stays mapped until then or until evicted:
// the ids are never reused, so a stale mapping is never mistaken for a new one).
class PeerMappings {
 public:
  PeerMappings() = default;
  ~PeerMappings();
  PeerMappings(const PeerMappings&) = delete;
  PeerMappings& operator=(const PeerMappings&) = delete;
  // The base of the peer's allocation `ref` in this process. Throws
  // RemoteError when it cannot be opened or is not what the peer said.
  // peer_base: where the allocation lies in the peer; mappings of older
  // allocations of the peer over the same addresses are stale (freed, or
  // registered anew) and go.
  char* map(int peer_pid, const SharedRef& ref, const std::string& who, uint64_t peer_base = 0);
  size_t size() const { return maps_.size(); }

 private:
  struct Mapping {
    char* base;
    size_t bytes;
    uint64_t last_use;
    uint64_t peer_base;
  };
  std::map<std::pair<int, uint64_t>, Mapping> maps_;  // (pid, id)
  uint64_t uses_ = 0;
};

// Set-up probe (transport/shm.cc): a one-page allocation the peer tries to map,
// so both sides know before any collective whether direct access works here
// (it needs the same user and /proc; containers and ptrace policy may deny it).
struct SharedProbe {
  SharedProbe();
  ~SharedProbe();
  SharedProbe(const SharedProbe&) = delete;
  SharedProbe& operator=(const SharedProbe&) = delete;
  void* mem = nullptr;
  SharedRef ref;
};
bool can_map_peer(int peer_pid, const SharedRef& probe_ref);

}  // namespace qccl
