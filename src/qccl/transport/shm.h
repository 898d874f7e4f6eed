// Shared-memory transport between two processes on one host: a segment holds
// two single-producer single-consumer byte rings (one per direction). The
// producer copies in slices and publishes a head counter; the consumer reads
// in place (reductions read straight from the ring) and publishes a tail
// counter. The TCP socket that set the segment up stays open as a liveness
// channel: a peer that dies closes it, which the waiting side notices.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "bootstrap/socket.h"
#include "transport/conn.h"

namespace qccl {

// The lower rank of a pair creates the segment and sends its name over `ctl`;
// the higher rank maps it and acknowledges; the creator then unlinks it so
// nothing is left in /dev/shm even if a rank is killed later. With want_cma
// both sides probe process_vm_readv on each other and enable single-copy
// transfers when both succeed.
// Bytes in each ring (QCCL_SHM_RING_BYTES).
size_t shm_ring_bytes();

// The mailbox beside each ring for small messages (shm.cc, MailBox): lines
// of kShmLine bytes, a message's tag in the first 8 bytes of its first line,
// shm_box_tag(message number, bytes). Here for the tests.
inline constexpr size_t kShmLine = 64, kShmBoxLines = 64, kShmBoxMaxBytes = 8 * kShmLine - 8;
inline constexpr uint64_t shm_box_tag(uint64_t number, uint64_t bytes) { return (number + 1) << 16 | bytes; }

std::unique_ptr<Conn> make_shm_conn(int my_rank, int peer, std::string peer_name, Fd ctl,
                                    int peer_pid, bool want_cma, const Deadline& dl);

}  // namespace qccl
