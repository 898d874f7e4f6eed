// Registration of plain buffers (src/qccl/transport/registry.h): the whole
// pages of a buffer seen twice move onto shared memory at the same address,
// contents kept; a freed range is never taken for its successor; file-backed
// and read-only memory never move; fork gives private pages back so the child
// shares nothing; and ranks whose plain buffers are registered all-reduce
// directly through them, exact.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "comm.h"
#include "data.h"
#include "ranks.h"
#include "algo/tuning.h"
#include "transport/registry.h"

namespace qccl {
namespace {

// Registrations are checked through /proc/self/map_files; where that cannot
// be read (some containers) qccl never registers, and these tests skip.
#define SKIP_WITHOUT_MAP_FILES() \
  if (measure_validate_ns() >= 1e12) GTEST_SKIP() << "/proc/self/map_files cannot be read here"

std::string backing(const void* lo, size_t len) {
  char path[96], link[256];
  std::snprintf(path, sizeof path, "/proc/self/map_files/%lx-%lx", reinterpret_cast<unsigned long>(lo),
                reinterpret_cast<unsigned long>(lo) + len);
  ssize_t k = ::readlink(path, link, sizeof link - 1);
  return k > 0 ? std::string(link, static_cast<size_t>(k)) : std::string();
}

TEST(Registry, SecondSightingMovesWholePagesAndKeepsTheContents) {
  SKIP_WITHOUT_MAP_FILES();
  unregister_all();
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  const size_t n = 64 * page + 123;
  std::vector<uint32_t> buf(n / 4 + 1);
  std::iota(buf.begin(), buf.end(), 11u);
  char* p = reinterpret_cast<char*>(buf.data()) + 8;  // not page aligned
  EXPECT_FALSE(registered(p, n, true).has_value()) << "registered at first sight";
  auto reg = registered(p, n, true);
  ASSERT_TRUE(reg.has_value());
  EXPECT_EQ(registration_count(), 1u);
  uintptr_t lo = (reinterpret_cast<uintptr_t>(p) + page - 1) / page * page;
  EXPECT_EQ(reg->head, lo - reinterpret_cast<uintptr_t>(p));
  EXPECT_EQ(reg->mapped % page, 0u);
  EXPECT_LE(reg->head + reg->mapped, n);
  EXPECT_GT(reg->head + reg->mapped + page, n);  // every whole page inside
  EXPECT_NE(backing(reinterpret_cast<void*>(lo), reg->mapped).find("/memfd:qccl-"), std::string::npos);
  for (size_t i = 0; i < buf.size(); ++i) ASSERT_EQ(buf[i], 11u + i) << "at " << i;
  buf[100] = 7;  // still ordinary memory to the program
  EXPECT_EQ(buf[100], 7u);
  auto again = registered(p, n, false);  // found, same memfd
  ASSERT_TRUE(again.has_value());
  EXPECT_EQ(again->ref.id, reg->ref.id);
  auto part = registered(p + page, 8 * page, false);  // a view inside it
  ASSERT_TRUE(part.has_value());
  EXPECT_EQ(part->ref.id, reg->ref.id);
  unregister_all();
  EXPECT_EQ(registration_count(), 0u);
  EXPECT_EQ(backing(reinterpret_cast<void*>(lo), reg->mapped), "") << "still shared after unregister_all";
  EXPECT_EQ(buf[100], 7u);
}

TEST(Registry, AFreedRangeIsNeverTakenForItsSuccessor) {
  SKIP_WITHOUT_MAP_FILES();
  unregister_all();
  const size_t len = 1 << 20;
  void* m = ::mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(m, MAP_FAILED);
  std::memset(m, 1, len);
  registered(m, len, true);
  ASSERT_TRUE(registered(m, len, true).has_value());
  ASSERT_EQ(::munmap(m, len), 0);
  void* again = ::mmap(m, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
  ASSERT_EQ(again, m);
  std::memset(again, 2, len);
  EXPECT_FALSE(registered(again, len, false).has_value()) << "the old registration was reused";
  EXPECT_EQ(registration_count(), 0u);
  EXPECT_EQ(static_cast<char*>(again)[len / 2], 2);
  ::munmap(again, len);
}

TEST(Registry, FileBackedAndReadOnlyMemoryNeverMoves) {
  unregister_all();
  const size_t len = 1 << 20;
  void* ro = ::mmap(nullptr, len, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(ro, MAP_FAILED);
  registered(ro, len, true);
  EXPECT_FALSE(registered(ro, len, true).has_value());
  ::munmap(ro, len);
  char tmpl[] = "/tmp/qccl_registry_XXXXXX";
  int fd = ::mkstemp(tmpl);
  ASSERT_GE(fd, 0);
  ::unlink(tmpl);
  ASSERT_EQ(::ftruncate(fd, len), 0);
  void* file = ::mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
  ASSERT_NE(file, MAP_FAILED);
  registered(file, len, true);
  EXPECT_FALSE(registered(file, len, true).has_value());
  ::munmap(file, len);
  ::close(fd);
  EXPECT_EQ(registration_count(), 0u);
}

TEST(Registry, ForkGivesPrivatePagesBack) {
  SKIP_WITHOUT_MAP_FILES();
  unregister_all();
  const size_t len = 1 << 20;
  std::vector<char> buf(len, 3);
  registered(buf.data(), len, true);
  ASSERT_TRUE(registered(buf.data(), len, true).has_value());
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    // The child sees the contents, and its writes stay its own.
    bool ok = buf[len / 2] == 3;
    std::memset(buf.data(), 9, len);
    ::_exit(ok ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_EQ(buf[len / 2], 3) << "the child's writes reached the parent";
  EXPECT_EQ(registration_count(), 0u);
}

}  // namespace
}  // namespace qccl

namespace qccl_test {
namespace {

// Ranks that all-reduce the same plain buffers again register them, and from
// then on go direct through the mapped pages (the bytes outside whole pages
// by single copy), exact, in and out of place.
TEST(DirectRegistered, ReusedPlainBuffersGoDirect) {
  auto r = run_ranks(3, [](const Rank& me) {
    qcclComm_t comm = me.init();
    REQUIRE(comm->cost.cma_everywhere, "single copy not measured on every pair");
    if (comm->tuning.validate_ns >= 1e12) return;  // registrations cannot be checked here: never made
    comm->cost.llc_bytes = size_t(1) << 40;  // keep the single-copy rule out of the way
    // The size below, whatever a check or a message round costs here (under
    // load, with more ranks than CPUs, the measured ring step can make it
    // look too dear).
    comm->tuning.register_min_bytes = 64 << 10;
    comm->tuning.direct_min_bytes = 64 << 10;
    for (bool in_place : {false, true}) {
      const size_t count = 200003;
      std::vector<char> src(count * 4 + 8), out(count * 4 + 8);
      auto in = make_input(me.rank, count, qcclSum, qcclFloat32);
      auto want = reference(me.nranks, count, qcclSum, qcclFloat32);
      char* s = src.data() + 4;
      char* d = in_place ? s : out.data() + 4;
      uint64_t before = comm->direct_calls;
      for (int call = 0; call < 3; ++call) {
        std::memcpy(s, in.data(), count * 4);
        REQUIRE_OK(qcclAllReduce(s, d, count, qcclFloat32, qcclSum, comm, nullptr));
        std::string df = diff(d, want.data(), count, qcclFloat32);
        REQUIRE(df.empty(), in_place ? "in place" : "out of place", " call ", call, ": ", df);
      }
      // First sight: nothing registered (unless the buffers landed in pages
      // an earlier registration still holds); then both buffers on every rank.
      REQUIRE(comm->direct_calls >= before + 2, in_place ? "in place" : "out of place", ": ",
              comm->direct_calls - before, " of 3 calls went direct");
    }
    REQUIRE(qccl::registration_count() > 0, "nothing registered");
    REQUIRE_OK(qcclCommDestroy(comm));
  });
  EXPECT_TRUE(r.ok()) << r.summary();
}

}  // namespace
}  // namespace qccl_test
