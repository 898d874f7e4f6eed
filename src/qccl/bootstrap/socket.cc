#include "bootstrap/socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>

#include "core/debug.h"
#include "qk/base/env.h"

namespace qccl {

namespace {
QK_ENV_STRING(env_ifname, "QCCL_SOCKET_IFNAME", "",
              "Network interface (name or prefix, or an IPv4 address) qccl listens on; empty: first "
              "non-loopback.");
}  // namespace

Fd& Fd::operator=(Fd&& o) noexcept {
  if (this != &o) reset(o.release());
  return *this;
}
void Fd::reset(int fd) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
}

std::string SockAddr::str() const {
  char buf[INET_ADDRSTRLEN] = {0};
  in_addr a{};
  a.s_addr = ip;
  ::inet_ntop(AF_INET, &a, buf, sizeof buf);
  return std::string(buf) + ":" + std::to_string(port);
}

sockaddr_in SockAddr::to_sockaddr() const {
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = ip;
  sa.sin_port = htons(port);
  return sa;
}

SockAddr SockAddr::parse(const std::string& s, const char* what) {
  auto colon = s.rfind(':');
  QK_CHECK(colon != std::string::npos && colon > 0 && colon + 1 < s.size(), what,
           ": expected host:port, got '", s, "'");
  std::string host = s.substr(0, colon), port_s = s.substr(colon + 1);
  char* end = nullptr;
  long port = std::strtol(port_s.c_str(), &end, 10);
  QK_CHECK(*end == '\0' && port > 0 && port < 65536, what, ": expected a port in 1..65535, got '",
           port_s, "' in '", s, "'");
  SockAddr a;
  a.port = static_cast<uint16_t>(port);
  in_addr ia{};
  if (::inet_pton(AF_INET, host.c_str(), &ia) == 1) {
    a.ip = ia.s_addr;
    return a;
  }
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  int rc = ::getaddrinfo(host.c_str(), nullptr, &hints, &res);
  QK_CHECK(rc == 0 && res, what, ": cannot resolve host '", host, "': ", ::gai_strerror(rc),
           " (qccl uses IPv4 addresses)");
  a.ip = reinterpret_cast<sockaddr_in*>(res->ai_addr)->sin_addr.s_addr;
  ::freeaddrinfo(res);
  return a;
}

SockAddr local_address(std::string* ifname_out) {
  // Read when used, so a process can move to another network namespace first.
  std::string want = env_ifname.reload();
  in_addr literal{};
  if (!want.empty() && ::inet_pton(AF_INET, want.c_str(), &literal) == 1) {
    // An address rather than an interface: 127.0.0.2 and friends need no set-up.
    if (ifname_out) *ifname_out = want;
    SockAddr a;
    a.ip = literal.s_addr;
    return a;
  }
  ifaddrs* ifs = nullptr;
  QK_SYSCALL(::getifaddrs(&ifs));
  SockAddr found;
  std::string found_name;
  bool have = false;
  for (ifaddrs* i = ifs; i && !have; i = i->ifa_next) {
    if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET || !(i->ifa_flags & IFF_UP)) continue;
    std::string name = i->ifa_name;
    bool loop = (i->ifa_flags & IFF_LOOPBACK) != 0;
    bool match = want.empty() ? !loop : name.rfind(want, 0) == 0;
    if (!match) continue;
    found.ip = reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr.s_addr;
    found_name = name;
    have = true;
  }
  ::freeifaddrs(ifs);
  if (!have) {
    QK_CHECK(want.empty(), "QCCL_SOCKET_IFNAME=", want,
             " matches no interface that is up with an IPv4 address; see `ip -4 addr`");
    found.ip = htonl(INADDR_LOOPBACK);
    found_name = "lo";
  }
  if (ifname_out) *ifname_out = found_name;
  return found;
}

void set_nonblocking(int fd) {
  int fl = QK_SYSCALL(::fcntl(fd, F_GETFL));
  QK_SYSCALL(::fcntl(fd, F_SETFL, fl | O_NONBLOCK));
}

void set_nodelay(int fd) {
  int one = 1;
  QK_SYSCALL(::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one));
}

Fd listen_on(SockAddr addr, SockAddr* bound, int backlog) {
  Fd fd(QK_SYSCALL(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)));
  int one = 1;
  QK_SYSCALL(::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one));
  sockaddr_in sa = addr.to_sockaddr();
  QK_SYSCALL(::bind(fd.get(), reinterpret_cast<sockaddr*>(&sa), sizeof sa), " (binding ",
             addr.str(), ")");
  QK_SYSCALL(::listen(fd.get(), backlog));
  socklen_t len = sizeof sa;
  QK_SYSCALL(::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&sa), &len));
  if (bound) {
    bound->ip = sa.sin_addr.s_addr;
    bound->port = ntohs(sa.sin_port);
  }
  set_nonblocking(fd.get());
  return fd;
}

Fd connect_to(const SockAddr& addr, const Deadline& dl, const std::string& who) {
  int backoff_ms = 1;
  while (true) {
    Fd fd(QK_SYSCALL(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)));
    set_nonblocking(fd.get());
    sockaddr_in sa = addr.to_sockaddr();
    int rc = ::connect(fd.get(), reinterpret_cast<sockaddr*>(&sa), sizeof sa);
    int err = rc == 0 ? 0 : errno;
    if (err == EINPROGRESS || err == EINTR) {
      pollfd p{fd.get(), POLLOUT, 0};
      int n;
      do { n = ::poll(&p, 1, dl.poll_ms(1000)); } while (n < 0 && errno == EINTR);
      if (n > 0) {
        socklen_t len = sizeof err;
        ::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
      } else {
        err = ETIMEDOUT;
      }
    }
    if (err == 0) {
      set_nodelay(fd.get());
      return fd;
    }
    bool retry = err == ECONNREFUSED || err == ETIMEDOUT || err == ECONNRESET || err == EAGAIN;
    if (!retry) QK_THROW(qk::IoError, "connecting to ", who, " at ", addr.str(), ": ", qk::detail::errno_string(err));
    if (dl.expired())
      QK_THROW(qk::TimeoutError, "could not connect to ", who, " at ", addr.str(), " within ",
               dl.total_seconds(), " s (last error: ", qk::detail::errno_string(err),
               "); is it running and reachable? (QCCL_TIMEOUT_S sets the deadline)");
    std::this_thread::sleep_for(std::chrono::milliseconds(backoff_ms));
    backoff_ms = std::min(backoff_ms * 2, 100);
  }
}

Fd accept_until(int listen_fd, const Deadline& dl) {
  while (!dl.expired()) {
    pollfd p{listen_fd, POLLIN, 0};
    int n = ::poll(&p, 1, dl.poll_ms(100));
    if (n <= 0) continue;
    int fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd >= 0) {
      set_nodelay(fd);
      return Fd(fd);
    }
    if (errno != EAGAIN && errno != EINTR && errno != ECONNABORTED)
      QK_THROW(qk::IoError, "accept failed: ", qk::detail::errno_string(errno));
  }
  return Fd();
}

void send_all(int fd, const void* p, size_t n, const Deadline& dl, const std::string& who) {
  const char* c = static_cast<const char*>(p);
  while (n > 0) {
    ssize_t k = ::send(fd, c, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (k > 0) {
      c += k;
      n -= static_cast<size_t>(k);
      continue;
    }
    if (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
      QCCL_REMOTE_ERROR("sending to ", who, " failed: ", qk::detail::errno_string(errno),
                        " (the peer closed or died)");
    if (dl.expired())
      QK_THROW(qk::TimeoutError, "sending to ", who, " timed out after ", dl.total_seconds(),
               " s with ", n, " bytes left");
    pollfd pf{fd, POLLOUT, 0};
    ::poll(&pf, 1, dl.poll_ms(100));
  }
}

void recv_all(int fd, void* p, size_t n, const Deadline& dl, const std::string& who) {
  char* c = static_cast<char*>(p);
  size_t want = n;
  while (n > 0) {
    ssize_t k = ::recv(fd, c, n, MSG_DONTWAIT);
    if (k > 0) {
      c += k;
      n -= static_cast<size_t>(k);
      continue;
    }
    if (k == 0)
      QCCL_REMOTE_ERROR(who, " closed the connection after ", want - n, " of ", want,
                        " expected bytes (it failed or refused us; check its log)");
    if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
      QCCL_REMOTE_ERROR("receiving from ", who, " failed: ", qk::detail::errno_string(errno));
    if (dl.expired())
      QK_THROW(qk::TimeoutError, "waiting for ", who, " timed out after ", dl.total_seconds(),
               " s (", want - n, " of ", want, " bytes arrived)");
    pollfd pf{fd, POLLIN, 0};
    ::poll(&pf, 1, dl.poll_ms(100));
  }
}

}  // namespace qccl
