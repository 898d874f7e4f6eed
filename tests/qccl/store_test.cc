// The rendezvous key-value store and communicator init through it.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>

#include "bootstrap/store.h"
#include "qccl/ranks.h"
#include "qk/base/error.h"
#include "qk/qccl/store.h"

namespace {

using qk::qccl::Store;
using qk::qccl::StoreServer;

const char* kToken = "0123456789abcdef0123456789abcdef";

TEST(Store, SetGetAddCheckDelete) {
  StoreServer server(0, kToken);
  Store s("127.0.0.1", server.port(), kToken, 5);
  EXPECT_FALSE(s.check({"a"}));
  EXPECT_FALSE(s.try_get("a").has_value());
  s.set("a", std::string("x\0y", 3));  // values are bytes
  EXPECT_EQ(s.get("a"), std::string("x\0y", 3));
  EXPECT_TRUE(s.check({"a"}));
  EXPECT_EQ(s.add("n", 5), 5);
  EXPECT_EQ(s.add("n", -2), 3);
  EXPECT_EQ(s.get("n"), "3");
  EXPECT_TRUE(s.remove("a"));
  EXPECT_FALSE(s.remove("a"));
  EXPECT_FALSE(s.check({"a", "n"}));
}

TEST(Store, ConcurrentClientsAddAndMeet) {
  StoreServer server(0, kToken);
  constexpr int kClients = 8, kAdds = 50;
  std::vector<std::thread> ts;
  std::atomic<int> failures{0};
  for (int i = 0; i < kClients; ++i)
    ts.emplace_back([&, i] {
      try {
        Store s("127.0.0.1", server.port(), kToken, 10);
        for (int k = 0; k < kAdds; ++k) s.add("counter", 1);
        s.set("client/" + std::to_string(i), "here");
        std::vector<std::string> all;
        for (int j = 0; j < kClients; ++j) all.push_back("client/" + std::to_string(j));
        s.wait(all);  // every client waits for every other: a barrier
      } catch (const std::exception& e) {
        ADD_FAILURE() << "client " << i << ": " << e.what();
        ++failures;
      }
    });
  for (auto& t : ts) t.join();
  EXPECT_EQ(failures.load(), 0);
  Store s("127.0.0.1", server.port(), kToken, 5);
  EXPECT_EQ(s.get("counter"), std::to_string(kClients * kAdds));
}

TEST(Store, GetWaitsUntilAnotherClientSets) {
  StoreServer server(0, kToken);
  std::thread setter([&] {
    Store s("127.0.0.1", server.port(), kToken, 5);
    std::this_thread::sleep_for(std::chrono::milliseconds(150));
    s.set("late", "value");
  });
  Store s("127.0.0.1", server.port(), kToken, 5);
  EXPECT_EQ(s.get("late"), "value");
  setter.join();
}

TEST(Store, WaitTimesOutNamingTheMissingKey) {
  StoreServer server(0, kToken);
  Store s("127.0.0.1", server.port(), kToken, 5);
  s.set("present", "1");
  try {
    s.wait({"present", "absent/7"}, 0.2);
    FAIL() << "wait returned without the key";
  } catch (const qk::TimeoutError& e) {
    EXPECT_NE(std::string(e.what()).find("missing keys: absent/7"), std::string::npos) << e.what();
    EXPECT_EQ(qk::qccl::missing_keys_of(e.message()), std::vector<std::string>{"absent/7"});
  }
  // The connection is still in step after a timed-out wait.
  EXPECT_EQ(s.get("present"), "1");
  EXPECT_THROW(s.get("never", 0.1), qk::TimeoutError);
}

TEST(Store, WrongTokenIsRefusedAndOthersGoOn) {
  StoreServer server(0, kToken);
  Store good("127.0.0.1", server.port(), kToken, 5);
  try {
    Store bad("127.0.0.1", server.port(), "not-the-token", 5);
    FAIL() << "a client with the wrong token was accepted";
  } catch (const qk::IoError& e) {
    EXPECT_NE(std::string(e.what()).find("wrong job token"), std::string::npos) << e.what();
  }
  EXPECT_EQ(server.refused(), 1);
  good.set("k", "v");
  EXPECT_EQ(good.get("k"), "v");
}

// Raw bytes to the server, as a stranger or a broken client would send them.
int raw_connect(uint16_t port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(port);
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// True when the server closed the connection (read returns 0 after any reply).
bool closed_by_server(int fd) {
  timeval tv{5, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  char buf[4096];
  while (true) {
    ssize_t k = ::read(fd, buf, sizeof buf);
    if (k == 0) return true;
    if (k < 0) return errno == ECONNRESET;
  }
}

TEST(Store, GarbageBytesAreRejectedAndTheStoreGoesOn) {
  StoreServer server(0, kToken);
  Store good("127.0.0.1", server.port(), kToken, 5);
  good.set("before", "1");
  namespace w = qk::qccl::store_wire;

  // Random bytes instead of a hello.
  int fd = raw_connect(server.port());
  ASSERT_GE(fd, 0);
  std::string junk = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
  ASSERT_EQ(::write(fd, junk.data(), junk.size()), ssize_t(junk.size()));
  EXPECT_TRUE(closed_by_server(fd));
  ::close(fd);

  // A proper hello, then a frame that claims 4 GiB of arguments.
  fd = raw_connect(server.port());
  std::string hello = w::encode(w::kHello, {kToken});
  ASSERT_EQ(::write(fd, hello.data(), hello.size()), ssize_t(hello.size()));
  std::string huge = w::encode(w::kSet, {"k", "v"});
  uint32_t lie = 0xffffffffu;
  std::memcpy(&huge[12], &lie, 4);  // payload length
  ASSERT_EQ(::write(fd, huge.data(), huge.size()), ssize_t(huge.size()));
  EXPECT_TRUE(closed_by_server(fd));
  ::close(fd);

  // An argument length that runs past its frame.
  fd = raw_connect(server.port());
  ASSERT_EQ(::write(fd, hello.data(), hello.size()), ssize_t(hello.size()));
  std::string bad = w::encode(w::kSet, {"k", "v"});
  uint32_t arg_lie = 1000;
  std::memcpy(&bad[16], &arg_lie, 4);
  ASSERT_EQ(::write(fd, bad.data(), bad.size()), ssize_t(bad.size()));
  EXPECT_TRUE(closed_by_server(fd));
  ::close(fd);

  // A connection that says nothing does not block anyone.
  int silent = raw_connect(server.port());
  good.set("after", "2");
  EXPECT_EQ(good.get("before"), "1");
  EXPECT_EQ(good.get("after"), "2");
  EXPECT_FALSE(good.check({"k"}));  // nothing the garbage said was stored
  ::close(silent);
  EXPECT_GE(server.refused(), 1);
}

TEST(Store, DecodeRejectsMalformedFrames) {
  namespace w = qk::qccl::store_wire;
  w::Frame f;
  std::string ok = w::encode(w::kGet, {"key"});
  EXPECT_EQ(w::decode(ok, &f), ok.size());
  EXPECT_EQ(f.args, std::vector<std::string>{"key"});
  EXPECT_EQ(w::decode(ok.substr(0, ok.size() - 1), &f), 0u);  // incomplete: wait for more
  std::string bad_magic = ok;
  bad_magic[0] ^= 1;
  EXPECT_THROW(w::decode(bad_magic, &f), qk::ValueError);
  std::string many = ok;
  uint32_t n = 1u << 30;
  std::memcpy(&many[8], &n, 4);
  EXPECT_THROW(w::decode(many, &f), qk::ValueError);
}

// ---- communicators through the store ---------------------------------------

TEST(StoreInit, RanksInitFromStoreAndAllReduce) {
  StoreServer server(0, kToken);
  uint16_t port = server.port();
  auto r = qccl_test::run_ranks(3, [port](const qccl_test::Rank& me) {
    Store store("127.0.0.1", port, kToken, 20);
    auto comm = qk::qccl::init_from_store(store, me.nranks, me.rank,
                                          qk::qccl::CommOptions().timeout(20), "test");
    REQUIRE(comm->rank() == me.rank && comm->size() == 3, "rank ", comm->rank(), " size ", comm->size());
    std::vector<float> x(1000);
    for (size_t i = 0; i < x.size(); ++i) x[i] = float(me.rank + 1) * float(i);
    comm->all_reduce(x.data(), x.data(), x.size(), qcclFloat32, qcclSum);
    for (size_t i = 0; i < x.size(); ++i) REQUIRE(x[i] == 6.0f * float(i), "x[", i, "] = ", x[i]);
  });
  EXPECT_TRUE(r.ok()) << r.summary();
}

TEST(StoreInit, ARankThatNeverArrivesIsNamed) {
  StoreServer server(0, kToken);
  uint16_t port = server.port();
  // Three ranks expected, only 0 and 1 start.
  auto r = qccl_test::run_ranks(2, [port](const qccl_test::Rank& me) {
    Store store("127.0.0.1", port, kToken, 20);
    try {
      qk::qccl::init_from_store(store, 3, me.rank, qk::qccl::CommOptions().timeout(1), "missing");
    } catch (const qk::TimeoutError& e) {
      std::string m = e.what();
      REQUIRE(m.find("rank(s) 2 never arrived") != std::string::npos, m);
      return;
    }
    REQUIRE(false, "init_from_store succeeded without rank 2");
  });
  EXPECT_TRUE(r.ok()) << r.summary();
}

}  // namespace
