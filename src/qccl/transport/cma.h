// Single-copy transfers between processes of one host (Linux cross-memory
// attach: process_vm_readv / process_vm_writev). A shared-memory connection
// whose set-up found that both sides may read and write each other (conn.h,
// Conn::cma()) lets the engine read a peer's send buffer in place of passing
// bytes through the ring, and the direct all-reduce (algo/direct.h) read and
// write the peers' own buffers, malloc'd or not.
//
//   cma_read(conn, tmp, peer_addr, n);    // n bytes of the peer's memory -> tmp
//   cma_write(conn, peer_addr, acc, n);   // acc -> the peer's memory
//
// The kernel pins each page of the peer's range as it copies: on 4 KiB pages
// that costs about as much as the copy (4.5 GB/s against 15 with 2 MiB pages
// on the 2-core EPYC VM), so advise_huge_pages() asks for transparent huge
// pages on the large buffers the ranks hand each other.
#pragma once

#include <cstddef>
#include <cstdint>

#include "transport/conn.h"

namespace qccl {

// Copy n bytes between our `local` and the peer's address `remote`. Throw
// RemoteError naming the peer (its reason when it closed the connection)
// when the kernel refuses or the peer is gone.
void cma_read(Conn& c, void* local, uint64_t remote, size_t n);
void cma_write(Conn& c, uint64_t remote, const void* local, size_t n);

// Whether process `pid` lets us read and write it: reads the 8 bytes at
// `addr` and writes the same value back (`expect` is what they must hold).
bool cma_probe(int pid, uint64_t addr, uint64_t expect);

// Transparent huge pages for a buffer that peers will copy from or into:
// the first time a range is seen, madvise(MADV_HUGEPAGE) on its 2 MiB-aligned
// interior (pages faulted in later come huge); the second time, a buffer the
// program reuses, MADV_COLLAPSE turns the pages already there into huge ones
// (one copy of the range). A cache keyed by address range (like NCCL's buffer
// registration) makes later calls cost a lookup. A hint only: contents never
// change, and where the kernel has no THP or refuses, nothing happens.
// QCCL_CMA_HUGE_PAGES=0 turns it off.
void advise_huge_pages(const void* p, size_t n);

}  // namespace qccl
