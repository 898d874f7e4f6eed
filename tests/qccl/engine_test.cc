// The engine's message checks, on a pair of in-process communicators joined
// by a socketpair: garbage, wrong sizes and different collectives are
// rejected with an error naming the peer.
#include <gtest/gtest.h>
#include <sys/socket.h>

#include "engine.h"
#include "transport/tcp.h"

namespace qccl {
namespace {

struct FakePair {
  std::unique_ptr<qcclComm> a, b;
  int raw_b = -1;  // b's socket, for writing garbage
  FakePair() {
    int sv[2];
    EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    raw_b = sv[1];
    a = make(0, sv[0], "rank 1 (fake)");
    b = make(1, sv[1], "rank 0 (fake)");
  }
  static std::unique_ptr<qcclComm> make(int rank, int fd, const char* peer_name) {
    auto c = std::make_unique<qcclComm>(8);
    c->rank = rank;
    c->nranks = 2;
    c->timeout_s = 2;
    c->peers.resize(2);
    c->conns.resize(2);
    c->p2p_send_seq.assign(2, 0);
    c->p2p_recv_seq.assign(2, 0);
    c->conns[1 - rank] = make_tcp_conn(1 - rank, peer_name, Fd(fd));
    return c;
  }
};

template <typename F>
std::string error_of(F f) {
  try {
    f();
  } catch (const RemoteError& e) {
    return e.what();
  }
  return "";
}

TEST(Engine, GarbageBytesAreRejected) {
  FakePair p;
  std::string junk(64, '\x7f');
  ASSERT_EQ(::write(p.raw_b, junk.data(), junk.size()), 64);
  char buf[16];
  std::string e = error_of([&] {
    Call call(*p.a, "allreduce", MsgKind::kAllReduce, 16, "ring");
    Xfer x[1] = {Xfer::recv(1, buf, 16)};
    run(call, x);
  });
  EXPECT_NE(e.find("rank 1 (fake) sent bytes that are not a qccl message"), std::string::npos) << e;
}

TEST(Engine, SizeMismatchIsRejected) {
  FakePair p;
  char out[100] = {0}, in[200];
  {
    Call call(*p.b, "allreduce", MsgKind::kAllReduce, 100, "ring");
    Xfer x[1] = {Xfer::send(0, out, 100)};
    run(call, x);
  }
  std::string e = error_of([&] {
    Call call(*p.a, "allreduce", MsgKind::kAllReduce, 200, "ring");
    Xfer x[1] = {Xfer::recv(1, in, 200)};
    run(call, x);
  });
  EXPECT_NE(e.find("sent 100 bytes for allreduce #0 where this rank expected 200"), std::string::npos) << e;
}

TEST(Engine, DifferentCollectivesAreRejected) {
  FakePair p;
  char buf[8] = {0};
  {
    Call call(*p.b, "broadcast", MsgKind::kBroadcast, 8, "tree");
    Xfer x[1] = {Xfer::send(0, buf, 8)};
    run(call, x);
  }
  std::string e = error_of([&] {
    Call call(*p.a, "allreduce", MsgKind::kAllReduce, 8, "ring");
    Xfer x[1] = {Xfer::recv(1, buf, 8)};
    run(call, x);
  });
  EXPECT_NE(e.find("is in broadcast while this rank is in allreduce #0"), std::string::npos) << e;
}

TEST(Engine, OutOfOrderSequenceIsRejected) {
  FakePair p;
  char buf[8] = {0};
  p.b->coll_seq = 5;  // b skipped collectives
  {
    Call call(*p.b, "allreduce", MsgKind::kAllReduce, 8, "ring");
    Xfer x[1] = {Xfer::send(0, buf, 8)};
    run(call, x);
  }
  std::string e = error_of([&] {
    Call call(*p.a, "allreduce", MsgKind::kAllReduce, 8, "ring");
    Xfer x[1] = {Xfer::recv(1, buf, 8)};
    run(call, x);
  });
  EXPECT_NE(e.find("different orders"), std::string::npos) << e;
}

TEST(Engine, ReduceAcrossSplitElementsAndOperandOrder) {
  FakePair p;
  // 3 doubles sent in odd-sized pieces exercise the split-element path.
  double send[3] = {1.5, -2.0, 4.0}, local[3] = {0.5, 0.5, 0.5}, out[3] = {0, 0, 0};
  {
    Call call(*p.b, "allreduce", MsgKind::kAllReduce, 24, "ring");
    Xfer x[1] = {Xfer::send(0, send, 24)};
    run(call, x);
  }
  Call call(*p.a, "allreduce", MsgKind::kAllReduce, 24, "ring");
  call.dtype = qcclFloat64;
  call.op = qcclSum;
  Xfer x[1] = {Xfer::recv_reduce(1, out, local, 24, true)};
  run(call, x);
  finish(call);
  EXPECT_EQ(out[0], 2.0);
  EXPECT_EQ(out[1], -1.5);
  EXPECT_EQ(out[2], 4.5);
  EXPECT_NE(p.a->fr.dump().find("done"), std::string::npos);
}

TEST(Engine, DeadlineNamesThePeerAndMarksTheRecorder) {
  FakePair p;
  char buf[8];
  auto t0 = std::chrono::steady_clock::now();
  try {
    Call call(*p.a, "allreduce", MsgKind::kAllReduce, 8, "ring");
    Xfer x[1] = {Xfer::recv(1, buf, 8)};
    run(call, x);
    FAIL() << "no timeout";
  } catch (const qk::TimeoutError& e) {
    EXPECT_NE(std::string(e.what()).find("receiving from rank 1"), std::string::npos) << e.what();
  }
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_GE(s, 1.9);
  EXPECT_LT(s, 4.5);
  EXPECT_NE(p.a->fr.dump().find("FAILED"), std::string::npos) << p.a->fr.dump();
}

}  // namespace
}  // namespace qccl
