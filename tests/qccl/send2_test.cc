// Conn::try_send2 (a message's header and data handed over together) keeps
// the byte stream exact: across the shared-memory ring's wrap point, when the
// ring is too full for both (the fallback takes part), and on TCP, with two
// stripes and several sockets, checked against a byte counter.
#include <gtest/gtest.h>

#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "core/errors.h"
#include "transport/shm.h"
#include "transport/tcp.h"

namespace qccl {
namespace {

std::pair<Fd, Fd> socket_pair() {
  int sv[2];
  EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  return {Fd(sv[0]), Fd(sv[1])};
}

// Byte `pos` of a test stream: not periodic in a ring's size, so stale ring
// bytes do not pass.
unsigned char stream_byte(uint64_t pos) { return static_cast<unsigned char>((pos * 2654435761u) >> 13); }

// Sends `msgs` (header of 16 bytes, then data sizes) through try_send2 from
// `tx`, receiving on `rx` as it goes; every byte is a hash of its index in the stream.
void exchange(Conn& tx, Conn& rx, const std::vector<size_t>& msgs) {
  uint64_t sent_pos = 0, recv_pos = 0, total = 0;
  for (size_t m : msgs) total += 16 + m;
  const auto byte = stream_byte;
  auto fill = [&](std::vector<unsigned char>& b, uint64_t pos) {
    for (size_t i = 0; i < b.size(); ++i) b[i] = byte(pos + i);
  };
  std::vector<unsigned char> buf(256 << 10);
  auto drain = [&] {
    size_t k = rx.try_recv(buf.data(), buf.size());
    for (size_t i = 0; i < k; ++i)
      ASSERT_EQ(buf[i], byte(recv_pos + i)) << "stream byte " << recv_pos + i;
    recv_pos += k;
  };
  for (size_t j = 0; j < msgs.size(); ++j) {
    size_t m = msgs[j];
    // Mostly the receiver keeps up (both parts go in at once, some across
    // the wrap point); every third message finds what the last ones left.
    if (j % 3 != 0) drain();
    if (::testing::Test::HasFatalFailure()) return;
    std::vector<unsigned char> hdr(16), data(m);
    fill(hdr, sent_pos);
    fill(data, sent_pos + 16);
    size_t done = tx.try_send2(hdr.data(), 16, data.data(), m);
    // What try_send2 left is sent the way the engine does: header, then data.
    while (done < 16 + m) {
      drain();
      if (::testing::Test::HasFatalFailure()) return;
      if (done < 16) done += tx.try_send(hdr.data() + done, 16 - done);
      else done += tx.try_send(data.data() + (done - 16), m - (done - 16));
    }
    sent_pos += 16 + m;
  }
  while (recv_pos < total && !::testing::Test::HasFatalFailure()) drain();
  EXPECT_EQ(recv_pos, total);
}

// Two ends of a shared-memory connection in this process, rings of `ring_bytes`.
std::pair<std::unique_ptr<Conn>, std::unique_ptr<Conn>> shm_pair(const char* ring_bytes) {
  ::setenv("QCCL_SHM_RING_BYTES", ring_bytes, 1);
  auto [a, b] = socket_pair();
  Deadline dl(30);
  std::unique_ptr<Conn> c1;
  std::thread t([&, fd = b.release()] { c1 = make_shm_conn(1, 0, "rank 0", Fd(fd), ::getpid(), false, dl); });
  std::unique_ptr<Conn> c0 = make_shm_conn(0, 1, "rank 1", std::move(a), ::getpid(), false, dl);
  t.join();
  ::unsetenv("QCCL_SHM_RING_BYTES");
  return {std::move(c0), std::move(c1)};
}

TEST(Send2, SharedMemoryAcrossTheWrapPointAndWhenFull) {
  auto [c0, c1] = shm_pair("4096");
  // Odd sizes walk the head round the 4096-byte ring; 3000 and 5000 do not
  // fit beside the previous message or at all, so the fallback splits them.
  std::vector<size_t> msgs = {0, 1, 7, 100, 1000, 3000, 4080, 13, 5000, 2048, 0, 4000};
  for (int i = 0; i < 20; ++i) msgs.push_back(37 * i + 1);
  exchange(*c0, *c1, msgs);
  exchange(*c1, *c0, msgs);
}

// Small messages go in a mailbox beside the ring (64 lines; a message's tag
// in its first line): with nothing read, 64 one-line messages fit and then a
// whole 4096-byte ring more, which the ring alone could not take; the
// receiver gets the stream in order, mailbox first, then the ring; messages
// of 1 to 8 lines wrap round the mailbox (skips) mixed with ring messages.
TEST(Send2, SharedMemoryMailboxTakesSmallMessagesInOrderWithTheRing) {
  auto [c0, c1] = shm_pair("4096");
  uint64_t pos = 0;
  const auto byte = stream_byte;
  auto send = [&](size_t na, size_t nb) {
    std::vector<unsigned char> a(na), b(nb);
    for (size_t i = 0; i < na; ++i) a[i] = byte(pos + i);
    for (size_t i = 0; i < nb; ++i) b[i] = byte(pos + na + i);
    size_t k = c0->try_send2(a.data(), na, b.data(), nb);
    pos += k;
    return k;
  };
  for (size_t i = 0; i < kShmBoxLines; ++i) ASSERT_EQ(send(16, 40), 56u) << "one-line message " << i;
  size_t in_ring = 0;
  while (in_ring < 4096) {
    size_t k = send(16, 48);  // the mailbox is full: into the ring
    if (k == 0) break;
    in_ring += k;
  }
  EXPECT_EQ(in_ring, 4096u - 4096u % 64) << "the ring took what fits of 64-byte messages";
  EXPECT_EQ(send(16, 8), 0u) << "mailbox and ring full";
  // Reads what is there, checking every byte; returns how many.
  std::vector<unsigned char> buf(kShmBoxLines * kShmLine + 4096);
  uint64_t read = 0;
  auto receive = [&] {
    size_t r = c1->try_recv(buf.data(), buf.size());
    for (size_t j = 0; j < r; ++j)
      if (buf[j] != byte(read + j)) {
        ADD_FAILURE() << "stream byte " << read + j;
        return size_t(0);
      }
    read += r;
    return r;
  };
  auto receive_all = [&] {
    while (read < pos && !::testing::Test::HasFailure())
      if (receive() == 0) ADD_FAILURE() << "stream stalled at " << read << " of " << pos;
  };
  receive_all();
  // Mailbox-sized messages of 1-8 lines and ring ones, read a few behind;
  // what try_send2 leaves goes as the engine sends it, reading to make room.
  for (int i = 0; i < 400 && !::testing::Test::HasFailure(); ++i) {
    const size_t nb = i % 5 == 4 ? 700 : (i * 37) % 489;
    const uint64_t end = pos + 16 + nb;
    send(16, nb);
    while (pos < end && !::testing::Test::HasFailure()) {
      receive();
      std::vector<unsigned char> rest(end - pos);
      for (size_t j = 0; j < rest.size(); ++j) rest[j] = byte(pos + j);
      pos += c0->try_send(rest.data(), rest.size());
    }
    if (i % 4 == 3) receive();
  }
  receive_all();
}

// A message's later lines hold data where a later lap's messages start:
// data that reads as the tag the receiver will wait for there must not pass
// for a message (the receiver zeroes those words once done).
TEST(Send2, SharedMemoryMailboxDataNeverPassesForATag) {
  auto [c0, c1] = shm_pair("4096");
  std::vector<unsigned char> buf(1024);
  auto deliver = [&](std::vector<unsigned char> content) {
    ASSERT_EQ(c0->try_send2(content.data(), 16, content.data() + 16, content.size() - 16), content.size());
    ASSERT_EQ(c1->try_recv(buf.data(), buf.size()), content.size());
  };
  // Message 0 fills lines 0-7 (a largest message); its line 1 begins at
  // content byte kShmLine - 8 and carries the tag of message `later`: after
  // one-line messages on lines 8 to the end and one at line 0 of the next
  // lap, the receiver looks for message `later` at line 1.
  const size_t big_lines = (8 + kShmBoxMaxBytes) / kShmLine;
  const uint64_t later = 1 + (kShmBoxLines - big_lines) + 1;
  std::vector<unsigned char> first(kShmBoxMaxBytes, 0x5a);
  const uint64_t fake = shm_box_tag(later, 8);
  std::memcpy(first.data() + kShmLine - 8, &fake, sizeof fake);
  deliver(first);
  for (uint64_t i = 1; i < later; ++i) deliver(std::vector<unsigned char>(24, static_cast<unsigned char>(i)));
  EXPECT_EQ(c1->try_recv(buf.data(), buf.size()), 0u) << "old data taken for message " << later;
  deliver(std::vector<unsigned char>(24, 0x77));  // the real message `later` arrives
  EXPECT_EQ(c1->try_recv(buf.data(), buf.size()), 0u);
}

TEST(Send2, TcpAcrossStripesAndSockets) {
  std::vector<Fd> fa, fb;
  for (int i = 0; i < 2; ++i) {
    auto [a, b] = socket_pair();
    fa.push_back(std::move(a));
    fb.push_back(std::move(b));
  }
  std::unique_ptr<Conn> c0 = make_tcp_conn(1, "rank 1", std::move(fa));
  std::unique_ptr<Conn> c1 = make_tcp_conn(0, "rank 0", std::move(fb));
  // 3 x 40000 + headers lands a header+data pair across the first 128 KiB
  // stripe's end (the fallback), the rest within stripes (one sendmsg).
  std::vector<size_t> msgs = {8, 40000, 40000, 40000, 8, 100000, 5, 0, 131072, 7};
  exchange(*c0, *c1, msgs);
}

}  // namespace
}  // namespace qccl
