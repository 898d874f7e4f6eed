#include "transport/shared_mem.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <mutex>

#include "core/errors.h"
#include "qk/base/error.h"

namespace qccl {

namespace {

struct Region {
  size_t bytes;
  int fd;
  uint64_t id;
};

std::mutex g_mu;
std::map<uintptr_t, Region>& regions() {
  static auto* m = new std::map<uintptr_t, Region>;  // never destroyed: frees may run at exit
  return *m;
}
std::atomic<uint64_t> g_next_id{1};

constexpr size_t kMaxPeerMappings = 256;  // per communicator; the least recently used go first

std::string memfd_name(uint64_t id) { return shared_memfd_name(id); }

size_t page_round(size_t n) {
  size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  return (n + page - 1) / page * page;
}

}  // namespace

uint64_t new_shared_id() { return g_next_id.fetch_add(1); }
std::string shared_memfd_name(uint64_t id) { return "qccl-" + std::to_string(id); }

void* shared_alloc(size_t bytes) {
  QK_CHECK(bytes > 0, "qcclMemAlloc: size must be positive");
  size_t len = page_round(bytes);
  uint64_t id = new_shared_id();
  int fd = ::memfd_create(memfd_name(id).c_str(), MFD_CLOEXEC);
  if (fd < 0)
    QK_THROW(qk::IoError, "qcclMemAlloc: memfd_create failed: ", qk::detail::errno_string(errno));
  if (::ftruncate(fd, static_cast<off_t>(len)) != 0) {
    int err = errno;
    ::close(fd);
    QK_THROW(qk::IoError, "qcclMemAlloc: sizing ", len, " bytes failed: ", qk::detail::errno_string(err));
  }
  void* p = ::mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    int err = errno;
    ::close(fd);
    QK_THROW(qk::IoError, "qcclMemAlloc: mmap of ", len, " bytes failed: ", qk::detail::errno_string(err));
  }
  std::lock_guard<std::mutex> g(g_mu);
  regions()[reinterpret_cast<uintptr_t>(p)] = Region{len, fd, id};
  return p;
}

void shared_free(void* p) {
  Region r{};
  {
    std::lock_guard<std::mutex> g(g_mu);
    auto it = regions().find(reinterpret_cast<uintptr_t>(p));
    QK_CHECK(it != regions().end(), "qcclMemFree: ", p,
                " was not returned by qcclMemAlloc (or was freed already)");
    r = it->second;
    regions().erase(it);
  }
  ::munmap(p, r.bytes);
  ::close(r.fd);
}

std::optional<SharedRef> find_shared(const void* p, size_t n) {
  auto a = reinterpret_cast<uintptr_t>(p);
  std::lock_guard<std::mutex> g(g_mu);
  auto& m = regions();
  auto it = m.upper_bound(a);
  if (it == m.begin()) return std::nullopt;
  --it;
  if (a + n > it->first + it->second.bytes) return std::nullopt;
  SharedRef ref;
  ref.id = it->second.id;
  ref.fd = it->second.fd;
  ref.offset = a - it->first;
  ref.region_bytes = it->second.bytes;
  return ref;
}

PeerMappings::~PeerMappings() {
  for (auto& [key, m] : maps_) ::munmap(m.base, m.bytes);
}

char* PeerMappings::map(int peer_pid, const SharedRef& ref, const std::string& who, uint64_t peer_base) {
  auto key = std::make_pair(peer_pid, ref.id);
  auto it = maps_.find(key);
  if (it != maps_.end() && it->second.bytes == ref.region_bytes) {
    it->second.last_use = ++uses_;
    return it->second.base;
  }
  QK_CHECK_AS(RemoteError, ref.fd >= 0 && ref.region_bytes > 0 && ref.offset < ref.region_bytes, who,
              " described a shared buffer that cannot exist (fd ", ref.fd, ", offset ", ref.offset,
              " of ", ref.region_bytes, " bytes)");
  std::string path = "/proc/" + std::to_string(peer_pid) + "/fd/" + std::to_string(ref.fd);
  // The fd must still be that allocation: its memfd name carries the id.
  char link[256] = {0};
  ssize_t k = ::readlink(path.c_str(), link, sizeof link - 1);
  std::string want = "/memfd:" + memfd_name(ref.id);
  bool named = k > 0 && std::strncmp(link, want.c_str(), want.size()) == 0 &&
               (link[want.size()] == '\0' || link[want.size()] == ' ');
  QK_CHECK_AS(RemoteError, named, "the shared buffer of ", who, " is not at ", path, " (found '",
              std::string(link, k > 0 ? static_cast<size_t>(k) : 0), "'); was it freed during the call?");
  int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0)
    QCCL_REMOTE_ERROR("cannot open the shared buffer of ", who, " (", path,
                      "): ", qk::detail::errno_string(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || static_cast<uint64_t>(st.st_size) < ref.region_bytes) {
    ::close(fd);
    QCCL_REMOTE_ERROR("the shared buffer of ", who, " is smaller than the ", ref.region_bytes,
                      " bytes it described");
  }
  // Populated at once: the first direct call would otherwise fault in every page.
  void* p = ::mmap(nullptr, ref.region_bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  int err = errno;
  ::close(fd);
  if (p == MAP_FAILED)
    QK_THROW(qk::IoError, "mapping ", ref.region_bytes, " bytes of the shared buffer of ", who,
             " failed: ", qk::detail::errno_string(err));
  if (it != maps_.end()) {
    ::munmap(it->second.base, it->second.bytes);
    maps_.erase(it);
  }
  if (peer_base != 0) {
    for (auto j = maps_.begin(); j != maps_.end();) {
      const Mapping& m = j->second;
      bool overlaps = j->first.first == peer_pid && m.peer_base != 0 && m.peer_base < peer_base + ref.region_bytes &&
                      peer_base < m.peer_base + m.bytes;
      if (overlaps) {
        ::munmap(m.base, m.bytes);
        j = maps_.erase(j);
      } else {
        ++j;
      }
    }
  }
  if (maps_.size() >= kMaxPeerMappings) {
    auto lru = maps_.begin();
    for (auto j = maps_.begin(); j != maps_.end(); ++j)
      if (j->second.last_use < lru->second.last_use) lru = j;
    ::munmap(lru->second.base, lru->second.bytes);
    maps_.erase(lru);
  }
  maps_[key] = Mapping{static_cast<char*>(p), ref.region_bytes, ++uses_, peer_base};
  return static_cast<char*>(p);
}

namespace {
constexpr uint64_t kProbeMagic = 0x5143434d454d3031ull;  // "QCCMEM01"
}

SharedProbe::SharedProbe() {
  try {
    mem = shared_alloc(sizeof kProbeMagic);
    std::memcpy(mem, &kProbeMagic, sizeof kProbeMagic);
    ref = *find_shared(mem, sizeof kProbeMagic);
  } catch (const std::exception&) {
    mem = nullptr;  // no memfd here: direct access is off, nothing else changes
  }
}

SharedProbe::~SharedProbe() {
  if (mem) shared_free(mem);
}

bool can_map_peer(int peer_pid, const SharedRef& probe_ref) {
  if (probe_ref.fd < 0) return false;
  try {
    PeerMappings m;
    char* p = m.map(peer_pid, probe_ref, "the peer");
    uint64_t magic = 0;
    std::memcpy(&magic, p, sizeof magic);
    return magic == kProbeMagic;
  } catch (const std::exception&) {
    return false;
  }
}

}  // namespace qccl
