#include "transport/tcp.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <algorithm>
#include <cerrno>

#include "qk/base/env.h"

namespace qccl {

namespace {

// 2 sockets: not measured against other counts (tests cover 1, 2 and 4).
QK_ENV_INT(env_nsocks, "QCCL_NSOCKS", 2,
           "Sockets per TCP peer (1-16); large messages are striped over them.");

// Staging buffer of in-place reductions over TCP; not measured.
constexpr size_t kStageBytes = 256 << 10;

class TcpConn final : public Conn {
 public:
  TcpConn(int peer, std::string name, std::vector<Fd> fds)
      : Conn(peer, std::move(name)), fds_(std::move(fds)), stage_(kStageBytes) {
    for (Fd& f : fds_) set_nonblocking(f.get());
  }
  const char* kind() const override { return "tcp"; }
  int nsocks() const override { return static_cast<int>(fds_.size()); }

  // Sends on the socket that owns the current stripe, moving on to the next
  // socket while they take bytes, so one call can fill several sockets.
  size_t try_send(const void* p, size_t n) override {
    size_t sent = 0;
    while (sent < n) {
      size_t room = kTcpStripeBytes - tx_pos_ % kTcpStripeBytes;
      size_t want = std::min(n - sent, room);
      ssize_t k = ::send(fd_at(tx_pos_), static_cast<const char*>(p) + sent, want,
                         MSG_NOSIGNAL | MSG_DONTWAIT);
      if (k < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) break;
        QCCL_REMOTE_ERROR("sending to ", peer_name(), " over tcp failed: ",
                          qk::detail::errno_string(errno), " (the peer died or left)");
      }
      sent += static_cast<size_t>(k);
      tx_pos_ += static_cast<uint64_t>(k);
      if (static_cast<size_t>(k) < want) break;  // that socket is full
    }
    return sent;
  }

  // Header and data in one sendmsg (one system call, one segment with
  // TCP_NODELAY) when both fall in the current stripe.
  size_t try_send2(const void* a, size_t na, const void* b, size_t nb) override {
    size_t room = kTcpStripeBytes - tx_pos_ % kTcpStripeBytes;
    if (nb == 0 || na + nb > room) return Conn::try_send2(a, na, b, nb);
    iovec iov[2] = {{const_cast<void*>(a), na}, {const_cast<void*>(b), nb}};
    msghdr mh{};
    mh.msg_iov = iov;
    mh.msg_iovlen = 2;
    ssize_t k = ::sendmsg(fd_at(tx_pos_), &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (k < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return 0;
      QCCL_REMOTE_ERROR("sending to ", peer_name(), " over tcp failed: ", qk::detail::errno_string(errno),
                        " (the peer died or left)");
    }
    tx_pos_ += static_cast<uint64_t>(k);
    return static_cast<size_t>(k);
  }

  size_t peek(const void** p) override {
    if (rd_ == wr_) {
      rd_ = wr_ = 0;
      wr_ = raw_recv(stage_.data(), stage_.size());
    }
    *p = stage_.data() + rd_;
    return wr_ - rd_;
  }

  void consume(size_t n) override { rd_ += n; }

  size_t try_recv(void* p, size_t n) override {
    if (rd_ != wr_) return Conn::try_recv(p, n);
    return raw_recv(p, n);
  }

  int poll_fd(bool sending) const override { return fd_at(sending ? tx_pos_ : rx_pos_); }

  void check_alive() override {
    for (Fd& f : fds_) {
      pollfd pf{f.get(), 0, 0};
      if (::poll(&pf, 1, 0) > 0 && (pf.revents & (POLLERR | POLLHUP | POLLNVAL)))
        QCCL_REMOTE_ERROR(peer_name(), " closed its tcp connection (it failed or aborted; check its log)");
    }
  }

  // A byte stream cannot carry the reason safely mid-message; the peer sees EOF.
  void close(const std::string&) override {
    for (Fd& f : fds_) ::shutdown(f.get(), SHUT_RDWR);
  }

 private:
  int fd_at(uint64_t pos) const { return fds_[(pos / kTcpStripeBytes) % fds_.size()].get(); }

  // Reads up to n stream bytes, crossing into the next stripe's socket while
  // bytes keep coming; returns 0 when nothing is ready, throws on EOF or error.
  size_t raw_recv(void* p, size_t n) {
    size_t got = 0;
    while (got < n) {
      size_t room = kTcpStripeBytes - rx_pos_ % kTcpStripeBytes;
      size_t want = std::min(n - got, room);
      ssize_t k = ::recv(fd_at(rx_pos_), static_cast<char*>(p) + got, want, MSG_DONTWAIT);
      if (k == 0)
        QCCL_REMOTE_ERROR(peer_name(), " closed its tcp connection (it failed or aborted; check its log)");
      if (k < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) break;
        QCCL_REMOTE_ERROR("receiving from ", peer_name(), " over tcp failed: ",
                          qk::detail::errno_string(errno));
      }
      got += static_cast<size_t>(k);
      rx_pos_ += static_cast<uint64_t>(k);
      if (static_cast<size_t>(k) < want) break;
    }
    return got;
  }

  std::vector<Fd> fds_;
  uint64_t tx_pos_ = 0, rx_pos_ = 0;  // stream offsets: which socket is next
  std::vector<char> stage_;
  size_t rd_ = 0, wr_ = 0;
};

}  // namespace

int tcp_nsocks() {
  int64_t v = env_nsocks.reload();
  QK_CHECK(v >= 1 && v <= kMaxTcpSockets, "QCCL_NSOCKS: expected 1..", kMaxTcpSockets, ", got ", v);
  return static_cast<int>(v);
}

std::unique_ptr<Conn> make_tcp_conn(int peer, std::string peer_name, std::vector<Fd> fds) {
  QK_CHECK(!fds.empty() && fds.size() <= kMaxTcpSockets, "a tcp connection needs 1..",
           kMaxTcpSockets, " sockets, got ", fds.size());
  return std::make_unique<TcpConn>(peer, std::move(peer_name), std::move(fds));
}

}  // namespace qccl
