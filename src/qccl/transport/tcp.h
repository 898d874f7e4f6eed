// TCP transport: one or more non-blocking sockets per peer (QCCL_NSOCKS).
// The byte stream to a peer is striped over its sockets in fixed-size runs,
// round robin by stream offset, so both sides know which socket carries which
// bytes without any framing; a large message keeps every socket busy, a
// small one travels on one. Received bytes are staged so reductions can read
// them in place; large plain receives go straight to the user's buffer.
#pragma once

#include <memory>
#include <vector>

#include "bootstrap/socket.h"
#include "transport/conn.h"

namespace qccl {

// Bytes sent on one socket before the stream moves on to the next (not
// measured against other run lengths).
constexpr size_t kTcpStripeBytes = 128 << 10;
constexpr int kMaxTcpSockets = 16;

// QCCL_NSOCKS: sockets per TCP peer, 1..kMaxTcpSockets (read when a communicator is created).
int tcp_nsocks();

// `fds` are the peer's sockets in the same order on both sides (socket 0 is
// the one the connection was set up on).
std::unique_ptr<Conn> make_tcp_conn(int peer, std::string peer_name, std::vector<Fd> fds);
inline std::unique_ptr<Conn> make_tcp_conn(int peer, std::string peer_name, Fd fd) {
  std::vector<Fd> fds;
  fds.push_back(std::move(fd));
  return make_tcp_conn(peer, std::move(peer_name), std::move(fds));
}

}  // namespace qccl
