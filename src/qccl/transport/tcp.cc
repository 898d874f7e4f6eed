#include "qccl/transport/tcp.h"

#include <poll.h>
#include <sys/socket.h>

#include <cerrno>

namespace qccl {

namespace {

constexpr size_t kStageBytes = 256 << 10;

class TcpConn final : public Conn {
 public:
  TcpConn(int peer, std::string name, Fd fd)
      : Conn(peer, std::move(name)), fd_(std::move(fd)), stage_(kStageBytes) {
    set_nonblocking(fd_.get());
  }
  const char* kind() const override { return "tcp"; }

  size_t try_send(const void* p, size_t n) override {
    if (n == 0) return 0;
    ssize_t k = ::send(fd_.get(), p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (k >= 0) return static_cast<size_t>(k);
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return 0;
    QCCL_REMOTE_ERROR("sending to ", peer_name(), " over tcp failed: ",
                      qk::detail::errno_string(errno), " (the peer died or left)");
  }

  size_t peek(const void** p) override {
    if (rd_ == wr_) {
      rd_ = wr_ = 0;
      ssize_t k = raw_recv(stage_.data(), stage_.size());
      wr_ = static_cast<size_t>(k);
    }
    *p = stage_.data() + rd_;
    return wr_ - rd_;
  }

  void consume(size_t n) override { rd_ += n; }

  size_t try_recv(void* p, size_t n) override {
    if (rd_ != wr_) return Conn::try_recv(p, n);
    if (n == 0) return 0;
    return static_cast<size_t>(raw_recv(p, n));
  }

  int poll_fd() const override { return fd_.get(); }

  void check_alive() override {
    pollfd pf{fd_.get(), 0, 0};
    if (::poll(&pf, 1, 0) > 0 && (pf.revents & (POLLERR | POLLHUP | POLLNVAL)))
      QCCL_REMOTE_ERROR(peer_name(), " closed its tcp connection (it failed or aborted; check its log)");
  }

  // A byte stream cannot carry the reason safely mid-message; the peer sees EOF.
  void close(const std::string&) override { ::shutdown(fd_.get(), SHUT_RDWR); }

 private:
  // Returns bytes read, 0 when nothing is ready; throws on EOF or error.
  ssize_t raw_recv(void* p, size_t n) {
    ssize_t k = ::recv(fd_.get(), p, n, MSG_DONTWAIT);
    if (k > 0) return k;
    if (k == 0)
      QCCL_REMOTE_ERROR(peer_name(), " closed its tcp connection (it failed or aborted; check its log)");
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return 0;
    QCCL_REMOTE_ERROR("receiving from ", peer_name(), " over tcp failed: ",
                      qk::detail::errno_string(errno));
  }

  Fd fd_;
  std::vector<char> stage_;
  size_t rd_ = 0, wr_ = 0;
};

}  // namespace

std::unique_ptr<Conn> make_tcp_conn(int peer, std::string peer_name, Fd fd) {
  return std::make_unique<TcpConn>(peer, std::move(peer_name), std::move(fd));
}

}  // namespace qccl
