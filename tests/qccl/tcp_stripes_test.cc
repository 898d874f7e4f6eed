// TCP striping (QCCL_NSOCKS): a peer's byte stream is laid out over its
// sockets in kTcpStripeBytes runs, and messages of every size arrive intact
// whatever the socket count, on in-process communicators joined by socketpairs.
#include <gtest/gtest.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#include <thread>
#include <vector>

#include "engine.h"
#include "transport/tcp.h"

namespace qccl {
namespace {

struct StripedPair {
  std::unique_ptr<qcclComm> a, b;
  std::vector<int> raw_a;  // a's ends, to inspect what each socket carried
  explicit StripedPair(int nsocks) {
    std::vector<Fd> fa, fb;
    for (int i = 0; i < nsocks; ++i) {
      int sv[2];
      EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
      int big = 1 << 20;
      ::setsockopt(sv[1], SOL_SOCKET, SO_SNDBUF, &big, sizeof big);
      ::setsockopt(sv[0], SOL_SOCKET, SO_RCVBUF, &big, sizeof big);
      raw_a.push_back(sv[0]);
      fa.emplace_back(sv[0]);
      fb.emplace_back(sv[1]);
    }
    a = make(0, std::move(fa));
    b = make(1, std::move(fb));
  }
  static std::unique_ptr<qcclComm> make(int rank, std::vector<Fd> fds) {
    auto c = std::make_unique<qcclComm>(8);
    c->rank = rank;
    c->nranks = 2;
    c->timeout_s = 10;
    c->peers.resize(2);
    c->conns.resize(2);
    c->p2p_send_seq.assign(2, 0);
    c->p2p_recv_seq.assign(2, 0);
    c->conns[1 - rank] = make_tcp_conn(1 - rank, "rank " + std::to_string(1 - rank), std::move(fds));
    return c;
  }
};

void send_p2p(qcclComm& c, const void* p, size_t n) {
  Call call(c, "send", MsgKind::kP2P, n, "p2p", 0);
  Xfer x[1] = {Xfer::send(1 - c.rank, p, n)};
  x[0].seq = c.p2p_send_seq[1 - c.rank]++;
  run(call, x);
  finish(call);
}

TEST(TcpStripes, StreamIsLaidOutRoundRobinOverTheSockets) {
  StripedPair p(4);
  ASSERT_EQ(p.b->conns[0]->nsocks(), 4);
  // A 16-byte header plus this payload fill exactly three stripes.
  std::vector<char> msg(3 * kTcpStripeBytes - sizeof(MsgHeader), 'x');
  send_p2p(*p.b, msg.data(), msg.size());
  for (int s = 0; s < 4; ++s) {
    int queued = -1;
    ASSERT_EQ(::ioctl(p.raw_a[s], FIONREAD, &queued), 0);
    EXPECT_EQ(queued, s < 3 ? static_cast<int>(kTcpStripeBytes) : 0) << "socket " << s;
  }
}

TEST(TcpStripes, MessagesArriveIntactWithOneTwoFourAndSixteenSockets) {
  const size_t sizes[] = {0, 5, kTcpStripeBytes - 16, kTcpStripeBytes + 1, 3 << 20, 1000003};
  for (int ns : {1, 2, 4, 16}) {
    StripedPair p(ns);
    std::string sender_error;
    std::jthread sender([&] {
      try {
        for (size_t n : sizes) {
          std::vector<uint8_t> buf(n);
          for (size_t i = 0; i < n; ++i) buf[i] = static_cast<uint8_t>(i * 131 + n);
          send_p2p(*p.b, buf.data(), n);
        }
        // A reduction target too: doubles summed with a local operand.
        std::vector<double> d(200001);
        for (size_t i = 0; i < d.size(); ++i) d[i] = static_cast<double>(i);
        Call call(*p.b, "allreduce", MsgKind::kAllReduce, d.size() * 8, "ring");
        Xfer x[1] = {Xfer::send(0, d.data(), d.size() * 8)};
        run(call, x);
        finish(call);
      } catch (const std::exception& e) {
        sender_error = e.what();
      }
    });
    for (size_t n : sizes) {
      std::vector<uint8_t> got(n, 0);
      Call call(*p.a, "recv", MsgKind::kP2P, n, "p2p", 1);
      Xfer x[1] = {Xfer::recv(1, got.data(), n)};
      x[0].seq = p.a->p2p_recv_seq[1]++;
      run(call, x);
      finish(call);
      size_t bad = 0;
      for (size_t i = 0; i < n; ++i) bad += got[i] != static_cast<uint8_t>(i * 131 + n);
      EXPECT_EQ(bad, 0u) << ns << " sockets, " << n << " bytes";
    }
    std::vector<double> local(200001, 0.5), out(200001, 0);
    Call call(*p.a, "allreduce", MsgKind::kAllReduce, local.size() * 8, "ring");
    call.dtype = qcclFloat64;
    call.op = qcclSum;
    Xfer x[1] = {Xfer::recv_reduce(1, out.data(), local.data(), out.size() * 8, true)};
    run(call, x);
    finish(call);
    sender.join();
    EXPECT_EQ(sender_error, "");
    size_t bad = 0;
    for (size_t i = 0; i < out.size(); ++i) bad += out[i] != static_cast<double>(i) + 0.5;
    EXPECT_EQ(bad, 0u) << ns << " sockets, reduction";
  }
}

}  // namespace
}  // namespace qccl
