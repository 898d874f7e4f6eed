// Registration of plain memory for direct access by peers (NCCL's user-buffer
// registration, for host memory): the pages that lie wholly inside a buffer
// the program hands to an all-reduce again and again are moved onto a memfd,
// mapped shared at the same address, so the peers can map them like a
// qcclMemAlloc allocation (transport/shared_mem.h) and the direct all-reduce
// reads and writes them with plain loads and stores, not system calls.
//
//   auto pin = pin_registrations();            // for the whole call
//   if (auto reg = registered(p, n, true)) ...  // reg->ref, reg->head
//
// What keeps this safe:
// - Only private anonymous read-write memory (malloc, new, tensors) is
//   moved, checked in /proc/self/maps; file mappings and read-only memory
//   never are. The contents are copied first, so nothing the program sees
//   changes; only whole pages inside the buffer move, never a neighbour's bytes.
// - A range is moved the second time it is seen (the first may be a one-off
//   buffer; the move costs one copy).
// - Every use checks that the range is still that memfd's mapping
//   (/proc/self/map_files/<lo>-<hi>): a buffer freed and allocated anew at the
//   same address is fresh private memory and is registered again, never
//   mistaken for the old one.
// - fork() gets private memory back: an atfork handler copies every
//   registered range onto private pages before the child is made (so the
//   child shares nothing with the parent), after waiting for calls in flight
//   (pin_registrations) to end.
// QCCL_REGISTER=0 turns it off.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <shared_mutex>

#include "transport/shared_mem.h"

namespace qccl {

struct Registration {
  SharedRef ref;        // the memfd; the buffer's first whole page at ref.offset
  uint64_t head = 0;    // bytes of the buffer before its first whole page
  uint64_t mapped = 0;  // bytes of whole pages from there
};

// The registration of the whole pages inside [p, p + n), if any. With
// `register_if_reused`, registers them when this range was seen before (a
// copy of the pages); the first sighting only remembers the range.
// A registration replaces those it overlaps (their pages go back to private
// memory): a caller holding another registration from before must look it up
// again, and generation() says whether any changed.
std::optional<Registration> registered(const void* p, size_t n, bool register_if_reused);
uint64_t generation();

// Whether [p, p + n) is exactly one memfd mapping named like qccl's: what
// every use of a registration checks (/proc/self/map_files), here so the
// tuning can time it.
bool registration_still_holds(const void* p, size_t n);

// Held for the duration of a call that lets peers touch registered memory;
// fork() waits for it.
std::shared_lock<std::shared_mutex> pin_registrations();

// Puts private pages back under every registration (what fork does); for tests.
void unregister_all();

// Registrations alive now (tests).
size_t registration_count();

}  // namespace qccl
