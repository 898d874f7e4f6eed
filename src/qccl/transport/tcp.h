// TCP transport: one non-blocking socket per peer; received bytes are staged
// so reductions can read them in place, large plain receives go straight to
// the user's buffer.
#pragma once

#include <memory>
#include <vector>

#include "qccl/bootstrap/socket.h"
#include "qccl/transport/conn.h"

namespace qccl {

std::unique_ptr<Conn> make_tcp_conn(int peer, std::string peer_name, Fd fd);

}  // namespace qccl
