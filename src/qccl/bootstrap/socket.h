// TCP helpers shared by the bootstrap and the TCP transport: IPv4 addresses,
// listening, connecting with retries, and whole-buffer send/recv, every one of
// them bounded by a Deadline and retrying EINTR.
#pragma once

#include <netinet/in.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/errors.h"

namespace qccl {

// Owns a file descriptor.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd&& o) noexcept : fd_(o.release()) {}
  Fd& operator=(Fd&& o) noexcept;
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { reset(); }
  int get() const { return fd_; }
  int release() { int f = fd_; fd_ = -1; return f; }
  void reset(int fd = -1);
  explicit operator bool() const { return fd_ >= 0; }

 private:
  int fd_ = -1;
};

struct SockAddr {
  uint32_t ip = 0;    // network byte order
  uint16_t port = 0;  // host byte order
  std::string str() const;  // "192.0.2.2:41234"
  sockaddr_in to_sockaddr() const;
  // "host:port" or "ip:port"; throws ValueError naming `what` when it does not parse.
  static SockAddr parse(const std::string& s, const char* what);
};

// The address this process tells peers to use: QCCL_SOCKET_IFNAME (interface
// name or prefix) or the first non-loopback IPv4 interface, else 127.0.0.1.
// Sets *ifname to the interface chosen.
SockAddr local_address(std::string* ifname = nullptr);

// Listens on addr (port 0: any free port); returns the socket and the bound address.
Fd listen_on(SockAddr addr, SockAddr* bound, int backlog = 128);
// Connects, retrying refused connections until the deadline (the peer may not
// be listening yet). Throws TimeoutError / IoError naming `who`.
Fd connect_to(const SockAddr& addr, const Deadline& dl, const std::string& who);
// Accepts one connection; returns an empty Fd when the deadline passes.
Fd accept_until(int listen_fd, const Deadline& dl);

void set_nonblocking(int fd);
void set_nodelay(int fd);
// Whole-buffer transfers on a (non-blocking) socket. `who` names the other
// side in errors ("root 10.0.0.1:5000", "rank 3"). An orderly close by the
// peer raises RemoteError.
void send_all(int fd, const void* p, size_t n, const Deadline& dl, const std::string& who);
void recv_all(int fd, void* p, size_t n, const Deadline& dl, const std::string& who);

}  // namespace qccl
