// Bootstrap: how N processes that share only a qcclUniqueId find each other.
//
// The unique id carries the root's address and a random 128-bit job token.
// qcclGetUniqueId starts the root (a thread in the calling process). Each
// rank connects to the root, presents the token with its rank, nranks and the
// address it listens on for peers; when all have joined the root sends every
// rank the table of all ranks and exits. A connection without the right
// token, or with bytes that are not a well-formed hello, is refused and the
// root keeps waiting for the real ranks. Every wait has a deadline.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "qccl.h"
#include "bootstrap/socket.h"

namespace qccl {

using Token = std::array<uint8_t, 16>;

// What a rank tells the others about itself.
struct PeerInfo {
  uint32_t ip = 0;      // network order
  uint16_t port = 0;    // the rank's peer listener
  uint16_t pad = 0;
  int32_t pid = 0;
  uint64_t host_hash = 0;  // equal hash: same host (shared memory possible)
  char host[64] = {0};
};

struct UniqueIdData {
  SockAddr root;
  Token token{};
};

UniqueIdData decode_unique_id(const qcclUniqueId& id);
qcclUniqueId encode_unique_id(const UniqueIdData& d);

// A fresh token from the kernel's random source.
Token random_token();
// Hash of the host name and boot id: ranks with equal hashes share a kernel.
uint64_t host_hash();

// Starts the root listening on `addr` (port 0: any) in a detached thread that
// gives up after timeout_s. Returns the address it listens on.
SockAddr start_root(SockAddr addr, const Token& token, double timeout_s);

// Builds the id for qcclGetUniqueId: from QCCL_COMM_ID (no root started; rank
// 0 starts it in qcclCommInitRank) or a new root on this host.
qcclUniqueId make_unique_id();
// True when the id names QCCL_COMM_ID's address, so rank 0 must start the root.
bool id_needs_root(const qcclUniqueId& id);

// Joins the job: returns every rank's PeerInfo, indexed by rank.
std::vector<PeerInfo> join(const UniqueIdData& id, int rank, int nranks, const PeerInfo& me,
                           const Deadline& dl);

}  // namespace qccl
